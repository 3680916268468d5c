package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A transition that panics for one job, in a write group with others: the others
// are written, its job fails with an internal error, every caller is answered, and
// the group (and the process) goes on.
func TestPanickingTransitionFailsOnlyItsJob(t *testing.T) {
	d, ctx := fixDispatcher(t, 1, &fakeJobs{}, &fakeBlobs{})
	ids := make([]string, 5)
	for i := range ids {
		ids[i] = fmt.Sprintf("00000000-0000-4000-8000-0000000006%02d", i)
		started := time.Now().UTC()
		fixJob(t, d, &mj.Job{ID: ids[i], Status: mj.StatusRunning, NomadJobID: child(ids[i], 1), Attempt: 1, StartedAt: &started})
	}
	holder, bad, others := ids[0], ids[1], ids[2:]
	panics := testutil.ToFloat64(metrics.DispatcherPanics.WithLabelValues())

	// Hold one group in flight so that the next calls go together in the next.
	release, held := make(chan struct{}), make(chan struct{})
	holdErr := make(chan error, 1)
	go func() {
		_, err := d.settle.update(ctx, holder, func(j *mj.Job) error {
			close(held)
			<-release
			j.StatusDetail = "held"
			return nil
		})
		holdErr <- err
	}()
	<-held
	var wg sync.WaitGroup
	errs := make([]error, len(ids))
	for i, id := range ids[1:] {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i+1] = d.settle.update(ctx, id, func(j *mj.Job) error {
				if j.ID == bad {
					var m map[string]int
					m["boom"]++ // a nil map: panics
				}
				j.StatusDetail = "touched"
				return nil
			})
		}()
	}
	testenv.Eventually(t, 10*time.Second, "the calls queued together", func() bool {
		d.settle.writes.mu.Lock()
		defer d.settle.writes.mu.Unlock()
		return len(d.settle.writes.queue) == len(ids)-1
	})
	close(release)
	wg.Wait()
	if err := <-holdErr; err != nil {
		t.Fatalf("holder: %v", err)
	}

	var p *panicError
	if !errors.As(errs[1], &p) {
		t.Fatalf("the panicking change answered %v, want the panic as an error", errs[1])
	}
	for i, id := range others {
		if errs[i+2] != nil {
			t.Fatalf("job %s of the same group: %v", id, errs[i+2])
		}
		if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusRunning || j.StatusDetail != "touched" {
			t.Fatalf("job %s of the same group: %s %q", id, j.Status, j.StatusDetail)
		}
	}
	j, _ := d.Store.Job(ctx, bad)
	if j.Status != mj.StatusFailed || j.ErrorMessage != internalErrorMessage || j.StatusDetail == "touched" {
		t.Fatalf("the job whose change panicked: %s %q %q", j.Status, j.ErrorMessage, j.StatusDetail)
	}
	if got := testutil.ToFloat64(metrics.DispatcherPanics.WithLabelValues()); got != panics+1 {
		t.Fatalf("mediajobs_dispatcher_panics_total rose by %v, want 1", got-panics)
	}
	// The group still works.
	if _, err := d.settle.update(ctx, others[0], func(j *mj.Job) error { j.StatusDetail = "again"; return nil }); err != nil {
		t.Fatalf("an update after the panic: %v", err)
	}
}

// A panic of the group's run itself (outside any one job's change) answers every
// caller of the group with an error, and the next group runs.
func TestGroupRunPanicAnswersEveryCaller(t *testing.T) {
	var calls sync.Mutex
	n := 0
	g := &group[string, string]{key: func(s string) string { return s }, max: 8,
		run: func(_ context.Context, ins []string) ([]string, []error) {
			calls.Lock()
			n++
			first := n == 1
			calls.Unlock()
			if first {
				panic("broken run")
			}
			return append([]string(nil), ins...), make([]error, len(ins))
		}}
	done := make(chan error, 1)
	go func() { _, err := g.Do(context.Background(), "a"); done <- err }()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a call of a group that panicked succeeded")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("a call of a group that panicked was never answered")
	}
	if out, err := g.Do(context.Background(), "b"); err != nil || out != "b" {
		t.Fatalf("the next group: %q %v", out, err)
	}
}

