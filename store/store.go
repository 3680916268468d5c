// Package store keeps jobs, accounts and API keys in etcd. Every job change is a
// compare-and-swap on the job key's revision that also rewrites, in the same
// transaction, the index keys derived from the job (dispatch queue, active set,
// webhook outbox), so they can never disagree with the job.
package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/metrics"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Store is the etcd-backed store. Safe for concurrent use by any number of gateways
// and dispatchers.
type Store struct {
	cli      *clientv3.Client
	p        string         // key prefix, ends in "/"
	creates  *createBatcher // creates in flight, by account (createbatch.go)
	progress *progressLease
	streams  *streamLease // event streams' keys (streamquota.go)
	// guard, when set, conditions every write on the leader's election key
	// (guard.go): this Store is a leader's, for its term.
	guard *clientv3.Cmp
}

// New returns a store keeping its keys under prefix.
func New(cli *clientv3.Client, prefix string) *Store {
	if !strings.HasSuffix(prefix, "/") {
		prefix += "/"
	}
	return &Store{cli: cli, p: prefix, progress: &progressLease{}, streams: &streamLease{}, creates: &createBatcher{}}
}

// Client is the underlying etcd client (for watches and health checks).
func (s *Store) Client() *clientv3.Client { return s.cli }

func (s *Store) jobKey(id string) string { return s.p + "jobs/" + id }

// queueKey puts a job in its account's part of its pool's queue, first in, first
// out: queue/<pool>/<account>/<queued_at>_<id>. The dispatcher chooses across the
// accounts (docs/scheduling.md).
func (s *Store) queueKey(j *mj.Job) string {
	return fmt.Sprintf("%s%019d_%s", s.AccountQueuePrefix(j.Machine, j.AccountID), j.QueuedAt.UnixNano(), j.ID)
}

// legacyQueueKey is where versions before fair-share dispatch queued a job:
// queue/<pool>/<queued_at>_<id>. Leaving the queue deletes it too, and the
// dispatcher moves the ones it finds (MigrateQueueKeys).
func (s *Store) legacyQueueKey(j *mj.Job) string {
	return fmt.Sprintf("%s%019d_%s", s.PoolQueuePrefix(j.Machine), j.QueuedAt.UnixNano(), j.ID)
}

// QueuedAtFromKey is the queued_at time a queue key carries.
func QueuedAtFromKey(key string) (time.Time, bool) {
	base := key[strings.LastIndexByte(key, '/')+1:]
	ns, _, ok := strings.Cut(base, "_")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil {
		return time.Time{}, false
	}
	return time.Unix(0, n), true
}

// activeKey marks a job with a Nomad child in flight:
// active/<pool>/<account>/<id> = child id, so an account's share of a pool is one
// count. Versions before fair-share dispatch wrote active/<pool>/<id>
// (legacyActiveKey), deleted with the job's next change of child.
func (s *Store) activeKey(j *mj.Job) string {
	return s.AccountActivePrefix(j.Machine, j.AccountID) + j.ID
}
func (s *Store) legacyActiveKey(j *mj.Job) string { return s.PoolActivePrefix(j.Machine) + j.ID }

func (s *Store) outboxKey(id string) string { return s.p + "outbox/" + id }

// PoolQueuePrefix and PoolActivePrefix are one pool's part of the queue and the
// active set.
func (s *Store) PoolQueuePrefix(pool string) string  { return s.p + "queue/" + pool + "/" }
func (s *Store) PoolActivePrefix(pool string) string { return s.p + "active/" + pool + "/" }

// AccountQueuePrefix and AccountActivePrefix are one account's part of a pool's
// queue and active set.
func (s *Store) AccountQueuePrefix(pool, account string) string {
	return s.PoolQueuePrefix(pool) + account + "/"
}
func (s *Store) AccountActivePrefix(pool, account string) string {
	return s.PoolActivePrefix(pool) + account + "/"
}

// IDFromKey returns the job id at the end of a queue, active or outbox key.
func IDFromKey(key string) string {
	last := key[strings.LastIndexByte(key, '/')+1:]
	return last[strings.IndexByte(last, '_')+1:]
}

// indexKey orders an account's jobs newest first in etcd's natural ascending key
// order, so a page is a plain ranged read with a limit.
func (s *Store) indexKey(j *mj.Job) string {
	inv := math.MaxInt64 - j.CreatedAt.UnixNano()
	return fmt.Sprintf("%sidx/%s/%019d-%s", s.p, j.AccountID, inv, j.ID)
}

func (s *Store) indexPrefix(account string) string { return s.p + "idx/" + account + "/" }

