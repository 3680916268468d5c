package chunked

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"
)

// Report is how the stitched file was checked, and whether it passed: the
// job view's "verification". Every check that fails adds a line to Failures.
type Report struct {
	Pass     bool     `json:"pass"`
	Failures []string `json:"failures,omitempty"`
	// Frames: as planned (the source's frames), as stitched (packets) and as
	// decoded.
	ExpectedFrames int          `json:"expected_frames"`
	Packets        int          `json:"packets"`
	DecodedFrames  int          `json:"decoded_frames"`
	Chunks         []ChunkCheck `json:"chunks"`
	Timestamps     TSCheck      `json:"timestamps"`
	Duration       EndCheck     `json:"duration"`
	// AV compares where the audio ends against the video, in the stitched
	// file and in the source; absent when the output has no audio.
	AV     *EndCheck   `json:"av,omitempty"`
	Decode DecodeCheck `json:"decode"`
	// Quality, when the job asked for it: the stitched file and a
	// single-pass encode against the source (MeasureQuality). Informative:
	// it plays no part in Pass.
	Quality *Quality `json:"quality,omitempty"`
}

// ChunkCheck is one chunk: its frames decoded alone, their hashes against the
// stitched file's at the same place, and the seam at its start.
type ChunkCheck struct {
	Index          int     `json:"index"`
	Start          float64 `json:"start"`
	End            float64 `json:"end"`
	ExpectedFrames int     `json:"expected_frames"`
	DecodedFrames  int     `json:"decoded_frames"`
	// HashesMatch: the chunk decoded alone gives, frame by frame, the pictures
	// the stitched file gives at its place (with Decode.Mode "seams", where
	// they were decoded across a seam; PacketsMatch holds for the rest).
	HashesMatch bool `json:"hashes_match"`
	// PacketsMatch: the stitched file holds the chunk's coded pictures
	// unchanged, in order (packet by packet, under the container's framing:
	// PacketFilter). False when they could not be compared.
	PacketsMatch bool `json:"packets_match"`
	// Seam is the join before the chunk (none before the first).
	Seam *SeamCheck `json:"seam,omitempty"`
}

// SeamCheck is one join: its first frame a keyframe that nothing after it in
// decode order is shown before (closed), and the step from the frame before
// equal to the source's (Gap: stitched step minus source step, seconds).
type SeamCheck struct {
	Time     float64 `json:"time"`
	Keyframe bool    `json:"keyframe"`
	Closed   bool    `json:"closed"`
	Gap      float64 `json:"gap"`
}

// TSCheck: decode timestamps increase, and every frame is shown when the
// source shows it (relative to the first frame).
type TSCheck struct {
	Monotonic     bool   `json:"monotonic"`
	MatchSource   bool   `json:"match_source"`
	FirstMismatch string `json:"first_mismatch,omitempty"`
}

// EndCheck compares two lengths (seconds) within Tolerance (one frame).
type EndCheck struct {
	Source    float64 `json:"source"`
	Output    float64 `json:"output"`
	Tolerance float64 `json:"tolerance"`
	OK        bool    `json:"ok"`
}

// DecodeCheck is how the stitched file was decoded (ffmpeg -xerror), and
// whether cleanly. Mode "seams": its coded pictures are the chunks' byte for
// byte (ChunkCheck.PacketsMatch), which their encode jobs decoded cleanly
// alone, so only the frames around each seam were decoded again, across the
// seam: from the last closed keyframe before it to DecodeWindow frames past
// it. Mode "full": the whole file, because its packets could not be shown
// to be the chunks' (FullReason).
type DecodeCheck struct {
	Clean      bool   `json:"clean"`
	Mode       string `json:"mode"`
	FullReason string `json:"full_reason,omitempty"`
	// Frames is how many of the stitched file's frames were decoded.
	Frames int    `json:"frames"`
	Errors string `json:"errors,omitempty"`
}

