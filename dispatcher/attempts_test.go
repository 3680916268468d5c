package dispatcher

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
)

// Healthy attempts are not ended, finished ones not failed (issue 23): replays,
// skewed clocks, late results, Nomad in trouble, removed pools, twin children.

// sawAt makes d remember having seen alloc in a timed state ("unknown",
// "pending", "reported") since at: a dispatcher that has watched it that long.
func sawAt(d *Dispatcher, kind, alloc string, at time.Time) {
	d.settle.seen.first(kind+"/"+alloc, at)
}

// An old "unknown" event (a replay from an early index) of an allocation that is
// running now ends nothing: the event path reads the allocation again.
func TestReplayedUnknownEventKeepsAHealthyAttempt(t *testing.T) {
	id := uuidN(2301)
	started := time.Now().UTC().Add(-time.Minute)
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{child(id, 1): {{ID: "a1", JobID: child(id, 1), ClientStatus: "running",
		TaskStates: map[string]*api.TaskState{"runner": {State: "running", StartedAt: started}}}}}}
	d, ctx := fixDispatcher(t, 1, nomad, &fakeBlobs{})
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, TimeoutSeconds: 3600,
		StartedAt: &started, AttemptStartedAt: &started})
	hoursAgo := time.Now().Add(-5 * time.Hour)
	old := allocEvent(3, &api.Allocation{ID: "a1", JobID: child(id, 1), ClientStatus: "unknown", ModifyTime: hoursAgo.UnixNano()})
	sawAt(d, "unknown", "a1", hoursAgo) // even a dispatcher that saw it then
	d.track.handleEvent(ctx, old)
	if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusRunning || j.NomadJobID != child(id, 1) || len(nomad.stopped) != 0 {
		t.Fatalf("a replayed unknown event ended a running attempt: %s %q %q stopped %v", j.Status, j.ErrorMessage, j.StatusDetail, nomad.stopped)
	}
	// Still unknown now, and seen so past the grace: the event ends the attempt.
	nomad.mu.Lock()
	nomad.children[child(id, 1)][0].ClientStatus, nomad.children[child(id, 1)][0].ModifyTime = "unknown", hoursAgo.UnixNano()
	nomad.mu.Unlock()
	sawAt(d, "unknown", "a1", hoursAgo) // seen running since: timed afresh
	d.track.handleEvent(ctx, old)
	if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "disconnected") {
		t.Fatalf("a node gone for hours: %s %q", j.Status, j.ErrorMessage)
	}
}

// indexStore's saved event index cannot be read the first fails times, then reads
// as value, or as err when set (a damaged value).
type indexStore struct {
	Store
	mu    sync.Mutex
	fails int
	value uint64
	err   error
}

func (s *indexStore) EventIndex(ctx context.Context) (uint64, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fails > 0 {
		s.fails--
		return 0, context.DeadlineExceeded // an etcd election, a timeout
	}
	return s.value, s.err
}

// streamAt records the index each stream starts from.
type streamAt struct {
	mu  sync.Mutex
	got []uint64
}

func (s *streamAt) Stream(ctx context.Context, _ map[api.Topic][]string, index uint64, _ *api.QueryOptions) (<-chan *api.Events, error) {
	s.mu.Lock()
	s.got = append(s.got, index)
	s.mu.Unlock()
	return make(chan *api.Events), nil // quiet until ctx ends
}

func (s *streamAt) first() (uint64, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.got) == 0 {
		return 0, false
	}
	return s.got[0], true
}

// indexNomad answers a job list with Nomad's index.
type indexNomad struct{ fakeJobs }

func (*indexNomad) List(*api.QueryOptions) ([]*api.JobListStub, *api.QueryMeta, error) {
	return nil, &api.QueryMeta{LastIndex: 77}, nil
}

