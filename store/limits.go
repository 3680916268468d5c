package store

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"strconv"

	mj "github.com/mediajobs/mediajobs"
	pb "go.etcd.io/etcd/api/v3/etcdserverpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Per-account limits of amounts held (docs/limits.md). The defaults come from the
// configuration's limits block; an account's overrides live in its sched/<account>
// record beside its scheduling settings. What an account holds is read from etcd
// when a create is checked, so every gateway enforces the same numbers:
//
//   - jobs queued: a count-only read of sidx/<account>/queued/ (the account's jobs
//     in status queued), plus the jobs its pipelines planned and have not
//     stored yet (pqueued/<account>/, store/pipelines.go). Within queuedRaceMargin of the limit, the create's
//     transaction also compares that no key under that prefix was written since
//     the read, so racing creates cannot cross it; further from it they do not
//     contend (only more than queuedRaceMargin creates of one account racing at
//     once could overshoot, by their excess);
//   - bytes of job records (with what their creates store beside them:
//     destinations and Idempotency-Key records, besideBytes): counters per
//     account, usage/<account>/job_bytes/<shard>
//     (each create adds to the shard its job id hashes to, in its transaction,
//     with a compare on that shard's revision: concurrent creates of one account
//     rarely touch the same shard) and usage/<account>/job_bytes_freed (added to
//     by the retention, in the transaction that deletes the jobs); held is the
//     shards' sum minus the freed. Each counter has one kind of writer, so
//     creates never contend with the retention. Creates racing on different
//     shards may overshoot max_job_bytes by their own records.

// Limits are an account's limits of amounts held; 0 is no limit.
type Limits struct {
	MaxQueuedJobs     int64 `json:"max_queued_jobs"`
	MaxJobBytes       int64 `json:"max_job_bytes"`
	MaxTimeoutSeconds int64 `json:"max_timeout_seconds"`
	MaxStorageBytes   int64 `json:"max_storage_bytes"`
	MaxEventStreams   int64 `json:"max_event_streams"`
	MaxInputBytes     int64 `json:"max_input_bytes"`
}

// LimitOverrides are an account's own limits; nil fields keep the defaults.
type LimitOverrides struct {
	MaxQueuedJobs     *int64 `json:"max_queued_jobs,omitempty"`
	MaxJobBytes       *int64 `json:"max_job_bytes,omitempty"`
	MaxTimeoutSeconds *int64 `json:"max_timeout_seconds,omitempty"`
	MaxStorageBytes   *int64 `json:"max_storage_bytes,omitempty"`
	MaxEventStreams   *int64 `json:"max_event_streams,omitempty"`
	MaxInputBytes     *int64 `json:"max_input_bytes,omitempty"`
}

func (o LimitOverrides) fields() []*int64 {
	return []*int64{o.MaxQueuedJobs, o.MaxJobBytes, o.MaxTimeoutSeconds, o.MaxStorageBytes, o.MaxEventStreams, o.MaxInputBytes}
}

func (o LimitOverrides) check() error {
	for _, f := range o.fields() {
		if f != nil && *f < 0 {
			return mj.Errorf(mj.EValidation, "limits must not be negative (0: no limit)")
		}
	}
	return nil
}

// Apply returns d with o's fields in place of its own.
func (o LimitOverrides) Apply(d Limits) Limits {
	set := func(dst *int64, v *int64) {
		if v != nil {
			*dst = *v
		}
	}
	set(&d.MaxQueuedJobs, o.MaxQueuedJobs)
	set(&d.MaxJobBytes, o.MaxJobBytes)
	set(&d.MaxTimeoutSeconds, o.MaxTimeoutSeconds)
	set(&d.MaxStorageBytes, o.MaxStorageBytes)
	set(&d.MaxEventStreams, o.MaxEventStreams)
	set(&d.MaxInputBytes, o.MaxInputBytes)
	return d
}

// Usage is what an account holds now.
type Usage struct {
	QueuedJobs   int64 `json:"queued_jobs"`
	JobBytes     int64 `json:"job_bytes"`
	StorageBytes int64 `json:"storage_bytes"`
	EventStreams int64 `json:"event_streams"`
}

