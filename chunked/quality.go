package chunked

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Quality against a single-pass encode (docs/chunked.md#quality), on request:
// the reference step encodes the whole source with the user's video options
// in one go (ReferenceArgs), and the stitch measures the stitched file and
// that encode against the source, frame by frame. It is informative: nothing
// here fails a job.

// ReferenceArgs is the argv that encodes the whole source (cmd.Input) with the
// user's video options as one encode, into out (NUT, video only): what the
// chunks are compared with. Unlike EncodeArgs it forces no keyframe and
// closes no GOP: the user's command as written, but for the audio and the
// container (the chunks have neither), and the timestamps kept as the chunks
// keep them, so that both encodes hold the source's frames one for one.
func ReferenceArgs(cmd *Command, out string) []string {
	a := []string{"-y"}
	a = append(a, flatten(cmd.Global, keepGlobal)...)
	a = append(a, flatten(cmd.InputOpts, nil)...)
	// V: the first video stream that is not a cover picture, the one Probe
	// plans on.
	a = append(a, "-i", cmd.Input, "-map", "0:V:0")
	for _, o := range cmd.OutputOpts {
		switch {
		case o.Name == "map" || o.Name == "c" || o.Name == "filter" || o.Name == "fps_mode":
			continue
		case isMuxerOption(o.Name) || isVideoLess(o):
			continue
		}
		a = append(a, o.words()...)
	}
	if cmd.VideoFilter != "" {
		a = append(a, "-filter:v", cmd.VideoFilter)
	}
	a = append(a, "-an", "-sn", "-dn", "-c:v", cmd.Encoder, "-fps_mode", "passthrough", "-enc_time_base", "-1")
	return append(a, "-f", chunkFormat, out)
}

// SeamWindow is how many frames on each side of a seam its window holds: the
// N frames before the seam and the N from it on.
const SeamWindow = 10

// maxPSNR stands for identical frames, whose PSNR is infinite (JSON has no
// infinity).
const maxPSNR = 100

// Quality is the report's "quality": the stitched file and the single-pass
// encode, each against the source.
type Quality struct {
	// Frames is the source's frame count (the plan's).
	Frames int `json:"frames"`
	// ComparedAt is the size and pixel format both encodes are compared in:
	// the source's (an encode the user's command scaled is scaled back).
	ComparedAt string        `json:"compared_at,omitempty"`
	Stitched   QualityScores `json:"stitched"`
	SinglePass QualityScores `json:"single_pass"`
	// The stitched file's means minus the single-pass encode's (negative:
	// the chunks lost quality).
	PSNRDelta float64  `json:"psnr_delta"`
	SSIMDelta float64  `json:"ssim_delta"`
	VMAFDelta *float64 `json:"vmaf_delta,omitempty"`
	// SeamWindow: each seam's window is SeamWindow frames either side of it.
	SeamWindow int           `json:"seam_window"`
	Seams      []SeamQuality `json:"seams"`
	// WorstSeamPSNRDelta is the lowest of the seams' PSNRDelta: where the
	// chunks lost most against one encode (absent without seams).
	WorstSeamPSNRDelta *float64 `json:"worst_seam_psnr_delta,omitempty"`
	// VMAF says whether VMAF was measured: "libvmaf", or why not.
	VMAF string `json:"vmaf"`
	// Error says why the measurement stopped, when it did (the scores are
	// then partial or absent); it fails nothing.
	Error string `json:"error,omitempty"`
}

// QualityScores is one encode against the source: PSNR in dB (the mean of
// its frames' PSNR over all planes, as ffmpeg's psnr filter's psnr_avg;
// identical frames count as 100), SSIM (its "All"), the worst frame of
// each by index in presentation order, from 0; VMAF's mean where measured.
type QualityScores struct {
	Frames         int      `json:"frames"`
	PSNRMean       float64  `json:"psnr_mean"`
	PSNRWorst      float64  `json:"psnr_worst"`
	PSNRWorstFrame int      `json:"psnr_worst_frame"`
	SSIMMean       float64  `json:"ssim_mean"`
	SSIMWorst      float64  `json:"ssim_worst"`
	SSIMWorstFrame int      `json:"ssim_worst_frame"`
	VMAFMean       *float64 `json:"vmaf_mean,omitempty"`
}

// SeamQuality is the window around one seam: the means of its frames
// [From, To], stitched and single-pass.
type SeamQuality struct {
	Chunk      int          `json:"chunk"` // the chunk that starts at the seam
	Frame      int          `json:"frame"` // its first frame
	From       int          `json:"from"`
	To         int          `json:"to"`
	Stitched   WindowScores `json:"stitched"`
	SinglePass WindowScores `json:"single_pass"`
	PSNRDelta  float64      `json:"psnr_delta"` // stitched minus single-pass
}

// WindowScores are the mean PSNR (dB) and SSIM of a window's frames.
type WindowScores struct {
	PSNR float64 `json:"psnr"`
	SSIM float64 `json:"ssim"`
}

// frameScores are one encode's per-frame scores, by frame index.
type frameScores struct {
	psnr, ssim []float64
	vmaf       *float64
}

// MeasureQuality measures stitched (the verified file) and single (the
// reference step's encode) against source, whose frames chunks cover. It
// always returns a report: a tool that fails, or ctx ending, leaves Error
// set and the scores measured so far.
func MeasureQuality(ctx context.Context, ffmpeg, ffprobe, source, stitched, single string, chunks []Chunk) *Quality {
	q := &Quality{SeamWindow: SeamWindow, Seams: []SeamQuality{}}
	for _, c := range chunks {
		q.Frames += c.Frames
	}
	vmaf, why := HasVMAF(ctx, ffmpeg)
	q.VMAF = "libvmaf"
	if !vmaf {
		q.VMAF = "not available on this worker: " + why
	}
	w, h, pixFmt, err := videoGeometry(ctx, ffprobe, source)
	if err != nil {
		q.Error = err.Error()
		return q
	}
	format := compareFormat(pixFmt)
	q.ComparedAt = fmt.Sprintf("%dx%d %s", w, h, format)
	var scores [2]*frameScores
	for i, dist := range []string{stitched, single} {
		s, err := compare(ctx, ffmpeg, source, dist, w, h, format, vmaf)
		if err != nil {
			q.Error = fmt.Sprintf("measuring %s: %v", dist, err)
			return q
		}
		scores[i] = s
	}
	q.Stitched, q.SinglePass = scores[0].summary(), scores[1].summary()
	q.PSNRDelta = round(q.Stitched.PSNRMean-q.SinglePass.PSNRMean, 4)
	q.SSIMDelta = round(q.Stitched.SSIMMean-q.SinglePass.SSIMMean, 6)
	if q.Stitched.VMAFMean != nil && q.SinglePass.VMAFMean != nil {
		d := round(*q.Stitched.VMAFMean-*q.SinglePass.VMAFMean, 4)
		q.VMAFDelta = &d
	}
	n := min(len(scores[0].psnr), len(scores[1].psnr))
	at := 0
	for i, c := range chunks {
		if i > 0 && at < n {
			s := SeamQuality{Chunk: c.Index, Frame: at, From: max(0, at-SeamWindow), To: min(n-1, at+SeamWindow-1)}
			s.Stitched = scores[0].window(s.From, s.To)
			s.SinglePass = scores[1].window(s.From, s.To)
			s.PSNRDelta = round(s.Stitched.PSNR-s.SinglePass.PSNR, 4)
			if q.WorstSeamPSNRDelta == nil || s.PSNRDelta < *q.WorstSeamPSNRDelta {
				d := s.PSNRDelta
				q.WorstSeamPSNRDelta = &d
			}
			q.Seams = append(q.Seams, s)
		}
		at += c.Frames
	}
	if q.Stitched.Frames != q.Frames || q.SinglePass.Frames != q.Frames {
		q.Error = fmt.Sprintf("compared %d frames of the stitched file and %d of the single-pass encode; the source has %d", q.Stitched.Frames, q.SinglePass.Frames, q.Frames)
	}
	return q
}

var vmafFilter = regexp.MustCompile(`(?m)^\s*\S+\s+libvmaf\s`)

// HasVMAF tells whether ffmpeg has the libvmaf filter (ffmpeg -filters), and
// if not, why.
func HasVMAF(ctx context.Context, ffmpeg string) (bool, string) {
	out, err := run(ctx, ffmpeg, "-hide_banner", "-nostdin", "-filters")
	if err != nil {
		return false, "listing its ffmpeg's filters failed: " + firstLine("", err)
	}
	if !vmafFilter.Match(out) {
		return false, "its ffmpeg has no libvmaf filter"
	}
	return true, ""
}

// videoGeometry is the size and pixel format of path's first video stream
// that is not a cover picture, as it decodes: ffmpeg turns the pictures of a
// video with a display matrix (autorotation), so a rotation of ±90° swaps
// the coded width and height (Source.Rotation); the encodes, turned alike,
// carry no matrix.
func videoGeometry(ctx context.Context, ffprobe, path string) (w, h int, pixFmt string, err error) {
	out, err := run(ctx, ffprobe, "-v", "error", "-protocol_whitelist", "file", "-select_streams", "V:0",
		"-show_entries", "stream=width,height,pix_fmt:stream_side_data=rotation", "-of", "json", path)
	if err != nil {
		return 0, 0, "", fmt.Errorf("probing %s: %w", path, err)
	}
	var p struct {
		Streams []struct {
			Width    int    `json:"width"`
			Height   int    `json:"height"`
			PixFmt   string `json:"pix_fmt"`
			SideData []struct {
				Rotation *float64 `json:"rotation"`
			} `json:"side_data_list"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(out, &p); err != nil || len(p.Streams) == 0 || p.Streams[0].Width <= 0 || p.Streams[0].Height <= 0 {
		return 0, 0, "", fmt.Errorf("probing %s: no video stream with a size", path)
	}
	st := p.Streams[0]
	w, h = st.Width, st.Height
	for _, sd := range st.SideData {
		if sd.Rotation != nil && quarterTurn(*sd.Rotation) {
			w, h = h, w
		}
	}
	return w, h, st.PixFmt, nil
}

// quarterTurn reports whether a display rotation (degrees) is an odd
// multiple of 90°: the picture's width and height swap.
func quarterTurn(deg float64) bool {
	r := math.Round(deg)
	return math.Abs(deg-r) <= 0.01 && int(math.Abs(r))%180 == 90
}

// compareFormats are the pixel formats psnr, ssim and libvmaf all take.
var compareFormats = map[string]bool{
	"yuv420p": true, "yuv422p": true, "yuv444p": true,
	"yuv420p10le": true, "yuv422p10le": true, "yuv444p10le": true,
}

var deepFormat = regexp.MustCompile(`(9|10|12|14|16|48|64)(le|be)?$|^p01[026]`)

// compareFormat is the pixel format to compare in: the source's when every
// measure takes it, else 4:4:4 at its depth (8 or 10 bits).
func compareFormat(pixFmt string) string {
	if compareFormats[pixFmt] {
		return pixFmt
	}
	if deepFormat.MatchString(pixFmt) {
		return "yuv444p10le"
	}
	return "yuv444p"
}

// compare measures dist against ref frame by frame: each input's frames are
// numbered in the order they are decoded to (setpts=N on one time base), so
// differing time bases, start times or variable frame rates pair the n-th
// frame with the n-th; dist is scaled to ref's size and both converted to
// format. PSNR and SSIM write a line per frame on stdout; libvmaf (vmaf)
// logs its mean.
func compare(ctx context.Context, ffmpeg, ref, dist string, w, h int, format string, vmaf bool) (*frameScores, error) {
	k := 2
	if vmaf {
		k = 3
	}
	labels := func(p string) string {
		var b strings.Builder
		for i := range k {
			fmt.Fprintf(&b, "[%s%d]", p, i)
		}
		return b.String()
	}
	// shortest=1: a file short of frames ends the comparison there, instead
	// of its last frame standing in for the rest (counted, not hidden).
	graph := fmt.Sprintf("[0:V:0]settb=1/1000,setpts=N,format=%s,split=%d%s;", format, k, labels("r")) +
		fmt.Sprintf("[1:V:0]settb=1/1000,setpts=N,scale=%d:%d,format=%s,split=%d%s;", w, h, format, k, labels("d")) +
		"[d0][r0]psnr=stats_file=-:shortest=1[p];[d1][r1]ssim=stats_file=-:shortest=1[s]"
	level := "error"
	if vmaf {
		graph += ";[d2][r2]libvmaf=shortest=1[v]"
		level = "info" // its mean is logged at info
	}
	args := []string{"-nostdin", "-hide_banner", "-nostats", "-v", level, "-protocol_whitelist", "file",
		"-i", ref, "-i", dist, "-filter_complex", graph}
	outs := []string{"[p]", "[s]"}
	if vmaf {
		outs = append(outs, "[v]")
	}
	for _, o := range outs {
		// The renumbered frames, one millisecond apart, kept as they are.
		args = append(args, "-map", o, "-fps_mode", "passthrough", "-enc_time_base", "1/1000", "-f", "null", "-")
	}
	cmd, done, err := toolCommand(ctx, ffmpeg, args...)
	if err != nil {
		return nil, err
	}
	defer done()
	stderr := &tailWriter{max: 64 << 10}
	cmd.Stderr = stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	s := &frameScores{}
	perr := s.read(bufio.NewScanner(stdout))
	if err := cmd.Wait(); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("%s: %v: %s", ffmpeg, err, strings.TrimSpace(tail(stderr.String(), 2000)))
	}
	if perr != nil {
		return nil, perr
	}
	if vmaf {
		m := vmafScore.FindAllStringSubmatch(stderr.String(), -1)
		if len(m) == 0 {
			return nil, fmt.Errorf("libvmaf logged no score: %s", strings.TrimSpace(tail(stderr.String(), 500)))
		}
		v, _ := strconv.ParseFloat(m[len(m)-1][1], 64)
		v = round(v, 4)
		s.vmaf = &v
	}
	if len(s.psnr) == 0 || len(s.psnr) != len(s.ssim) {
		return nil, fmt.Errorf("psnr measured %d frames, ssim %d", len(s.psnr), len(s.ssim))
	}
	return s, nil
}

var vmafScore = regexp.MustCompile(`VMAF score: ([0-9.]+)`)

// read takes the psnr and ssim filters' lines ("n:1 mse_avg:... psnr_avg:31.2
// ..." and "n:1 Y:... All:0.97 (15.4)"), n counted from 1.
func (s *frameScores) read(sc *bufio.Scanner) error {
	sc.Buffer(make([]byte, 4096), 1<<20)
	for sc.Scan() {
		fields := map[string]string{}
		for _, f := range strings.Fields(sc.Text()) {
			if k, v, ok := strings.Cut(f, ":"); ok {
				fields[k] = v
			}
		}
		n, err := strconv.Atoi(fields["n"])
		if err != nil || n < 1 {
			continue
		}
		if v, ok := fields["psnr_avg"]; ok {
			p, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("psnr line %q: %v", sc.Text(), err)
			}
			s.psnr = put(s.psnr, n-1, min(p, maxPSNR))
		} else if v, ok := fields["All"]; ok {
			p, err := strconv.ParseFloat(v, 64)
			if err != nil {
				return fmt.Errorf("ssim line %q: %v", sc.Text(), err)
			}
			s.ssim = put(s.ssim, n-1, p)
		}
	}
	return sc.Err()
}

func put(a []float64, i int, v float64) []float64 {
	for len(a) <= i {
		a = append(a, math.NaN())
	}
	a[i] = v
	return a
}

func (s *frameScores) summary() QualityScores {
	q := QualityScores{Frames: len(s.psnr), VMAFMean: s.vmaf}
	q.PSNRMean, q.PSNRWorst, q.PSNRWorstFrame = stats(s.psnr)
	q.SSIMMean, q.SSIMWorst, q.SSIMWorstFrame = stats(s.ssim)
	q.PSNRMean, q.PSNRWorst = round(q.PSNRMean, 4), round(q.PSNRWorst, 4)
	q.SSIMMean, q.SSIMWorst = round(q.SSIMMean, 6), round(q.SSIMWorst, 6)
	return q
}

func (s *frameScores) window(from, to int) WindowScores {
	p, _, _ := stats(s.psnr[from : to+1])
	m, _, _ := stats(s.ssim[from : to+1])
	return WindowScores{PSNR: round(p, 4), SSIM: round(m, 6)}
}

// stats are the mean and the lowest of v and its index, NaN (a frame
// without a score) skipped.
func stats(v []float64) (mean, worst float64, at int) {
	n := 0
	worst, at = math.Inf(1), -1
	for i, x := range v {
		if math.IsNaN(x) {
			continue
		}
		mean += x
		n++
		if x < worst {
			worst, at = x, i
		}
	}
	if n == 0 {
		return 0, 0, -1
	}
	return mean / float64(n), worst, at
}

func round(v float64, digits int) float64 {
	p := math.Pow(10, float64(digits))
	return math.Round(v*p) / p
}

// tailWriter keeps the last max bytes written to it.
type tailWriter struct {
	b   []byte
	max int
}

func (t *tailWriter) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = append([]byte(nil), t.b[len(t.b)-t.max:]...)
	}
	return len(p), nil
}

func (t *tailWriter) String() string { return string(t.b) }
