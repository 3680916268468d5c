package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The leases of warm runners (docs/warm.md): a waiting runner's idle key and a
// handed-out run live under one etcd lease, which the gateway keeps alive while
// the runner polls, then renews each time the runner does.

// GrantWarmLease grants a lease of ttl (whole seconds, at least one).
func (s *Store) GrantWarmLease(ctx context.Context, ttl time.Duration) (int64, error) {
	g, err := s.cli.Grant(ctx, int64(max(ttl/time.Second, 1)))
	if err != nil {
		return 0, fmt.Errorf("grant warm lease: %w", err)
	}
	return int64(g.ID), nil
}

// KeepWarmLease keeps lease alive until ctx ends.
func (s *Store) KeepWarmLease(ctx context.Context, lease int64) error {
	alive, err := s.cli.KeepAlive(ctx, clientv3.LeaseID(lease))
	if err != nil {
		return fmt.Errorf("keep warm lease: %w", err)
	}
	go func() {
		for range alive { // drained until ctx ends
		}
	}()
	return nil
}

// RenewWarmLease renews lease once and returns its TTL; ErrWarmGone when the
// lease has lapsed or was revoked.
func (s *Store) RenewWarmLease(ctx context.Context, lease int64) (time.Duration, error) {
	ka, err := s.cli.KeepAliveOnce(ctx, clientv3.LeaseID(lease))
	if errors.Is(err, rpctypes.ErrLeaseNotFound) {
		return 0, ErrWarmGone
	}
	if err != nil {
		return 0, err
	}
	return time.Duration(ka.TTL) * time.Second, nil
}

// RevokeWarmLease ends lease and every key under it, at once rather than a TTL
// later (best effort: a failure leaves it to lapse).
func (s *Store) RevokeWarmLease(ctx context.Context, lease int64) {
	s.cli.Revoke(ctx, clientv3.LeaseID(lease))
}

// WaitWarmRun waits, from revision rev on, for a run to be handed to the
// runner of allocation alloc in pool; nil when ctx ends first.
func (s *Store) WaitWarmRun(ctx context.Context, pool, alloc string, rev int64) *WarmRun {
	for resp := range s.cli.Watch(clientv3.WithRequireLeader(ctx), s.WarmRunKey(pool, alloc), clientv3.WithRev(rev+1)) {
		for _, ev := range resp.Events {
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			var r WarmRun
			if json.Unmarshal(ev.Kv.Value, &r) == nil {
				return &r
			}
		}
	}
	return nil
}

// WarmChange is one change of the warm keys, as FollowWarm reports it; one of
// its fields is set.
type WarmChange struct {
	Waiting bool     // a runner put its idle key: it waits for work
	Started *WarmRun // a run's runner has its job (its first renewal)
	Done    *WarmDone
	// Lapsed is a run whose key went without a done key in the same batch of
	// changes (its lease lapsed or was revoked).
	Lapsed *WarmRun
}

// FollowWarm calls fn with each batch of changes to the warm keys after
// revision rev, until ctx ends or resync passes (the caller then sweeps and
// follows again).
func (s *Store) FollowWarm(ctx context.Context, rev int64, resync time.Duration, fn func([]WarmChange)) {
	wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), resync)
	defer cancel()
	runs, dones := s.WarmRunPrefix(), s.WarmDonePrefix()
	for resp := range s.cli.Watch(wctx, s.WarmPrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithPrevKV()) {
		done := map[string]bool{}
		for _, ev := range resp.Events {
			if run, ok := strings.CutPrefix(string(ev.Kv.Key), dones); ok && ev.Type == clientv3.EventTypePut && run != "" {
				done[run] = true
			}
		}
		var batch []WarmChange
		for _, ev := range resp.Events {
			key := string(ev.Kv.Key)
			isRun, isDone := strings.HasPrefix(key, runs), strings.HasPrefix(key, dones)
			switch {
			case ev.Type == clientv3.EventTypePut && !isDone && !isRun:
				batch = append(batch, WarmChange{Waiting: true})
			case ev.Type == clientv3.EventTypePut && isRun:
				var r, prev WarmRun
				if json.Unmarshal(ev.Kv.Value, &r) == nil && r.Started && (ev.PrevKv == nil || json.Unmarshal(ev.PrevKv.Value, &prev) != nil || !prev.Started) {
					batch = append(batch, WarmChange{Started: &r})
				}
			case ev.Type == clientv3.EventTypePut && isDone:
				var wd WarmDone // the event holds it: no read
				if json.Unmarshal(ev.Kv.Value, &wd) == nil && wd.Run != "" {
					batch = append(batch, WarmChange{Done: &wd})
				}
			case ev.Type == clientv3.EventTypeDelete && isRun && ev.PrevKv != nil:
				var r WarmRun
				if json.Unmarshal(ev.PrevKv.Value, &r) == nil && !done[r.Run] {
					batch = append(batch, WarmChange{Lapsed: &r})
				}
			}
		}
		if len(batch) > 0 {
			fn(batch)
		}
	}
}
