package dispatcher

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Warm pools' dispatcher side (warm.go, docs/warm.md) on a real etcd and a
// local blob store, with no Nomad: which chosen jobs wait for a runner or go to
// Nomad, the hand-over to waiting runners, and how the end of a run (a done
// key, a lapsed lease, a timeout) is applied.

type warmEnv struct {
	t     testing.TB
	d     *Dispatcher
	s     *store.Store
	blobs *blob.Bucket
	pool  *config.Pool
	ctx   context.Context
}

// newWarmEnv is a dispatcher (not running) of one warm pool "cpu": jobs with a
// timeout up to 60 s fit, 3 attempts, spill_after 30s.
func newWarmEnv(t testing.TB) *warmEnv {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	cfg.Pools = []*config.Pool{{Name: "cpu", MaxAttempts: 3, Warm: &config.Warm{Count: 2, MaxJobSeconds: 60, LeaseTTL: "6s", SpillAfter: "30s"}}}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	blobs, err := blob.NewLocal(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	d := &Dispatcher{Config: cfg, Store: s, Blobs: blobs, Signer: blob.Signer{Secret: []byte("test"), Base: "http://127.0.0.1:1"},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.defaults()
	return &warmEnv{t: t, d: d, s: s, blobs: blobs, pool: cfg.Pools[0], ctx: context.Background()}
}

// job stores a queued job of the pool with timeout seconds, queued at.
func (e *warmEnv) job(timeout int, queued time.Time) store.QueueEntry {
	e.t.Helper()
	id := uuid.NewString()
	j := &mj.Job{ID: id, AccountID: "acct", Machine: "cpu", Status: mj.StatusQueued, CreatedAt: queued, QueuedAt: queued, TimeoutSeconds: timeout,
		InputFiles: map[string]string{"in": "http://127.0.0.1:1/a.mp4"}, FFmpegCommands: []string{"-i {{in}} {{out.mp4}}"}, OutputNames: []string{"out.mp4"}}
	if err := e.s.CreateJob(e.ctx, j); err != nil {
		e.t.Fatal(err)
	}
	return store.QueueEntry{Account: "acct", ID: id, QueuedAt: queued}
}

func (e *warmEnv) get(id string) *mj.Job {
	e.t.Helper()
	j, err := e.s.Job(e.ctx, id)
	if err != nil {
		e.t.Fatal(err)
	}
	return j
}

// waiting makes a runner of allocation alloc wait for work, as a poll does:
// its idle key under a fresh lease.
func (e *warmEnv) waiting(alloc string) store.WarmIdle {
	e.t.Helper()
	g, err := e.s.Client().Grant(e.ctx, 60)
	if err != nil {
		e.t.Fatal(err)
	}
	if _, err := e.s.PutWarmIdle(e.ctx, store.WarmIdle{Pool: "cpu", Alloc: alloc, Lease: int64(g.ID), Since: time.Now().UTC()}); err != nil {
		e.t.Fatal(err)
	}
	idle, err := e.s.WarmIdleRunners(e.ctx, "cpu")
	if err != nil {
		e.t.Fatal(err)
	}
	for _, w := range idle {
		if w.Alloc == alloc {
			return w
		}
	}
	e.t.Fatalf("runner %s is not listed as waiting: %v", alloc, idle)
	return store.WarmIdle{}
}

// handed hands the job of entry to a new waiting runner, which starts it (its
// first renewal, then the watch's event), and returns its run.
func (e *warmEnv) handed(entry store.QueueEntry) store.WarmRun {
	e.t.Helper()
	run := e.offered(entry)
	e.start(&run)
	return run
}

// start marks run started, as its runner's first renewal does
// (gateway/warm.go warmRenew), and applies it, as the watch does.
func (e *warmEnv) start(run *store.WarmRun) {
	e.t.Helper()
	if err := e.s.MarkWarmStarted(e.ctx, run); err != nil {
		e.t.Fatal(err)
	}
	run.Started = true
	e.d.warm.warmStarted(e.ctx, *run)
}

// offered hands the job of entry to a new waiting runner, which has not started
// it yet, and returns its run.
func (e *warmEnv) offered(entry store.QueueEntry) store.WarmRun {
	e.t.Helper()
	w := e.waiting(uuid.NewString())
	if rest := e.d.sched.handWarm(e.ctx, e.pool, []store.QueueEntry{entry}, warmState{idle: []store.WarmIdle{w}}, func(store.QueueEntry) {}); len(rest) != 0 {
		e.t.Fatalf("job %s was not handed to the waiting runner", entry.ID)
	}
	run, err := e.s.WarmRunOf(e.ctx, "cpu", w.Alloc)
	if err != nil || run == nil {
		e.t.Fatalf("no run key after the hand-over: %v", err)
	}
	return *run
}

// queued tells whether id is in the pool's queue.
func (e *warmEnv) queued(id string) bool {
	e.t.Helper()
	entries, _, err := e.s.PoolQueue(e.ctx, "cpu")
	if err != nil {
		e.t.Fatal(err)
	}
	return slices.ContainsFunc(entries, func(q store.QueueEntry) bool { return q.ID == id })
}

// retried asserts id went back to the queue as attempt 2, off run.
func (e *warmEnv) retriedOnce(id string, why string) {
	e.t.Helper()
	j := e.get(id)
	if j.Attempt != 2 || j.NomadJobID != "" || j.Worker != nil || j.Status != mj.StatusRunning || !strings.Contains(j.StatusDetail, why) || !e.queued(id) {
		e.t.Fatalf("%s: want attempt 2, queued again: %s attempt %d child %q worker %+v queued %v %q", why, j.Status, j.Attempt, j.NomadJobID, j.Worker, e.queued(id), j.StatusDetail)
	}
}

// finish ends run as its runner does (POST /warm/done) and returns the done key.
func (e *warmEnv) finish(run store.WarmRun, outcome string) store.WarmDone {
	e.t.Helper()
	if err := e.s.FinishWarmRun(e.ctx, store.WarmDone{Run: run.Run, JobID: run.JobID, Attempt: run.Attempt, Pool: "cpu", Alloc: run.Alloc, Outcome: outcome}); err != nil {
		e.t.Fatal(err)
	}
	wd, err := e.s.WarmDoneOf(e.ctx, run.Run)
	if err != nil || wd == nil {
		e.t.Fatalf("no done key: %v", err)
	}
	return *wd
}

func (e *warmEnv) doneKey(run string) bool {
	e.t.Helper()
	wd, err := e.s.WarmDoneOf(e.ctx, run)
	if err != nil {
		e.t.Fatal(err)
	}
	return wd != nil
}

// forNomad: on a warm pool with live runners, a job that fits waits (up to
// spill_after since it was queued); the rest go to Nomad within its window; every
// chosen job not dispatched is refunded, once.
func TestWarmForNomadHoldsFittingJobs(t *testing.T) {
	e := newWarmEnv(t)
	now := time.Now().UTC()
	young := e.job(30, now)
	old := e.job(30, now.Add(-time.Minute)) // past spill_after
	long := e.job(600, now)                 // longer than max_job_seconds
	young2 := e.job(60, now)                // exactly max_job_seconds
	untimed := e.job(0, now)                // no timeout: never warm
	chosen := []store.QueueEntry{young, old, long, young2, untimed}
	name := map[string]string{young.ID: "young", old.ID: "old", long.ID: "long", young2.ID: "young2", untimed.ID: "untimed"}
	names := func(ids []string) []string {
		out := make([]string, len(ids))
		for i, id := range ids {
			out[i] = name[id]
		}
		return out
	}
	warm, spillNow := e.pool, *e.pool
	spillNow.Warm = &config.Warm{MaxJobSeconds: 60, SpillAfterD: 0}
	plain := *e.pool
	plain.Warm = nil
	for _, tc := range []struct {
		what     string
		pool     *config.Pool
		nomad    int
		live     bool
		dispatch []string
	}{
		{"runners live, a wide window", warm, 10, true, []string{"old", "long", "untimed"}},
		{"runners live, a window of one", warm, 1, true, []string{"old"}},
		{"no runner live", warm, 10, false, []string{"young", "old", "long", "young2", "untimed"}},
		{"no runner live, a window of two", warm, 2, false, []string{"young", "old"}},
		{"spill_after 0s", &spillNow, 10, true, []string{"young", "old", "long", "young2", "untimed"}},
		{"no warm block", &plain, 10, true, []string{"young", "old", "long", "young2", "untimed"}},
		{"a closed window", warm, 0, true, nil},
	} {
		var refunded []string
		ids := e.d.sched.forNomad(e.ctx, tc.pool, chosen, tc.nomad, tc.live, func(q store.QueueEntry) { refunded = append(refunded, q.ID) })
		if got := names(ids); !slices.Equal(got, tc.dispatch) {
			t.Errorf("%s: to Nomad %v, want %v", tc.what, got, tc.dispatch)
		}
		// Every chosen job is dispatched or refunded, never both, never twice.
		all := append(slices.Clone(ids), refunded...)
		slices.Sort(all)
		want := []string{young.ID, old.ID, long.ID, young2.ID, untimed.ID}
		slices.Sort(want)
		if !slices.Equal(all, want) {
			t.Errorf("%s: dispatched %v and refunded %v are not the chosen jobs, each once", tc.what, names(ids), names(refunded))
		}
	}
}

// handWarm hands the chosen jobs that fit to the waiting runners in order: each
// becomes running there with a run key under the runner's lease; a runner whose
// idle key went is passed over; a long job the reserve leaves no runner for, or
// one with no runner left, is returned for Nomad.
func TestWarmHandWarm(t *testing.T) {
	e := newWarmEnv(t)
	now := time.Now().UTC()
	fit1, long, fit2, fit3 := e.job(30, now), e.job(600, now), e.job(60, now), e.job(10, now)
	gone, r1, r2 := e.waiting("alloc-gone"), e.waiting("alloc-1"), e.waiting("alloc-2")
	// The first runner stopped waiting after the pass listed it (its poll ended).
	if _, err := e.s.Client().Revoke(e.ctx, clientv3.LeaseID(gone.Lease)); err != nil {
		t.Fatal(err)
	}
	// Every runner kept for jobs that fit (reserve): the long job takes none.
	reserve := 3
	e.pool.Warm.Reserve = &reserve
	rest := e.d.sched.handWarm(e.ctx, e.pool, []store.QueueEntry{fit1, long, fit2, fit3}, warmState{idle: []store.WarmIdle{gone, r1, r2}}, func(store.QueueEntry) {})
	if !slices.Equal(idsOf(rest), []string{long.ID, fit3.ID}) {
		t.Fatalf("returned for Nomad %v, want the long job and the one no runner was left for %v", idsOf(rest), []string{long.ID, fit3.ID})
	}
	for _, tc := range []struct {
		id string
		w  store.WarmIdle
	}{{fit1.ID, r1}, {fit2.ID, r2}} {
		run, err := e.s.WarmRunOf(e.ctx, "cpu", tc.w.Alloc)
		if err != nil || run == nil || run.JobID != tc.id || run.Attempt != 1 || run.Lease != tc.w.Lease || run.Alloc != tc.w.Alloc {
			t.Fatalf("run key of %s: %+v %v", tc.w.Alloc, run, err)
		}
		var m mj.Manifest
		if err := json.Unmarshal(run.Manifest, &m); err != nil || m.JobID != tc.id || m.Attempt != 1 || m.UploadURL == "" || m.TimeoutSeconds == 0 {
			t.Fatalf("manifest of the run: %s %v", run.Manifest, err)
		}
		// Handed over, not started yet: the attempt has no start.
		j := e.get(tc.id)
		if j.Status != mj.StatusQueued || j.NomadJobID != mj.WarmChild(run.Run) || j.Attempt != 1 || j.StartedAt != nil || j.AttemptStart() != nil ||
			j.Worker == nil || j.Worker.Path != mj.WorkerWarm || j.Worker.AllocationID != tc.w.Alloc || j.Worker.NomadJobID != "mediajobs-cpu-warm" ||
			!strings.Contains(j.StatusDetail, "handed to warm runner "+tc.w.Alloc) || e.queued(tc.id) {
			t.Fatalf("job handed to %s: %s child %q attempt %d worker %+v %q queued %v", tc.w.Alloc, j.Status, j.NomadJobID, j.Attempt, j.Worker, j.StatusDetail, e.queued(tc.id))
		}
		// Its runner renewed once: it runs.
		e.start(run)
		j = e.get(tc.id)
		if j.Status != mj.StatusRunning || j.StartedAt == nil || j.AttemptStartedAt == nil || !strings.Contains(j.StatusDetail, "running on warm runner "+tc.w.Alloc) {
			t.Fatalf("job started on %s: %s started %v attempt started %v %q", tc.w.Alloc, j.Status, j.StartedAt, j.AttemptStartedAt, j.StatusDetail)
		}
	}
	if run, _ := e.s.WarmRunOf(e.ctx, "cpu", gone.Alloc); run != nil {
		t.Fatalf("a runner that stopped waiting got a job: %+v", run)
	}
	if idle, _ := e.s.WarmIdleRunners(e.ctx, "cpu"); len(idle) != 0 {
		t.Fatalf("runners that got jobs still wait: %v", idle)
	}
	for _, id := range []string{long.ID, fit3.ID} {
		if j := e.get(id); j.Status != mj.StatusQueued || j.NomadJobID != "" || !e.queued(id) {
			t.Fatalf("a job returned for Nomad changed: %s %q queued %v", j.Status, j.NomadJobID, e.queued(id))
		}
	}
	// A job handed over already is not handed again.
	r3 := e.waiting("alloc-3")
	if rest := e.d.sched.handWarm(e.ctx, e.pool, []store.QueueEntry{fit1}, warmState{idle: []store.WarmIdle{r3}}, func(store.QueueEntry) {}); len(rest) != 0 {
		t.Fatalf("a job already running was returned: %v", idsOf(rest))
	}
	if run, _ := e.s.WarmRunOf(e.ctx, "cpu", r3.Alloc); run != nil {
		t.Fatalf("a job already running was handed to a second runner: %+v", run)
	}
}

func idsOf(q []store.QueueEntry) []string {
	out := make([]string, len(q))
	for i, e := range q {
		out[i] = e.ID
	}
	return out
}

// A run reported: the result under the run's own prefix is applied, its outputs
// published from there, and the done key goes. A run that said it reported and
// left nothing readable is retried.
func TestWarmDoneReported(t *testing.T) {
	e := newWarmEnv(t)
	now := time.Now().UTC()
	entry := e.job(30, now)
	run := e.handed(entry)
	prefix := "jobs/" + entry.ID + "/1/" + run.Run + "/"
	// A result at the attempt's prefix, not the run's, is not this run's.
	e.put(mj.RunScope(entry.ID, 1)+"result.json", mj.Result{JobID: entry.ID, Attempt: 1, ErrorMessage: "not this run's"})
	e.put(prefix+"result.json", mj.Result{JobID: entry.ID, Attempt: 1, Succeeded: true, InputBytes: 7,
		Outputs: []mj.Output{{Name: "out.mp4", Size: 5}}})
	wd := e.finish(run, "reported")
	e.d.warm.applyWarmDone(e.ctx, e.s, wd)
	j := e.get(entry.ID)
	if j.Status != mj.StatusSucceeded || j.TotalInputBytes != 7 || len(j.Outputs) != 1 || j.Outputs[0].Key != prefix+"outputs/out.mp4" || j.TotalOutputBytes != 5 {
		t.Fatalf("after a reported run: %s %q outputs %+v", j.Status, j.ErrorMessage, j.Outputs)
	}
	if j.Worker == nil || j.Worker.Path != mj.WorkerWarm || j.Worker.AllocationID != run.Alloc {
		t.Fatalf("the worker of a warm job that succeeded: %+v", j.Worker)
	}
	if e.doneKey(run.Run) {
		t.Fatal("the done key outlived its application")
	}

	// Reported, and nothing readable: read again for resultGrace (a store that
	// is eventually consistent), then retried, as a runner that ended without
	// a result.
	entry2 := e.job(30, now)
	run2 := e.handed(entry2)
	wd2 := e.finish(run2, "reported")
	e.d.warm.applyWarmDone(e.ctx, e.s, wd2)
	if j := e.get(entry2.ID); j.Attempt != 1 || j.NomadJobID != mj.WarmChild(run2.Run) || !e.doneKey(run2.Run) {
		t.Fatalf("a result reported and not readable yet was not waited for: attempt %d child %q %q", j.Attempt, j.NomadJobID, j.StatusDetail)
	}
	e.d.clock = func() time.Time { return wd2.At.Add(resultGrace + time.Second) }
	e.d.warm.applyWarmDone(e.ctx, e.s, wd2)
	e.retriedOnce(entry2.ID, "gave it back without a result")
	if e.doneKey(run2.Run) {
		t.Fatal("the done key outlived its application")
	}
}

func (e *warmEnv) put(key string, r mj.Result) {
	e.t.Helper()
	b, _ := json.Marshal(r)
	if _, err := e.blobs.Put(e.ctx, key, bytes.NewReader(b), 0); err != nil {
		e.t.Fatal(err)
	}
}

// A run given back ("stopped": its allocation is stopping) runs again as the
// next attempt, once, however often its done key is applied.
func TestWarmDoneStoppedRetriesOnce(t *testing.T) {
	e := newWarmEnv(t)
	entry := e.job(30, time.Now().UTC())
	run := e.handed(entry)
	wd := e.finish(run, "stopped")
	e.d.warm.applyWarmDone(e.ctx, e.s, wd)
	e.retriedOnce(entry.ID, "gave it back without a result")
	if e.doneKey(run.Run) {
		t.Fatal("the done key outlived its application")
	}
	e.d.warm.applyWarmDone(e.ctx, e.s, wd) // a replay: the watch and a sweep both saw it
	e.retriedOnce(entry.ID, "gave it back without a result")
	// The next attempt is handed over as any job.
	run2 := e.handed(entry)
	if j := e.get(entry.ID); run2.Attempt != 2 || j.Attempt != 2 || j.NomadJobID != mj.WarmChild(run2.Run) || !strings.HasPrefix(j.StatusDetail, "attempt 2") {
		t.Fatalf("attempt 2 handed over: run %+v job attempt %d child %q %q", run2, j.Attempt, j.NomadJobID, j.StatusDetail)
	}
}

// A run whose lease lapsed with no done key runs again, once; one that wrote
// its done key before the lease went is not retried for the lapse.
func TestWarmLapsedRetriesOnce(t *testing.T) {
	e := newWarmEnv(t)
	now := time.Now().UTC()
	entry := e.job(30, now)
	run := e.handed(entry) // the runner renewed once: it has the job
	if _, err := e.s.Client().Revoke(e.ctx, clientv3.LeaseID(run.Lease)); err != nil {
		t.Fatal(err)
	}
	if r, _ := e.s.WarmRunOf(e.ctx, "cpu", run.Alloc); r != nil {
		t.Fatalf("the run key outlived its lease: %+v", r)
	}
	e.d.warm.warmLapsed(e.ctx, e.s, run)
	e.retriedOnce(entry.ID, "stopped renewing its lease")
	e.d.warm.warmLapsed(e.ctx, e.s, run) // the watch's event and a sweep
	e.retriedOnce(entry.ID, "stopped renewing its lease")

	// Done first, then the lease went (the gateway revokes it after done).
	entry2 := e.job(30, now)
	run2 := e.handed(entry2)
	wd := e.finish(run2, "stopped")
	if _, err := e.s.Client().Revoke(e.ctx, clientv3.LeaseID(run2.Lease)); err != nil {
		t.Fatal(err)
	}
	e.d.warm.warmLapsed(e.ctx, e.s, run2)
	if j := e.get(entry2.ID); j.Attempt != 1 || j.NomadJobID != mj.WarmChild(run2.Run) {
		t.Fatalf("a run that reported was retried for its lapse: attempt %d child %q %q", j.Attempt, j.NomadJobID, j.StatusDetail)
	}
	e.d.warm.applyWarmDone(e.ctx, e.s, wd)
	e.retriedOnce(entry2.ID, "gave it back without a result")

	// Its runner never renewed: it went away as its poll was answered. The job
	// goes back on the same attempt, once, and is handed to the next runner.
	entry3 := e.job(30, now)
	run3 := e.offered(entry3)
	if _, err := e.s.Client().Revoke(e.ctx, clientv3.LeaseID(run3.Lease)); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		e.d.warm.warmLapsed(e.ctx, e.s, run3)
		j := e.get(entry3.ID)
		// No trace of the offer: still queued, never started, its attempt with
		// no start (a Nomad child's running event starts it; a cancel bills nothing).
		if j.Attempt != 1 || j.NomadJobID != "" || !strings.Contains(j.StatusDetail, "went away before it started it") ||
			j.Status != mj.StatusQueued || j.StartedAt != nil || j.AttemptStart() != nil || j.WarmLapses != 1 || !e.queued(entry3.ID) {
			t.Fatalf("an unstarted run's lapse: %s attempt %d child %q started %v lapses %d %q; want queued, attempt 1, never started",
				j.Status, j.Attempt, j.NomadJobID, j.StartedAt, j.WarmLapses, j.StatusDetail)
		}
	}
	if next := e.handed(entry3); next.Attempt != 1 {
		t.Fatalf("handed again as attempt %d; want 1", next.Attempt)
	}
}

// The sweep catches what the watch missed: a run key gone with no done key (the
// job runs again), a done key not applied; a live run is left alone.
func TestWarmSweepFindsMissedEnds(t *testing.T) {
	e := newWarmEnv(t)
	now := time.Now().UTC()
	lapsed, live, ended, unseen := e.job(30, now), e.job(30, now), e.job(30, now), e.job(30, now)
	lapsedRun, liveRun, endedRun := e.handed(lapsed), e.handed(live), e.handed(ended)
	// Started while the watch was away: the sweep records it.
	unseenRun := e.offered(unseen)
	if err := e.s.MarkWarmStarted(e.ctx, &unseenRun); err != nil {
		t.Fatal(err)
	}
	// Its key went while no dispatcher watched.
	if _, err := e.s.Client().Delete(e.ctx, e.s.WarmRunKey("cpu", lapsedRun.Alloc)); err != nil {
		t.Fatal(err)
	}
	e.finish(endedRun, "stopped")
	if rev := e.d.warm.warmSweep(e.ctx, e.s); rev == 0 {
		t.Fatal("the sweep failed a read")
	}
	e.retriedOnce(lapsed.ID, "stopped renewing its lease")
	e.retriedOnce(ended.ID, "gave it back without a result")
	if e.doneKey(endedRun.Run) {
		t.Fatal("the sweep left the done key it applied")
	}
	if j := e.get(live.ID); j.Status != mj.StatusRunning || j.Attempt != 1 || j.NomadJobID != mj.WarmChild(liveRun.Run) {
		t.Fatalf("the sweep moved a live run: %s attempt %d child %q %q", j.Status, j.Attempt, j.NomadJobID, j.StatusDetail)
	}
	if j := e.get(unseen.ID); j.Status != mj.StatusRunning || j.AttemptStartedAt == nil || j.NomadJobID != mj.WarmChild(unseenRun.Run) {
		t.Fatalf("the sweep missed a run's start: %s attempt started %v child %q %q", j.Status, j.AttemptStartedAt, j.NomadJobID, j.StatusDetail)
	}
	// Swept again: nothing is retried twice.
	e.d.warm.warmSweep(e.ctx, e.s)
	e.retriedOnce(lapsed.ID, "stopped renewing its lease")
	e.retriedOnce(ended.ID, "gave it back without a result")
}

// A warm job still running past its timeout and the grace, its run live for two
// lease TTLs more (its runner renews: it holds a job it did not stop), is failed
// by the sweep; its run key stays (the runner's next renewal stops it).
func TestWarmTimedOut(t *testing.T) {
	e := newWarmEnv(t)
	entry := e.job(30, time.Now().UTC())
	run := e.handed(entry)
	started := *e.get(entry.ID).AttemptStartedAt
	deadline := started.Add(30*time.Second + e.d.TimeoutGrace)
	clock := deadline.Add(-5 * time.Second)
	e.d.clock = func() time.Time { return clock }
	e.d.warm.warmSweep(e.ctx, e.s)
	if j := e.get(entry.ID); j.Status != mj.StatusRunning {
		t.Fatalf("failed before its timeout and the grace: %s %q", j.Status, j.ErrorMessage)
	}
	ttl := e.pool.Warm.LeaseTTLD
	clock = deadline.Add(5 * time.Second)
	for _, after := range []time.Duration{0, ttl, 2*ttl - time.Second} {
		clock = deadline.Add(5*time.Second + after)
		e.d.warm.warmSweep(e.ctx, e.s)
		if j := e.get(entry.ID); j.Status != mj.StatusRunning {
			t.Fatalf("failed %s after the sweeps first saw it overdue, before two lease TTLs (%s): %s %q", after, ttl, j.Status, j.ErrorMessage)
		}
	}
	clock = deadline.Add(5*time.Second + 2*ttl)
	e.d.warm.warmSweep(e.ctx, e.s)
	j := e.get(entry.ID)
	if j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "past its timeout") || j.Attempt != 1 || j.FinishedAt == nil {
		t.Fatalf("past its timeout and the grace: %s attempt %d %q", j.Status, j.Attempt, j.ErrorMessage)
	}
	if r, _ := e.s.WarmRunOf(e.ctx, "cpu", run.Alloc); r == nil {
		t.Fatal("the run key of a timed-out job went with it")
	}
	// Its lapse afterwards changes nothing.
	e.d.warm.warmLapsed(e.ctx, e.s, run)
	if j := e.get(entry.ID); j.Status != mj.StatusFailed || j.Attempt != 1 {
		t.Fatalf("a lapse after the timeout: %s attempt %d", j.Status, j.Attempt)
	}
}

