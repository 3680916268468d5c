package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
)

// chunkedView is a chunked job's view: planned, its first chunk done, the
// second at 40 %, the third queued, the audio done and the stitch queued.
func chunkedView(verification string) *client.Job {
	pct := 40.0
	item := func(start, end string) map[string]string {
		return map[string]string{"start": start, "end": end, "frames": "50"}
	}
	return &client.Job{ID: "j", Status: mj.StatusRunning, Parallel: &mj.ParallelView{Mode: mj.ParallelChunked, ChunkSeconds: 2, MaxWorkers: 2,
		Verification: json.RawMessage(verification),
		Steps: []mj.StepView{
			{Name: "plan", Status: mj.StatusSucceeded, Jobs: []mj.StepJob{{ID: "p", Status: mj.StatusSucceeded}}},
			{Name: "encode", Status: mj.StatusRunning, Jobs: []mj.StepJob{
				{ID: "e0", Item: item("0.000000", "2.000000"), Status: mj.StatusSucceeded},
				{ID: "e1", Item: item("2.000000", "4.000000"), Status: mj.StatusRunning, Progress: &mj.Progress{Percent: &pct}},
				{ID: "e2", Item: item("4.000000", "6.000000"), Status: mj.StatusQueued}}},
			{Name: "audio", Status: mj.StatusSucceeded},
			{Name: "stitch", Status: mj.StatusQueued},
		}}}
}

// A chunked job's progress is summed up across its chunks: done of all,
// running, each chunk's span and state, the other steps; its verification
// report is cut to its verdict and each check.
func TestChunkProgress(t *testing.T) {
	p := progressOf(chunkedView(""))
	if p == nil || p.Summary != "1/3 chunks done, 1 running; stitch queued" || p.Total != 3 || p.Done != 1 || p.Running != 1 || p.Verification != nil {
		t.Fatalf("progress %+v", p)
	}
	if e := p.Each[1]; e.Start != "2" || e.End != "4" || e.Status != mj.StatusRunning || e.Percent == nil || *e.Percent != 40 || e.JobID != "e1" {
		t.Fatalf("chunk 1: %+v", e)
	}
	if p.Steps["stitch"] != mj.StatusQueued || p.Steps["encode"] != mj.StatusRunning {
		t.Fatalf("steps %v", p.Steps)
	}

	pass := `{"pass":true,"expected_frames":150,"packets":150,"decoded_frames":150,
		"chunks":[{"index":0,"expected_frames":75,"decoded_frames":75,"hashes_match":true},
			{"index":1,"expected_frames":75,"decoded_frames":75,"hashes_match":true,"seam":{"time":3,"keyframe":true,"closed":true,"gap":0}}],
		"timestamps":{"monotonic":true,"match_source":true},"duration":{"source":6,"output":6,"tolerance":0.04,"ok":true},
		"av":{"source":6,"output":6,"tolerance":0.04,"ok":true},"decode":{"clean":true}}`
	p = progressOf(chunkedView(pass))
	v := p.Verification
	if v == nil || !v.Pass || v.Frames != "150 in the source, 150 stitched, 150 decoded" || len(v.Checks) != 7 || !strings.HasSuffix(p.Summary, "; verification passed") {
		t.Fatalf("a passing report: %+v (%s)", v, p.Summary)
	}
	for k, ok := range v.Checks {
		if !ok {
			t.Fatalf("check %s of a passing report: %v", k, v.Checks)
		}
	}

	fail := strings.Replace(strings.Replace(pass, `"pass":true`, `"pass":false,"failures":["the seam before chunk 1 (3.000000 s) has a gap or overlap of 0.080000 s"]`, 1),
		`"gap":0`, `"gap":0.08`, 1)
	p = progressOf(chunkedView(fail))
	v = p.Verification
	if v == nil || v.Pass || v.Checks["seams"] || !v.Checks["frames"] || len(v.Failures) != 1 || !strings.HasSuffix(p.Summary, "; verification failed") {
		t.Fatalf("a failing report: %+v (%s)", v, p.Summary)
	}

	// Not planned yet; a job that is not chunked has none.
	j := chunkedView("")
	j.Parallel.Steps = j.Parallel.Steps[:1]
	j.Parallel.Steps[0].Status = mj.StatusQueued
	if p := progressOf(j); p.Total != 0 || !strings.HasPrefix(p.Summary, "chunks not planned yet") {
		t.Fatalf("before the plan: %+v", p)
	}
	if progressOf(&client.Job{ID: "x"}) != nil || progressOf(&client.Job{Parallel: &mj.ParallelView{Mode: mj.ParallelSingle}}) != nil {
		t.Fatal("progress of a job that is not chunked")
	}
	// The job tools' answer is the job's view with "chunks" beside its fields.
	b, _ := json.Marshal(result(chunkedView("")))
	var got map[string]any
	json.Unmarshal(b, &got)
	if got["id"] != "j" || got["chunks"].(map[string]any)["done"] != 1.0 || got["parallel"] == nil {
		t.Fatalf("result %s", b)
	}
}

