package dispatcher

import (
	"context"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"log/slog"
	"strings"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// janitorStore is what the janitor needs of the store (the term's: its writes
// are fenced).
type janitorStore interface {
	storageCounter
	usageSweeper
	Job(ctx context.Context, id string) (*mj.Job, error)
	Jobs(ctx context.Context, ids []string) ([]*mj.Job, []error)
	SweepIdempotency(ctx context.Context, cutoff time.Time) (int, error)
	BackfillDone(ctx context.Context) (int, error)
	DeleteFinishedJobs(ctx context.Context, cutoff time.Time, max int) (int, error)
	DeleteEndedPipelines(ctx context.Context, cutoff time.Time, max int) (int, error)
}

// etcdMaintainer keeps etcd small (maintenance.go); the plain store has it.
type etcdMaintainer interface {
	Maintain(ctx context.Context, o store.MaintainOptions) *store.MaintainReport
}

// janitor deletes what has outlived its use (files, finished jobs and their
// Nomad children, idempotency records, usage counters), settles the storage
// held per account (storagequota.go) and keeps etcd small (maintenance.go).
type janitor struct {
	cfg   *config.Config
	log   *slog.Logger
	st    func() janitorStore // the term's store
	etcd  etcdMaintainer      // the plain store: maintenance is no job write
	nomad *nomadAPI           // nil or without jobs: no children are purged
	blobs Blobs               // for the sweep's own deadline (sweepStorage)
	timed Blobs               // every other call, each with a deadline (timedBlobs)
	// blobTimeout bounds one blob call; a sweep of temporary files gets
	// sweepCalls times as long.
	blobTimeout time.Duration
	// tallyAfter is where the next page of uncounted outputs starts (the
	// janitor runs one sweep at a time).
	tallyAfter string
}

// idempotencyWindow is how long an Idempotency-Key is remembered.
const idempotencyWindow = 24 * time.Hour

// janitorLoop deletes what has outlived its use, at start and every sweep_every:
// temporary files past tmp_file_ttl (their links have expired), job outputs past
// output_retention, idempotency records past 24 h, finished jobs past job_retention.
func (j *janitor) janitorLoop(ctx context.Context) {
	for {
		j.sweep(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-time.After(j.cfg.Storage.Sweep):
		}
	}
}

// sweep runs one janitor pass as of now.
func (j *janitor) sweep(ctx context.Context, now time.Time) {
	for _, s := range []struct {
		prefix string
		age    time.Duration
	}{
		{mj.TmpDir, j.cfg.Server.TmpFileTTLD},
		{mj.JobsDir, j.cfg.Storage.Retention},
	} {
		n, err := j.timed.Sweep(ctx, s.prefix, now.Add(-s.age))
		if err != nil {
			j.log.Warn("janitor: sweep blobs", "prefix", s.prefix, "err", err)
		} else if n > 0 {
			j.log.Info("janitor: deleted expired files", "prefix", s.prefix, "files", n)
		}
	}
	j.sweepStorage(ctx, now) // storagequota.go
	j.purgeChildren(ctx, now)
	j.deleteFinishedJobs(ctx, now)
	j.sweepUsage(ctx, now) // usage.go
	if n, err := j.st().SweepIdempotency(ctx, now.Add(-idempotencyWindow)); err != nil {
		j.log.Warn("janitor: sweep idempotency keys", "err", err)
	} else if n > 0 {
		j.log.Info("janitor: forgot old idempotency keys", "keys", n)
	}
}

// deleteFinishedJobs deletes the jobs that finished more than job_retention ago,
// with every key derived from them. Jobs stored before the done index existed get
// their done key first (once).
func (j *janitor) deleteFinishedJobs(ctx context.Context, now time.Time) {
	if n, err := j.st().BackfillDone(ctx); err != nil {
		j.log.Warn("janitor: index finished jobs", "err", err)
		return
	} else if n > 0 {
		j.log.Info("janitor: indexed finished jobs for retention", "jobs", n)
	}
	n, err := j.st().DeleteFinishedJobs(ctx, now.Add(-j.cfg.Storage.JobRetentionD), 0)
	if err != nil {
		j.log.Warn("janitor: delete finished jobs", "err", err, "deleted", n)
	} else if n > 0 {
		j.log.Info("janitor: deleted finished jobs past job_retention", "jobs", n)
	}
	n, err = j.st().DeleteEndedPipelines(ctx, now.Add(-j.cfg.Storage.JobRetentionD), 0)
	if err != nil {
		j.log.Warn("janitor: delete ended pipelines", "err", err, "deleted", n)
	} else if n > 0 {
		j.log.Info("janitor: deleted ended pipelines past job_retention", "pipelines", n)
	}
}

// purgeChildren removes finished child jobs from Nomad purge_after after they were
// dispatched, once the mediajobs job no longer needs them (it is finished, or moved
// on to another attempt), so the Nomad UI stays usable.
func (j *janitor) purgeChildren(ctx context.Context, now time.Time) {
	if j.nomad == nil || j.nomad.jobs == nil {
		return
	}
	q, cancel := j.nomad.query(ctx)
	defer cancel()
	q.Prefix = "mediajobs-"
	stubs, _, err := j.nomad.jobs.List(q)
	if err != nil {
		j.log.Warn("janitor: list nomad jobs", "err", err)
		return
	}
	n := 0
	for _, s := range stubs {
		if s.ParentID == "" || s.Status != "dead" || now.Sub(time.Unix(0, s.SubmitTime)) < j.cfg.Nomad.PurgeAfterD {
			continue
		}
		id, _, ok := mj.ParseChildID(s.ID)
		if !ok || !strings.HasPrefix(s.ParentID, "mediajobs-") {
			continue
		}
		job, err := j.st().Job(ctx, id)
		if err == nil && !job.Status.Terminal() && job.NomadJobID == s.ID {
			continue // still the job's current child
		}
		if err != nil && mj.ErrorCode(err) != mj.ENotFound {
			continue
		}
		wo, cancel := j.nomad.write(ctx)
		_, _, err = j.nomad.jobs.Deregister(s.ID, true, wo)
		cancel()
		if err == nil {
			n++
		}
	}
	if n > 0 {
		j.log.Info("janitor: purged finished nomad jobs", "jobs", n)
	}
}
