package chunked

import (
	"errors"
	"fmt"
	"os/exec"
	"sort"
	"strings"
	"testing"
)

func init() {
	// Interlaced: 50 progressive pictures a second woven into 25 frames of
	// two fields each (top field first), coded as interlaced by x264, with
	// B-frames and a keyframe every 12 frames.
	sources["interlaced"] = cat([]string{"-f", "lavfi", "-i", "testsrc2=s=" + size + ":r=50:d=4,interlace=scan=tff"},
		x264(12), []string{"-flags", "+ildct+ilme"})
}

// frameHashes decodes the first video stream of what args give ffmpeg
// (inputs, filters) and returns each frame's MD5, in order.
func (r *rig) frameHashes(args ...string) []string {
	r.t.Helper()
	cmd := exec.CommandContext(r.ctx, r.ffmpeg, append(append([]string{"-nostdin", "-v", "error"}, args...), "-f", "framemd5", "-")...)
	cmd.Dir = r.dir
	out, err := cmd.Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = fmt.Errorf("%v: %s", err, ee.Stderr)
		}
		r.t.Fatalf("ffmpeg %s: %v", strings.Join(args, " "), err)
	}
	var hashes []string
	for _, l := range strings.Split(string(out), "\n") {
		if l == "" || strings.HasPrefix(l, "#") {
			continue
		}
		f := strings.Split(l, ",")
		hashes = append(hashes, strings.TrimSpace(f[len(f)-1]))
	}
	return hashes
}

// differing lists the frames where a and b differ (and a count mismatch).
func differing(a, b []string) []int {
	var d []int
	for i := 0; i < max(len(a), len(b)); i++ {
		if i >= len(a) || i >= len(b) || a[i] != b[i] {
			d = append(d, i)
		}
	}
	return d
}

// Deinterlacers read one frame each way: each chunk is encoded with the frame
// before it and the one after (pre- and post-roll), which its encode drops
// after the user's graph. With a lossless encode (x264 -qp 0) the stitched
// file decodes, frame for frame, to exactly the frames the graph gives over
// the whole source in one pass: the seams are invisible.
func TestPreRollDeinterlace(t *testing.T) {
	cases := []struct{ source, vf string }{
		{"interlaced", "yadif"},
		{"interlaced", "yadif=mode=send_frame_nospatial:parity=tff:deint=interlaced"},
		{"interlaced", "bwdif=mode=send_frame"},
		// Two in a row read two frames each way; the trim after the graph
		// sits after what follows them.
		{"interlaced", "yadif,bwdif=0,hflip"},
		// Open GOPs: the post-roll needs the next keyframe's leading pictures.
		{"opengop", "yadif=deint=all"},
		// The graph's times re-based: the trim after it counts frames.
		{"interlaced", "setpts=PTS-STARTPTS,yadif"},
	}
	for _, c := range cases {
		t.Run(c.source+"/"+c.vf, func(t *testing.T) {
			t.Parallel()
			r := newRig(t)
			needEncoder(t, r.ffmpeg, "libx264")
			r.makeSource(c.source)
			single := r.frameHashes("-i", "inputs/src.mp4", "-map", "0:v:0", "-vf", c.vf)
			rep, chunks := r.chunked(`-i inputs/src.mp4 -vf `+c.vf+` -c:v libx264 -preset veryfast -qp 0 -an outputs/out.mkv`, 1, nil)
			r.mustPass(rep, chunks, len(single))
			for _, ch := range chunks {
				want := [2]int{1, 1}
				if strings.Count(c.vf, "yadif")+strings.Count(c.vf, "bwdif") == 2 {
					want = [2]int{2, 2}
				}
				if ch.Index == 0 {
					want[0] = 0
				}
				if ch.Last {
					want[1] = 0
				}
				if ch.PreRoll != want[0] || ch.PostRoll != want[1] {
					t.Fatalf("chunk %d rolls %d before, %d after; want %v: %+v", ch.Index, ch.PreRoll, ch.PostRoll, want, chunks)
				}
			}
			stitched := r.frameHashes("-i", "outputs/out.mkv", "-map", "0:v:0")
			if d := differing(stitched, single); len(d) > 0 {
				t.Fatalf("the stitched file differs from one pass of %s at frames %v (%d and %d frames); chunks %+v", c.vf, d, len(stitched), len(single), chunks)
			}
			t.Logf("%d chunks, %d frames equal to one pass; plan %+v", len(chunks), len(single), chunks)
		})
	}
}

