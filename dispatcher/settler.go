package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
)

// The settler applies what became of a run to its job: an allocation's state
// and its runner's result (apply, transition), a child that vanished with its
// worker (lost), a result that came after the job was cancelled (lateUsage),
// and what follows each write (applied: the log, metrics, storage counts, and
// stopping a child that is no longer wanted). The tracker, the reconciler and
// the warm broker settle their runs through it; its writes go out in groups
// (update), each change recovered from a panic (guard.go).

// settlerStore is what the settler needs of the store (the term's: its writes
// are fenced).
type settlerStore interface {
	outputCounter
	UpdateJob(ctx context.Context, id string, fn func(*mj.Job) error) (*mj.Job, error)
	UpdateJobs(ctx context.Context, us []store.JobUpdate) ([]*mj.Job, []error)
}

// settler applies runs' outcomes to their jobs (see above). It owns the
// results' reads (res), the first sightings of allocations' timed states
// (seen) and the late usage waiting to be counted (late).
type settler struct {
	cfg             *config.Config
	log             *slog.Logger
	st              func() settlerStore // the term's store
	nomad           *nomadAPI           // stops children no job wants
	now             func() time.Time
	disconnectGrace time.Duration // DisconnectGrace
	res             *results      // runners' results in the blob store (results.go)
	// writes groups the writes of events and reconcile (see update); ungrouped:
	// each job is written alone (the old path, for the benchmark).
	writes    *group[store.JobUpdate, *mj.Job]
	ungrouped bool
	// seen: when this dispatcher first saw allocations' timed states (clock.go).
	seen sightings
	// late holds, per job id, what lateUsage added to a cancelled job's usage,
	// counted in the usage metrics once its write lands (applied).
	late sync.Map
}

// update changes a job as Store.UpdateJob does, in one etcd transaction with the
// other updates in flight (see group): the event workers' and reconcile's writes
// cost a few transactions per burst rather than two round trips each. Each update
// is still its own compare-and-swap: one that lost a race with another writer of
// its job is retried alone on the job as it now is.
func (s *settler) update(ctx context.Context, id string, fn func(*mj.Job) error) (*mj.Job, error) {
	if s.writes == nil || s.ungrouped {
		return s.st().UpdateJob(ctx, id, fn)
	}
	return s.writes.Do(ctx, store.JobUpdate{ID: id, Fn: fn})
}

// outcome is transition as the settler applies it: the result checked against
// the job's outputs and metered, the job's pool's attempts, the disconnect grace.
func (s *settler) outcome(j *mj.Job, a allocState, r *mj.Result, now time.Time, prefix string) error {
	return transition(j, a, checked(s.metered(r, j), j, s.cfg.Server.MaxOutputFiles), now, prefix, s.maxAttempts(j), s.disconnectGrace)
}

// apply moves a job according to one allocation's state, and reports whether it
// did. Events for other Nomad jobs, for older attempts, or for finished jobs change
// nothing.
func (s *settler) apply(ctx context.Context, a allocState) bool {
	id, attempt, ok := mj.ParseChildID(a.NomadJobID)
	if !ok {
		return false
	}
	var result *mj.Result
	prefix := mj.RunScope(id, attempt)
	switch a.ClientStatus {
	case api.AllocClientStatusRunning:
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost, api.AllocClientStatusUnknown:
		var err error
		if result, prefix, err = s.res.readResult(ctx, id, attempt, a.ID); err != nil {
			// Not "no result": the store could not say. Leave the job as it is; the
			// next reconcile reads the allocation, and the result, again (unless the
			// error persists: see resultUnreadable).
			s.resultUnreadable(ctx, id, attempt, a.NomadJobID, err)
			return false
		}
	default:
		return false
	}
	now := s.now()
	a = s.ownClock(a, now)
	var twinOf string
	j, err := s.update(ctx, id, func(j *mj.Job) error {
		if twin(j, a.NomadJobID, attempt) && a.ClientStatus == api.AllocClientStatusRunning {
			twinOf = twinWhy(j)
		}
		if j.Status.Terminal() || j.Attempt != attempt || j.NomadJobID != a.NomadJobID {
			return s.lateUsage(j, a.NomadJobID, attempt, result)
		}
		return s.outcome(j, a, result, now, prefix)
	})
	if twinOf != "" && errors.Is(err, errSkip) {
		metrics.ReconcileCorrections.WithLabelValues("stray").Inc()
		s.nomad.stopChild(ctx, a.NomadJobID, twinOf, id)
	}
	s.applied(ctx, id, a.NomadJobID, j, err)
	if result != nil {
		// Read: the grace of a late result is over, and its sighting need
		// not wait for the prune.
		s.seen.forget("reported/" + a.ID)
	}
	if err == nil && retried(j) {
		metrics.JobRetries.WithLabelValues(j.Machine, retryReason(a)).Inc()
	}
	return err == nil
}

