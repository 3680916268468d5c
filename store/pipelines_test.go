package store_test

import (
	"context"
	"sync"
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

// A pipeline's planned jobs count against max_queued_jobs from its create to
// their materialisation (a reservation, docs/limits.md): two pipelines racing
// under the limit cannot both pass, and single creates made before a
// pipeline's jobs are stored see them.
func TestPipelinesReserveTheirJobsAgainstMaxQueued(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	lim := store.Limits{MaxQueuedJobs: 10}
	p1, p2 := plannedPipeline("acct", 8), plannedPipeline("acct", 8)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i, p := range []*mj.Pipeline{p1, p2} {
		wg.Add(1)
		go func() { defer wg.Done(); _, errs[i] = s.CreatePipeline(ctx, p, nil, lim) }()
	}
	wg.Wait()
	created := 0
	for i, p := range []*mj.Pipeline{p1, p2} {
		if errs[i] == nil {
			created++
			if _, err := s.MaterialisePipeline(ctx, p.ID, time.Now()); err != nil {
				t.Fatal(err)
			}
		} else if mj.ErrorCode(errs[i]) != mj.EQuotaExceeded {
			t.Fatalf("pipeline %d: %v, want quotaExceeded or stored", i, errs[i])
		}
	}
	if n, _ := s.Count(ctx, "/test/sidx/acct/queued/"); created != 1 || n != 8 {
		t.Errorf("%d pipelines stored, %d jobs queued; want 1 and 8 (max_queued_jobs 10)", created, n)
	}

	// A pipeline not materialised yet, then single creates: 2 fit.
	p3 := plannedPipeline("acct2", 8)
	if _, err := s.CreatePipeline(ctx, p3, nil, lim); err != nil {
		t.Fatal(err)
	}
	if _, u, _, err := s.AccountLimits(ctx, "acct2", lim); err != nil || u.QueuedJobs != 8 {
		t.Fatalf("usage %+v, %v: want the 8 planned jobs counted", u, err)
	}
	refused := 0
	for i := range 5 {
		if _, err := s.CreateJobWithin(ctx, newJob("acct2", time.Now().Add(time.Duration(i))), nil, lim); mj.ErrorCode(err) == mj.EQuotaExceeded {
			refused++
		} else if err != nil {
			t.Fatal(err)
		}
	}
	if _, err := s.MaterialisePipeline(ctx, p3.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if n, _ := s.Count(ctx, "/test/sidx/acct2/queued/"); n != 10 || refused != 3 {
		t.Errorf("acct2: %d queued, %d refused; want 10 and 3", n, refused)
	}
	if n, _ := s.Count(ctx, "/test/pqueued/"); n != 0 {
		t.Errorf("%d reservations left after materialisation, want none", n)
	}
}

// The reservation shrinks exactly as the batches store the jobs: a pipeline
// half stored counts its stored jobs once (queued) and the rest once
// (reserved), whoever stores them and however often.
func TestPipelineReservationFollowsTheBatches(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	p := plannedPipeline("acct", 150) // three batches
	if _, err := s.CreatePipeline(ctx, p, nil, store.Limits{}); err != nil {
		t.Fatal(err)
	}
	// A gateway that stored the first 70 jobs (two batches' worth, in part)
	// before it died: stored as a batch of its own would be.
	for _, j := range p.Plan[:70] {
		c := *j
		if err := s.CreateJob(ctx, &c); err != nil {
			t.Fatal(err)
		}
	}
	queued := func() int64 {
		_, u, _, err := s.AccountLimits(ctx, "acct", store.Limits{MaxQueuedJobs: 1000})
		if err != nil {
			t.Fatal(err)
		}
		return u.QueuedJobs
	}
	if n := queued(); n != 220 { // the 70 stored outside the pipeline's writes count twice until it runs
		t.Fatalf("queued %d, want 220", n)
	}
	var wg sync.WaitGroup
	for range 3 { // the gateway and leaders at once
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.MaterialisePipeline(ctx, p.ID, time.Now()); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	if n := queued(); n != 150 {
		t.Errorf("queued %d after materialisation, want 150", n)
	}
	if n, _ := s.Count(ctx, "/test/pqueued/"); n != 0 {
		t.Errorf("%d reservations left after materialisation, want none", n)
	}
}

// A retry with the Idempotency-Key of a pipeline the retention deleted creates
// a new pipeline, as a job's does (its record goes with the job).
func TestPipelineIdempotencyAfterTheRetention(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	idem := &store.Idempotency{Key: "k", Fingerprint: "f"}
	p, err := s.CreatePipeline(ctx, plannedPipeline("acct", 1), idem, store.Limits{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.MaterialisePipeline(ctx, p.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	at := time.Now().Add(-2 * time.Hour)
	if _, err := s.UpdatePipeline(ctx, p.ID, func(p *mj.Pipeline) error {
		p.Status, p.FinishedAt = mj.StatusSucceeded, &at
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if n, err := s.DeleteEndedPipelines(ctx, time.Now().Add(-time.Hour), 0); err != nil || n != 1 {
		t.Fatalf("deleted %d, %v", n, err)
	}
	if prior, err := s.IdempotentPipeline(ctx, "acct", idem); prior != nil || err != nil {
		t.Fatalf("IdempotentPipeline after the retention: %v, %v; want none", prior, err)
	}
	again, err := s.CreatePipeline(ctx, plannedPipeline("acct", 1), idem, store.Limits{})
	if err != nil || again.ID == p.ID {
		t.Fatalf("a retry after the retention: %v, %v; want a new pipeline", again, err)
	}
}
