package cluster

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"
)

// A chunked job (docs/chunked.md) on a docker pool of the worker image: its
// plan, a job per chunk, the audio and the stitch each run in the image's
// container (probe, split, encode, stitch and verify with the image's
// ffmpeg); the job succeeds with a report that passes and an output that
// downloads with every frame of the source. raw_exec: TestChunkedEndToEnd
// (e2e/devstack).
func TestChunkedOnDocker(t *testing.T) {
	needDocker(t)
	c := e2e.NewCluster(t, e2e.Agent, dockerPool(""))
	c.StartDispatcher("d")
	src := uploadSource(t, c)
	r := e2e.Call(t, "POST", c.APIURL+"/api/ffmpeg", c.Key, map[string]any{
		"input_files": map[string]string{"src": src}, "output_files": []string{"out.mp4"}, "machine": "docker",
		"ffmpeg_commands": []string{"-i {{src}} -c:v libx264 -preset veryfast -crf 30 -c:a aac -b:a 64k -movflags +faststart {{out.mp4}}"},
		"parallel":        map[string]any{"chunk_seconds": 2, "max_workers": 2}})
	if r.Status != 200 {
		t.Fatalf("create: HTTP %d %s", r.Status, r.Body)
	}
	id := r.Data(t)["id"].(string)
	j := c.WaitStatus(id, 6*time.Minute, "succeeded", "failed", "cancelled")
	p, _ := j["parallel"].(map[string]any)
	if j["status"] != "succeeded" {
		t.Fatalf("chunked job %v: %v (%v)", j["status"], j["error_message"], p)
	}
	if v, _ := p["verification"].(map[string]any); v == nil || v["pass"] != true || v["decoded_frames"] != 150.0 {
		t.Fatalf("verification %v", p["verification"])
	}
	// The encode jobs hashed their chunks' packets in the sandbox, so the
	// stitch decoded the seams alone (docs/chunked.md#reading-the-verification-report).
	if d, _ := p["verification"].(map[string]any)["decode"].(map[string]any); d["mode"] != "seams" || d["clean"] != true {
		t.Fatalf("verification's decode %v, want the seams decoded", d)
	}
	// Every job of its pipeline ran on the docker pool, the encode a job per chunk.
	names := map[string]int{}
	for _, s := range p["steps"].([]any) {
		s := s.(map[string]any)
		for _, sj := range e2e.StepJobs(s) {
			names[s["name"].(string)]++
			if st := c.Stored(sj["id"].(string)); st.Machine != "docker" || st.Status != "succeeded" {
				t.Fatalf("step %v's job %s: machine %s, %s", s["name"], st.ID, st.Machine, st.Status)
			}
		}
	}
	if names["plan"] != 1 || names["encode"] != 3 || names["audio"] != 1 || names["stitch"] != 1 {
		t.Fatalf("jobs per step %v, want plan 1, encode 3, audio 1, stitch 1", names)
	}
	out := e2e.Download(t, j["output_files"].(map[string]any)["out.mp4"].(string))
	if n := countFrames(t, out); n != 150 {
		t.Fatalf("the output has %d frames, the source 150", n)
	}
	if streams := e2e.Probe(t, out)["streams"].([]any); len(streams) != 2 {
		t.Fatalf("the output's streams: %v", streams)
	}
}

// uploadSource makes a 6 s source (160x120, a keyframe every second, AAC
// audio) and uploads it to c as a temporary file; it returns its link.
func uploadSource(t *testing.T, c *e2e.Cluster) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "src.mp4")
	out, err := exec.Command("ffmpeg", "-v", "error", "-f", "lavfi", "-i", "testsrc=s=160x120:r=25:d=6", "-f", "lavfi", "-i", "sine=f=440:r=48000:d=6",
		"-c:v", "libx264", "-preset", "veryfast", "-g", "25", "-keyint_min", "25", "-sc_threshold", "0", "-c:a", "aac", "-b:a", "64k", p).CombinedOutput()
	if err != nil {
		t.Fatalf("make the source: %v %s", err, out)
	}
	b, _ := os.ReadFile(p)
	return e2e.UploadTmp(t, c.APIURL, c.Key, b)
}

// countFrames counts a file's video frames (its packets).
func countFrames(t *testing.T, path string) int {
	t.Helper()
	out, err := exec.Command(e2e.Ffprobe, "-v", "error", "-select_streams", "v:0", "-count_packets", "-show_entries", "stream=nb_read_packets", "-of", "csv=p=0", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	n, _ := strconv.Atoi(strings.TrimSpace(string(out)))
	return n
}
