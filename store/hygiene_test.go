package store_test

import (
	"context"
	"encoding/json"
	"fmt"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/prometheus/client_golang/prometheus/testutil"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A record that cannot be decoded (a field whose JSON type changed in a newer
// version) is skipped and counted, and the jobs beside it are still listed.
func TestJobsUnderSkipsAnUndecodableRecord(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	base := time.Now().UTC()
	var ids []string
	for i := range 3 {
		j := newJob("acct", base.Add(time.Duration(i)*time.Millisecond))
		j.NomadJobID = "mediajobs-cpu/dispatch-" + j.ID // in the active set
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	bad := ids[1]
	key := ""
	resp, err := s.Client().Get(ctx, "", clientv3.WithFromKey())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		var m map[string]any
		if json.Unmarshal(kv.Value, &m) == nil && m["id"] == bad {
			key = string(kv.Key)
			m["timeout_seconds"] = "600" // a string where a number was
			b, _ := json.Marshal(m)
			if _, err := s.Client().Put(ctx, key, string(b)); err != nil {
				t.Fatal(err)
			}
		}
	}
	if key == "" {
		t.Fatal("the job's record was not found")
	}
	before := testutil.ToFloat64(metrics.UnreadableJobs.WithLabelValues())
	jobs, err := s.JobsUnder(ctx, s.ActivePrefix())
	if err != nil {
		t.Fatalf("one undecodable record failed the whole read: %v", err)
	}
	got := map[string]bool{}
	for _, j := range jobs {
		got[j.ID] = true
	}
	if len(jobs) != 2 || !got[ids[0]] || !got[ids[2]] {
		t.Fatalf("listed %d jobs %v, want %s and %s", len(jobs), got, ids[0], ids[2])
	}
	if n := testutil.ToFloat64(metrics.UnreadableJobs.WithLabelValues()) - before; n != 1 {
		t.Fatalf("mediajobs_store_unreadable_jobs_total rose by %v, want 1", n)
	}
}

// The idempotency sweep deletes exactly the expired records, across several
// pages, several to a transaction (not one etcd revision per record).
func TestSweepIdempotencyInBatches(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	now := time.Now().UTC()
	const total = 1300 // more than two pages of the sweep
	var ops []clientv3.Op
	expired := map[string]bool{}
	for i := range total {
		key := fmt.Sprintf("%sacct/%064x", s.IdemPrefix(), i*7919%100003)
		created := now.Add(-time.Minute)
		if i%3 == 0 {
			created = now.Add(-25 * time.Hour)
			expired[key] = true
		}
		rec, _ := json.Marshal(map[string]any{"job_id": fmt.Sprint(i), "fingerprint": "f", "created_at": created})
		ops = append(ops, clientv3.OpPut(key, string(rec)))
	}
	for len(ops) > 0 {
		k := min(len(ops), 100)
		if _, err := s.Client().Txn(ctx).Then(ops[:k]...).Commit(); err != nil {
			t.Fatal(err)
		}
		ops = ops[k:]
	}
	rev := func() int64 {
		r, err := s.Client().Get(ctx, "x")
		if err != nil {
			t.Fatal(err)
		}
		return r.Header.Revision
	}
	start := rev()
	n, err := s.SweepIdempotency(ctx, now.Add(-24*time.Hour))
	if err != nil || n != len(expired) {
		t.Fatalf("swept %d (%v), want %d", n, err, len(expired))
	}
	if revs := rev() - start; revs > int64(len(expired)/32) {
		t.Fatalf("%d deletes took %d etcd revisions: one transaction each, not in batches", n, revs)
	}
	resp, err := s.Client().Get(ctx, s.IdemPrefix(), clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Kvs) != total-len(expired) {
		t.Fatalf("%d records left, want %d", len(resp.Kvs), total-len(expired))
	}
	for _, kv := range resp.Kvs {
		if expired[string(kv.Key)] {
			t.Fatalf("expired record %s left", kv.Key)
		}
	}
}
