package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
)

// Warm pools (docs/warm.md): the pass that chooses a pool's next jobs by fair
// share hands the ones that fit to the runners of the pool's warm service job
// that wait for work, and the rest to Nomad as children, as before. A warm job's
// child is "warm:<run>"; its runner holds it under an etcd lease it renews, and
// reports through a done key. The warm broker (below) applies both ends: the
// done keys, and the runs whose lease lapsed.

// warmStore is what the warm broker needs of the store (the term's: its writes
// are fenced).
type warmStore interface {
	FollowWarm(ctx context.Context, rev int64, resync time.Duration, fn func([]store.WarmChange))
	WarmDoneRuns(ctx context.Context) ([]store.WarmDone, error)
	WarmDoneOf(ctx context.Context, run string) (*store.WarmDone, error)
	DeleteWarmDone(ctx context.Context, run string) error
	WarmRuns(ctx context.Context) (map[string]store.WarmRun, error)
	Revision(ctx context.Context) (int64, error)
	ActiveChildren(ctx context.Context) (map[string]string, error)
	Job(ctx context.Context, id string) (*mj.Job, error)
	Jobs(ctx context.Context, ids []string) ([]*mj.Job, []error)
	UpdateJob(ctx context.Context, id string, fn func(*mj.Job) error) (*mj.Job, error)
}

// warmBroker ends warm runs (warmLoop): the runs their runners report done,
// start, or let lapse, each settled on its job through the settler. Handing
// jobs to waiting runners is the scheduler's (warmhand.go).
type warmBroker struct {
	log    *slog.Logger
	st     func() warmStore // the term's store
	settle *settler
	now    func() time.Time
	wake   func() // the scheduler's: a runner waits for work
	// timeoutGrace: how long past its timeout a warm job may run (TimeoutGrace).
	timeoutGrace time.Duration
	// leaseTTL is a pool's warm lease_ttl (config.Warm.LeaseTTLD).
	leaseTTL func(pool string) time.Duration
	// overdue holds, per run, when this term's sweeps first saw it live past its
	// timeout and the grace (warmOverdue); warmLoop alone touches it.
	overdue map[string]time.Time
}

// errNotWarm: the job does not fit the pool's warm runners (its timeout is longer
// than max_job_seconds): it is dispatched to Nomad.
var errNotWarm = errors.New("not a warm job")

// warmState is a pool's warm runners as a pass sees them.
type warmState struct {
	idle []store.WarmIdle // waiting for work
	busy int              // holding a run
	long int              // of those, running a long job (store.WarmRun.Long)
}

// longRoom is how many more long jobs the pool's runners may take now: its
// runners less its reserve (config.Warm.Reserve), less those running long jobs.
func (s warmState) longRoom(w *config.Warm) int {
	reserve := config.DefaultWarmReserve
	if w.Reserve != nil {
		reserve = *w.Reserve
	}
	return max(len(s.idle)+s.busy-reserve-s.long, 0)
}

// warmFit tells how a pool's warm runners take a job (docs/warm.md). A job
// whose timeout (its own, or the pool's default_timeout) is at most
// max_job_seconds fits: it may wait for a runner, up to spill_after. Any other
// is long: it takes a waiting runner when the runners have the resources of
// the pool's children (config.Warm.TakesLong) and the reserve allows
// (warmState.longRoom), and is dispatched at once otherwise. One that
// maxWarmLapses runners went away with before they started it goes to Nomad
// instead of bouncing between runners for ever (ghost idle keys, a proxy that
// drops long polls' answers).
func warmFit(pool *config.Pool, j *mj.Job) (takes, long bool) {
	if pool.Warm == nil || j.WarmLapses >= maxWarmLapses {
		return false, false
	}
	if j.TimeoutSeconds > 0 && j.TimeoutSeconds <= pool.Warm.MaxJobSeconds {
		return true, false
	}
	return pool.Warm.TakesLong(pool), true
}