// The modes of DecodeCheck.
const (
	DecodeSeams = "seams"
	DecodeFull  = "full"
)

// DecodeWindow is how many frames past each seam the stitched file is decoded
// across it (Mode "seams"): twice the most reference pictures H.264 and HEVC
// keep (16), so that every picture the seam's keyframe could have left to
// the decoder from before it has been shown and replaced.
const DecodeWindow = 32

func (r *Report) fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// Verify checks stitched, the file StitchArgs made from the encoded chunks,
// against the plan and the source; hashes[i] is what chunk i's encode job
// found decoding its EncodeArgs output alone (HashChunk), so that the
// stitch decodes the stitched file only where that could differ: across its
// seams (DecodeCheck; docs/chunked.md#reading-the-verification-report). An
// error is returned only when a tool could not run at all; a wrong file is a
// Report that does not pass.
func Verify(ctx context.Context, ffmpeg, ffprobe string, src *Source, chunks []Chunk, hashes []*ChunkHashes, stitched string) (*Report, error) {
	r := &Report{Timestamps: TSCheck{Monotonic: true, MatchSource: true}}
	for _, c := range chunks {
		r.ExpectedFrames += c.Frames
	}
	if r.ExpectedFrames != len(src.Frames) {
		r.fail("the plan's chunks hold %d frames, the source %d", r.ExpectedFrames, len(src.Frames))
	}
	// One ffprobe pass reads the streams and every packet (demuxing only):
	// the decode below is the only other reading of the file.
	out, packets, err := probeStitched(ctx, ffprobe, stitched)
	if err != nil {
		return nil, err
	}
	vi, ai := -1, -1
	var vtb [2]int64
	var audio probeStream
	for _, st := range out.Streams {
		switch {
		case st.CodecType == "video" && vi < 0:
			vi, vtb = st.Index, parseTB(st.TimeBase)
		case st.CodecType == "audio" && ai < 0:
			ai, audio = st.Index, st
		}
	}
	if vi < 0 || vtb[0] <= 0 || vtb[1] <= 0 {
		r.fail("the stitched file has no video stream")
		return r.done(), nil
	}
	sec := func(pts int64) float64 { return float64(pts) * float64(vtb[0]) / float64(vtb[1]) }
	pkts, lastDur := packets[vi].pkts, packets[vi].lastDur
	r.Packets = len(pkts)
	if r.Packets != r.ExpectedFrames {
		r.fail("the stitched video has %d frames, the plan %d", r.Packets, r.ExpectedFrames)
	}

	// Timestamps: decode order increasing; presentation times the source's.
	frames := make([]int64, 0, len(pkts))
	decodeAt := map[int64]int{} // PTS → decode index
	last := NoDTS
	for i, p := range pkts {
		if p.PTS == NoDTS {
			r.Timestamps.Monotonic = false
			r.fail("stitched packet %d has no presentation timestamp", i)
			return r.done(), nil
		}
		if p.DTS != NoDTS {
			if last != NoDTS && p.DTS <= last && r.Timestamps.Monotonic {
				r.Timestamps.Monotonic = false
				r.fail("stitched decode timestamps do not increase at packet %d (%.6f s after %.6f s)", i, sec(p.DTS), sec(last))
			}
			last = p.DTS
		}
		if _, dup := decodeAt[p.PTS]; dup {
			r.Timestamps.Monotonic = false
			r.fail("two stitched frames are shown at %.6f s", sec(p.PTS))
		}
		decodeAt[p.PTS] = i
		frames = append(frames, p.PTS)
	}
	sort.Slice(frames, func(i, j int) bool { return frames[i] < frames[j] })
	if len(frames) == 0 {
		r.fail("the stitched video has no frames")
		return r.done(), nil
	}
	// One tick of either time base: what converting between them may round.
	tol := sec(1) + src.Seconds(1) + 1e-9
	for i := 0; i < len(frames) && i < len(src.Frames); i++ {
		o := sec(frames[i]) - sec(frames[0])
		s := src.Seconds(src.Frames[i]) - src.Seconds(src.Frames[0])
		if math.Abs(o-s) > tol {
			r.Timestamps.MatchSource = false
			r.Timestamps.FirstMismatch = fmt.Sprintf("frame %d is shown at %.6f s, the source's at %.6f s (from the first frame)", i, o, s)
			r.fail("timestamps differ from the source's: %s", r.Timestamps.FirstMismatch)
			break
		}
	}
	if lastDur <= 0 && len(frames) > 1 {
		lastDur = frames[len(frames)-1] - frames[len(frames)-2]
	}
	outStart, outEnd := sec(frames[0]), sec(frames[len(frames)-1]+lastDur)
	r.Duration = EndCheck{Source: src.End - src.Start, Output: outEnd - outStart, Tolerance: src.FrameDuration}
	r.Duration.OK = math.Abs(r.Duration.Output-r.Duration.Source) <= r.Duration.Tolerance+1e-6
	if !r.Duration.OK {
		r.fail("the stitched video lasts %.6f s, the source's %.6f s: more than one frame apart", r.Duration.Output, r.Duration.Source)
	}

	// Audio against video: where the audio ends after the video's end, in the
	// stitched file and in the source (audio longer or shorter than the video
	// stays so).
	if ai >= 0 {
		_, aEnd, err := packetSpan(stitched, audio, packets[ai].pkts, packets[ai].lastDur)
		if err != nil {
			return nil, err
		}
		r.AV = &EndCheck{Tolerance: src.FrameDuration, Output: aEnd - outEnd}
		if src.HasAudio {
			r.AV.Source = src.AudioEnd - src.End
		}
		r.AV.OK = math.Abs(r.AV.Output-r.AV.Source) <= r.AV.Tolerance+1e-6
		if !r.AV.OK {
			r.fail("the audio ends %.6f s after the video, in the source %.6f s: more than one frame apart", r.AV.Output, r.AV.Source)
		}
	}

	// The decode: across the seams when the packets are the chunks', else
	// the whole file.
	dec := &decoder{ffmpeg: ffmpeg, path: stitched, audio: ai >= 0, pkts: pkts, frames: frames, hashes: hashes, tb: vtb}
	for _, c := range chunks {
		dec.planned = append(dec.planned, c.Frames)
	}
	if err := dec.run(ctx, out, vi); err != nil {
		return nil, err
	}
	r.Decode = dec.check
	r.DecodedFrames = dec.decodedFrames()
	if !r.Decode.Clean {
		r.fail("the stitched file does not decode cleanly: %s", firstLine(r.Decode.Errors, nil))
	}
	switch {
	case r.DecodedFrames == r.ExpectedFrames:
	case r.Decode.Mode == DecodeFull:
		r.fail("the stitched video decodes to %d frames, the plan %d", r.DecodedFrames, r.ExpectedFrames)
	default: // its packets are the chunks', which decode to these
		r.fail("the stitched video's chunks decode to %d frames, the plan %d", r.DecodedFrames, r.ExpectedFrames)
	}

	// Each chunk alone, and each seam.
	at := 0
	for i, c := range chunks {
		cc := ChunkCheck{Index: c.Index, Start: c.Start, End: c.End, ExpectedFrames: c.Frames}
		switch ch := chunkHashes(hashes, i); {
		case ch == nil:
			r.fail("chunk %d has no frame hashes from its encode to check", c.Index)
		case ch.Hash != FrameHash:
			r.fail("chunk %d's frame hashes are %q, not %s", c.Index, ch.Hash, FrameHash)
		default:
			if ch.Errors != "" {
				r.fail("chunk %d does not decode cleanly on its own: %s", c.Index, firstLine(ch.Errors, nil))
			}
			cc.DecodedFrames = len(ch.Frames)
			if cc.DecodedFrames != c.Frames {
				r.fail("chunk %d decodes to %d frames, the plan %d", c.Index, cc.DecodedFrames, c.Frames)
			}
			cc.PacketsMatch = dec.packetsMatch(i)
			var bad string
			cc.HashesMatch, bad = dec.hashesMatch(i)
			if !cc.HashesMatch {
				r.fail("chunk %d decoded alone differs from the stitched file's %s", c.Index, bad)
			}
		}
		if i > 0 && at < len(frames) && at < len(src.Frames) {
			seam := &SeamCheck{Time: sec(frames[at]) - outStart}
			d := decodeAt[frames[at]]
			seam.Keyframe = pkts[d].Key
			seam.Closed = true
			for _, p := range pkts[d+1:] {
				if p.PTS < frames[at] {
					seam.Closed = false
					break
				}
			}
			seam.Gap = (sec(frames[at]) - sec(frames[at-1])) - (src.Seconds(src.Frames[at]) - src.Seconds(src.Frames[at-1]))
			if !seam.Keyframe || !seam.Closed {
				r.fail("the seam before chunk %d (%.6f s) is not a closed keyframe", c.Index, seam.Time)
			}
			if math.Abs(seam.Gap) > tol {
				r.fail("the seam before chunk %d (%.6f s) has a gap or overlap of %.6f s", c.Index, seam.Time, seam.Gap)
			}
			cc.Seam = seam
		}
		at += c.Frames
		r.Chunks = append(r.Chunks, cc)
	}
	return r.done(), nil
}

