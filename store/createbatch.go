package store

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"sync"
	"time"

	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Creates in batches (docs/limits.md, "How it is counted"). The creates of one
// account that a process has in flight at once are committed together by a
// committer: one reading of the account's usage checks them in order, as if
// they came one after the other, and one transaction stores those within the
// limits, adding their bytes to the committer's own shard of the counter. The
// transaction is conditioned as a single create's was (its shard unchanged
// since the reading; near max_queued_jobs, no queued job of the account written
// since; each job key and Idempotency-Key record new) and also on the
// account's settings and, under a storage limit, its storage counters being
// unchanged since the reading. It reads the account's usage again after its
// writes, or, when its conditions fail, instead of them: the committer checks
// its next batch against that reading (if it is under readingTTL old) instead
// of reading again, and retries a batch whose conditions failed at once. A
// reading that would refuse a create is taken again first: refusals are always
// made on a reading taken after the create arrived.
//
// Alone, a create is a batch of one, one transaction (two, the first of a
// while); under load the reading and the writing are shared by a batch, and an
// account's creates never contend with each other for a shard.

// Bounds of one batch, within etcd's defaults (--max-txn-ops 128, counting the
// usage reads and the nested transaction; --max-request-bytes 1.5 MiB).
const (
	batchOps   = 110
	batchBytes = 512 << 10
	// batchCommitters is how many batches of one account a process commits at
	// once, each on its own shard of the byte counter.
	batchCommitters = 4
)

// readingTTL is how long a committer uses the reading its last transaction
// returned, and waits for more creates of its account before it ends.
var readingTTL = time.Second // a variable for tests

// batchTimeout bounds a batch's reads and writes: the creates in it do not
// share a request's context. Their callers stop waiting at their own deadline.
const batchTimeout = 30 * time.Second

type createReq struct {
	ctx      context.Context
	j        *mj.Job
	b        []byte // j's record (encodeRecord)
	beside   int64
	idem     *Idempotency
	defaults Limits
	done     chan createResult // buffered: the committer never waits
}

type createResult struct {
	job *mj.Job
	err error
	// alone: commit this create by itself (createAlone): a batch cannot tell
	// it apart (an Idempotency-Key already used, a write whose outcome is not
	// known).
	alone bool
}

type createBatcher struct {
	mu       sync.Mutex
	accounts map[string]*accountCreates
}

type accountCreates struct {
	pending    []*createReq
	committers int
	idle       int           // committers waiting for creates
	wake       chan struct{} // tells a waiting committer there are some
	shards     uint32        // bit i: shard i is a committer's
	// inflight counts the creates in batches being committed, and committed
	// those this process stored: near max_queued_jobs, a batch counts the
	// others' (its reading may not have them) to know it is near.
	inflight  int
	committed int64
}

// unseen is how many creates of the account this process may have stored, or
// be storing, that a reading taken when committed was seq does not count,
// beside the n of the caller's own batch: an estimate from above.
func (s *Store) unseen(a *accountCreates, seq int64, n int) int64 {
	s.creates.mu.Lock()
	defer s.creates.mu.Unlock()
	return a.committed - seq + int64(a.inflight-n)
}

// committedSeq is how many creates of the account this process has stored.
func (s *Store) committedSeq(a *accountCreates) int64 {
	s.creates.mu.Lock()
	defer s.creates.mu.Unlock()
	return a.committed
}

// submitCreate queues r and waits for its outcome: a waiting committer of the
// account is woken, or one started if it has fewer than batchCommitters.
func (s *Store) submitCreate(r *createReq) createResult {
	cb := s.creates
	if cb == nil {
		return createResult{alone: true}
	}
	account := r.j.AccountID
	cb.mu.Lock()
	if cb.accounts == nil {
		cb.accounts = map[string]*accountCreates{}
	}
	a := cb.accounts[account]
	if a == nil {
		a = &accountCreates{wake: make(chan struct{}, batchCommitters)}
		cb.accounts[account] = a
	}
	a.pending = append(a.pending, r)
	switch {
	case a.idle > 0:
		select {
		case a.wake <- struct{}{}:
		default: // woken already
		}
	case a.committers < batchCommitters:
		a.committers++
		shard := freeShard(a.shards)
		a.shards |= 1 << shard
		go s.commitCreates(account, a, shard)
	}
	cb.mu.Unlock()
	select {
	case res := <-r.done:
		return res
	case <-r.ctx.Done():
		// Still pending: the committer skips it. Taken already: it may be
		// stored, as a single write that timed out may have been.
		return createResult{err: r.ctx.Err()}
	}
}

