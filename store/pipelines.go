package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"strconv"
	"strings"
	"time"

	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Pipelines (docs/pipelines.md). A pipeline is stored in two moves, because
// etcd takes at most 128 operations in a transaction and a pipeline may plan
// hundreds of jobs:
//
//  1. CreatePipeline writes the pipeline's record with its plan (every job,
//     its id assigned, in full), its index key and pmat/<id>, in one
//     transaction checked against the account's limits for all the jobs at
//     once (and its Idempotency-Key record), with pqueued/<account>/<id>:
//     the planned jobs count as queued until stored. Nothing else is stored
//     yet.
//  2. MaterialisePipeline stores the planned jobs in batches, each job only
//     if its key is absent, each batch conditioned on the record being
//     unchanged, each lowering the reservation by its jobs; then one write
//     drops the plan from the record, and pmat/<id> and the reservation with
//     it.
//
// The gateway runs both in the create request. If it dies between them, the
// leader (dispatcher/pipelines.go) finds pmat/<id> and runs step 2: storing a
// job twice is impossible (create-if-absent), so both may run at once. A
// pipeline stopped before all its jobs are stored (cancelled, fail_fast) has
// the rest stored cancelled, so each job of the plan exists and ends once.

func (s *Store) pipelineKey(id string) string { return s.p + "pipelines/" + id }

// pipelineIndexKey orders an account's pipelines newest first, as idx/ does jobs.
func (s *Store) pipelineIndexKey(p *mj.Pipeline) string {
	inv := math.MaxInt64 - p.CreatedAt.UnixNano()
	return fmt.Sprintf("%s%019d-%s", s.pipelineIndexPrefix(p.AccountID), inv, p.ID)
}

func (s *Store) pipelineIndexPrefix(account string) string { return s.p + "pidx/" + account + "/" }

// PipelinePendingPrefix holds pmat/<id> = created_at (unix ns): pipelines whose
// jobs are not all stored yet.
func (s *Store) PipelinePendingPrefix() string { return s.p + "pmat/" }

// pipelineReservePrefix holds pqueued/<account>/<id> = the number of jobs of
// the account's pipeline id planned and not stored yet (reserveValue): they
// count as queued against max_queued_jobs (limits.go) from the pipeline's
// create to the batch that stores them, each batch lowering it by its jobs,
// the write that drops the plan deleting it.
func (s *Store) pipelineReservePrefix(account string) string { return s.p + "pqueued/" + account + "/" }

func (s *Store) pipelineReserveKey(p *mj.Pipeline) string {
	return s.pipelineReservePrefix(p.AccountID) + p.ID
}

// reserveValue writes a reservation zero-padded, so that etcd's compare of
// values (bytewise) orders them as numbers.
func reserveValue(n int) string { return fmt.Sprintf("%010d", n) }

// PipelineRunningPrefix holds prun/<id>: pipelines that have not ended.
func (s *Store) PipelineRunningPrefix() string { return s.p + "prun/" }

// PipelineOutboxPrefix holds poutbox/<id> = status: pipeline webhooks to deliver.
func (s *Store) PipelineOutboxPrefix() string { return s.p + "poutbox/" }

// PipelineFollowPrefix holds pfollow/<id>: chunked pipelines that ended
// whose owner may not have followed yet (docs/chunked.md). Put by the write
// that ends the pipeline; deleted once its owner ended (or is gone), by
// FollowedPipeline, so that a leader dying between the two writes leaves its
// successor the owner to end.
func (s *Store) PipelineFollowPrefix() string { return s.p + "pfollow/" }

// FollowedPipeline deletes pfollow/<id>: pipeline id's owner has ended.
func (s *Store) FollowedPipeline(ctx context.Context, id string) error {
	_, err := retryTransient(ctx, func(bool) (*clientv3.DeleteResponse, error) {
		return s.cli.Delete(ctx, s.PipelineFollowPrefix()+id)
	})
	return err
}

