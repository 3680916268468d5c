package store

import (
	"testing"
	"time"

	"go.etcd.io/etcd/server/v3/embed"
)

// TestEmbedConfig: the embedded server compacts periodically and has a quota, by
// default and as configured (etcd's own defaults: no compaction, a 2 GiB quota).
func TestEmbedConfig(t *testing.T) {
	cases := []struct {
		opts          EmbeddedOptions
		wantRetention string
		wantQuota     int64
	}{
		{EmbeddedOptions{}, "10m0s", 8 << 30},
		{EmbeddedOptions{CompactionRetention: time.Hour, QuotaBackendBytes: 1 << 30}, "1h0m0s", 1 << 30},
		{EmbeddedOptions{CompactionRetention: time.Second}, "1s", 8 << 30},
	}
	for _, c := range cases {
		cfg := embedConfig(t.TempDir(), "127.0.0.1:0", "127.0.0.1:0", c.opts)
		if cfg.AutoCompactionMode != embed.CompactorModePeriodic || cfg.AutoCompactionRetention != c.wantRetention || cfg.QuotaBackendBytes != c.wantQuota {
			t.Errorf("%+v: mode %q retention %q quota %d; want periodic %q %d", c.opts,
				cfg.AutoCompactionMode, cfg.AutoCompactionRetention, cfg.QuotaBackendBytes, c.wantRetention, c.wantQuota)
		}
		if err := cfg.Validate(); err != nil {
			t.Errorf("%+v: etcd refuses the config: %v", c.opts, err)
		}
	}
}
