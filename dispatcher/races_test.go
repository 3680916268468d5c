package dispatcher

import (
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
)

// The dispatcher's own decisions under races and outages, against real etcd and
// a stand-in for Nomad. What Nomad itself does is in nomad_test.go.

func child(id string, attempt int) string {
	return "mediajobs-cpu/dispatch-" + mj.ChildPrefix(id, attempt) + "-1-abc"
}

// A job whose nodes are busy waits for one; only a job no node can take fails at
// the queue limit.
func TestCapacityIsNotInfeasibility(t *testing.T) {
	busy, never := "00000000-0000-4000-8000-0000000000c1", "00000000-0000-4000-8000-0000000000c2"
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{child(busy, 1): nil, child(never, 1): nil}}
	d, ctx := fixDispatcher(t, 1, nomad, &fakeBlobs{})
	long := time.Now().UTC().Add(-time.Hour) // far past the 10 minute queue limit
	fixJob(t, d, &mj.Job{ID: busy, Status: mj.StatusQueued, NomadJobID: child(busy, 1), Attempt: 1, DispatchedAt: &long})
	fixJob(t, d, &mj.Job{ID: never, Status: mj.StatusQueued, NomadJobID: child(never, 1), Attempt: 1, DispatchedAt: &long})
	d.recon.placementFailed(ctx, child(busy, 1), map[string]*api.AllocationMetric{"ffmpeg": {
		NodesEvaluated: 3, NodesInPool: 3, NodesExhausted: 3, DimensionExhausted: map[string]int{"cpu": 3},
	}})
	d.recon.placementFailed(ctx, child(never, 1), map[string]*api.AllocationMetric{"ffmpeg": {
		NodesEvaluated: 3, NodesInPool: 3, NodesFiltered: 3, ConstraintFiltered: map[string]int{"missing devices": 3},
	}})
	// A third job's evaluation never arrived on the stream: reconcile reads it.
	missed := "00000000-0000-4000-8000-0000000000cd"
	nomad.children[child(missed, 1)] = nil
	nomad.evals = map[string][]*api.Evaluation{child(missed, 1): {{ID: "e1", ModifyIndex: 7, FailedTGAllocs: map[string]*api.AllocationMetric{"ffmpeg": {
		NodesEvaluated: 1, NodesInPool: 1, NodesExhausted: 1, DimensionExhausted: map[string]int{"memory": 1}}}}}}
	fixJob(t, d, &mj.Job{ID: missed, Status: mj.StatusQueued, NomadJobID: child(missed, 1), Attempt: 1, DispatchedAt: &long})
	d.recon.reconcile(ctx)
	if j, _ := d.Store.Job(ctx, missed); j.Status != mj.StatusQueued || !j.WaitingForCapacity {
		t.Fatalf("busy cluster, event missed: %s %q %q", j.Status, j.StatusDetail, j.ErrorMessage)
	}
	if j, _ := d.Store.Job(ctx, busy); j.Status != mj.StatusQueued || !j.WaitingForCapacity || !strings.Contains(j.StatusDetail, "waiting for a free node") {
		t.Fatalf("busy cluster: %s %q %q", j.Status, j.StatusDetail, j.ErrorMessage)
	}
	if j, _ := d.Store.Job(ctx, never); j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "missing devices") {
		t.Fatalf("infeasible: %s %q", j.Status, j.ErrorMessage)
	}
	if d.Config.Pools[0].MaxInFlight <= 0 {
		t.Fatalf("max_in_flight defaults to %d: a burst would become blocked evaluations", d.Config.Pools[0].MaxInFlight)
	}
}