// pipelineIdemKey is the Idempotency-Key record of a pipeline create: beside
// the jobs' (swept with them), never equal to one.
func (s *Store) pipelineIdemKey(account, key string) string {
	return s.idemKey(account, "pipeline\x00"+key)
}

// maxPipelineRecord bounds a pipeline's record with its plan: one etcd value,
// well inside etcd's default request size (1.5 MiB).
const maxPipelineRecord = 1 << 20

// pipelineDerivedOps are the keys that follow from a pipeline's record, as
// derivedOps are a job's: pmat/ and the reservation of its planned jobs while
// jobs are planned, prun/ until it ends, poutbox/ while its webhook is due.
func (s *Store) pipelineDerivedOps(old, p *mj.Pipeline) []clientv3.Op {
	var ops []clientv3.Op
	pending := func(p *mj.Pipeline) bool { return p != nil && len(p.Plan) > 0 }
	running := func(p *mj.Pipeline) bool { return p != nil && !p.Status.Terminal() }
	due := func(p *mj.Pipeline) bool {
		return p != nil && p.Status.Terminal() && p.Webhook != nil && p.Webhook.Status == mj.WebhookPending
	}
	switch {
	case pending(p) && !pending(old):
		ops = append(ops, clientv3.OpPut(s.PipelinePendingPrefix()+p.ID, strconv.FormatInt(p.CreatedAt.UnixNano(), 10)),
			clientv3.OpPut(s.pipelineReserveKey(p), reserveValue(len(p.Plan))))
	case !pending(p) && pending(old):
		ops = append(ops, clientv3.OpDelete(s.PipelinePendingPrefix()+p.ID), clientv3.OpDelete(s.pipelineReserveKey(old)))
	}
	switch {
	case running(p) && !running(old):
		ops = append(ops, clientv3.OpPut(s.PipelineRunningPrefix()+p.ID, ""))
	case !running(p) && running(old):
		ops = append(ops, clientv3.OpDelete(s.PipelineRunningPrefix()+p.ID))
		ops = append(ops, clientv3.OpPut(s.pipelineDoneKey(p), p.ID)) // for the retention
		if p.Kind == mj.PipelineKindChunked {
			ops = append(ops, clientv3.OpPut(s.PipelineFollowPrefix()+p.ID, ""))
		}
	}
	switch {
	case due(p) && !due(old):
		ops = append(ops, clientv3.OpPut(s.PipelineOutboxPrefix()+p.ID, string(p.Status)))
	case !due(p) && due(old):
		ops = append(ops, clientv3.OpDelete(s.PipelineOutboxPrefix()+p.ID))
	}
	return ops
}

