package mediajobs

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"
)

// A chunked pipeline's jobs are named by its id and their places: planned
// twice (a leader that died half-way), the same jobs; the parent keeps no
// awaits (its plan job takes them), encode i waits for encode i-max_workers
// without taking its file, and the stitch takes every chunk, the plan and
// the audio.
func TestExtendChunkedIsDeterministic(t *testing.T) {
	now := time.Unix(1000, 0)
	parent := func() *Job {
		return &Job{ID: "11111111-2222-3333-4444-555555555555", AccountID: "a", Machine: "cpu", TimeoutSeconds: 60,
			InputFiles: map[string]string{"v": "job:99999999-2222-3333-4444-555555555555/src.mp4"}, Awaits: []string{"99999999-2222-3333-4444-555555555555"},
			OutputNames: []string{"out.mkv"}, FFmpegCommands: []string{"-i {{v}} -c:v libx264 {{out.mkv}}"},
			MaxInputBytes: 1 << 30, Parallel: &Parallel{Mode: ParallelChunked, ChunkSeconds: 2, MaxWorkers: 2, MaxChunks: 64}}
	}
	plan := func(p *Pipeline) *Job {
		j := *p.Plan[0]
		j.Status, j.Awaits, j.InputKeys = StatusSucceeded, nil, map[string]string{"v": "src-key"}
		for _, n := range []string{ChunkPlanFile, ChunkListFile, ChunkFileName(0), ChunkFileName(1), ChunkFileName(2)} {
			j.Outputs = append(j.Outputs, Output{Name: n, Key: "k/" + n})
		}
		return &j
	}
	list := &ChunkList{Aux: true, Chunks: []json.RawMessage{[]byte(`{"start":0,"end":2}`), []byte(`{"start":2,"end":4}`), []byte(`{"start":4,"end":5}`)}}
	var runs [2][]*Job
	for k := range runs {
		j := parent()
		p := NewChunkedPipeline(j, now)
		if j.Awaits != nil || j.Parallel.PipelineID != p.ID || p.Plan[0].Awaits[0] != "99999999-2222-3333-4444-555555555555" {
			t.Fatalf("parent %+v, plan job %+v", j, p.Plan[0])
		}
		steps, jobs, err := ExtendChunked(p, j, plan(p), list, now)
		if err != nil || len(steps) != 3 || len(jobs) != 5 {
			t.Fatalf("extend: %d steps, %d jobs, %v", len(steps), len(jobs), err)
		}
		runs[k] = jobs
	}
	if !reflect.DeepEqual(runs[0], runs[1]) {
		t.Fatal("two extensions of the same plan differ")
	}
	jobs := runs[0]
	if jobs[0].Awaits != nil || jobs[1].Awaits != nil || !reflect.DeepEqual(jobs[2].Awaits, []string{jobs[0].ID}) || jobs[2].InputFiles["chunk"] != "job:"+jobs[2].InputFiles["chunk"][4:] {
		t.Fatalf("encode awaits: %v %v %v", jobs[0].Awaits, jobs[1].Awaits, jobs[2].Awaits)
	}
	audio, stitch := jobs[3], jobs[4]
	if audio.OutputNames[0] != "aux.mkv" || audio.InputKeys["v"] != "src-key" || len(stitch.Awaits) != 4 || stitch.InputKeys["plan"] != "k/plan.json" ||
		stitch.InputFiles["aux"] != "job:"+audio.ID+"/aux.mkv" || stitch.OutputNames[0] != "out.mkv" {
		t.Fatalf("audio %+v\nstitch %+v", audio, stitch)
	}
	// verify: each encode writes its chunk's frame hashes, which the stitch
	// takes beside the chunk.
	for i, e := range jobs[:3] {
		if !reflect.DeepEqual(e.OutputNames, []string{ChunkFileName(i), ChunkHashesFileName(i)}) ||
			stitch.InputFiles[ChunkInputName(i)] != "job:"+e.ID+"/"+ChunkFileName(i) || stitch.InputFiles[ChunkHashesInputName(i)] != "job:"+e.ID+"/"+ChunkHashesFileName(i) {
			t.Fatalf("encode %d outputs %v, stitch inputs %v", i, e.OutputNames, stitch.InputFiles)
		}
	}
	// A list past max_chunks is refused.
	over := parent()
	over.Parallel.MaxChunks = 2
	op := NewChunkedPipeline(over, now)
	if _, _, err := ExtendChunked(op, over, plan(op), list, now); err == nil || !strings.Contains(err.Error(), "max_chunks (2)") {
		t.Fatalf("3 chunks over max_chunks 2: %v", err)
	}
	// The account's max_input_bytes caps every fetch of the user's source
	// (the plan's, the audio step's), not the internal steps' inputs (every
	// chunk, in the stitch).
	pp := NewChunkedPipeline(parent(), now)
	if pp.Plan[0].MaxInputBytes != 1<<30 || pp.Plan[0].InputCap() != 1<<30 || !pp.Plan[0].IntermediateOutputs() || !pp.Steps[0].Intermediate {
		t.Fatalf("plan job's cap %d, intermediate %v", pp.Plan[0].InputCap(), pp.Plan[0].Pipeline)
	}
	for _, c := range jobs {
		want := int64(0)
		if c.Chunk.Phase == PhaseAudio {
			want = 1 << 30
		}
		if c.MaxInputBytes != want || c.InputCap() != want {
			t.Fatalf("%s (%s) capped at %d bytes of inputs, want %d", c.ID, c.Chunk.Phase, c.InputCap(), want)
		}
		capped := *c
		capped.MaxInputBytes = 1 << 20 // the store sets every job's
		if got := capped.InputCap(); got != 0 && c.Chunk.Phase != PhaseAudio || got != 1<<20 && c.Chunk.Phase == PhaseAudio {
			t.Fatalf("%s (%s): cap %d from a stored 1 MiB", c.ID, c.Chunk.Phase, got)
		}
	}
}

