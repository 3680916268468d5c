package mediajobs

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
	"time"
)

// With "quality", the plan keeps the source it fetched (an intermediate
// output, as its chunks) and the extension adds the step reference: one job,
// beside the encodes (it awaits nothing), the user's command over the plan's
// copy of the source, its output intermediate; the stitch takes it and the
// plan's copy, awaits it and needs its step, and the audio reads the copy
// too: the user's URL is the plan's input alone, fetched once under the
// account's cap. Without, no such step or copy; the stitch takes neither and
// the audio fetches the source again, capped as the plan. A plan that kept
// no copy though asked is refused.
func TestExtendChunkedReferenceOnlyWithQuality(t *testing.T) {
	now := time.Unix(1000, 0)
	list := &ChunkList{Aux: true, Chunks: []json.RawMessage{[]byte(`{"start":0,"end":2}`), []byte(`{"start":2,"end":4}`)}}
	var planID string
	copied := func() string { return "job:" + planID + "/" + ChunkSourceFile }
	extend := func(quality bool) ([]PipelineStep, []*Job) {
		j := &Job{ID: "11111111-2222-3333-4444-555555555555", AccountID: "a", Machine: "cpu", TimeoutSeconds: 60,
			InputFiles: map[string]string{"aux": "https://media.example/src.mp4"}, OutputNames: []string{"out.mp4"},
			FFmpegCommands: []string{"-i {{aux}} -c:v libx264 -crf 28 {{out.mp4}}"},
			MaxInputBytes:  1 << 20, Parallel: &Parallel{Mode: ParallelChunked, ChunkSeconds: 2, MaxWorkers: 1, MaxChunks: 64, Quality: quality}}
		p := NewChunkedPipeline(j, now)
		plan := *p.Plan[0]
		if slices.Contains(plan.OutputNames, ChunkSourceFile) != quality || !plan.IntermediateOutputs() || !p.Steps[0].Intermediate {
			t.Fatalf("quality %v: plan outputs %v, intermediate %v", quality, plan.OutputNames, plan.Pipeline)
		}
		plan.Status = StatusSucceeded
		planID = plan.ID
		for _, n := range []string{ChunkPlanFile, ChunkListFile, ChunkFileName(0), ChunkFileName(1)} {
			plan.Outputs = append(plan.Outputs, Output{Name: n, Key: "k/" + n})
		}
		if quality {
			if _, _, err := ExtendChunked(p, j, &plan, list, now); err == nil || !strings.Contains(err.Error(), ChunkSourceFile) {
				t.Fatalf("a plan without its copy of the source: %v", err)
			}
			plan.Outputs = append(plan.Outputs, Output{Name: ChunkSourceFile, Key: "k/" + ChunkSourceFile})
		}
		steps, jobs, err := ExtendChunked(p, j, &plan, list, now)
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range jobs {
			for _, v := range c.InputFiles {
				if strings.HasPrefix(v, "https:") && (quality || c.Chunk.Phase != PhaseAudio) {
					t.Fatalf("quality %v: step %s fetches the user's URL again", quality, c.Pipeline.Step)
				}
			}
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
	if audio := jobs[len(jobs)-2]; audio.InputFiles["aux"] != "https://media.example/src.mp4" || audio.InputCap() != 1<<20 {
		t.Fatalf("audio without quality: inputs %v, cap %d", audio.InputFiles, audio.InputCap())
	}

	steps, jobs = extend(true)
	if got := names(steps); !slices.Equal(got, []string{"encode", "audio", "reference", "stitch"}) {
		t.Fatalf("steps with quality: %v", got)
	}
	ref, stitch := jobs[len(jobs)-2], jobs[len(jobs)-1]
	refStep, stitchStep := steps[2], steps[3]
	if ref.Chunk.Phase != PhaseReference || ref.Chunk.Input != "aux" || ref.Chunk.Output != "out.mp4" || len(ref.Awaits) != 0 ||
		ref.InputFiles["aux"] != copied() || ref.InputKeys["aux"] != "k/"+ChunkSourceFile ||
		!slices.Equal(ref.OutputNames, []string{ChunkReferenceFile}) || ref.ID != ChunkedJobID(ref.Pipeline.ID, ChunkStepReference, 0) {
		t.Fatalf("reference job %+v, task %+v", ref, ref.Chunk)
	}
	if !ref.IntermediateOutputs() || !refStep.Intermediate || !slices.Equal(refStep.Jobs, []string{ref.ID}) || len(refStep.Needs) != 0 {
		t.Fatalf("the reference step's output must be intermediate, beside the encodes: step %+v, job's pipeline %+v", refStep, ref.Pipeline)
	}
	if stitch.InputFiles[ChunkReferenceInput] != "job:"+ref.ID+"/"+ChunkReferenceFile || stitch.InputFiles[ChunkSourceInput] != copied() ||
		stitch.InputKeys[ChunkSourceInput] != "k/"+ChunkSourceFile || !slices.Contains(stitch.Awaits, ref.ID) || !slices.Contains(stitchStep.Needs, ChunkStepReference) ||
		// The user's input is named "aux": the stitch's own "aux" stays the audio step's.
		!strings.HasPrefix(stitch.InputFiles["aux"], "job:"+jobs[len(jobs)-3].ID+"/") {
		t.Fatalf("stitch with quality: inputs %v, keys %v, awaits %v, needs %v", stitch.InputFiles, stitch.InputKeys, stitch.Awaits, stitchStep.Needs)
	}
	if stitch.Chunk.Phase != PhaseStitch || stitch.Pipeline.Intermediate {
		t.Fatalf("stitch %+v", stitch.Pipeline)
	}
	if audio := jobs[len(jobs)-3]; audio.InputFiles["aux"] != copied() || audio.InputKeys["aux"] != "k/"+ChunkSourceFile {
		t.Fatalf("audio with quality: inputs %v, keys %v", audio.InputFiles, audio.InputKeys)
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