// statusIndexKey is indexKey within one status, for ?status= lists.
func (s *Store) statusIndexKey(j *mj.Job) string {
	inv := math.MaxInt64 - j.CreatedAt.UnixNano()
	return fmt.Sprintf("%s%019d-%s", s.statusIndexPrefix(j.AccountID, j.Status), inv, j.ID)
}

func (s *Store) statusIndexPrefix(account string, st mj.Status) string {
	return s.p + "sidx/" + account + "/" + string(st) + "/"
}

// derivedOps are the puts and deletes of the keys that follow from a job's state: a
// job that is not finished and has no Nomad child waits in its pool's queue (new, or
// re-dispatched after a lost worker); one with a child is in the active set. Keys are
// written only when they change, so watchers of the queue and the active set see
// real changes only.
func (s *Store) derivedOps(old, j *mj.Job) []clientv3.Op {
	var ops []clientv3.Op
	// A chunked job's parent is never queued: its pipeline's jobs run (store/chunked.go).
	queued := func(j *mj.Job) bool {
		return j != nil && !j.Status.Terminal() && j.NomadJobID == "" && !awaiting(j) && !j.ChunkedParent()
	}
	active := func(j *mj.Job) string {
		if j != nil && !j.Status.Terminal() {
			return j.NomadJobID
		}
		return ""
	}
	switch {
	case queued(j) && !queued(old):
		ops = append(ops, clientv3.OpPut(s.queueKey(j), j.ID))
	case !queued(j) && queued(old):
		// The key an older version may have written goes too (deleting a key
		// that is not there changes nothing and tells no watcher).
		ops = append(ops, clientv3.OpDelete(s.queueKey(old)), clientv3.OpDelete(s.legacyQueueKey(old)))
	}
	switch a, was := active(j), active(old); {
	case a != "" && a != was:
		ops = append(ops, clientv3.OpPut(s.activeKey(j), a))
		if was != "" {
			ops = append(ops, clientv3.OpDelete(s.legacyActiveKey(old)))
		}
	case a == "" && was != "":
		ops = append(ops, clientv3.OpDelete(s.activeKey(old)), clientv3.OpDelete(s.legacyActiveKey(old)))
	}
	if old == nil || old.Status != j.Status {
		if old != nil {
			ops = append(ops, clientv3.OpDelete(s.statusIndexKey(old)))
		}
		ops = append(ops, clientv3.OpPut(s.statusIndexKey(j), j.ID))
	}
	ops = append(ops, s.awaitsOps(old, j)...)
	// A finished job or attempt has no progress: its key goes with the transition.
	if old != nil && (j.Status.Terminal() && !old.Status.Terminal() || j.Attempt != old.Attempt) {
		ops = append(ops, clientv3.OpDelete(s.progressKey(j.ID)))
	}
	if j.Status.Terminal() && (old == nil || !old.Status.Terminal()) {
		ops = append(ops, clientv3.OpPut(s.doneKey(j), j.ID))
		if old != nil && j.HasDestinations {
			// Read only by the upload links of an open attempt (gateway/uploads.go,
			// which refuses a finished job): the URLs, credentials, go now. The
			// bytes they counted are given back with the record (retention.go).
			ops = append(ops, clientv3.OpDelete(s.destinationsKey(j.ID)))
		}
		if tallied(j) { // its outputs are counted next (storagequota.go)
			ops = append(ops, clientv3.OpPut(s.tallyKey(j.ID), ""))
		}
	}
	if j.Status.Terminal() && j.WebhookURL != "" && (old == nil || !old.Status.Terminal()) {
		ops = append(ops, clientv3.OpPut(s.outboxKey(j.ID), string(j.Status)))
	}
	// The outbox entry lives exactly as long as the delivery is pending: settling it
	// (delivered or failed) removes the entry in the same write.
	if old != nil && old.Webhook != nil && old.Webhook.Status == mj.WebhookPending && j.Webhook != nil && j.Webhook.Status != mj.WebhookPending {
		ops = append(ops, clientv3.OpDelete(s.outboxKey(j.ID)))
	}
	return ops
}

// CreateJob stores a new job and puts it in the dispatch queue.
func (s *Store) CreateJob(ctx context.Context, j *mj.Job) error {
	_, err := s.CreateJobOnce(ctx, j, nil)
	return err
}

// Idempotency identifies a create request: an account's Idempotency-Key and a
// fingerprint of the request it came with.
type Idempotency struct {
	Key         string
	Fingerprint string
}

type idemRecord struct {
	JobID       string    `json:"job_id"`
	Fingerprint string    `json:"fingerprint"`
	CreatedAt   time.Time `json:"created_at"`
}

