package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

func plannedPipeline(account string, n int) *mj.Pipeline {
	now := time.Now().UTC()
	p := &mj.Pipeline{ID: uuid.NewString(), AccountID: account, CreatedAt: now, UpdatedAt: now}
	for i := range n {
		j := newJob(account, now.Add(time.Duration(i)))
		j.ID = uuid.NewString()
		j.Pipeline = &mj.PipelineRef{ID: p.ID, Step: "s"}
		p.Plan = append(p.Plan, j)
	}
	p.Steps = []mj.PipelineStep{{Name: "s"}}
	for _, j := range p.Plan {
		p.Steps[0].Jobs = append(p.Steps[0].Jobs, j.ID)
	}
	return p
}

// A pipeline is checked against the account's limits for all its jobs at
// once: over max_queued_jobs it is refused and nothing is written. Within
// them, its record holds the plan until MaterialisePipeline stores the jobs;
// those stored after the pipeline stopped are stored cancelled. An
// Idempotency-Key returns the first pipeline; with another request, conflict.
func TestCreatePipelineWithinLimitsThenMaterialise(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	count := func(prefix string) int { n, _ := s.Count(ctx, prefix); return n }

	big := plannedPipeline("acct", 5)
	if _, err := s.CreatePipeline(ctx, big, nil, store.Limits{MaxQueuedJobs: 4}); mj.ErrorCode(err) != mj.EQuotaExceeded {
		t.Fatalf("5 jobs under max_queued_jobs 4: %v", err)
	}
	if _, err := s.Pipeline(ctx, big.ID); mj.ErrorCode(err) != mj.ENotFound || count(s.PipelinePendingPrefix()) != 0 {
		t.Fatalf("a refused pipeline was stored: %v", err)
	}

	idem := &store.Idempotency{Key: "k", Fingerprint: "f1"}
	p, err := s.CreatePipeline(ctx, plannedPipeline("acct", 3), idem, store.Limits{MaxQueuedJobs: 4})
	if err != nil {
		t.Fatal(err)
	}
	again, err := s.CreatePipeline(ctx, plannedPipeline("acct", 3), idem, store.Limits{})
	if err != nil || again.ID != p.ID {
		t.Fatalf("retry with the key: %v %v", again, err)
	}
	if _, err := s.CreatePipeline(ctx, plannedPipeline("acct", 3), &store.Idempotency{Key: "k", Fingerprint: "f2"}, store.Limits{}); mj.ErrorCode(err) != mj.EConflict {
		t.Fatalf("the key with another request: %v", err)
	}
	if n := count(s.PipelinePendingPrefix()); n != 1 {
		t.Fatalf("%d pending pipelines, want 1", n)
	}
	// One job stored, then the pipeline stopped: the others are stored cancelled.
	first := *p.Plan[0]
	if err := s.CreateJob(ctx, &first); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdatePipeline(ctx, p.ID, func(p *mj.Pipeline) error { p.Stop, p.Cancelled = "cancelled by the test", true; return nil }); err != nil {
		t.Fatal(err)
	}
	done, err := s.MaterialisePipeline(ctx, p.ID, time.Now())
	if err != nil || len(done.Plan) != 0 || count(s.PipelinePendingPrefix()) != 0 {
		t.Fatalf("materialised: %+v %v", done, err)
	}
	for i, id := range p.JobIDs() {
		j, err := s.Job(ctx, id)
		want := mj.StatusCancelled
		if i == 0 {
			want = mj.StatusQueued // stored before the stop: as it was
		}
		if err != nil || j.Status != want {
			t.Fatalf("job %d: %+v %v, want %s", i, j, err, want)
		}
	}
	// Listed, with its running marker until it ends.
	list, total, err := s.ListPipelines(ctx, "acct", 10, 0)
	if err != nil || total != 1 || len(list) != 1 || list[0].ID != p.ID || count(s.PipelineRunningPrefix()) != 1 {
		t.Fatalf("list: %v %d %v", list, total, err)
	}
	if _, err := s.UpdatePipeline(ctx, p.ID, func(p *mj.Pipeline) error {
		now := time.Now()
		p.Status, p.FinishedAt, p.WebhookURL = mj.StatusCancelled, &now, "https://hooks.example/x"
		p.ArmWebhook()
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if count(s.PipelineRunningPrefix()) != 0 || count(s.PipelineOutboxPrefix()) != 1 {
		t.Fatalf("after its end: running %d, outbox %d", count(s.PipelineRunningPrefix()), count(s.PipelineOutboxPrefix()))
	}
}

// An ended pipeline is deleted job_retention after it ended, with its index and
// done keys; not before, and not while its webhook is pending.
func TestEndedPipelinesAreDeletedAfterTheRetention(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	count := func(prefix string) int { n, _ := s.Count(ctx, prefix); return n }
	create := func() *mj.Pipeline {
		p, err := s.CreatePipeline(ctx, plannedPipeline("acct", 1), nil, store.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.MaterialisePipeline(ctx, p.ID, time.Now()); err != nil {
			t.Fatal(err)
		}
		return p
	}
	end := func(p *mj.Pipeline, at time.Time, hook bool) {
		if _, err := s.UpdatePipeline(ctx, p.ID, func(p *mj.Pipeline) error {
			p.Status, p.FinishedAt = mj.StatusSucceeded, &at
			if hook {
				p.WebhookURL = "https://hooks.example/x"
				p.ArmWebhook()
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	old, pending, recent, running := create(), create(), create(), create()
	now := time.Now()
	end(old, now.Add(-2*time.Hour), false)
	end(pending, now.Add(-2*time.Hour), true)
	end(recent, now, false)

	n, err := s.DeleteEndedPipelines(ctx, now.Add(-time.Hour), 0)
	if err != nil || n != 1 {
		t.Fatalf("deleted %d, %v; want 1", n, err)
	}
	if _, err := s.Pipeline(ctx, old.ID); mj.ErrorCode(err) != mj.ENotFound {
		t.Fatalf("the old pipeline is still there: %v", err)
	}
	for _, p := range []*mj.Pipeline{pending, recent, running} {
		if _, err := s.Pipeline(ctx, p.ID); err != nil {
			t.Fatalf("pipeline %s was deleted: %v", p.ID, err)
		}
	}
	if _, total, _ := s.ListPipelines(ctx, "acct", 10, 0); total != 3 {
		t.Fatalf("%d pipelines listed, want 3", total)
	}
	// Its webhook delivered, the pending one goes at the next pass.
	if _, err := s.UpdatePipeline(ctx, pending.ID, func(p *mj.Pipeline) error { p.Webhook.Status = mj.WebhookDelivered; return nil }); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteEndedPipelines(ctx, now.Add(-time.Hour), 0); err != nil || n != 1 {
		t.Fatalf("second pass deleted %d, %v; want 1", n, err)
	}
	if c := count(s.PipelineOutboxPrefix()); c != 0 {
		t.Fatalf("%d outbox entries left", c)
	}
}
