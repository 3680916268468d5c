package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
	"time"
)

// The scheduler's half of warm pools (docs/warm.md): a pass hands the jobs fair
// share chose that fit to the pool's waiting runners (handWarm, offerWarm), and
// holds short ones back for them (forNomad). What runners report is applied by
// the warm loop (warm.go).

// warmRunners lists the pool's waiting warm runners and counts its busy ones;
// none when the pool is not warm.
func (s *scheduler) warmRunners(ctx context.Context, pool *config.Pool) warmState {
	ws := s.st()
	if pool.Warm == nil {
		return warmState{}
	}
	idle, err := ws.WarmIdleRunners(ctx, pool.Name)
	if err != nil {
		s.log.Warn("list warm runners", "pool", pool.Name, "err", err)
		return warmState{}
	}
	st := warmState{idle: idle}
	runs, err := ws.WarmRuns(ctx)
	if err != nil {
		s.log.Warn("count busy warm runners", "pool", pool.Name, "err", err)
	}
	for _, r := range runs {
		if r.Pool == pool.Name {
			st.busy++
			if r.Long {
				st.long++
			}
		}
	}
	return st
}

// handWarm gives the chosen jobs that fit to the idle runners, in order, and
// returns the others.
func (s *scheduler) handWarm(ctx context.Context, pool *config.Pool, chosen []store.QueueEntry, st warmState, refund func(store.QueueEntry)) (rest []store.QueueEntry) {
	ws := s.st()
	idle, longRoom := st.idle, st.longRoom(pool.Warm)
	for _, e := range chosen {
		for {
			if len(idle) == 0 {
				rest = append(rest, e)
				break
			}
			long, err := s.offerWarm(ctx, ws, pool, e.ID, idle[0], longRoom > 0)
			if long && err == nil {
				longRoom--
			}
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
				s.log.Warn("hand a job to a warm runner; it waits for the next pass", "job", e.ID, "err", err)
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
func (s *scheduler) forNomad(ctx context.Context, pool *config.Pool, chosen []store.QueueEntry, nomad int, live bool, refund func(store.QueueEntry)) []string {
	var ids []string
	hold := live && pool.Warm != nil && pool.Warm.SpillAfterD > 0
	var jobs []*mj.Job
	if hold && len(chosen) > 0 {
		all := make([]string, len(chosen))
		for i, e := range chosen {
			all[i] = e.ID
		}
		jobs, _ = s.st().Jobs(ctx, all)
	}
	now := s.now()
	for i, e := range chosen {
		if hold && i < len(jobs) && jobs[i] != nil && waitsWarm(pool, jobs[i]) && now.Sub(jobs[i].QueuedAt) < pool.Warm.SpillAfterD {
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

// offerWarm hands job id to the idle runner w, with its manifest, and tells
// whether it is long (warmFit); a long one only when longOK. The job becomes
// running only once the runner has it (its first renewal marks the run
// started: warmStarted): a runner that went away as its poll was answered
// leaves the job as it was, its attempt not started (warmLapsed).
func (s *scheduler) offerWarm(ctx context.Context, ws schedulerStore, pool *config.Pool, id string, w store.WarmIdle, longOK bool) (long bool, err error) {
	j, err := s.st().Job(ctx, id)
	if err != nil {
		return false, err
	}
	if j.Status.Terminal() || j.NomadJobID != "" {
		return false, errSkip
	}
	takes, long := warmFit(pool, j)
	if !takes || long && !longOK {
		return long, errNotWarm
	}
	attempt := max(j.Attempt, 1)
	payload, err := s.manifest(ctx, j, attempt)
	if err != nil {
		return long, err
	}
	run := &store.WarmRun{Run: uuid.NewString(), JobID: id, Attempt: attempt, Pool: pool.Name, Alloc: w.Alloc, Lease: w.Lease, Manifest: payload, Long: long}
	child := mj.WarmChild(run.Run)
	now := time.Now().UTC()
	nj, err := ws.OfferWarm(ctx, id, w, run, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != "" || max(j.Attempt, 1) != attempt {
			return errSkip
		}
		j.NomadJobID, j.Attempt, j.DispatchedAt, j.PlacementReason, j.WaitingForCapacity = child, attempt, &now, "", false
		j.AttemptStartedAt = nil
		j.Worker = &mj.Worker{Path: mj.WorkerWarm, NomadJobID: mj.WarmJobID(pool.Name), AllocationID: w.Alloc}
		j.StatusDetail = "handed to warm runner " + w.Alloc
		if attempt > 1 {
			j.StatusDetail = fmt.Sprintf("attempt %d: %s", attempt, j.StatusDetail)
		}
		return nil
	})
	if err != nil {
		return long, err
	}
	metrics.Dispatches.WithLabelValues(pool.Name, "warm").Inc()
	s.log.Info("handed to a warm runner", "job", id, "attempt", attempt, "alloc", w.Alloc, "run", run.Run, "long", long, "status", nj.Status)
	return long, nil
}
