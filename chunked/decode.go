package chunked

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"strings"
)

// PacketFilter is the bitstream filter chain under which an encoded chunk's
// video packets (NUT, as the encoder wrote them) and the stitched file's (in
// the user's container) compare byte for byte: the containers frame H.264
// and HEVC differently (start codes against lengths, parameter sets in the
// header or before each keyframe, access unit delimiters) and MP4 drops
// AV1's temporal delimiters, so only the coded pictures are kept, in one
// framing. VP9 and the rest are compared as they are. Packets that still
// differ (an MPEG-TS output's H.264 is split otherwise) make Verify decode
// the whole file, so a chain that misses a case costs time, never a check.
func PacketFilter(codec string) string {
	switch codec {
	case "h264":
		return "h264_mp4toannexb,filter_units=pass_types=1-5"
	case "hevc":
		return "hevc_mp4toannexb,filter_units=pass_types=0-31"
	case "av1":
		return "filter_units=remove_types=2"
	}
	return ""
}

// packetHashes hashes path's first video stream's packets (FrameHash, in
// file order) under filter, without decoding; with audio, its audio is
// decoded too (a full decode's other half). errs is what ffmpeg said.
func packetHashes(ctx context.Context, ffmpeg, path, filter string, audio bool) (hashes []string, errs string, err error) {
	args := []string{"-nostdin", "-v", "error", "-xerror", "-i", path, "-map", "0:v:0", "-c", "copy"}
	if filter != "" {
		args = append(args, "-bsf:v", filter)
	}
	args = append(args, "-f", "framehash", "-hash", FrameHash, "-")
	if audio {
		args = append(args, "-map", "0:a", "-f", "null", "-")
	}
	lines, errs, err := framehash(ctx, ffmpeg, args)
	for _, l := range lines {
		hashes = append(hashes, l.hash)
	}
	return hashes, errs, err
}

// hashLine is one line of ffmpeg's framehash output.
type hashLine struct {
	pts  int64
	hash string
}

// framehash runs ffmpeg with args, whose only output to stdout is a
// framehash muxer's, and parses its lines.
func framehash(ctx context.Context, ffmpeg string, args []string) ([]hashLine, string, error) {
	cmd, done, err := toolCommand(ctx, ffmpeg, args...)
	if err != nil {
		return nil, "", err
	}
	defer done()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	errs := strings.TrimSpace(stderr.String())
	if err != nil && errs == "" {
		errs = err.Error()
	}
	var lines []hashLine
	for _, line := range strings.Split(string(out), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ",")
		l := hashLine{hash: strings.TrimSpace(f[len(f)-1])}
		if len(f) >= 3 {
			l.pts, _ = strconv.ParseInt(strings.TrimSpace(f[2]), 10, 64)
		}
		lines = append(lines, l)
	}
	return lines, errs, err
}

// decoder is Verify's decode of the stitched file, and what it found: across
// the seams when the stitched packets are the chunks' (DecodeSeams), else
// the whole file (DecodeFull).
type decoder struct {
	ffmpeg, path string
	audio        bool
	tb           [2]int64
	pkts         []Packet       // the stitched video's, in file (decode) order
	frames       []int64        // their presentation times, in order
	hashes       []*ChunkHashes // each chunk's, from its encode job
	planned      []int          // each chunk's planned frames

	check      DecodeCheck
	frameStart []int // chunk i's first frame in the stitched file (presentation index)
	pktStart   []int // chunk i's first packet in the stitched file (decode index)
	pktOK      []bool
	full       []string       // DecodeFull: every frame's hash
	seen       map[int]string // DecodeSeams: presentation index → hash decoded across a seam
	seamOf     map[int]int    // DecodeSeams: presentation index → the seam (chunk) it was decoded across
}

// run decodes, filling check. An error is a tool that could not run at all.
func (d *decoder) run(ctx context.Context, streams []probeStream, vi int) error {
	d.frameStart, d.pktStart = make([]int, len(d.planned)+1), make([]int, len(d.planned)+1)
	d.pktOK = make([]bool, len(d.planned))
	why := ""
	codec := ""
	for _, st := range streams {
		if st.Index == vi {
			codec = st.CodecName
		}
	}
	filter := PacketFilter(codec)
	for i, n := range d.planned {
		ch := chunkHashes(d.hashes, i)
		if ch != nil && ch.Hash == FrameHash {
			n = len(ch.Frames)
		}
		d.frameStart[i+1] = d.frameStart[i] + n
		switch {
		case why != "":
		case ch == nil || ch.Hash != FrameHash || ch.Packets == nil:
			why = fmt.Sprintf("chunk %d's encode left no packet hashes to compare", i)
		case ch.PacketFilter != filter:
			why = fmt.Sprintf("chunk %d's packets were hashed under %q, the stitched file's %s under %q", i, ch.PacketFilter, codec, filter)
		}
		if ch != nil {
			d.pktStart[i+1] = d.pktStart[i] + len(ch.Packets)
		}
	}
	if why == "" {
		stitched, errs, err := packetHashes(ctx, d.ffmpeg, d.path, filter, d.audio)
		switch {
		case err != nil && errs == "":
			return err
		case err != nil || errs != "":
			why = "the stitched file's packets could not be read cleanly: " + firstLine(errs, err)
		case len(stitched) != d.pktStart[len(d.planned)]:
			why = fmt.Sprintf("the stitched file has %d video packets, its chunks %d", len(stitched), d.pktStart[len(d.planned)])
		}
		for i := range d.planned {
			lo, hi := d.pktStart[i], d.pktStart[i+1]
			d.pktOK[i] = hi <= len(stitched) && equal(d.hashes[i].Packets, stitched[lo:hi])
			if !d.pktOK[i] && why == "" {
				why = fmt.Sprintf("chunk %d's packets differ from the stitched file's (its container frames them otherwise)", i)
			}
		}
	}
	if why == "" {
		if why2, err := d.seams(ctx); err != nil || why2 == "" {
			return err
		} else {
			why = why2
		}
	}
	return d.decodeFull(ctx, why)
}

