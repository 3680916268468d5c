package chunked

import (
	"bytes"
	"context"
	"fmt"
	"math/big"
	"sort"
	"strconv"
	"strings"
)

// PacketFilter is the bitstream filter chain under which the stitched file's
// video packets (in the user's container) and an encoded chunk's (NUT, as the
// encoder wrote them, under ChunkPacketFilter) compare byte for byte. The
// containers frame H.264 and HEVC differently (start codes against lengths,
// parameter sets in the header or before each keyframe, access unit
// delimiters) and MP4 drops AV1's temporal delimiters, so both sides are
// brought to one framing: start codes, the parameter sets before each
// keyframe (on the chunk's side from its own header, on the stitched file's
// from the stitched header, which is what its decoder reads), the pictures'
// slices and the end-of-sequence and end-of-stream units. Left out are
// H.264's SEI (the filter puts the parameter sets after it on one side,
// before it on the other) and HEVC's prefix SEI (MP4 moves x265's into its
// header); a stream copy does not change them. An encoder that repeats its
// parameter sets in every keyframe gets them twice on the chunk's side: the
// whole file is decoded. VP9 and the rest are compared as they are. Packets that still
// differ (an MPEG-TS output's are split otherwise) make Verify decode the
// whole file, so a chain that misses a case costs time, never a check.
func PacketFilter(codec string) string {
	switch codec {
	case "h264":
		return "h264_mp4toannexb,filter_units=pass_types=1-5|7-8|10-11"
	case "hevc":
		return "hevc_mp4toannexb,filter_units=pass_types=0-38|40"
	case "av1":
		return "filter_units=remove_types=2"
	}
	return ""
}

// ChunkPacketFilter is PacketFilter for an encoded chunk: its header's
// parameter sets put before each keyframe first, as the stitched file's
// filter does with its own.
func ChunkPacketFilter(codec string) string {
	switch codec {
	case "h264", "hevc":
		return "dump_extra=freq=keyframe," + PacketFilter(codec)
	}
	return PacketFilter(codec)
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
	audioDone  bool     // the packet pass decoded the audio cleanly
	seekLate   int64    // µs added to each window's seek (run)
	full       []string // DecodeFull: every frame's hash
	// DecodeSeams: each chunk's first frame that decoded otherwise across a
	// seam, and that seam (the chunk after it).
	differs map[int][2]int
}

// run decodes, filling check. An error is a tool that could not run at all.
func (d *decoder) run(ctx context.Context, probed *probeOut, vi int) error {
	streams := probed.Streams
	d.frameStart, d.pktStart = make([]int, len(d.planned)+1), make([]int, len(d.planned)+1)
	d.pktOK = make([]bool, len(d.planned))
	why := ""
	codec := ""
	for _, st := range streams {
		if st.Index == vi {
			codec = st.CodecName
			// ffmpeg seeks 3/23 s before the time asked where the demuxer
			// seeks by decode time (all but MP4 and MOV's) and the video has
			// B-frames (ffmpeg's dts heuristic): ask that much later.
			if !strings.HasPrefix(probed.Format.Name, "mov,") && st.HasBFrames > 0 {
				d.seekLate = 3 * 1_000_000 / 23
			}
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
		case ch == nil || ch.Hash != FrameHash || len(ch.Packets) == 0 || len(ch.Packets) != len(ch.Frames):
			why = fmt.Sprintf("chunk %d's encode left no packet hashes to compare, or not one per frame", i)
		case ch.PacketFilter != ChunkPacketFilter(codec):
			why = fmt.Sprintf("chunk %d's packets were hashed under %q, not %q (the stitched file's %s)", i, ch.PacketFilter, ChunkPacketFilter(codec), codec)
		}
		d.pktStart[i+1] = d.pktStart[i]
		if ch != nil {
			d.pktStart[i+1] += len(ch.Packets)
		}
	}
	for _, p := range d.pkts {
		if p.Discard && why == "" {
			// Decoded but not shown: only a whole decode counts what is.
			why = "the stitched file marks video packets to be dropped after decoding (an edit list)"
		}
	}
	if why == "" {
		stitched, errs, err := packetHashes(ctx, d.ffmpeg, d.path, filter, d.audio)
		switch {
		case err != nil && errs == "":
			return err
		case err != nil || errs != "":
			why = "the stitched file's packets could not be read cleanly: " + firstLine(errs, err)
		case len(stitched) != d.pktStart[len(d.planned)] || len(stitched) != len(d.pkts):
			why = fmt.Sprintf("the stitched file has %d video packets (%d filtered), its chunks %d", len(d.pkts), len(stitched), d.pktStart[len(d.planned)])
		}
		d.audioDone = d.audio && err == nil && errs == ""
		for i := range d.planned {
			lo, hi := d.pktStart[i], d.pktStart[i+1]
			d.pktOK[i] = hi <= len(stitched) && equal(d.hashes[i].Packets, stitched[lo:hi])
			if !d.pktOK[i] && why == "" {
				why = fmt.Sprintf("chunk %d's packets differ from the stitched file's (changed, or framed otherwise by its container)", i)
			}
		}
	}
	if why == "" {
		var err error
		if why, err = d.seams(ctx); err != nil || why == "" {
			return err
		}
	}
	return d.decodeFull(ctx, why)
}

// seamWindow is one decode across seams: from a closed keyframe (decode index
// lead, presentation index first) to frame end (excluded), over the seams
// of chunks seams[0]...
type seamWindow struct {
	lead, first, end int
	seams            []int
}