// CreatePipeline stores p, with every job of its plan, as step 1 above: within
// the account's limits for all the planned jobs at once (defaults, replaced by
// its own), unless idem names a pipeline created before, which it returns
// instead. Reusing a key with another request is a conflict. The planned jobs
// get their record sizes and the account's max_input_bytes here, as a job's
// create gives them.
func (s *Store) CreatePipeline(ctx context.Context, p *mj.Pipeline, idem *Idempotency, defaults Limits) (*mj.Pipeline, error) {
	if idem != nil {
		// The hash its record is named by (pipelineIdemKey): the retention
		// deletes the record with the pipeline, as a job's.
		sum := sha256.Sum256([]byte("pipeline\x00" + idem.Key))
		p.IdemHash = hex.EncodeToString(sum[:])
		if prior, err := s.IdempotentPipeline(ctx, p.AccountID, idem); prior != nil || err != nil {
			return prior, err
		}
	}
	shardKey := s.jobBytesKey(p.AccountID, p.ID)
	for attempt := 0; ; attempt++ {
		// Every shard of the byte counter is read: near max_queued_jobs they
		// are all written (below).
		u, err := retryTransient(ctx, func(bool) (usageRead, error) {
			all := allUsage
			all.shard = shardKey
			return s.readUsageParts(ctx, p.AccountID, all)
		})
		if err != nil {
			return nil, err
		}
		limits := u.overrides.Apply(defaults)
		var total int64
		for _, j := range p.Plan {
			j.MaxInputBytes = limits.MaxInputBytes
			if _, err := encodeRecord(j, 0); err != nil {
				return nil, err
			}
			total += j.RecordBytes
		}
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		if err := pipelineTooLarge(len(b)); err != nil {
			return nil, err
		}
		if err := checkPipeline(limits, u, p, total); err != nil {
			return nil, err
		}
		ops := append([]clientv3.Op{
			clientv3.OpPut(s.pipelineKey(p.ID), string(b)),
			clientv3.OpPut(s.pipelineIndexKey(p), p.ID),
			clientv3.OpPut(shardKey, strconv.FormatInt(u.shards[shardKey].value+total, 10)),
		}, s.pipelineDerivedOps(nil, p)...)
		conds := []clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.pipelineKey(p.ID)), "=", 0)}
		if idem != nil {
			ik := s.pipelineIdemKey(p.AccountID, idem.Key)
			rec, _ := json.Marshal(idemRecord{JobID: p.ID, Fingerprint: idem.Fingerprint, CreatedAt: p.CreatedAt})
			ops = append(ops, clientv3.OpPut(ik, string(rec)))
			conds = append(conds, clientv3.Compare(clientv3.CreateRevision(ik), "=", 0))
		}
		// The usage read still holds, as a job's create checks (createOnce).
		conds = append(conds, clientv3.Compare(clientv3.ModRevision(shardKey), "=", u.shards[shardKey].modRev))
		if limits.MaxQueuedJobs > 0 && u.queued+int64(len(p.Plan))+queuedRaceMargin >= limits.MaxQueuedJobs {
			// Near the limit: no job queued and no pipeline's jobs reserved
			// since the reading; and every shard of the byte counter is
			// rewritten as read (none changed since), so that a job's create
			// that read before this reservation, whose transaction compares
			// its shard, fails and reads again (docs/limits.md).
			conds = append(conds,
				clientv3.Compare(clientv3.ModRevision(s.statusIndexPrefix(p.AccountID, mj.StatusQueued)), "<", u.rev+1).WithPrefix(),
				clientv3.Compare(clientv3.ModRevision(s.pipelineReservePrefix(p.AccountID)), "<", u.rev+1).WithPrefix(),
				clientv3.Compare(clientv3.ModRevision(s.jobBytesPrefix(p.AccountID)), "<", u.rev+1).WithPrefix())
			for i := range jobBytesShards {
				if k := s.jobBytesPrefix(p.AccountID) + strconv.Itoa(i); k != shardKey {
					ops = append(ops, clientv3.OpPut(k, strconv.FormatInt(u.shards[k].value, 10)))
				}
			}
		}
		resp, err := retryTransient(ctx, func(bool) (*clientv3.TxnResponse, error) {
			return s.cli.Txn(ctx).If(conds...).Then(ops...).Commit()
		})
		if err != nil {
			return nil, fmt.Errorf("store pipeline: %w", err)
		}
		if resp.Succeeded {
			p.Revision = resp.Header.Revision
			return p, nil
		}
		// A create that seemed to fail and was stored, a racing retry with the
		// same key, or the account's usage moved: look, then try again.
		if stored, err := s.Pipeline(ctx, p.ID); err == nil {
			return stored, nil
		}
		if idem != nil {
			if prior, err := s.IdempotentPipeline(ctx, p.AccountID, idem); prior != nil || err != nil {
				return prior, err
			}
		}
		if attempt == quotaAttempts {
			return nil, mj.Errorf(mj.EUnavailable, "too many creates of this account at once; try again")
		}
	}
}