// A saved event index that cannot be read is read again, not taken for 0 (which
// replays Nomad's oldest events); a damaged one resumes from Nomad's index.
func TestUnreadableEventIndexIsNotAReplay(t *testing.T) {
	for _, tc := range []struct {
		name  string
		store func(Store) *indexStore
		want  uint64
	}{
		{"unreadable", func(s Store) *indexStore { return &indexStore{Store: s, fails: 2, value: 42} }, 42},
		{"damaged", func(s Store) *indexStore {
			_, err := strconv.ParseUint("4x", 10, 64)
			return &indexStore{Store: s, err: err}
		}, 77},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d, _ := fixDispatcher(t, 1, &indexNomad{}, &fakeBlobs{})
			d.Store = tc.store(d.Store)
			ev := &streamAt{}
			d.Events = ev
			rewire(d)
			ctx, cancel := context.WithCancel(context.Background())
			done := make(chan struct{})
			go func() { defer close(done); d.track.eventLoop(ctx) }()
			testenv.Eventually(t, 30*time.Second, "the stream to start", func() bool { _, ok := ev.first(); return ok })
			cancel()
			<-done
			if got, _ := ev.first(); got != tc.want {
				t.Fatalf("the stream started at index %d, want %d", got, tc.want)
			}
		})
	}
}

// The dispatcher's clock an hour ahead of Nomad's and its nodes' makes every
// timestamp of theirs look an hour old: that ends no attempt. Durations count on
// the dispatcher's own clock, from its first sight.
func TestSkewedClockEndsNoAttempt(t *testing.T) {
	gone, pend, late := uuidN(2311), uuidN(2312), uuidN(2313)
	now := time.Now().UTC()
	reported := map[string]*api.TaskState{"runner": {State: "dead", FinishedAt: now, Events: []*api.TaskEvent{{Type: api.TaskTerminated, ExitCode: 0}}}}
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{
		child(gone, 1): {{ID: "u1", JobID: child(gone, 1), ClientStatus: "unknown", ModifyTime: now.UnixNano()}},
		child(pend, 1): {{ID: "p1", JobID: child(pend, 1), ClientStatus: "pending", CreateTime: now.UnixNano()}},
		child(late, 1): {{ID: "r1", JobID: child(late, 1), ClientStatus: "complete", TaskStates: reported}},
	}}
	d, ctx := fixDispatcher(t, 2, nomad, &fakeBlobs{})
	clock := now.Add(time.Hour)
	d.clock = func() time.Time { return clock }
	for _, id := range []string{gone, late} {
		fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, TimeoutSeconds: 36000,
			StartedAt: &clock, AttemptStartedAt: &clock, DispatchedAt: &clock})
	}
	fixJob(t, d, &mj.Job{ID: pend, Status: mj.StatusQueued, NomadJobID: child(pend, 1), Attempt: 1, DispatchedAt: &clock})
	d.recon.reconcile(ctx)
	for _, id := range []string{gone, pend, late} {
		if j, _ := d.Store.Job(ctx, id); j.Attempt != 1 || j.NomadJobID != child(id, 1) || j.Status.Terminal() {
			t.Errorf("a skewed clock ended attempt 1: %s attempt %d %q", j.Status, j.Attempt, j.StatusDetail)
		}
	}
	if len(nomad.stopped) != 0 {
		t.Errorf("stopped %v", nomad.stopped)
	}
	// Past the grace on the dispatcher's own clock, the attempts end.
	clock = clock.Add(max(d.DisconnectGrace, d.Config.Pools[0].StartTimeoutD, resultGrace) + time.Second)
	d.recon.reconcile(ctx)
	for _, id := range []string{gone, pend, late} {
		if j, _ := d.Store.Job(ctx, id); j.Attempt != 2 {
			t.Errorf("past the grace: %s attempt %d %q", j.Status, j.Attempt, j.StatusDetail)
		}
	}
}

// The timeout backstop applies a result the worker already wrote (its logs went
// up past the deadline) instead of failing a job that succeeded.
func TestTimeoutBackstopReadsTheResultFirst(t *testing.T) {
	id := uuidN(2321)
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{child(id, 1): {{ID: "a1", JobID: child(id, 1), ClientStatus: "running"}}}}
	blobs := &fakeBlobs{data: map[string][]byte{mj.RunScope(id, 1) + "result.json": mustJSON(mj.Result{JobID: id, Attempt: 1, Succeeded: true, InputBytes: 4})}}
	d, ctx := fixDispatcher(t, 1, nomad, blobs)
	long := time.Now().UTC().Add(-time.Hour)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, TimeoutSeconds: 60, StartedAt: &long, AttemptStartedAt: &long})
	d.recon.reconcile(ctx)
	if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusSucceeded || j.TotalInputBytes != 4 {
		t.Fatalf("a job whose result is up was failed by the backstop: %s %q", j.Status, j.ErrorMessage)
	}
}

