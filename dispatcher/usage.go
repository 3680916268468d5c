package dispatcher

import (
	"context"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
)

// metered fills in the usage of an attempt's result before it is applied
// (docs/usage.md): the figures a worker reported, within bounds, the input bytes
// it fetched, the output bytes it stored, and GPU time, the processes' wall time times the GPUs one job of
// the pool gets. Applying the result stores it on the job and adds it to the
// account's day in the same etcd transaction (store/usage.go); a runner that
// reported no usage counts with its bytes only.
func (s *settler) metered(r *mj.Result, j *mj.Job) *mj.Result {
	if r == nil {
		return nil
	}
	if c := s.cfg.Usage; c != nil && c.PerAccountMetrics {
		metrics.EnableAccountUsage() // once; the series with an account label
	}
	var u mj.Usage
	if r.Usage != nil {
		u = *r.Usage
	}
	u.InputBytes, u.GPUSeconds = r.InputBytes, 0
	if p := s.cfg.Pool(j.Machine); p != nil && p.GPUs() > 0 {
		u.GPUSeconds = mj.Seconds(u.WallSeconds) * float64(p.GPUs())
	}
	u.OutputBytes = 0 // what is published: none unless it succeeded
	if r.Succeeded {
		for _, o := range r.Outputs {
			u.OutputBytes += max(o.Size, 0)
		}
	}
	u = u.Bounded()
	c := *r
	c.Usage = &u
	return &c
}

// failedUsage is the usage of a result turned into a failure: its outputs are
// not published.
func failedUsage(u *mj.Usage) *mj.Usage {
	if u == nil {
		return nil
	}
	c := *u
	c.OutputBytes = 0
	return &c
}

// sweepUsage deletes the usage counters of days past usage.retention_days.
func (j *janitor) sweepUsage(ctx context.Context, now time.Time) {
	c := j.cfg.Usage
	if c == nil || c.RetentionDays <= 0 {
		return
	}
	days := c.RetentionDays
	sw := j.st()
	cutoff := now.UTC().AddDate(0, 0, -days).Format(store.DayLayout)
	if n, err := sw.SweepUsage(ctx, cutoff); err != nil {
		j.log.Warn("janitor: delete old usage", "err", err)
	} else if n > 0 {
		j.log.Info("janitor: deleted usage counters past usage.retention_days", "counters", n, "before", cutoff)
	}
}
