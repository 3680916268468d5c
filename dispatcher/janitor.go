package dispatcher

import (
	"context"
	"time"
)

// idempotencyWindow is how long an Idempotency-Key is remembered.
const idempotencyWindow = 24 * time.Hour

// janitorLoop deletes what has outlived its use, at start and every sweep_every:
// temporary files past tmp_file_ttl (their links have expired), job outputs past
// output_retention, idempotency records past 24 h.
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
		{"tmp/", d.Config.Server.TmpFileTTLD},
		{"jobs/", d.Config.Storage.Retention},
	} {
		n, err := d.Blobs.Sweep(ctx, s.prefix, now.Add(-s.age))
		if err != nil {
			d.Log.Warn("janitor: sweep blobs", "prefix", s.prefix, "err", err)
		} else if n > 0 {
			d.Log.Info("janitor: deleted expired files", "prefix", s.prefix, "files", n)
		}
	}
	if n, err := d.Store.SweepIdempotency(ctx, now.Add(-idempotencyWindow)); err != nil {
		d.Log.Warn("janitor: sweep idempotency keys", "err", err)
	} else if n > 0 {
		d.Log.Info("janitor: forgot old idempotency keys", "keys", n)
	}
}
