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
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// fakeBlobs answers ReadAll from a map, or with err when it is set.
type fakeBlobs struct {
	Blobs
	mu   sync.Mutex
	err  error
	data map[string][]byte
}

func (f *fakeBlobs) ReadAll(_ context.Context, key string) ([]byte, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	if b, ok := f.data[key]; ok {
		return b, nil
	}
	return nil, blob.ErrNotFound
}

func (f *fakeBlobs) List(_ context.Context, prefix string) ([]string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return nil, f.err
	}
	var keys []string
	for k := range f.data {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	return keys, nil
}

func (f *fakeBlobs) Each(_ context.Context, prefix string, fn func(key string, size int64, mod time.Time) error) error {
	f.mu.Lock()
	var keys []string
	for k := range f.data {
		if strings.HasPrefix(k, prefix) {
			keys = append(keys, k)
		}
	}
	f.mu.Unlock()
	for _, k := range keys {
		f.mu.Lock()
		n := len(f.data[k])
		f.mu.Unlock()
		if err := fn(k, int64(n), time.Time{}); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeBlobs) Delete(_ context.Context, key string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.data, key)
	return nil
}

func fixDispatcher(t *testing.T, maxAttempts int, nomad NomadJobs, blobs Blobs) (*Dispatcher, context.Context) {
	t.Helper()
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	cfg.Pools = []*config.Pool{{Name: "cpu", QueueLimit: "10m", MaxAttempts: maxAttempts}}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	d := &Dispatcher{Config: cfg, Store: s, Jobs: nomad, Blobs: blobs, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.defaults()
	return d, context.Background()
}

// rewire builds d's services again from its fields, which a test changed after
// defaults built them.
func rewire(d *Dispatcher) {
	d.nomad, d.settle, d.sched, d.warm, d.recon, d.track, d.jan = nil, nil, nil, nil, nil, nil, nil
	d.defaults()
}

func fixJob(t *testing.T, d *Dispatcher, j *mj.Job) {
	t.Helper()
	now := time.Now().UTC()
	j.AccountID, j.Machine, j.CreatedAt, j.QueuedAt = "acct", "cpu", now, now
	if err := d.Store.(interface {
		CreateJob(context.Context, *mj.Job) error
	}).CreateJob(context.Background(), j); err != nil {
		t.Fatal(err)
	}
}

// A blob store that cannot answer is not "no result": the job stays as it is, and
// the next reconcile, with the store back, settles it from the runner's result.
func TestResultReadErrorLeavesTheJob(t *testing.T) {
	id := "00000000-0000-4000-8000-0000000000a1"
	child := "mediajobs-cpu/dispatch-" + mj.ChildPrefix(id, 1) + "-1-abc"
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{
		child: {{ID: "a1", JobID: child, ClientStatus: "complete"}},
	}}
	blobs := &fakeBlobs{err: errors.New("connection reset by peer"), data: map[string][]byte{}}
	// Attempt 1 of 1: treating the error as "no result" would fail the job.
	d, ctx := fixDispatcher(t, 1, nomad, blobs)
	started := time.Now().UTC().Add(-time.Minute)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child, Attempt: 1, StartedAt: &started, TimeoutSeconds: 600})

	d.recon.reconcile(ctx)
	j, _ := d.Store.Job(ctx, id)
	if j.Status != mj.StatusRunning || j.NomadJobID != child || j.Attempt != 1 || j.ErrorMessage != "" {
		t.Fatalf("a storage error moved the job: %s attempt %d child %q %q", j.Status, j.Attempt, j.NomadJobID, j.ErrorMessage)
	}
	d.settle.apply(ctx, allocState{ID: "a1", NomadJobID: child, ClientStatus: "complete"}) // the event path too
	if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusRunning {
		t.Fatalf("event path moved the job: %s", j.Status)
	}

	blobs.mu.Lock()
	blobs.err = nil
	blobs.data[mj.RunScope(id, 1)+"result.json"] = mustJSON(mj.Result{JobID: id, Attempt: 1, Succeeded: true, InputBytes: 3})
	blobs.mu.Unlock()
	d.recon.reconcile(ctx)
	if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusSucceeded || j.TotalInputBytes != 3 {
		t.Fatalf("after the store came back: %s %q", j.Status, j.ErrorMessage)
	}
}

// Not found still means "no result": the worker crashed, and the job is retried.
func TestResultNotFoundRetries(t *testing.T) {
	id := "00000000-0000-4000-8000-0000000000a2"
	child := "mediajobs-cpu/dispatch-" + mj.ChildPrefix(id, 1) + "-1-abc"
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{
		child: {{ID: "a1", JobID: child, ClientStatus: "failed"}},
	}}
	d, ctx := fixDispatcher(t, 2, nomad, &fakeBlobs{})
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusQueued, NomadJobID: child, Attempt: 1})
	d.recon.reconcile(ctx)
	if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusQueued || j.Attempt != 2 || j.NomadJobID != "" || !strings.Contains(j.StatusDetail, "without reporting a result") {
		t.Fatalf("missing result: %+v", j)
	}
}

