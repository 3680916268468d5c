package dispatcher

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
)

// fakeJobs is a stand-in for Nomad's jobs API in unit tests: it knows which
// children exist and records what was stopped. The real agent is in cmd/mediajobs.
type fakeJobs struct {
	NomadJobs
	mu       sync.Mutex
	children map[string][]*api.AllocationListStub
	evals    map[string][]*api.Evaluation
	stopped  []string
}

// Summary: the fake keeps no summaries (as a Nomad that cannot say).
func (f *fakeJobs) Summary(string, *api.QueryOptions) (*api.JobSummary, *api.QueryMeta, error) {
	return nil, nil, errors.New("the fake keeps no job summaries")
}

func (f *fakeJobs) Info(id string, _ *api.QueryOptions) (*api.Job, *api.QueryMeta, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if _, ok := f.children[id]; !ok {
		return nil, nil, errors.New("Unexpected response code: 404 (job not found)")
	}
	return &api.Job{ID: &id}, nil, nil
}

func (f *fakeJobs) Allocations(id string, _ bool, _ *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.children[id], nil, nil
}

func (f *fakeJobs) Deregister(id string, _ bool, _ *api.WriteOptions) (string, *api.WriteMeta, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.stopped = append(f.stopped, id)
	return "", nil, nil
}

func (f *fakeJobs) Evaluations(id string, _ *api.QueryOptions) ([]*api.Evaluation, *api.QueryMeta, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.evals[id], nil, nil
}

func (f *fakeJobs) List(*api.QueryOptions) ([]*api.JobListStub, *api.QueryMeta, error) {
	return nil, nil, nil // no stray children
}

func TestReconcileBackstops(t *testing.T) {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	cfg.Pools = []*config.Pool{{Name: "cpu", QueueLimit: "1m", MaxAttempts: 2}}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	id := func(n int) string { return "00000000-0000-4000-8000-00000000000" + string(rune('0'+n)) }
	child := func(n int) string { return "mediajobs-cpu/dispatch-" + mj.ChildPrefix(id(n), 1) + "-1-abc" }
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{
		child(1): nil,                                                    // dispatched 2 minutes ago, never placed
		child(2): {{ID: "a2", JobID: child(2), ClientStatus: "running"}}, // running far past its timeout
		child(4): nil,                                                    // dispatched just now, not placed yet
		// child(3) vanished
	}}
	d := &Dispatcher{Config: cfg, Store: s, Jobs: nomad, Blobs: &fakeBlobs{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.defaults()
	ctx := context.Background()
	now := time.Now().UTC()
	ago := func(d time.Duration) *time.Time { t := now.Add(-d); return &t }
	jobs := []*mj.Job{
		{ID: id(1), Status: mj.StatusQueued, NomadJobID: child(1), Attempt: 1, DispatchedAt: ago(2 * time.Minute), PlacementReason: "no node can run it (1 filtered by missing devices)"},
		{ID: id(2), Status: mj.StatusRunning, NomadJobID: child(2), Attempt: 1, StartedAt: ago(time.Hour), TimeoutSeconds: 60},
		{ID: id(3), Status: mj.StatusRunning, NomadJobID: child(3), Attempt: 1, StartedAt: ago(time.Second), TimeoutSeconds: 60},
		{ID: id(4), Status: mj.StatusQueued, NomadJobID: child(4), Attempt: 1, DispatchedAt: ago(time.Second)},
	}
	for _, j := range jobs {
		j.AccountID, j.Machine, j.CreatedAt, j.QueuedAt = "acct", "cpu", now, now
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	d.recon.reconcile(ctx)

	get := func(n int) *mj.Job { j, _ := s.Job(ctx, id(n)); return j }
	if j := get(1); j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "1m0s queue limit") || !strings.Contains(j.ErrorMessage, "missing devices") {
		t.Errorf("unplaced job: %s %q", j.Status, j.ErrorMessage)
	}
	if j := get(2); j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "timed out after 60s") {
		t.Errorf("overdue job: %s %q", j.Status, j.ErrorMessage)
	}
	if j := get(3); j.Status != mj.StatusRunning || j.NomadJobID != "" || j.Attempt != 2 || !strings.Contains(j.StatusDetail, "no longer exists") {
		t.Errorf("vanished child: %+v", j)
	}
	if j := get(4); j.Status != mj.StatusQueued || j.NomadJobID != child(4) {
		t.Errorf("fresh job touched: %+v", j)
	}
	stopped := strings.Join(nomad.stopped, " ")
	for _, n := range []int{1, 2} {
		if !strings.Contains(stopped, child(n)) {
			t.Errorf("child %d not stopped (stopped: %s)", n, stopped)
		}
	}
	if strings.Contains(stopped, child(4)) {
		t.Errorf("fresh child stopped")
	}
	// The vanished job is back in the queue; once more lost, its last attempt fails it.
	ids, _, _ := s.JobIDs(ctx, s.PoolQueuePrefix("cpu"), 0)
	if len(ids) != 1 || ids[0] != id(3) {
		t.Fatalf("queue %v", ids)
	}
	s.UpdateJob(ctx, id(3), func(j *mj.Job) error {
		j.NomadJobID = "mediajobs-cpu/dispatch-" + mj.ChildPrefix(id(3), 2) + "-1-x"
		return nil
	})
	d.recon.reconcile(ctx)
	if j := get(3); j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "attempt 2 of 2 failed") {
		t.Errorf("last attempt: %s %q", j.Status, j.ErrorMessage)
	}
}