// A node whose clock is an hour behind reports its task started an hour ago: the
// backstop counts from when the dispatcher saw it running, and fails nothing.
func TestNodeClockBehindKeepsTheTimeout(t *testing.T) {
	id := uuidN(2322)
	behind := time.Now().UTC().Add(-time.Hour)
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{child(id, 1): {{ID: "a1", JobID: child(id, 1), ClientStatus: "running",
		TaskStates: map[string]*api.TaskState{"runner": {State: "running", StartedAt: behind}}}}}}
	d, ctx := fixDispatcher(t, 1, nomad, &fakeBlobs{})
	now := time.Now().UTC()
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusQueued, NomadJobID: child(id, 1), Attempt: 1, TimeoutSeconds: 600, DispatchedAt: &now})
	d.recon.reconcile(ctx)
	j, _ := d.Store.Job(ctx, id)
	if j.Status != mj.StatusRunning || j.AttemptStartedAt == nil || j.AttemptStartedAt.Before(now) {
		t.Fatalf("a node clock behind shortened the timeout: %s %q attempt started %v", j.Status, j.ErrorMessage, j.AttemptStartedAt)
	}
	if len(nomad.stopped) != 0 {
		t.Fatalf("stopped %v", nomad.stopped)
	}
}

// Nomad answering 5xx (no cluster leader) is an outage: a pass stops at the
// first failure rather than calling Nomad once per queued job, and one write
// says so for the whole outage, whatever the error's text.
func TestNomadServerErrorsAreAnOutage(t *testing.T) {
	var dispatches atomic.Int32
	var text atomic.Value
	text.Store("No cluster leader")
	d, ctx := dispatcherOnNomad(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.HasSuffix(r.URL.Path, "/dispatch") {
			dispatches.Add(1)
		}
		http.Error(w, text.Load().(string), http.StatusInternalServerError)
	})
	pool := d.Config.Pools[0]
	pool.DispatchLookahead, pool.MaxInFlight = 100, 100
	const n = 30
	for i := range n {
		fixJob(t, d, &mj.Job{ID: uuidN(2330 + i), Status: mj.StatusQueued, Attempt: 1})
	}
	s := d.Store.(interface {
		Revision(context.Context) (int64, error)
	})
	start, _ := s.Revision(ctx)
	for pass := range 3 {
		if pass == 2 {
			text.Store("rpc error: eval broker disabled") // another text, the same outage
		}
		if !d.sched.dispatchPool(ctx, pool) {
			t.Fatal("a failing pass reported no failure")
		}
	}
	end, _ := s.Revision(ctx)
	if got := dispatches.Load(); got > 3*dispatchConcurrency {
		t.Errorf("%d dispatch calls in 3 passes for %d queued jobs: the passes did not stop", got, n)
	}
	if end-start > 1 {
		t.Errorf("%d etcd writes during the outage, want 1", end-start)
	}
	said := 0
	for i := range n {
		j, _ := d.Store.Job(ctx, uuidN(2330+i))
		if j.Status != mj.StatusQueued {
			t.Fatalf("job %s during the outage", j.Status)
		}
		if strings.Contains(j.StatusDetail, "waiting for Nomad") {
			said++
		}
	}
	if said != 1 {
		t.Errorf("%d jobs say Nomad is away, want 1", said)
	}
}

// A parent job an operator stopped is registered again by the next dispatch,
// not at the next leadership: the pool's queue drains.
func TestStoppedParentJobIsRegisteredAgain(t *testing.T) {
	r := newNomadRig(t, &config.Pool{Name: "cpu", MaxAttempts: 1})
	r.start("d")
	parent := "mediajobs-cpu"
	// The new leader registers its pools after it leads: stopped only after that.
	testenv.Eventually(t, 30*time.Second, "the leader to register the parent", func() bool {
		j, _, err := r.agent.Client.Jobs().Info(parent, nil)
		return err == nil && (j.Stop == nil || !*j.Stop)
	})
	if _, _, err := r.agent.Client.Jobs().Deregister(parent, false, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the parent to be stopped", func() bool {
		j, _, err := r.agent.Client.Jobs().Info(parent, nil)
		return err == nil && j.Stop != nil && *j.Stop
	})
	id := uuidN(2341)
	r.create(id, "cpu")
	testenv.Eventually(t, 60*time.Second, "the job to be dispatched", func() bool { return r.job(id).NomadJobID != "" })
	if j, _, err := r.agent.Client.Jobs().Info(parent, nil); err != nil || j.Stop == nil || *j.Stop {
		t.Fatalf("parent after the dispatch: %+v %v", j, err)
	}
}