// seams decodes the stitched file across each seam: from the last closed
// keyframe of the chunk before (the decoder's whole state at the seam comes
// from there on) to DecodeWindow frames past it, windows that overlap as
// one decode. Each frame is compared with the chunks' hashes. why, when not
// empty, is why a window could not be placed or read, and the whole file
// must be decoded.
func (d *decoder) seams(ctx context.Context) (why string, err error) {
	d.check = DecodeCheck{Clean: true, Mode: DecodeSeams}
	d.differs = map[int][2]int{}
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
	var wins []seamWindow
	for i := 1; i < len(d.planned); i++ {
		seam := d.frameStart[i]
		if seam >= len(d.frames) {
			break
		}
		lead := -1
		for k := d.pktStart[i] - 1; k >= d.pktStart[i-1] && k >= 0; k-- {
			if d.pkts[k].Key && minAfter[k+1] >= d.pkts[k].PTS {
				lead = k
				break
			}
		}
		if lead < 0 {
			return fmt.Sprintf("chunk %d has no closed keyframe to decode the seam after it from", i-1), nil
		}
		first, ok := index[d.pkts[lead].PTS]
		if !ok || first > seam {
			return fmt.Sprintf("no keyframe to decode the seam before chunk %d from", i), nil
		}
		w := seamWindow{lead: lead, first: first, end: min(seam+DecodeWindow, len(d.frames)), seams: []int{i}}
		if n := len(wins); n > 0 && w.first <= wins[n-1].end {
			// Overlapping: one decode from the earlier keyframe goes on
			// across both seams.
			wins[n-1].end, wins[n-1].seams = w.end, append(wins[n-1].seams, i)
			continue
		}
		wins = append(wins, w)
	}
	var errs []string
	for _, w := range wins {
		why, e, err := d.window(ctx, w, index)
		if why != "" || err != nil {
			return why, err
		}
		if e != "" {
			errs = append(errs, fmt.Sprintf("across the seam before chunk %d: %s", w.seams[0], e))
		}
	}
	if len(errs) > 0 {
		d.check.Clean, d.check.Errors = false, tail(strings.Join(errs, "\n"), 2000)
	}
	return "", nil
}

// window decodes w and compares each frame with the chunks' hashes. errs is
// what ffmpeg said; why, that the window was not what it should be.
func (d *decoder) window(ctx context.Context, w seamWindow, index map[int64]int) (why, errs string, err error) {
	// -seek_timestamp: the keyframe's own time, not one from the file's
	// start; rounded up to the microsecond, so that seeking lands on it and
	// not on the keyframe before (seekLate undoes ffmpeg's own shift). Should
	// it land on an earlier keyframe all the same, the window ends at a time,
	// not after a count, and the frames before it are compared too; on a
	// later one, the whole file is decoded.
	us := new(big.Int).Mul(big.NewInt(d.pkts[w.lead].PTS), big.NewInt(d.tb[0]*1_000_000))
	us.Div(us.Add(us, big.NewInt(d.tb[1]-1)), big.NewInt(d.tb[1])) // Euclidean: a ceiling, whatever the sign
	us.Add(us, big.NewInt(d.seekLate))
	args := []string{"-nostdin", "-v", "error", "-xerror", "-copyts", "-seek_timestamp", "1", "-noaccurate_seek",
		"-ss", us.String() + "us", "-i", d.path, "-map", "0:v:0"}
	if w.end < len(d.frames) {
		args = append(args, "-vf", fmt.Sprintf("trim=end_pts=%d", d.frames[w.end]))
	}
	args = append(args, "-fps_mode", "passthrough", "-enc_time_base:v", "-1", "-f", "framehash", "-hash", FrameHash, "-")
	lines, errs, err := framehash(ctx, d.ffmpeg, args)
	if err != nil && errs == "" {
		return "", "", err
	}
	got := map[int]bool{}
	for _, l := range lines {
		k, ok := index[l.pts]
		if !ok {
			return fmt.Sprintf("decoding across the seam before chunk %d gave a frame at %d, which the file does not show", w.seams[0], l.pts), errs, nil
		}
		got[k] = true
		d.check.Frames++
		c := d.chunkOf(k)
		if want := d.hashes[c].Frames; k-d.frameStart[c] < len(want) && want[k-d.frameStart[c]] != l.hash {
			if _, seen := d.differs[c]; !seen {
				d.differs[c] = [2]int{k, w.seamFor(k, d.frameStart)}
			}
		}
	}
	for k := w.first; k < w.end && errs == ""; k++ {
		if !got[k] {
			return fmt.Sprintf("decoding across the seam before chunk %d from frame %d did not give frame %d", w.seams[0], w.first, k), errs, nil
		}
	}
	return "", errs, nil
}

// chunkOf is the chunk that frame k (presentation index) is from.
func (d *decoder) chunkOf(k int) int {
	c := sort.SearchInts(d.frameStart[1:len(d.planned)], k+1)
	return min(c, len(d.planned)-1)
}

// seamFor is the seam of w that frame k was decoded across: the last one at
// or before it, else w's first.
func (w seamWindow) seamFor(k int, frameStart []int) int {
	s := w.seams[0]
	for _, c := range w.seams {
		if frameStart[c] <= k {
			s = c
		}
	}
	return s
}

// decodeFull decodes the whole stitched file, video and audio.
func (d *decoder) decodeFull(ctx context.Context, why string) error {
	h, errs, err := decodeHashes(ctx, d.ffmpeg, d.path, d.audio && !d.audioDone)
	if err != nil && errs == "" {
		return err
	}
	d.full, d.differs = h, nil
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
	if f, ok := d.differs[i]; ok {
		return false, fmt.Sprintf("frame %d, decoded across the seam before chunk %d", f[0], f[1])
	}
	return d.pktOK[i], "packets"
}
