package dispatcher

import (
	"context"
	"time"

	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
)

// maintainLoop keeps etcd small while this dispatcher leads: at start and
// every etcd.defrag_every it runs maintainEtcd. When leadership ends it drops the
// etcd gauges, so only the leader reports them.
func (j *janitor) maintainLoop(ctx context.Context) {
	every := j.cfg.Etcd.DefragEveryD
	if every <= 0 {
		every = 10 * time.Minute
	}
	reported := map[string]bool{}
	defer func() {
		for ep := range reported {
			metrics.EtcdDBSize.DeleteLabelValues(ep)
			metrics.EtcdDBSizeInUse.DeleteLabelValues(ep)
		}
		metrics.EtcdAlarm.Reset()
		metrics.EtcdQuota.Reset()
	}()
	for {
		for _, m := range j.maintainEtcd(ctx).Members {
			reported[m.Endpoint] = true
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(every):
		}
	}
}

// maintainEtcd runs one etcd maintenance pass (see store.Maintain) with the
// etcd.defrag_* and quota settings, and records what it saw in the etcd metrics.
func (j *janitor) maintainEtcd(ctx context.Context) *store.MaintainReport {
	e := j.cfg.Etcd
	policy := store.DefragPolicy{FreeRatio: e.DefragFreeRatio, MinBytes: e.DefragMinBytes}
	if policy.FreeRatio <= 0 { // a Config that was never finished
		policy = store.DefaultDefragPolicy
	}
	quota := e.QuotaBackendBytes
	if quota <= 0 {
		quota = store.DefaultQuotaBackendBytes
	}
	metrics.EtcdQuota.WithLabelValues().Set(float64(quota))
	r := j.etcd.Maintain(ctx, store.MaintainOptions{Policy: policy, Quota: quota, Log: j.log})
	for _, m := range r.Members {
		if m.StatusErr != nil {
			metrics.EtcdDBSize.DeleteLabelValues(m.Endpoint)
			metrics.EtcdDBSizeInUse.DeleteLabelValues(m.Endpoint)
			continue
		}
		metrics.EtcdDBSize.WithLabelValues(m.Endpoint).Set(float64(m.Size))
		metrics.EtcdDBSizeInUse.WithLabelValues(m.Endpoint).Set(float64(m.InUse))
		if m.Defrag != "" {
			metrics.EtcdDefrags.WithLabelValues(m.Endpoint, m.Defrag).Inc()
		}
	}
	if r.AlarmErr == nil {
		for name, active := range r.AlarmsActive() {
			v := 0.0
			if active {
				v = 1
			}
			metrics.EtcdAlarm.WithLabelValues(name).Set(v)
		}
	}
	return r
}
