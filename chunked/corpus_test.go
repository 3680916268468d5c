package chunked

import (
	"encoding/json"
	"math"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// videoStream is what the rotation and 10-bit cases compare of a file's video.
type videoStream struct {
	Width, Height int
	PixFmt        string
	Rotation      float64
}

func (r *rig) videoInfo(rel string) videoStream {
	r.t.Helper()
	out, err := exec.CommandContext(r.ctx, r.ffprobe, "-v", "error", "-select_streams", "v:0",
		"-show_entries", "stream=width,height,pix_fmt:stream_side_data=rotation", "-of", "json", filepath.Join(r.dir, rel)).Output()
	if err != nil {
		r.t.Fatalf("ffprobe %s: %v", rel, err)
	}
	var p struct {
		Streams []struct {
			Width    int    `json:"width"`
			Height   int    `json:"height"`
			PixFmt   string `json:"pix_fmt"`
			SideData []struct {
				Rotation float64 `json:"rotation"`
			} `json:"side_data_list"`
		} `json:"streams"`
	}
	if err := json.Unmarshal(out, &p); err != nil || len(p.Streams) != 1 {
		r.t.Fatalf("ffprobe %s: %v %s", rel, err, out)
	}
	st := p.Streams[0]
	v := videoStream{Width: st.Width, Height: st.Height, PixFmt: st.PixFmt}
	for _, sd := range st.SideData {
		v.Rotation += sd.Rotation
	}
	return v
}

// psnr is the PSNR (dB, averaged over the frames) of b's video against a's.
func (r *rig) psnr(a, b string) float64 {
	r.t.Helper()
	cmd := exec.CommandContext(r.ctx, r.ffmpeg, "-nostdin", "-hide_banner", "-nostats", "-i", a, "-i", b,
		"-lavfi", "[0:v][1:v]psnr", "-f", "null", "-")
	cmd.Dir = r.dir
	out, err := cmd.CombinedOutput()
	m := regexp.MustCompile(`PSNR .* average:([0-9.inf]+)`).FindStringSubmatch(string(out))
	if err != nil || m == nil {
		r.t.Fatalf("psnr %s %s: %v\n%s", a, b, err, tail(string(out), 2000))
	}
	if m[1] == "inf" {
		return math.Inf(1)
	}
	v, _ := strconv.ParseFloat(m[1], 64)
	return v
}

// A phone's video (a display matrix on the stream) comes out of chunks as
// out of a single-pass encode of the same command: ffmpeg rotates the
// pictures when it re-encodes and leaves no matrix, so the stitched file has
// the turned dimensions, no rotation, and the single pass's pictures (a
// picture turned the wrong way, or not at all, would be far from them).
func TestChunkedRotation(t *testing.T) {
	for name, rot := range rotations {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			r.makeSource(name)
			if v := r.videoInfo("inputs/src.mp4"); v.Rotation == 0 || v.Width != 128 || v.Height != 96 {
				t.Fatalf("the source is %+v: want 128x96 with a display matrix", v)
			}
			user := "-i inputs/src.mp4 -c:v libx264 -preset veryfast -crf 18 -c:a aac outputs/out.mp4"
			rep, chunks := r.chunked(user, 0.8, nil)
			r.mustPass(rep, chunks, 50+25*boolInt(rot == 90))
			single := strings.Replace(user, "outputs/out.mp4", "outputs/single.mp4", 1)
			r.run(append([]string{"-y"}, strings.Fields(single)...)...)
			got, want := r.videoInfo("outputs/out.mp4"), r.videoInfo("outputs/single.mp4")
			if got.Width != want.Width || got.Height != want.Height || got.Rotation != want.Rotation {
				t.Fatalf("chunked output %+v, single pass %+v: want the same dimensions and rotation", got, want)
			}
			if rot != 180 && (got.Width != 96 || got.Height != 128) {
				t.Errorf("output %dx%d, want 96x128: the single pass did not rotate either?", got.Width, got.Height)
			}
			if p := r.psnr("outputs/single.mp4", "outputs/out.mp4"); p < 30 {
				t.Errorf("PSNR of the chunked output against the single pass: %.1f dB, want ≥ 30 (same orientation)", p)
			}
			// The wrong turn is far: the check above can fail.
			if rot != 180 {
				r.run("-y", "-i", "outputs/out.mp4", "-vf", "hflip,vflip", "-c:v", "libx264", "-crf", "10", "outputs/wrong.mp4")
				if p := r.psnr("outputs/single.mp4", "outputs/wrong.mp4"); p >= 30 {
					t.Errorf("PSNR of a picture turned 180° against the single pass: %.1f dB; the check cannot tell", p)
				}
			}
		})
	}
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// The encode applies the source's display rotation as ffmpeg's autorotation
// would, unless the command turns it off; then the matrix would have to
// survive the chunks, which it cannot yet: refused.
func TestRotationArgs(t *testing.T) {
	parse := func(s string) *Command {
		t.Helper()
		cmd, err := Parse(strings.Fields(s))
		if err != nil {
			t.Fatalf("Parse(%s): %v", s, err)
		}
		return cmd
	}
	on := parse("-i inputs/src.mp4 -vf scale=96:-2 -c:v libx264 outputs/out.mp4")
	for rot, want := range map[float64]string{90: "transpose=cclock", -90: "transpose=clock", 270: "transpose=clock", 180: "hflip,vflip", -180: "hflip,vflip", 0: ""} {
		if got := autorotateFilter(on, rot); got != want {
			t.Errorf("autorotateFilter(%g) = %q, want %q", rot, got, want)
		}
	}
	args := strings.Join(EncodeArgs(on, Chunk{Index: 1, TrimFrom: 1, TrimTo: 2, Rotation: 90}, "in.nut", "out.nut"), " ")
	if !strings.Contains(args, "-filter:v trim=start=1.000000:end=2.000000,transpose=cclock,scale=96:-2") {
		t.Errorf("EncodeArgs = %s: want the rotation after the trim, before the user's graph", args)
	}
	args = strings.Join(EncodeArgs(on, Chunk{Index: 0, Last: true, Rotation: 180}, "in.nut", "out.nut"), " ")
	if !strings.Contains(args, "-filter:v hflip,vflip,scale=96:-2") {
		t.Errorf("EncodeArgs = %s: want the rotation before the user's graph", args)
	}
	src := &Source{Rotation: 90}
	if err := on.CheckSource(src); err != nil {
		t.Errorf("CheckSource: %v", err)
	}
	for _, off := range []string{"-noautorotate -i inputs/src.mp4 -c:v libx264 outputs/out.mp4", "-autorotate 0 -i inputs/src.mp4 -c:v libx264 outputs/out.mp4"} {
		cmd := parse(off)
		if cmd.Input != "inputs/src.mp4" || cmd.Autorotates() {
			t.Errorf("%s: input %q, autorotates %v", off, cmd.Input, cmd.Autorotates())
		}
		if got := autorotateFilter(cmd, 90); got != "" {
			t.Errorf("%s: autorotateFilter = %q, want none", off, got)
		}
		if err := cmd.CheckSource(src); err == nil || !strings.Contains(err.Error(), "noautorotate") {
			t.Errorf("%s: CheckSource = %v, want a refusal", off, err)
		}
		if err := cmd.CheckSource(&Source{}); err != nil {
			t.Errorf("%s: CheckSource(no rotation) = %v", off, err)
		}
	}
	var s Source
	for _, bad := range []struct {
		rot    float64
		matrix string
	}{
		{45, ""},
		{90, "\n00000000:            0       65536           0\n00000001:        65536           0           0\n00000002:            0           0  1073741824\n"}, // mirrored
	} {
		if err := s.setRotation(bad.rot, bad.matrix); err == nil {
			t.Errorf("setRotation(%g, %q) = nil, want a refusal", bad.rot, bad.matrix)
		}
	}
	if err := s.setRotation(90, "\n00000000:            0      -65536           0\n00000001:        65536           0           0\n00000002:            0           0  1073741824\n"); err != nil || s.Rotation != 90 {
		t.Errorf("setRotation(90) = %v, rotation %g", err, s.Rotation)
	}
}