// Jobs of a pool removed from the configuration after their dispatch end: one
// never started fails after the grace, naming the pool; a running one still meets
// the timeout backstop. One dispatched just now waits (a config catching up).
func TestRemovedPoolDispatchedJobsEnd(t *testing.T) {
	waiting, running, fresh := uuidN(2351), uuidN(2352), uuidN(2353)
	gone := func(id string) string { return "mediajobs-gone/dispatch-" + mj.ChildPrefix(id, 1) + "-1-abc" }
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{
		gone(waiting): nil,
		gone(running): {{ID: "a1", JobID: gone(running), ClientStatus: "running"}},
		gone(fresh):   nil,
	}}
	d, ctx := fixDispatcher(t, 1, nomad, &fakeBlobs{})
	now := time.Now().UTC()
	long, hour := now.Add(-2*unknownPoolGrace), now.Add(-time.Hour)
	for _, j := range []*mj.Job{
		{ID: waiting, Status: mj.StatusQueued, DispatchedAt: &long},
		{ID: running, Status: mj.StatusRunning, DispatchedAt: &hour, StartedAt: &hour, AttemptStartedAt: &hour, TimeoutSeconds: 60},
		{ID: fresh, Status: mj.StatusQueued, DispatchedAt: &now},
	} {
		j.AccountID, j.Machine, j.CreatedAt, j.QueuedAt, j.Attempt, j.NomadJobID = "acct", "gone", long, long, 1, gone(j.ID)
		if err := d.Store.(interface {
			CreateJob(context.Context, *mj.Job) error
		}).CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}
	d.recon.reconcile(ctx)
	if j, _ := d.Store.Job(ctx, waiting); j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, `machine "gone" is not a pool`) {
		t.Errorf("dispatched job of a removed pool: %s %q", j.Status, j.ErrorMessage)
	}
	if j, _ := d.Store.Job(ctx, running); j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "timed out") || !strings.Contains(j.ErrorMessage, `"gone"`) {
		t.Errorf("running job of a removed pool past its timeout: %s %q", j.Status, j.ErrorMessage)
	}
	if j, _ := d.Store.Job(ctx, fresh); j.Status != mj.StatusQueued {
		t.Errorf("a job dispatched just now: %s %q", j.Status, j.ErrorMessage)
	}
	stopped := strings.Join(nomad.stopped, " ")
	if !strings.Contains(stopped, gone(waiting)) || !strings.Contains(stopped, gone(running)) || strings.Contains(stopped, gone(fresh)) {
		t.Errorf("stopped: %s", stopped)
	}
}

// Two dispatches of one attempt in flight together can both start a child (Nomad
// checks the idempotency token against a snapshot): the one the job does not
// record is stopped, by reconcile and by its allocation's event.
func TestSecondChildOfAnAttemptIsStopped(t *testing.T) {
	id := uuidN(2361)
	kept, twinChild := child(id, 1), "mediajobs-cpu/dispatch-"+mj.ChildPrefix(id, 1)+"-2-def"
	running := func(c, alloc string) []*api.AllocationListStub {
		return []*api.AllocationListStub{{ID: alloc, JobID: c, ClientStatus: "running"}}
	}
	nomad := &listingNomad{fakeJobs: fakeJobs{children: map[string][]*api.AllocationListStub{kept: running(kept, "a1"), twinChild: running(twinChild, "a2")}}}
	for _, c := range []string{kept, twinChild} {
		nomad.list = append(nomad.list, &api.JobListStub{ID: c, ParentID: "mediajobs-cpu", Status: "running"})
	}
	d, ctx := fixDispatcher(t, 1, nomad, &fakeBlobs{})
	started := time.Now().UTC()
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: kept, Attempt: 1, TimeoutSeconds: 600, StartedAt: &started, AttemptStartedAt: &started})
	for name, run := range map[string]func(){
		"reconcile": func() { d.recon.reconcile(ctx) },
		"fallback":  func() { d.recon.stopStrayChildren(ctx) },
		"event":     func() { d.settle.apply(ctx, allocState{ID: "a2", NomadJobID: twinChild, ClientStatus: "running"}) },
	} {
		nomad.mu.Lock()
		nomad.stopped = nil
		nomad.mu.Unlock()
		run()
		if got := fmt.Sprint(nomad.stopped); got != fmt.Sprint([]string{twinChild}) {
			t.Errorf("%s stopped %s, want only the twin", name, got)
		}
		if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusRunning || j.NomadJobID != kept {
			t.Errorf("%s: the job moved: %s %q", name, j.Status, j.NomadJobID)
		}
	}
}

