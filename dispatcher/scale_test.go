package dispatcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
)

// Tests of the dispatcher spread over goroutines: events applied by partitioned
// workers under a watermark, and reconcile in batches, against real etcd and the
// Nomad double (nomaddouble_test.go), or real Nomad where Nomad's answers matter.

func uuidN(n int) string { return fmt.Sprintf("00000000-0000-4000-8000-%012d", n) }

// Tasks of one key run in the order submitted, whatever the other keys do.
func TestPartitionsKeepPerKeyOrder(t *testing.T) {
	p := newPartitions(4, 8)
	const keys, per = 16, 500
	var mu sync.Mutex
	got := map[string][]int{}
	for i := range per {
		for k := range keys {
			key := fmt.Sprint("job-", k)
			p.submit(context.Background(), key, func() {
				runtime.Gosched() // let the workers interleave
				mu.Lock()
				got[key] = append(got[key], i)
				mu.Unlock()
			})
		}
	}
	p.close()
	for k := range keys {
		seq := got[fmt.Sprint("job-", k)]
		if len(seq) != per || !sort.IntsAreSorted(seq) {
			t.Fatalf("key %d ran %d tasks out of order: %v", k, len(seq), seq)
		}
	}
}

// The watermark moves to an index only once that batch and every earlier one is
// applied, however the batches complete.
func TestWatermarkNeverPassesAnUnappliedBatch(t *testing.T) {
	w := newWatermark(5)
	b10, b20, b30 := w.add(10, 2), w.add(20, 1), w.add(30, 1)
	b40 := w.add(40, 0) // nothing of ours in it
	check := func(want uint64) {
		t.Helper()
		if got := w.get(); got != want {
			t.Fatalf("watermark %d, want %d", got, want)
		}
	}
	check(5)
	w.done(b30)
	w.done(b10)
	check(5) // half of batch 10 is still being applied
	w.done(b20)
	check(5)
	w.done(b10)
	check(40) // 10, 20, 30 and the empty 40 are all applied
	_ = b40
	// Two batches at one index: the index is done only with both.
	c1, c2 := w.add(50, 1), w.add(50, 1)
	w.done(c1)
	check(40)
	w.done(c2)
	check(50)
}

// gatedBlobs holds reads of one key until the gate opens.
type gatedBlobs struct {
	*fakeBlobs
	key  string
	gate chan struct{}
}

func (g *gatedBlobs) ReadAll(ctx context.Context, key string) ([]byte, error) {
	if key == g.key {
		<-g.gate
	}
	return g.fakeBlobs.ReadAll(ctx, key)
}

// An event still being applied holds the watermark back, while the workers apply
// later batches of other jobs; it moves on once that event is applied.
func TestSlowEventHoldsTheWatermark(t *testing.T) {
	a, b, c := uuidN(1), uuidN(2), uuidN(3)
	blobs := &gatedBlobs{fakeBlobs: &fakeBlobs{data: map[string][]byte{
		mj.RunScope(b, 1) + "alloc-b/result.json": mustJSON(mj.Result{JobID: b, Attempt: 1, Succeeded: true}),
	}}, key: mj.RunScope(b, 1) + "alloc-b/result.json", gate: make(chan struct{})}
	d, ctx := fixDispatcher(t, 1, &fakeJobs{}, blobs)
	for _, id := range []string{a, b, c} {
		fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusQueued, NomadJobID: child(id, 1), Attempt: 1})
	}
	work := newPartitions(eventWorkers, eventQueue)
	defer work.close()
	mark := newWatermark(1)
	running := func(id string) *api.Allocation {
		return &api.Allocation{ID: "alloc-" + id[len(id)-1:], JobID: child(id, 1), ClientStatus: "running",
			TaskStates: map[string]*api.TaskState{"runner": {State: "running", StartedAt: time.Now().UTC()}}}
	}
	done := &api.Allocation{ID: "alloc-b", JobID: child(b, 1), ClientStatus: "complete",
		TaskStates: map[string]*api.TaskState{"runner": {State: "dead", FinishedAt: time.Now().UTC(), Events: []*api.TaskEvent{{Type: api.TaskTerminated, ExitCode: 0}}}}}
	other := &api.Allocation{ID: "x", JobID: "some-other-job", ClientStatus: "running"}
	d.track.submit(ctx, &api.Events{Index: 10, Events: []api.Event{allocEvent(10, running(a))}}, work, mark)
	d.track.submit(ctx, &api.Events{Index: 20, Events: []api.Event{allocEvent(20, done)}}, work, mark)
	d.track.submit(ctx, &api.Events{Index: 30, Events: []api.Event{allocEvent(30, running(c)), allocEvent(30, other)}}, work, mark)

	status := func(id string) mj.Status { j, _ := d.Store.Job(ctx, id); return j.Status }
	testenv.Eventually(t, 30*time.Second, "the events of a and c to be applied", func() bool {
		return status(a) == mj.StatusRunning && status(c) == mj.StatusRunning
	})
	if m := mark.get(); m != 10 {
		t.Fatalf("watermark %d with batch 20 still being applied; want 10", m)
	}
	close(blobs.gate)
	testenv.Eventually(t, 30*time.Second, "the watermark to reach 30", func() bool { return mark.get() == 30 })
	if status(b) != mj.StatusSucceeded {
		t.Fatalf("b: %s", status(b))
	}
}

