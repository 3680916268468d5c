package dispatcher

import (
	"cmp"
	"context"
	"errors"
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
	CountStorage(ctx context.Context, account, obj string, h store.Held, defaults store.Limits, within bool) (store.Held, bool, error)
	ClaimTmpFile(ctx context.Context, account, id, key string, size int64, expires time.Time, maxUpload int64, defaults store.Limits) error
	ReleaseExpired(ctx context.Context, now time.Time, del func(blob string) error) (int, error)
}

// sweepBlobs is what the storage sweep needs of the blob store (*blob.Bucket).
type sweepBlobs interface {
	Each(ctx context.Context, prefix string, fn func(key string, size int64, mod time.Time) error) error
	Delete(ctx context.Context, key string) error
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
// until output_retention has passed (once: applying a result again counts
// nothing).
func (d *Dispatcher) countOutputs(ctx context.Context, j *mj.Job) {
	sc, ok := d.Store.(storageCounter)
	held := j.TotalOutputBytes - mj.SentOnlyBytes(j.Outputs) // not those only sent to a destination
	if !ok || j.Status != mj.StatusSucceeded || held <= 0 || j.FinishedAt == nil {
		return
	}
	h := store.Held{Bytes: held, Expires: j.FinishedAt.Add(d.Config.Storage.Retention)}
	if _, _, err := sc.CountStorage(ctx, j.AccountID, store.OutputsObject(j.ID), h, store.Limits{}, false); err != nil {
		d.Log.Warn("count outputs against the account's storage", "job", j.ID, "err", err)
	}
}

// sweepStorage gives back the storage of expired records (deleting their
// temporary files), then checks the temporary files not counted yet: one over
// max_upload_bytes or its account's max_storage_bytes is deleted, any other is
// counted until it expires.
func (d *Dispatcher) sweepStorage(ctx context.Context, now time.Time) {
	sc, ok := d.Store.(storageCounter)
	sb, ok2 := d.Blobs.(sweepBlobs)
	if !ok || !ok2 {
		return
	}
	ctx, cancel := context.WithTimeout(ctx, sweepCalls*cmp.Or(d.BlobTimeout, BlobTimeout))
	defer cancel()
	del := func(key string) error {
		if err := sb.Delete(ctx, key); err != nil && !errors.Is(err, blob.ErrNotFound) {
			return err
		}
		return nil
	}
	if n, err := sc.ReleaseExpired(ctx, now, del); err != nil {
		d.Log.Warn("janitor: release expired storage", "err", err, "released", n)
	} else if n > 0 {
		d.Log.Info("janitor: released expired storage", "objects", n)
	}
	ttl, defaults := d.Config.Server.TmpFileTTLD, limitDefaults(d.Config.Limits)
	deleted := 0
	err := sb.Each(ctx, "tmp/", func(key string, size int64, mod time.Time) error {
		acct, id, ok := store.TmpFileKey(key)
		if !ok || !mod.Add(ttl).After(now) {
			return nil // not a temporary file's key, or expired: the sweep deletes it
		}
		err := sc.ClaimTmpFile(ctx, acct, id, key, size, mod.Add(ttl), d.Config.Server.MaxUploadBytes, defaults)
		if store.Deletable(err) && del(key) == nil {
			deleted++
			d.Log.Info("janitor: deleted a temporary file over its limits", "key", key, "why", err)
		}
		return ctx.Err()
	})
	if err != nil {
		d.Log.Warn("janitor: check temporary files", "err", err)
	}
}
