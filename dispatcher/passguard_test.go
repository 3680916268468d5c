package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// What a reconcile pass must not do: die on a job it has not read, end an attempt
// on a list read a moment ago, or decide anything while Nomad cannot answer.

// A finished job's two live children (attempts 1 and 2), the job not in the pass's
// snapshot of active jobs: both are stopped (the second one used to crash the
// pass). Two live children of a job this store does not know are left alone.
func TestStraysOfAnUnreadJobWithTwoChildren(t *testing.T) {
	n := newNomadDouble(t)
	d, ctx := doubleDispatcher(t, n, &fakeBlobs{}, 3)
	done, foreign := uuidN(901), uuidN(902)
	now := time.Now().UTC()
	fixJob(t, d, &mj.Job{ID: done, Status: mj.StatusSucceeded, Attempt: 2, FinishedAt: &now})
	for _, id := range []string{done, foreign} {
		n.setChild(child(id, 1), &api.AllocationListStub{ID: "a1-" + id, ClientStatus: "running"})
		n.setChild(child(id, 2), &api.AllocationListStub{ID: "a2-" + id, ClientStatus: "running"})
	}
	d.recon.reconcile(ctx)
	if !n.stopped(child(done, 1)) || !n.stopped(child(done, 2)) {
		t.Errorf("the finished job's children: attempt 1 stopped %v, attempt 2 stopped %v", n.stopped(child(done, 1)), n.stopped(child(done, 2)))
	}
	if n.stopped(child(foreign, 1)) || n.stopped(child(foreign, 2)) {
		t.Errorf("an unknown job's children were stopped")
	}
}

// panickyJobs panics where a pass reads a child's allocations.
type panickyJobs struct{ *fakeJobs }

func (panickyJobs) Allocations(string, bool, *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error) {
	panic("boom")
}

// A panic in a pass ends the pass, logged with its stack, not the process.
func TestReconcilePanicEndsThePassOnly(t *testing.T) {
	id := uuidN(903)
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{child(id, 1): nil}}
	d, ctx := fixDispatcher(t, 1, panickyJobs{nomad}, &fakeBlobs{})
	var logs testenv.LogBuffer
	d.Log = slog.New(slog.NewTextHandler(&logs, nil))
	rewire(d)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusQueued, NomadJobID: child(id, 1), Attempt: 1})
	d.recon.reconcile(ctx)
	if l := logs.String(); !strings.Contains(l, "panic") || !strings.Contains(l, "boom") || !strings.Contains(l, "childAllocs") {
		t.Fatalf("no panic with its stack logged:\n%s", l)
	}
	if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusQueued || j.NomadJobID != child(id, 1) {
		t.Fatalf("the job moved: %+v", j)
	}
}

// afterAllocList calls after once, right after the first list of allocations.
type afterAllocList struct {
	NomadAllocs
	once  sync.Once
	after func()
}

func (a *afterAllocList) List(q *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error) {
	s, m, err := a.NomadAllocs.List(q)
	a.once.Do(a.after)
	return s, m, err
}

// An allocation listed "unknown" past the disconnect grace ends its attempt only
// when the child's own allocations, read then, still say so: a node that came
// back between the list and the settle keeps its attempt running.
func TestListedUnknownIsReadAgainBeforeEndingTheAttempt(t *testing.T) {
	n := newNomadDouble(t)
	d, ctx := doubleDispatcher(t, n, &fakeBlobs{data: map[string][]byte{}}, 2)
	now := time.Now().UTC()
	started, gone := now.Add(-20*time.Minute), now.Add(-10*time.Minute)
	back, still := uuidN(904), uuidN(905)
	for _, id := range []string{back, still} {
		fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, TimeoutSeconds: 3600,
			DispatchedAt: &started, StartedAt: &started, AttemptStartedAt: &started})
		n.setChild(child(id, 1), &api.AllocationListStub{ID: "a-" + id, ClientStatus: "unknown", ModifyTime: gone.UnixNano(),
			TaskStates: map[string]*api.TaskState{"runner": {State: "running", StartedAt: started}}})
		sawAt(d, "unknown", "a-"+id, gone) // this dispatcher saw it go (see clock.go)
	}
	d.recon.allocs = &afterAllocList{NomadAllocs: d.recon.allocs, after: func() { // the node of back reconnects
		n.setChild(child(back, 1), &api.AllocationListStub{ID: "a-" + back, ClientStatus: "running", ModifyTime: now.UnixNano(),
			TaskStates: map[string]*api.TaskState{"runner": {State: "running", StartedAt: started}}})
	}}
	d.recon.reconcile(ctx)
	if j, _ := d.Store.Job(ctx, back); j.Status != mj.StatusRunning || j.Attempt != 1 || j.NomadJobID != child(back, 1) || n.stopped(child(back, 1)) {
		t.Errorf("reconnected node: %s attempt %d child %q stopped %v (%s)", j.Status, j.Attempt, j.NomadJobID, n.stopped(child(back, 1)), j.StatusDetail)
	}
	if j, _ := d.Store.Job(ctx, still); j.Attempt != 2 || j.NomadJobID != "" || !strings.Contains(j.StatusDetail, "disconnected") {
		t.Errorf("node still gone: %s attempt %d child %q (%s)", j.Status, j.Attempt, j.NomadJobID, j.StatusDetail)
	}
}