// doubleDispatcher is a dispatcher on real etcd and the Nomad double.
func doubleDispatcher(t testing.TB, n *nomadDouble, blobs Blobs, maxAttempts int) (*Dispatcher, context.Context) {
	t.Helper()
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	cfg.Pools = []*config.Pool{{Name: "cpu", QueueLimit: "10m", StartTimeout: "5m", MaxAttempts: maxAttempts}}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	c := n.client()
	d := &Dispatcher{Config: cfg, Store: s, Jobs: c.Jobs(), Allocs: c.Allocations(), Events: c.EventStream(), Blobs: blobs,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), CallTimeout: 10 * time.Second}
	d.defaults()
	return d, context.Background()
}

// scenario sets up one job of each case reconcile settles, and returns the job ids
// by case.
func scenario(t *testing.T, d *Dispatcher, n *nomadDouble, blobs *fakeBlobs) map[string]string {
	t.Helper()
	now := time.Now().UTC()
	ago := func(dd time.Duration) *time.Time { x := now.Add(-dd); return &x }
	ids := map[string]string{}
	k := 100
	add := func(name string, j *mj.Job) string {
		k++
		j.ID = uuidN(k)
		ids[name] = j.ID
		if j.Attempt == 0 {
			j.Attempt = 1
		}
		if j.TimeoutSeconds == 0 {
			j.TimeoutSeconds = 3600
		}
		fixJob(t, d, j)
		return j.ID
	}
	runner := func(started time.Time) map[string]*api.TaskState {
		return map[string]*api.TaskState{"runner": {State: "running", StartedAt: started}}
	}
	exited := map[string]*api.TaskState{"runner": {State: "dead", FinishedAt: now.Add(-time.Hour), Events: []*api.TaskEvent{{Type: api.TaskTerminated, ExitCode: 0}}}}
	result := func(id string) {
		blobs.data[mj.RunScope(id, 1)+"result.json"] = mustJSON(mj.Result{JobID: id, Attempt: 1, Succeeded: true, InputBytes: 7})
	}

	// Running, and Nomad agrees: nothing to do.
	id := add("steady", &mj.Job{Status: mj.StatusRunning, StartedAt: ago(time.Minute), AttemptStartedAt: ago(time.Minute)})
	n.setChild(child(id, 1), &api.AllocationListStub{ID: "a-steady", ClientStatus: "running", TaskStates: runner(now.Add(-time.Minute))})
	d.Store.UpdateJob(context.Background(), id, func(j *mj.Job) error { j.NomadJobID = child(id, 1); return nil })
	// The stream missed "running".
	id = add("missed running", &mj.Job{Status: mj.StatusQueued, DispatchedAt: ago(time.Minute)})
	n.setChild(child(id, 1), &api.AllocationListStub{ID: "a-run", ClientStatus: "running", TaskStates: runner(now.Add(-30 * time.Second))})
	// Gone from Nomad, with no result, and with one.
	id = add("vanished", &mj.Job{Status: mj.StatusRunning, StartedAt: ago(time.Minute)})
	id = add("vanished with result", &mj.Job{Status: mj.StatusRunning, StartedAt: ago(time.Minute)})
	result(id)
	// Ended while the stream was away: a result, and none.
	id = add("dead complete", &mj.Job{Status: mj.StatusRunning, StartedAt: ago(time.Hour)})
	n.setChild(child(id, 1), &api.AllocationListStub{ID: "a-done", ClientStatus: "complete", TaskStates: exited})
	result(id)
	id = add("dead failed", &mj.Job{Status: mj.StatusRunning, StartedAt: ago(time.Hour)})
	n.setChild(child(id, 1), &api.AllocationListStub{ID: "a-fail", ClientStatus: "failed"})
	// Not placed: busy nodes (the evaluation says so), and nothing can place it.
	id = add("capacity", &mj.Job{Status: mj.StatusQueued, DispatchedAt: ago(time.Hour)})
	n.setChild(child(id, 1))
	n.setEvals(child(id, 1), &api.Evaluation{ID: "e1", ModifyIndex: 7, FailedTGAllocs: map[string]*api.AllocationMetric{"ffmpeg": {
		NodesEvaluated: 1, NodesInPool: 1, NodesExhausted: 1, DimensionExhausted: map[string]int{"memory": 1}}}})
	id = add("infeasible", &mj.Job{Status: mj.StatusQueued, DispatchedAt: ago(time.Hour), PlacementReason: "no node can run it (1 filtered by missing devices)"})
	n.setChild(child(id, 1))
	id = add("placed just now", &mj.Job{Status: mj.StatusQueued, DispatchedAt: ago(time.Second)})
	n.setChild(child(id, 1))
	// Placed, never started; running past its timeout.
	id = add("pending stuck", &mj.Job{Status: mj.StatusQueued, DispatchedAt: ago(2 * time.Hour)})
	n.setChild(child(id, 1), &api.AllocationListStub{ID: "a-pend", ClientStatus: "pending", CreateTime: now.Add(-time.Hour).UnixNano()})
	sawAt(d, "pending", "a-pend", now.Add(-time.Hour)) // this dispatcher saw it placed (see clock.go)
	id = add("overdue", &mj.Job{Status: mj.StatusRunning, StartedAt: ago(time.Hour), TimeoutSeconds: 60})
	n.setChild(child(id, 1), &api.AllocationListStub{ID: "a-late", ClientStatus: "running", TaskStates: runner(now.Add(-time.Hour))})
	// Nomad replaced a lost allocation: the lost one still counts.
	id = add("replaced", &mj.Job{Status: mj.StatusRunning, StartedAt: ago(time.Minute), AttemptStartedAt: ago(time.Minute)})
	n.setChild(child(id, 1), &api.AllocationListStub{ID: "a-lost", ClientStatus: "lost"},
		&api.AllocationListStub{ID: "a-again", ClientStatus: "running", TaskStates: runner(now.Add(-time.Minute))})
	// Children no job wants: of a finished job, of a superseded attempt; and one
	// whose dispatch is still being recorded, which stays.
	id = add("stray finished", &mj.Job{Status: mj.StatusSucceeded, FinishedAt: ago(time.Minute)})
	n.setChild(child(id, 1), &api.AllocationListStub{ID: "a-s1", ClientStatus: "running"})
	id = add("stray superseded", &mj.Job{Status: mj.StatusRunning, Attempt: 2, StartedAt: ago(time.Minute)})
	n.setChild(child(id, 1), &api.AllocationListStub{ID: "a-s2", ClientStatus: "running"})
	id = add("dispatch in flight", &mj.Job{Status: mj.StatusQueued})
	n.setChild(child(id, 1), &api.AllocationListStub{ID: "a-s3", ClientStatus: "pending", CreateTime: now.UnixNano()})
	// Jobs with a child of their own attempt on record.
	for name, id := range ids {
		switch name {
		case "stray finished", "stray superseded", "dispatch in flight", "steady":
			continue
		}
		d.Store.UpdateJob(context.Background(), id, func(j *mj.Job) error { j.NomadJobID = child(id, 1); return nil })
	}
	return ids
}