// waitsWarm tells a job that waits for a warm runner when none is idle.
func waitsWarm(pool *config.Pool, j *mj.Job) bool {
	takes, long := warmFit(pool, j)
	return takes && !long
}

// maxWarmLapses is how many unstarted warm lapses a job takes before it goes to
// Nomad; maxGivenBack how many attempts stopping warm runners may hand back
// without their counting against max_attempts (then they do: a job cannot be
// given back for ever).
const (
	maxWarmLapses = 3
	maxGivenBack  = 3
)

// warmStarted records that r's runner has its job (its first renewal marked the
// run started): the job is running, and its attempt's clock (the timeout
// backstop's, a cancel's wall time) starts now, on the dispatcher's clock as a
// Nomad child's does.
func (b *warmBroker) warmStarted(ctx context.Context, r store.WarmRun) {
	child := mj.WarmChild(r.Run)
	j, err := b.st().UpdateJob(ctx, r.JobID, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != child || j.AttemptStartedAt != nil {
			return errSkip
		}
		now := b.now()
		if j.Status != mj.StatusRunning {
			j.StartedAt = &now
		}
		j.AttemptStartedAt = &now
		j.Run("running on warm runner " + r.Alloc)
		return nil
	})
	b.settle.applied(ctx, r.JobID, child, j, err)
}

// warmLoop applies what warm runners report and what their lapsed leases mean,
// as etcd tells it (one watch on the warm keys), and wakes the dispatch loop when
// a runner starts waiting. Every warmResync it goes over all of it again, so
// nothing a missed event held stays missed (a new leader starts with a pass).
func (b *warmBroker) warmLoop(ctx context.Context) {
	// It runs whether or not a pool is warm now: runs handed out before a warm
	// block was removed still end here.
	ws := b.st()
	apply, wait := warmWorkers(warmApplyWorkers)
	defer wait()
	b.overdue = nil // what an earlier term saw proves nothing now
	for ctx.Err() == nil {
		rev := b.warmSweep(ctx, ws)
		if rev == 0 {
			sleep(ctx, time.Second)
			continue
		}
		ws.FollowWarm(ctx, rev, warmResync, func(batch []store.WarmChange) {
			for _, c := range batch {
				switch {
				case c.Waiting:
					b.wake() // a runner waits: a pass may hand it a job
				case c.Started != nil:
					r := *c.Started
					apply(r.JobID, func() { b.warmStarted(ctx, r) })
				case c.Done != nil:
					wd := *c.Done
					apply(wd.JobID, func() { b.applyWarmDone(ctx, ws, wd) })
				case c.Lapsed != nil:
					r := *c.Lapsed
					apply(r.JobID, func() { b.warmLapsed(ctx, ws, r) })
				}
			}
		})
	}
}

// warmResync is how often warmLoop goes over every warm key again.
const warmResync = 10 * time.Second

// warmApplyWorkers is how many warm ends (done keys, lapses, starts) are
// applied at once: each is a blob read and a few etcd round trips, and one at a
// time would cap a pool's completions at a few dozen a second (a variable for
// BenchmarkDispatcherWarmDoneApply's baseline).
var warmApplyWorkers = 16

// warmWorkers starts n workers; apply queues f on the one of job id (one job's
// ends apply in the order seen), waiting while that worker is full; wait ends
// them once everything queued has run.
func warmWorkers(n int) (apply func(id string, f func()), wait func()) {
	queues := make([]chan func(), n)
	var wg sync.WaitGroup
	for i := range queues {
		queues[i] = make(chan func(), 64)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for f := range queues[i] {
				f()
			}
		}()
	}
	apply = func(id string, f func()) { queues[warmShard(id, n)] <- f }
	wait = func() {
		for _, q := range queues {
			close(q)
		}
		wg.Wait()
	}
	return apply, wait
}

// warmShard is the worker (of n) that applies job id's warm ends.
func warmShard(id string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}