// evalsDown is Nomad gone by the time a pass reads a child's evaluations.
type evalsDown struct{ *fakeJobs }

func (evalsDown) Evaluations(id string, _ *api.QueryOptions) ([]*api.Evaluation, *api.QueryMeta, error) {
	return nil, nil, &url.Error{Op: "Get", URL: "http://127.0.0.1:4646/v1/job/" + id + "/evaluations", Err: errors.New("connection refused")}
}

// A job not placed past its queue limit is not failed when its evaluations, which
// may say it waits for capacity, could not be read.
func TestUnreadEvaluationsFailNoJob(t *testing.T) {
	id := uuidN(906)
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{child(id, 1): nil}}
	d, ctx := fixDispatcher(t, 1, evalsDown{nomad}, &fakeBlobs{})
	long := time.Now().UTC().Add(-time.Hour) // far past the 10 minute queue limit
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusQueued, NomadJobID: child(id, 1), Attempt: 1, DispatchedAt: &long})
	d.recon.reconcile(ctx)
	if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusQueued || j.ErrorMessage != "" {
		t.Fatalf("failed from silence: %s %q", j.Status, j.ErrorMessage)
	}
	if len(nomad.stopped) != 0 {
		t.Fatalf("stopped %v", nomad.stopped)
	}
}

// Nomad answering its lists with a 5xx (no cluster leader) stops the pass: no
// child is read on its own, no job moves. A 4xx (a filter this Nomad does not
// take) still falls back to reading each child.
func TestListServerErrorStopsThePass(t *testing.T) {
	for _, tc := range []struct {
		name, path string
		code       int
		fallback   bool
	}{
		{"jobs 500", "/v1/jobs", http.StatusInternalServerError, false},
		{"allocations 500", "/v1/allocations", http.StatusInternalServerError, false},
		{"jobs 503", "/v1/jobs", http.StatusServiceUnavailable, false},
		{"jobs 400", "/v1/jobs", http.StatusBadRequest, true},
		{"allocations 400", "/v1/allocations", http.StatusBadRequest, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := newNomadDouble(t)
			d, ctx := doubleDispatcher(t, n, &fakeBlobs{}, 2)
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path == tc.path && r.URL.Query().Get("filter") != "" {
					http.Error(w, "No cluster leader", tc.code)
					return
				}
				n.serve(w, r)
			}))
			t.Cleanup(srv.Close)
			c, err := api.NewClient(&api.Config{Address: srv.URL})
			if err != nil {
				t.Fatal(err)
			}
			d.Jobs, d.Allocs = c.Jobs(), c.Allocations()
			rewire(d)
			now := time.Now().UTC()
			var ids []string
			for k := range 3 { // the stream missed "running"
				id := uuidN(910 + k)
				ids = append(ids, id)
				fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusQueued, NomadJobID: child(id, 1), Attempt: 1, DispatchedAt: &now})
				n.setChild(child(id, 1), &api.AllocationListStub{ID: "a-" + id, ClientStatus: "running",
					TaskStates: map[string]*api.TaskState{"runner": {State: "running", StartedAt: now}}})
			}
			n.callCount()
			d.recon.reconcile(ctx)
			calls := n.callCount()
			perChild := calls["GET job/<id>"] + calls["GET job/<id>/allocations"] + calls["GET job/<id>/evaluations"]
			for _, id := range ids {
				j, _ := d.Store.Job(ctx, id)
				if tc.fallback != (j.Status == mj.StatusRunning) {
					t.Errorf("%s: %s", id, j.Status)
				}
			}
			if tc.fallback != (perChild > 0) {
				t.Errorf("per-child calls %v", calls)
			}
		})
	}
}

// A stream whose reader waits on full event queues longer than the idle limit is
// not taken for a silent one once the queues take the batch.
func TestBlockedSubmitIsNotASilentStream(t *testing.T) {
	defer func(was time.Duration) { streamIdle = was }(streamIdle)
	streamIdle = 300 * time.Millisecond
	n := newNomadDouble(t)
	d, ctx := doubleDispatcher(t, n, &fakeBlobs{}, 1)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	work := newPartitions(1, 1)
	defer work.close()
	gate := make(chan struct{})
	work.submit(ctx, "x", func() { <-gate }) // running
	work.submit(ctx, "x", func() {})         // queued: the queue is full
	events := make(chan *api.Events)
	done := make(chan struct{})
	backoff := time.Second
	go func() { defer close(done); d.track.follow(ctx, events, work, newWatermark(1), &backoff) }()
	c := child(uuidN(920), 1)
	events <- &api.Events{Index: 2, Events: []api.Event{allocEvent(2, &api.Allocation{ID: "a", JobID: c, ClientStatus: "running"})}}
	time.Sleep(3 * streamIdle) // the reader waits on the queue
	close(gate)
	select {
	case <-done:
		t.Fatal("follow took the wait on its own queue for a silent stream")
	case <-time.After(streamIdle / 2):
	}
	cancel()
	<-done
}
