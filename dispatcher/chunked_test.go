package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// blobMap stands in for the store's blobs the chunked pipeline reads.
type blobMap struct {
	mu sync.Mutex
	m  map[string][]byte
}

func (b *blobMap) put(k string, v []byte) { b.mu.Lock(); b.m[k] = v; b.mu.Unlock() }
func (b *blobMap) read(_ context.Context, k string) ([]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[k]
	if !ok {
		return nil, fmt.Errorf("no blob %s", k)
	}
	return v, nil
}

// newChunkedJob stores a chunked parent (max_workers 2) and its pipeline as
// the gateway does, and returns them.
func (r *pipelineRig) newChunkedJob() (*mj.Job, *mj.Pipeline) {
	r.t.Helper()
	now := time.Now().UTC()
	j := &mj.Job{ID: uuid.NewString(), AccountID: "acct", Status: mj.StatusQueued, Machine: "cpu",
		InputFiles: map[string]string{"video": "https://media.example/a.mp4"}, OutputNames: []string{"out.mp4"},
		FFmpegCommands: []string{"-i {{video}} -c:v libx264 -c:a aac {{out.mp4}}"}, TimeoutSeconds: 60,
		CreatedAt: now, QueuedAt: now, UpdatedAt: now,
		Parallel: &mj.Parallel{Mode: mj.ParallelChunked, ChunkSeconds: 2, MaxWorkers: 2, MaxChunks: 64}}
	p := mj.NewChunkedPipeline(j, now)
	stored, err := r.s.CreateChunkedJob(r.ctx, j, p, nil, store.Limits{})
	if err != nil {
		r.t.Fatal(err)
	}
	if _, err := r.s.MaterialisePipeline(r.ctx, p.ID, now); err != nil {
		r.t.Fatal(err)
	}
	return stored, r.pipeline(p.ID)
}

// succeedPlan ends the plan job with n chunks and the files that go with them.
// chunkOutputs are what job j made, as the runner uploads them: its first
// output at key, and an encode's chunk hashes (mj.ChunkHashesFileName),
// which the stitch takes too, beside it.
func chunkOutputs(j *mj.Job, key string) []mj.Output {
	outs := []mj.Output{{Name: j.OutputNames[0], Key: key}}
	if j.Chunk != nil && j.Chunk.Phase == mj.PhaseEncode {
		for _, n := range j.OutputNames[1:] {
			outs = append(outs, mj.Output{Name: n, Key: key + "/" + n})
		}
	}
	return outs
}

func (r *pipelineRig) succeedPlan(b *blobMap, planID string, n int) {
	r.t.Helper()
	if !r.trySucceedPlan(b, planID, n) {
		r.t.Fatalf("plan job %s already ended", planID)
	}
}

// trySucceedPlan is succeedPlan, unless the plan job already ended (the
// leader cancelled it): false then.
func (r *pipelineRig) trySucceedPlan(b *blobMap, planID string, n int) bool {
	r.t.Helper()
	list := mj.ChunkList{Aux: true}
	var outs []mj.Output
	for i := range n {
		c, _ := json.Marshal(map[string]any{"index": i, "start": 2 * i, "end": 2*i + 2, "frames": 50})
		list.Chunks = append(list.Chunks, c)
		outs = append(outs, mj.Output{Name: mj.ChunkFileName(i), Key: "k/" + planID + "/" + mj.ChunkFileName(i)})
	}
	lb, _ := json.Marshal(list)
	b.put("k/"+planID+"/chunks.json", lb)
	outs = append(outs, mj.Output{Name: mj.ChunkPlanFile, Key: "k/" + planID + "/plan.json"}, mj.Output{Name: mj.ChunkListFile, Key: "k/" + planID + "/chunks.json"})
	ended := errors.New("ended")
	_, err := r.s.UpdateJob(r.ctx, planID, func(j *mj.Job) error {
		if j.Status.Terminal() {
			return ended
		}
		now := time.Now()
		j.StartedAt, j.Outputs = &now, outs
		j.Succeed(now, "")
		return nil
	})
	if err != nil && !errors.Is(err, ended) {
		r.t.Fatal(err)
	}
	return err == nil
}