// A retried attempt of a running job is timed from its own start, not attempt 1's.
func TestRetriedAttemptTimeoutFromItsOwnStart(t *testing.T) {
	id := "00000000-0000-4000-8000-0000000000a3"
	child1 := "mediajobs-cpu/dispatch-" + mj.ChildPrefix(id, 1) + "-1-abc"
	child2 := "mediajobs-cpu/dispatch-" + mj.ChildPrefix(id, 2) + "-2-abc"
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{}} // child1 vanished
	d, ctx := fixDispatcher(t, 3, nomad, &fakeBlobs{})
	now := time.Now().UTC()
	first := now.Add(-2 * time.Hour) // longer ago than the 50 minute timeout
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child1, Attempt: 1, StartedAt: &first, TimeoutSeconds: 3000})

	d.recon.reconcile(ctx) // child 1 is gone: attempt 2, still running
	j, _ := d.Store.Job(ctx, id)
	if j.Status != mj.StatusRunning || j.Attempt != 2 || j.NomadJobID != "" || j.AttemptStartedAt != nil {
		t.Fatalf("after the lost worker: %+v", j)
	}
	// Attempt 2 is dispatched and waits for a node: not timed out.
	dispatched := now
	d.Store.UpdateJob(ctx, id, func(j *mj.Job) error { j.NomadJobID, j.DispatchedAt = child2, &dispatched; return nil })
	nomad.mu.Lock()
	nomad.children[child2] = nil
	nomad.mu.Unlock()
	d.recon.reconcile(ctx)
	if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusRunning {
		t.Fatalf("attempt 2 waiting for a node was failed: %q", j.ErrorMessage)
	}
	// Attempt 2 runs, started a minute ago: its own clock, well within the timeout.
	start2 := now.Add(-time.Minute)
	nomad.mu.Lock()
	nomad.children[child2] = []*api.AllocationListStub{{ID: "a2", JobID: child2, ClientStatus: "running",
		TaskStates: map[string]*api.TaskState{"runner": {StartedAt: start2}}}}
	nomad.mu.Unlock()
	d.recon.reconcile(ctx)
	j, _ = d.Store.Job(ctx, id)
	// The attempt's clock is the dispatcher's, from when it saw it run (a node's
	// clock behind would shorten the timeout): not before this reconcile.
	if j.Status != mj.StatusRunning || j.AttemptStartedAt == nil || j.AttemptStartedAt.Before(now) || !j.StartedAt.Equal(first) || !strings.Contains(j.StatusDetail, "attempt 2: running on Nomad allocation a2") {
		t.Fatalf("attempt 2 running: %s %q started %v attempt started %v", j.Status, j.ErrorMessage, j.StartedAt, j.AttemptStartedAt)
	}
	if strings.Contains(strings.Join(nomad.stopped, " "), child2) {
		t.Fatalf("attempt 2 stopped: %v", nomad.stopped)
	}
	// The backstop still works, on attempt 2's clock.
	late := now.Add(-time.Hour)
	d.Store.UpdateJob(ctx, id, func(j *mj.Job) error { j.AttemptStartedAt = &late; return nil })
	d.recon.reconcile(ctx)
	if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "timed out after 3000s") {
		t.Fatalf("overdue attempt 2: %s %q", j.Status, j.ErrorMessage)
	}
}

// Queued jobs of a machine no longer configured are failed, naming it; the
// configured pools' jobs are left alone.
func TestUnknownPoolJobsFail(t *testing.T) {
	d, ctx := fixDispatcher(t, 1, &fakeJobs{}, &fakeBlobs{})
	ids := map[string]string{ // id -> machine
		"00000000-0000-4000-8000-0000000000d1": "cpu",
		"00000000-0000-4000-8000-0000000000d2": "gone",    // after cpu's part
		"00000000-0000-4000-8000-0000000000d3": "a-gone",  // before cpu's part
		"00000000-0000-4000-8000-0000000000d4": "cpu-old", // next to it
		"00000000-0000-4000-8000-0000000000d5": "zzz",     // after every pool
		"00000000-0000-4000-8000-0000000000d6": "new",     // queued just now: a config may be catching up
	}
	now := time.Now().UTC()
	for id, m := range ids {
		at := now.Add(-time.Hour)
		if m == "new" {
			at = now
		}
		j := &mj.Job{ID: id, Status: mj.StatusQueued, AccountID: "acct", Machine: m, CreatedAt: at, QueuedAt: at}
		if err := d.Store.(interface {
			CreateJob(context.Context, *mj.Job) error
		}).CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	d.sched.failUnknownPools(ctx)
	for id, m := range ids {
		j, _ := d.Store.Job(ctx, id)
		if m == "cpu" || m == "new" {
			if j.Status != mj.StatusQueued {
				t.Errorf("configured pool's job: %s %q", j.Status, j.ErrorMessage)
			}
			continue
		}
		if j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, `machine "`+m+`" is not a pool`) {
			t.Errorf("%s: %s %q", m, j.Status, j.ErrorMessage)
		}
	}
	if ids, _, _ := d.Store.(*store.Store).JobIDs(ctx, d.Store.(*store.Store).QueuePrefix(), 0); len(ids) != 2 {
		t.Errorf("queue %v", ids)
	}
}
