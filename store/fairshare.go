package store

import (
	"context"
	"encoding/json"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"time"

	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// What fair-share dispatch reads (docs/scheduling.md): each pool's queue in one
// part per account, queue/<pool>/<account>/<queued_at>_<id>, the active set the
// same way, and the accounts' scheduling settings under sched/<account>.

// QueueEntry is one queued job as its queue key names it.
type QueueEntry struct {
	Account  string
	ID       string
	QueuedAt time.Time
}

// PoolQueue reads a pool's whole queue, keys only, in one ranged read: the
// entries in key order (by account, then first in, first out), and the keys an
// older version wrote without an account (see MigrateQueueKeys). Dispatch
// passes do not: they read QueueHeads of the accounts a QueueIndex counts.
func (s *Store) PoolQueue(ctx context.Context, pool string) (entries []QueueEntry, legacy []string, err error) {
	prefix := s.PoolQueuePrefix(pool)
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, nil, fmt.Errorf("read the queue of pool %s: %w", pool, err)
	}
	entries = make([]QueueEntry, 0, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		rest := string(kv.Key[len(prefix):])
		slash := strings.LastIndexByte(rest, '/')
		if slash < 0 {
			legacy = append(legacy, string(kv.Key))
			continue
		}
		e := QueueEntry{Account: rest[:slash], ID: IDFromKey(rest)}
		e.QueuedAt, _ = QueuedAtFromKey(rest)
		entries = append(entries, e)
	}
	return entries, legacy, nil
}

// PoolInFlight counts a pool's jobs in flight, per account, from one read of its
// active set; total counts those with a Nomad child (a warm runner's jobs are
// not Nomad's: docs/warm.md), the keys of older versions included, which name no
// account.
func (s *Store) PoolInFlight(ctx context.Context, pool string) (byAccount map[string]int, total int, err error) {
	prefix := s.PoolActivePrefix(pool)
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, 0, fmt.Errorf("read the active set of pool %s: %w", pool, err)
	}
	byAccount = map[string]int{}
	for _, kv := range resp.Kvs {
		rest := string(kv.Key[len(prefix):])
		if slash := strings.LastIndexByte(rest, '/'); slash >= 0 {
			byAccount[rest[:slash]]++
		}
		if !strings.HasPrefix(string(kv.Value), mj.WarmChildPrefix) {
			total++
		}
	}
	return byAccount, total, nil
}

// MigrateQueueKeys moves queue keys written by a version before fair-share
// dispatch (queue/<pool>/<queued_at>_<id>) to their account's part of the queue,
// each in a transaction conditioned on the job being unchanged since it was read,
// so a job dispatched or cancelled meanwhile keeps the state its own write gave
// it. A key whose job is gone or no longer queued is deleted. It returns how many
// keys it moved or deleted; a key whose job cannot be read (an undecodable
// record) stays, and the first such is the error, after the others moved.
func (s *Store) MigrateQueueKeys(ctx context.Context, keys []string) (int, error) {
	ids := make([]string, len(keys))
	for i, k := range keys {
		ids[i] = IDFromKey(k)
	}
	jobs, errs := s.Jobs(ctx, ids)
	n := 0
	var failed error // the first key that could not move; the others still do
	for i, key := range keys {
		var cmps []clientv3.Cmp
		ops := []clientv3.Op{clientv3.OpDelete(key)}
		switch j := jobs[i]; {
		case errs[i] != nil && mj.ErrorCode(errs[i]) == mj.ENotFound:
			cmps = append(cmps, clientv3.Compare(clientv3.CreateRevision(s.jobKey(ids[i])), "=", 0))
		case errs[i] != nil: // an undecodable record: left where it is
			if failed == nil {
				failed = fmt.Errorf("move queue key %s: %w", key, errs[i])
			}
			continue
		default:
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.jobKey(j.ID)), "=", j.Revision))
			if !j.Status.Terminal() && j.NomadJobID == "" && s.legacyQueueKey(j) == key {
				ops = append(ops, clientv3.OpPut(s.queueKey(j), j.ID))
			}
		}
		resp, err := s.commit(ctx, cmps, ops, nil)
		if err != nil {
			return n, fmt.Errorf("move queue key %s: %w", key, err)
		}
		if resp.Succeeded {
			n++
		}
	}
	return n, failed
}