type outcome struct {
	Status             mj.Status
	Attempt            int
	Child, Detail, Err string
	Capacity, Stopped  bool
}

func outcomes(t *testing.T, d *Dispatcher, n *nomadDouble, ids map[string]string) map[string]outcome {
	t.Helper()
	out := map[string]outcome{}
	for name, id := range ids {
		j, err := d.Store.Job(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		out[name] = outcome{Status: j.Status, Attempt: j.Attempt, Child: j.NomadJobID, Detail: j.StatusDetail, Err: j.ErrorMessage,
			Capacity: j.WaitingForCapacity, Stopped: n.stopped(child(id, 1))}
	}
	return out
}

// A batched pass settles every case as the one-job-at-a-time pass did, and calls
// Nomad for a child of its own only where the lists cannot settle it.
func TestBatchedReconcileSettlesAsTheSequentialDid(t *testing.T) {
	run := func(batched bool) (map[string]outcome, map[string]int, *nomadDouble) {
		n := newNomadDouble(t)
		blobs := &fakeBlobs{data: map[string][]byte{}}
		d, ctx := doubleDispatcher(t, n, blobs, 3)
		ids := scenario(t, d, n, blobs)
		n.callCount()
		if batched {
			d.recon.reconcile(ctx)
		} else {
			d.settle.ungrouped = true
			d.reconcileSequential(ctx)
		}
		return outcomes(t, d, n, ids), n.callCount(), n
	}
	old, oldCalls, _ := run(false)
	got, calls, _ := run(true)
	for name, want := range old {
		if got[name] != want {
			t.Errorf("%s:\n batched    %+v\n sequential %+v", name, got[name], want)
		}
	}
	t.Logf("Nomad calls, sequential: %v", oldCalls)
	t.Logf("Nomad calls, batched: %v", calls)
	// The cases themselves, so that agreeing on a wrong outcome fails too.
	want := map[string]func(o outcome) bool{
		"steady":         func(o outcome) bool { return o.Status == mj.StatusRunning && !o.Stopped },
		"missed running": func(o outcome) bool { return o.Status == mj.StatusRunning && strings.Contains(o.Detail, "a-run") },
		"vanished": func(o outcome) bool {
			return o.Attempt == 2 && o.Child == "" && strings.Contains(o.Detail, "no longer exists")
		},
		"vanished with result": func(o outcome) bool { return o.Status == mj.StatusSucceeded },
		"dead complete":        func(o outcome) bool { return o.Status == mj.StatusSucceeded },
		"dead failed":          func(o outcome) bool { return o.Attempt == 2 && strings.Contains(o.Detail, "without reporting") },
		"capacity":             func(o outcome) bool { return o.Status == mj.StatusQueued && o.Capacity },
		"infeasible": func(o outcome) bool {
			return o.Status == mj.StatusFailed && strings.Contains(o.Err, "missing devices") && o.Stopped
		},
		"placed just now": func(o outcome) bool { return o.Status == mj.StatusQueued && o.Child != "" },
		"pending stuck": func(o outcome) bool {
			return o.Attempt == 2 && strings.Contains(o.Detail, "did not start") && o.Stopped
		},
		"overdue": func(o outcome) bool {
			return o.Status == mj.StatusFailed && strings.Contains(o.Err, "timed out") && o.Stopped
		},
		"replaced":           func(o outcome) bool { return o.Attempt == 2 && strings.Contains(o.Detail, "was lost") },
		"stray finished":     func(o outcome) bool { return o.Stopped },
		"stray superseded":   func(o outcome) bool { return o.Stopped },
		"dispatch in flight": func(o outcome) bool { return !o.Stopped },
	}
	for name, ok := range want {
		if !ok(got[name]) {
			t.Errorf("%s: %+v", name, got[name])
		}
	}
	// Per-child reads: Info only for the children not live (two vanished, two
	// ended); none at all for the steady one (checked through its total below).
	if calls["GET job/<id>"] != 4 {
		t.Errorf("batched pass read %d children by id, want 4", calls["GET job/<id>"])
	}
	if calls["GET allocations"] != 1 || calls["GET jobs"] != 1 {
		t.Errorf("batched pass lists: %v", calls)
	}
	perChild := calls["GET job/<id>"] + calls["GET job/<id>/allocations"] + calls["GET job/<id>/evaluations"]
	if perChild >= oldCalls["GET job/<id>"]+oldCalls["GET job/<id>/allocations"] {
		t.Errorf("batched pass made %d per-child calls, the sequential %v", perChild, oldCalls)
	}
}

// A pass over many steady jobs reads no job and no child alone.
func TestBatchedReconcileOfSteadyJobsCallsNoChild(t *testing.T) {
	n := newNomadDouble(t)
	d, ctx := doubleDispatcher(t, n, &fakeBlobs{}, 1)
	now := time.Now().UTC()
	for i := range 250 { // more than one multi-get
		id := uuidN(i + 1)
		fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, StartedAt: &now, AttemptStartedAt: &now, TimeoutSeconds: 600})
		n.setChild(child(id, 1), &api.AllocationListStub{ID: fmt.Sprint("a", i), ClientStatus: "running",
			TaskStates: map[string]*api.TaskState{"runner": {State: "running", StartedAt: now}}})
	}
	rev, _ := d.Store.(interface {
		Revision(context.Context) (int64, error)
	}).Revision(ctx)
	n.callCount()
	d.recon.reconcile(ctx)
	calls := n.callCount()
	if len(calls) != 2 || calls["GET allocations"] != 1 || calls["GET jobs"] != 1 {
		t.Fatalf("calls: %v", calls)
	}
	if after, _ := d.Store.(interface {
		Revision(context.Context) (int64, error)
	}).Revision(ctx); after != rev {
		t.Fatalf("a pass with nothing to do wrote to etcd: revision %d → %d", rev, after)
	}
}

