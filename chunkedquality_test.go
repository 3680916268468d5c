package mediajobs

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// With "quality", the extension adds the step reference: one job, beside the
// encodes (it awaits nothing), the user's command over the source as the
// plan fetched it, its output intermediate; the stitch takes it and the
// source, awaits it and needs its step. Without, no such step, and the
// stitch takes neither.
func TestExtendChunkedReferenceOnlyWithQuality(t *testing.T) {
	now := time.Unix(1000, 0)
	list := &ChunkList{Aux: true, Chunks: []json.RawMessage{[]byte(`{"start":0,"end":2}`), []byte(`{"start":2,"end":4}`)}}
	extend := func(quality bool) ([]PipelineStep, []*Job) {
		j := &Job{ID: "11111111-2222-3333-4444-555555555555", AccountID: "a", Machine: "cpu", TimeoutSeconds: 60,
			InputFiles: map[string]string{"aux": "https://media.example/src.mp4"}, OutputNames: []string{"out.mp4"},
			FFmpegCommands: []string{"-i {{aux}} -c:v libx264 -crf 28 {{out.mp4}}"},
			Parallel:       &Parallel{Mode: ParallelChunked, ChunkSeconds: 2, MaxWorkers: 1, MaxChunks: 64, Quality: quality}}
		p := NewChunkedPipeline(j, now)
		plan := *p.Plan[0]
		plan.Status, plan.InputKeys = StatusSucceeded, map[string]string{"aux": "src-key"}
		for _, n := range []string{ChunkPlanFile, ChunkListFile, ChunkFileName(0), ChunkFileName(1)} {
			plan.Outputs = append(plan.Outputs, Output{Name: n, Key: "k/" + n})
		}
		steps, jobs, err := ExtendChunked(p, j, &plan, list, now)
		if err != nil {
			t.Fatal(err)
		}
		return steps, jobs
	}
	names := func(steps []PipelineStep) []string {
		var n []string
		for _, s := range steps {
			n = append(n, s.Name)
		}
		return n
	}

	steps, jobs := extend(false)
	stitch := jobs[len(jobs)-1]
	if got := names(steps); !slices.Equal(got, []string{"encode", "audio", "stitch"}) {
		t.Fatalf("steps without quality: %v", got)
	}
	if _, ok := stitch.InputFiles[ChunkReferenceInput]; ok || stitch.InputFiles[ChunkSourceInput] != "" || len(stitch.Awaits) != 3 {
		t.Fatalf("stitch without quality: inputs %v, awaits %v", stitch.InputFiles, stitch.Awaits)
	}

	steps, jobs = extend(true)
	if got := names(steps); !slices.Equal(got, []string{"encode", "audio", "reference", "stitch"}) {
		t.Fatalf("steps with quality: %v", got)
	}
	ref, stitch := jobs[len(jobs)-2], jobs[len(jobs)-1]
	refStep, stitchStep := steps[2], steps[3]
	if ref.Chunk.Phase != PhaseReference || ref.Chunk.Input != "aux" || ref.Chunk.Output != "out.mp4" || len(ref.Awaits) != 0 ||
		ref.InputFiles["aux"] != "https://media.example/src.mp4" || ref.InputKeys["aux"] != "src-key" ||
		!slices.Equal(ref.OutputNames, []string{ChunkReferenceFile}) || ref.ID != ChunkedJobID(ref.Pipeline.ID, ChunkStepReference, 0) {
		t.Fatalf("reference job %+v, task %+v", ref, ref.Chunk)
	}
	if !ref.IntermediateOutputs() || !refStep.Intermediate || !slices.Equal(refStep.Jobs, []string{ref.ID}) || len(refStep.Needs) != 0 {
		t.Fatalf("the reference step's output must be intermediate, beside the encodes: step %+v, job's pipeline %+v", refStep, ref.Pipeline)
	}
	if stitch.InputFiles[ChunkReferenceInput] != "job:"+ref.ID+"/"+ChunkReferenceFile || stitch.InputFiles[ChunkSourceInput] != "https://media.example/src.mp4" ||
		stitch.InputKeys[ChunkSourceInput] != "src-key" || !slices.Contains(stitch.Awaits, ref.ID) || !slices.Contains(stitchStep.Needs, ChunkStepReference) ||
		// The user's input is named "aux": the stitch's own "aux" stays the audio step's.
		!strings.HasPrefix(stitch.InputFiles["aux"], "job:"+jobs[len(jobs)-3].ID+"/") {
		t.Fatalf("stitch with quality: inputs %v, keys %v, awaits %v, needs %v", stitch.InputFiles, stitch.InputKeys, stitch.Awaits, stitchStep.Needs)
	}
	if stitch.Chunk.Phase != PhaseStitch || stitch.Pipeline.Intermediate {
		t.Fatalf("stitch %+v", stitch.Pipeline)
	}
}

// A report too long for the parent's record keeps its quality summary, its
// seams dropped first.
func TestBoundVerificationKeepsQuality(t *testing.T) {
	seams := make([]map[string]any, 200)
	for i := range seams {
		seams[i] = map[string]any{"chunk": i + 1, "frame": i * 100, "psnr_delta": 0.01}
	}
	rep, _ := json.Marshal(map[string]any{"pass": true, "expected_frames": 20000, "packets": 20000, "decoded_frames": 20000,
		"quality": map[string]any{"psnr_delta": -0.05, "worst_seam_psnr_delta": -0.3, "vmaf": "libvmaf", "seams": seams}})
	if len(rep) <= MaxVerificationBytes {
		t.Fatalf("the report (%d bytes) should be over the bound", len(rep))
	}
	b := BoundVerification(rep)
	var got struct {
		Pass    bool                       `json:"pass"`
		Quality map[string]json.RawMessage `json:"quality"`
	}
	if err := json.Unmarshal(b, &got); err != nil || len(b) > MaxVerificationBytes || !got.Pass || got.Quality["seams"] != nil ||
		string(got.Quality["worst_seam_psnr_delta"]) != "-0.3" || string(got.Quality["vmaf"]) != `"libvmaf"` {
		t.Fatalf("bounded %s: %v", b, err)
	}
}
