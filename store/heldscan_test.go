package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/prometheus/client_golang/prometheus"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// seedHeld writes n held records of account "many", objects job/<name><i>,
// each with its heldexp/ entry (as this version counts them), expiring at exp,
// in batched transactions (no counter: only the release's reads and writes
// matter here).
func seedHeld(tb testing.TB, s *store.Store, cli *clientv3.Client, name string, n int, exp time.Time) {
	tb.Helper()
	idx := strings.TrimSuffix(s.HeldPrefix(), "held/") + "heldexp/"
	const perTxn = 60 // two puts each, within etcd's 128 operations
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for from := w * perTxn; from < n; from += 4 * perTxn {
				var ops []clientv3.Op
				for i := from; i < min(from+perTxn, n); i++ {
					obj := fmt.Sprintf("job/%s%07d", name, i)
					h := store.Held{Bytes: 1, Expires: exp}
					b, _ := json.Marshal(h)
					stamp := h.Expires.UTC().Format("20060102T150405.000000000Z")
					ops = append(ops, clientv3.OpPut(s.HeldPrefix()+"many/"+obj, string(b)), clientv3.OpPut(idx+stamp+"/many/"+obj, string(b)))
				}
				if _, err := cli.Txn(context.Background()).Then(ops...).Commit(); err != nil {
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

// proposals is etcd's count of committed raft proposals (the embedded server's).
func proposals(tb testing.TB) float64 {
	tb.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		tb.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_server_proposals_committed_total" {
			return mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	tb.Fatal("etcd_server_proposals_committed_total not registered")
	return 0
}

func scanMigration(s *store.Store) (marker, state string) {
	p := strings.TrimSuffix(s.HeldPrefix(), "held/") + "migrations/"
	return p + "heldexp", p + "heldexp_scan"
}

// The janitor releases whatever held/ holds: a release is never behind the scan
// for records an older version left unindexed (50,000 records, all indexed,
// with the daily scan due, and a sweep of 2 s), and the scan writes once per
// page, nothing per record already indexed.
func TestReleaseExpiredAtAnySize(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	now := time.Now()
	seedHeld(t, s, e.Client, "seed", 50000, now.Add(24*time.Hour))
	if _, _, err := s.CountStorage(ctx, "a", store.TmpObject("gone"), store.Held{Bytes: 7, Expires: now.Add(-time.Minute)}, store.Limits{}, false); err != nil {
		t.Fatal(err)
	}
	marker, _ := scanMigration(s)
	if _, err := e.Client.Put(ctx, marker, now.Add(-25*time.Hour).UTC().Format(time.RFC3339)); err != nil {
		t.Fatal(err)
	}
	sweep, cancel := context.WithTimeout(ctx, 2*time.Second)
	n, err := s.ReleaseExpired(sweep, now, func(string) error { return nil })
	cancel()
	if n != 1 || err != nil && !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("released %d (%v); want the expired record, before any scan", n, err)
	}
	if _, ok, err := s.HeldObject(ctx, "a", store.TmpObject("gone")); ok || err != nil {
		t.Fatalf("the expired record is still held (%v)", err)
	}

	// The rest of the scan, a page a sweep: one write per page.
	before := proposals(t)
	sweeps := 0
	for ; ; sweeps++ {
		if sweeps > 60 {
			t.Fatal("the scan did not end in 60 sweeps")
		}
		if _, err := s.ReleaseExpired(ctx, now, func(string) error { return nil }); err != nil {
			t.Fatal(err)
		}
		r, err := e.Client.Get(ctx, marker)
		if err != nil {
			t.Fatal(err)
		}
		if at, _ := time.Parse(time.RFC3339, string(r.Kvs[0].Value)); at.After(now.Add(-time.Hour)) {
			break
		}
	}
	if d := proposals(t) - before; d > float64(sweeps)+3 {
		t.Fatalf("%v etcd proposals for a scan of %d sweeps over records all indexed; want one a page", d, sweeps+1)
	}
	if sweeps < 40 {
		t.Fatalf("the scan took %d sweeps for 50,000 records; want a page of at most 1,000 a sweep", sweeps+1)
	}
}

// Held/ is scanned again each day until a scan that begins a week after the
// last one that found a record without its entry finds none: then no version
// before the index is running, and the scans stop. Deleting the scan's keys
// starts them again.
func TestHeldScanStopsOnceNoOlderWriter(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	t0 := time.Now()
	none := func(string) error { return nil }
	marker, state := scanMigration(s)
	legacy := func(obj string, exp time.Time) { // counted by a version before the index
		t.Helper()
		if _, _, err := s.CountStorage(ctx, "a", store.OutputsObject(obj), store.Held{Bytes: 1, Expires: exp}, store.Limits{}, false); err != nil {
			t.Fatal(err)
		}
		idx := strings.TrimSuffix(s.HeldPrefix(), "held/") + "heldexp/"
		r, _ := e.Client.Get(ctx, idx, clientv3.WithPrefix(), clientv3.WithKeysOnly())
		for _, kv := range r.Kvs {
			if strings.HasSuffix(string(kv.Key), "/"+obj) {
				e.Client.Delete(ctx, string(kv.Key))
			}
		}
	}
	indexed := func(obj string) bool {
		r, _ := e.Client.Get(ctx, strings.TrimSuffix(s.HeldPrefix(), "held/")+"heldexp/", clientv3.WithPrefix(), clientv3.WithKeysOnly())
		for _, kv := range r.Kvs {
			if strings.HasSuffix(string(kv.Key), "/"+obj) {
				return true
			}
		}
		return false
	}
	done := func() bool {
		r, err := e.Client.Get(ctx, state)
		return err == nil && len(r.Kvs) > 0 && strings.Contains(string(r.Kvs[0].Value), `"done":true`)
	}
	day := func(d int) time.Time { return t0.Add(time.Duration(d)*24*time.Hour + time.Duration(d)*time.Minute) }
	legacy("l0", t0.Add(365*24*time.Hour))
	for d := 0; d <= 3; d++ {
		if _, err := s.ReleaseExpired(ctx, day(d), none); err != nil {
			t.Fatal(err)
		}
	}
	if !indexed("l0") {
		t.Fatal("the first scan did not index l0")
	}
	// Day 3's scan finds another: the week starts again from there.
	legacy("l1", t0.Add(365*24*time.Hour))
	if _, err := s.ReleaseExpired(ctx, day(4), none); err != nil || !indexed("l1") {
		t.Fatalf("day 4's scan did not index l1 (%v)", err)
	}
	for d := 5; d <= 10; d++ {
		if _, err := s.ReleaseExpired(ctx, day(d), none); err != nil {
			t.Fatal(err)
		}
		if done() {
			t.Fatalf("the scans stopped on day %d, less than a week after one found l1", d)
		}
	}
	if _, err := s.ReleaseExpired(ctx, day(11), none); err != nil {
		t.Fatal(err)
	}
	if !done() {
		t.Fatal("the scans go on a week after the last that found a record")
	}
	// Done: later sweeps read and write nothing of held/.
	legacy("l2", t0.Add(365*24*time.Hour))
	before := proposals(t)
	for d := 12; d <= 15; d++ {
		if _, err := s.ReleaseExpired(ctx, day(d), none); err != nil {
			t.Fatal(err)
		}
	}
	if indexed("l2") || proposals(t) != before {
		t.Fatalf("sweeps after the scans stopped: l2 indexed %v, %v proposals", indexed("l2"), proposals(t)-before)
	}
	e.Client.Delete(ctx, state)
	e.Client.Delete(ctx, marker)
	if _, err := s.ReleaseExpired(ctx, day(16), none); err != nil || !indexed("l2") {
		t.Fatalf("a scan after its keys were deleted did not index l2 (%v)", err)
	}
}

// BenchmarkJanitorRelease is the janitor's release sweep with 100,000 held
// records, all indexed, while the daily scan of held/ is due: each sweep
// releases 500 expired records and takes the scan one page further. It reports
// etcd's raft proposals per sweep. Run with make bench (benchmarks run only
// with -bench).
func BenchmarkJanitorRelease(b *testing.B) {
	s, e := testenv.Etcd(b)
	ctx := context.Background()
	now := time.Now()
	seedHeld(b, s, e.Client, "held", 100000, now.Add(24*time.Hour))
	marker, _ := scanMigration(s)
	e.Client.Put(ctx, marker, now.Add(-25*time.Hour).UTC().Format(time.RFC3339))
	none := func(string) error { return nil }
	var props float64
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		b.StopTimer()
		seedHeld(b, s, e.Client, fmt.Sprintf("exp%d-", i), 500, now.Add(-time.Minute))
		before := proposals(b)
		b.StartTimer()
		if n, err := s.ReleaseExpired(ctx, now, none); n != 500 || err != nil {
			b.Fatalf("released %d (%v); want 500", n, err)
		}
		props += proposals(b) - before
	}
	b.ReportMetric(props/float64(b.N), "proposals/sweep")
}
