package devstack

import (
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/mediajobs/mediajobs/e2e"
)

// `mediajobs mcp` runs a chunked job from a local file (run_job with
// "parallel", as the API takes it), waits for it and returns it with its
// chunks summed up and its verification's verdict; the output it saved has
// every frame of the source.
func TestMCPRunsAChunkedJob(t *testing.T) {
	e2e.NeedStack(t)
	t.Parallel()
	src := chunkedSourceFile(t, "160x120")
	dir := t.TempDir()
	s := mcpSession(t)
	text, isErr := callTool(t, s, "run_job", map[string]any{
		"input_files": map[string]string{"src": src}, "output_files": []string{"out.mp4"},
		"ffmpeg_commands": []string{"-i {{src}} -c:v libx264 -preset veryfast -crf 30 -c:a aac -b:a 64k {{out.mp4}}"},
		"parallel":        map[string]any{"chunk_seconds": 2, "max_workers": 2},
		"wait_seconds":    300, "download_dir": dir,
	})
	var out struct {
		Job struct {
			Status string `json:"status"`
			Chunks struct {
				Summary      string `json:"summary"`
				Total        int    `json:"total"`
				Done         int    `json:"done"`
				Verification struct {
					Pass   bool            `json:"pass"`
					Checks map[string]bool `json:"checks"`
				} `json:"verification"`
			} `json:"chunks"`
		} `json:"job"`
		Downloaded map[string]string `json:"downloaded"`
	}
	if isErr || json.Unmarshal([]byte(text), &out) != nil || out.Job.Status != "succeeded" {
		t.Fatalf("run_job: %v %s", isErr, text)
	}
	c := out.Job.Chunks
	if c.Total != 3 || c.Done != 3 || c.Summary != "3/3 chunks done; verification passed" || !c.Verification.Pass || len(c.Verification.Checks) != 7 {
		t.Fatalf("run_job's chunks: %+v", c)
	}
	if n := frames(t, filepath.Join(dir, "out.mp4")); n != 150 {
		t.Fatalf("the saved output has %d frames, the source 150 (%v)", n, out.Downloaded)
	}
}