func (r *pipelineRig) queued() []string {
	ids, _, err := r.s.JobIDs(r.ctx, r.s.QueuePrefix(), 0)
	if err != nil {
		r.t.Fatal(err)
	}
	return ids
}

// A chunked job's parent is never queued; when its plan job succeeded the
// leader extends its pipeline with a job per chunk (at most max_workers of
// them released at once), the audio and the stitch, with ids derived from
// the pipeline's, so that extending again adds nothing; the parent runs,
// then succeeds with the stitch's outputs and its verification report.
func TestChunkedPipelineExtendsAndParentFollows(t *testing.T) {
	b := &blobMap{m: map[string][]byte{}}
	r := newPipelineRig(t, func(p *pipelines) { p.read = b.read })
	parent, p := r.newChunkedJob()
	planID := p.Steps[0].Jobs[0]
	if q := r.queued(); len(q) != 1 || q[0] != planID {
		t.Fatalf("queued %v: want the plan job alone, never the parent %s", q, parent.ID)
	}
	r.end(planID, func(j *mj.Job) { now := time.Now(); j.StartedAt = &now; j.Run("") })
	testenv.Eventually(t, time.Minute, "the parent runs", func() bool { return r.job(parent.ID).Status == mj.StatusRunning })

	r.succeedPlan(b, planID, 3)
	testenv.Eventually(t, time.Minute, "the pipeline extended and its jobs stored", func() bool {
		pl := r.pipeline(p.ID)
		return len(pl.Steps) == 4 && len(pl.Plan) == 0
	})
	pl := r.pipeline(p.ID)
	var names []string
	for _, s := range pl.Steps {
		names = append(names, s.Name)
	}
	if strings.Join(names, " ") != "plan encode audio stitch" || len(pl.Steps[1].Jobs) != 3 || pl.Steps[1].Items[2]["start"] != "4.000000" {
		t.Fatalf("steps %+v", pl.Steps)
	}
	enc := pl.Steps[1].Jobs
	audio, stitch := pl.Steps[2].Jobs[0], pl.Steps[3].Jobs[0]
	for i, id := range enc {
		if id != mj.ChunkedJobID(p.ID, mj.ChunkStepEncode, i) {
			t.Fatalf("encode %d: id %s is not derived", i, id)
		}
	}
	if j := r.job(enc[2]); !slices.Equal(j.Awaits, []string{enc[0]}) || j.InputKeys["chunk"] == "" || j.Chunk.Phase != mj.PhaseEncode {
		t.Fatalf("encode 2 (max_workers 2): %+v", j)
	}
	if q := r.queued(); !slices.Contains(q, enc[0]) || !slices.Contains(q, enc[1]) || !slices.Contains(q, audio) || slices.Contains(q, enc[2]) || slices.Contains(q, stitch) {
		t.Fatalf("queued %v", q)
	}

	// Extending again (a second leader, a leader that died before storing
	// the jobs) changes nothing.
	rev := r.pipeline(p.ID).Revision
	if err := r.svc.extend(r.ctx, r.pipeline(p.ID), r.job(parent.ID), r.job(planID)); err != nil {
		t.Fatal(err)
	}
	if pl := r.pipeline(p.ID); pl.Revision != rev || len(pl.JobIDs()) != 6 {
		t.Fatalf("a second extension wrote: revision %d -> %d, %d jobs", rev, pl.Revision, len(pl.JobIDs()))
	}

	out := func(j *mj.Job) {
		j.Outputs = chunkOutputs(j, "k/"+j.ID+"/"+j.OutputNames[0])
		now := time.Now()
		j.StartedAt = &now
		j.Succeed(now, "")
	}
	r.end(enc[0], out)
	testenv.Eventually(t, time.Minute, "encode 2 released when encode 0 ended", func() bool { return len(r.job(enc[2]).Awaits) == 0 })
	for _, id := range []string{enc[1], enc[2], audio} {
		r.end(id, out)
	}
	testenv.Eventually(t, time.Minute, "the stitch released", func() bool { return len(r.job(stitch).Awaits) == 0 })
	if j := r.job(stitch); len(j.InputKeys) != 8 || j.InputKeys["aux"] == "" || j.InputKeys[mj.ChunkInputName(2)] == "" || j.InputKeys[mj.ChunkHashesInputName(2)] == "" {
		t.Fatalf("stitch inputs %v", j.InputKeys)
	}
	b.put("k/"+stitch+"/verification.json", []byte(`{"pass":true,"expected_frames":150}`))
	r.end(stitch, func(j *mj.Job) {
		now := time.Now()
		j.StartedAt = &now
		j.Outputs = []mj.Output{{Name: "out.mp4", Key: "k/" + stitch + "/out.mp4", Size: 10}, {Name: mj.ChunkVerification, Key: "k/" + stitch + "/verification.json"}}
		j.Succeed(now, "")
	})
	testenv.Eventually(t, time.Minute, "the parent succeeded", func() bool { return r.job(parent.ID).Status == mj.StatusSucceeded })
	j := r.job(parent.ID)
	if len(j.Outputs) != 1 || j.Outputs[0].Key != "k/"+stitch+"/out.mp4" || string(j.Parallel.Verification) != `{"pass":true,"expected_frames":150}` || j.Usage != nil || j.TotalOutputBytes != 0 {
		t.Fatalf("parent %+v %s", j, j.Parallel.Verification)
	}
}