// QuotaError is the quotaExceeded error for limit: its value and the use.
func QuotaError(limit string, value, use int64) *mj.Error {
	return &mj.Error{
		Code:    mj.EQuotaExceeded,
		Message: fmt.Sprintf("account limit %s (%d) reached: %d in use", limit, value, use),
		Details: map[string]string{"limit": limit, "value": strconv.FormatInt(value, 10), "use": strconv.FormatInt(use, 10)},
	}
}

// jobBytesShards spreads an account's created-bytes counter over this many keys.
const jobBytesShards = 16

// queuedRaceMargin: how near max_queued_jobs creates are checked strictly.
const queuedRaceMargin = 64

func (s *Store) jobBytesPrefix(account string) string {
	return s.p + "usage/" + account + "/job_bytes/"
}

// jobBytesKey is the shard of the account's created-bytes counter that job id adds to.
func (s *Store) jobBytesKey(account, id string) string {
	h := fnv.New32a()
	h.Write([]byte(id))
	return s.jobBytesPrefix(account) + strconv.Itoa(int(h.Sum32()%jobBytesShards))
}
func (s *Store) freedBytesKey(account string) string {
	return s.p + "usage/" + account + "/job_bytes_freed"
}

// counter reads a decimal counter from a range response (0 when absent).
func counter(r *clientv3.GetResponse) (value, modRev int64) {
	if r == nil || len(r.Kvs) == 0 {
		return 0, 0
	}
	v, _ := strconv.ParseInt(string(r.Kvs[0].Value), 10, 64)
	return v, r.Kvs[0].ModRevision
}

// usageRead is one transaction's reading of what an account holds and its settings.
type usageRead struct {
	rev       int64 // the revision the reads saw
	queued    int64
	created   int64 // the sum of usage/<account>/job_bytes/<shard>
	shards    map[string]shardRead
	freed     int64
	sched     Schedule // the account's sched/<account> record (zero: none)
	schedRev  int64    // its mod revision (0: none)
	overrides LimitOverrides
	storage   storageRead // storage bytes held (storagequota.go)
	streams   int64       // event streams open (streamquota.go)
	parts     usageParts  // what was read
	// seq is how many creates of the account this process had committed when
	// the reading was taken (createbatch.go).
	seq int64
}

func (s *Store) readUsage(ctx context.Context, account string) (usageRead, error) {
	return s.readUsageParts(ctx, account, allUsage)
}

// usageParts says what of an account's usage a reading takes; the account's
// settings always.
type usageParts struct {
	queued, jobBytes, storage, streams bool
	// shard, when jobBytes is not read, is a shard of the byte counter read by
	// itself: the one a create adds to.
	shard string
}

var allUsage = usageParts{queued: true, jobBytes: true, storage: true, streams: true}

// createParts is what checking a create against limits needs: what a limit set
// counts (the count of jobs queued costs etcd a walk of the account's queue),
// and the shard the create writes.
func createParts(l Limits, shard string) usageParts {
	return usageParts{queued: l.MaxQueuedJobs > 0, jobBytes: l.MaxJobBytes > 0, storage: l.MaxStorageBytes > 0, shard: shard}
}

func (p usageParts) covers(q usageParts) bool {
	return (p.queued || !q.queued) && (p.jobBytes || !q.jobBytes) && (p.storage || !q.storage)
}

// readCreateUsage reads what a create under defaults, and the account's own
// limits, needs to be checked, and the shard it adds to: what the defaults
// need, then, if the account's own limits need more, all of it.
func (s *Store) readCreateUsage(ctx context.Context, account string, defaults Limits, shard string) (usageRead, error) {
	return retryTransient(ctx, func(bool) (usageRead, error) {
		p := createParts(defaults, shard)
		u, err := s.readUsageParts(ctx, account, p)
		if err == nil && !p.covers(createParts(u.overrides.Apply(defaults), shard)) {
			all := allUsage
			all.shard = shard
			u, err = s.readUsageParts(ctx, account, all)
		}
		return u, err
	})
}