// lateUsage is the update, by the result r of attempt on child, of a job that
// was cancelled while that attempt ran (docs/usage.md): the job stays
// cancelled, and its usage becomes, figure by figure, the larger of what the
// cancel metered (wall time: mj.CancelledUsage) and what the runner reports
// (CPU time, output bytes, ...); the store adds the difference to the account's
// day in the same write (store/usage.go). A destination that cancels the job
// before it answers the upload so leaves the work billed. Any other job, or a
// result that adds nothing, is skipped (errSkip). Both the Nomad path (apply)
// and the warm one (applyWarmDone) call it when they skip a job.
func (s *settler) lateUsage(j *mj.Job, child string, attempt int, r *mj.Result) error {
	if r == nil || j.Status != mj.StatusCancelled || j.NomadJobID != child || max(j.Attempt, 1) != attempt {
		return errSkip
	}
	rep := checked(s.metered(r, j), j, s.cfg.Server.MaxOutputFiles).Usage
	if rep == nil {
		return errSkip
	}
	u := *rep
	if o := j.Usage; o != nil {
		u = mj.Usage{WallSeconds: max(u.WallSeconds, o.WallSeconds), CPUSeconds: max(u.CPUSeconds, o.CPUSeconds),
			GPUSeconds: max(u.GPUSeconds, o.GPUSeconds), InputBytes: max(u.InputBytes, o.InputBytes), OutputBytes: max(u.OutputBytes, o.OutputBytes)}
		if u == *o {
			return errSkip
		}
	}
	added := u
	if o := j.Usage; o != nil {
		added = mj.Usage{WallSeconds: u.WallSeconds - o.WallSeconds, CPUSeconds: u.CPUSeconds - o.CPUSeconds, GPUSeconds: u.GPUSeconds - o.GPUSeconds,
			InputBytes: u.InputBytes - o.InputBytes, OutputBytes: u.OutputBytes - o.OutputBytes}
	}
	s.late.Store(j.ID, added)
	j.Usage = &u
	return nil
}

// retried tells a job just sent back to the queue as a new attempt.
func retried(j *mj.Job) bool { return j.NomadJobID == "" && !j.Status.Terminal() }

// retryReason is mediajobs_job_retries_total's reason for an attempt that
// transition retried on allocation a.
func retryReason(a allocState) string {
	switch a.ClientStatus {
	case api.AllocClientStatusLost:
		return metrics.RetryNodeLost
	case api.AllocClientStatusUnknown:
		return metrics.RetryNodeDisconnected
	}
	return metrics.RetryWorkerCrashed
}

// lost re-dispatches (or fails, after the last attempt) a job whose child vanished.
func (s *settler) lost(ctx context.Context, id, child, why string) {
	j, err := s.update(ctx, id, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != child {
			return errSkip
		}
		j.RetryOrFail(why, s.now(), s.maxAttempts(j))
		return nil
	})
	s.applied(ctx, id, child, j, err)
	if err == nil && retried(j) {
		metrics.JobRetries.WithLabelValues(j.Machine, metrics.RetryVanished).Inc()
	}
}

func (s *settler) applied(ctx context.Context, id, child string, j *mj.Job, err error) {
	switch {
	case err == nil && j.Status == mj.StatusCancelled:
		// The dispatcher never cancels: this is a late result's usage
		// (lateUsage); the cancel itself ended the job, once.
		s.log.Info("metered the usage its runner reported after the job was cancelled", "job", id, "nomad_job", child)
		if added, ok := s.late.LoadAndDelete(id); ok {
			metrics.LateUsage(j, added.(mj.Usage))
		}
	case err == nil:
		s.log.Info("job updated", "job", id, "status", j.Status, "attempt", j.Attempt, "detail", j.StatusDetail)
		if j.Status.Terminal() {
			metrics.Finished(j)
			s.countOutputs(ctx, j) // storage held (storagequota.go)
		}
		if j.NomadJobID == "" && !j.Status.Terminal() {
			s.nomad.stopChild(ctx, child, "re-dispatching", id) // usually dead already
		}
	case errors.Is(err, errSkip), mj.ErrorCode(err) == mj.ENotFound:
		s.late.Delete(id)
	default:
		s.late.Delete(id)
		s.log.Warn("apply nomad state", "job", id, "nomad_job", child, "err", err)
	}
}

// maxAttempts is the job's pool's max_attempts, plus the attempts stopping warm
// runners handed back (GivenBack, bounded in warm.go): those are not the job's.
func (s *settler) maxAttempts(j *mj.Job) int {
	if p := s.cfg.Pool(j.Machine); p != nil {
		return p.MaxAttempts + j.GivenBack
	}
	return 1 + j.GivenBack
}

// checked turns a successful result whose outputs j did not declare into a
// failed one: the result was written by a worker that runs users' commands.
func checked(r *mj.Result, j *mj.Job, maxOutputs int) *mj.Result {
	r = mj.BoundResult(r) // error text and probe data within the job record's bounds
	if r == nil || !r.Succeeded {
		return r
	}
	if err := mj.CheckOutputs(r.Outputs, j.OutputNames, maxOutputs); err != nil {
		return &mj.Result{JobID: r.JobID, Attempt: r.Attempt, InputBytes: r.InputBytes, ErrorMessage: err.Error(), Usage: failedUsage(r.Usage)}
	}
	return r
}