// pipelineTooLarge refuses a pipeline record of n bytes past maxPipelineRecord.
func pipelineTooLarge(n int) error {
	if n <= maxPipelineRecord {
		return nil
	}
	e := mj.Errorf(mj.EValidation, "steps: the pipeline's jobs take %d bytes as stored; at most %d in one pipeline (fewer items in for_each, or shorter commands)", n, maxPipelineRecord)
	e.Details = map[string]string{"steps": "too large"}
	return e
}

// checkPipeline refuses a pipeline whose planned jobs (total: their record
// bytes) would take its account past a limit, as checkCreate does one job.
func checkPipeline(l Limits, u usageRead, p *mj.Pipeline, total int64) error {
	for _, j := range p.Plan {
		if l.MaxTimeoutSeconds > 0 && int64(j.TimeoutSeconds) > l.MaxTimeoutSeconds {
			return QuotaError("max_timeout_seconds", l.MaxTimeoutSeconds, int64(j.TimeoutSeconds))
		}
	}
	if n := int64(len(p.Plan)); l.MaxQueuedJobs > 0 && u.queued+n > l.MaxQueuedJobs {
		return QuotaError("max_queued_jobs", l.MaxQueuedJobs, u.queued)
	}
	if held := u.usage().JobBytes; l.MaxJobBytes > 0 && held+total > l.MaxJobBytes {
		return QuotaError("max_job_bytes", l.MaxJobBytes, held)
	}
	if held := u.storage.held(); l.MaxStorageBytes > 0 && held >= l.MaxStorageBytes {
		return QuotaError("max_storage_bytes", l.MaxStorageBytes, held)
	}
	return nil
}

// CheckPipeline runs CreatePipeline's checks of the account's limits without
// the write (a dry run).
func (s *Store) CheckPipeline(ctx context.Context, p *mj.Pipeline, defaults Limits) error {
	u, err := retryTransient(ctx, func(bool) (usageRead, error) { return s.readUsage(ctx, p.AccountID) })
	if err != nil {
		return err
	}
	limits := u.overrides.Apply(defaults)
	var total int64
	dry := *p
	dry.Plan = make([]*mj.Job, len(p.Plan))
	for i, planned := range p.Plan {
		j := *planned
		j.MaxInputBytes = limits.MaxInputBytes
		if _, err := encodeRecord(&j, 0); err != nil {
			return err
		}
		total += j.RecordBytes
		dry.Plan[i] = &j
	}
	// The record as CreatePipeline would write it, within one etcd value.
	b, err := json.Marshal(&dry)
	if err != nil {
		return err
	}
	if err := pipelineTooLarge(len(b)); err != nil {
		return err
	}
	return checkPipeline(limits, u, p, total)
}

// IdempotentPipeline is the pipeline an earlier create of account with idem
// stored, nil if none; a reuse of the key with another request is a conflict.
func (s *Store) IdempotentPipeline(ctx context.Context, account string, idem *Idempotency) (*mj.Pipeline, error) {
	resp, err := s.cli.Get(ctx, s.pipelineIdemKey(account, idem.Key))
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
	p, err := s.Pipeline(ctx, rec.JobID)
	if mj.ErrorCode(err) == mj.ENotFound {
		// Deleted by the retention, its record left (one written before the
		// retention deleted records with their pipelines): none, as for a
		// job, whose record goes with it. The record goes now, unless
		// rewritten meanwhile, so the create can write its own.
		kv := resp.Kvs[0]
		_, err := s.cli.Txn(ctx).If(clientv3.Compare(clientv3.ModRevision(string(kv.Key)), "=", kv.ModRevision)).
			Then(clientv3.OpDelete(string(kv.Key))).Commit()
		return nil, err
	}
	return p, err
}

