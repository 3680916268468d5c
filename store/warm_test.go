package store_test

import (
	"context"
	"encoding/json"
	"errors"
	"sync"
	"testing"

	"github.com/google/uuid"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A runner's first renewal (MarkWarmStarted, which re-puts the run key) and
// its done (FinishWarmRun) race when a job ends within moments of its start:
// done never loses to it, whichever lands first, and the run key is never
// written again after done.
func TestFinishWarmRunRacesTheFirstRenewal(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	for i := range 200 {
		g, err := s.Client().Grant(ctx, 60)
		if err != nil {
			t.Fatal(err)
		}
		alloc := uuid.NewString()
		run := store.WarmRun{Run: uuid.NewString(), JobID: "job", Attempt: 1, Pool: "cpu", Alloc: alloc, Lease: int64(g.ID)}
		b, _ := json.Marshal(run)
		if _, err := s.Client().Put(ctx, s.WarmRunKey("cpu", alloc), string(b), clientv3.WithLease(g.ID)); err != nil {
			t.Fatal(err)
		}
		// The renewal read the run before done did.
		read, err := s.WarmRunOf(ctx, "cpu", alloc)
		if err != nil || read == nil {
			t.Fatalf("read the run: %+v %v", read, err)
		}
		var wg sync.WaitGroup
		var marked, finished error
		wg.Add(2)
		go func() { defer wg.Done(); marked = s.MarkWarmStarted(ctx, read) }()
		go func() {
			defer wg.Done()
			finished = s.FinishWarmRun(ctx, store.WarmDone{Run: run.Run, JobID: "job", Attempt: 1, Pool: "cpu", Alloc: alloc, Outcome: "reported"})
		}()
		wg.Wait()
		if finished != nil {
			t.Fatalf("try %d: done lost to the first renewal (which said %v): %v", i, marked, finished)
		}
		if marked != nil && !errors.Is(marked, store.ErrWarmGone) {
			t.Fatal(marked)
		}
		if r, err := s.WarmRunOf(ctx, "cpu", alloc); err != nil || r != nil {
			t.Fatalf("try %d: the run key outlived done (renewal said %v): %+v %v", i, marked, r, err)
		}
		if wd, err := s.WarmDoneOf(ctx, run.Run); err != nil || wd == nil {
			t.Fatalf("try %d: no done key: %v", i, err)
		}
	}
}
