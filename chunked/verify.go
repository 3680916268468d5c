package chunked

import (
	"bytes"
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
	// the stitched file gives at its place.
	HashesMatch bool `json:"hashes_match"`
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

// DecodeCheck is a full decode of the stitched file (ffmpeg -xerror).
type DecodeCheck struct {
	Clean  bool   `json:"clean"`
	Errors string `json:"errors,omitempty"`
}

func (r *Report) fail(format string, args ...any) {
	r.Failures = append(r.Failures, fmt.Sprintf(format, args...))
}

// Verify checks stitched, the file StitchArgs made from the encoded chunks
// (encoded[i] is chunk i's EncodeArgs output), against the plan and the
// source. An error is returned only when a tool could not run at all; a
// wrong file is a Report that does not pass.
func Verify(ctx context.Context, ffmpeg, ffprobe string, src *Source, chunks []Chunk, encoded []string, stitched string) (*Report, error) {
	r := &Report{Timestamps: TSCheck{Monotonic: true, MatchSource: true}}
	for _, c := range chunks {
		r.ExpectedFrames += c.Frames
	}
	if r.ExpectedFrames != len(src.Frames) {
		r.fail("the plan's chunks hold %d frames, the source %d", r.ExpectedFrames, len(src.Frames))
	}
	out, err := probeStreams(ctx, ffprobe, stitched)
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
	pkts, lastDur, err := probePackets(ctx, ffprobe, stitched, vi)
	if err != nil {
		return nil, err
	}
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
		_, aEnd, err := streamSpan(ctx, ffprobe, stitched, audio)
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

	// A full decode, with the video's frame hashes.
	hashes, errs, err := decodeHashes(ctx, ffmpeg, stitched, ai >= 0)
	if err != nil && errs == "" {
		return nil, err
	}
	r.DecodedFrames = len(hashes)
	r.Decode = DecodeCheck{Clean: err == nil && errs == "", Errors: tail(errs, 2000)}
	if !r.Decode.Clean {
		r.fail("the stitched file does not decode cleanly: %s", firstLine(errs, err))
	}
	if r.DecodedFrames != r.ExpectedFrames {
		r.fail("the stitched video decodes to %d frames, the plan %d", r.DecodedFrames, r.ExpectedFrames)
	}

	// Each chunk alone, and each seam.
	at := 0
	for i, c := range chunks {
		cc := ChunkCheck{Index: c.Index, Start: c.Start, End: c.End, ExpectedFrames: c.Frames}
		if i < len(encoded) {
			h, errs, err := decodeHashes(ctx, ffmpeg, encoded[i], false)
			if err != nil || errs != "" {
				r.fail("chunk %d does not decode cleanly on its own: %s", c.Index, firstLine(errs, err))
			}
			cc.DecodedFrames = len(h)
			cc.HashesMatch = at+len(h) <= len(hashes) && equal(h, hashes[at:at+len(h)])
			if cc.DecodedFrames != c.Frames {
				r.fail("chunk %d decodes to %d frames, the plan %d", c.Index, cc.DecodedFrames, c.Frames)
			}
			if !cc.HashesMatch {
				r.fail("chunk %d decoded alone differs from the stitched file's frames %d to %d", c.Index, at, at+len(h)-1)
			}
		} else {
			r.fail("chunk %d has no encoded file to check", c.Index)
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

func probeStreams(ctx context.Context, ffprobe, path string) (*probeOut, error) {
	out, err := run(ctx, ffprobe, "-v", "error", "-protocol_whitelist", "file", "-show_entries",
		"stream=index,codec_type,codec_name,time_base,start_time,duration:format=start_time,duration", "-of", "json", path)
	if err != nil {
		return nil, fmt.Errorf("probing %s: %w", path, err)
	}
	var p probeOut
	if err := json.Unmarshal(out, &p); err != nil {
		return nil, fmt.Errorf("probing %s: %w", path, err)
	}
	return &p, nil
}

func parseTB(s string) [2]int64 {
	num, den, _ := strings.Cut(s, "/")
	n, _ := strconv.ParseInt(num, 10, 64)
	d, _ := strconv.ParseInt(den, 10, 64)
	return [2]int64{n, d}
}

// decodeHashes decodes path's first video stream (and its audio, when audio is
// set: a full decode) and returns each video frame's MD5 in presentation
// order, and what ffmpeg said at level error.
func decodeHashes(ctx context.Context, ffmpeg, path string, audio bool) ([]string, string, error) {
	args := []string{"-nostdin", "-v", "error", "-xerror", "-i", path, "-map", "0:v:0",
		"-fps_mode", "passthrough", "-f", "framemd5", "-"}
	if audio {
		args = append(args, "-map", "0:a", "-f", "null", "-")
	}
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
	var hashes []string
	for _, line := range strings.Split(string(out), "\n") {
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		f := strings.Split(line, ",")
		hashes = append(hashes, strings.TrimSpace(f[len(f)-1]))
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