// idemValue is the Idempotency-Key record a create of j with idem stores.
func idemValue(j *mj.Job, idem *Idempotency) []byte {
	b, _ := json.Marshal(idemRecord{JobID: j.ID, Fingerprint: idem.Fingerprint, CreatedAt: j.CreatedAt})
	return b
}

func (s *Store) idemKey(account, key string) string {
	sum := sha256.Sum256([]byte(key))
	return s.p + "idem/" + account + "/" + hex.EncodeToString(sum[:])
}

// IdemPrefix holds the idempotency records (swept by the janitor).
func (s *Store) IdemPrefix() string { return s.p + "idem/" }

// CreateJobOnce stores j unless idem names a job created before, which it returns
// instead (created=false). The check and the write are one transaction, so two
// racing retries create one job. Reusing a key with another request is a conflict.
func (s *Store) CreateJobOnce(ctx context.Context, j *mj.Job, idem *Idempotency) (*mj.Job, error) {
	return s.CreateJobWithin(ctx, j, idem, Limits{})
}

// CreateJobWithin is CreateJobOnce within the account's limits of amounts held:
// defaults, replaced by the account's own overrides. A create that would cross one
// is refused with quotaExceeded and stores nothing (docs/limits.md). A retry of
// a create that was stored (same Idempotency-Key) returns the job whatever the
// account holds now.
func (s *Store) CreateJobWithin(ctx context.Context, j *mj.Job, idem *Idempotency, defaults Limits) (*mj.Job, error) {
	if idem != nil {
		sum := sha256.Sum256([]byte(idem.Key))
		j.IdemHash = hex.EncodeToString(sum[:])
	}
	beside, err := s.besideBytes(j, idem)
	if err != nil {
		return nil, err
	}
	b, err := encodeRecord(j, beside)
	if err != nil {
		return nil, err
	}
	// With the account's other creates in flight in this process, in one
	// batch (createbatch.go); alone when a batch cannot tell the outcome.
	r := &createReq{ctx: ctx, j: j, b: b, beside: beside, idem: idem, defaults: defaults, done: make(chan createResult, 1)}
	if res := s.submitCreate(r); !res.alone {
		return res.job, res.err
	}
	return s.createAlone(ctx, j, r.b, beside, idem, defaults)
}

// createAlone is CreateJobWithin for one create by itself: a reading of the
// account's usage, then the create's transaction conditioned on it, again
// while the usage moves in between.
func (s *Store) createAlone(ctx context.Context, j *mj.Job, b []byte, beside int64, idem *Idempotency, defaults Limits, extra ...clientv3.Op) (*mj.Job, error) {
	for attempt := 0; ; attempt++ {
		u, err := s.readCreateUsage(ctx, j.AccountID, defaults, s.jobBytesKey(j.AccountID, j.ID))
		if err != nil {
			return nil, err
		}
		limits := u.overrides.Apply(defaults)
		if j.MaxInputBytes != limits.MaxInputBytes { // the runner's bound (docs/limits.md)
			j.MaxInputBytes = limits.MaxInputBytes
			if b, err = encodeRecord(j, beside); err != nil {
				return nil, err
			}
		}
		if err := checkCreate(limits, u, j); err != nil {
			if idem != nil {
				// A retry of a create already stored is answered with its job.
				if prior, err := s.idemJob(ctx, j.AccountID, idem); prior != nil || err != nil {
					return prior, err
				}
			}
			return nil, err
		}
		job, again, err := s.createOnce(ctx, j, b, idem, u, limits, extra...)
		if !again {
			return job, err
		}
		if attempt == quotaAttempts {
			return nil, mj.Errorf(mj.EUnavailable, "too many creates of this account at once; try again")
		}
	}
}

// IdempotentJob is idemJob: the job an earlier create of account with idem
// stored, nil if none (gateway: a retried create).
func (s *Store) IdempotentJob(ctx context.Context, account string, idem *Idempotency) (*mj.Job, error) {
	return s.idemJob(ctx, account, idem)
}

// idemJob returns the job an earlier create with idem stored, nil if none; a
// reuse of the key with another request is a conflict.
func (s *Store) idemJob(ctx context.Context, account string, idem *Idempotency) (*mj.Job, error) {
	resp, err := s.cli.Get(ctx, s.idemKey(account, idem.Key))
	if err != nil || len(resp.Kvs) == 0 {
		return nil, err
	}
	var rec idemRecord
	if err := json.Unmarshal(resp.Kvs[0].Value, &rec); err != nil {
		return nil, err
	}
	if rec.Fingerprint != idem.Fingerprint {
		return nil, mj.Errorf(mj.EConflict, "this Idempotency-Key was already used with a different request")
	}
	return s.Job(ctx, rec.JobID)
}