// A chunk that fails stops the pipeline (every job not ended cancelled) and
// fails the parent, naming the chunk's step.
func TestChunkedFailedChunkFailsParent(t *testing.T) {
	b := &blobMap{m: map[string][]byte{}}
	r := newPipelineRig(t, func(p *pipelines) { p.read = b.read })
	parent, p := r.newChunkedJob()
	r.succeedPlan(b, p.Steps[0].Jobs[0], 3)
	testenv.Eventually(t, time.Minute, "extended", func() bool { pl := r.pipeline(p.ID); return len(pl.Steps) == 4 && len(pl.Plan) == 0 })
	enc := r.pipeline(p.ID).Steps[1].Jobs
	r.end(enc[1], func(j *mj.Job) { j.Fail(time.Now(), "ffmpeg exited 1") })
	testenv.Eventually(t, time.Minute, "the parent failed", func() bool { return r.job(parent.ID).Status == mj.StatusFailed })
	if j := r.job(parent.ID); !strings.Contains(j.ErrorMessage, "step encode[1] failed: ffmpeg exited 1") {
		t.Fatalf("parent's error %q", j.ErrorMessage)
	}
	for _, id := range r.pipeline(p.ID).JobIDs() {
		if st := r.job(id).Status; !st.Terminal() {
			t.Fatalf("job %s is %s after the pipeline failed", id, st)
		}
	}
}

// The parent runs as soon as its plan job started, seen at the next tick
// (pass without all): not at a resync, nor when a job ends (none did). The
// service is driven by hand here, so that nothing else settles the pipeline.
func TestChunkedParentRunsAtItsPlansStart(t *testing.T) {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	b := &blobMap{m: map[string][]byte{}}
	svc := &pipelines{store: s, log: slog.Default(), now: time.Now, cfg: cfg, read: b.read, grace: time.Hour,
		inflight: map[string]bool{}, starting: map[string]bool{}}
	r := &pipelineRig{t: t, ctx: context.Background(), s: s, svc: svc}
	parent, p := r.newChunkedJob()
	svc.settle(r.ctx, p.ID) // as the materialiser's delete of pmat/ makes it
	if !slices.Contains(svc.startingNow(), p.ID) || r.job(parent.ID).Status != mj.StatusQueued {
		t.Fatalf("watched %v, parent %s: want the pipeline watched, the parent queued", svc.startingNow(), r.job(parent.ID).Status)
	}
	svc.pass(r.ctx, false)
	if st := r.job(parent.ID).Status; st != mj.StatusQueued {
		t.Fatalf("the parent is %s before any job started", st)
	}
	r.end(p.Steps[0].Jobs[0], func(j *mj.Job) { now := time.Now(); j.StartedAt = &now; j.Run("") })
	svc.pass(r.ctx, false)
	if st := r.job(parent.ID).Status; st != mj.StatusRunning {
		t.Fatalf("the parent is %s after a tick with its plan job running", st)
	}
	if slices.Contains(svc.startingNow(), p.ID) {
		t.Fatal("the pipeline is still watched after its parent runs")
	}
}