func (r *Report) done() *Report {
	r.Pass = len(r.Failures) == 0
	return r
}

// JSON is the report as the job view carries it.
func (r *Report) JSON() []byte {
	b, _ := json.Marshal(r)
	return b
}

// streamPackets are one stream's packets in file order, and the last one's
// duration (probePackets).
type streamPackets struct {
	pkts    []Packet
	lastDur int64
}

// probeStitched is probeStreams and probePackets of every stream in one
// ffprobe run, by stream index.
func probeStitched(ctx context.Context, ffprobe, path string) (*probeOut, map[int]*streamPackets, error) {
	out, err := run(ctx, ffprobe, "-v", "error", "-protocol_whitelist", "file", "-show_entries",
		"stream=index,codec_type,codec_name,time_base,start_time,duration,has_b_frames:format=format_name,start_time,duration:packet=stream_index,pts,dts,duration,flags",
		"-of", "json=c=1", path)
	if err != nil {
		return nil, nil, fmt.Errorf("probing %s: %w", path, err)
	}
	var p struct {
		probeOut
		Packets []struct {
			Stream   int    `json:"stream_index"`
			PTS      optInt `json:"pts"`
			DTS      optInt `json:"dts"`
			Duration optInt `json:"duration"`
			Flags    string `json:"flags"`
		} `json:"packets"`
	}
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, nil, fmt.Errorf("probing %s: %w", path, err)
	}
	byStream := map[int]*streamPackets{}
	for _, st := range p.Streams {
		byStream[st.Index] = &streamPackets{}
	}
	for _, k := range p.Packets {
		sp := byStream[k.Stream]
		if sp == nil {
			sp = &streamPackets{}
			byStream[k.Stream] = sp
		}
		pk := Packet{PTS: NoDTS, DTS: NoDTS, Key: strings.HasPrefix(k.Flags, "K"), Discard: strings.Contains(k.Flags, "D")}
		if k.PTS.ok {
			pk.PTS = k.PTS.v
		}
		if k.DTS.ok {
			pk.DTS = k.DTS.v
		}
		sp.pkts, sp.lastDur = append(sp.pkts, pk), k.Duration.v
	}
	return &p.probeOut, byStream, nil
}