// Events from the stream reach every job through the workers; the saved index
// becomes the last batch's once all are applied.
func TestEventLoopAppliesEveryJobsEvents(t *testing.T) {
	n := newNomadDouble(t)
	blobs := &fakeBlobs{data: map[string][]byte{}}
	d, _ := doubleDispatcher(t, n, blobs, 2)
	d.ReconcileEvery = time.Hour // the pass after connecting only
	rewire(d)
	const jobs = 300
	now := time.Now().UTC()
	var batches []doubleBatch
	index := uint64(100)
	for step := range 3 {
		var evs []api.Event
		for i := range jobs {
			id := uuidN(i + 1)
			a := &api.Allocation{ID: fmt.Sprintf("11111111-2222-4333-8444-%012d", i), JobID: child(id, 1), ClientStatus: "pending"}
			switch step {
			case 1:
				a.ClientStatus = "running"
				a.TaskStates = map[string]*api.TaskState{"runner": {State: "running", StartedAt: now}}
			case 2:
				a.ClientStatus = "complete"
				a.TaskStates = map[string]*api.TaskState{"runner": {State: "dead", StartedAt: now, FinishedAt: now,
					Events: []*api.TaskEvent{{Type: api.TaskTerminated, ExitCode: 0}}}}
			}
			index++
			evs = append(evs, allocEvent(index, a))
			if len(evs) == 50 {
				batches = append(batches, doubleBatch{Index: index, Events: evs})
				evs = nil
			}
		}
	}
	for i := range jobs {
		id := uuidN(i + 1)
		fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusQueued, NomadJobID: child(id, 1), Attempt: 1, DispatchedAt: &now, TimeoutSeconds: 600})
		n.setChild(child(id, 1), &api.AllocationListStub{ID: fmt.Sprintf("11111111-2222-4333-8444-%012d", i), ClientStatus: "pending", CreateTime: now.UnixNano()})
		blobs.data[mj.RunScope(id, 1)+fmt.Sprintf("11111111-2222-4333-8444-%012d", i)+"/result.json"] = mustJSON(mj.Result{JobID: id, Attempt: 1, Succeeded: true})
	}
	n.publish(batches...)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.track.eventLoop(ctx) }()
	defer func() { cancel(); <-done }()
	testenv.Eventually(t, 60*time.Second, "every job to succeed", func() bool {
		ids := make([]string, jobs)
		for i := range ids {
			ids[i] = uuidN(i + 1)
		}
		js, _ := d.Store.Jobs(context.Background(), ids)
		for _, j := range js {
			if j == nil || j.Status != mj.StatusSucceeded || j.StartedAt == nil {
				return false
			}
		}
		return true
	})
	testenv.Eventually(t, 30*time.Second, "the event index to be saved", func() bool {
		i, _ := d.Store.EventIndex(context.Background())
		return i == index
	})
}