// Pipeline returns the pipeline with id, or mj.ErrNotFound.
func (s *Store) Pipeline(ctx context.Context, id string) (*mj.Pipeline, error) {
	resp, err := s.cli.Get(ctx, s.pipelineKey(id))
	if err != nil {
		return nil, fmt.Errorf("get pipeline: %w", err)
	}
	if len(resp.Kvs) == 0 {
		return nil, mj.ErrNotFound
	}
	return decodePipeline(resp.Kvs[0].Value, resp.Kvs[0].ModRevision)
}

func decodePipeline(b []byte, rev int64) (*mj.Pipeline, error) {
	var p mj.Pipeline
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("decode pipeline: %w", err)
	}
	p.Revision = rev
	return &p, nil
}

// UpdatePipeline applies fn to the current pipeline and writes the result, with
// its derived keys, if it did not change in between (retrying on a race). fn
// may return an error to write nothing.
func (s *Store) UpdatePipeline(ctx context.Context, id string, fn func(*mj.Pipeline) error) (*mj.Pipeline, error) {
	for attempt := 0; ; attempt++ {
		old, err := s.Pipeline(ctx, id)
		if err != nil {
			return nil, err
		}
		p, err := s.Pipeline(ctx, id) // a copy fn may change at will
		if err != nil {
			return nil, err
		}
		if err := fn(p); err != nil {
			return nil, err
		}
		p.UpdatedAt = time.Now().UTC()
		b, err := json.Marshal(p)
		if err != nil {
			return nil, err
		}
		ops := append([]clientv3.Op{clientv3.OpPut(s.pipelineKey(id), string(b))}, s.pipelineDerivedOps(old, p)...)
		resp, err := s.commit(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.pipelineKey(id)), "=", old.Revision)}, ops, nil)
		if err != nil {
			return nil, fmt.Errorf("update pipeline: %w", err)
		}
		if resp.Succeeded {
			p.Revision = resp.Header.Revision
			return p, nil
		}
		if attempt >= 50 {
			return nil, mj.Errorf(mj.EConflict, "pipeline %s is being changed concurrently; try again", id)
		}
	}
}

// Bounds of one batch of MaterialisePipeline, as UpdateJobs's.
const (
	materialiseJobs  = 64
	materialiseBytes = 1 << 20
)

// MaterialisePipeline stores the jobs of pipeline id's plan that are not
// stored yet, as step 2 above, and returns the pipeline without its plan. Jobs
// stored after the pipeline was stopped are stored cancelled (at now). Safe to
// run more than once, and at once in several processes.
func (s *Store) MaterialisePipeline(ctx context.Context, id string, now time.Time) (*mj.Pipeline, error) {
	for attempt := 0; ; attempt++ {
		p, err := s.Pipeline(ctx, id)
		if err != nil || len(p.Plan) == 0 {
			return p, err
		}
		cond := []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.pipelineKey(id)), "=", p.Revision)}
		changed := false
		var txns []clientv3.Op
		size, next := 0, 0 // next: the plan's first job not in txns
		rk := s.pipelineReserveKey(p)
		flush := func() error {
			if len(txns) == 0 {
				return nil
			}
			// The reservation drops to the jobs after this batch, unless a
			// batch of another process took it lower (values compare as
			// numbers, reserveValue): exact whoever stores which batch.
			left := reserveValue(len(p.Plan) - next)
			txns = append(txns, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.Value(rk), ">", left)},
				[]clientv3.Op{clientv3.OpPut(rk, left)}, nil))
			resp, err := s.commit(ctx, cond, txns, nil)
			txns, size = txns[:0], 0
			if err != nil {
				return fmt.Errorf("store a pipeline's jobs: %w", err)
			}
			changed = !resp.Succeeded
			return nil
		}
		for _, planned := range p.Plan {
			j := *planned
			if p.Stop != "" {
				j.Cancel(now.UTC(), "cancelled before it started: "+p.Stop)
				j.Awaits = nil
			}
			b, err := json.Marshal(&j)
			if err != nil {
				return nil, err
			}
			ops := append([]clientv3.Op{
				clientv3.OpPut(s.jobKey(j.ID), string(b)),
				clientv3.OpPut(s.indexKey(&j), j.ID),
			}, s.derivedOps(nil, &j)...)
			if len(txns) == materialiseJobs || size+len(b) > materialiseBytes {
				if err := flush(); err != nil || changed {
					break
				}
			}
			txns = append(txns, clientv3.OpTxn([]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(s.jobKey(j.ID)), "=", 0)}, ops, nil))
			size += len(b)
			next++
		}
		if !changed {
			if err := flush(); err != nil {
				return nil, err
			}
		}
		if changed { // stopped meanwhile, or finished by another process: again
			if attempt >= 50 {
				return nil, mj.Errorf(mj.EConflict, "pipeline %s is being changed concurrently; try again", id)
			}
			continue
		}
		done := *p
		done.Plan, done.UpdatedAt = nil, now.UTC()
		b, err := json.Marshal(&done)
		if err != nil {
			return nil, err
		}
		ops := append([]clientv3.Op{clientv3.OpPut(s.pipelineKey(id), string(b))}, s.pipelineDerivedOps(p, &done)...)
		resp, err := s.commit(ctx, cond, ops, nil)
		if err != nil {
			return nil, fmt.Errorf("store a pipeline's jobs: %w", err)
		}
		if resp.Succeeded {
			done.Revision = resp.Header.Revision
			return &done, nil
		}
	}
}

