package mediajobs

import (
	"encoding/json"
	"strings"
	"unicode/utf8"
)

// A job is one etcd value (JSON), written in one transaction with a few small index
// keys, and etcd refuses a request over --max-request-bytes (1.5 MiB by default).
// So every field of a job is bounded, whoever fills it, and the largest record all
// bounds allow stays within JobRecordBudget, two thirds of that limit (the rest is
// the transaction's other keys and room to spare). TestLargestJobFitsEtcd builds
// that record and stores it on a real etcd; raising a bound here breaks it unless
// the record still fits.
//
// Lengths are counted as stored (StoredLen): a string's JSON encoding without its
// quotes, so that what encoding/json escapes (&, <, > and control characters take
// 6 bytes, " and \ take 2) counts for what it costs in etcd.
//
// How the largest record adds up, every setting at its ceiling (bytes as encoded,
// measured by the test):
//
//	input_files       CeilMaxInputs 50 × (128 name + MaxURLBytes 4,096 + 6)     211,501
//	output_names      CeilMaxOutputs 100 × (131 name + 3)                         13,401
//	ffmpeg_commands   CeilMaxCommandBytes 98,304 + CeilMaxCommands 1,000 × 3     101,305
//	                  (an input naming another job's output, job:<id>/<output>,
//	                  takes ≈ 600 bytes with its input_keys and awaits entries:
//	                  less than a URL input)
//	webhook_url       MaxURLBytes                                                  4,098
//	metadata          MaxMetadataBytes 4,096 + MaxMetadataKeys 32 × 6              4,289
//	error_message     MaxErrorBytes                                                4,097
//	status_detail, placement_reason, webhook (last_error): 2 × MaxDetailBytes
//	                  + MaxDetailBytes and the webhook's other fields              6,344
//	outputs           CeilMaxOutputFiles 1,000 × ≈ 437: MaxOutputNameBytes 147
//	                  twice (name, and key after its 107-byte prefix
//	                  jobs/<job>/<attempt>/<allocation>/outputs/), size, commas ≈ 437,000
//	probe data        MaxProbeBytes, all outputs together, + their keys         ≈ 209,000
//	log_commands      CeilMaxCommands 1,000 × ≤ 5, and logs_prefix               ≈   4,000
//	analysis          MaxAnalysisBytes, all blocks together                        16,384
//	deliveries        MaxDestinations 20 × ≈ 450: MaxShownURLBytes 256 (as
//	                  stored), sha256 64, status 16, the rest                    ≈   9,000
//	the rest          ids, times, counters, progress, pipeline step              ≈   1,700
//	total                                                                     ≈ 1,021,500
//
// that is 97.4% of JobRecordBudget (1,048,576) and 65% of etcd's limit.
// The destinations' URLs themselves are not in the record: they are under a
// key of their own (store.Destinations), within MaxDestinationsBytes. The output key
// assumes an allocation directory of 36 bytes (a Nomad allocation ID). An output
// name may hold a directory (stream_%v/playlist.m3u8): the name as a whole keeps
// the bound of MaxOutputNameBytes, so outputs take no more.
const (
	// EtcdRequestLimit is etcd's default --max-request-bytes.
	EtcdRequestLimit = 1572864
	// JobRecordBudget is the most a stored job may take: two thirds of the limit.
	JobRecordBudget = EtcdRequestLimit * 2 / 3

	// MaxURLBytes bounds each input URL and the webhook URL. Presigned links are the
	// long ones: an S3 link signed with temporary (STS) credentials carries a
	// session token of up to about 1,500 characters and is commonly 1,500–2,500
	// bytes in all; GCS and Azure signed links are shorter. 4 KiB holds them with
	// room, and is what many proxies and CDNs accept in a request line anyway.
	MaxURLBytes = 4096
	// MaxMetadataKeys and MaxMetadataBytes bound a job's metadata: its keys, and its
	// keys and values together.
	MaxMetadataKeys  = 32
	MaxMetadataBytes = 4096

	// Defaults and ceilings of the server settings that size a job (config: server
	// max_command_bytes, max_commands, max_inputs, max_outputs, max_output_files).
	// The ceilings are what the record budget above is computed with.
	DefaultMaxCommandBytes = 64 << 10
	CeilMaxCommandBytes    = 96 << 10
	DefaultMaxCommands     = 20
	CeilMaxCommands        = 1000
	DefaultMaxInputs       = 50
	CeilMaxInputs          = 50
	DefaultMaxOutputs      = 50
	CeilMaxOutputs         = 100
	DefaultMaxOutputFiles  = 1000
	CeilMaxOutputFiles     = 1000

	// MaxErrorBytes bounds a job's error_message (a runner's, with ffmpeg's last
	// lines, or the dispatcher's).
	MaxErrorBytes = 4096
	// MaxDetailBytes bounds the other texts the dispatcher stores, which may quote
	// Nomad or an HTTP client: status_detail, placement_reason, webhook.last_error.
	MaxDetailBytes = 2048
	// MaxOutputNameBytes bounds a reported output file name, directory included:
	// an output name has at most 127 characters besides its counter
	// (ValidOutputName), and a counter expands to at most 20 digits (a 64-bit
	// number). A produced name longer than that (a long %v variant name) is
	// refused.
	MaxOutputNameBytes = 127 + 20
	// MaxAnalysisBytes bounds the JSON blocks of analysis filters (Analysis) of all
	// of a job's commands together, as encoded: a loudnorm block takes about 400
	// bytes, so some 40 fit. Blocks past it are left out (the logs keep them).
	MaxAnalysisBytes = 16 << 10
	// MaxAnalysisNameBytes bounds an Analysis's filter and instance names.
	MaxAnalysisNameBytes = 64
	// MaxProbeStreams is how many streams of one output are stored; MaxProbeFormatBytes
	// and MaxProbeNameBytes bound the format and a stream's type and codec (ffprobe's
	// names are short: "mov,mp4,m4a,3gp,3g2,mj2", "hdmv_pgs_subtitle").
	MaxProbeStreams     = 8
	MaxProbeFormatBytes = 64
	MaxProbeNameBytes   = 32
	// MaxProbeBytes bounds the probe data of all of a job's outputs together (an HLS
	// segment with a video and an audio stream takes about 190 bytes, so 1,000 of
	// them fit). Outputs past it are stored without probe.
	MaxProbeBytes = 192 << 10
)

