package store_test

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

func chunkedParent(now time.Time) *mj.Job {
	j := newJob("acct", now)
	j.ID = "11111111-2222-3333-4444-555555555555"
	j.InputFiles = map[string]string{"v": "https://media.example/a.mp4"}
	j.FFmpegCommands = []string{"-i {{v}} -c:v libx264 {{out.mp4}}"}
	j.Parallel = &mj.Parallel{Mode: mj.ParallelChunked, ChunkSeconds: 2, MaxWorkers: 2, MaxChunks: 64}
	return j
}

// A chunked job's parent is stored with its pipeline in one transaction and
// never has a queue key nor an active one, whatever its status; it ends as
// any job (its done key). The pipeline's plan job is queued once stored.
func TestChunkedParentIsNeverQueued(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	ids := func(prefix string) []string { v, _, _ := s.JobIDs(ctx, prefix, 0); return v }
	now := time.Now().UTC()
	j := chunkedParent(now)
	p := mj.NewChunkedPipeline(j, now)
	if _, err := s.CreateChunkedJob(ctx, j, p, nil, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	if stored, err := s.Pipeline(ctx, p.ID); err != nil || stored.Owner != j.ID || len(stored.Plan) != 1 {
		t.Fatalf("pipeline %+v, %v", stored, err)
	}
	if q := ids(s.QueuePrefix()); len(q) != 0 {
		t.Fatalf("queued %v: a parent is never queued, its plan job not stored yet", q)
	}
	if _, err := s.MaterialisePipeline(ctx, p.ID, now); err != nil {
		t.Fatal(err)
	}
	if q := ids(s.QueuePrefix()); len(q) != 1 || q[0] != p.Steps[0].Jobs[0] {
		t.Fatalf("queued %v: want the plan job alone", q)
	}
	for _, step := range []func(*mj.Job){
		func(j *mj.Job) { j.Run("encoding in chunks") },
		func(j *mj.Job) { j.Succeed(time.Now(), "") },
	} {
		if _, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { step(j); return nil }); err != nil {
			t.Fatal(err)
		}
		if q, a := ids(s.QueuePrefix()), ids(s.ActivePrefix()); len(q) != 1 || len(a) != 0 {
			t.Fatalf("queued %v, active %v after the parent moved on", q, a)
		}
	}
}

// Extending a pipeline is one write, done once: again, the record is left as
// it is; jobs past the account's max_queued_jobs, or a plan whose record
// would outgrow one pipeline's, are refused, and nothing is written.
func TestExtendPipelineOnce(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	now := time.Now().UTC()
	j := chunkedParent(now)
	p := mj.NewChunkedPipeline(j, now)
	if _, err := s.CreateChunkedJob(ctx, j, p, nil, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MaterialisePipeline(ctx, p.ID, now); err != nil {
		t.Fatal(err)
	}
	plan := *p.Plan[0]
	plan.Status = mj.StatusSucceeded
	list := &mj.ChunkList{}
	for i := range 3 {
		list.Chunks = append(list.Chunks, json.RawMessage(`{"start":0,"end":1}`))
		plan.Outputs = append(plan.Outputs, mj.Output{Name: mj.ChunkFileName(i), Key: "k"})
	}
	plan.Outputs = append(plan.Outputs, mj.Output{Name: mj.ChunkPlanFile, Key: "k"})
	pl, _ := s.Pipeline(ctx, p.ID)
	steps, jobs, err := mj.ExtendChunked(pl, j, &plan, list, now)
	if err != nil {
		t.Fatal(err)
	}
	// The account's max_queued_jobs bounds the jobs: the parent and 5 more
	// do not fit in 5; nothing is written.
	if _, _, err := s.ExtendPipeline(ctx, p.ID, steps, jobs, store.Limits{MaxQueuedJobs: 5}); mj.ErrorCode(err) != mj.EQuotaExceeded {
		t.Fatalf("over max_queued_jobs: %v, want quotaExceeded", err)
	}
	if after, _ := s.Pipeline(ctx, p.ID); len(after.Steps) != 1 || after.Revision != pl.Revision {
		t.Fatalf("a refused extension wrote: %+v", after)
	}
	pl, _ = s.Pipeline(ctx, p.ID)
	// A stopped pipeline (its job cancelled) is not extended, whatever the
	// limits: nothing is written.
	if _, err := s.UpdatePipeline(ctx, p.ID, func(p *mj.Pipeline) error { p.Stop = "stopped"; return nil }); err != nil {
		t.Fatal(err)
	}
	stopped, _ := s.Pipeline(ctx, p.ID)
	if got, extended, err := s.ExtendPipeline(ctx, p.ID, steps, jobs, store.Limits{MaxQueuedJobs: 5}); err != nil || extended || len(got.Steps) != 1 {
		t.Fatalf("extending a stopped pipeline: extended %v, %v, %d steps", extended, err, len(got.Steps))
	}
	if after, _ := s.Pipeline(ctx, p.ID); after.Revision != stopped.Revision {
		t.Fatalf("extending a stopped pipeline wrote: %+v", after)
	}
	if _, err := s.UpdatePipeline(ctx, p.ID, func(p *mj.Pipeline) error { p.Stop = ""; return nil }); err != nil {
		t.Fatal(err)
	}
	got, extended, err := s.ExtendPipeline(ctx, p.ID, steps, jobs, store.Limits{MaxQueuedJobs: 7})
	if err != nil || !extended || len(got.Steps) != 3 || len(got.Plan) != 4 {
		t.Fatalf("extend: %v %v %+v", extended, err, got)
	}
	rev := got.Revision
	got, extended, err = s.ExtendPipeline(ctx, p.ID, steps, jobs, store.Limits{})
	if err != nil || extended || got.Revision != rev {
		t.Fatalf("a second extend: extended %v, %v, revision %d -> %d", extended, err, rev, got.Revision)
	}

	// Too large: a command of 20 KB in 64 chunks.
	big := chunkedParent(now.Add(time.Second))
	big.ID = "21111111-2222-3333-4444-555555555555"
	big.FFmpegCommands = []string{"-i {{v}} -c:v libx264 -metadata title=" + strings.Repeat("x", 20000) + " {{out.mp4}}"}
	bp := mj.NewChunkedPipeline(big, now)
	if _, err := s.CreateChunkedJob(ctx, big, bp, nil, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.MaterialisePipeline(ctx, bp.ID, now); err != nil {
		t.Fatal(err)
	}
	bplan := *bp.Plan[0]
	bplan.Status, bplan.Outputs = mj.StatusSucceeded, []mj.Output{{Name: mj.ChunkPlanFile, Key: "k"}}
	blist := &mj.ChunkList{}
	for i := range 64 {
		blist.Chunks = append(blist.Chunks, json.RawMessage(`{"start":0,"end":1}`))
		bplan.Outputs = append(bplan.Outputs, mj.Output{Name: mj.ChunkFileName(i), Key: "k"})
	}
	bpl, _ := s.Pipeline(ctx, bp.ID)
	steps, jobs, err = mj.ExtendChunked(bpl, big, &bplan, blist, now)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.ExtendPipeline(ctx, bp.ID, steps, jobs, store.Limits{}); mj.ErrorCode(err) != mj.EValidation {
		t.Fatalf("a plan over one record: %v, want a validation error", err)
	}
	if after, _ := s.Pipeline(ctx, bp.ID); len(after.Steps) != 1 || after.Revision != bpl.Revision {
		t.Fatalf("the refused extension wrote: %+v", after)
	}
}
