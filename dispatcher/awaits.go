package dispatcher

import (
	"context"
	"log/slog"
	"slices"
	"sort"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
)

// A job whose inputs name other jobs' outputs (job:<id>/<output>,
// docs/references.md) is created awaiting them, outside its pool's queue
// (store/awaits.go). The awaiter, a service of the leader's term, settles
// each such job when a job it awaits ends: released into the queue with the
// output's blob key once every job it awaits succeeded (manifest.go signs
// it), failed naming the job when one failed or was cancelled.

// awaitsStore is what the awaiter needs of the store (the term's: its writes
// are fenced).
type awaitsStore interface {
	Follow(ctx context.Context, f store.Family, resync time.Duration, log *slog.Logger, fn func(ctx context.Context, id string, del *store.Deleted))
	TailDone(ctx context.Context, from int64, log *slog.Logger, fn func(ctx context.Context, id string))
	Waiters(ctx context.Context, dep string) ([]string, error)
	Job(ctx context.Context, id string) (*mj.Job, error)
	Jobs(ctx context.Context, ids []string) ([]*mj.Job, []error)
	UpdateJob(ctx context.Context, id string, fn func(*mj.Job) error) (*mj.Job, error)
}

var _ awaitsStore = (*store.Store)(nil)

// awaiter settles the jobs that await other jobs' outputs, for one term.
type awaiter struct {
	store  awaitsStore
	log    *slog.Logger
	now    func() time.Time
	resync time.Duration // how often every waiting job is looked at again
}

func (d *Dispatcher) newAwaiter() *awaiter {
	return &awaiter{store: d.st(), log: d.Log, now: d.now, resync: time.Minute}
}

// awaitsLoop runs the term's awaiter until ctx ends.
func (d *Dispatcher) awaitsLoop(ctx context.Context) { d.newAwaiter().run(ctx) }

// run settles every waiting job now and every resync (a job created awaiting
// one that ended meanwhile), and the waiters of every job that ends, as it ends.
func (a *awaiter) run(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		a.store.TailDone(ctx, 0, a.log, func(ctx context.Context, dep string) {
			ids, err := a.store.Waiters(ctx, dep)
			if err != nil {
				a.log.Warn("reading the jobs that await a finished job failed; the next resync settles them", "job", dep, "err", err)
				return
			}
			for _, id := range ids {
				a.settle(ctx, id)
			}
		})
	}()
	a.store.Follow(ctx, store.Awaits, a.resync, a.log, func(ctx context.Context, id string, del *store.Deleted) {
		if del == nil {
			a.settle(ctx, id)
		}
	})
	<-done
}

// settle releases or fails waiting job id by the jobs it awaits; a job still
// running or queued leaves it waiting. Errors are logged: the next change or
// resync settles it.
func (a *awaiter) settle(ctx context.Context, id string) {
	j, err := a.store.Job(ctx, id)
	if err != nil {
		if mj.ErrorCode(err) != mj.ENotFound {
			a.log.Warn("reading a waiting job failed", "job", id, "err", err)
		}
		return
	}
	if j.Status.Terminal() || len(j.Awaits) == 0 {
		return
	}
	deps, errs := a.store.Jobs(ctx, j.Awaits)
	released := map[string]map[string]string{} // job awaited → its inputs' keys
	fail := ""
	for i, dep := range j.Awaits {
		switch {
		case errs[i] != nil && mj.ErrorCode(errs[i]) == mj.ENotFound:
			fail = "job " + dep + ", whose output this job's inputs name, no longer exists"
		case errs[i] != nil:
			a.log.Warn("reading an awaited job failed", "job", id, "awaits", dep, "err", errs[i])
			return
		default:
			keys, wait, never := inputsFrom(j, deps[i])
			switch {
			case never != "":
				fail = never
			case !wait:
				released[dep] = keys
			}
		}
		if fail != "" {
			break
		}
	}
	if fail == "" && len(released) == 0 {
		return
	}
	_, err = a.store.UpdateJob(ctx, id, func(j *mj.Job) error {
		if j.Status.Terminal() || len(j.Awaits) == 0 {
			return errSkip
		}
		if fail != "" {
			j.Fail(a.now(), fail)
			return nil
		}
		for dep, keys := range released {
			if slices.Contains(j.Awaits, dep) {
				j.Release(dep, keys, a.now())
			}
		}
		return nil
	})
	switch {
	case err == nil && fail != "":
		a.log.Info("a job failed: a job whose output it awaits will not make it", "job", id, "why", fail)
	case err == nil:
		a.log.Info("a job's awaited outputs are ready", "job", id, "from", sortedIDs(released))
	case err != errSkip:
		a.log.Warn("settling a waiting job failed; the next resync tries again", "job", id, "err", err)
	}
}

// inputsFrom resolves the inputs of j that name outputs of dep: their keys
// once all exist; wait while dep may still make them; never, for the
// error_message, when one never will.
func inputsFrom(j, dep *mj.Job) (keys map[string]string, wait bool, never string) {
	keys = map[string]string{}
	names := make([]string, 0, len(j.InputFiles))
	for name := range j.InputFiles {
		names = append(names, name)
	}
	sort.Strings(names)
	named := false
	for _, name := range names {
		id, output, ok := mj.ParseJobRef(j.InputFiles[name])
		if !ok || id != dep.ID {
			continue
		}
		named = true
		key, w, n := mj.ResolveRef(dep, output)
		switch {
		case n != "":
			return nil, false, "input_files." + name + ": " + n
		case w:
			wait = true
		default:
			keys[name] = key
		}
	}
	if !named {
		// An await no input names orders j after dep (a chunked job's
		// max_workers, mj.ExtendChunked): j waits until dep succeeded, and
		// fails if it will not (its pipeline stops at that failure anyway).
		switch dep.Status {
		case mj.StatusSucceeded:
			return keys, false, ""
		case mj.StatusFailed, mj.StatusCancelled:
			return nil, false, "job " + dep.ID + ", which this job runs after, " + string(dep.Status)
		}
		return nil, true, ""
	}
	if wait {
		return nil, true, ""
	}
	return keys, false, ""
}

func sortedIDs(m map[string]map[string]string) []string {
	ids := make([]string, 0, len(m))
	for id := range m {
		ids = append(ids, id)
	}
	sort.Strings(ids)
	return ids
}