// createOnce tries the create's transaction once, conditioned on the account's
// usage being what u read; again reports that it changed in between.
// extra are written with it (a chunked job's pipeline, store/chunked.go).
func (s *Store) createOnce(ctx context.Context, j *mj.Job, b []byte, idem *Idempotency, u usageRead, limits Limits, extra ...clientv3.Op) (_ *mj.Job, again bool, _ error) {
	shardKey := s.jobBytesKey(j.AccountID, j.ID)
	shard := u.shards[shardKey]
	ops := append([]clientv3.Op{
		clientv3.OpPut(s.jobKey(j.ID), string(b)),
		clientv3.OpPut(s.indexKey(j), j.ID),
		clientv3.OpPut(shardKey, strconv.FormatInt(shard.value+j.RecordBytes, 10)),
	}, s.derivedOps(nil, j)...)
	dops, err := s.destinationsOps(j) // beside the record, never in it
	if err != nil {
		return nil, false, err
	}
	ops = append(ops, dops...)
	ops = append(ops, extra...)
	conds := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.jobKey(j.ID)), "=", 0)}
	var ik string
	if idem != nil {
		ik = s.idemKey(j.AccountID, idem.Key)
		ops = append(ops, clientv3.OpPut(ik, string(idemValue(j, idem))))
		conds = append(conds, clientv3.Compare(clientv3.CreateRevision(ik), "=", 0))
	}
	// The usage read still holds: the job's shard of the byte counter is
	// unchanged and, near the limit of jobs queued, no queued job of the account
	// was written since (store/limits.go).
	usageConds := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(shardKey), "=", shard.modRev)}
	if limits.MaxQueuedJobs > 0 && u.queued+queuedRaceMargin >= limits.MaxQueuedJobs {
		usageConds = append(usageConds, clientv3.Compare(clientv3.ModRevision(s.statusIndexPrefix(j.AccountID, mj.StatusQueued)), "<", u.rev+1).WithPrefix())
	}
	conds = append(conds, usageConds...)
	usageOK := clientv3.OpTxn(usageConds, nil, nil)
	// An etcd leader election fails the write ambiguously; it is tried again. The
	// job id is new, so a job already under it is this request's, stored by the
	// attempt that seemed to fail.
	type outcome struct {
		resp    *clientv3.TxnResponse
		retried bool
	}
	out, err := retryTransient(ctx, func(retry bool) (outcome, error) {
		// Else: whether the usage conditions held (a nested transaction with
		// them as its conditions), then the idempotency record.
		els := []clientv3.Op{usageOK}
		if idem != nil {
			els = append(els, clientv3.OpGet(ik))
		}
		resp, err := s.cli.Txn(ctx).If(conds...).Then(ops...).Else(els...).Commit()
		return outcome{resp, retry}, err
	})
	if err != nil {
		return nil, false, fmt.Errorf("store job: %w", err)
	}
	resp := out.resp
	if resp.Succeeded {
		j.Revision = resp.Header.Revision
		return j, false, nil
	}
	if out.retried {
		stored, err := s.Job(ctx, j.ID)
		if err == nil {
			return stored, false, nil
		}
		if mj.ErrorCode(err) != mj.ENotFound {
			// Probably stored, but unreadable now: not a conflict the client
			// would take as final.
			return nil, false, fmt.Errorf("store job: %w", err)
		}
	}
	if idem != nil && len(resp.Responses) > 1 && len(resp.Responses[1].GetResponseRange().Kvs) > 0 {
		var rec idemRecord
		if err := json.Unmarshal(resp.Responses[1].GetResponseRange().Kvs[0].Value, &rec); err != nil {
			return nil, false, err
		}
		if rec.Fingerprint != idem.Fingerprint {
			return nil, false, mj.Errorf(mj.EConflict, "this Idempotency-Key was already used with a different request")
		}
		job, err := s.Job(ctx, rec.JobID)
		return job, false, err
	}
	if len(resp.Responses) > 0 && !resp.Responses[0].GetResponseTxn().Succeeded {
		return nil, true, nil // the account's usage moved: read it again
	}
	return nil, false, mj.Errorf(mj.EConflict, "job %s already exists", j.ID)
}

// idemPage is how many idempotency records SweepIdempotency reads at a time (each
// is about 150 bytes); idemTxn how many it deletes in one etcd transaction.
const (
	idemPage = 500
	idemTxn  = 64
)

