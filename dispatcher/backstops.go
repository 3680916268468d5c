package dispatcher

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
)

// The reconciler's backstops: what Nomad will not settle by itself (a child that
// vanished, an attempt overdue, a placement that keeps failing, children no job
// wants), each settled through the settler.

// vanished settles a job whose current child Nomad no longer knows (garbage
// collected, purged, an agent restarted without its state). The attempt may well
// have reported before it went: its result counts. Only without one is the
// attempt retried.
func (rc *reconciler) vanished(ctx context.Context, j *mj.Job, child string) {
	r, prefix, err := rc.settle.res.anyResult(ctx, j.ID, j.Attempt)
	if err != nil {
		rc.settle.resultUnreadable(ctx, j.ID, j.Attempt, child, err)
		return
	}
	if r == nil {
		rc.settle.lost(ctx, j.ID, child, "its Nomad job "+child+" no longer exists (was Nomad restarted without its state?)")
		return
	}
	a := allocState{ID: r.AllocID, NomadJobID: child, ClientStatus: api.AllocClientStatusComplete, Reported: true}
	nj, err := rc.settle.update(ctx, j.ID, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != child {
			return errSkip
		}
		return rc.settle.outcome(j, a, r, rc.now(), prefix)
	})
	rc.settle.applied(ctx, j.ID, child, nj, err)
}

// stopStrayChildren stops every live mediajobs child no job wants: its job is
// finished, or has moved on to a later attempt. The cancel loop stops a cancelled
// job's child when it sees the job leave the active set, but a delete that happened
// while no dispatcher led (or across a compaction) is never seen; and Nomad itself
// may have replaced a lost allocation of an attempt the dispatcher already retried.
// A child of the job's current attempt is left alone even when the job has not
// recorded it yet: its dispatch may be in flight. Children are deregistered, not
// purged, as a cancel does.
func (rc *reconciler) stopStrayChildren(ctx context.Context) {
	q, cancel := rc.nomad.query(ctx)
	defer cancel()
	q.Prefix = "mediajobs-"
	stubs, _, err := rc.nomad.jobs.List(q)
	if err != nil {
		rc.log.Warn("reconcile: list nomad jobs", "err", err)
		return
	}
	for _, s := range stubs {
		if ctx.Err() != nil {
			return
		}
		if s.ParentID == "" || !strings.HasPrefix(s.ParentID, "mediajobs-") || s.Stop || s.Status == "dead" {
			continue
		}
		id, attempt, ok := mj.ParseChildID(s.ID)
		if !ok {
			continue
		}
		// A job this store does not know may belong to another installation that
		// shares the Nomad namespace: leave it alone.
		j, err := rc.st().Job(ctx, id)
		switch {
		case err != nil:
		case j.Status.Terminal():
			metrics.ReconcileCorrections.WithLabelValues("stray").Inc()
			rc.nomad.stopChild(ctx, s.ID, "job "+string(j.Status), id)
		case attempt < max(j.Attempt, 1):
			metrics.ReconcileCorrections.WithLabelValues("stray").Inc()
			rc.nomad.stopChild(ctx, s.ID, fmt.Sprintf("attempt %d was superseded by attempt %d", attempt, j.Attempt), id)
		case twin(j, s.ID, attempt):
			metrics.ReconcileCorrections.WithLabelValues("stray").Inc()
			rc.nomad.stopChild(ctx, s.ID, twinWhy(j), id)
		}
	}
}

// overdue ends an attempt that Nomad will not end by itself, judged from its
// allocations: a child no node could place within the pool's queue limit (not one
// waiting for a busy node to free up) fails; an allocation placed but never started
// within start_timeout (an image pull that hangs, a wedged client) is a lost worker;
// a worker still alive well past the job's timeout is stopped and fails the job. A
// finished allocation is never overdue: its result, maybe late, settles the job.
func (rc *reconciler) overdue(ctx context.Context, id, child string, allocs []allocState) {
	if rc.resultFirst(ctx, id, child, allocs) {
		return
	}
	var why string
	j, err := rc.settle.update(ctx, id, rc.overdueFn(rc.now(), child, allocs, &why))
	switch {
	case err == nil && j.Status.Terminal():
		metrics.Finished(j)
		rc.log.Info("job failed by the dispatcher", "job", id, "reason", j.ErrorMessage)
		rc.nomad.stopChild(ctx, child, why, id)
	case err == nil:
		if j.NomadJobID == "" { // the only retry overdueFn makes
			metrics.JobRetries.WithLabelValues(j.Machine, metrics.RetryStartTimeout).Inc()
		}
		rc.log.Info("attempt ended by the dispatcher", "job", id, "detail", j.StatusDetail)
		rc.nomad.stopChild(ctx, child, why, id)
	}
}

