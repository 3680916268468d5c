package store

import (
	"context"
	"errors"
	"sort"
	"strings"
	"sync"
	"time"

	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/metadata"
)

// QueueIndex counts each pool's queued jobs per account, kept from one read of
// the queue's keys and the queue's watch after it, so that a dispatch pass and
// the queue gauges know which accounts have queued work, and how much, without
// reading the queue (docs/scheduling.md): a pass then reads the first few keys
// of each such account (QueueHeads). It follows every writer, older versions
// included, since it counts the keys themselves; keys of versions before fair
// share (queue/<pool>/<queued_at>_<id>, no account) are kept as they are, for
// MigrateQueueKeys. Safe for concurrent use.
type QueueIndex struct {
	s *Store

	mu     sync.Mutex
	loaded chan struct{} // closed once the first read is in
	pools  map[string]*poolCounts
	// seen is the etcd revision up to which the index counts every change;
	// moved is closed, and replaced, whenever it grows.
	seen  int64
	moved chan struct{}
	wctx  context.Context // the watch's, for progress requests (nil: no watch)
}

type poolCounts struct {
	accounts map[string]int
	legacy   map[string]struct{}
}

// NewQueueIndex returns an index that counts nothing until Run reads the queue.
func (s *Store) NewQueueIndex() *QueueIndex {
	return &QueueIndex{s: s, loaded: make(chan struct{}), moved: make(chan struct{})}
}

// queueLoadPage is how many keys one read of the index's load takes.
const queueLoadPage = 10000

// Run keeps the index until ctx ends: it reads the queue's keys once, then
// follows its watch, and reads them again whenever the watch fails (etcd lost
// its leader, the revision was compacted). changed is called after each read;
// failed is told each read or watch that failed.
func (q *QueueIndex) Run(ctx context.Context, changed func(), failed func(error)) {
	wait := time.Second
	for ctx.Err() == nil {
		rev, pools, err := q.load(ctx)
		if err != nil {
			failed(err)
			select {
			case <-ctx.Done():
			case <-time.After(wait):
			}
			wait = min(2*wait, 30*time.Second) // etcd is failing: no log line a second
			continue
		}
		wait = time.Second
		// Its own gRPC stream (the metadata tells streams apart), so progress
		// requests notify this watch only, not the dispatcher's other watches.
		wctx, cancel := context.WithCancel(metadata.AppendToOutgoingContext(clientv3.WithRequireLeader(ctx), "mediajobs-watch", "queue-index"))
		q.mu.Lock()
		q.pools, q.wctx = pools, wctx
		q.seenLocked(rev)
		select {
		case <-q.loaded:
		default:
			close(q.loaded)
		}
		q.mu.Unlock()
		changed()
		// From the read's own revision, not the next: etcd answers progress
		// requests only once its revision has reached the watch's start.
		// Events of that revision, counted by the read, are skipped (apply).
		for resp := range q.s.cli.Watch(wctx, q.s.QueuePrefix(), clientv3.WithPrefix(), clientv3.WithRev(rev)) {
			if err := resp.Err(); err != nil {
				failed(err)
				break
			}
			// A progress notification comes after every event up to its
			// revision; a response's events, up to the last one's.
			at := resp.Header.Revision
			if !resp.IsProgressNotify() {
				at = q.apply(resp.Events, rev) // the dispatcher's own watch wakes it, and a pass syncs first
			}
			q.mu.Lock()
			q.seenLocked(at)
			q.mu.Unlock()

		}
		cancel()
		q.mu.Lock()
		q.wctx = nil
		q.mu.Unlock()
	}
}