// SweepIdempotency deletes idempotency records created before cutoff, a page at a
// time, several per transaction as the job retention does. Each delete carries
// its own compare: a record rewritten since it was read is kept.
func (s *Store) SweepIdempotency(ctx context.Context, cutoff time.Time) (int, error) {
	prefix, n := s.IdemPrefix(), 0
	end := clientv3.GetPrefixRangeEnd(prefix)
	for from := prefix; ; {
		resp, err := s.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(idemPage))
		if err != nil {
			return n, err
		}
		var dels []clientv3.Op
		for _, kv := range resp.Kvs {
			var rec idemRecord
			if json.Unmarshal(kv.Value, &rec) == nil && rec.CreatedAt.Before(cutoff) {
				cmp := clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)
				dels = append(dels, clientv3.OpTxn([]clientv3.Cmp{cmp}, []clientv3.Op{clientv3.OpDelete(string(kv.Key))}, nil))
			}
		}
		for len(dels) > 0 {
			k := min(len(dels), idemTxn)
			r, err := s.batch(ctx, dels[:k])
			if err != nil {
				return n, err
			}
			for _, op := range r.Responses {
				if op.GetResponseTxn().Succeeded {
					n++
				}
			}
			dels = dels[k:]
		}
		if !resp.More || len(resp.Kvs) == 0 {
			return n, nil
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
}

// Job returns the job with id, with its current progress, or mj.ErrNotFound.
func (s *Store) Job(ctx context.Context, id string) (*mj.Job, error) {
	resp, err := s.cli.Txn(ctx).Then(clientv3.OpGet(s.jobKey(id)), clientv3.OpGet(s.progressKey(id))).Commit()
	if err != nil {
		return nil, fmt.Errorf("get job: %w", err)
	}
	kvs := resp.Responses[0].GetResponseRange().Kvs
	if len(kvs) == 0 {
		return nil, mj.ErrNotFound
	}
	var j mj.Job
	if err := json.Unmarshal(kvs[0].Value, &j); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", id, err)
	}
	j.Revision = kvs[0].ModRevision
	withProgress(&j, resp.Responses[1].GetResponseRange().Kvs)
	return &j, nil
}

func (s *Store) job(ctx context.Context, id string) (*mj.Job, int64, error) {
	resp, err := s.cli.Get(ctx, s.jobKey(id))
	if err != nil {
		return nil, 0, fmt.Errorf("get job: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, 0, mj.ErrNotFound
	}
	var j mj.Job
	if err := json.Unmarshal(resp.Kvs[0].Value, &j); err != nil {
		return nil, 0, fmt.Errorf("decode job %s: %w", id, err)
	}
	j.Revision = resp.Kvs[0].ModRevision
	return &j, resp.Kvs[0].ModRevision, nil
}

// UpdateJob applies fn to a copy of the current job and writes the result if the job
// did not change in between (compare-and-swap on its revision), retrying on a race.
// Maps and slices in the copy are shared with the stored value: replace, don't edit. A status
// change the state machine forbids is refused with a conflict error and nothing is
// written. fn may return an error to abort.
func (s *Store) UpdateJob(ctx context.Context, id string, fn func(*mj.Job) error) (*mj.Job, error) {
	for attempt := 0; ; attempt++ {
		old, rev, err := s.job(ctx, id)
		if err != nil {
			return nil, err
		}
		j, ops, err := s.next(old, fn)
		if err != nil {
			return nil, err
		}
		cmps := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.jobKey(id)), "=", rev)}
		if ops, cmps, err = s.withMeter(ctx, old, j, ops, cmps); err != nil { // usage.go
			return nil, err
		}
		resp, err := s.commit(ctx, cmps, ops, nil)
		if err != nil {
			return nil, fmt.Errorf("update job: %w", err)
		}
		if resp.Succeeded {
			j.Revision = resp.Header.Revision
			return j, nil
		}
		if attempt >= 50 {
			return nil, mj.Errorf(mj.EConflict, "job %s is being changed concurrently; try again", id)
		}
	}
}

// next applies fn to a copy of old and returns the new job and the writes that store
// it: the job key and its derived keys.
func (s *Store) next(old *mj.Job, fn func(*mj.Job) error) (*mj.Job, []clientv3.Op, error) {
	j := *old
	// fn gets its own copy of the nested structs, so old stays what was read.
	if old.Webhook != nil {
		w := *old.Webhook
		j.Webhook = &w
	}
	if err := fn(&j); err != nil {
		return nil, nil, err
	}
	if err := mj.ValidateTransition(old.Status, j.Status); err != nil {
		return nil, nil, err
	}
	mj.BoundJob(&j)
	j.UpdatedAt = time.Now().UTC()
	if !old.Status.Terminal() {
		j.ArmWebhook() // the terminal verbs arm it; a write that set the status itself too
	}
	b, err := json.Marshal(&j)
	if err != nil {
		return nil, nil, err
	}
	return &j, append([]clientv3.Op{clientv3.OpPut(s.jobKey(j.ID), string(b))}, s.derivedOps(old, &j)...), nil
}