// optInt is an integer ffprobe may leave out or write as "N/A" (unset).
type optInt struct {
	v  int64
	ok bool
}

func (o *optInt) UnmarshalJSON(b []byte) error {
	v, err := strconv.ParseInt(strings.Trim(string(b), `"`), 10, 64)
	*o = optInt{v, err == nil}
	return nil
}

func parseTB(s string) [2]int64 {
	num, den, _ := strings.Cut(s, "/")
	n, _ := strconv.ParseInt(num, 10, 64)
	d, _ := strconv.ParseInt(den, 10, 64)
	return [2]int64{n, d}
}

// FrameHash is the hash of each decoded frame (ffmpeg's framehash muxer):
// MurmurHash3's 128 bits. The check is against accidents (a frame missing,
// moved or decoded from other references), not forgery: the encode job that
// hashes its chunk writes the chunk too. 128 well-mixed bits make two
// different pictures hash alike with odds of about 2^-128, as MD5 did, at
// about a third of MD5's cost, which was half the cost of decoding a 720p
// H.264 frame (docs/benchmarks.md).
const FrameHash = "murmur3"

// ChunkHashes is an encoded chunk decoded alone, as its encode job writes it
// (mj.ChunkHashesFileName) for the stitch's verification: each frame's hash
// in presentation order, and what the decoder said (errors); and its
// packets' hashes in file order (under ChunkPacketFilter), which the
// stitched file's under PacketFilter must equal for the stitch to decode
// only across the seams.
type ChunkHashes struct {
	Hash         string   `json:"hash"`
	Frames       []string `json:"frames"`
	Errors       string   `json:"errors,omitempty"`
	PacketFilter string   `json:"packet_filter,omitempty"`
	Packets      []string `json:"packets,omitempty"`
}