// warmSweep applies every done key, and ends the attempts of warm jobs whose run
// key is gone with no done key (a lapse the watch did not see), and of those past
// their timeout. It returns the etcd revision it read at, 0 when a read failed.
func (b *warmBroker) warmSweep(ctx context.Context, ws warmStore) int64 {
	// What is overdue is counted over sweeps that read everything: a failed
	// read (etcd away) starts it over.
	overdue := map[string]time.Time{}
	defer func() { b.overdue = overdue }()
	// The watch that follows starts after this revision, before everything read
	// below: an event in between is seen twice (harmless), never missed.
	rev, err := b.st().Revision(ctx)
	if err != nil {
		b.log.Warn("warm: read", "err", err)
		return 0
	}
	dones, err := ws.WarmDoneRuns(ctx)
	if err != nil {
		b.log.Warn("warm: list ended runs", "err", err)
		return 0
	}
	// A backlog (a new leader's first sweep) is applied as the watch's are,
	// several at once.
	var wg sync.WaitGroup
	slots := make(chan struct{}, warmApplyWorkers)
	for _, wd := range dones {
		wg.Add(1)
		slots <- struct{}{}
		go func() {
			defer func() { <-slots; wg.Done() }()
			b.applyWarmDone(ctx, ws, wd)
		}()
	}
	wg.Wait()
	// The active set's warm children, then the runs: a run handed out after the
	// first read is not in it, and one ended after it has a done key (read again
	// below). Only the jobs of warm children are read.
	active, err := b.st().ActiveChildren(ctx)
	if err != nil {
		b.log.Warn("warm: read the active set", "err", err)
		return 0
	}
	var ids []string
	for id, child := range active {
		if _, warm := mj.WarmRunOfChild(child); warm {
			ids = append(ids, id)
		}
	}
	jobs, _ := b.st().Jobs(ctx, ids)
	runs, err := ws.WarmRuns(ctx)
	if err != nil {
		b.log.Warn("warm: list runs", "err", err)
		return 0
	}
	now := b.now()
	for _, j := range jobs {
		if j == nil {
			continue
		}
		run, warm := mj.WarmRunOfChild(j.NomadJobID)
		if !warm || j.Status.Terminal() {
			continue
		}
		r, live := runs[run]
		switch {
		case !live:
			if wd, err := ws.WarmDoneOf(ctx, run); err != nil || wd != nil {
				if wd != nil {
					b.applyWarmDone(ctx, ws, *wd)
				}
				continue
			}
			// Started as far as the job recorded it (warmStarted).
			b.warmLapsed(ctx, ws, store.WarmRun{Run: run, JobID: j.ID, Attempt: max(j.Attempt, 1), Pool: j.Machine, Alloc: workerAlloc(j), Started: j.AttemptStartedAt != nil})
		case r.Started && j.AttemptStartedAt == nil: // the watch missed its start
			b.warmStarted(ctx, r)
		case attemptStart(j) != nil && timedOut(j, now, b.timeoutGrace):
			if b.warmOverdue(overdue, r, now) {
				b.warmTimedOut(ctx, j, r)
			}
		}
	}
	return rev
}

func workerAlloc(j *mj.Job) string {
	if j.Worker != nil {
		return j.Worker.AllocationID
	}
	return ""
}