// panicOnStopJobs panics when asked to stop one child.
type panicOnStopJobs struct {
	*fakeJobs
	bad string
}

func (p *panicOnStopJobs) Deregister(id string, purge bool, q *api.WriteOptions) (string, *api.WriteMeta, error) {
	if id == p.bad {
		panic("deregister " + id)
	}
	return p.fakeJobs.Deregister(id, purge, q)
}

// An event whose handling panics in its worker fails its job and nothing else:
// the worker applies the next events, and the batch counts as handled.
func TestEventWorkerPanicFailsItsJob(t *testing.T) {
	bad, good := "00000000-0000-4000-8000-000000000701", "00000000-0000-4000-8000-000000000702"
	nomad := &panicOnStopJobs{fakeJobs: &fakeJobs{}, bad: child(bad, 1)}
	d, ctx := fixDispatcher(t, 2, nomad, &fakeBlobs{})
	for _, id := range []string{bad, good} {
		started := time.Now().UTC().Add(-time.Minute)
		fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, StartedAt: &started})
	}
	// As eventLoop sets its workers up; one worker, so the good job's event waits
	// behind the bad one's.
	work := newPartitions(1, 8)
	work.onPanic = d.track.workerPanicked(ctx)
	defer work.close()
	mark := newWatermark(1)
	// Both allocations failed without a result: each job is retried, and its old
	// child stopped, which panics for the bad one.
	evs := &api.Events{Index: 7}
	for _, id := range []string{bad, good} {
		evs.Events = append(evs.Events, allocEvent(7, &api.Allocation{ID: "alloc-" + id[30:], JobID: child(id, 1), ClientStatus: api.AllocClientStatusFailed}))
	}
	d.track.submit(ctx, evs, work, mark)
	testenv.Eventually(t, 10*time.Second, "the batch handled", func() bool { return mark.get() == 7 })

	if j, _ := d.Store.Job(ctx, bad); j.Status != mj.StatusFailed || j.ErrorMessage != internalErrorMessage {
		t.Fatalf("the job whose event panicked: %s %q", j.Status, j.ErrorMessage)
	}
	if j, _ := d.Store.Job(ctx, good); j.Status != mj.StatusRunning || j.Attempt != 2 {
		t.Fatalf("the other job: %s attempt %d %q", j.Status, j.Attempt, j.ErrorMessage)
	}
}

// One job record that cannot be decoded (a field's JSON type changed in a newer
// version) stops no repair of the other jobs: reconcile skips it and goes on.
func TestReconcileGoesOnPastAnUndecodableJob(t *testing.T) {
	bad, good := "00000000-0000-4000-8000-000000000901", "00000000-0000-4000-8000-000000000902"
	blobs := &fakeBlobs{data: map[string][]byte{mj.RunScope(good, 1) + "result.json": mustJSON(mj.Result{JobID: good, Attempt: 1, Succeeded: true})}}
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{child(good, 1): {{ID: "a1", JobID: child(good, 1), ClientStatus: "complete"}}}}
	d, ctx := fixDispatcher(t, 1, nomad, blobs)
	for _, id := range []string{bad, good} {
		started := time.Now().UTC().Add(-time.Minute)
		fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, StartedAt: &started, TimeoutSeconds: 600})
	}
	cli := d.Store.(*store.Store).Client()
	resp, err := cli.Get(ctx, "", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	damaged := false
	for _, kv := range resp.Kvs {
		var m map[string]any
		if json.Unmarshal(kv.Value, &m) == nil && m["id"] == bad {
			m["attempt"] = "1" // a string where a number was
			if _, err := cli.Put(ctx, string(kv.Key), string(mustJSON(m))); err != nil {
				t.Fatal(err)
			}
			damaged = true
		}
	}
	if !damaged {
		t.Fatal("the job's record was not found")
	}
	d.recon.reconcile(ctx)
	if j, _ := d.Store.Job(ctx, good); j.Status != mj.StatusSucceeded {
		t.Fatalf("the readable job beside an undecodable one: %s %q", j.Status, j.ErrorMessage)
	}
}