// A 500 that is Nomad refusing one dispatch (its RPC error has no code, so
// Nomad's HTTP layer answers 500) is that job's trouble, not an outage: the
// other queued jobs are still dispatched, and the refused one, refused again
// for a minute, fails with Nomad's answer.
func TestNomadRefusingOneDispatchStopsNoPool(t *testing.T) {
	var dispatched sync.Map
	d, ctx := dispatcherOnNomad(t, func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasSuffix(r.URL.Path, "/dispatch") {
			http.Error(w, "not here", http.StatusNotFound)
			return
		}
		var body struct{ Meta map[string]string }
		json.NewDecoder(r.Body).Decode(&body)
		id := body.Meta["mediajobs_job_id"]
		if id == uuidN(2350) {
			http.Error(w, "1 error occurred:\n\t* Dispatch payload exceeds maximum size; 20000 > 16384", http.StatusInternalServerError)
			return
		}
		dispatched.Store(id, true)
		fmt.Fprintf(w, `{"DispatchedJobID":"mediajobs-cpu/dispatch-%s","EvalID":"e","EvalCreateIndex":1,"JobCreateIndex":1,"Index":1}`, id)
	})
	pool := d.Config.Pools[0]
	pool.DispatchLookahead, pool.MaxInFlight = 100, 100
	for i := range 3 {
		fixJob(t, d, &mj.Job{ID: uuidN(2350 + i), Status: mj.StatusQueued, Attempt: 1, QueuedAt: time.Now().Add(time.Duration(i) * time.Millisecond)})
	}
	d.sched.dispatchPool(ctx, pool)
	for i := 1; i < 3; i++ {
		if _, ok := dispatched.Load(uuidN(2350 + i)); !ok {
			t.Fatalf("job %d behind a refused one was not dispatched", i)
		}
	}
	if j, _ := d.Store.Job(ctx, uuidN(2350)); j.Status != mj.StatusQueued || !strings.Contains(j.StatusDetail, "payload") || strings.Contains(j.StatusDetail, "waiting for Nomad") {
		t.Fatalf("the refused job: %s %q", j.Status, j.StatusDetail)
	}
	// Refused again and again: it waits while the refusals are few or recent,
	// then fails with Nomad's answer.
	now := time.Now()
	d.clock = func() time.Time { return now }
	for range dispatchRefusals {
		d.sched.dispatchPool(ctx, pool)
	}
	if j, _ := d.Store.Job(ctx, uuidN(2350)); j.Status != mj.StatusQueued {
		t.Fatalf("failed after %d refusals within a second: %s %q", dispatchRefusals+1, j.Status, j.ErrorMessage)
	}
	now = now.Add(dispatchRefusalSpan)
	d.sched.dispatchPool(ctx, pool)
	j, _ := d.Store.Job(ctx, uuidN(2350))
	if j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "Nomad refused") || !strings.Contains(j.ErrorMessage, "payload exceeds maximum size") {
		t.Fatalf("after refusals over %s: %s %q", dispatchRefusalSpan, j.Status, j.ErrorMessage)
	}
	t.Logf("error_message: %s", j.ErrorMessage)
}

// The first sightings of an allocation's timed states are forgotten once it runs
// or ends, and reported ones soon after resultGrace: the map follows what is
// current, not everything seen for a day.
func TestSightingsAreForgotten(t *testing.T) {
	d := &settler{}
	now := time.Now()
	for i := range 100 {
		a := allocState{ID: fmt.Sprint("a", i), ClientStatus: api.AllocClientStatusPending}
		d.ownClock(a, now)
		a.ClientStatus = api.AllocClientStatusUnknown
		d.ownClock(a, now)
		a.ClientStatus = api.AllocClientStatusComplete
		a.Reported = true
		d.ownClock(a, now)
	}
	if n := len(d.seen.at); n != 100 {
		t.Fatalf("%d sightings after 100 allocations ended, want their 100 reported ones", n)
	}
	d.seen.first("x", now.Add(reportedKept+pruneEvery+time.Second)) // a later sighting prunes
	if n := len(d.seen.at); n != 1 {
		t.Fatalf("%d sightings past reportedKept, want 1", n)
	}
}

