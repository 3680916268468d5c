package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"runtime/debug"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
)

// A panic while handling one job (a transition run in a write group, an event
// worker's apply) must not end the process: the next leader would replay the same
// data and die in turn. It is caught, the job whose data caused it fails with an
// internal error, and the rest goes on (docs/state_machine.md, "Internal errors").

// internalErrorMessage is the error_message of a job failed by a panic.
const internalErrorMessage = "the dispatcher hit an internal error while handling this job, and failed it (see the dispatcher's log)"

// panicError is a job change that panicked, with where.
type panicError struct {
	v     any
	stack []byte
}

func (p *panicError) Error() string { return fmt.Sprintf("internal error: %v", p.v) }

// recovered runs fn, turning a panic into a *panicError: Store.next then writes
// nothing for the job, and the other jobs of its group are committed as usual.
func recovered(fn func(*mj.Job) error) func(*mj.Job) error {
	return func(j *mj.Job) (err error) {
		defer func() {
			if v := recover(); v != nil {
				err = &panicError{v: v, stack: debug.Stack()}
			}
		}()
		return fn(j)
	}
}

// updateJobs is the write groups' Store.UpdateJobs, with each change recovered:
// a change that panicked fails its job (failInternal) and answers its caller with
// the panic as an error.
func (s *settler) updateJobs(ctx context.Context, us []store.JobUpdate) ([]*mj.Job, []error) {
	safe := make([]store.JobUpdate, len(us))
	for i, u := range us {
		u.Fn = recovered(u.Fn)
		safe[i] = u
	}
	jobs, errs := s.st().UpdateJobs(ctx, safe)
	for i, err := range errs {
		var p *panicError
		if errors.As(err, &p) {
			s.failInternal(ctx, us[i].ID, p.v, p.stack)
		}
	}
	return jobs, errs
}

// failInternal logs a panic met while handling job id, with its stack, and fails
// the job unless it has ended already. It writes with Store.UpdateJob, not a group:
// it may run inside one. A child still running is stopped by reconcile's stray
// sweep, like any child of a finished job.
func (s *settler) failInternal(ctx context.Context, id string, v any, stack []byte) {
	metrics.DispatcherPanics.WithLabelValues().Inc()
	s.log.Error("internal error: panic while handling a job; failing the job", "job", id, "panic", fmt.Sprint(v), "stack", string(stack))
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), groupTimeout)
	defer cancel()
	j, err := s.st().UpdateJob(ctx, id, func(j *mj.Job) error {
		if j.Status.Terminal() {
			return errSkip
		}
		now := time.Now().UTC()
		j.Fail(now, internalErrorMessage)
		return nil
	})
	switch {
	case err == nil:
		metrics.Finished(j)
	case errors.Is(err, errSkip), mj.ErrorCode(err) == mj.ENotFound:
	default:
		s.log.Warn("could not fail the job after an internal error", "job", id, "err", err)
	}
}

// workerPanicked is the event workers' panic handler (see partitions): the task's
// key is the job id its event was about.
func (tr *tracker) workerPanicked(ctx context.Context) func(key string, v any, stack []byte) {
	return func(key string, v any, stack []byte) { tr.settle.failInternal(ctx, key, v, stack) }
}