// freeShard picks one of the free shards of the byte counter at random, so
// that gateways rarely pick the same.
func freeShard(used uint32) int {
	var free [jobBytesShards]int
	n := 0
	for i := range jobBytesShards {
		if used&(1<<i) == 0 {
			free[n] = i
			n++
		}
	}
	return free[rand.IntN(n)]
}

// commitCreates commits batches of the account's pending creates, on its own
// shard, until none has come for readingTTL.
func (s *Store) commitCreates(account string, a *accountCreates, shard int) {
	var last *usageRead // what the last transaction read, and when
	var lastAt time.Time
	for {
		batch := s.takeBatch(a)
		if batch == nil {
			if !s.awaitCreates(account, a, shard) {
				return
			}
			continue
		}
		if last != nil && time.Since(lastAt) >= readingTTL {
			last = nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), batchTimeout)
		var stored int
		last, stored = s.commitBatch(ctx, account, a, batch, shard, last)
		lastAt = time.Now()
		cancel()
		s.creates.mu.Lock()
		a.inflight -= len(batch)
		a.committed += int64(stored)
		s.creates.mu.Unlock()
	}
}

// awaitCreates waits, up to readingTTL, for creates of the account; false when
// none came and the committer is done.
func (s *Store) awaitCreates(account string, a *accountCreates, shard int) bool {
	cb := s.creates
	cb.mu.Lock()
	if len(a.pending) > 0 {
		cb.mu.Unlock()
		return true
	}
	a.idle++
	cb.mu.Unlock()
	t := time.NewTimer(readingTTL)
	defer t.Stop()
	for {
		timedOut := false
		select {
		case <-a.wake:
		case <-t.C:
			timedOut = true
		}
		cb.mu.Lock()
		if len(a.pending) > 0 {
			a.idle--
			cb.mu.Unlock()
			return true
		}
		if timedOut {
			break // with the lock held
		}
		cb.mu.Unlock() // another committer took them
	}
	defer cb.mu.Unlock()
	a.idle--
	a.committers--
	a.shards &^= 1 << shard
	if a.committers == 0 {
		delete(cb.accounts, account)
	}
	return false
}

// takeBatch takes the pending creates that fit a batch, oldest first; nil
// when none is pending.
func (s *Store) takeBatch(a *accountCreates) []*createReq {
	cb := s.creates
	cb.mu.Lock()
	defer cb.mu.Unlock()
	var batch []*createReq
	ops, size := 1, 0 // the shard
	var idems map[string]bool
	rest := a.pending[:0]
	for _, r := range a.pending {
		if r.ctx.Err() != nil {
			continue // its caller is gone: not stored
		}
		n, bytes := createOps(r)
		if len(batch) > 0 && (ops+n > batchOps || size+bytes > batchBytes) {
			rest = append(rest, r)
			continue
		}
		if r.idem != nil {
			if idems[r.idem.Key] { // one write per key in a transaction
				rest = append(rest, r)
				continue
			}
			if idems == nil {
				idems = map[string]bool{}
			}
			idems[r.idem.Key] = true
		}
		batch = append(batch, r)
		ops, size = ops+n, size+bytes
	}
	clear(a.pending[len(rest):])
	a.pending = rest
	a.inflight += len(batch)
	return batch
}

// createOps estimates the puts (and compares) a create adds to a batch, and
// its bytes.
func createOps(r *createReq) (ops, bytes int) {
	ops, bytes = 4, len(r.b)+256 // record, account index, queue, status index
	if r.j.Destinations != nil {
		ops++
		bytes += int(r.beside)
	}
	if r.idem != nil {
		ops++
		bytes += 256
	}
	return ops, bytes
}