// PendingPipelines lists the pipelines whose jobs are not all stored, with
// when each was created.
func (s *Store) PendingPipelines(ctx context.Context) (map[string]time.Time, error) {
	resp, err := s.cli.Get(ctx, s.PipelinePendingPrefix(), clientv3.WithPrefix())
	if err != nil {
		return nil, err
	}
	out := make(map[string]time.Time, len(resp.Kvs))
	for _, kv := range resp.Kvs {
		ns, _ := strconv.ParseInt(string(kv.Value), 10, 64)
		out[strings.TrimPrefix(string(kv.Key), s.PipelinePendingPrefix())] = time.Unix(0, ns)
	}
	return out, nil
}

// TailMaterialised calls fn with the id of every pipeline whose jobs all came
// to be stored (its pmat/<id> deleted) from now on, until ctx ends: the
// leader settles it then, a job of it that ended meanwhile having been
// passed over. A watch that fails is taken again from now (the leader's
// resync covers the gap).
func (s *Store) TailMaterialised(ctx context.Context, log *slog.Logger, fn func(ctx context.Context, id string)) {
	prefix := s.PipelinePendingPrefix()
	for ctx.Err() == nil {
		for resp := range s.cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix()) {
			if err := resp.Err(); err != nil {
				log.Warn("watch of stored pipelines failed; watching again", "err", err)
				break
			}
			for _, ev := range resp.Events {
				if ev.Type == clientv3.EventTypeDelete {
					fn(ctx, strings.TrimPrefix(string(ev.Kv.Key), prefix))
				}
			}
		}
		sleep(ctx, time.Second)
	}
}

// PipelineIDs lists the pipeline ids under prefix (PipelineRunningPrefix,
// PipelineOutboxPrefix).
func (s *Store) PipelineIDs(ctx context.Context, prefix string) ([]string, error) {
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		return nil, err
	}
	ids := make([]string, len(resp.Kvs))
	for i, kv := range resp.Kvs {
		ids[i] = strings.TrimPrefix(string(kv.Key), prefix)
	}
	return ids, nil
}