// applyWarmDone applies a run its runner ended: its result, read from the run's
// own prefix, or, without one, a retry. The done key goes once applied (or once
// the job is past the run).
func (b *warmBroker) applyWarmDone(ctx context.Context, ws warmStore, wd store.WarmDone) {
	child := mj.WarmChild(wd.Run)
	var r *mj.Result
	prefix := mj.RunScope(wd.JobID, wd.Attempt) + wd.Run + "/"
	if wd.Outcome == "reported" {
		var err error
		if r, err = b.settle.res.resultAt(ctx, wd.JobID, wd.Attempt, prefix); err != nil {
			if j, jerr := b.st().Job(ctx, wd.JobID); mj.ErrorCode(jerr) == mj.ENotFound ||
				jerr == nil && (j.Status.Terminal() || j.NomadJobID != child) {
				ws.DeleteWarmDone(ctx, wd.Run) // the job went on (or away) without it
				return
			}
			b.settle.resultUnreadable(ctx, wd.JobID, wd.Attempt, child, err)
			return // the done key stays: read again at the next sweep
		}
	}
	if wd.Outcome == "reported" && r == nil && !wd.At.IsZero() && b.now().Sub(wd.At) < resultGrace {
		// Reported and not readable yet (an eventually consistent store): read
		// again at the next sweep, as a Nomad allocation's is, not re-run at once.
		return // the done key stays
	}
	a := allocState{ID: wd.Alloc, NomadJobID: child, ClientStatus: api.AllocClientStatusComplete}
	if wd.Outcome == "reported" && r == nil {
		// Said it reported, and nothing is readable: retried like a runner that
		// ended without a result (transition's default case).
		a.ClientStatus = api.AllocClientStatusFailed
	}
	now := b.now()
	j, err := b.st().UpdateJob(ctx, wd.JobID, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != child || max(j.Attempt, 1) != wd.Attempt {
			return b.settle.lateUsage(j, child, wd.Attempt, r) // a cancelled job's report is still billed
		}
		if r == nil {
			why := "its warm runner (Nomad allocation " + wd.Alloc + ") gave it back without a result"
			if wd.Why != "" {
				why += ": " + wd.Why
			}
			if wd.Outcome == "stopped" && j.GivenBack < maxGivenBack {
				// Its runner was stopped (drain, scale-down, redeploy): the
				// operator's doing, not the job's. The next attempt is one more
				// than max_attempts allows (maxAttempts counts GivenBack).
				j.GivenBack++
				why += " (not counted against max_attempts)"
			}
			j.RetryOrFail(why, now, b.settle.maxAttempts(j))
			return nil
		}
		return b.settle.outcome(j, a, r, now, prefix)
	})
	b.settle.applied(ctx, wd.JobID, child, j, err)
	if err == nil && retried(j) {
		metrics.JobRetries.WithLabelValues(j.Machine, metrics.RetryWorkerCrashed).Inc()
	}
	if err == nil || errors.Is(err, errSkip) || mj.ErrorCode(err) == mj.ENotFound {
		if derr := ws.DeleteWarmDone(ctx, wd.Run); derr != nil {
			b.log.Warn("warm: forget an applied run", "run", wd.Run, "err", derr)
		}
	}
}

// warmLapsed ends the attempt of a run whose lease lapsed without a done key.
// A result the run uploaded counts, whatever became of its done call (a gateway
// restarted behind the load balancer, etcd away), as a vanished Nomad child's
// does: a job that finished is never run again, nor failed. Without one, the
// runner was killed, lost its node or was cut off: the job goes back to the
// queue as a new attempt (exactly once: conditioned on the job still being on
// this run), or fails after its last. A run whose runner never renewed its
// lease never started (its runner went away as its poll was answered): the job
// goes back to the queue on the same attempt, which did not run, and, after
// maxWarmLapses of those, to Nomad.
func (b *warmBroker) warmLapsed(ctx context.Context, ws warmStore, r store.WarmRun) {
	if wd, err := ws.WarmDoneOf(ctx, r.Run); err != nil || wd != nil {
		return // it reported after all (applied from its done key), or etcd cannot say
	}
	child := mj.WarmChild(r.Run)
	if b.settleFromResult(ctx, r) {
		return
	}
	if r.Started {
		b.settle.lost(ctx, r.JobID, child, fmt.Sprintf("its warm runner (Nomad allocation %s) stopped renewing its lease (killed, its node lost, or cut off from the service)", r.Alloc))
		return
	}
	j, err := b.st().UpdateJob(ctx, r.JobID, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != child {
			return errSkip
		}
		j.NomadJobID, j.DispatchedAt, j.Worker, j.AttemptStartedAt = "", nil, nil, nil
		if j.Status == mj.StatusRunning && j.Attempt <= 1 {
			// Offered by an older dispatcher, which made the job running at
			// the offer (and a running job cannot be queued again): it goes
			// on as attempt 2, not counted against max_attempts, whose start
			// is its own running event, not the abandoned offer.
			j.Attempt, j.GivenBack = 2, j.GivenBack+1
		}
		j.WarmLapses++
		j.StatusDetail = fmt.Sprintf("waiting: the warm runner it was handed to (Nomad allocation %s) went away before it started it", r.Alloc)
		if j.WarmLapses >= maxWarmLapses {
			j.StatusDetail += fmt.Sprintf(" (%d runners did so: it goes to a Nomad child instead)", j.WarmLapses)
		}
		return nil
	})
	b.settle.applied(ctx, r.JobID, child, j, err)
}