// A child Nomad no longer knows may have reported before it went: its result is
// applied (with its allocation's outputs), not retried.
func TestVanishedChildResultCounts(t *testing.T) {
	id := "00000000-0000-4000-8000-0000000000c3"
	alloc := "11111111-2222-4333-8444-555555555555"
	blobs := &fakeBlobs{data: map[string][]byte{
		mj.RunScope(id, 1) + alloc + "/result.json": mustJSON(mj.Result{JobID: id, Attempt: 1, AllocID: alloc, Succeeded: true,
			Outputs: []mj.Output{{Name: "out.mp4", Size: 5}}}),
	}}
	d, ctx := fixDispatcher(t, 3, &fakeJobs{children: map[string][]*api.AllocationListStub{}}, blobs)
	started := time.Now().UTC().Add(-time.Minute)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, StartedAt: &started,
		TimeoutSeconds: 600, OutputNames: []string{"out.mp4"}})
	d.recon.reconcile(ctx)
	j, _ := d.Store.Job(ctx, id)
	if j.Status != mj.StatusSucceeded || j.Attempt != 1 || len(j.Outputs) != 1 || j.Outputs[0].Key != mj.RunScope(id, 1)+alloc+"/outputs/out.mp4" {
		t.Fatalf("vanished child with a result: %s attempt %d outputs %+v %q", j.Status, j.Attempt, j.Outputs, j.StatusDetail)
	}
}

// An allocation placed but never started (an image pull that hangs) ends at the
// pool's start_timeout, counted from its placement, as a lost worker: a new
// attempt, the child stopped.
func TestPendingPastStartTimeoutIsRetried(t *testing.T) {
	stuck, fresh := "00000000-0000-4000-8000-0000000000c4", "00000000-0000-4000-8000-0000000000c5"
	long, now := time.Now().UTC().Add(-time.Hour), time.Now().UTC()
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{
		child(stuck, 1): {{ID: "p1", JobID: child(stuck, 1), ClientStatus: "pending", CreateTime: long.UnixNano()}},
		// Waited an hour for a free node, placed just now: its start is timed from
		// the placement, not the dispatch.
		child(fresh, 1): {{ID: "p2", JobID: child(fresh, 1), ClientStatus: "pending", CreateTime: now.UnixNano()}},
	}}
	d, ctx := fixDispatcher(t, 2, nomad, &fakeBlobs{})
	sawAt(d, "pending", "p1", long) // this dispatcher saw it placed (see clock.go)
	fixJob(t, d, &mj.Job{ID: stuck, Status: mj.StatusQueued, NomadJobID: child(stuck, 1), Attempt: 1, DispatchedAt: &long})
	fixJob(t, d, &mj.Job{ID: fresh, Status: mj.StatusQueued, NomadJobID: child(fresh, 1), Attempt: 1, DispatchedAt: &long, WaitingForCapacity: true})
	d.recon.reconcile(ctx)
	if j, _ := d.Store.Job(ctx, stuck); j.Status != mj.StatusQueued || j.Attempt != 2 || j.NomadJobID != "" || !strings.Contains(j.StatusDetail, "did not start within") {
		t.Fatalf("stuck allocation: %s attempt %d %q", j.Status, j.Attempt, j.StatusDetail)
	}
	if j, _ := d.Store.Job(ctx, fresh); j.Attempt != 1 || j.NomadJobID != child(fresh, 1) {
		t.Fatalf("a fresh pending allocation was touched: %+v", j)
	}
	if s := strings.Join(nomad.stopped, " "); !strings.Contains(s, child(stuck, 1)) || strings.Contains(s, child(fresh, 1)) {
		t.Fatalf("stopped: %s", s)
	}
}

// The timeout backstop stops only a worker that is still alive; an allocation that
// completed, whose result is not readable yet, is left for the next pass.
func TestBackstopOnlyForALiveWorker(t *testing.T) {
	id := "00000000-0000-4000-8000-0000000000c6"
	done := time.Now().UTC().Add(-10 * time.Second)
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{child(id, 1): {{ID: "a1", JobID: child(id, 1), ClientStatus: "complete",
		TaskStates: map[string]*api.TaskState{"runner": {State: "dead", FinishedAt: done, Events: []*api.TaskEvent{{Type: api.TaskTerminated, ExitCode: 0}}}}}}}}
	d, ctx := fixDispatcher(t, 3, nomad, &fakeBlobs{})
	started := time.Now().UTC().Add(-time.Hour)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, StartedAt: &started, TimeoutSeconds: 60})
	d.recon.reconcile(ctx)
	j, _ := d.Store.Job(ctx, id)
	if j.Status != mj.StatusRunning || j.Attempt != 1 || j.NomadJobID != child(id, 1) {
		t.Fatalf("a completed worker with a late result was failed or re-run: %s attempt %d %q %q", j.Status, j.Attempt, j.ErrorMessage, j.StatusDetail)
	}
	if len(nomad.stopped) != 0 {
		t.Fatalf("stopped %v", nomad.stopped)
	}
}