// resultFirst applies a result a live worker has already written: past its
// deadline the runner still uploads logs and then the result (within half of
// timeout_grace, see runner.Upload), and a result, not the timeout backstop,
// settles the job. Only a running allocation can be past its timeout, so only
// running ones are read. It reports whether overdue must stop here: the result
// was applied, or the store could not say (the next pass reads it again).
func (rc *reconciler) resultFirst(ctx context.Context, id, child string, allocs []allocState) bool {
	_, attempt, ok := mj.ParseChildID(child)
	if !ok {
		return false
	}
	for _, a := range allocs {
		if a.ClientStatus != api.AllocClientStatusRunning {
			continue
		}
		r, prefix, err := rc.settle.res.readResult(ctx, id, attempt, a.ID)
		if err != nil {
			rc.log.Warn("read runner result before the timeout backstop failed; will retry", "job", id, "nomad_job", child, "err", err)
			return true
		}
		if r == nil {
			continue
		}
		done := a
		done.ClientStatus, done.Reported = api.AllocClientStatusComplete, true
		j, err := rc.settle.update(ctx, id, func(j *mj.Job) error {
			if j.Status.Terminal() || j.Attempt != attempt || j.NomadJobID != child {
				return errSkip
			}
			return rc.settle.outcome(j, done, r, rc.now(), prefix)
		})
		rc.settle.applied(ctx, id, child, j, err)
		return true
	}
	return false
}

// overdueFn is overdue's change of a job as of now, setting why when it ends the
// attempt; errSkip when the attempt is not overdue.
func (rc *reconciler) overdueFn(now time.Time, child string, allocs []allocState, why *string) func(*mj.Job) error {
	placed, alive, started := len(allocs) > 0, false, false
	var pendingSince time.Time // the earliest placement of a pending allocation
	for _, a := range allocs {
		a = rc.settle.ownClock(a, now)
		switch a.ClientStatus {
		case api.AllocClientStatusPending:
			alive = true
			if pendingSince.IsZero() || a.Created.Before(pendingSince) {
				pendingSince = a.Created
			}
		case api.AllocClientStatusRunning:
			alive, started = true, true
		default:
			started = true
		}
	}
	return func(j *mj.Job) error {
		// Judged on the allocations of child: the job must still be on it.
		if j.Status.Terminal() || j.NomadJobID != child {
			return errSkip
		}
		var waited time.Duration
		if j.DispatchedAt != nil {
			waited = now.Sub(*j.DispatchedAt)
		}
		pool := rc.cfg.Pool(j.Machine)
		switch {
		case pool == nil && attemptStart(j) == nil && (j.DispatchedAt == nil || waited > unknownPoolGrace):
			// Its pool was removed after the dispatch: nothing would place it. A
			// started attempt runs on, to its result or its timeout.
			j.Fail(now, fmt.Sprintf("machine %q is not a pool this server has (it was removed from the dispatcher's configuration after the job was dispatched); the job cannot run", j.Machine))
			*why = "pool removed"
		case pool == nil && j.Status == mj.StatusRunning && alive && attemptStart(j) != nil && timedOut(j, now, rc.timeoutGrace):
			j.Fail(now, fmt.Sprintf("job timed out after %ds (timeout_seconds); its worker did not stop by itself and was stopped (its machine %q is no longer a configured pool)", j.TimeoutSeconds, j.Machine))
			*why = whyTimedOut
		case pool == nil:
			return errSkip
		case attemptStart(j) == nil && !placed && !j.WaitingForCapacity && waited > pool.QueueLimitD:
			reason := j.PlacementReason
			if reason == "" {
				reason = "Nomad did not place it"
			}
			j.Fail(now, fmt.Sprintf("no worker could take the job within the %s queue limit of machine %q: %s", pool.QueueLimitD, j.Machine, reason))
			*why = "overdue"
		case attemptStart(j) == nil && placed && !started && !pendingSince.IsZero() && now.Sub(pendingSince) > pool.StartTimeoutD:
			j.RetryOrFail(fmt.Sprintf("its Nomad allocation was placed but did not start within the %s start_timeout of machine %q (an image pull or a client that hangs)", pool.StartTimeoutD, j.Machine), now, pool.MaxAttempts)
			*why = "did not start"
		case j.Status == mj.StatusRunning && alive && attemptStart(j) != nil && timedOut(j, now, rc.timeoutGrace):
			j.Fail(now, fmt.Sprintf("job timed out after %ds (timeout_seconds); its worker did not stop by itself and was stopped", j.TimeoutSeconds))
			*why = whyTimedOut
		default:
			return errSkip
		}
		return nil
	}
}

// whyTimedOut is overdueFn's why for the timeout backstop: before it fails the
// job, overdue looks for the worker's result (see resultFirst).
const whyTimedOut = "timed out"

// timedOut tells a started attempt past its timeout and grace (TimeoutGrace).
func timedOut(j *mj.Job, now time.Time, grace time.Duration) bool {
	return now.Sub(*attemptStart(j)) > time.Duration(j.TimeoutSeconds)*time.Second+grace
}