// HashChunk decodes encoded (an EncodeArgs output, of codec: Command.Codec)
// alone, as the chunk's encode job does once it is encoded, and hashes its
// packets. A chunk that does not decode cleanly is not an error: the
// stitch's verification reports it, naming the chunk; nor are packets that
// cannot be hashed (Packets stays empty, and the stitch decodes the whole
// file). An error is a tool that could not run.
func HashChunk(ctx context.Context, ffmpeg, codec, encoded string) (*ChunkHashes, error) {
	h, errs, err := decodeHashes(ctx, ffmpeg, encoded, false)
	if err != nil && errs == "" {
		return nil, err
	}
	ch := &ChunkHashes{Hash: FrameHash, Frames: h, Errors: tail(errs, 2000)}
	filter := ChunkPacketFilter(codec)
	if p, errs, err := packetHashes(ctx, ffmpeg, encoded, filter, false); err == nil && errs == "" && len(p) > 0 {
		ch.PacketFilter, ch.Packets = filter, p
	}
	return ch, nil
}

func chunkHashes(hashes []*ChunkHashes, i int) *ChunkHashes {
	if i < len(hashes) {
		return hashes[i]
	}
	return nil
}

// decodeHashes decodes path's first video stream (and its audio, when audio is
// set: a full decode) and returns each video frame's hash (FrameHash) in
// presentation order, and what ffmpeg said at level error.
func decodeHashes(ctx context.Context, ffmpeg, path string, audio bool) ([]string, string, error) {
	args := []string{"-nostdin", "-v", "error", "-xerror", "-i", path, "-map", "0:v:0",
		"-fps_mode", "passthrough", "-f", "framehash", "-hash", FrameHash, "-"}
	if audio {
		args = append(args, "-map", "0:a", "-f", "null", "-")
	}
	lines, errs, err := framehash(ctx, ffmpeg, args)
	var hashes []string
	for _, l := range lines {
		hashes = append(hashes, l.hash)
	}
	return hashes, errs, err
}

func equal(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

func firstLine(s string, err error) string {
	if s == "" && err != nil {
		s = err.Error()
	}
	l, _, _ := strings.Cut(strings.TrimSpace(s), "\n")
	return l
}