// A runner that died (exit 2, or killed) is retried; one that reported (exit 0 or
// 1) but whose result is late is read again, never re-run, until resultGrace.
func TestLateResultIsReadNotRerun(t *testing.T) {
	now := time.Now().UTC()
	j := &mj.Job{ID: "j", Status: mj.StatusRunning, Attempt: 1, NomadJobID: "c"}
	ended := func(code int, at time.Time) allocState {
		a := allocState{ID: "a", NomadJobID: "c", ClientStatus: "complete"}
		a.taskInfo(map[string]*api.TaskState{"runner": {State: "dead", FinishedAt: at, Events: []*api.TaskEvent{{Type: api.TaskTerminated, ExitCode: code}}}})
		return a
	}
	if err := transition(&mj.Job{Attempt: 1}, ended(0, now), nil, now, "p/", 3, defaultDisconnectGrace); err != errSkip {
		t.Fatalf("reported, result late: %v", err)
	}
	if err := transition(&mj.Job{Attempt: 1}, ended(1, now.Add(-time.Second)), nil, now, "p/", 3, defaultDisconnectGrace); err != errSkip {
		t.Fatalf("reported a failure, result late: %v", err)
	}
	for _, a := range []allocState{ended(2, now), ended(0, now.Add(-resultGrace-time.Second)), {ID: "a", ClientStatus: "failed"}} {
		jj := *j
		if err := transition(&jj, a, nil, now, "p/", 3, defaultDisconnectGrace); err != nil || jj.Attempt != 2 || jj.NomadJobID != "" {
			t.Fatalf("%+v: attempt %d %q (%v)", a, jj.Attempt, jj.StatusDetail, err)
		}
	}
	// docker pools: the upload task is the one that reports.
	a := allocState{}
	a.taskInfo(map[string]*api.TaskState{
		"runner": {State: "dead", Events: []*api.TaskEvent{{Type: api.TaskTerminated, ExitCode: 0}}},
		"upload": {State: "dead", FinishedAt: now, Events: []*api.TaskEvent{{Type: api.TaskTerminated, ExitCode: 2}}},
	})
	if a.Reported {
		t.Fatal("upload exited 2 (nothing reported), yet counted as reported")
	}
}

// A dispatch whose record fails because another leader recorded the same child
// (same idempotency token, same child) never stops that child.
func TestDispatchNeverStopsARecordedChild(t *testing.T) {
	id := "00000000-0000-4000-8000-0000000000c7"
	nomad := &racingNomad{fakeJobs: fakeJobs{children: map[string][]*api.AllocationListStub{}}}
	d, ctx := fixDispatcher(t, 1, nomad, &fakeBlobs{})
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusQueued, Attempt: 1})
	nomad.during = func(child string) { // the other leader records it meanwhile
		d.Store.UpdateJob(ctx, id, func(j *mj.Job) error { j.NomadJobID = child; return nil })
	}
	if err := d.sched.dispatch(ctx, id); err != nil {
		t.Fatal(err)
	}
	if j, _ := d.Store.Job(ctx, id); j.NomadJobID == "" || len(nomad.stopped) != 0 {
		t.Fatalf("the recorded child %q was stopped: %v", j.NomadJobID, nomad.stopped)
	}
	// A child dispatched for a job cancelled meanwhile is stopped.
	id2 := "00000000-0000-4000-8000-0000000000c8"
	fixJob(t, d, &mj.Job{ID: id2, Status: mj.StatusQueued, Attempt: 1})
	nomad.during = func(string) {
		d.Store.UpdateJob(ctx, id2, func(j *mj.Job) error { j.Status = mj.StatusCancelled; return nil })
	}
	d.sched.dispatch(ctx, id2)
	if len(nomad.stopped) != 1 || !strings.Contains(nomad.stopped[0], id2) {
		t.Fatalf("a child nobody wants was not stopped: %v", nomad.stopped)
	}
}

