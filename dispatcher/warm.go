package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/jobspecs"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Warm pools (docs/warm.md): the pass that chooses a pool's next jobs by fair
// share hands the ones that fit to the runners of the pool's warm service job
// that wait for work, and the rest to Nomad as children, as before. A warm job's
// child is "warm:<run>"; its runner holds it under an etcd lease it renews, and
// reports through a done key. This file applies both ends: the done keys, and the
// runs whose lease lapsed.

// warmStore is what warm pools need of the store; *store.Store has it.
type warmStore interface {
	WarmPrefix() string
	WarmIdlePrefix(pool string) string
	WarmRunPrefix() string
	WarmDonePrefix() string
	WarmIdleRunners(ctx context.Context, pool string) ([]store.WarmIdle, error)
	OfferWarm(ctx context.Context, id string, w store.WarmIdle, run *store.WarmRun, fn func(*mj.Job) error) (*mj.Job, error)
	WarmDoneRuns(ctx context.Context) ([]store.WarmDone, error)
	WarmDoneOf(ctx context.Context, run string) (*store.WarmDone, error)
	DeleteWarmDone(ctx context.Context, run string) error
	WarmRuns(ctx context.Context) (map[string]store.WarmRun, error)
}

// errNotWarm: the job does not fit the pool's warm runners (its timeout is longer
// than max_job_seconds): it is dispatched to Nomad.
var errNotWarm = errors.New("not a warm job")

// warmRunners lists the pool's waiting warm runners and counts its busy ones;
// none when the pool is not warm.
func (d *Dispatcher) warmRunners(ctx context.Context, pool *config.Pool) ([]store.WarmIdle, int) {
	ws, ok := d.Store.(warmStore)
	if !ok || pool.Warm == nil {
		return nil, 0
	}
	idle, err := ws.WarmIdleRunners(ctx, pool.Name)
	if err != nil {
		d.Log.Warn("list warm runners", "pool", pool.Name, "err", err)
		return nil, 0
	}
	busy, err := d.Store.Count(ctx, ws.WarmRunPrefix()+pool.Name+"/")
	if err != nil {
		d.Log.Warn("count busy warm runners", "pool", pool.Name, "err", err)
	}
	return idle, busy
}

// fitsWarm tells a job a pool's warm runners take.
func fitsWarm(pool *config.Pool, j *mj.Job) bool {
	return pool.Warm != nil && j.TimeoutSeconds > 0 && j.TimeoutSeconds <= pool.Warm.MaxJobSeconds
}

// handWarm gives the chosen jobs that fit to the idle runners, in order, and
// returns the others.
func (d *Dispatcher) handWarm(ctx context.Context, pool *config.Pool, chosen []store.QueueEntry, idle []store.WarmIdle, refund func(store.QueueEntry)) (rest []store.QueueEntry) {
	ws := d.Store.(warmStore)
	for _, e := range chosen {
		for {
			if len(idle) == 0 {
				rest = append(rest, e)
				break
			}
			err := d.offerWarm(ctx, ws, pool, e.ID, idle[0])
			if store.IsWarmGone(err) {
				idle = idle[1:] // it stopped waiting: the next one
				continue
			}
			switch {
			case err == nil:
				idle = idle[1:]
			case errors.Is(err, errNotWarm):
				rest = append(rest, e)
			case errors.Is(err, errSkip), mj.ErrorCode(err) == mj.ENotFound:
				refund(e)
			default:
				refund(e) // not started: its share is not spent
				d.Log.Warn("hand a job to a warm runner; it waits for the next pass", "job", e.ID, "err", err)
			}
			break
		}
	}
	return rest
}