// Jobs reads several jobs in as few round trips as etcd's limits allow: one job and
// one error (mj.ErrNotFound for a missing job) per id. Each multi-get holds at most
// jobsPerTxn ids (etcd's --max-txn-ops is 128 by default); a long list goes as
// several, jobsTxnsInFlight at a time.
func (s *Store) Jobs(ctx context.Context, ids []string) ([]*mj.Job, []error) {
	jobs, errs := make([]*mj.Job, len(ids)), make([]error, len(ids))
	sem := make(chan struct{}, jobsTxnsInFlight)
	var wg sync.WaitGroup
	for from := 0; from < len(ids); from += jobsPerTxn {
		to := min(from+jobsPerTxn, len(ids))
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			s.readJobs(ctx, ids[from:to], jobs[from:to], errs[from:to])
		}()
	}
	wg.Wait()
	return jobs, errs
}

const (
	jobsPerTxn       = 100
	jobsTxnsInFlight = 4
)

// readJobs reads ids in one multi-get into jobs and errs (of the same length).
func (s *Store) readJobs(ctx context.Context, ids []string, jobs []*mj.Job, errs []error) {
	ops := make([]clientv3.Op, len(ids))
	for k, id := range ids {
		ops[k] = clientv3.OpGet(s.jobKey(id))
	}
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	for i := range ops {
		if err != nil {
			errs[i] = fmt.Errorf("get job: %w", err)
			continue
		}
		kvs := resp.Responses[i].GetResponseRange().Kvs
		if len(kvs) == 0 {
			errs[i] = mj.ErrNotFound
			continue
		}
		var j mj.Job
		if err := json.Unmarshal(kvs[0].Value, &j); err != nil {
			errs[i] = fmt.Errorf("decode job %s: %w: %w", ids[i], errUndecodable, err)
			continue
		}
		j.Revision = kvs[0].ModRevision
		jobs[i] = &j
	}
}

// errUndecodable marks a job record that is stored but cannot be decoded: one
// written by a newer version (a field whose type changed) or damaged.
var errUndecodable = errors.New("undecodable job record")

// JobsUnder reads the jobs listed under one of the derived prefixes (e.g. the
// active set): one ranged read of the keys, then the jobs in multi-gets (see Jobs),
// a few round trips for thousands of jobs. A job deleted in between is left out,
// and so is a record that cannot be decoded (logged with its key and counted in
// mediajobs_store_unreadable_jobs_total): one bad record must not stop the
// dispatcher's repairs of every other job. Any other failure fails the read.
// Progress is not read (no caller needs it).
func (s *Store) JobsUnder(ctx context.Context, prefix string) ([]*mj.Job, error) {
	ids, _, err := s.JobIDs(ctx, prefix, 0)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", prefix, err)
	}
	read, errs := s.Jobs(ctx, ids)
	jobs := read[:0]
	for i, j := range read {
		switch {
		case errs[i] == nil:
			jobs = append(jobs, j)
		case errors.Is(errs[i], errUndecodable):
			metrics.UnreadableJobs.WithLabelValues().Inc()
			slog.Error("job record cannot be decoded; skipped (written by a newer version, or damaged)", "key", s.jobKey(ids[i]), "listed_under", prefix, "err", errs[i])
		case mj.ErrorCode(errs[i]) != mj.ENotFound:
			return nil, errs[i]
		}
	}
	return jobs, nil
}

// JobUpdate is one change of UpdateJobs.
type JobUpdate struct {
	ID string
	Fn func(*mj.Job) error
	// From, when set, is the job as the caller last saw it (with its Revision): the
	// update is tried on it without reading the job first.
	From *mj.Job
}