// ListPipelines returns a page of the account's pipelines, newest first, and
// how many it has.
func (s *Store) ListPipelines(ctx context.Context, account string, limit, offset int) ([]*mj.Pipeline, int, error) {
	prefix := s.pipelineIndexPrefix(account)
	count, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
	if err != nil {
		return nil, 0, fmt.Errorf("count pipelines: %w", err)
	}
	resp, err := s.cli.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithLimit(int64(offset+limit)))
	if err != nil {
		return nil, 0, fmt.Errorf("list pipelines: %w", err)
	}
	if offset >= len(resp.Kvs) {
		return nil, int(count.Count), nil
	}
	kvs := resp.Kvs[offset:]
	ops := make([]clientv3.Op, len(kvs))
	for i, kv := range kvs {
		ops[i] = clientv3.OpGet(s.pipelineKey(string(kv.Value)))
	}
	tx, err := s.cli.Txn(ctx).Then(ops...).Commit()
	if err != nil {
		return nil, 0, fmt.Errorf("read pipelines: %w", err)
	}
	var out []*mj.Pipeline
	for _, r := range tx.Responses {
		for _, kv := range r.GetResponseRange().Kvs {
			p, err := decodePipeline(kv.Value, kv.ModRevision)
			if err != nil {
				return nil, 0, err
			}
			out = append(out, p)
		}
	}
	return out, int(count.Count), nil
}

// pipelineDoneKey orders ended pipelines by when they ended, as done/ does
// jobs: the janitor deletes them job_retention after (DeleteEndedPipelines).
func (s *Store) pipelineDoneKey(p *mj.Pipeline) string {
	at := p.UpdatedAt
	if p.FinishedAt != nil {
		at = *p.FinishedAt
	}
	return fmt.Sprintf("%s%019d_%s", s.pipelineDonePrefix(), at.UnixNano(), p.ID)
}

func (s *Store) pipelineDonePrefix() string { return s.p + "pdone/" }

// DeleteEndedPipelines deletes the pipelines that ended before cutoff, with
// their index and done keys, at most max (0: all), in bounded
// batches; one whose webhook is still pending is kept. Their jobs go with the
// jobs' own retention (DeleteFinishedJobs), which the same cutoff has reached:
// a pipeline ends after its last job. It returns how many it deleted.
func (s *Store) DeleteEndedPipelines(ctx context.Context, cutoff time.Time, max int) (int, error) {
	end := fmt.Sprintf("%s%019d", s.pipelineDonePrefix(), cutoff.UnixNano())
	from, deleted := s.pipelineDonePrefix(), 0
	for max == 0 || deleted < max {
		resp, err := s.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(deleteBatch))
		if err != nil {
			return deleted, fmt.Errorf("list ended pipelines: %w", err)
		}
		if len(resp.Kvs) == 0 {
			return deleted, nil
		}
		for _, kv := range resp.Kvs {
			ok, err := s.deleteEndedPipeline(ctx, string(kv.Value), string(kv.Key))
			if err != nil {
				return deleted, err
			}
			if ok {
				deleted++
			}
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return deleted, nil
}

// deleteEndedPipeline deletes pipeline id and its keys unless it changed since
// it was read, or its webhook is still pending.
func (s *Store) deleteEndedPipeline(ctx context.Context, id, doneKey string) (bool, error) {
	resp, err := s.cli.Get(ctx, s.pipelineKey(id))
	if err != nil {
		return false, fmt.Errorf("read an ended pipeline: %w", err)
	}
	if len(resp.Kvs) == 0 { // deleted already: only the done key was left
		_, err := s.cli.Delete(ctx, doneKey)
		return err == nil, err
	}
	var p mj.Pipeline
	if err := json.Unmarshal(resp.Kvs[0].Value, &p); err != nil || !p.Status.Terminal() ||
		(p.Webhook != nil && p.Webhook.Status == mj.WebhookPending) {
		return false, nil
	}
	ops := []clientv3.Op{
		clientv3.OpDelete(s.pipelineKey(id)),
		clientv3.OpDelete(s.pipelineIndexKey(&p)),
		clientv3.OpDelete(s.PipelineOutboxPrefix() + id),
		clientv3.OpDelete(s.PipelineFollowPrefix() + id),
		clientv3.OpDelete(s.pipelineReserveKey(&p)),
		clientv3.OpDelete(doneKey),
	}
	if p.IdemHash != "" {
		// Its Idempotency-Key record goes with it, as a job's does
		// (retention.go): a retry then creates anew. Only the record written
		// with it (same create revision): a later create may have reused the key.
		ik := s.p + "idem/" + p.AccountID + "/" + p.IdemHash
		ops = append(ops, clientv3.OpTxn(
			[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(ik), "=", resp.Kvs[0].CreateRevision)},
			[]clientv3.Op{clientv3.OpDelete(ik)}, nil))
	}
	r, err := s.commit(ctx, []clientv3.Cmp{clientv3.Compare(clientv3.ModRevision(s.pipelineKey(id)), "=", resp.Kvs[0].ModRevision)}, ops, nil)
	if err != nil {
		return false, fmt.Errorf("delete an ended pipeline: %w", err)
	}
	return r.Succeeded, nil
}