// Refusals that are the pool's, the token's or the server's, not one job's, fail
// no job however long they last: a denied token, throttling, a missing parent job
// that cannot be registered again, and a refusal of every job of the pool (no
// other job was taken meanwhile).
func TestPoolWideRefusalsFailNoJob(t *testing.T) {
	for name, answer := range map[string]struct {
		code int
		body string
	}{
		"denied":      {http.StatusForbidden, "Permission denied"},
		"expired":     {http.StatusInternalServerError, "1 error occurred:\n\t* ACL token expired"},
		"throttled":   {http.StatusTooManyRequests, "rate limited"},
		"parent gone": {http.StatusInternalServerError, "parameterized job not found"},
		"every job":   {http.StatusInternalServerError, "1 error occurred:\n\t* Dispatch payload exceeds maximum size; 20000 > 16384"},
	} {
		t.Run(name, func(t *testing.T) {
			d, ctx := dispatcherOnNomad(t, func(w http.ResponseWriter, r *http.Request) {
				if !strings.HasSuffix(r.URL.Path, "/dispatch") {
					http.Error(w, "no", http.StatusInternalServerError) // registering the pool again fails too
					return
				}
				http.Error(w, answer.body, answer.code)
			})
			pool := d.Config.Pools[0]
			pool.DispatchLookahead, pool.MaxInFlight = 100, 100
			for i := range 3 {
				fixJob(t, d, &mj.Job{ID: uuidN(2370 + i), Status: mj.StatusQueued, Attempt: 1, QueuedAt: time.Now().Add(time.Duration(i) * time.Millisecond)})
			}
			now := time.Now()
			d.clock = func() time.Time { return now }
			for range 2 * dispatchRefusals {
				d.sched.dispatchPool(ctx, pool)
				now = now.Add(dispatchRefusalSpan / 4)
			}
			for i := range 3 {
				if j, _ := d.Store.Job(ctx, uuidN(2370+i)); j.Status != mj.StatusQueued {
					t.Fatalf("job %d: %s %q", i, j.Status, j.ErrorMessage)
				}
			}
		})
	}
}

// The job a pass ranks first reaches Nomad before the others, alone, which go 8
// at a time: Nomad takes a full pool's waiting children roughly in the order
// their evaluations were created. Nomad here holds the first dispatch open until
// another arrives (at most 2 s): none does.
func TestFirstRankedIsDispatchedFirst(t *testing.T) {
	var mu sync.Mutex
	var order []string
	other := make(chan struct{}, 100)
	overlapped := false
	var first string
	d, ctx := dispatcherOnNomad(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Meta map[string]string }
		json.NewDecoder(r.Body).Decode(&body)
		id := body.Meta["mediajobs_job_id"]
		mu.Lock()
		order = append(order, id)
		mu.Unlock()
		if id == first {
			select {
			case <-other:
				mu.Lock()
				overlapped = true
				mu.Unlock()
			case <-time.After(2 * time.Second): // the bound of an absence
			}
		} else {
			other <- struct{}{}
		}
		fmt.Fprintf(w, `{"DispatchedJobID":"mediajobs-cpu/dispatch-%s","EvalID":"e","EvalCreateIndex":1,"JobCreateIndex":1,"Index":1}`, id)
	})
	pool := d.Config.Pools[0]
	var ids []string
	for i := range 12 {
		id := uuidN(2390 + i)
		fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusQueued, Attempt: 1, QueuedAt: time.Now()})
		ids = append(ids, id)
	}
	first = ids[0]
	if d.sched.dispatchIDs(ctx, pool, ids) {
		t.Fatal("a dispatch failed")
	}
	mu.Lock()
	defer mu.Unlock()
	if len(order) != len(ids) || order[0] != ids[0] || overlapped {
		t.Fatalf("dispatched in the order %v (overlapping the first: %v); want %s first and alone", order, overlapped, ids[0])
	}
}

// dispatcherOnNomad is a dispatcher (fixDispatcher's, one attempt) whose Nomad
// jobs API is served by nomad over loopback.
func dispatcherOnNomad(t *testing.T, nomad http.HandlerFunc) (*Dispatcher, context.Context) {
	srv := httptest.NewServer(nomad)
	t.Cleanup(srv.Close)
	client, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return fixDispatcher(t, 1, client.Jobs(), &fakeBlobs{})
}
