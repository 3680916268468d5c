package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"go.etcd.io/etcd/api/v3/mvccpb"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A dispatch pass at scale (docs/scheduling.md): what it reads of the queue is
// bounded by a few keys per account with queued jobs, and nothing when nothing
// could take a job; counted at the etcd client, as etcd answered.

// readCounter counts the keys under prefix, and their bytes, in what etcd
// answers the client's reads with (ranges, and the ranges of transactions).
type readCounter struct {
	clientv3.KV
	prefix      string
	keys, bytes atomic.Int64
}

// countReads makes s's client count the queue keys it reads from now on.
func countReads(s *store.Store) *readCounter {
	c := &readCounter{KV: s.Client().KV, prefix: s.QueuePrefix()}
	s.Client().KV = c
	return c
}

func (c *readCounter) add(kvs []*mvccpb.KeyValue) {
	for _, kv := range kvs {
		if strings.HasPrefix(string(kv.Key), c.prefix) {
			c.keys.Add(1)
			c.bytes.Add(int64(len(kv.Key) + len(kv.Value)))
		}
	}
}

func (c *readCounter) reset() { c.keys.Store(0); c.bytes.Store(0) }

func (c *readCounter) Get(ctx context.Context, key string, opts ...clientv3.OpOption) (*clientv3.GetResponse, error) {
	r, err := c.KV.Get(ctx, key, opts...)
	if err == nil {
		c.add(r.Kvs)
	}
	return r, err
}

func (c *readCounter) Txn(ctx context.Context) clientv3.Txn {
	return &countedTxn{Txn: c.KV.Txn(ctx), c: c}
}

type countedTxn struct {
	clientv3.Txn
	c *readCounter
}

func (t *countedTxn) If(cs ...clientv3.Cmp) clientv3.Txn { t.Txn = t.Txn.If(cs...); return t }
func (t *countedTxn) Then(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Then(ops...)
	return t
}
func (t *countedTxn) Else(ops ...clientv3.Op) clientv3.Txn {
	t.Txn = t.Txn.Else(ops...)
	return t
}
func (t *countedTxn) Commit() (*clientv3.TxnResponse, error) {
	r, err := t.Txn.Commit()
	if err == nil {
		for _, op := range r.Responses {
			if rr := op.GetResponseRange(); rr != nil {
				t.c.add(rr.Kvs)
			}
		}
	}
	return r, err
}