// settleFromResult applies run r's result when it is up (its runner ran the job
// and uploaded it, but its done call never landed), and tells whether it did
// anything: true also when the result could not be read, so that the job stays
// on the run for the next sweep.
func (b *warmBroker) settleFromResult(ctx context.Context, r store.WarmRun) bool {
	child := mj.WarmChild(r.Run)
	prefix := mj.RunScope(r.JobID, r.Attempt) + r.Run + "/"
	res, err := b.settle.res.resultAt(ctx, r.JobID, r.Attempt, prefix)
	if err != nil {
		b.settle.resultUnreadable(ctx, r.JobID, r.Attempt, child, err)
		return true
	}
	if res == nil {
		return false
	}
	a := allocState{ID: r.Alloc, NomadJobID: child, ClientStatus: api.AllocClientStatusComplete}
	j, err := b.st().UpdateJob(ctx, r.JobID, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != child || max(j.Attempt, 1) != r.Attempt {
			return b.settle.lateUsage(j, child, r.Attempt, res) // a cancelled job's report is still billed
		}
		return b.settle.outcome(j, a, res, b.now(), prefix)
	})
	b.settle.applied(ctx, r.JobID, child, j, err)
	return true
}

// warmOverdue records that run r is live past its job's timeout and the grace,
// and tells whether it has been so, as this term's sweeps saw it, for two of its
// pool's lease TTLs. A live run key alone does not prove a runner: etcd extends
// every lease by its TTL when it elects a leader, so after an outage longer
// than the job (the runner, cut off, stopped it or could not report it) the run
// stays live for a TTL with nobody behind it. A runner that still renews after
// that holds a job it did not stop; one that does not lets the lease lapse,
// and the lapse settles the job (warmLapsed): its result, or a retry.
func (b *warmBroker) warmOverdue(overdue map[string]time.Time, r store.WarmRun, now time.Time) bool {
	first, seen := b.overdue[r.Run]
	if !seen {
		first = now
	}
	overdue[r.Run] = first
	return now.Sub(first) >= 2*b.leaseTTL(r.Pool)
}

// warmTimedOut fails a warm job still running past its timeout and the grace,
// its runner still renewing (warmOverdue): it should have stopped the job and
// reported. A result already up (its done call lost) is applied instead. Its
// lease is then refused.
func (b *warmBroker) warmTimedOut(ctx context.Context, j *mj.Job, r store.WarmRun) {
	child := j.NomadJobID
	if b.settleFromResult(ctx, r) {
		return
	}
	nj, err := b.st().UpdateJob(ctx, j.ID, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != child {
			return errSkip
		}
		now := b.now()
		j.Fail(now, fmt.Sprintf("the job ran past its timeout of %d seconds and its warm runner (Nomad allocation %s) did not stop it; it was failed", j.TimeoutSeconds, r.Alloc))
		return nil
	})
	b.settle.applied(ctx, j.ID, child, nj, err)
}
