package config

import (
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
)

func (e *Etcd) defaults() {
	if !e.Embedded && len(e.Endpoints) == 0 {
		e.Endpoints = []string{"http://127.0.0.1:2379"}
	}
	if !strings.HasSuffix(e.Prefix, "/") {
		e.Prefix += "/"
	}
}

// check reports what is wrong with the etcd block and parses its durations.
func (e *Etcd) check(ck *checker) {
	e.DialTimeoutD = ck.dur(e.DialTimeout, e.DialTimeoutRange, "dial_timeout")
	if e.Embedded {
		for _, l := range []struct {
			addr, name string
			rng        hcl.Range
		}{{e.ListenClient, "listen_client", e.ClientRange}, {e.ListenPeer, "listen_peer", e.PeerRange}} {
			if msg := listenProblem(l.addr, l.rng.Filename != ""); msg != "" {
				ck.bad(l.rng, "Invalid "+l.name, l.name+" = "+msg)
			}
		}
	} else {
		for _, ep := range e.Endpoints {
			if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
				ck.bad(e.EndpointsRange, "Invalid endpoints", fmt.Sprintf("endpoints: %q is not an etcd client URL such as \"http://etcd-1.internal:2379\" (https:// with TLS).", ep))
			}
		}
	}
	// Each duration's bounds follow it, so its problems are reported together.
	e.CompactionRetentionD = ck.dur(e.CompactionRetention, e.CompactionRange, "compaction_retention")
	if e.CompactionRetentionD > 0 && e.CompactionRetentionD < time.Minute {
		ck.bad(e.CompactionRange, "Invalid compaction_retention", fmt.Sprintf("compaction_retention = %q is too short: watchers resume from revisions read moments earlier and would have to start over; use at least \"1m\" (default \"10m\").", e.CompactionRetention))
	}
	if e.QuotaBackendBytes < MinQuotaBackendBytes || e.QuotaBackendBytes > MaxQuotaBackendBytes {
		ck.bad(e.QuotaRange, "Invalid quota_backend_bytes", fmt.Sprintf("quota_backend_bytes = %d must be between %d (64 MiB: less trips etcd's NOSPACE alarm in ordinary bursts) and %d (100 GiB: etcd recommends at most 8 GiB; beyond this snapshots, recovery and defragmentation take too long). Default 8589934592 (8 GiB).", e.QuotaBackendBytes, int64(MinQuotaBackendBytes), int64(MaxQuotaBackendBytes)))
	}
	e.DefragEveryD = ck.dur(e.DefragEvery, e.DefragEveryRange, "defrag_every")
	if e.DefragEveryD > 0 && e.DefragEveryD < time.Minute {
		ck.bad(e.DefragEveryRange, "Invalid defrag_every", fmt.Sprintf("defrag_every = %q is too short: a defragmentation stalls its member; check at most every minute (default \"10m\").", e.DefragEvery))
	}
	if !(e.DefragFreeRatio > 0 && e.DefragFreeRatio < 1) {
		ck.bad(e.DefragRatioRange, "Invalid defrag_free_ratio", fmt.Sprintf("defrag_free_ratio = %g must be above 0 and below 1: the share of a member's database that must be free space before it is defragmented (default 0.5).", e.DefragFreeRatio))
	}
	if e.DefragMinBytes < 0 || e.DefragMinBytes >= e.QuotaBackendBytes {
		ck.bad(e.DefragMinRange, "Invalid defrag_min_bytes", fmt.Sprintf("defrag_min_bytes = %d must be at least 0 and below quota_backend_bytes (%d), or no member is ever defragmented before etcd refuses writes (default 67108864, 64 MiB).", e.DefragMinBytes, e.QuotaBackendBytes))
	}
}
