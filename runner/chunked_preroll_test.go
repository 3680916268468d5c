package runner

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/chunked"
	"github.com/mediajobs/mediajobs/testenv"
)

// A graph that reads the frames around each (yadif) is planned with pre- and
// post-roll (chunked.Source.Roll): the plan's chunks carry them, the split of
// a middle chunk starts a GOP early, and its encode yields the chunk's own
// frames alone.
func TestChunkedPlanRolls(t *testing.T) {
	inputs := map[string][]byte{"src.mp4": chunkSource(t)}
	srv, up := newServer(t, inputs)
	user := "-i {{video}} -vf yadif -c:v libx264 -preset veryfast -crf 30 -an {{out.mp4}}"
	in := func(name string) string { return srv.URL + "/in/" + name }
	plan := &mj.ChunkTask{Phase: mj.PhasePlan, Input: "video", Output: "out.mp4", ChunkSeconds: 1, MaxChunks: 64}
	res := run(t, srv, mj.Manifest{InputFiles: map[string]string{"video": in("src.mp4")}, OutputNames: []string{mj.ChunkPlanFile, mj.ChunkListFile, mj.ChunkSplitPattern},
		FFmpegCommands: []string{user}, AllowLoopback: true, Chunk: plan})
	if !res.Succeeded {
		t.Fatalf("plan: %s", res.ErrorMessage)
	}
	var list mj.ChunkList
	if err := json.Unmarshal(up.files["outputs/"+mj.ChunkListFile], &list); err != nil || len(list.Chunks) < 3 {
		t.Fatalf("chunks.json %s: %v", up.files["outputs/"+mj.ChunkListFile], err)
	}
	var c chunked.Chunk
	if err := json.Unmarshal(list.Chunks[1], &c); err != nil {
		t.Fatal(err)
	}
	if c.PreRoll != 1 || c.PostRoll != 1 || c.SplitKey >= c.Start {
		t.Fatalf("chunk 1 %s: want a frame of pre- and post-roll, split from a keyframe before its own", list.Chunks[1])
	}
	inputs["chunk"] = up.files["outputs/"+mj.ChunkFileName(1)]
	enc := &mj.ChunkTask{Phase: mj.PhaseEncode, Input: "video", Output: "out.mp4", Chunk: list.Chunks[1]}
	res = run(t, srv, mj.Manifest{InputFiles: map[string]string{"chunk": in("chunk")}, OutputNames: []string{mj.ChunkFileName(1)},
		FFmpegCommands: []string{user}, AllowLoopback: true, Chunk: enc})
	if !res.Succeeded {
		t.Fatalf("encode: %s", res.ErrorMessage)
	}
	p := filepath.Join(t.TempDir(), "enc.nut")
	if err := os.WriteFile(p, up.files["outputs/"+mj.ChunkFileName(1)], 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(testenv.Binary(t, "ffprobe"), "-v", "error", "-count_frames", "-select_streams", "v:0",
		"-show_entries", "stream=nb_read_frames", "-of", "csv=p=0", p).Output()
	if err != nil || strings.TrimSpace(string(out)) != "24" || c.Frames != 24 {
		t.Fatalf("the encoded chunk has %q frames (%v), the plan %d; want 24", out, err, c.Frames)
	}
}
