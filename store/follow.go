package store

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
)

// Family is a derived key family others follow (docs/architecture.md has the
// map of every family).
type Family int

const (
	Queue  Family = iota // queue/<pool>/<account>/<queued_at>_<id>: jobs waiting
	Active               // active/<pool>/<account>/<id> = Nomad child: jobs dispatched
	Outbox               // outbox/<id>: webhooks to deliver
	Awaits               // awaits/<dep>/<id>: jobs waiting for another's output
)

func (s *Store) prefixOf(f Family) string {
	switch f {
	case Queue:
		return s.QueuePrefix()
	case Active:
		return s.ActivePrefix()
	case Outbox:
		return s.OutboxPrefix()
	case Awaits:
		return s.AwaitsPrefix()
	}
	panic(fmt.Sprintf("store: no family %d", f))
}

// Deleted is a followed key's removal: Prev is the value it had (an active
// key's Nomad child), nil when etcd no longer had it.
type Deleted struct{ Prev []byte }

// Follow calls fn with the id of every key of family f, first all of them
// (del nil), then each change as etcd reports it (del set for a removal), until
// ctx ends. It lists again every resync, so nothing a lost watch missed stays
// missed. Calls are in order, one at a time.
func (s *Store) Follow(ctx context.Context, f Family, resync time.Duration, log *slog.Logger, fn func(ctx context.Context, id string, del *Deleted)) {
	prefix := s.prefixOf(f)
	for ctx.Err() == nil {
		ids, rev, err := s.JobIDs(ctx, prefix, 0)
		if err != nil {
			log.Warn("list failed; retrying", "prefix", prefix, "err", err)
			sleep(ctx, time.Second)
			continue
		}
		for _, id := range ids {
			fn(ctx, id, nil)
		}
		wctx, cancel := context.WithTimeout(clientv3.WithRequireLeader(ctx), resync)
		for resp := range s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(rev+1), clientv3.WithPrevKV()) {
			for _, ev := range resp.Events {
				id := IDFromKey(string(ev.Kv.Key))
				if ev.Type != clientv3.EventTypeDelete {
					fn(ctx, id, nil)
					continue
				}
				del := &Deleted{}
				if ev.PrevKv != nil {
					del.Prev = ev.PrevKv.Value
				}
				fn(ctx, id, del)
			}
		}
		cancel()
	}
}

// Notify calls poke whenever a key of one of the families changes, until ctx
// ends (a wake-up, not a report: several changes may make one call).
func (s *Store) Notify(ctx context.Context, poke func(), fams ...Family) {
	for _, f := range fams {
		prefix := s.prefixOf(f)
		go func() {
			for ctx.Err() == nil {
				for range s.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix()) {
					poke()
				}
				sleep(ctx, time.Second)
			}
		}()
	}
}

// QueuedOutsidePools returns up to limit queue keys of jobs whose pool is none
// of pools. It reads only the gaps of the queue between those pools' parts, so
// a healthy queue costs a few empty range reads.
func (s *Store) QueuedOutsidePools(ctx context.Context, pools []string, limit int) ([]string, error) {
	queue := s.QueuePrefix()
	known := make([]string, 0, len(pools))
	for _, p := range pools {
		known = append(known, s.PoolQueuePrefix(p))
	}
	sort.Strings(known)
	from := queue
	var keys []string
	for i := 0; i <= len(known) && len(keys) < limit; i++ {
		to := clientv3.GetPrefixRangeEnd(queue)
		if i < len(known) {
			to = known[i]
		}
		if from < to {
			resp, err := s.cli.Get(ctx, from, clientv3.WithRange(to), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(limit-len(keys))))
			if err != nil {
				return nil, err
			}
			for _, kv := range resp.Kvs {
				keys = append(keys, string(kv.Key))
			}
		}
		if i < len(known) {
			from = max(from, clientv3.GetPrefixRangeEnd(known[i]))
		}
	}
	return keys, nil
}

// Healthy checks that etcd answers a cheap read, with a leader.
func (s *Store) Healthy(ctx context.Context) error {
	_, err := s.cli.Get(clientv3.WithRequireLeader(ctx), s.ElectionPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly())
	return err
}

// ActiveChildren maps each dispatched job's id to its Nomad child (or warm run).
func (s *Store) ActiveChildren(ctx context.Context) (map[string]string, error) {
	resp, err := s.cli.Get(ctx, s.ActivePrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[string]string, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		out[IDFromKey(string(kv.Key))] = string(kv.Value)
	}
	return out, nil
}

// RunQueueIndex starts a queue index (queueindex.go) kept for as long as the
// store's etcd client: changed is called when the queue changes, failed when
// the index reads the queue again after an error.
func (s *Store) RunQueueIndex(changed func(), failed func(error)) *QueueIndex {
	q := s.NewQueueIndex()
	go q.Run(s.cli.Ctx(), changed, failed)
	return q
}

// Maintain runs one maintenance pass over the store's etcd cluster (Maintain).
func (s *Store) Maintain(ctx context.Context, o MaintainOptions) *MaintainReport {
	return Maintain(ctx, s.cli, o)
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