// A parent cancelled without its pipeline's stop (the gateway failed to
// record it): the leader stops the pipeline and cancels its jobs.
func TestChunkedParentCancelledAloneStopsItsPipeline(t *testing.T) {
	b := &blobMap{m: map[string][]byte{}}
	r := newPipelineRig(t, func(p *pipelines) { p.read = b.read })
	parent, p := r.newChunkedJob()
	r.end(parent.ID, func(j *mj.Job) { j.Cancel(time.Now(), "cancelled by the client") })
	testenv.Eventually(t, time.Minute, "the pipeline cancelled", func() bool { return r.pipeline(p.ID).Status == mj.StatusCancelled })
	if j := r.job(p.Steps[0].Jobs[0]); j.Status != mj.StatusCancelled {
		t.Fatalf("the plan job is %s", j.Status)
	}
	if j := r.job(parent.ID); j.Status != mj.StatusCancelled || j.ErrorMessage != "" {
		t.Fatalf("the parent %s %q", j.Status, j.ErrorMessage)
	}
}

// A stitch whose file failed its verification fails the parent, which keeps
// the report its analysis holds.
func TestChunkedFailedVerificationReachesParent(t *testing.T) {
	b := &blobMap{m: map[string][]byte{}}
	r := newPipelineRig(t, func(p *pipelines) { p.read = b.read })
	parent, p := r.newChunkedJob()
	r.succeedPlan(b, p.Steps[0].Jobs[0], 1)
	testenv.Eventually(t, time.Minute, "extended", func() bool { pl := r.pipeline(p.ID); return len(pl.Steps) == 4 && len(pl.Plan) == 0 })
	pl := r.pipeline(p.ID)
	ok := func(j *mj.Job) {
		j.Outputs = chunkOutputs(j, "k/"+j.ID)
		j.Succeed(time.Now(), "")
	}
	r.end(pl.Steps[1].Jobs[0], ok)
	r.end(pl.Steps[2].Jobs[0], ok)
	stitch := pl.Steps[3].Jobs[0]
	testenv.Eventually(t, time.Minute, "the stitch released", func() bool { return len(r.job(stitch).Awaits) == 0 })
	report := `{"pass":false,"failures":["the stitched video has 74 frames, the plan 75"]}`
	r.end(stitch, func(j *mj.Job) {
		j.Analysis = []mj.Analysis{{Command: 1, Filter: mj.ChunkVerifyFilter, Instance: "verification", Data: json.RawMessage(report)}}
		j.Fail(time.Now(), "the stitched file failed its verification, so it is not published: the stitched video has 74 frames, the plan 75")
	})
	testenv.Eventually(t, time.Minute, "the parent failed", func() bool { return r.job(parent.ID).Status == mj.StatusFailed })
	j := r.job(parent.ID)
	if string(j.Parallel.Verification) != report || !strings.Contains(j.ErrorMessage, "step stitch failed: the stitched file failed its verification") || len(j.Outputs) != 0 {
		t.Fatalf("parent: %q, %s, outputs %v", j.ErrorMessage, j.Parallel.Verification, j.Outputs)
	}
}