// defaultDisconnectGrace is dispatcher.disconnect_grace's default: how long an
// allocation whose node stopped heartbeating ("unknown": the jobspecs' disconnect
// block keeps Nomad from replacing it for an hour) may stay so before the attempt
// counts as lost: the next attempt is a new child, and this one is stopped.
const defaultDisconnectGrace = 5 * time.Minute

// resultGrace is how long a result the runner reported (its reporting task exited
// 0 or 1) may take to become readable before it counts as missing.
const resultGrace = 2 * time.Minute

// transition is the pure part of apply: how an allocation state and the runner's
// result (nil when it reported none) change a job. A result, success or failure, is
// final, and its outputs are the ones under prefix (the allocation's own). No
// result means the worker was lost or crashed, which is retried, unless the runner
// said it reported: then the result is late, and the next pass reads it again.
func transition(j *mj.Job, a allocState, r *mj.Result, now time.Time, prefix string, maxAttempts int, disconnectGrace time.Duration) error {
	if a.ClientStatus == api.AllocClientStatusRunning {
		// A retried attempt of a running job stays running but starts a new clock.
		// (Attempt 1 with no AttemptStartedAt was stored before it existed: its
		// StartedAt is the attempt's start.)
		if j.Status == mj.StatusRunning && (j.AttemptStartedAt != nil || j.Attempt <= 1) {
			return errSkip
		}
		started := now
		if !a.StartedAt.IsZero() {
			started = a.StartedAt.UTC()
		}
		if j.Status != mj.StatusRunning {
			j.StartedAt = &started
		}
		// The timeout backstop's clock is the dispatcher's own, from when it saw
		// the attempt running: a node clock behind it would shorten the timeout
		// (docs/state_machine.md).
		seen := now
		j.AttemptStartedAt = &seen
		j.Worker = &mj.Worker{Path: mj.WorkerDispatch, NomadJobID: a.NomadJobID, AllocationID: a.ID}
		j.PlacementReason = ""
		j.Run("running on Nomad allocation " + a.ID)
		return nil
	}
	if _, warm := mj.WarmRunOfChild(a.NomadJobID); r != nil && !warm && (j.Worker == nil || j.Worker.AllocationID == "") {
		j.Worker = &mj.Worker{Path: mj.WorkerDispatch, NomadJobID: a.NomadJobID, AllocationID: a.ID}
	}
	if r != nil && j.StartedAt == nil {
		started := now
		if !a.StartedAt.IsZero() {
			started = a.StartedAt.UTC()
		}
		j.StartedAt = &started // a fast task can skip "running" in the stream
	}
	if r != nil {
		// One log per command at most, under the allocation's own prefix.
		j.LogCommands, j.LogsPrefix = nil, prefix
		seen := map[int]bool{}
		for _, l := range r.Logs {
			if l.Command >= 1 && l.Command <= len(j.FFmpegCommands) && !seen[l.Command] {
				seen[l.Command] = true
				j.LogCommands = append(j.LogCommands, l.Command)
			}
		}
		if len(j.LogCommands) == 0 {
			j.LogsPrefix = ""
		}
		j.Analysis = r.Analysis // bounded (checked)
		j.Usage = r.Usage       // this attempt's: the one metered (usage.go)
	}
	switch {
	case r != nil && r.Succeeded:
		detail := ""
		if j.Attempt > 1 {
			detail = fmt.Sprintf("succeeded on attempt %d (earlier workers were lost)", j.Attempt)
		}
		j.Succeed(now, detail)
		j.TotalInputBytes, j.TotalOutputBytes, j.Outputs = r.InputBytes, 0, nil
		for _, o := range r.Outputs {
			o.Key = prefix + mj.OutputsDir + o.Name
			j.Outputs = append(j.Outputs, o)
			j.TotalOutputBytes += o.Size
		}
	case r != nil:
		j.Fail(now, r.ErrorMessage)
		j.TotalInputBytes = r.InputBytes
	case a.ClientStatus == api.AllocClientStatusLost:
		j.RetryOrFail("the Nomad node running it was lost (allocation "+a.ID+")", now, maxAttempts)
	case a.ClientStatus == api.AllocClientStatusUnknown && now.Sub(a.Modified) < disconnectGrace:
		return errSkip // its node may be back in a moment, with the run intact
	case a.ClientStatus == api.AllocClientStatusUnknown:
		j.RetryOrFail(fmt.Sprintf("the Nomad node running it has been disconnected for over %s (allocation %s)", disconnectGrace, a.ID), now, maxAttempts)
	case a.Reported && now.Sub(a.ReportedAt) < resultGrace:
		return errSkip // reported, not readable yet: read it again, never re-run it
	default:
		why := fmt.Sprintf("its worker ended without reporting a result (Nomad allocation %s, %s)", a.ID, a.ClientStatus)
		if len(a.TaskEvents) > 0 {
			ev := a.TaskEvents
			if len(ev) > 4 {
				ev = ev[len(ev)-4:]
			}
			why += ": " + strings.Join(ev, "; ")
		}
		j.RetryOrFail(why, now, maxAttempts)
	}
	return nil
}