// countingJobs counts the per-child calls reconcile makes.
type countingJobs struct {
	NomadJobs
	mu    sync.Mutex
	calls map[string]int
}

func (c *countingJobs) count(what string) {
	c.mu.Lock()
	c.calls[what]++
	c.mu.Unlock()
}

func (c *countingJobs) Info(id string, q *api.QueryOptions) (*api.Job, *api.QueryMeta, error) {
	c.count("info")
	return c.NomadJobs.Info(id, q)
}

func (c *countingJobs) Allocations(id string, all bool, q *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error) {
	c.count("allocations")
	return c.NomadJobs.Allocations(id, all, q)
}

func (c *countingJobs) Evaluations(id string, q *api.QueryOptions) ([]*api.Evaluation, *api.QueryMeta, error) {
	c.count("evaluations")
	return c.NomadJobs.Evaluations(id, q)
}

// Real Nomad takes the lists' filters, and its job summary agrees with its
// allocation list: a running job is settled from the two lists alone.
func TestReconcileListsOnRealNomad(t *testing.T) {
	r := newNomadRig(t, &config.Pool{Name: "cpu", MaxAttempts: 1})
	stop := r.start("d")
	id := "00000000-0000-4000-8000-0000000000e1"
	r.create(id, "cpu")
	testenv.Eventually(t, 60*time.Second, "the job to run", func() bool { return r.job(id).Status == mj.StatusRunning })
	stop()
	cj := &countingJobs{NomadJobs: r.agent.Client.Jobs(), calls: map[string]int{}}
	d := &Dispatcher{Config: r.cfg, Store: r.store, Jobs: cj, Allocs: r.agent.Client.Allocations(), Blobs: r.blobs,
		Signer: blob.Signer{Secret: []byte("test")}, Log: slog.New(slog.NewTextHandler(&r.log, nil))}
	d.defaults()
	ctx := context.Background()
	p := &pass{rc: d.recon}
	allocs, err := p.liveAllocs(ctx, "cpu")
	if err != nil || len(allocs) != 1 || allocs[0].JobID != r.job(id).NomadJobID {
		t.Fatalf("live allocations: %v %+v", err, allocs)
	}
	children, err := p.liveChildren(ctx)
	if err != nil || len(children) != 1 || children[0].ID != r.job(id).NomadJobID || children[0].JobSummary == nil {
		t.Fatalf("live children: %v %+v", err, children)
	}
	before := r.job(id)
	d.recon.reconcile(ctx)
	if len(cj.calls) != 0 {
		t.Fatalf("a running child cost calls of its own: %v\n%s", cj.calls, r.log.String())
	}
	if after := r.job(id); after.Revision != before.Revision {
		t.Fatalf("the job was written: %+v", after)
	}
	// Once stopped, its allocation ends and the child leaves the live lists.
	if _, _, err := r.agent.Client.Jobs().Deregister(before.NomadJobID, false, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the stopped child to leave the live lists", func() bool {
		a, err1 := p.liveAllocs(ctx, "cpu")
		c, err2 := p.liveChildren(ctx)
		return err1 == nil && err2 == nil && len(a) == 0 && len(c) == 0
	})
}