// seedQueue puts perAccount queue keys for each of accounts accounts
// (acct-0000…) in pool cpu, first in first out, in batched transactions from a
// few writers at once: keys only, for passes that choose without dispatching.
func seedQueue(tb testing.TB, s *store.Store, accounts, perAccount int) {
	tb.Helper()
	base := time.Now().Add(-time.Hour).UnixNano()
	const perTxn, writers = 120, 8
	total := accounts * perAccount
	var wg sync.WaitGroup
	errs := make(chan error, writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := w * perTxn; from < total; from += writers * perTxn {
				ops := make([]clientv3.Op, 0, perTxn)
				for i := from; i < min(from+perTxn, total); i++ {
					a, k := i%accounts, i/accounts
					id := fmt.Sprintf("job-%04d-%07d", a, k)
					key := fmt.Sprintf("%s%019d_%s", s.AccountQueuePrefix("cpu", fmt.Sprintf("acct-%04d", a)), base+int64(i), id)
					ops = append(ops, clientv3.OpPut(key, id))
				}
				if _, err := s.Client().Txn(context.Background()).Then(ops...).Commit(); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		tb.Fatal(err)
	}
}

// syncIndex starts d's queue index and waits for its first read of the queue.
func syncIndex(tb testing.TB, d *Dispatcher) {
	tb.Helper()
	qi := d.sched.queueIndex(d.Store.(fairStore))
	deadline := time.Now().Add(5 * time.Minute)
	for {
		err := qi.Sync(context.Background())
		if err == nil {
			return
		}
		if !errors.Is(err, store.ErrQueueIndexLoading) || time.Now().After(deadline) {
			tb.Fatal(err)
		}
	}
}

// A pass reads, of the queue, a few keys per account with queued jobs (about
// twice its even share of the window, more only for an account that could take
// more), not the queue: 50 accounts × 40 queued, a window of 8. Before, a pass
// read all 2,000 keys.
func TestFairPassReadsAFewKeysPerAccount(t *testing.T) {
	const accounts, perAccount, window = 50, 40, 8
	e := newFairEnv(t, &config.Pool{DispatchLookahead: window, MaxInFlight: -1})
	seedQueue(t, e.s, accounts, perAccount)
	reads := countReads(e.s)
	ctx := context.Background()
	syncIndex(t, e.d) // its one read of the queue, at its start
	reads.reset()
	chosen, nomad, _, failed := e.d.sched.fairPass(ctx, e.pool, 0, 0, true)
	if failed || nomad != window || len(chosen) != window {
		t.Fatalf("pass: failed %v, window %d, chose %d; want %d", failed, nomad, len(chosen), window)
	}
	seen := map[string]bool{}
	for _, q := range chosen {
		if seen[q.Account] {
			t.Fatalf("chose two jobs of %s: %v", q.Account, chosen)
		}
		seen[q.Account] = true
	}
	if k := reads.keys.Load(); k > 2*accounts+2*window {
		t.Fatalf("the pass read %d queue keys (%d bytes) of %d queued; want at most %d (2 per account, and the extensions)",
			k, reads.bytes.Load(), accounts*perAccount, 2*accounts+2*window)
	}

	// One account with a long queue and a wide window: its read grows to what
	// the pass takes, not to its queue.
	e2 := newFairEnv(t, &config.Pool{DispatchLookahead: 64, MaxInFlight: -1})
	seedQueue(t, e2.s, 1, 2000)
	reads2 := countReads(e2.s)
	syncIndex(t, e2.d)
	reads2.reset()
	chosen, _, _, failed = e2.d.sched.fairPass(ctx, e2.pool, 0, 0, true)
	if failed || len(chosen) != 64 || chosen[0].ID != "job-0000-0000000" || chosen[63].ID != "job-0000-0000063" {
		t.Fatalf("pass over one account: failed %v, chose %d (%v…)", failed, len(chosen), chosen[:min(2, len(chosen))])
	}
	if k := reads2.keys.Load(); k != 64 {
		t.Fatalf("the pass read %d queue keys of 2,000 queued; want the 64 it chose", k)
	}
}

// A warm pool whose runners are all busy, with Nomad's window closed
// (max_in_flight reached): the pass reads no queue key, since nothing could
// take a job. Before, busy runners made it read the whole queue.
func TestClosedWindowBusyRunnersReadNoQueue(t *testing.T) {
	e := newFairEnv(t, &config.Pool{DispatchLookahead: 8, MaxInFlight: 1})
	e.pool.Warm = &config.Warm{MaxJobSeconds: 60}
	ctx := context.Background()
	reads := countReads(e.s) // before the index's goroutine starts
	e.queue("acct", 3)
	if e.d.sched.dispatchPool(ctx, e.pool) {
		t.Fatal("first pass failed")
	}
	if n := len(e.n.dispatched()); n != 1 {
		t.Fatalf("%d dispatched; want 1 (max_in_flight)", n)
	}
	ws := e.d.Store.(observeStore)
	if _, err := e.s.Client().Put(ctx, ws.WarmRunPrefix()+"cpu/busy-run", `{"run":"r1","pool":"cpu","job_id":"j1","alloc":"busy-run"}`); err != nil {
		t.Fatal(err)
	}
	if busy := e.d.sched.warmRunners(ctx, e.pool).busy; busy != 1 {
		t.Fatalf("%d busy runners; want 1", busy)
	}
	reads.reset()
	if e.d.sched.dispatchPool(ctx, e.pool) {
		t.Fatal("pass failed")
	}
	if k := reads.keys.Load(); k != 0 {
		t.Fatalf("a pass with the window closed and no idle runner read %d queue keys; want none", k)
	}
	if len(e.n.dispatched()) != 1 {
		t.Fatalf("dispatched %d with the window closed", len(e.n.dispatched()))
	}
}

// Reading a few keys per account chooses what reading the whole queue chose:
// an account whose weight wins it more than its first read holds has its read
// extended, an account with fewer queued than its share gives way, and one at
// its running limit is read nothing.
func TestFairPassChoosesAsTheWholeQueue(t *testing.T) {
	e := newFairEnv(t, &config.Pool{DispatchLookahead: 24, MaxInFlight: -1})
	ctx := context.Background()
	seedQueue(t, e.s, 4, 60) // acct-0000 … acct-0003
	one := 1
	for a, sc := range map[string]store.Schedule{
		"acct-0000": {Weight: 20},
		"acct-0001": {Weight: 2},
		"acct-0003": {MaxRunningPerPool: &one},
	} {
		if err := e.s.SetAccountSchedule(ctx, a, sc); err != nil {
			t.Fatal(err)
		}
	}
	// acct-0003 runs one job: at its limit.
	if _, err := e.s.Client().Put(ctx, e.s.AccountActivePrefix("cpu", "acct-0003")+"running-1", "mediajobs-cpu/dispatch-x"); err != nil {
		t.Fatal(err)
	}
	// An account with one queued only.
	if _, err := e.s.Client().Put(ctx, fmt.Sprintf("%s%019d_%s", e.s.AccountQueuePrefix("cpu", "acct-short"), time.Now().Add(-2*time.Hour).UnixNano(), "short-1"), "short-1"); err != nil {
		t.Fatal(err)
	}
	syncIndex(t, e.d)
	got, window, _, failed := e.d.sched.fairPass(ctx, e.pool, 0, 0, true)
	want := e.wholeQueuePass(ctx, window) // 23: the running job is pending for Nomad
	if failed || len(got) != len(want) || window != 23 {
		t.Fatalf("chose %d (failed %v); the whole queue's pass chose %d", len(got), failed, len(want))
	}
	heavy := 0
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("choice %d: %+v; the whole queue's pass chose %+v", i, got[i], want[i])
		}
		if got[i].Account == "acct-0000" {
			heavy++
		}
		if got[i].Account == "acct-0003" {
			t.Fatalf("chose a job of an account at its limit: %+v", got[i])
		}
	}
	if heavy <= 10 {
		t.Fatalf("the account of weight 20 took %d of 23; want more than its first read of 10", heavy)
	}
}