// A leader that dies between the pipeline's end and its owner's: the next
// leader's resync ends the owner (pfollow/<id>), and then forgets it.
func TestChunkedParentEndsAfterLeaderDiedBetweenTheWrites(t *testing.T) {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	b := &blobMap{m: map[string][]byte{}}
	fresh := func() *pipelines {
		return &pipelines{store: s, log: slog.Default(), now: time.Now, cfg: cfg, read: b.read, grace: time.Hour,
			inflight: map[string]bool{}, starting: map[string]bool{}}
	}
	r := &pipelineRig{t: t, ctx: context.Background(), s: s, svc: fresh()}
	parent, p := r.newChunkedJob()
	r.end(p.Steps[0].Jobs[0], func(j *mj.Job) { now := time.Now(); j.StartedAt = &now; j.Fail(now, "probe failed") })
	// The old leader's settle wrote the pipeline's end, then died.
	if _, err := s.UpdatePipeline(r.ctx, p.ID, func(pl *mj.Pipeline) error {
		now := time.Now().UTC()
		pl.Status, pl.ErrorMessage, pl.FinishedAt = mj.StatusFailed, "step plan failed: probe failed", &now
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	follow := func() []string {
		ids, err := s.PipelineIDs(r.ctx, s.PipelineFollowPrefix())
		if err != nil {
			t.Fatal(err)
		}
		return ids
	}
	if f := follow(); !slices.Equal(f, []string{p.ID}) {
		t.Fatalf("pfollow/ %v: want the ended pipeline %s", f, p.ID)
	}
	fresh().pass(r.ctx, true) // a new leader's first pass
	j := r.job(parent.ID)
	if j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "probe failed") {
		t.Fatalf("parent %s %q: want failed as its pipeline", j.Status, j.ErrorMessage)
	}
	if f := follow(); len(f) != 0 {
		t.Fatalf("pfollow/ %v after the parent ended", f)
	}
}

// A verification that cannot be read when the pipeline ends leaves the
// parent to the next resync, which ends it once the read works.
func TestChunkedParentEndsAfterAFailedVerificationRead(t *testing.T) {
	b := &blobMap{m: map[string][]byte{}}
	r := newPipelineRig(t, func(p *pipelines) { p.read = b.read })
	parent, p := r.newChunkedJob()
	planID := p.Steps[0].Jobs[0]
	r.succeedPlan(b, planID, 1)
	testenv.Eventually(t, time.Minute, "the pipeline extended", func() bool {
		pl := r.pipeline(p.ID)
		return len(pl.Steps) == 4 && len(pl.Plan) == 0
	})
	pl := r.pipeline(p.ID)
	ok := func(j *mj.Job) {
		j.Outputs = chunkOutputs(j, "k/"+j.ID)
		j.Succeed(time.Now(), "")
	}
	r.end(pl.Steps[1].Jobs[0], ok)
	r.end(pl.Steps[2].Jobs[0], ok)
	stitch := pl.Steps[3].Jobs[0]
	testenv.Eventually(t, time.Minute, "the stitch released", func() bool { return len(r.job(stitch).Awaits) == 0 })
	verKey := "k/" + stitch + "/verification.json" // not readable yet
	r.end(stitch, func(j *mj.Job) {
		j.Outputs = []mj.Output{{Name: "out.mp4", Key: "k/" + stitch + "/out.mp4"}, {Name: mj.ChunkVerification, Key: verKey}}
		j.Succeed(time.Now(), "")
	})
	testenv.Eventually(t, time.Minute, "the pipeline ended", func() bool { return r.pipeline(p.ID).Status == mj.StatusSucceeded })
	r.svc.pass(r.ctx, true)
	if st := r.job(parent.ID).Status; st.Terminal() {
		t.Fatalf("parent %s without its verification", st)
	}
	b.put(verKey, []byte(`{"pass":true}`))
	testenv.Eventually(t, time.Minute, "the parent succeeded at a resync", func() bool { return r.job(parent.ID).Status == mj.StatusSucceeded })
	if j := r.job(parent.ID); !strings.Contains(string(j.Parallel.Verification), "pass") {
		t.Fatalf("parent's verification %s", j.Parallel.Verification)
	}
}

// A chunks.json that storage no longer holds (or holds over the size a small
// blob may have) fails the plan, naming why, instead of being read again at
// each resync.
func TestChunkedUnreadableChunkListFailsThePlan(t *testing.T) {
	for name, tc := range map[string]struct {
		err  error
		want string
	}{
		"gone":      {blob.ErrNotFound, "not in storage"},
		"too large": {blob.ErrTooLarge, "over"},
	} {
		t.Run(name, func(t *testing.T) {
			b := &blobMap{m: map[string][]byte{}}
			r := newPipelineRig(t, func(p *pipelines) {
				p.read = func(ctx context.Context, k string) ([]byte, error) {
					if strings.HasSuffix(k, "/"+mj.ChunkListFile) {
						return nil, fmt.Errorf("open %s: %w", k, tc.err)
					}
					return b.read(ctx, k)
				}
			})
			parent, p := r.newChunkedJob()
			r.succeedPlan(b, p.Steps[0].Jobs[0], 2)
			testenv.Eventually(t, time.Minute, "the parent failed", func() bool { return r.job(parent.ID).Status == mj.StatusFailed })
			j := r.job(parent.ID)
			if !strings.Contains(j.ErrorMessage, mj.ChunkListFile) || !strings.Contains(j.ErrorMessage, tc.want) {
				t.Fatalf("parent's message %q: want it to name %s and %q", j.ErrorMessage, mj.ChunkListFile, tc.want)
			}
		})
	}
}

// A chunked job cancelled before its pipeline was extended: the pipeline
// ends cancelled (its plan alone succeeding is no success), unextended, and
// a plan failure (over a limit) met while it is stopped ends it cancelled
// too, not failed.
func TestChunkedStoppedBeforeExtensionEndsCancelled(t *testing.T) {
	b := &blobMap{m: map[string][]byte{}}
	r := newPipelineRig(t, func(p *pipelines) { p.read = b.read })
	parent, p := r.newChunkedJob()
	// The gateway's cancel: J first, then the stop.
	r.end(parent.ID, func(j *mj.Job) { j.Cancel(time.Now(), "cancelled by the client") })
	if _, err := r.s.UpdatePipeline(r.ctx, p.ID, func(pl *mj.Pipeline) error {
		pl.Cancelled, pl.Stop = true, "its chunked job "+parent.ID+" was cancelled by the client"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	// It ran to its end all the same, unless the leader, seeing the stop,
	// cancelled it first: either way the pipeline is not extended.
	if !r.trySucceedPlan(b, p.Steps[0].Jobs[0], 2) {
		t.Log("the leader cancelled the plan job before it could succeed")
	}
	testenv.Eventually(t, time.Minute, "the pipeline ended", func() bool { return r.pipeline(p.ID).Status.Terminal() })
	// Its message is the gateway's stop's, or, when the leader saw J cancelled
	// first, the leader's: both name J cancelled.
	if pl := r.pipeline(p.ID); pl.Status != mj.StatusCancelled || len(pl.Steps) != 1 || !strings.Contains(pl.ErrorMessage, "its chunked job "+parent.ID+" was cancelled") {
		t.Fatalf("pipeline %s %q with %d steps: want cancelled, not extended", pl.Status, pl.ErrorMessage, len(pl.Steps))
	}
	if j := r.job(parent.ID); j.Status != mj.StatusCancelled {
		t.Fatalf("parent %s", j.Status)
	}
}

func TestChunkedPlanFailureWhileStoppedCancels(t *testing.T) {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	svc := &pipelines{store: s, log: slog.Default(), now: time.Now, cfg: cfg, grace: time.Hour}
	r := &pipelineRig{t: t, ctx: context.Background(), s: s, svc: svc}
	parent, p := r.newChunkedJob()
	if _, err := s.UpdatePipeline(r.ctx, p.ID, func(pl *mj.Pipeline) error {
		pl.Cancelled, pl.Stop = true, "its chunked job "+parent.ID+" was cancelled by the client"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := svc.failPlan(r.ctx, p.ID, "its 6 jobs would take the account past a limit: max_queued_jobs"); err != nil {
		t.Fatal(err)
	}
	if pl := r.pipeline(p.ID); pl.Status != mj.StatusCancelled || strings.Contains(pl.ErrorMessage, "max_queued_jobs") {
		t.Fatalf("pipeline %s %q: want cancelled with its stop's message", pl.Status, pl.ErrorMessage)
	}
	if j := r.job(parent.ID); j.Status != mj.StatusCancelled {
		t.Fatalf("parent %s %q: want cancelled", j.Status, j.ErrorMessage)
	}
}