func (q *QueueIndex) load(ctx context.Context) (int64, map[string]*poolCounts, error) {
	prefix := q.s.QueuePrefix()
	end := clientv3.GetPrefixRangeEnd(prefix)
	pools := map[string]*poolCounts{}
	var rev int64
	for from := prefix; ; {
		opts := []clientv3.OpOption{clientv3.WithRange(end), clientv3.WithKeysOnly(), clientv3.WithLimit(queueLoadPage)}
		if rev > 0 {
			opts = append(opts, clientv3.WithRev(rev)) // every page from the same revision
		}
		resp, err := q.s.cli.Get(ctx, from, opts...)
		if err != nil {
			return 0, nil, err
		}
		if rev == 0 {
			rev = resp.Header.Revision
		}
		for _, kv := range resp.Kvs {
			q.count(pools, string(kv.Key), 1)
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return rev, pools, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// apply counts the watch's events after revision read, and returns the last
// one's revision. A put of a key that was there already changes no count.
func (q *QueueIndex) apply(events []*clientv3.Event, read int64) (last int64) {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, ev := range events {
		last = max(last, ev.Kv.ModRevision)
		switch {
		case ev.Kv.ModRevision <= read:
		case ev.Type == mvccpb.PUT && ev.IsCreate():
			q.count(q.pools, string(ev.Kv.Key), 1)
		case ev.Type == mvccpb.DELETE:
			q.count(q.pools, string(ev.Kv.Key), -1)
		}
	}
	return last
}

func (q *QueueIndex) seenLocked(rev int64) {
	if rev > q.seen {
		q.seen = rev
		close(q.moved)
		q.moved = make(chan struct{})
	}
}

// count adds d to the count of key's account in its pool.
func (q *QueueIndex) count(pools map[string]*poolCounts, key string, d int) {
	pool, rest, ok := strings.Cut(strings.TrimPrefix(key, q.s.QueuePrefix()), "/")
	if !ok {
		return
	}
	pc := pools[pool]
	if pc == nil {
		pc = &poolCounts{accounts: map[string]int{}, legacy: map[string]struct{}{}}
		pools[pool] = pc
	}
	slash := strings.LastIndexByte(rest, '/')
	switch {
	case slash < 0 && d > 0:
		pc.legacy[key] = struct{}{}
	case slash < 0:
		delete(pc.legacy, key)
	default:
		account := rest[:slash]
		if n := pc.accounts[account] + d; n > 0 {
			pc.accounts[account] = n
		} else {
			delete(pc.accounts, account)
		}
	}
}

// queueSyncWait bounds Sync's wait for the index's first read, and then for
// it to catch up.
const queueSyncWait = 2 * time.Second

// ErrQueueIndexLoading: the index's first read of the queue is not in yet (a
// long queue, or etcd failing); Run's changed tells when it is.
var ErrQueueIndexLoading = errors.New("the queue index is still reading the queue")

// Sync waits for the index's first read (ErrQueueIndexLoading after
// queueSyncWait), then until it counts every change made before the call: it
// reads etcd's revision and waits for the watch to reach it (asking etcd for a
// progress notification, which tells when a watch has seen everything up to a
// revision, if no change of the queue does). It waits queueSyncWait at most:
// then, or while its watch is being set up again, the index answers as it
// stands.
func (q *QueueIndex) Sync(ctx context.Context) error {
	loading := time.NewTimer(queueSyncWait)
	defer loading.Stop()
	select {
	case <-q.loaded:
	case <-loading.C:
		return ErrQueueIndexLoading
	case <-ctx.Done():
		return ctx.Err()
	}
	now, err := q.s.cli.Get(ctx, q.s.QueuePrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil // etcd cannot say: as it stands
	}
	deadline := time.NewTimer(queueSyncWait)
	defer deadline.Stop()
	for {
		q.mu.Lock()
		seen, moved, wctx := q.seen, q.moved, q.wctx
		q.mu.Unlock()
		if seen >= now.Header.Revision || wctx == nil {
			return nil
		}
		// Asked again until answered: etcd drops the request while the
		// watch catches up.
		if q.s.cli.RequestProgress(wctx) != nil {
			return nil
		}
		select {
		case <-moved:
		case <-time.After(50 * time.Millisecond):
		case <-deadline.C:
			return nil
		case <-ctx.Done():
			return nil
		}
	}
}

// Pool returns how many jobs each account has queued in pool, and the keys of
// versions before fair share (sorted), as the index counts them now.
func (q *QueueIndex) Pool(pool string) (accounts map[string]int, legacy []string) {
	q.mu.Lock()
	defer q.mu.Unlock()
	pc := q.pools[pool]
	if pc == nil {
		return map[string]int{}, nil
	}
	accounts = make(map[string]int, len(pc.accounts))
	for a, n := range pc.accounts {
		accounts[a] = n
	}
	for k := range pc.legacy {
		legacy = append(legacy, k)
	}
	sort.Strings(legacy)
	return accounts, legacy
}