// Over HTTP (a gateway on real etcd, no workers): run_job takes "parallel" as
// the API does and returns the chunked job with its chunks not planned yet;
// get_job says the same; check_job names why a command cannot be split.
func TestRunJobParallelOverHTTP(t *testing.T) {
	g := startMCPGateway(t)
	key := g.key(t, "mcp-chunked")
	endpoint := startMCP(t, Options{}, g.url)
	s := mcpConnect(t, newFromAddr("127.0.0.4", key), endpoint)

	tools, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tool := range tools.Tools {
		if tool.Name == "run_job" || tool.Name == "check_job" {
			if b, _ := json.Marshal(tool.InputSchema); !strings.Contains(string(b), `"max_workers"`) {
				t.Fatalf("%s's input schema has no parallel.max_workers: %s", tool.Name, b)
			}
		}
	}

	job := map[string]any{
		"input_files": map[string]string{"src": "https://media.example/talk.mp4"}, "output_files": []string{"out.mp4"},
		"ffmpeg_commands": []string{"-i {{src}} -vf fade=t=in:st=0:d=1 -c:v libx264 -c:a aac {{out.mp4}}"},
		"parallel":        map[string]any{"chunk_seconds": 2, "max_workers": 2},
	}
	if text, isErr := callTool(t, s, "check_job", job); !isErr || !strings.Contains(text, "- parallel: ") || !strings.Contains(text, "fade") {
		t.Fatalf("check_job of a command that cannot be split: %v %s", isErr, text)
	}
	job["ffmpeg_commands"] = []string{"-i {{src}} -c:v libx264 -c:a aac {{out.mp4}}"}
	if text, isErr := callTool(t, s, "check_job", job); isErr || !strings.Contains(text, `"mode":"chunked"`) || !strings.Contains(text, `"name":"stitch"`) {
		t.Fatalf("check_job: %v %s", isErr, text)
	}
	job["wait_seconds"] = 0
	job["parallel"] = map[string]any{"chunk_seconds": 2, "max_workers": 2, "scene_cuts": true, "quality": true}
	text, isErr := callTool(t, s, "run_job", job)
	var out struct {
		Job struct {
			ID       string `json:"id"`
			Parallel struct {
				Mode         string  `json:"mode"`
				ChunkSeconds float64 `json:"chunk_seconds"`
				MaxWorkers   int     `json:"max_workers"`
				SceneCuts    bool    `json:"scene_cuts"`
				Quality      bool    `json:"quality"`
				Steps        []struct {
					Name string `json:"name"`
				} `json:"steps"`
			} `json:"parallel"`
			Chunks *chunkProgress `json:"chunks"`
		} `json:"job"`
	}
	if isErr || json.Unmarshal([]byte(text), &out) != nil || out.Job.Parallel.Mode != "chunked" || out.Job.Parallel.ChunkSeconds != 2 || out.Job.Parallel.MaxWorkers != 2 ||
		!out.Job.Parallel.SceneCuts || !out.Job.Parallel.Quality {
		t.Fatalf("run_job: %v %s", isErr, text)
	}
	if c := out.Job.Chunks; c == nil || c.Total != 0 || !strings.HasPrefix(c.Summary, "chunks not planned yet") || c.Steps["plan"] != mj.StatusQueued || len(out.Job.Parallel.Steps) != 1 {
		t.Fatalf("run_job's chunks: %s", text)
	}
	text, isErr = callTool(t, s, "get_job", map[string]any{"id": out.Job.ID})
	if isErr || !strings.Contains(text, `"chunks":{"summary":"chunks not planned yet`) {
		t.Fatalf("get_job: %v %s", isErr, text)
	}
	if text, isErr = callTool(t, s, "cancel_job", map[string]any{"id": out.Job.ID}); isErr || !strings.Contains(text, `"status":"cancelled"`) {
		t.Fatalf("cancel_job: %v %s", isErr, text)
	}
}