// Schedule is an account's scheduling settings, stored under sched/<account>;
// an account without one has the defaults.
type Schedule struct {
	// Weight is the account's share of each pool relative to the others' (default 1).
	Weight int `json:"weight,omitempty"`
	// MaxRunningPerPool, when set, replaces limits.max_running_per_account for this
	// account: how many of its jobs may hold a pool's slots at once (0: no limit).
	MaxRunningPerPool *int `json:"max_running_per_pool,omitempty"`
	// LimitOverrides, when set, replace the configured limits of amounts held
	// for this account (docs/limits.md).
	LimitOverrides
}

func (s *Store) schedKey(account string) string { return s.p + "sched/" + account }

// AccountSchedules reads every account's scheduling settings in one ranged read
// (only accounts set apart from the defaults have a key).
func (s *Store) AccountSchedules(ctx context.Context) (map[string]Schedule, error) {
	prefix := s.p + "sched/"
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix())
	if err != nil {
		return nil, fmt.Errorf("read account schedules: %w", err)
	}
	out := make(map[string]Schedule, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		var sc Schedule
		if json.Unmarshal(kv.Value, &sc) == nil {
			out[strings.TrimPrefix(string(kv.Key), prefix)] = sc
		}
	}
	return out, nil
}

// SetAccountSchedule stores an account's scheduling settings; the zero Schedule
// deletes them (the defaults apply).
func (s *Store) SetAccountSchedule(ctx context.Context, account string, sc Schedule) error {
	if sc.Weight < 0 || sc.MaxRunningPerPool != nil && *sc.MaxRunningPerPool < 0 {
		return mj.Errorf(mj.EValidation, "weight and max_running_per_pool must not be negative")
	}
	if err := sc.LimitOverrides.check(); err != nil {
		return err
	}
	op := clientv3.OpDelete(s.schedKey(account))
	if sc != (Schedule{}) {
		b, _ := json.Marshal(sc)
		op = clientv3.OpPut(s.schedKey(account), string(b))
	}
	_, err := s.batch(ctx, []clientv3.Op{op})
	return err
}

// StandingAheadMax is how many jobs ahead of a queued job QueueStanding counts
// at most: a read of a job costs the same however long its account's queue.
const StandingAheadMax = 100

// Standing is where a queued job stands, read when a client asks.
type Standing struct {
	// Ahead is how many of the account's jobs in the same pool were queued
	// before it, up to StandingAheadMax; more than that reads StandingAheadMax+1.
	Ahead int
	// InFlight is how many of the account's jobs hold the pool's slots (a Nomad child).
	InFlight int
	// Schedule is the account's settings, nil for the defaults.
	Schedule *Schedule
}

// QueueStanding reads, in one transaction, where a queued job without a Nomad
// child stands in its account's part of its pool's queue (QueueHead, then
// Standing). Nothing is written: the job's record keeps what it had
// (docs/scheduling.md).
func (s *Store) QueueStanding(ctx context.Context, j *mj.Job) (Standing, error) {
	h, err := s.QueueHead(ctx, j.Machine, j.AccountID)
	if err != nil {
		return Standing{}, err
	}
	return h.Standing(j), nil
}

// QueueHead is the head of one account's part of one pool's queue as one read
// saw it: enough to tell each of the account's queued jobs in the pool where
// it stands, so a reader may keep it until a job of the account in the pool
// changes (the gateway does, while its job watch runs).
type QueueHead struct {
	// keys are the first StandingAheadMax+1 queue keys, ascending, without
	// the account's prefix: "<queued_at>_<id>".
	keys []string
	// inFlight is how many of the account's jobs hold the pool's slots.
	inFlight int
	schedule *Schedule
}

