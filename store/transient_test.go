package store_test

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// flakyKV passes everything to the real etcd, but the first `fail` transactions
// are committed and then reported failed with err, as a write is when the etcd
// leader dies after proposing it.
type flakyKV struct {
	clientv3.KV
	fail atomic.Int32
	err  error
}

func (f *flakyKV) Txn(ctx context.Context) clientv3.Txn { return &flakyTxn{f.KV.Txn(ctx), f} }

type flakyTxn struct {
	clientv3.Txn
	kv *flakyKV
}

func (t *flakyTxn) If(c ...clientv3.Cmp) clientv3.Txn  { t.Txn = t.Txn.If(c...); return t }
func (t *flakyTxn) Then(o ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Then(o...); return t }
func (t *flakyTxn) Else(o ...clientv3.Op) clientv3.Txn { t.Txn = t.Txn.Else(o...); return t }
func (t *flakyTxn) Commit() (*clientv3.TxnResponse, error) {
	resp, err := t.Txn.Commit()
	if err == nil && t.kv.fail.Add(-1) >= 0 {
		return nil, t.kv.err
	}
	return resp, err
}

// A create whose write etcd applied but reported failed (a leader election) is
// tried again and returns the job it stored: one job, no conflict, no 500.
func TestCreateJobSurvivesAnAmbiguousFailure(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	kv := &flakyKV{KV: e.Client.KV, err: fmt.Errorf("wrapped: %w", rpctypes.ErrTimeoutDueToLeaderFail)}
	e.Client.KV = kv
	for _, idem := range []*store.Idempotency{nil, {Key: "k", Fingerprint: "f"}} {
		kv.fail.Store(2)
		j := newJob("acct", time.Now())
		got, err := s.CreateJobOnce(ctx, j, idem)
		if err != nil || got.ID != j.ID || got.Status != mj.StatusQueued {
			t.Fatalf("idem %v: CreateJobOnce = %+v, %v; want the job", idem, got, err)
		}
		if kv.fail.Load() >= 0 {
			t.Fatalf("idem %v: the injected failures were not all hit (%d left)", idem, kv.fail.Load())
		}
		ids, _, _ := s.JobIDs(ctx, s.QueuePrefix(), 0)
		n := 0
		for _, id := range ids {
			if id == j.ID {
				n++
			}
		}
		if n != 1 {
			t.Fatalf("idem %v: job queued %d times", idem, n)
		}
	}
	// Past the retries, the error is returned, and it says it is transient.
	kv.fail.Store(10)
	_, err := s.CreateJobOnce(ctx, newJob("acct", time.Now().Add(time.Second)), nil)
	if !store.Transient(err) {
		t.Fatalf("after every retry failed: %v; want a transient error", err)
	}
	if store.Transient(rpctypes.ErrKeyNotFound) || store.Transient(fmt.Errorf("x: %w", rpctypes.ErrCompacted)) {
		t.Fatal("a definite etcd error is not transient")
	}
}
