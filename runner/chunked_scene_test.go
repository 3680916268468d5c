package runner

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/chunked"
	"github.com/mediajobs/mediajobs/sandbox"
	"github.com/mediajobs/mediajobs/testenv"
)

// The plan phase with scene_cuts measures the keyframes around each cut with
// the runner's tools and moves the cut to the source's hard cut (2.4 s, a
// keyframe; without scene cuts chunk_seconds 2 cuts at 1.92 s), in the
// sandbox; a source
// whose display matrix the command keeps (-noautorotate) is refused.
func TestChunkedPlanSceneCuts(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	dir := t.TempDir()
	src := filepath.Join(dir, "src.mp4")
	if out, err := exec.Command(ff, "-v", "error", "-f", "lavfi", "-i", "testsrc2=s=128x96:r=25:d=2.4", "-f", "lavfi", "-i", "smptebars=s=128x96:r=25:d=2.6",
		"-filter_complex", "[0:v][1:v]concat=n=2:v=1:a=0[v]", "-map", "[v]",
		"-c:v", "libx264", "-preset", "veryfast", "-g", "6", "-keyint_min", "6", "-sc_threshold", "0", src).CombinedOutput(); err != nil {
		t.Fatalf("make the source: %v %s", err, out)
	}
	rotated := filepath.Join(dir, "rot.mp4")
	// -display_rotation from ffmpeg 6 on; 5.1 turns the rotate tag into a matrix.
	if exec.Command(ff, "-v", "error", "-display_rotation", "90", "-i", src, "-c", "copy", rotated).Run() != nil {
		if out, err := exec.Command(ff, "-v", "error", "-y", "-i", src, "-c", "copy", "-metadata:s:v", "rotate=90", rotated).CombinedOutput(); err != nil {
			t.Fatalf("make the rotated source: %v %s", err, out)
		}
	}
	b, _ := os.ReadFile(src)
	rb, _ := os.ReadFile(rotated)
	srv, up := newServer(t, map[string][]byte{"src.mp4": b, "rot.mp4": rb})
	plan := func(user, input string) *mj.Result {
		task := &mj.ChunkTask{Phase: mj.PhasePlan, Input: "video", Output: "out.mp4", ChunkSeconds: 2, MaxChunks: 64, SceneCuts: true}
		m := mj.Manifest{JobID: "job-1", Attempt: 1, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok",
			InputFiles:     map[string]string{"video": srv.URL + "/in/" + input},
			OutputNames:    []string{mj.ChunkPlanFile, mj.ChunkListFile, mj.ChunkSplitPattern},
			FFmpegCommands: []string{user}, AllowLoopback: true, Chunk: task}
		// In the sandbox, as a worker runs it: the scene probes too.
		r := &Runner{WorkDir: t.TempDir(), Log: io.Discard, FFmpeg: ff, Sandbox: &sandbox.Bwrap{}}
		res, err := r.Run(context.Background(), &m)
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
		return res
	}
	res := plan("-i {{video}} -c:v libx264 -crf 30 {{out.mp4}}", "src.mp4")
	if !res.Succeeded {
		t.Fatalf("plan: %s", res.ErrorMessage)
	}
	var list mj.ChunkList
	if err := json.Unmarshal(up.files["outputs/"+mj.ChunkListFile], &list); err != nil || len(list.Chunks) < 2 {
		t.Fatalf("chunks.json %s: %v", up.files["outputs/"+mj.ChunkListFile], err)
	}
	var c chunked.Chunk
	if err := json.Unmarshal(list.Chunks[1], &c); err != nil || math.Abs(c.Start-2.4) > 1e-6 || !c.SceneCut {
		t.Fatalf("chunk 1 %s: want it at the scene change, 2.4 s", list.Chunks[1])
	}
	if _, ok := up.files["outputs/"+mj.ChunkFileName(len(list.Chunks)-1)]; !ok {
		t.Fatalf("the split chunks were not uploaded: %v", uploadNames(up.files))
	}
	res = plan("-noautorotate -i {{video}} -c:v libx264 -crf 30 {{out.mp4}}", "rot.mp4")
	if res.Succeeded || !strings.Contains(res.ErrorMessage, "-noautorotate") {
		t.Fatalf("plan of a rotated source with -noautorotate: succeeded %v, %q", res.Succeeded, res.ErrorMessage)
	}
}