// ClipMark ends a clipped text.
const ClipMark = "… (truncated)"

// StoredLen is how many bytes s takes in a stored job: the length of its JSON
// encoding (encoding/json's, HTML escaping included) without the quotes.
func StoredLen(s string) int {
	n := 0
	for i := 0; i < len(s); {
		c, size := runeCost(s[i:])
		n += c
		i += size
	}
	return n
}

// runeCost is the encoded size of the first rune of s (an invalid byte is a rune of
// its own, encoded \ufffd) and how many bytes of s it is.
func runeCost(s string) (cost, size int) {
	b := s[0]
	if b < utf8.RuneSelf {
		switch {
		case b == '"' || b == '\\' || b == '\b' || b == '\f' || b == '\n' || b == '\r' || b == '\t':
			return 2, 1
		case b < 0x20 || b == '<' || b == '>' || b == '&':
			return 6, 1
		}
		return 1, 1
	}
	r, size := utf8.DecodeRuneInString(s)
	if r == utf8.RuneError && size == 1 || r == '\u2028' || r == '\u2029' {
		return 6, size
	}
	return size, size
}

// Clip returns s if it takes at most n stored bytes (StoredLen), else its longest
// prefix that, with ClipMark after it, does; it cuts between runes, never inside one.
func Clip(s string, n int) string {
	if StoredLen(s) <= n {
		return s
	}
	mark := ClipMark
	if m := StoredLen(mark); m > n {
		mark = ""
	} else {
		n -= m
	}
	return cut(s, n) + mark
}

// cut is the longest prefix of s that takes at most n stored bytes.
func cut(s string, n int) string {
	used := 0
	for i := 0; i < len(s); {
		c, size := runeCost(s[i:])
		if used+c > n {
			return s[:i]
		}
		used += c
		i += size
	}
	return s
}

// BoundResult returns r with what a runner wrote bounded for the job record: the
// error message clipped to MaxErrorBytes, each output's probe to MaxProbeStreams
// streams with short names, the probes of all outputs to MaxProbeBytes (the
// outputs past it keep no probe), and the analysis blocks to MaxAnalysisBytes
// (BoundAnalysis). Output names are left as they are, for
// CheckOutputs to judge. r is not changed; nil stays nil.
func BoundResult(r *Result) *Result {
	if r == nil {
		return nil
	}
	b := *r
	b.ErrorMessage = Clip(r.ErrorMessage, MaxErrorBytes)
	if r.Outputs != nil {
		b.Outputs = make([]Output, len(r.Outputs))
	}
	probes := 0
	for i, o := range r.Outputs {
		if o.Probe != nil {
			p := boundProbe(o.Probe)
			enc, err := json.Marshal(p)
			if err == nil && probes+len(enc) <= MaxProbeBytes {
				probes += len(enc)
				o.Probe = p
			} else {
				o.Probe = nil
			}
		}
		b.Outputs[i] = o
	}
	boundDeliveries(b.Outputs)
	b.Analysis = BoundAnalysis(r.Analysis)
	return &b
}

// BoundAnalysis keeps the blocks of as, in order, that are JSON objects and fit
// in MaxAnalysisBytes together (as encoded), their names cut to
// MaxAnalysisNameBytes. as is not changed.
func BoundAnalysis(as []Analysis) []Analysis {
	var out []Analysis
	used := 0
	for _, a := range as {
		a.Filter, a.Instance = cut(a.Filter, MaxAnalysisNameBytes), cut(a.Instance, MaxAnalysisNameBytes)
		data := strings.TrimSpace(string(a.Data))
		if !strings.HasPrefix(data, "{") {
			continue
		}
		enc, err := json.Marshal(a)
		if err != nil || used+len(enc)+1 > MaxAnalysisBytes {
			continue
		}
		used += len(enc) + 1 // and its comma
		out = append(out, a)
	}
	return out
}

func boundProbe(p *Probe) *Probe {
	q := *p
	q.Format = cut(p.Format, MaxProbeFormatBytes)
	streams := p.Streams
	if len(streams) > MaxProbeStreams {
		streams = streams[:MaxProbeStreams]
	}
	q.Streams = nil
	if streams != nil {
		q.Streams = make([]Stream, len(streams))
	}
	for i, s := range streams {
		s.Type, s.Codec = cut(s.Type, MaxProbeNameBytes), cut(s.Codec, MaxProbeNameBytes)
		q.Streams[i] = s
	}
	return &q
}

// BoundJob clips the texts the dispatcher and the gateway write on a job (they may
// quote Nomad, an HTTP client or a runner) to their bounds. The store applies it
// to every write, so no writer can forget it.
func BoundJob(j *Job) {
	j.ErrorMessage = Clip(j.ErrorMessage, MaxErrorBytes)
	j.StatusDetail = Clip(j.StatusDetail, MaxDetailBytes)
	j.PlacementReason = Clip(j.PlacementReason, MaxDetailBytes)
	if j.Webhook != nil {
		j.Webhook.LastError = Clip(j.Webhook.LastError, MaxDetailBytes)
	}
}