// UpdateJobs applies several updates, each exactly as UpdateJob would, in one etcd
// transaction: one nested compare-and-swap per job, so each succeeds or fails on its
// own, and one raft entry and one fsync for all. An update whose job changed since
// From is retried alone with UpdateJob. It returns one job and one error per update.
// The IDs must be distinct (etcd refuses two writes of one key in a transaction).
// A large batch is split into transactions within etcd's default limits.
func (s *Store) UpdateJobs(ctx context.Context, us []JobUpdate) ([]*mj.Job, []error) {
	jobs, errs := make([]*mj.Job, len(us)), make([]error, len(us))
	var ids []string
	var idx []int
	for i, u := range us {
		if u.From == nil {
			ids, idx = append(ids, u.ID), append(idx, i)
		}
	}
	olds := make([]*mj.Job, len(us))
	for i, u := range us {
		olds[i] = u.From
	}
	read, rerrs := s.Jobs(ctx, ids)
	for k, i := range idx {
		olds[i], errs[i] = read[k], rerrs[k]
	}
	// Chunks stay well inside etcd's defaults: 128 operations and 1.5 MiB a request.
	const maxTxns, maxBytes = 64, 1 << 20
	var txns []clientv3.Op
	var txnIdx []int
	var meters []meteredUpdate
	size := 0
	commit := func() {
		if len(txns) == 0 {
			return
		}
		resp, err := s.batch(ctx, txns)
		for k, i := range txnIdx {
			switch {
			case err != nil:
				jobs[i], errs[i] = nil, fmt.Errorf("update job: %w", err)
			case resp.Responses[k].GetResponseTxn().Succeeded:
				jobs[i].Revision = resp.Header.Revision
			default: // changed since it was read: the usual read-modify-write, alone
				jobs[i], errs[i] = s.UpdateJob(ctx, us[i].ID, us[i].Fn)
			}
		}
		txns, txnIdx, size = txns[:0], txnIdx[:0], 0
	}
	for i, u := range us {
		if errs[i] != nil {
			continue
		}
		j, ops, err := s.next(olds[i], u.Fn)
		if err != nil {
			errs[i] = err
			continue
		}
		jobs[i] = j
		if metered(olds[i], j) { // with its usage counter, after the others (usage.go)
			meters = append(meters, meteredUpdate{i, ops})
			continue
		}
		n := 0
		for _, op := range ops {
			n += len(op.KeyBytes()) + len(op.ValueBytes())
		}
		if len(txns) == maxTxns || (len(txns) > 0 && size+n > maxBytes) {
			commit()
		}
		cmp := clientv3.Compare(clientv3.ModRevision(s.jobKey(u.ID)), "=", olds[i].Revision)
		txns, txnIdx = append(txns, clientv3.OpTxn([]clientv3.Cmp{cmp}, ops, nil)), append(txnIdx, i)
		size += n
	}
	commit()
	s.commitMetered(ctx, us, meters, olds, jobs, errs) // usage.go
	return jobs, errs
}

// ListOptions select a page of an account's jobs, newest first.
type ListOptions struct {
	Limit  int
	Offset int
	// After is a cursor: the id-bearing index key returned as Page.Next.
	After string
	// Status, when set, lists only jobs in that status.
	Status mj.Status
}

// Page is one page of jobs.
type Page struct {
	Jobs  []*mj.Job
	Total int
	// Next is the cursor for the page after this one, "" when there is none.
	Next string
}

// ListJobs returns a page of the account's jobs, newest first. It reads keys of the
// account's index only, then the jobs of the page.
func (s *Store) ListJobs(ctx context.Context, account string, o ListOptions) (Page, error) {
	prefix := s.indexPrefix(account)
	if o.Status != "" {
		prefix = s.statusIndexPrefix(account, o.Status)
	}
	end := clientv3.GetPrefixRangeEnd(prefix)
	count, err := s.cli.Get(ctx, prefix, clientv3.WithRange(end), clientv3.WithCountOnly())
	if err != nil {
		return Page{}, fmt.Errorf("count jobs: %w", err)
	}
	start := prefix
	if o.After != "" {
		start = prefix + o.After + "\x00"
	}
	resp, err := s.cli.Get(ctx, start, clientv3.WithRange(end), clientv3.WithLimit(int64(o.Offset+o.Limit+1)))
	if err != nil {
		return Page{}, fmt.Errorf("list jobs: %w", err)
	}
	page := Page{Total: int(count.Count)}
	kvs := resp.Kvs
	if o.Offset >= len(kvs) {
		return page, nil
	}
	kvs = kvs[o.Offset:]
	if len(kvs) > o.Limit {
		kvs = kvs[:o.Limit]
		page.Next = strings.TrimPrefix(string(kvs[len(kvs)-1].Key), prefix)
	}
	ops := make([]clientv3.Op, len(kvs))
	for i, kv := range kvs {
		ops[i] = clientv3.OpGet(s.jobKey(string(kv.Value)))
	}
	tx, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return Page{}, fmt.Errorf("read jobs: %w", err)
	}
	for _, r := range tx.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			var j mj.Job
			if err := json.Unmarshal(kv.Value, &j); err != nil {
				return Page{}, fmt.Errorf("decode job: %w", err)
			}
			j.Revision = kv.ModRevision
			page.Jobs = append(page.Jobs, &j)
		}
	}
	if err := s.progressOf(ctx, page.Jobs); err != nil {
		return Page{}, err
	}
	return page, nil
}