// commitBatch stores what of batch is within the account's limits, and tells
// each create its outcome. last is the reading the committer's last
// transaction returned, if recent; it returns the one this batch's returned.
//
// It returns how many it stored.
func (s *Store) commitBatch(ctx context.Context, account string, a *accountCreates, batch []*createReq, shard int, last *usageRead) (*usageRead, int) {
	shardKey := s.jobBytesPrefix(account) + strconv.Itoa(shard)
	defaults := batchDefaults(batch)
	parts := createParts(defaults, shardKey)
	u, fresh := last, false
	for attempt := 0; ; attempt++ {
		// A caller gone before this try is answered now and not stored: it may
		// create the job again, and must not find it stored later.
		batch = dropGone(batch)
		if len(batch) == 0 {
			return u, 0
		}
		if u != nil && !u.parts.covers(createParts(u.overrides.Apply(defaults), shardKey)) {
			u = nil // the account's own limits need more than it has
		}
		if u != nil && !fresh && nearLimit(u, u.overrides.Apply(defaults), batch) {
			// Others (other gateways, this one's other committers) may have
			// created since the reading: near a limit, only a reading taken
			// now is checked against.
			u = nil
		}
		if u == nil {
			seq := s.committedSeq(a)
			read, err := s.readCreateUsage(ctx, account, defaults, shardKey)
			if err != nil {
				s.failBatch(batch, err)
				return nil, 0
			}
			read.seq = seq
			u, fresh = &read, true
		}
		parts = u.parts
		// Each create in turn, as if alone after those before it.
		admitted, refused, strict := s.checkBatch(batch, *u, s.unseen(a, u.seq, len(batch)))
		if len(refused) > 0 && !fresh {
			u = nil // refusals are made on a reading taken after they arrived
			continue
		}
		if !fresh && u.overrides.Apply(defaults).MaxQueuedJobs > 0 {
			// Another gateway's queued jobs since the reading fail the write,
			// which then reads again (the Else branch).
			strict = true
		}
		for _, rf := range refused {
			if rf.r.idem != nil {
				// A retry of a create already stored is answered with its
				// job, whatever the account holds: alone.
				rf.r.done <- createResult{alone: true}
			} else {
				rf.r.done <- createResult{err: rf.err}
			}
		}
		batch = admitted
		if len(batch) == 0 {
			return u, 0
		}
		conds, usageConds, ops := s.batchTxn(account, batch, *u, shardKey, strict, defaults)
		reads, parse := s.usageOps(account, parts)
		type outcome struct {
			resp    *clientv3.TxnResponse
			retried bool
		}
		seq := s.committedSeq(a)
		out, err := retryTransient(ctx, func(retry bool) (outcome, error) {
			resp, err := s.cli.Txn(ctx).If(conds...).
				Then(append(ops, reads...)...).
				Else(append([]clientv3.Op{clientv3.OpTxn(usageConds, nil, nil)}, reads...)...).Commit()
			return outcome{resp, retry}, err
		})
		switch {
		case err != nil:
			s.failBatch(batch, fmt.Errorf("store job: %w", err))
			return nil, 0
		case out.resp.Succeeded:
			for _, r := range batch {
				r.j.Revision = out.resp.Header.Revision
				r.done <- createResult{job: r.j}
			}
			read := parse(out.resp.Responses[len(ops):], out.resp.Header.Revision)
			read.seq = seq
			return &read, len(batch)
		case out.retried:
			// An earlier try may have been applied: the jobs stored by it
			// are answered, and the others are created alone.
			for _, r := range batch {
				switch stored, err := s.Job(ctx, r.j.ID); {
				case err == nil:
					r.done <- createResult{job: stored}
				case mj.ErrorCode(err) == mj.ENotFound:
					r.done <- createResult{alone: true}
				default: // probably stored, but unreadable now
					r.done <- createResult{err: fmt.Errorf("store job: %w", err)}
				}
			}
			return nil, 0
		case out.resp.Responses[0].GetResponseTxn().Succeeded:
			// The usage held: a job key or an Idempotency-Key record is
			// there already. Alone, each create tells which.
			for _, r := range batch {
				r.done <- createResult{alone: true}
			}
			return nil, 0
		}
		if attempt == quotaAttempts {
			s.failBatch(batch, mj.Errorf(mj.EUnavailable, "too many creates of this account at once; try again"))
			return nil, 0
		}
		// The account's usage or settings moved: the transaction read them.
		read := parse(out.resp.Responses[1:], out.resp.Header.Revision)
		read.seq = seq
		u, fresh = &read, true
	}
}

// nearLimit tells whether batch, on reading u, would take the account past half
// of max_queued_jobs or max_job_bytes: there, a reading up to readingTTL old
// is not used (nearLimit's caller reads again).
func nearLimit(u *usageRead, l Limits, batch []*createReq) bool {
	var bytes int64
	for _, r := range batch {
		bytes += r.j.RecordBytes
	}
	return l.MaxQueuedJobs > 0 && 2*(u.queued+int64(len(batch))) > l.MaxQueuedJobs ||
		l.MaxJobBytes > 0 && 2*(u.usage().JobBytes+bytes) > l.MaxJobBytes
}

// dropGone answers the creates of batch whose caller is gone with its
// context's error, and returns the others.
func dropGone(batch []*createReq) []*createReq {
	kept := batch[:0]
	for _, r := range batch {
		if err := r.ctx.Err(); err != nil {
			r.done <- createResult{err: err}
			continue
		}
		kept = append(kept, r)
	}
	return kept
}

