package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
)

// Storage held per account (docs/limits.md): the dispatcher counts a job's
// outputs when its result is applied (whatever the account holds: a finished
// job is never lost to a quota), and its janitor gives back what expired and
// counts, or deletes, the temporary files nobody used yet.

// storageCounter is what the store keeps of storage held (*store.Store has it).
type storageCounter interface {
	outputCounter
	Tallies(ctx context.Context, after string, limit int) ([]string, error)
	DropTally(ctx context.Context, jobID string) error
	ClaimTmpFile(ctx context.Context, account, id, key string, size int64, expires time.Time, maxUpload int64, defaults store.Limits) error
	ReleaseExpired(ctx context.Context, now time.Time, del func(blob string) error) (int, error)
}

// limitDefaults are the configured limits of amounts held.
func limitDefaults(l *config.Limits) store.Limits {
	val := func(p *int64) int64 {
		if p == nil {
			return 0
		}
		return *p
	}
	return store.Limits{MaxStorageBytes: val(l.MaxStorageBytes)}
}

// countOutputs counts a succeeded job's outputs against its account's storage
// until retention (output_retention) has passed (once: applying a result again
// counts nothing). The job's terminal write left a tally/ entry, which the count
// settles; the janitor counts what a dispatcher that stopped in between left.
func countOutputs(ctx context.Context, sc outputCounter, retention time.Duration, log *slog.Logger, j *mj.Job) {
	held := j.TotalOutputBytes - mj.SentOnlyBytes(j.Outputs) // not those only sent to a destination
	if j.Status != mj.StatusSucceeded || held <= 0 || j.FinishedAt == nil {
		return
	}
	h := store.Held{Bytes: held, Expires: j.FinishedAt.Add(retention)}
	if _, err := sc.CountOutputs(ctx, j, h); err != nil {
		log.Warn("count outputs against the account's storage; the janitor counts them", "job", j.ID, "err", err)
	}
}

// countOutputs is countOutputs of a job whose result the settler applied.
func (s *settler) countOutputs(ctx context.Context, j *mj.Job) {
	countOutputs(ctx, s.st(), s.cfg.Storage.Retention, s.log, j)
}

// outputCounter counts a job's outputs (storageCounter's first method).
type outputCounter interface {
	CountOutputs(ctx context.Context, j *mj.Job, h store.Held) (bool, error)
}

// tallyPage is how many uncounted jobs one sweep counts at most.
const tallyPage = 500

// countLeftOutputs counts the outputs of succeeded jobs whose count did not
// happen when their result was applied (the dispatcher stopped, etcd failed),
// a page a sweep, each sweep after the last one's (tallyAfter): a job that
// cannot be read keeps its entry without holding up those behind it.
func (j *janitor) countLeftOutputs(ctx context.Context, sc storageCounter) {
	ids, err := sc.Tallies(ctx, j.tallyAfter, tallyPage)
	if err != nil {
		j.log.Warn("janitor: list outputs to count", "err", err)
		return
	}
	j.tallyAfter = ""
	if len(ids) == tallyPage {
		j.tallyAfter = ids[len(ids)-1]
	}
	if len(ids) == 0 {
		return
	}
	jobs, errs := j.st().Jobs(ctx, ids)
	for i, id := range ids {
		switch {
		case errs[i] != nil && mj.ErrorCode(errs[i]) == mj.ENotFound:
			sc.DropTally(ctx, id)
		case errs[i] != nil:
			j.log.Warn("janitor: read a job whose outputs are to count", "job", id, "err", errs[i])
		case jobs[i].Status != mj.StatusSucceeded || jobs[i].TotalOutputBytes-mj.SentOnlyBytes(jobs[i].Outputs) <= 0 || jobs[i].FinishedAt == nil:
			sc.DropTally(ctx, id) // nothing to count
		default:
			countOutputs(ctx, j.st(), j.cfg.Storage.Retention, j.log, jobs[i])
		}
	}
	j.log.Info("janitor: counted outputs left uncounted", "jobs", len(ids))
}

// sweepStorage gives back the storage of expired records (deleting their
// temporary files), then checks the temporary files not counted yet: one over
// max_upload_bytes or its account's max_storage_bytes is deleted, any other is
// counted until it expires.
func (j *janitor) sweepStorage(ctx context.Context, now time.Time) {
	sc, sb := j.st(), j.blobs
	ctx, cancel := context.WithTimeout(ctx, sweepCalls*j.blobTimeout)
	defer cancel()
	del := func(key string) error {
		if err := sb.Delete(ctx, key); err != nil && !errors.Is(err, blob.ErrNotFound) {
			return err
		}
		return nil
	}
	j.countLeftOutputs(ctx, sc)
	if n, err := sc.ReleaseExpired(ctx, now, del); err != nil {
		j.log.Warn("janitor: release expired storage", "err", err, "released", n)
	} else if n > 0 {
		j.log.Info("janitor: released expired storage", "objects", n)
	}
	ttl, defaults := j.cfg.Server.TmpFileTTLD, limitDefaults(j.cfg.Limits)
	deleted := 0
	err := sb.Each(ctx, mj.TmpDir, func(key string, size int64, mod time.Time) error {
		acct, id, ok := mj.ParseTmpKey(key)
		if !ok || !mod.Add(ttl).After(now) {
			return nil // not a temporary file's key, or expired: the sweep deletes it
		}
		err := sc.ClaimTmpFile(ctx, acct, id, key, size, mod.Add(ttl), j.cfg.Server.MaxUploadBytes, defaults)
		if store.Deletable(err) && del(key) == nil {
			deleted++
			j.log.Info("janitor: deleted a temporary file over its limits", "key", key, "why", err)
		}
		return ctx.Err()
	})
	if err != nil {
		j.log.Warn("janitor: check temporary files", "err", err)
	}
}