// The event path reads an allocation straight from the payload's map; it must
// read what decoding the whole allocation would.
func TestAllocFromEventReadsAsDecoding(t *testing.T) {
	now := time.Now().UTC()
	for _, a := range []*api.Allocation{
		{ID: "a1", JobID: child(uuidN(1), 1), ClientStatus: "pending", CreateTime: now.UnixNano(), ModifyTime: now.UnixNano()},
		{ID: "a2", JobID: child(uuidN(2), 1), ClientStatus: "running", ModifyTime: now.UnixNano(), TaskStates: runnerState(now)},
		{ID: "a3", JobID: child(uuidN(3), 1), ClientStatus: "complete", TaskStates: exitedState(now.Add(-time.Minute), now)},
		{ID: "a4", JobID: child(uuidN(4), 1), ClientStatus: "failed", TaskStates: map[string]*api.TaskState{
			"runner": {State: "dead", StartedAt: now, Events: []*api.TaskEvent{{Type: "Driver Failure", DisplayMessage: "no such file"}}},
			"upload": {State: "dead", FinishedAt: now, Events: []*api.TaskEvent{{Type: api.TaskTerminated, ExitCode: 1}}},
			"other":  {State: "running"},
		}},
		{ID: "a5", JobID: "not-ours", ClientStatus: "lost"},
	} {
		ev := allocEvent(7, a)
		decoded, err := ev.Allocation()
		if err != nil {
			t.Fatal(err)
		}
		want := fromAlloc(decoded)
		got, ok := allocFromEvent(&ev)
		if !ok || fmt.Sprintf("%+v", got) != fmt.Sprintf("%+v", want) {
			t.Errorf("%s:\n read    %+v\n decoded %+v", a.ID, got, want)
		}
	}
}