type refusal struct {
	r   *createReq
	err error
}

// checkBatch checks each create of batch against the account's limits, as if
// it came alone after those before it, on reading u: those within them, those
// over one, and whether the batch is near max_queued_jobs (queuedRaceMargin,
// counting the unseen creates of this process too), where it must be written
// only if no queued job was since u.
func (s *Store) checkBatch(batch []*createReq, u usageRead, unseen int64) (admitted []*createReq, refused []refusal, strict bool) {
	now := u
	for _, r := range batch {
		limits := u.overrides.Apply(r.defaults)
		if r.j.MaxInputBytes != limits.MaxInputBytes { // the runner's bound (docs/limits.md)
			r.j.MaxInputBytes = limits.MaxInputBytes
			b, err := encodeRecord(r.j, r.beside)
			if err != nil {
				refused = append(refused, refusal{r, err})
				continue
			}
			r.b = b
		}
		if err := checkCreate(limits, now, r.j); err != nil {
			refused = append(refused, refusal{r, err})
			continue
		}
		if limits.MaxQueuedJobs > 0 && now.queued+unseen+queuedRaceMargin >= limits.MaxQueuedJobs {
			strict = true
		}
		admitted = append(admitted, r)
		now.queued++
		now.created += r.j.RecordBytes
	}
	return admitted, refused, strict
}

// batchTxn is the transaction that stores batch on reading u: its conditions
// (the usage ones apart, to tell why it failed) and writes.
func (s *Store) batchTxn(account string, batch []*createReq, u usageRead, shardKey string, strict bool, defaults Limits) (conds, usageConds []clientv3.Cmp, ops []clientv3.Op) {
	cur := u.shards[shardKey]
	usageConds = []clientv3.Cmp{
		clientv3.Compare(clientv3.ModRevision(shardKey), "=", cur.modRev),
		clientv3.Compare(clientv3.ModRevision(s.schedKey(account)), "=", u.schedRev),
	}
	if strict {
		usageConds = append(usageConds, clientv3.Compare(clientv3.ModRevision(s.statusIndexPrefix(account, mj.StatusQueued)), "<", u.rev+1).WithPrefix())
	}
	if u.overrides.Apply(defaults).MaxStorageBytes > 0 {
		// Storage is counted by others (outputs, temporary files): the
		// reading's still holds.
		usageConds = append(usageConds, clientv3.Compare(clientv3.ModRevision(s.storagePrefix(account)), "<", u.rev+1).WithPrefix())
	}
	conds = append([]clientv3.Cmp(nil), usageConds...)
	var added int64
	for _, r := range batch {
		added += r.j.RecordBytes
	}
	ops = []clientv3.Op{clientv3.OpPut(shardKey, strconv.FormatInt(cur.value+added, 10))}
	for _, r := range batch {
		j := r.j
		conds = append(conds, clientv3.Compare(clientv3.CreateRevision(s.jobKey(j.ID)), "=", 0))
		ops = append(ops, clientv3.OpPut(s.jobKey(j.ID), string(r.b)), clientv3.OpPut(s.indexKey(j), j.ID))
		ops = append(ops, s.derivedOps(nil, j)...)
		if j.Destinations != nil { // beside the record, never in it
			dops, _ := s.destinationsOps(j) // encoded before: besideBytes
			ops = append(ops, dops...)
		}
		if r.idem != nil {
			ik := s.idemKey(account, r.idem.Key)
			ops = append(ops, clientv3.OpPut(ik, string(idemValue(j, r.idem))))
			conds = append(conds, clientv3.Compare(clientv3.CreateRevision(ik), "=", 0))
		}
	}
	return conds, usageConds, ops
}

// batchDefaults are the defaults to read the account's usage under for batch:
// of each limit, the largest of its creates' (one process has one
// configuration), so the reading has what each of them needs.
func batchDefaults(batch []*createReq) Limits {
	d := batch[0].defaults
	for _, r := range batch[1:] {
		d.MaxQueuedJobs = max(d.MaxQueuedJobs, r.defaults.MaxQueuedJobs)
		d.MaxJobBytes = max(d.MaxJobBytes, r.defaults.MaxJobBytes)
		d.MaxStorageBytes = max(d.MaxStorageBytes, r.defaults.MaxStorageBytes)
	}
	return d
}

func (s *Store) failBatch(batch []*createReq, err error) {
	for _, r := range batch {
		r.done <- createResult{err: err}
	}
}