// attemptStart is when the current attempt's worker started, or nil when it has not
// (a retried attempt of a running job that waits for a node).
func attemptStart(j *mj.Job) *time.Time { return j.AttemptStart() }

// refreshPlacement reads the child's latest evaluation and records its placement
// failure, as the event stream would have; it reports whether the job changed. An
// error is Nomad's evaluations left unread: they may say the job waits for
// capacity, so nothing is to be judged on their absence.
func (rc *reconciler) refreshPlacement(ctx context.Context, child string) (bool, error) {
	q, cancel := rc.nomad.query(ctx)
	evals, _, err := rc.nomad.jobs.Evaluations(child, q)
	cancel()
	if err != nil {
		return false, err
	}
	var latest *api.Evaluation
	for _, e := range evals {
		if len(e.FailedTGAllocs) > 0 && (latest == nil || e.ModifyIndex > latest.ModifyIndex) {
			latest = e
		}
	}
	return latest != nil && rc.placementFailed(ctx, child, latest.FailedTGAllocs), nil
}

// placementFailed records why Nomad cannot place a child yet; the job stays queued
// with the reason visible. When nodes that could run it exist but are busy, it
// waits for one to free up (Nomad's blocked evaluation places it then); otherwise
// the pool's queue limit fails it. It reports whether the job changed.
func (rc *reconciler) placementFailed(ctx context.Context, child string, failed map[string]*api.AllocationMetric) bool {
	id, attempt, ok := mj.ParseChildID(child)
	if !ok {
		return false
	}
	reason, capacity := placementReason(failed)
	waiting, pool := false, "" // the child still waits: the failure is news, not a replay
	j, err := rc.settle.update(ctx, id, func(j *mj.Job) error {
		waiting, pool = !j.Status.Terminal() && attemptStart(j) == nil && j.NomadJobID == child && j.Attempt == attempt, j.Machine
		if !waiting || (j.PlacementReason == reason && j.WaitingForCapacity == capacity) {
			return errSkip
		}
		j.PlacementReason, j.WaitingForCapacity = reason, capacity
		j.StatusDetail = "waiting for a node: " + reason
		if capacity {
			j.StatusDetail = "waiting for a free node: every node that can run it is busy; " + reason
		}
		if j.Attempt > 1 {
			j.StatusDetail = fmt.Sprintf("attempt %d: %s", j.Attempt, j.StatusDetail)
		}
		return nil
	})
	if capacity && waiting {
		// Whether or not the job changed: a waiting child Nomad has no room for
		// says its pool is full (the window, fair.go).
		rc.poolFull(pool)
	}
	if err == nil {
		cause := "infeasible"
		if capacity {
			cause = "capacity"
		}
		metrics.PlacementFailures.WithLabelValues(j.Machine, cause).Inc()
	}
	return err == nil
}

// placementReason turns Nomad's placement metrics into one sentence, and says
// whether the cause is capacity: some node passed every constraint and was only
// out of resources (CPU, memory, disk, free GPUs) at the time.
func placementReason(failed map[string]*api.AllocationMetric) (string, bool) {
	var parts []string
	capacity := len(failed) > 0
	for _, m := range failed {
		if m == nil {
			continue
		}
		if m.NodesExhausted == 0 {
			capacity = false
		}
		if m.NodesEvaluated == 0 && m.NodesInPool == 0 {
			parts = append(parts, "no nodes are available in the node pool")
			continue
		}
		parts = append(parts, fmt.Sprintf("%d node(s) evaluated", m.NodesEvaluated))
		for _, set := range []map[string]int{m.ConstraintFiltered, m.ClassFiltered, m.DimensionExhausted} {
			keys := make([]string, 0, len(set))
			for k := range set {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%d filtered by %s", set[k], k))
			}
		}
		if m.NodesExhausted > 0 && len(m.DimensionExhausted) == 0 {
			parts = append(parts, fmt.Sprintf("%d node(s) out of resources", m.NodesExhausted))
		}
	}
	if len(parts) == 0 {
		return "no node can run it", false
	}
	// Clipped as stored, so an unchanged reason compares equal and is not rewritten.
	return mj.Clip("no node can run it ("+strings.Join(parts, "; ")+")", mj.MaxDetailBytes-100), capacity
}

// cancelLoop stops the Nomad child of every job that leaves the active set as
// cancelled (the gateway marks it; Nomad follows).
func (rc *reconciler) cancelLoop(ctx context.Context) {
	rc.st().Follow(ctx, store.Active, time.Hour, rc.log, func(ctx context.Context, id string, del *store.Deleted) {
		if del == nil || del.Prev == nil {
			return
		}
		j, err := rc.st().Job(ctx, id)
		if err != nil || j.Status != mj.StatusCancelled {
			return
		}
		rc.nomad.stopChild(ctx, string(del.Prev), "job cancelled", id)
	})
}