type racingNomad struct {
	fakeJobs
	during func(child string)
}

func (r *racingNomad) DispatchOpts(o *api.DispatchOptions, _ *api.WriteOptions) (*api.JobDispatchResponse, *api.WriteMeta, error) {
	c := o.JobID + "/dispatch-" + o.IdPrefixTemplate + "-1-abc"
	r.during(c)
	return &api.JobDispatchResponse{DispatchedJobID: c}, nil, nil
}

// Live children of an attempt the job has moved past, or of a finished job, are
// stopped; a child of the current attempt is not, recorded or not.
func TestStrayChildrenAreStopped(t *testing.T) {
	old, cur := "00000000-0000-4000-8000-0000000000c9", "00000000-0000-4000-8000-0000000000ca"
	nomad := &listingNomad{fakeJobs: fakeJobs{children: map[string][]*api.AllocationListStub{}}}
	d, ctx := fixDispatcher(t, 3, nomad, &fakeBlobs{})
	fixJob(t, d, &mj.Job{ID: old, Status: mj.StatusRunning, Attempt: 2}) // attempt 2 queued
	fixJob(t, d, &mj.Job{ID: cur, Status: mj.StatusQueued, Attempt: 1})  // dispatch in flight
	for _, c := range []string{child(old, 1), child(old, 2), child(cur, 1)} {
		nomad.list = append(nomad.list, &api.JobListStub{ID: c, ParentID: "mediajobs-cpu", Status: "running"})
	}
	d.recon.stopStrayChildren(ctx)
	if s := strings.Join(nomad.stopped, " "); s != child(old, 1) {
		t.Fatalf("stopped %q, want only %s", s, child(old, 1))
	}
}

type listingNomad struct {
	fakeJobs
	list []*api.JobListStub
}

func (l *listingNomad) List(*api.QueryOptions) ([]*api.JobListStub, *api.QueryMeta, error) {
	return l.list, nil, nil
}

// A Nomad that accepts connections and never answers (a half-open connection)
// cannot stall reconcile: every call has a deadline.
func TestNomadCallsHaveDeadlines(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var held []net.Conn
	var mu sync.Mutex
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c) // read nothing, answer nothing
			mu.Unlock()
		}
	}()
	defer func() {
		mu.Lock()
		for _, c := range held {
			c.Close()
		}
		mu.Unlock()
	}()
	client, err := api.NewClient(&api.Config{Address: "http://" + ln.Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	id := "00000000-0000-4000-8000-0000000000cb"
	d, ctx := fixDispatcher(t, 1, client.Jobs(), &fakeBlobs{})
	d.CallTimeout = 300 * time.Millisecond
	rewire(d)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusQueued, NomadJobID: child(id, 1), Attempt: 1})
	done := make(chan struct{})
	go func() { d.recon.reconcile(ctx); d.sched.dispatchPool(ctx, d.Config.Pools[0]); close(done) }()
	select {
	case <-done:
	case <-time.After(time.Minute): // a generous bound: without deadlines it never returns
		t.Fatal("reconcile and dispatch stalled on a Nomad that never answers")
	}
	if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusQueued || j.NomadJobID != child(id, 1) {
		t.Fatalf("a silent Nomad changed the job: %+v", j)
	}
}

// An allocation whose node stopped heartbeating ("unknown") is waited for a few
// minutes, then the attempt is retried as a new child and the old one stopped.
func TestDisconnectedAllocation(t *testing.T) {
	now := time.Now().UTC()
	unknown := func(since time.Time) allocState {
		return allocState{ID: "a", NomadJobID: "c", ClientStatus: api.AllocClientStatusUnknown, Modified: since}
	}
	j := &mj.Job{Status: mj.StatusRunning, Attempt: 1, NomadJobID: "c"}
	if err := transition(j, unknown(now.Add(-time.Minute)), nil, now, "p/", 3, defaultDisconnectGrace); err != errSkip {
		t.Fatalf("a node gone for a minute: %v", err)
	}
	if err := transition(j, unknown(now.Add(-defaultDisconnectGrace-time.Second)), nil, now, "p/", 3, defaultDisconnectGrace); err != nil || j.Attempt != 2 || j.NomadJobID != "" || !strings.Contains(j.StatusDetail, "disconnected") {
		t.Fatalf("a node gone past the grace: %v %+v", err, j)
	}
	// dispatcher.disconnect_grace shortens it.
	j = &mj.Job{Status: mj.StatusRunning, Attempt: 1, NomadJobID: "c"}
	if err := transition(j, unknown(now.Add(-11*time.Second)), nil, now, "p/", 3, 10*time.Second); err != nil || j.Attempt != 2 || !strings.Contains(j.StatusDetail, "10s") {
		t.Fatalf("a node gone past a 10s grace: %v %+v", err, j)
	}
}