// Without the roll (the plan as for a graph of frame-independent filters),
// the same yadif encode passes its own verification but differs from one
// pass exactly at the seams: each chunk's first frame is deinterlaced against
// itself instead of the frame before, its last against itself instead of the
// next chunk's first. What TestPreRollDeinterlace proves equal is not so by
// chance.
func TestPreRollIsNeeded(t *testing.T) {
	t.Parallel()
	r := newRig(t)
	needEncoder(t, r.ffmpeg, "libx264")
	r.makeSource("interlaced")
	r.noRoll = true
	single := r.frameHashes("-i", "inputs/src.mp4", "-map", "0:v:0", "-vf", "yadif")
	rep, chunks := r.chunked(`-i inputs/src.mp4 -vf yadif -c:v libx264 -preset veryfast -qp 0 -an outputs/out.mkv`, 1, nil)
	r.mustPass(rep, chunks, len(single))
	seams := map[int]bool{}
	first := 0
	for _, ch := range chunks {
		if ch.Rolls() {
			t.Fatalf("chunk %+v rolls in a plan without roll", ch)
		}
		if ch.Index > 0 {
			seams[first-1], seams[first] = true, true
		}
		first += ch.Frames
	}
	d := differing(r.frameHashes("-i", "outputs/out.mkv", "-map", "0:v:0"), single)
	if len(d) == 0 {
		t.Fatalf("without pre-roll the stitched file equals one pass of yadif: the test source shows no seam (plan %+v)", chunks)
	}
	for _, f := range d {
		if !seams[f] {
			t.Errorf("frame %d differs, not at a seam (seams at %v)", f, keys(seams))
		}
	}
	t.Logf("without roll, frames %v differ (seams at %v)", d, keys(seams))
}

func keys(m map[int]bool) []int {
	var k []int
	for i := range m {
		k = append(k, i)
	}
	sort.Ints(k)
	return k
}

// The checker accepts yadif and bwdif frame for frame, and the reach it
// reads sets the roll; the trim after the graph goes where its output is.
func TestReach(t *testing.T) {
	for _, tc := range []struct {
		vf            string
		before, after int
		withTrim      string
	}{
		{"scale=96:-2", 0, 0, ""},
		{"yadif", 1, 1, "yadif,T"},
		{"yadif=0:-1:0,scale=96:-2", 1, 1, "yadif=0:-1:0,scale=96:-2,T"},
		{"bwdif=mode=send_frame", 1, 1, "bwdif=mode=send_frame,T"},
		{"yadif,bwdif=0", 2, 2, "yadif,bwdif=0,T"},
		{"[in]split[a][b];[a]yadif[l];[b]yadif[r];[l][r]hstack[out]", 2, 2, "[in]split[a][b];[a]yadif[l];[b]yadif[r];[l][r]hstack[out];[out]T"},
	} {
		cmd, err := Parse(prepare(t, "-i inputs/src.mp4 -vf "+tc.vf+" -c:v libx264 outputs/out.mp4"))
		if err != nil {
			t.Errorf("Parse(-vf %s) = %v", tc.vf, err)
			continue
		}
		if b, a := cmd.Reach(); b != tc.before || a != tc.after {
			t.Errorf("Reach(-vf %s) = %d, %d; want %d, %d", tc.vf, b, a, tc.before, tc.after)
		}
		if tc.withTrim == "" {
			continue
		}
		if g, ok := appendFilter(cmd.VideoFilter, "T"); !ok || g != tc.withTrim {
			t.Errorf("appendFilter(%s) = %q, %v; want %q", tc.vf, g, ok, tc.withTrim)
		}
	}
}
