package mediajobs

import (
	"encoding/json"
	"testing"
	"time"
)

// scene_cuts reaches the plan step's task, and a chunk whose cut moved to a
// scene change says so in its encode step's item.
func TestChunkedSceneCutsReachThePlanAndTheItems(t *testing.T) {
	now := time.Unix(1000, 0)
	j := &Job{ID: "11111111-2222-3333-4444-555555555555", AccountID: "a", Machine: "cpu", TimeoutSeconds: 60,
		InputFiles: map[string]string{"v": "https://media.example/src.mp4"}, OutputNames: []string{"out.mkv"},
		FFmpegCommands: []string{"-i {{v}} -c:v libx264 {{out.mkv}}"},
		Parallel:       &Parallel{Mode: ParallelChunked, ChunkSeconds: 2, MaxWorkers: 2, MaxChunks: 64, SceneCuts: true}}
	p := NewChunkedPipeline(j, now)
	if !p.Plan[0].Chunk.SceneCuts {
		t.Fatalf("plan task %+v: want scene_cuts", p.Plan[0].Chunk)
	}
	plan := *p.Plan[0]
	plan.Status = StatusSucceeded
	for _, n := range []string{ChunkPlanFile, ChunkListFile, ChunkFileName(0), ChunkFileName(1)} {
		plan.Outputs = append(plan.Outputs, Output{Name: n, Key: "k/" + n})
	}
	list := &ChunkList{Chunks: []json.RawMessage{[]byte(`{"start":0,"end":2.4,"frames":60}`), []byte(`{"start":2.4,"end":5,"frames":65,"scene_cut":true}`)}}
	steps, _, err := ExtendChunked(p, j, &plan, list, now)
	if err != nil {
		t.Fatal(err)
	}
	items := steps[0].Items
	if len(items) != 2 || items[0]["scene_cut"] != "" || items[1]["scene_cut"] != "true" || items[1]["start"] != "2.400000" {
		t.Fatalf("encode items %v: want the second marked scene_cut", items)
	}
}
