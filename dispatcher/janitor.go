package dispatcher

import (
	"context"
	"strings"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// idempotencyWindow is how long an Idempotency-Key is remembered.
const idempotencyWindow = 24 * time.Hour

// janitorLoop deletes what has outlived its use, at start and every sweep_every:
// temporary files past tmp_file_ttl (their links have expired), job outputs past
// output_retention, idempotency records past 24 h, finished jobs past job_retention.
func (d *Dispatcher) janitorLoop(ctx context.Context) {
	for {
		d.Sweep(ctx, time.Now())
		select {
		case <-ctx.Done():
			return
		case <-time.After(d.Config.Storage.Sweep):
		}
	}
}

// Sweep runs one janitor pass as of now.
func (d *Dispatcher) Sweep(ctx context.Context, now time.Time) {
	for _, s := range []struct {
		prefix string
		age    time.Duration
	}{
		{mj.TmpDir, d.Config.Server.TmpFileTTLD},
		{mj.JobsDir, d.Config.Storage.Retention},
	} {
		n, err := d.storage().Sweep(ctx, s.prefix, now.Add(-s.age))
		if err != nil {
			d.Log.Warn("janitor: sweep blobs", "prefix", s.prefix, "err", err)
		} else if n > 0 {
			d.Log.Info("janitor: deleted expired files", "prefix", s.prefix, "files", n)
		}
	}
	d.sweepStorage(ctx, now) // storagequota.go
	d.purgeChildren(ctx, now)
	d.deleteFinishedJobs(ctx, now)
	d.sweepUsage(ctx, now) // usage.go
	if n, err := d.st().SweepIdempotency(ctx, now.Add(-idempotencyWindow)); err != nil {
		d.Log.Warn("janitor: sweep idempotency keys", "err", err)
	} else if n > 0 {
		d.Log.Info("janitor: forgot old idempotency keys", "keys", n)
	}
}

// deleteFinishedJobs deletes the jobs that finished more than job_retention ago,
// with every key derived from them. Jobs stored before the done index existed get
// their done key first (once).
func (d *Dispatcher) deleteFinishedJobs(ctx context.Context, now time.Time) {
	if n, err := d.st().BackfillDone(ctx); err != nil {
		d.Log.Warn("janitor: index finished jobs", "err", err)
		return
	} else if n > 0 {
		d.Log.Info("janitor: indexed finished jobs for retention", "jobs", n)
	}
	n, err := d.st().DeleteFinishedJobs(ctx, now.Add(-d.Config.Storage.JobRetentionD), 0)
	if err != nil {
		d.Log.Warn("janitor: delete finished jobs", "err", err, "deleted", n)
	} else if n > 0 {
		d.Log.Info("janitor: deleted finished jobs past job_retention", "jobs", n)
	}
}

// purgeChildren removes finished child jobs from Nomad purge_after after they were
// dispatched, once the mediajobs job no longer needs them (it is finished, or moved
// on to another attempt), so the Nomad UI stays usable.
func (d *Dispatcher) purgeChildren(ctx context.Context, now time.Time) {
	if d.Jobs == nil {
		return
	}
	q, cancel := d.query(ctx)
	defer cancel()
	q.Prefix = "mediajobs-"
	stubs, _, err := d.Jobs.List(q)
	if err != nil {
		d.Log.Warn("janitor: list nomad jobs", "err", err)
		return
	}
	n := 0
	for _, s := range stubs {
		if s.ParentID == "" || s.Status != "dead" || now.Sub(time.Unix(0, s.SubmitTime)) < d.Config.Nomad.PurgeAfterD {
			continue
		}
		id, _, ok := mj.ParseChildID(s.ID)
		if !ok || !strings.HasPrefix(s.ParentID, "mediajobs-") {
			continue
		}
		j, err := d.st().Job(ctx, id)
		if err == nil && !j.Status.Terminal() && j.NomadJobID == s.ID {
			continue // still the job's current child
		}
		if err != nil && mj.ErrorCode(err) != mj.ENotFound {
			continue
		}
		wo, cancel := d.write(ctx)
		_, _, err = d.Jobs.Deregister(s.ID, true, wo)
		cancel()
		if err == nil {
			n++
		}
	}
	if n > 0 {
		d.Log.Info("janitor: purged finished nomad jobs", "jobs", n)
	}
}