// QueueHead reads, in one transaction, the first StandingAheadMax+1 keys of
// an account's part of a pool's queue (a ranged read with a limit, which etcd
// answers from its index without going over the rest), the count of the
// account's jobs in flight there (bounded by its running jobs) and its
// scheduling settings.
func (s *Store) QueueHead(ctx context.Context, pool, account string) (*QueueHead, error) {
	qp, ap := s.AccountQueuePrefix(pool, account), s.AccountActivePrefix(pool, account)
	resp, err := s.cli.Txn(ctx).Then(
		clientv3.OpGet(qp, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(StandingAheadMax+1)),
		clientv3.OpGet(ap, clientv3.WithPrefix(), clientv3.WithCountOnly()),
		clientv3.OpGet(s.schedKey(account)),
	).Commit()
	if err != nil {
		return nil, fmt.Errorf("read queue standing: %w", err)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	h := &QueueHead{keys: make([]string, len(kvs)), inFlight: int(resp.Responses[1].GetResponseRange().Count)}
	for i, kv := range kvs {
		h.keys[i] = string(kv.Key[len(qp):])
	}
	if kvs := resp.Responses[2].GetResponseRange().Kvs; len(kvs) > 0 {
		var sc Schedule
		if json.Unmarshal(kvs[0].Value, &sc) == nil {
			h.schedule = &sc
		}
	}
	return h, nil
}

// Standing is where j, a queued job of the head's account and pool, stands:
// the keys before its own, at most StandingAheadMax+1 of them.
func (h *QueueHead) Standing(j *mj.Job) Standing {
	var buf [96]byte
	k := appendQueueSuffix(buf[:0], j)
	// sort.SearchStrings without making k a string (a comparison converts it
	// without a copy).
	lo, hi := 0, len(h.keys)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if h.keys[m] < string(k) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return Standing{Ahead: lo, InFlight: h.inFlight, Schedule: h.schedule}
}

// appendQueueSuffix appends j's queue key after its account's prefix:
// "<queued_at>_<id>", queued_at in 19 digits (queueKey).
func appendQueueSuffix(b []byte, j *mj.Job) []byte {
	n := j.QueuedAt.UnixNano()
	if n < 0 {
		return fmt.Appendf(b, "%019d_%s", n, j.ID)
	}
	var d [20]byte
	digits := strconv.AppendInt(d[:0], n, 10)
	for range 19 - len(digits) {
		b = append(b, '0')
	}
	b = append(b, digits...)
	b = append(b, '_')
	return append(b, j.ID...)
}

// queueHeadsOps is how many ranged reads one transaction of QueueHeads holds
// (etcd allows 128 operations in a transaction by default).
const queueHeadsOps = 64

// QueueHeads reads the first want[account] keys of each account's part of a
// pool's queue (keys only, first in first out), in read-only transactions of
// ranged reads with a limit: what a pass reads is bounded by what it asks, not
// by how many jobs wait.
func (s *Store) QueueHeads(ctx context.Context, pool string, want map[string]int) (map[string][]QueueEntry, error) {
	accounts := make([]string, 0, len(want))
	for a, k := range want {
		if k > 0 {
			accounts = append(accounts, a)
		}
	}
	sort.Strings(accounts)
	out := make(map[string][]QueueEntry, len(accounts))
	for len(accounts) > 0 {
		chunk := accounts[:min(queueHeadsOps, len(accounts))]
		accounts = accounts[len(chunk):]
		ops := make([]clientv3.Op, len(chunk))
		for i, a := range chunk {
			ops[i] = clientv3.OpGet(s.AccountQueuePrefix(pool, a), clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(want[a])))
		}
		resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
		if err != nil {
			return nil, fmt.Errorf("read the queue of pool %s: %w", pool, err)
		}
		for i, a := range chunk {
			kvs := resp.Responses[i].GetResponseRange().Kvs
			q := make([]QueueEntry, 0, len(kvs))
			for _, kv := range kvs {
				e := QueueEntry{Account: a, ID: IDFromKey(string(kv.Key))}
				e.QueuedAt, _ = QueuedAtFromKey(string(kv.Key))
				q = append(q, e)
			}
			out[a] = q
		}
	}
	return out, nil
}