// JobIDs returns the job ids under one of the derived prefixes (queue, active,
// outbox), in key order (a pool's queue: first in, first out), at most limit (0: all).
func (s *Store) JobIDs(ctx context.Context, prefix string, limit int) ([]string, int64, error) {
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(int64(limit)))
	if err != nil {
		return nil, 0, err
	}
	ids := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		ids[i] = IDFromKey(string(kv.Key))
	}
	return ids, resp.Header.Revision, nil
}

// Count returns how many keys are under prefix (e.g. a pool's jobs in flight).
func (s *Store) Count(ctx context.Context, prefix string) (int, error) {
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return int(resp.Count), nil
}

// DeleteOutbox removes a job's webhook outbox entry once it is settled.
func (s *Store) DeleteOutbox(ctx context.Context, id string) error {
	_, err := s.batch(ctx, []clientv3.Op{clientv3.OpDelete(s.outboxKey(id))})
	return err
}

// EventIndex returns the saved Nomad event stream index (0 when none).
func (s *Store) EventIndex(ctx context.Context) (uint64, error) {
	resp, err := s.cli.Get(ctx, s.p+"dispatcher/event_index")
	if err != nil || len(resp.Kvs) == 0 {
		return 0, err
	}
	return strconv.ParseUint(string(resp.Kvs[0].Value), 10, 64)
}

// SaveEventIndex records how far the Nomad event stream has been applied.
func (s *Store) SaveEventIndex(ctx context.Context, idx uint64) error {
	_, err := s.batch(ctx, []clientv3.Op{clientv3.OpPut(s.p+"dispatcher/event_index", strconv.FormatUint(idx, 10))})
	return err
}

// Ping checks etcd answers (for /readyz).
func (s *Store) Ping(ctx context.Context) error {
	_, err := s.cli.Get(ctx, s.p+"ping", clientv3.WithCountOnly())
	return err
}

// WaitJob blocks until done(job) is true or ctx ends, and returns the job as it
// stands then. It watches the job key, so it wakes on the change itself.
func (s *Store) WaitJob(ctx context.Context, id string, done func(*mj.Job) bool) (*mj.Job, error) {
	j, rev, err := s.job(ctx, id)
	if err != nil || done(j) {
		return j, err
	}
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	for resp := range s.cli.Watch(wctx, s.jobKey(id), clientv3.WithRev(rev+1)) {
		if resp.Err() != nil {
			break
		}
		for _, ev := range resp.Events {
			var next mj.Job
			if ev.Kv != nil && json.Unmarshal(ev.Kv.Value, &next) == nil {
				// Its revision too: a cache keeps the newer of two copies by it
				// (the gateway's, after a create with ?wait=true).
				next.Revision = ev.Kv.ModRevision
				j = &next
				if done(j) {
					return j, nil
				}
			}
		}
	}
	// The wait ended (deadline, or the watch broke): report the latest state.
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer rcancel()
	if latest, err := s.Job(rctx, id); err == nil {
		return latest, nil
	}
	return j, nil
}

// JobChange is one job written or deleted, as WatchJobs tells it: the job's
// record is decoded only when asked (Job), so a watcher pays nothing for the
// changes it has no use for.
type JobChange struct {
	ID       string
	Revision int64  // the change's (for a write, the job's new Revision)
	value    []byte // the record written; nil: deleted
}

// Deleted reports whether the job was deleted.
func (c *JobChange) Deleted() bool { return c.value == nil }

// Job decodes the record written.
func (c *JobChange) Job() (*mj.Job, error) {
	var j mj.Job
	if err := json.Unmarshal(c.value, &j); err != nil {
		return nil, fmt.Errorf("decode job %s: %w", c.ID, err)
	}
	j.Revision = c.Revision
	return &j, nil
}

// WatchJobs calls fn with every job written or deleted after revision from,
// until ctx ends or the watch fails (compaction, lost connection); it returns
// why. Callers that cache jobs must drop their cache when it returns.
func (s *Store) WatchJobs(ctx context.Context, from int64, fn func(c *JobChange)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	prefix := s.p + "jobs/"
	for resp := range s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			c := &JobChange{ID: string(ev.Kv.Key[len(prefix):]), Revision: ev.Kv.ModRevision}
			if ev.Type != clientv3.EventTypeDelete {
				c.value = ev.Kv.Value
				if c.value == nil {
					c.value = []byte{}
				}
			}
			fn(c)
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("job watch closed")
}

// Revision is etcd's current revision (where a new watch starts).
func (s *Store) Revision(ctx context.Context) (int64, error) {
	resp, err := s.cli.Get(ctx, s.p+"jobs/", clientv3.WithCountOnly())
	if err != nil {
		return 0, err
	}
	return resp.Header.Revision, nil
}