// forNomad returns the ids of the chosen jobs Nomad takes, at most nomad of
// them. On a warm pool with runners (live), a job that fits waits for one of
// them, up to the block's spill_after since it was queued: a runner frees in a
// fraction of Nomad's per-job floor, and a burst of short jobs is not turned
// into a burst of dispatches. Every chosen job not dispatched gets its share
// back (refund).
func (d *Dispatcher) forNomad(ctx context.Context, pool *config.Pool, chosen []store.QueueEntry, nomad int, live bool, refund func(store.QueueEntry)) []string {
	var ids []string
	hold := live && pool.Warm != nil && pool.Warm.SpillAfterD > 0
	var jobs []*mj.Job
	if hold && len(chosen) > 0 {
		all := make([]string, len(chosen))
		for i, e := range chosen {
			all[i] = e.ID
		}
		jobs, _ = d.Store.Jobs(ctx, all)
	}
	now := d.now()
	for i, e := range chosen {
		if hold && i < len(jobs) && jobs[i] != nil && fitsWarm(pool, jobs[i]) && now.Sub(jobs[i].QueuedAt) < pool.Warm.SpillAfterD {
			refund(e) // it waits for a warm runner
			continue
		}
		if len(ids) < nomad {
			ids = append(ids, e.ID)
			continue
		}
		refund(e)
	}
	return ids
}

// offerWarm hands job id to the idle runner w, with its manifest, and marks it
// running there: the runner is up and waiting, so the job starts as it is read.
func (d *Dispatcher) offerWarm(ctx context.Context, ws warmStore, pool *config.Pool, id string, w store.WarmIdle) error {
	j, err := d.Store.Job(ctx, id)
	if err != nil {
		return err
	}
	if j.Status.Terminal() || j.NomadJobID != "" {
		return errSkip
	}
	if !fitsWarm(pool, j) {
		return errNotWarm
	}
	attempt := max(j.Attempt, 1)
	payload, err := d.manifest(ctx, j, attempt)
	if err != nil {
		return err
	}
	run := &store.WarmRun{Run: uuid.NewString(), JobID: id, Attempt: attempt, Pool: pool.Name, Alloc: w.Alloc, Lease: w.Lease, Manifest: payload}
	child := store.WarmChild(run.Run)
	now := time.Now().UTC()
	nj, err := ws.OfferWarm(ctx, id, w, run, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != "" || max(j.Attempt, 1) != attempt {
			return errSkip
		}
		j.NomadJobID, j.Attempt, j.DispatchedAt, j.PlacementReason, j.WaitingForCapacity = child, attempt, &now, "", false
		if j.Status != mj.StatusRunning {
			j.StartedAt = &now
		}
		j.Status, j.AttemptStartedAt = mj.StatusRunning, &now
		j.Worker = &mj.Worker{Path: mj.WorkerWarm, NomadJobID: jobspecs.WarmJobID(pool.Name), AllocationID: w.Alloc}
		j.StatusDetail = "running on warm runner " + w.Alloc
		if attempt > 1 {
			j.StatusDetail = fmt.Sprintf("attempt %d: %s", attempt, j.StatusDetail)
		}
		return nil
	})
	if err != nil {
		return err
	}
	metrics.Dispatches.WithLabelValues(pool.Name, "warm").Inc()
	d.Log.Info("handed to a warm runner", "job", id, "attempt", attempt, "alloc", w.Alloc, "run", run.Run, "status", nj.Status)
	return nil
}

// warmLoop applies what warm runners report and what their lapsed leases mean,
// as etcd tells it (one watch on the warm keys), and wakes the dispatch loop when
// a runner starts waiting. Every warmResync it goes over all of it again, so
// nothing a missed event held stays missed (a new leader starts with a pass).
func (d *Dispatcher) warmLoop(ctx context.Context) {
	// It runs whether or not a pool is warm now: runs handed out before a warm
	// block was removed still end here.
	ws, ok := d.Store.(warmStore)
	if !ok {
		return
	}
	for ctx.Err() == nil {
		rev := d.warmSweep(ctx, ws)
		if rev == 0 {
			sleep(ctx, time.Second)
			continue
		}
		wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), warmResync)
		for resp := range d.Store.Client().Watch(wctx, ws.WarmPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithPrevKV()) {
			done := map[string]bool{}
			for _, ev := range resp.Events {
				key := string(ev.Kv.Key)
				switch {
				case ev.Type == clientv3.EventTypePut && strings.HasPrefix(key, ws.WarmDonePrefix()):
					done[key[len(ws.WarmDonePrefix()):]] = true
				}
			}
			for _, ev := range resp.Events {
				key := string(ev.Kv.Key)
				switch {
				case ev.Type == clientv3.EventTypePut && !strings.HasPrefix(key, ws.WarmDonePrefix()) && !strings.HasPrefix(key, ws.WarmRunPrefix()):
					d.wake() // a runner waits: a pass may hand it a job
				case ev.Type == clientv3.EventTypePut && strings.HasPrefix(key, ws.WarmDonePrefix()):
					var wd store.WarmDone // the event holds it: no read
					if json.Unmarshal(ev.Kv.Value, &wd) == nil && wd.Run != "" {
						d.applyWarmDone(ctx, ws, wd)
					}
				case ev.Type == clientv3.EventTypeDelete && strings.HasPrefix(key, ws.WarmRunPrefix()) && ev.PrevKv != nil:
					var r store.WarmRun
					if err := json.Unmarshal(ev.PrevKv.Value, &r); err != nil || done[r.Run] {
						continue
					}
					d.warmLapsed(ctx, ws, r)
				}
			}
		}
		cancel()
	}
}