// Where Nomad ran an attempt twice, the copy that finished with a result is
// applied, whatever order Nomad lists them in; a lost sibling does not start a new
// attempt over it.
func TestReplacementResultIsApplied(t *testing.T) {
	id := "00000000-0000-4000-8000-0000000000cc"
	lost, done := "11111111-2222-4333-8444-000000000001", "11111111-2222-4333-8444-000000000002"
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{child(id, 1): {
		{ID: lost, JobID: child(id, 1), ClientStatus: "lost"},
		{ID: done, JobID: child(id, 1), ClientStatus: "complete"},
	}}}
	blobs := &fakeBlobs{data: map[string][]byte{
		mj.RunScope(id, 1) + done + "/result.json": mustJSON(mj.Result{JobID: id, Attempt: 1, AllocID: done, Succeeded: true,
			Outputs: []mj.Output{{Name: "out.mp4", Size: 5}}}),
	}}
	d, ctx := fixDispatcher(t, 3, nomad, blobs)
	started := time.Now().UTC().Add(-time.Minute)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, StartedAt: &started,
		TimeoutSeconds: 600, OutputNames: []string{"out.mp4"}})
	d.recon.reconcile(ctx)
	j, _ := d.Store.Job(ctx, id)
	if j.Status != mj.StatusSucceeded || j.Attempt != 1 || j.Outputs[0].Key != mj.RunScope(id, 1)+done+"/outputs/out.mp4" {
		t.Fatalf("replacement's result: %s attempt %d %+v", j.Status, j.Attempt, j.Outputs)
	}
}

// Only a child that still waits tells the dispatcher its pool is full: the
// failed placement of a child that has started since (an event replayed after a
// reconnect) leaves the pool's room unknown, so the window stays the lookahead.
func TestReplayedPlacementFailureLeavesTheRoom(t *testing.T) {
	started, waiting := "00000000-0000-4000-8000-0000000000e1", "00000000-0000-4000-8000-0000000000e2"
	d, ctx := fixDispatcher(t, 1, &fakeJobs{children: map[string][]*api.AllocationListStub{}}, &fakeBlobs{})
	at := time.Now().UTC()
	fixJob(t, d, &mj.Job{ID: started, Machine: "cpu", Status: mj.StatusRunning, NomadJobID: child(started, 1), Attempt: 1, DispatchedAt: &at, StartedAt: &at})
	fixJob(t, d, &mj.Job{ID: waiting, Machine: "cpu", Status: mj.StatusQueued, NomadJobID: child(waiting, 1), Attempt: 1, DispatchedAt: &at})
	noRoom := map[string]*api.AllocationMetric{"ffmpeg": {NodesEvaluated: 1, NodesInPool: 1, NodesExhausted: 1, DimensionExhausted: map[string]int{"memory": 1}}}
	d.sched.room.observe("cpu", 6, 4, time.Now())
	d.recon.placementFailed(ctx, child(started, 1), noRoom)
	if r := d.sched.room.observe("cpu", 6, 4, time.Now()); r.Known {
		t.Fatalf("a replayed failure set the room: %+v", r)
	}
	d.recon.placementFailed(ctx, child(waiting, 1), noRoom)
	if r := d.sched.room.observe("cpu", 6, 4, time.Now()); !r.Known || r.Room != 6 {
		t.Fatalf("a waiting child's failure: %+v; want room 6", r)
	}
}