// readUsageParts reads, in one transaction, the parts p of the account's
// usage; the others stay 0.
func (s *Store) readUsageParts(ctx context.Context, account string, p usageParts) (usageRead, error) {
	ops, parse := s.usageOps(account, p)
	resp, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return usageRead{}, fmt.Errorf("read account usage: %w", err)
	}
	return parse(resp.Responses, resp.Header.Revision), nil
}

// usageOps are the reads of the parts p of the account's usage, and what makes
// a usageRead of their responses: rs, from the first of them on, at revision rev.
// A create's transaction runs them after its writes (createbatch.go).
func (s *Store) usageOps(account string, p usageParts) ([]clientv3.Op, func(rs []*pb.ResponseOp, rev int64) usageRead) {
	const (
		shards = iota
		freed
		storage
		storageFreed
		streams
		queued
		reserved
		parts
	)
	ops := []clientv3.Op{clientv3.OpGet(s.schedKey(account))}
	at := [parts]int{} // where each part's response is; 0: not read
	add := func(part int, op clientv3.Op) {
		at[part] = len(ops)
		ops = append(ops, op)
	}
	if p.jobBytes {
		add(shards, clientv3.OpGet(s.jobBytesPrefix(account), clientv3.WithPrefix()))
		add(freed, clientv3.OpGet(s.freedBytesKey(account)))
	} else if p.shard != "" {
		add(shards, clientv3.OpGet(p.shard))
	}
	if p.storage {
		add(storage, clientv3.OpGet(s.storagePrefix(account), clientv3.WithPrefix()))
		add(storageFreed, clientv3.OpGet(s.storageFreedKey(account)))
	}
	if p.streams {
		add(streams, clientv3.OpGet(s.streamPrefix(account), clientv3.WithPrefix(), clientv3.WithCountOnly()))
	}
	if p.queued {
		add(queued, clientv3.OpGet(s.statusIndexPrefix(account, mj.StatusQueued), clientv3.WithPrefix(), clientv3.WithCountOnly()))
		add(reserved, clientv3.OpGet(s.pipelineReservePrefix(account), clientv3.WithPrefix()))
	}
	parse := func(rs []*pb.ResponseOp, rev int64) usageRead {
		u := usageRead{rev: rev, parts: p}
		rr := func(part int) *clientv3.GetResponse {
			if at[part] == 0 {
				return &clientv3.GetResponse{}
			}
			return (*clientv3.GetResponse)(rs[at[part]].GetResponseRange())
		}
		if kvs := rr(shards).Kvs; len(kvs) > 0 {
			u.shards = make(map[string]shardRead, len(kvs))
			for _, kv := range kvs {
				v, _ := strconv.ParseInt(string(kv.Value), 10, 64)
				u.shards[string(kv.Key)] = shardRead{value: v, modRev: kv.ModRevision}
				u.created += v
			}
		}
		u.freed, _ = counter(rr(freed))
		if kvs := (*clientv3.GetResponse)(rs[0].GetResponseRange()).Kvs; len(kvs) > 0 {
			u.schedRev = kvs[0].ModRevision
			var sc Schedule
			if json.Unmarshal(kvs[0].Value, &sc) == nil {
				u.sched, u.overrides = sc, sc.LimitOverrides
			}
		}
		u.storage = readStorage(rr(storage), rr(storageFreed))
		u.streams = rr(streams).Count
		u.queued = rr(queued).Count
		// Jobs planned by pipelines and not stored yet count as queued
		// (store/pipelines.go): they will be.
		for _, kv := range rr(reserved).Kvs {
			n, _ := strconv.ParseInt(string(kv.Value), 10, 64)
			u.queued += n
		}
		return u
	}
	return ops, parse
}

// shardRead is one shard of the created-bytes counter as read (modRev 0: absent).
type shardRead struct{ value, modRev int64 }

func (u usageRead) usage() Usage {
	return Usage{QueuedJobs: u.queued, JobBytes: max(u.created-u.freed, 0), StorageBytes: u.storage.held(), EventStreams: u.streams}
}