// warmResync is how often warmLoop goes over every warm key again.
const warmResync = 10 * time.Second

// warmSweep applies every done key, and ends the attempts of warm jobs whose run
// key is gone with no done key (a lapse the watch did not see), and of those past
// their timeout. It returns the etcd revision it read at, 0 when a read failed.
func (d *Dispatcher) warmSweep(ctx context.Context, ws warmStore) int64 {
	// The watch that follows starts after this revision, before everything read
	// below: an event in between is seen twice (harmless), never missed.
	first, err := d.Store.Client().Get(ctx, ws.WarmDonePrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
	if err != nil {
		d.Log.Warn("warm: read", "err", err)
		return 0
	}
	rev := first.Header.Revision
	dones, err := ws.WarmDoneRuns(ctx)
	if err != nil {
		d.Log.Warn("warm: list ended runs", "err", err)
		return 0
	}
	for _, wd := range dones {
		d.applyWarmDone(ctx, ws, wd)
	}
	// The active set's warm children, then the runs: a run handed out after the
	// first read is not in it, and one ended after it has a done key (read again
	// below). Only the jobs of warm children are read.
	active, err := d.Store.Client().Get(ctx, d.Store.ActivePrefix(), clientv3.WithPrefix())
	if err != nil {
		d.Log.Warn("warm: read the active set", "err", err)
		return 0
	}
	var ids []string
	for _, kv := range active.Kvs {
		if _, warm := store.WarmRunOfChild(string(kv.Value)); warm {
			ids = append(ids, store.IDFromKey(string(kv.Key)))
		}
	}
	jobs, _ := d.Store.Jobs(ctx, ids)
	runs, err := ws.WarmRuns(ctx)
	if err != nil {
		d.Log.Warn("warm: list runs", "err", err)
		return 0
	}
	now := d.now()
	for _, j := range jobs {
		if j == nil {
			continue
		}
		run, warm := store.WarmRunOfChild(j.NomadJobID)
		if !warm || j.Status.Terminal() {
			continue
		}
		r, live := runs[run]
		switch {
		case !live:
			if wd, err := ws.WarmDoneOf(ctx, run); err != nil || wd != nil {
				if wd != nil {
					d.applyWarmDone(ctx, ws, *wd)
				}
				continue
			}
			// Whether it started is unknown now: it counts as an attempt.
			d.warmLapsed(ctx, ws, store.WarmRun{Run: run, JobID: j.ID, Attempt: j.Attempt, Pool: j.Machine, Alloc: workerAlloc(j), Started: true})
		case attemptStart(j) != nil && d.timedOut(j, now):
			d.warmTimedOut(ctx, j, r)
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
func (d *Dispatcher) applyWarmDone(ctx context.Context, ws warmStore, wd store.WarmDone) {
	child := store.WarmChild(wd.Run)
	var r *mj.Result
	prefix := runScope(wd.JobID, wd.Attempt) + wd.Run + "/"
	if wd.Outcome == "reported" {
		var err error
		if r, err = d.resultAt(ctx, wd.JobID, wd.Attempt, prefix); err != nil {
			if j, jerr := d.Store.Job(ctx, wd.JobID); mj.ErrorCode(jerr) == mj.ENotFound ||
				jerr == nil && (j.Status.Terminal() || j.NomadJobID != child) {
				ws.DeleteWarmDone(ctx, wd.Run) // the job went on (or away) without it
				return
			}
			d.resultUnreadable(ctx, wd.JobID, wd.Attempt, child, err)
			return // the done key stays: read again at the next sweep
		}
	}
	a := allocState{ID: wd.Alloc, NomadJobID: child, ClientStatus: api.AllocClientStatusComplete}
	if wd.Outcome == "reported" && r == nil {
		// Said it reported, and nothing is readable: retried like a runner that
		// ended without a result (transition's default case).
		a.ClientStatus = api.AllocClientStatusFailed
	}
	now := d.now()
	j, err := d.Store.UpdateJob(ctx, wd.JobID, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != child || max(j.Attempt, 1) != wd.Attempt {
			return errSkip
		}
		if r == nil {
			why := "its warm runner (Nomad allocation " + wd.Alloc + ") gave it back without a result"
			if wd.Why != "" {
				why += ": " + wd.Why
			}
			retryOrFail(j, why, now, d.maxAttempts(j))
			return nil
		}
		return transition(j, a, checked(d.metered(r, j), j, d.Config.Server.MaxOutputFiles), now, prefix, d.maxAttempts(j), d.DisconnectGrace)
	})
	d.applied(ctx, wd.JobID, child, j, err)
	if err == nil && retried(j) {
		metrics.JobRetries.WithLabelValues(j.Machine, metrics.RetryWorkerCrashed).Inc()
	}
	if err == nil || errors.Is(err, errSkip) || mj.ErrorCode(err) == mj.ENotFound {
		if derr := ws.DeleteWarmDone(ctx, wd.Run); derr != nil {
			d.Log.Warn("warm: forget an applied run", "run", wd.Run, "err", derr)
		}
	}
}

// warmLapsed ends the attempt of a run whose lease lapsed without a report: the
// runner was killed, lost its node or was cut off. The job goes back to the
// queue as a new attempt (exactly once: conditioned on the job still being on
// this run), or fails after its last. A run whose runner never renewed its
// lease never started (its runner went away as its poll was answered): the job
// goes back to the queue on the same attempt, which did not run.
func (d *Dispatcher) warmLapsed(ctx context.Context, ws warmStore, r store.WarmRun) {
	if wd, err := ws.WarmDoneOf(ctx, r.Run); err != nil || wd != nil {
		return // it reported after all (applied from its done key), or etcd cannot say
	}
	child := store.WarmChild(r.Run)
	if r.Started {
		d.lost(ctx, r.JobID, child, fmt.Sprintf("its warm runner (Nomad allocation %s) stopped renewing its lease (killed, its node lost, or cut off from the service)", r.Alloc))
		return
	}
	j, err := d.Store.UpdateJob(ctx, r.JobID, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != child {
			return errSkip
		}
		j.NomadJobID, j.DispatchedAt, j.Worker, j.AttemptStartedAt = "", nil, nil, nil
		j.StatusDetail = fmt.Sprintf("waiting: the warm runner it was handed to (Nomad allocation %s) went away before it started it", r.Alloc)
		return nil
	})
	d.applied(ctx, r.JobID, child, j, err)
}

// warmTimedOut fails a warm job still running past its timeout and the grace:
// its runner should have stopped it and reported. Its lease is then refused.
func (d *Dispatcher) warmTimedOut(ctx context.Context, j *mj.Job, r store.WarmRun) {
	child := j.NomadJobID
	nj, err := d.Store.UpdateJob(ctx, j.ID, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != child {
			return errSkip
		}
		now := d.now()
		j.Status, j.FinishedAt, j.StatusDetail = mj.StatusFailed, &now, ""
		j.ErrorMessage = fmt.Sprintf("the job ran past its timeout of %d seconds and its warm runner (Nomad allocation %s) did not stop it; it was failed", j.TimeoutSeconds, r.Alloc)
		return nil
	})
	d.applied(ctx, j.ID, child, nj, err)
}