// Scene-change cuts: the source's hard cut at 2.4 s is a keyframe within a
// quarter of chunk_seconds (2) of the cut the plan aims at 2 s, where it
// would otherwise take the nearest keyframe (1.92 s). The cut moves there,
// measured by decoding the frames around the candidate keyframes, and the
// stitched file passes its verification.
func TestChunkedSceneCuts(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	r.makeSource("scenes")
	src, err := Probe(r.ctx, r.ffprobe, filepath.Join(r.dir, "inputs/src.mp4"))
	if err != nil {
		t.Fatal(err)
	}
	plain, err := src.Plan(2, 0)
	if err != nil {
		t.Fatal(err)
	}
	if len(plain) < 2 || math.Abs(plain[1].Start-1.92) > 1e-6 {
		t.Fatalf("plan without scene cuts %+v: want the second chunk at 1.92 s", plain)
	}
	scores, err := src.SceneScores(r.ctx, r.ffmpeg, src.SceneCandidates(2, 0))
	if err != nil {
		t.Fatal(err)
	}
	if scores[2.4] < SceneThreshold || scores[1.92] >= SceneThreshold || scores[2.16] >= SceneThreshold {
		t.Fatalf("scene scores %v: want the hard cut at 2.4 s alone past %g", scores, SceneThreshold)
	}
	r.sceneCuts = true
	rep, chunks := r.chunked("-i inputs/src.mp4 -c:v libx264 -preset veryfast -crf 28 -c:a aac outputs/out.mp4", 2, nil)
	r.mustPass(rep, chunks, 125)
	if math.Abs(chunks[1].Start-2.4) > 1e-6 || !chunks[1].SceneCut {
		t.Fatalf("chunks %+v: want the second to start at the scene change, 2.4 s", chunks)
	}
	for _, c := range chunks[:len(chunks)-1] {
		if c.End-c.Start < 1 {
			t.Errorf("chunk %+v is shorter than half of chunk_seconds", c)
		}
	}
	t.Logf("chunks %+v", chunks)
}