// etcd away longer than a job's timeout (it lost quorum): the runners, cut off,
// stopped their jobs or could not report them, and when etcd is back their runs
// are still live for a lease TTL, as etcd's new leader extends every lease. The
// sweeps then see runs long past their timeout. None is failed for its timeout:
// a run whose result is up is applied from it, and one whose lease lapses is
// retried; a sweep that failed a read (etcd away again) starts the count over.
func TestWarmOverdueAfterAnOutageIsNotATimeout(t *testing.T) {
	e := newWarmEnv(t)
	now := time.Now().UTC()
	reported, cutOff := e.job(30, now), e.job(30, now)
	reportedRun, cutOffRun := e.handed(reported), e.handed(cutOff)
	prefix := fmt.Sprintf("jobs/%s/1/%s/", reported.ID, reportedRun.Run)
	e.put(prefix+"result.json", mj.Result{JobID: reported.ID, Attempt: 1, Succeeded: true, InputBytes: 7, Outputs: []mj.Output{{Name: "out.mp4", Size: 5}}})
	ttl := e.pool.Warm.LeaseTTLD
	back := now.Add(90*time.Second + e.d.TimeoutGrace) // etcd back after 90 s: both are long past 30 s
	clock := back
	e.d.clock = func() time.Time { return clock }
	e.d.warm.warmSweep(e.ctx, e.s)
	e.d.warm.warmSweep(e.ctx, e.s)
	for _, id := range []string{reported.ID, cutOff.ID} {
		if j := e.get(id); j.Status != mj.StatusRunning {
			t.Fatalf("failed at the first sweeps after the outage: %s %q", j.Status, j.ErrorMessage)
		}
	}
	// A sweep fails its reads (etcd away again): the runs' overdue time starts over.
	gone, cancel := context.WithCancel(e.ctx)
	cancel()
	if rev := e.d.warm.warmSweep(gone, e.s); rev != 0 {
		t.Fatal("a sweep without etcd read everything")
	}
	clock = back.Add(2*ttl - time.Second)
	e.d.warm.warmSweep(e.ctx, e.s)
	clock = back.Add(2*ttl + time.Second)
	e.d.warm.warmSweep(e.ctx, e.s)
	for _, id := range []string{reported.ID, cutOff.ID} {
		if j := e.get(id); j.Status != mj.StatusRunning {
			t.Fatalf("failed less than two lease TTLs after an interrupted count: %s %q", j.Status, j.ErrorMessage)
		}
	}
	// The cut-off runner's lease lapses: its job runs again.
	if _, err := e.s.Client().Revoke(e.ctx, clientv3.LeaseID(cutOffRun.Lease)); err != nil {
		t.Fatal(err)
	}
	e.d.warm.warmLapsed(e.ctx, e.s, cutOffRun)
	e.retriedOnce(cutOff.ID, "stopped renewing its lease")
	// The reported run stays live past two TTLs: its result is applied.
	clock = back.Add(4*ttl + time.Second)
	e.d.warm.warmSweep(e.ctx, e.s)
	if j := e.get(reported.ID); j.Status != mj.StatusSucceeded || j.Attempt != 1 || len(j.Outputs) != 1 || j.Outputs[0].Key != prefix+"outputs/out.mp4" {
		t.Fatalf("an overdue run with its result up: %s attempt %d %q outputs %+v; want succeeded from its result", j.Status, j.Attempt, j.ErrorMessage, j.Outputs)
	}
	e.retriedOnce(cutOff.ID, "stopped renewing its lease")
}