// AccountLimits returns an account's limits (defaults with its overrides), what
// it holds now and its scheduling settings (zero: the defaults), from one etcd
// transaction.
func (s *Store) AccountLimits(ctx context.Context, account string, defaults Limits) (Limits, Usage, Schedule, error) {
	u, err := s.readUsage(ctx, account)
	if err != nil {
		return Limits{}, Usage{}, Schedule{}, err
	}
	return u.overrides.Apply(defaults), u.usage(), u.sched, nil
}

// checkCreate refuses j when storing it would take its account past a limit.
func checkCreate(l Limits, u usageRead, j *mj.Job) error {
	if l.MaxTimeoutSeconds > 0 && int64(j.TimeoutSeconds) > l.MaxTimeoutSeconds {
		return QuotaError("max_timeout_seconds", l.MaxTimeoutSeconds, int64(j.TimeoutSeconds))
	}
	if l.MaxQueuedJobs > 0 && u.queued+1 > l.MaxQueuedJobs {
		return QuotaError("max_queued_jobs", l.MaxQueuedJobs, u.queued)
	}
	if held := u.usage().JobBytes; l.MaxJobBytes > 0 && held+j.RecordBytes > l.MaxJobBytes {
		return QuotaError("max_job_bytes", l.MaxJobBytes, held)
	}
	// Storage is counted after the fact (outputs, first use of a temporary
	// file): an account that reached its limit creates nothing until it frees.
	if held := u.storage.held(); l.MaxStorageBytes > 0 && held >= l.MaxStorageBytes {
		return QuotaError("max_storage_bytes", l.MaxStorageBytes, held)
	}
	return nil
}

// quotaAttempts bounds how often a create is tried again because another create
// of the same account moved its counters in between.
const quotaAttempts = 32

// encodeRecord marshals j with its RecordBytes: the record counts as its size
// with the count written in, plus beside, the bytes the create stores beside it
// (besideBytes), all given back together when the retention deletes the job.
// It marshals once: with a count of the right number of digits, which is then
// written over with the record's own (a second marshal only when the guess of
// digits was wrong).
func encodeRecord(j *mj.Job, beside int64) ([]byte, error) {
	digits := 5 // most records are under 100 KB
	for range 20 {
		j.RecordBytes = pow10(digits - 1) // digits wide
		b, err := json.Marshal(j)
		if err != nil {
			return nil, err
		}
		n := int64(len(b)) + beside
		if d := len(strconv.FormatInt(n, 10)); d != digits {
			digits = d
			continue
		}
		placeholder := `"record_bytes":` + strconv.FormatInt(j.RecordBytes, 10)
		at := recordBytesAt(b, placeholder)
		if at < 0 { // not found as written: the slow way
			j.RecordBytes = n
			return json.Marshal(j)
		}
		j.RecordBytes = n
		strconv.AppendInt(b[:at+len(`"record_bytes":`)], n, 10)
		return b, nil
	}
	return nil, fmt.Errorf("encode job %s: record size does not settle", j.ID)
}

// recordBytesAt finds the record_bytes field written as placeholder in b, the
// job's top-level one: a number, which no user string (a metadata key, say)
// puts after that key.
func recordBytesAt(b []byte, placeholder string) int {
	for off := 0; ; {
		i := bytes.Index(b[off:], []byte(placeholder))
		if i < 0 {
			return -1
		}
		i += off
		if end := i + len(placeholder); end < len(b) && (b[end] == ',' || b[end] == '}') {
			return i
		}
		off = i + 1
	}
}

func pow10(n int) int64 {
	p := int64(1)
	for range n {
		p *= 10
	}
	return p
}

// besideBytes is what a create of j stores beside its record: its
// output_destinations (up to mj.MaxDestinationsBytes) and its Idempotency-Key
// record, keys and values. They count against max_job_bytes with the record, so
// an account cannot hold etcd space its limit does not see.
func (s *Store) besideBytes(j *mj.Job, idem *Idempotency) (int64, error) {
	var n int64
	if j.Destinations != nil {
		b, err := json.Marshal(j.Destinations)
		if err != nil {
			return 0, err
		}
		n += int64(len(s.destinationsKey(j.ID)) + len(b))
	}
	if idem != nil {
		n += int64(len(s.idemKey(j.AccountID, idem.Key)) + len(idemValue(j, idem)))
	}
	return n, nil
}