// seams decodes the stitched file across each seam: from the last closed
// keyframe of the chunk before (the decoder's whole state at the seam comes
// from there on) to DecodeWindow frames past it. why, when not empty, is why
// the window could not be placed, and the whole file must be decoded.
func (d *decoder) seams(ctx context.Context) (why string, err error) {
	d.check = DecodeCheck{Clean: true, Mode: DecodeSeams}
	d.seen, d.seamOf = map[int]string{}, map[int]int{}
	index := make(map[int64]int, len(d.frames))
	for i, pts := range d.frames {
		index[pts] = i
	}
	// minAfter[k]: the earliest presentation time after packet k in decode
	// order; a keyframe is closed when nothing after it is shown before it.
	minAfter := make([]int64, len(d.pkts)+1)
	minAfter[len(d.pkts)] = 1<<63 - 1
	for k := len(d.pkts) - 1; k >= 0; k-- {
		minAfter[k] = min(minAfter[k+1], d.pkts[k].PTS)
	}
	var errs []string
	for i := 1; i < len(d.planned); i++ {
		seam := d.frameStart[i]
		if seam >= len(d.frames) {
			break
		}
		lead := d.pktStart[i-1]
		for k := d.pktStart[i] - 1; k > d.pktStart[i-1]; k-- {
			if d.pkts[k].Key && minAfter[k+1] >= d.pkts[k].PTS {
				lead = k
				break
			}
		}
		first, ok := index[d.pkts[lead].PTS]
		if !ok || first > seam {
			return fmt.Sprintf("no keyframe to decode the seam before chunk %d from", i), nil
		}
		end := min(seam+DecodeWindow, len(d.frames))
		// -seek_timestamp: the keyframe's own time, not one from the file's
		// start; rounded up to the microsecond, so that seeking lands on it
		// and not on the keyframe before.
		num := d.pkts[lead].PTS * d.tb[0] * 1_000_000
		us := num / d.tb[1]
		if num%d.tb[1] != 0 && num > 0 {
			us++
		}
		lines, e, err := framehash(ctx, d.ffmpeg, []string{"-nostdin", "-v", "error", "-xerror",
			"-copyts", "-seek_timestamp", "1", "-noaccurate_seek", "-ss", fmt.Sprintf("%dus", us), "-i", d.path,
			"-map", "0:v:0", "-frames:v", strconv.Itoa(end - first), "-fps_mode", "passthrough",
			"-enc_time_base:v", "-1", "-f", "framehash", "-hash", FrameHash, "-"})
		if err != nil && e == "" {
			return "", err
		}
		if e != "" {
			errs = append(errs, fmt.Sprintf("across the seam before chunk %d: %s", i, e))
		}
		got := map[int]bool{}
		for _, l := range lines {
			k, ok := index[l.pts]
			if !ok {
				return fmt.Sprintf("decoding across the seam before chunk %d gave a frame at %d, which the file does not show", i, l.pts), nil
			}
			got[k], d.seen[k] = true, l.hash
			if _, ok := d.seamOf[k]; !ok {
				d.seamOf[k] = i
			}
		}
		for k := first; k < end && e == ""; k++ {
			if !got[k] {
				return fmt.Sprintf("decoding across the seam before chunk %d from frame %d did not give frame %d", i, first, k), nil
			}
		}
	}
	d.check.Frames = len(d.seen)
	if len(errs) > 0 {
		d.check.Clean, d.check.Errors = false, tail(strings.Join(errs, "\n"), 2000)
	}
	return "", nil
}

// decodeFull decodes the whole stitched file, video and audio.
func (d *decoder) decodeFull(ctx context.Context, why string) error {
	h, errs, err := decodeHashes(ctx, d.ffmpeg, d.path, d.audio)
	if err != nil && errs == "" {
		return err
	}
	d.full, d.seen = h, nil
	d.check = DecodeCheck{Clean: err == nil && errs == "", Mode: DecodeFull, FullReason: why, Frames: len(h), Errors: tail(errs, 2000)}
	return nil
}

// decodedFrames is how many frames the stitched file's video decodes to:
// with DecodeSeams, the chunks' decodes, whose coded pictures it holds
// unchanged.
func (d *decoder) decodedFrames() int {
	if d.check.Mode == DecodeFull {
		return len(d.full)
	}
	return d.frameStart[len(d.planned)]
}

// packetsMatch: chunk i's packets are the stitched file's at its place.
func (d *decoder) packetsMatch(i int) bool { return d.pktOK[i] }

// hashesMatch compares chunk i decoded alone with the stitched file's
// decode, and names the first difference.
func (d *decoder) hashesMatch(i int) (bool, string) {
	h, at := d.hashes[i].Frames, d.frameStart[i]
	if d.check.Mode == DecodeFull {
		if at+len(h) <= len(d.full) && equal(h, d.full[at:at+len(h)]) {
			return true, ""
		}
		return false, fmt.Sprintf("frames %d to %d", at, at+len(h)-1)
	}
	for k, want := range h {
		if got, ok := d.seen[at+k]; ok && got != want {
			return false, fmt.Sprintf("frame %d, decoded across the seam before chunk %d", at+k, d.seamOf[at+k])
		}
	}
	return d.pktOK[i], "packets"
}