// A run whose result is up and whose done call never landed (a gateway
// restarted behind the load balancer, etcd away past the lease) is applied from
// its result when its lease lapses, by the watch or by the sweep: the job is
// neither run again nor, on its last attempt, failed.
func TestWarmLapsedAppliesTheRunsResult(t *testing.T) {
	e := newWarmEnv(t)
	now := time.Now().UTC()
	result := func(entry store.QueueEntry, run store.WarmRun, attempt int) string {
		prefix := fmt.Sprintf("jobs/%s/%d/%s/", entry.ID, attempt, run.Run)
		e.put(prefix+"result.json", mj.Result{JobID: entry.ID, Attempt: attempt, Succeeded: true, InputBytes: 7, Outputs: []mj.Output{{Name: "out.mp4", Size: 5}}})
		return prefix
	}
	succeeded := func(id, prefix string, attempt int) {
		t.Helper()
		j := e.get(id)
		if j.Status != mj.StatusSucceeded || j.Attempt != attempt || len(j.Outputs) != 1 || j.Outputs[0].Key != prefix+"outputs/out.mp4" {
			t.Fatalf("a lapsed run with its result up: %s attempt %d %q %q outputs %+v; want succeeded on attempt %d", j.Status, j.Attempt, j.ErrorMessage, j.StatusDetail, j.Outputs, attempt)
		}
	}
	// The watch saw the lapse.
	entry := e.job(30, now)
	run := e.handed(entry)
	prefix := result(entry, run, 1)
	if _, err := e.s.Client().Revoke(e.ctx, clientv3.LeaseID(run.Lease)); err != nil {
		t.Fatal(err)
	}
	e.d.warm.warmLapsed(e.ctx, e.s, run)
	succeeded(entry.ID, prefix, 1)
	e.d.warm.warmLapsed(e.ctx, e.s, run) // again: nothing changes
	succeeded(entry.ID, prefix, 1)

	// On its last attempt, the lapse seen by the sweep only.
	last := e.job(30, now)
	if _, err := e.s.UpdateJob(e.ctx, last.ID, func(j *mj.Job) error { j.Attempt = 3; j.Status = mj.StatusRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	run = e.handed(last)
	prefix = result(last, run, 3)
	if _, err := e.s.Client().Delete(e.ctx, e.s.WarmRunKey("cpu", run.Alloc)); err != nil {
		t.Fatal(err)
	}
	e.d.warm.warmSweep(e.ctx, e.s)
	succeeded(last.ID, prefix, 3)
}

// After a warm runner went away before it started the job, the job goes to a
// Nomad child as one never offered: its running event starts the attempt and
// its clock, so the timeout backstop measures from there, not from the offer.
func TestWarmUnstartedLapseLeavesNoStart(t *testing.T) {
	e := newWarmEnv(t)
	offer := time.Now().UTC()
	entry := e.job(30, offer)
	run := e.offered(entry)
	if _, err := e.s.Client().Revoke(e.ctx, clientv3.LeaseID(run.Lease)); err != nil {
		t.Fatal(err)
	}
	e.d.warm.warmLapsed(e.ctx, e.s, run)
	j := e.get(entry.ID)
	if j.AttemptStart() != nil || j.Status != mj.StatusQueued || j.StartedAt != nil || mj.CancelledUsage(j, offer.Add(time.Hour), 0) != nil {
		t.Fatalf("after an unstarted lapse: %s started %v attempt start %v; want no start at all", j.Status, j.StartedAt, j.AttemptStart())
	}
	// Its Nomad child runs 100 s after the offer; 125 s after it, it has run
	// 25 s of its 30.
	running := offer.Add(100 * time.Second)
	a := allocState{ID: uuid.NewString(), NomadJobID: "child", ClientStatus: "running", StartedAt: running}
	if err := transition(j, a, nil, running, "", 3, time.Minute); err != nil {
		t.Fatalf("the running event was skipped: %v", err)
	}
	if j.Status != mj.StatusRunning || j.AttemptStartedAt == nil || !j.AttemptStartedAt.Equal(running) {
		t.Fatalf("the running event: %s attempt started %v; want running from %v", j.Status, j.AttemptStartedAt, running)
	}
	e.d.TimeoutGrace = time.Minute
	if timedOut(j, offer.Add(125*time.Second), e.d.TimeoutGrace) {
		t.Fatal("the backstop measured the attempt from the abandoned offer")
	}
}

// A run offered by an older dispatcher made the job running at the offer; its
// unstarted lapse leaves no start either.
func TestWarmUnstartedLapseOfAnOlderOffer(t *testing.T) {
	e := newWarmEnv(t)
	offer := time.Now().UTC()
	entry := e.job(30, offer)
	run := e.offered(entry)
	if _, err := e.s.UpdateJob(e.ctx, entry.ID, func(j *mj.Job) error {
		j.Status, j.StartedAt, j.AttemptStartedAt = mj.StatusRunning, &offer, &offer // as the older offerWarm did
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.Client().Revoke(e.ctx, clientv3.LeaseID(run.Lease)); err != nil {
		t.Fatal(err)
	}
	e.d.warm.warmLapsed(e.ctx, e.s, run)
	j := e.get(entry.ID)
	if j.AttemptStart() != nil || j.Attempt != 2 || e.d.settle.maxAttempts(j) != e.pool.MaxAttempts+1 || j.NomadJobID != "" || mj.CancelledUsage(j, offer.Add(time.Hour), 0) != nil {
		t.Fatalf("after an older offer's unstarted lapse: %s attempt %d (max %d) start %v; want attempt 2, not counted, no attempt start", j.Status, j.Attempt, e.d.settle.maxAttempts(j), j.AttemptStart())
	}
	// Its Nomad child's running event starts the attempt, and its clock.
	running := offer.Add(100 * time.Second)
	a := allocState{ID: uuid.NewString(), NomadJobID: "child", ClientStatus: "running", StartedAt: running}
	if err := transition(j, a, nil, running, "", e.d.settle.maxAttempts(j), time.Minute); err != nil || j.AttemptStartedAt == nil || !j.AttemptStartedAt.Equal(running) {
		t.Fatalf("the running event: %v, attempt started %v; want %v", err, j.AttemptStartedAt, running)
	}
}

// A job whose runners go away before starting it, maxWarmLapses times, goes to
// Nomad: no runner is handed it again, and it is not held for one.
func TestWarmUnstartedLapsesSpillToNomad(t *testing.T) {
	e := newWarmEnv(t)
	entry := e.job(30, time.Now().UTC())
	for i := range maxWarmLapses {
		run := e.offered(entry)
		if _, err := e.s.Client().Revoke(e.ctx, clientv3.LeaseID(run.Lease)); err != nil {
			t.Fatal(err)
		}
		e.d.warm.warmLapsed(e.ctx, e.s, run)
		if j := e.get(entry.ID); j.WarmLapses != i+1 || j.Attempt != 1 || j.NomadJobID != "" {
			t.Fatalf("lapse %d: lapses %d attempt %d child %q", i+1, j.WarmLapses, j.Attempt, j.NomadJobID)
		}
	}
	if j := e.get(entry.ID); !strings.Contains(j.StatusDetail, "goes to a Nomad child") {
		t.Fatalf("the detail does not say where it goes: %q", j.StatusDetail)
	}
	w := e.waiting(uuid.NewString())
	if rest := e.d.sched.handWarm(e.ctx, e.pool, []store.QueueEntry{entry}, warmState{idle: []store.WarmIdle{w}}, func(store.QueueEntry) {}); len(rest) != 1 {
		t.Fatal("a job runners kept going away with was handed to one again")
	}
	if ids := e.d.sched.forNomad(e.ctx, e.pool, []store.QueueEntry{entry}, 10, true, func(store.QueueEntry) {}); len(ids) != 1 {
		t.Fatal("a job runners kept going away with is held for a runner, not dispatched to Nomad")
	}
}

// A runner stopped mid-job (drain, scale-down) hands its attempt back: that
// does not count against max_attempts, even on the last one, up to
// maxGivenBack times; then it does, so a job cannot be handed back for ever.
func TestWarmStoppedDoesNotUseAnAttempt(t *testing.T) {
	e := newWarmEnv(t)
	entry := e.job(30, time.Now().UTC())
	if _, err := e.s.UpdateJob(e.ctx, entry.ID, func(j *mj.Job) error { j.Attempt = 3; j.Status = mj.StatusRunning; return nil }); err != nil {
		t.Fatal(err)
	}
	for i := range maxGivenBack {
		run := e.handed(entry)
		e.d.warm.applyWarmDone(e.ctx, e.s, e.finish(run, "stopped"))
		j := e.get(entry.ID)
		if j.Status.Terminal() || j.Attempt != 4+i || j.GivenBack != i+1 || !strings.Contains(j.StatusDetail, "not counted against max_attempts") {
			t.Fatalf("give-back %d on the last attempt: %s attempt %d given back %d %q %q", i+1, j.Status, j.Attempt, j.GivenBack, j.StatusDetail, j.ErrorMessage)
		}
	}
	run := e.handed(entry)
	e.d.warm.applyWarmDone(e.ctx, e.s, e.finish(run, "stopped"))
	if j := e.get(entry.ID); j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "gave it back without a result") {
		t.Fatalf("a give-back past %d: %s attempt %d %q; want it to count, and fail the job", maxGivenBack, j.Status, j.Attempt, j.ErrorMessage)
	}
}

// barrierBlobs holds every read of a key under one of the prefixes armed until
// want of them wait at once, then lets them all go: only a caller that reads
// several results at a time gets past it.
type barrierBlobs struct {
	Blobs
	want int

	mu      sync.Mutex
	gated   []string
	waiting int
	open    chan struct{}
}

// arm gates the reads under prefixes, afresh.
func (b *barrierBlobs) arm(prefixes []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.gated, b.waiting, b.open = prefixes, 0, make(chan struct{})
}

func (b *barrierBlobs) ReadAll(ctx context.Context, key string) ([]byte, error) {
	b.mu.Lock()
	gated := slices.ContainsFunc(b.gated, func(p string) bool { return strings.HasPrefix(key, p) })
	open := b.open
	if gated {
		if b.waiting++; b.waiting == b.want {
			close(b.open)
		}
	}
	b.mu.Unlock()
	if gated {
		select {
		case <-open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return b.Blobs.ReadAll(ctx, key)
}

// Done keys are applied several at a time, by the sweep (a new leader's
// backlog) and from the watch: a slow blob store does not make completions
// queue up one behind the other.
func TestWarmDoneAppliedConcurrently(t *testing.T) {
	e := newWarmEnv(t)
	e.d.BlobTimeout = 10 * time.Minute // a read waits at the barrier, not for a timeout
	// Nothing renews the runs' leases here: long ones, so that a loaded
	// machine's slow sweep does not let the second batch's lapse (and run
	// again) before their done keys are written.
	e.pool.Warm.LeaseTTLD = 10 * time.Minute
	const n = 4
	// Jobs on distinct workers (one job's ends apply in order, on one).
	batch := func() []store.WarmRun {
		var runs []store.WarmRun
		seen := map[int]bool{}
		for len(runs) < n {
			entry := e.job(30, time.Now().UTC())
			if w := warmShard(entry.ID, warmApplyWorkers); !seen[w] {
				seen[w] = true
				run := e.handed(entry)
				e.put(fmt.Sprintf("jobs/%s/1/%s/result.json", entry.ID, run.Run), mj.Result{JobID: entry.ID, Attempt: 1, Succeeded: true})
				runs = append(runs, run)
			}
		}
		return runs
	}
	barrier := &barrierBlobs{Blobs: e.blobs, want: n}
	e.d.Blobs = barrier
	rewire(e.d)
	gate := func(runs []store.WarmRun) {
		var prefixes []string
		for _, r := range runs {
			prefixes = append(prefixes, "jobs/"+r.JobID+"/")
		}
		barrier.arm(prefixes)
	}
	allSucceeded := func(what string, runs []store.WarmRun) {
		t.Helper()
		testenv.Eventually(t, 3*time.Minute, what+": every done key applied (they wait until "+fmt.Sprint(n)+" are read at once)", func() bool {
			for _, r := range runs {
				if e.get(r.JobID).Status != mj.StatusSucceeded {
					return false
				}
			}
			return true
		})
	}
	swept := batch()
	for _, r := range swept {
		e.finish(r, "reported")
	}
	watched := batch()
	gate(swept)
	ctx, cancel := context.WithCancel(e.ctx)
	ended := make(chan struct{})
	go func() { defer close(ended); e.d.warm.warmLoop(ctx) }()
	t.Cleanup(func() { cancel(); <-ended })
	allSucceeded("the sweep", swept)
	// The sweep is past its listing: these are the watch's.
	gate(watched)
	for _, r := range watched {
		e.finish(r, "reported")
	}
	allSucceeded("the watch", watched)
}

// A pool whose Nomad side waits out a backoff (Nomad failing) still hands its
// queued jobs to its waiting warm runners, which need no Nomad; it dispatches
// nothing to Nomad meanwhile.
func TestBackedOffPoolStillFeedsItsWarmRunners(t *testing.T) {
	e := newWarmEnv(t)
	e.d.Jobs = &fakeJobs{} // no DispatchOpts: a dispatch to Nomad would panic
	rewire(e.d)
	e.d.nomad.registered = map[string]bool{"cpu": true}
	short := e.job(30, time.Now().UTC())
	e.waiting("alloc-1")
	for range 4 { // 2, 4, 8, then 16 s: longer than this test takes
		e.d.sched.backoff.failed("cpu", e.d.now())
	}
	if left := e.d.sched.backoff.left("cpu", e.d.now()); left <= 0 {
		t.Fatal("the pool is not backed off")
	}
	testenv.Eventually(t, 30*time.Second, "the job handed to the waiting runner", func() bool {
		e.d.sched.dispatchPools(e.ctx) // the queue index loads in the background
		_, warm := mj.WarmRunOfChild(e.get(short.ID).NomadJobID)
		return warm
	})
	if e.d.sched.backoff.left("cpu", e.d.now()) <= 0 {
		t.Fatal("a warm hand-off ended the pool's Nomad backoff")
	}
}

// A job without a timeout that fits max_job_seconds (the pool's one-hour
// default), or with a longer one, takes a waiting runner too, but only as many
// at once as the pool's runners less its reserve (1 by default): the reserved
// runner stays for jobs that fit. On a pool whose runners are smaller than its
// children, such a job never runs warm.
func TestWarmTakesLongJobsWithinTheReserve(t *testing.T) {
	e := newWarmEnv(t)
	now := time.Now().UTC()
	untimed1, untimed2, short := e.job(3600, now), e.job(3600, now), e.job(30, now)
	r1, r2 := e.waiting("alloc-1"), e.waiting("alloc-2")
	st := e.d.sched.warmRunners(e.ctx, e.pool)
	if len(st.idle) != 2 || st.busy != 0 || st.longRoom(e.pool.Warm) != 1 {
		t.Fatalf("two idle runners, reserve 1: %+v, room %d", st, st.longRoom(e.pool.Warm))
	}
	rest := e.d.sched.handWarm(e.ctx, e.pool, []store.QueueEntry{untimed1, untimed2, short}, st, func(store.QueueEntry) {})
	if !slices.Equal(idsOf(rest), []string{untimed2.ID}) {
		t.Fatalf("returned for Nomad %v, want only the second long job %s", idsOf(rest), untimed2.ID)
	}
	for _, tc := range []struct {
		w    store.WarmIdle
		id   string
		long bool
	}{{r1, untimed1.ID, true}, {r2, short.ID, false}} {
		run, err := e.s.WarmRunOf(e.ctx, "cpu", tc.w.Alloc)
		if err != nil || run == nil || run.JobID != tc.id || run.Long != tc.long {
			t.Fatalf("run of %s: %+v %v; want job %s long %v", tc.w.Alloc, run, err, tc.id, tc.long)
		}
	}
	// The busy runners count: one long, one not. A third runner waits, and is
	// the reserve: the other long job goes to Nomad, a short one to the runner.
	e.waiting("alloc-3")
	st = e.d.sched.warmRunners(e.ctx, e.pool)
	if st.busy != 2 || st.long != 1 || st.longRoom(e.pool.Warm) != 1 {
		t.Fatalf("after the hand-out: %+v, room %d; want 2 busy, 1 long, room 1 (3 runners - reserve 1 - 1 long)", st, st.longRoom(e.pool.Warm))
	}
	reserve := 2
	e.pool.Warm.Reserve = &reserve
	if rest := e.d.sched.handWarm(e.ctx, e.pool, []store.QueueEntry{untimed2}, st, func(store.QueueEntry) {}); len(rest) != 1 {
		t.Fatal("a long job took the reserved runner")
	}
	short2 := e.job(20, now)
	if rest := e.d.sched.handWarm(e.ctx, e.pool, []store.QueueEntry{short2}, st, func(store.QueueEntry) {}); len(rest) != 0 {
		t.Fatal("a job that fits did not take the reserved runner")
	}
	// A long job is dispatched at once rather than held for a runner.
	if ids := e.d.sched.forNomad(e.ctx, e.pool, []store.QueueEntry{untimed2}, 10, true, func(store.QueueEntry) {}); len(ids) != 1 {
		t.Fatal("a long job was held for a warm runner")
	}
	// Runners with less memory than the pool's children take no long job.
	small := *e.pool
	w := *e.pool.Warm
	w.Memory = e.pool.Memory - 1
	small.Warm = &w
	if takes, long := warmFit(&small, e.get(untimed2.ID)); takes || !long {
		t.Fatalf("a long job fits runners smaller than the pool's children: takes %v long %v", takes, long)
	}
}