// WatchPipelines calls fn with the id of every pipeline record written or
// deleted after revision from, until ctx ends or the watch fails; it returns
// why. A watcher that needs the record reads it.
func (s *Store) WatchPipelines(ctx context.Context, from int64, fn func(id string)) error {
	wctx, cancel := context.WithCancel(clientv3.WithRequireLeader(ctx))
	defer cancel()
	prefix := s.pipelineKey("")
	for resp := range s.cli.Watch(wctx, prefix, clientv3.WithPrefix(), clientv3.WithRev(from+1)) {
		if err := resp.Err(); err != nil {
			return err
		}
		for _, ev := range resp.Events {
			fn(string(ev.Kv.Key[len(prefix):]))
		}
	}
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return fmt.Errorf("pipeline watch closed")
}

// ExpireOutputs ends the count of job j's outputs against its account's
// storage as of now, for outputs deleted before their retention (a pipeline
// step's intermediate outputs, when its pipeline ends): their held record
// expires now, so the janitor's next sweep gives their bytes back. Outputs not
// counted yet get a record of 0 bytes expiring now, and their tally/ entry
// goes: a count after it (the settler's, or the janitor's) counts nothing.
// Safe to run again.
func (s *Store) ExpireOutputs(ctx context.Context, j *mj.Job, now time.Time) error {
	obj := OutputsObject(j.ID)
	hk := s.heldKey(j.AccountID, obj)
	for attempt := 0; attempt <= quotaAttempts; attempt++ {
		resp, err := s.cli.Get(ctx, hk)
		if err != nil {
			return fmt.Errorf("read held storage: %w", err)
		}
		var conds []clientv3.Cmp
		var ops []clientv3.Op
		h := Held{Expires: now.UTC()}
		if len(resp.Kvs) == 0 {
			conds = append(conds, clientv3.Compare(clientv3.CreateRevision(hk), "=", 0))
			ops = append(ops, clientv3.OpDelete(s.tallyKey(j.ID)))
		} else {
			var old Held
			json.Unmarshal(resp.Kvs[0].Value, &old) // damaged: expires now with 0 bytes
			if !old.Expires.After(now) {
				return nil // expires already
			}
			h.Bytes, h.Blob = old.Bytes, old.Blob
			conds = append(conds, clientv3.Compare(clientv3.ModRevision(hk), "=", resp.Kvs[0].ModRevision))
			ops = append(ops, clientv3.OpDelete(s.heldExpKey(j.AccountID, obj, old.Expires)))
		}
		rec, err := json.Marshal(h)
		if err != nil {
			return err
		}
		ops = append(ops, clientv3.OpPut(hk, string(rec)), clientv3.OpPut(s.heldExpKey(j.AccountID, obj, h.Expires), string(rec)))
		r, err := s.commit(ctx, conds, ops, nil)
		if err != nil {
			return fmt.Errorf("expire held storage: %w", err)
		}
		if r.Succeeded {
			return nil
		}
	}
	return fmt.Errorf("expire held storage: too many concurrent updates of account %s", j.AccountID)
}
