package dispatcher

import (
	"testing"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// A chunked job with output_destinations: the leader's extension gives them to
// the stitch's job alone (the URLs stay under the parent's key), and the
// parent ends with the stitch's delivery on its output, as a single job's
// output records it; its URLs are deleted with its end.
func TestChunkedDestinationsReachTheParent(t *testing.T) {
	b := &blobMap{m: map[string][]byte{}}
	r := newPipelineRig(t, func(p *pipelines) { p.read = b.read })
	now := time.Now().UTC()
	parent := &mj.Job{ID: uuid.NewString(), AccountID: "acct", Status: mj.StatusQueued, Machine: "cpu",
		InputFiles: map[string]string{"video": "https://media.example/a.mp4"}, OutputNames: []string{"out.mp4"},
		FFmpegCommands: []string{"-i {{video}} -c:v libx264 -c:a aac {{out.mp4}}"}, TimeoutSeconds: 60,
		CreatedAt: now, QueuedAt: now, UpdatedAt: now,
		Destinations:    &mj.Destinations{URLs: map[string]string{"out.mp4": "https://media.example/b/out.mp4?X-Amz-Signature=5ec2"}},
		HasDestinations: true,
		Parallel:        &mj.Parallel{Mode: mj.ParallelChunked, ChunkSeconds: 2, MaxWorkers: 2, MaxChunks: 64}}
	p := mj.NewChunkedPipeline(parent, now)
	if _, err := r.s.CreateChunkedJob(r.ctx, parent, p, nil, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := r.s.MaterialisePipeline(r.ctx, p.ID, now); err != nil {
		t.Fatal(err)
	}
	planID := r.pipeline(p.ID).Steps[0].Jobs[0]
	r.succeedPlan(b, planID, 2)
	testenv.Eventually(t, time.Minute, "the pipeline extended and its jobs stored", func() bool {
		pl := r.pipeline(p.ID)
		return len(pl.Steps) == 4 && len(pl.Plan) == 0
	})
	pl := r.pipeline(p.ID)
	stitch := mj.ChunkedJobID(p.ID, mj.ChunkStepStitch, 0)
	for _, id := range pl.JobIDs() {
		if j := r.job(id); j.HasDestinations != (id == stitch) {
			t.Fatalf("job %s (%s) has destinations: %v", id, j.Pipeline.Step, j.HasDestinations)
		}
	}
	if d, err := r.s.Destinations(r.ctx, stitch); err != nil || d != nil {
		t.Fatalf("the stitch's own destinations: %+v, %v (the URLs stay under the parent's key)", d, err)
	}
	out := func(j *mj.Job) {
		j.Outputs = chunkOutputs(j, "k/"+j.ID+"/"+j.OutputNames[0])
		now := time.Now()
		j.StartedAt = &now
		j.Succeed(now, "")
	}
	for _, id := range pl.JobIDs() {
		if id != planID && id != stitch {
			r.end(id, out)
		}
	}
	testenv.Eventually(t, time.Minute, "the stitch released", func() bool { return len(r.job(stitch).Awaits) == 0 })
	b.put("k/"+stitch+"/verification.json", []byte(`{"pass":true}`))
	sent := &mj.Delivery{URL: "https://media.example/b/out.mp4", Status: "uploaded", HTTPStatus: 200, SHA256: "ab12", Kept: false}
	r.end(stitch, func(j *mj.Job) {
		now := time.Now()
		j.StartedAt = &now
		j.Outputs = []mj.Output{{Name: "out.mp4", Key: "k/" + stitch + "/out.mp4", Size: 10, Destination: sent},
			{Name: mj.ChunkVerification, Key: "k/" + stitch + "/verification.json"}}
		j.Succeed(now, "")
	})
	testenv.Eventually(t, time.Minute, "the parent succeeded", func() bool { return r.job(parent.ID).Status == mj.StatusSucceeded })
	j := r.job(parent.ID)
	if len(j.Outputs) != 1 || j.Outputs[0].Destination == nil || *j.Outputs[0].Destination != *sent || j.Outputs[0].Stored() {
		t.Fatalf("the parent's outputs %+v", j.Outputs)
	}
	if v := mj.View(j, func(k string) string { return "signed:" + k }); len(v.OutputFiles) != 0 || v.Outputs["out.mp4"].Destination == nil {
		t.Fatalf("the parent's view: output_files %v, outputs %+v", v.OutputFiles, v.Outputs)
	}
	if d, err := r.s.Destinations(r.ctx, parent.ID); err != nil || d != nil {
		t.Fatalf("the ended parent's destinations: %+v, %v", d, err)
	}
}