// A chunked job's output_destinations are delivered by its stitch alone (the
// verified file, under the parent's name): no other step's job has them, nor
// any job of a parent without them.
func TestExtendChunkedDestinationsOnTheStitch(t *testing.T) {
	now := time.Unix(1000, 0)
	for _, dests := range []bool{true, false} {
		j := &Job{ID: "11111111-2222-3333-4444-555555555555", AccountID: "a", Machine: "cpu", TimeoutSeconds: 60,
			InputFiles: map[string]string{"v": "https://media.example/v.mp4"}, OutputNames: []string{"out.mp4"},
			FFmpegCommands: []string{"-i {{v}} -c:v libx264 {{out.mp4}}"}, HasDestinations: dests,
			Parallel: &Parallel{Mode: ParallelChunked, ChunkSeconds: 2, MaxWorkers: 2, MaxChunks: 64, Quality: true}}
		p := NewChunkedPipeline(j, now)
		plan := *p.Plan[0]
		if plan.HasDestinations || plan.ChunkStitch() {
			t.Fatalf("destinations %v: the plan job has destinations %v, stitch %v", dests, plan.HasDestinations, plan.ChunkStitch())
		}
		plan.Status = StatusSucceeded
		for _, n := range []string{ChunkPlanFile, ChunkListFile, ChunkFileName(0), ChunkFileName(1), ChunkSourceFile} {
			plan.Outputs = append(plan.Outputs, Output{Name: n, Key: "k/" + n})
		}
		list := &ChunkList{Aux: true, Chunks: []json.RawMessage{[]byte(`{"start":0,"end":2}`), []byte(`{"start":2,"end":3}`)}}
		_, jobs, err := ExtendChunked(p, j, &plan, list, now)
		if err != nil || len(jobs) != 5 { // two encodes, audio, reference, stitch
			t.Fatalf("extend: %d jobs, %v", len(jobs), err)
		}
		stitches := 0
		for _, c := range jobs {
			isStitch := c.Pipeline.Step == ChunkStepStitch
			if c.ChunkStitch() != isStitch {
				t.Fatalf("%s: ChunkStitch %v", c.Pipeline.Step, c.ChunkStitch())
			}
			if isStitch {
				stitches++
				if c.HasDestinations != dests || c.OutputNames[0] != "out.mp4" || c.Destinations != nil {
					t.Fatalf("destinations %v: the stitch has %v (URLs %v), output %v", dests, c.HasDestinations, c.Destinations, c.OutputNames)
				}
			} else if c.HasDestinations {
				t.Fatalf("step %s's job has destinations", c.Pipeline.Step)
			}
		}
		if stitches != 1 {
			t.Fatalf("%d stitch jobs", stitches)
		}
	}
}
