package store

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// Finished jobs are found for deletion by done/<finished_at>_<id>, a key written in
// the transaction that ends the job (derivedOps), so the janitor reads the expired
// ones in time order instead of scanning every job.

func (s *Store) doneKey(j *mj.Job) string {
	at := j.UpdatedAt
	if j.FinishedAt != nil {
		at = *j.FinishedAt
	}
	return fmt.Sprintf("%s%019d_%s", s.DonePrefix(), at.UnixNano(), j.ID)
}

// DonePrefix holds one key per finished job, ordered by when it finished.
func (s *Store) DonePrefix() string { return s.p + "done/" }

// deleteBatch is how many jobs one pass of DeleteFinishedJobs reads at a time (a
// job may be up to mj.JobRecordBudget, so a read stays a few MiB at worst);
// deleteTxn how many go in one etcd transaction (each is about eight operations,
// and etcd allows 128 in a request by default).
const (
	deleteBatch = 25
	deleteTxn   = 12
)

// DeleteFinishedJobs deletes the jobs that finished before cutoff, with every key
// derived from them (account and status indexes, progress, outbox, the done key and
// the idempotency record that created them), at most max jobs (0: all), in bounded
// batches. A job whose webhook is still pending is kept: its delivery is not lost
// to the retention. It returns how many jobs it deleted.
func (s *Store) DeleteFinishedJobs(ctx context.Context, cutoff time.Time, max int) (int, error) {
	end := fmt.Sprintf("%s%019d", s.DonePrefix(), cutoff.UnixNano())
	from, deleted := s.DonePrefix(), 0
	for max == 0 || deleted < max {
		resp, err := s.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(deleteBatch))
		if err != nil {
			return deleted, fmt.Errorf("list finished jobs: %w", err)
		}
		if len(resp.Kvs) == 0 {
			return deleted, nil
		}
		ids := make([]string, len(resp.Kvs))
		for i, kv := range resp.Kvs {
			ids[i] = string(kv.Value)
		}
		n, err := s.deleteJobs(ctx, ids, resp.Kvs)
		deleted += n
		if err != nil {
			return deleted, err
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	return deleted, nil
}

func (s *Store) deleteJobs(ctx context.Context, ids []string, done []*mvccpb.KeyValue) (int, error) {
	gets := make([]clientv3.Op, len(ids))
	for i, id := range ids {
		gets[i] = clientv3.OpGet(s.jobKey(id))
	}
	read, err := s.cli.Txn(ctx).Then(gets...).Commit()
	if err != nil {
		return 0, fmt.Errorf("read finished jobs: %w", err)
	}
	var chunk []deletion
	n := 0
	commit := func() error {
		if len(chunk) == 0 {
			return nil
		}
		// All of the chunk in one transaction, with the bytes its jobs counted
		// against their accounts given back (docs/limits.md); if one of its jobs
		// changed meanwhile, each job on its own.
		ok, err := s.deleteChunk(ctx, chunk)
		if err != nil {
			return fmt.Errorf("delete finished jobs: %w", err)
		}
		if ok {
			n += len(chunk)
		} else {
			for _, d := range chunk {
				ok, err := s.deleteChunk(ctx, []deletion{d})
				if err != nil {
					return fmt.Errorf("delete finished jobs: %w", err)
				}
				if ok {
					n++
				}
			}
		}
		chunk = chunk[:0]
		return nil
	}
	for i, r := range read.Responses {
		kvs := r.GetResponseRange().Kvs
		doneKey := string(done[i].Key)
		if len(kvs) == 0 { // deleted already: only the done key was left
			chunk = append(chunk, deletion{ops: []clientv3.Op{clientv3.OpDelete(doneKey)}})
			continue
		}
		var j mj.Job
		if err := json.Unmarshal(kvs[0].Value, &j); err != nil || !j.Status.Terminal() ||
			(j.Webhook != nil && j.Webhook.Status == mj.WebhookPending) {
			continue
		}
		ops := []clientv3.Op{
			clientv3.OpDelete(s.jobKey(j.ID)),
			clientv3.OpDelete(s.indexKey(&j)),
			clientv3.OpDelete(s.statusIndexKey(&j)),
			clientv3.OpDelete(s.progressKey(j.ID)),
			clientv3.OpDelete(s.outboxKey(j.ID)),
			clientv3.OpDelete(s.tallyKey(j.ID)),
			clientv3.OpDelete(doneKey),
		}
		if j.HasDestinations {
			ops = append(ops, clientv3.OpDelete(s.destinationsKey(j.ID)))
		}
		if j.IdemHash != "" {
			// The record is the one that created this job only if it was created
			// with it (one transaction): a later job may have reused the key.
			ik := s.p + "idem/" + j.AccountID + "/" + j.IdemHash
			ops = append(ops, clientv3.OpTxn(
				[]clientv3.Cmp{clientv3.Compare(clientv3.CreateRevision(ik), "=", kvs[0].CreateRevision)},
				[]clientv3.Op{clientv3.OpDelete(ik)}, nil))
		}
		cmp := clientv3.Compare(clientv3.ModRevision(s.jobKey(j.ID)), "=", kvs[0].ModRevision)
		chunk = append(chunk, deletion{cmp: &cmp, ops: ops, account: j.AccountID, bytes: j.RecordBytes})
		if len(chunk) == deleteTxn {
			if err := commit(); err != nil {
				return n, err
			}
		}
	}
	return n, commit()
}

// deletion is one job's part of a retention transaction.
type deletion struct {
	cmp     *clientv3.Cmp
	ops     []clientv3.Op
	account string
	bytes   int64 // what the job counted against the account's max_job_bytes
}

// deleteChunk deletes the chunk's jobs in one transaction that also adds their
// bytes to their accounts' usage/<account>/job_bytes_freed counters (written by
// the retention only, under the dispatcher's leadership guard). It reports
// whether the transaction applied: false when a job or counter changed since read.
func (s *Store) deleteChunk(ctx context.Context, chunk []deletion) (bool, error) {
	freed := map[string]int64{}
	for _, d := range chunk {
		if d.bytes > 0 {
			freed[d.account] += d.bytes
		}
	}
	var cmps []clientv3.Cmp
	var ops []clientv3.Op
	if len(freed) > 0 {
		accounts := make([]string, 0, len(freed))
		gets := make([]clientv3.Op, 0, len(freed))
		for a := range freed {
			accounts = append(accounts, a)
			gets = append(gets, clientv3.OpGet(s.freedBytesKey(a)))
		}
		resp, err := s.cli.Txn(ctx).Then(gets...).Commit()
		if err != nil {
			return false, err
		}
		for i, a := range accounts {
			v, rev := counter((*clientv3.GetResponse)(resp.Responses[i].GetResponseRange()))
			cmps = append(cmps, clientv3.Compare(clientv3.ModRevision(s.freedBytesKey(a)), "=", rev))
			ops = append(ops, clientv3.OpPut(s.freedBytesKey(a), strconv.FormatInt(v+freed[a], 10)))
		}
	}
	for _, d := range chunk {
		if d.cmp != nil {
			cmps = append(cmps, *d.cmp)
		}
		ops = append(ops, d.ops...)
	}
	resp, err := s.commit(ctx, cmps, ops, nil)
	if err != nil {
		return false, err
	}
	return resp.Succeeded, nil
}

// BackfillDone writes the done key of finished jobs stored before done keys
// existed, once per store (a marker key records that it ran), a page at a time.
func (s *Store) BackfillDone(ctx context.Context) (int, error) {
	marker := s.p + "migrations/done_index"
	if resp, err := s.cli.Get(ctx, marker, clientv3.WithCountOnly()); err != nil || resp.Count > 0 {
		return 0, err
	}
	prefix, n := s.p+"jobs/", 0
	end := clientv3.GetPrefixRangeEnd(prefix)
	for from := prefix; ; {
		resp, err := s.cli.Get(ctx, from, clientv3.WithRange(end), clientv3.WithLimit(deleteBatch))
		if err != nil {
			return n, err
		}
		var ops []clientv3.Op
		for _, kv := range resp.Kvs {
			var j mj.Job
			if json.Unmarshal(kv.Value, &j) == nil && j.Status.Terminal() {
				ops = append(ops, clientv3.OpPut(s.doneKey(&j), j.ID))
			}
		}
		for len(ops) > 0 {
			k := min(len(ops), 100)
			if _, err := s.batch(ctx, ops[:k]); err != nil {
				return n, err
			}
			n, ops = n+k, ops[k:]
		}
		if !resp.More {
			break
		}
		from = string(resp.Kvs[len(resp.Kvs)-1].Key) + "\x00"
	}
	_, err := s.batch(ctx, []clientv3.Op{clientv3.OpPut(marker, time.Now().UTC().Format(time.RFC3339))})
	return n, err
}
