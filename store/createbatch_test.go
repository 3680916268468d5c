package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// Creates one after the other are checked against the reading the previous
// create's transaction returned (createbatch.go); what changed since in etcd
// still counts at once: the account's settings, storage counted by others,
// and the queue shrinking (a create refused on that reading is checked again
// on a new one).
func TestCreateAfterCreateSeesChanges(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	base := time.Now()
	n := 0
	create := func(acct string, l store.Limits) error {
		n++
		_, err := s.CreateJobWithin(ctx, newJob(acct, base.Add(time.Duration(n)*time.Millisecond)), nil, l)
		return err
	}

	// Settings: a lower max_queued_jobs of the account's own.
	l := store.Limits{MaxQueuedJobs: 100}
	for range 3 {
		if err := create("a", l); err != nil {
			t.Fatal(err)
		}
	}
	three := int64(3)
	if err := s.SetAccountSchedule(ctx, "a", store.Schedule{LimitOverrides: store.LimitOverrides{MaxQueuedJobs: &three}}); err != nil {
		t.Fatal(err)
	}
	wantQuota(t, create("a", l), "max_queued_jobs", "3", "3")

	// Storage counted by another writer (a job's outputs) past the limit.
	l = store.Limits{MaxStorageBytes: 1000}
	if err := create("b", l); err != nil {
		t.Fatal(err)
	}
	if _, _, err := s.CountStorage(ctx, "b", store.OutputsObject("x"), store.Held{Bytes: 1500, Expires: base.Add(time.Hour)}, l, false); err != nil {
		t.Fatal(err)
	}
	wantQuota(t, create("b", l), "max_storage_bytes", "1000", "1500")

	// The queue full, then a job leaves it: the next create is let in.
	l = store.Limits{MaxQueuedJobs: 2}
	var first *mj.Job
	for i := range 2 {
		n++
		j, err := s.CreateJobWithin(ctx, newJob("c", base.Add(time.Duration(n)*time.Millisecond)), nil, l)
		if err != nil {
			t.Fatal(err)
		}
		if i == 0 {
			first = j
		}
	}
	wantQuota(t, create("c", l), "max_queued_jobs", "2", "2")
	if _, err := s.UpdateJob(ctx, first.ID, func(j *mj.Job) error { j.Status = mj.StatusCancelled; return nil }); err != nil {
		t.Fatal(err)
	}
	if err := create("c", l); err != nil {
		t.Fatalf("a create after the queue shrank: %v", err)
	}
}

// Many creates of one account at once are committed in batches; each gets its
// own job, the queued limit holds exactly, and the byte counter adds up to
// every record created.
func TestBatchedCreatesWithinLimits(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	base := time.Now()
	const n, limit = 200, 150
	l := store.Limits{MaxQueuedJobs: limit, MaxJobBytes: 1 << 30}
	var (
		mu       sync.Mutex
		ok, over int
		bytes    int64
		ids      = map[string]bool{}
		wg       sync.WaitGroup
	)
	for i := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			j, err := s.CreateJobWithin(ctx, newJob("d", base.Add(time.Duration(i)*time.Microsecond)), nil, l)
			mu.Lock()
			defer mu.Unlock()
			switch {
			case mj.ErrorCode(err) == mj.EQuotaExceeded:
				over++
			case err != nil:
				t.Error(err)
			default:
				ok++
				bytes += j.RecordBytes
				ids[j.ID] = true
			}
		}()
	}
	wg.Wait()
	_, u, _, err := s.AccountLimits(ctx, "d", l)
	if err != nil {
		t.Fatal(err)
	}
	if ok != limit || over != n-limit || len(ids) != limit || u.QueuedJobs != limit || u.JobBytes != bytes {
		t.Fatalf("%d created (%d ids), %d refused; usage %+v with %d bytes created; want %d created", ok, len(ids), over, u, bytes, limit)
	}
}
