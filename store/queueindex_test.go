package store_test

import (
	"context"
	"fmt"
	"maps"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// The queue index counts each pool's queued jobs per account from one read of
// the queue and its watch after it: jobs queued and dispatched through the
// store, a key put again (no change of count), and the keys of versions before
// fair share, kept as they are; Sync sees every write made before it.
func TestQueueIndexCounts(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Now().UTC()
	job := func(id, account, pool string) *mj.Job {
		return &mj.Job{ID: id, AccountID: account, Machine: pool, Status: mj.StatusQueued, CreatedAt: now, QueuedAt: now, TimeoutSeconds: 60,
			FFmpegCommands: []string{"-i {{in}} {{out.mp4}}"}, OutputNames: []string{"out.mp4"}}
	}
	create := func(id, account, pool string) {
		t.Helper()
		if err := s.CreateJob(ctx, job(id, account, pool)); err != nil {
			t.Fatal(err)
		}
	}
	create("a1", "alice", "cpu")
	create("a2", "alice", "cpu")
	create("b1", "bob", "gpu")
	legacy := fmt.Sprintf("%s%019d_%s", s.PoolQueuePrefix("cpu"), now.UnixNano(), "old1")
	if _, err := e.Client.Put(ctx, legacy, "old1"); err != nil {
		t.Fatal(err)
	}
	q := s.NewQueueIndex()
	go q.Run(ctx, func() {}, func(err error) { t.Log(err) })
	want := func(pool string, accounts map[string]int, legacyKeys ...string) {
		t.Helper()
		if err := q.Sync(ctx); err != nil {
			t.Fatal(err)
		}
		got, leg := q.Pool(pool)
		if !maps.Equal(got, accounts) || len(leg) != len(legacyKeys) || len(leg) > 0 && leg[0] != legacyKeys[0] {
			t.Fatalf("pool %s: %v %v; want %v %v", pool, got, leg, accounts, legacyKeys)
		}
	}
	want("cpu", map[string]int{"alice": 2}, legacy)
	want("gpu", map[string]int{"bob": 1})

	create("c1", "carol", "cpu")
	if _, err := s.UpdateJob(ctx, "a1", func(j *mj.Job) error { j.NomadJobID = "child"; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateJob(ctx, "b1", func(j *mj.Job) error { j.Status = mj.StatusCancelled; return nil }); err != nil {
		t.Fatal(err)
	}
	// A key put again (a move of an older version's key, say) is not a second job.
	r, _ := e.Client.Get(ctx, s.AccountQueuePrefix("cpu", "alice"), clientv3WithPrefix())
	if _, err := e.Client.Put(ctx, string(r.Kvs[0].Key), "a2"); err != nil {
		t.Fatal(err)
	}
	if _, err := e.Client.Delete(ctx, legacy); err != nil {
		t.Fatal(err)
	}
	want("cpu", map[string]int{"alice": 1, "carol": 1})
	want("gpu", map[string]int{})
}

// A queued job's standing counts the jobs ahead of it up to StandingAheadMax,
// with a ranged read that stops there, however long the account's queue.
func TestQueueStandingIsBounded(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	base := time.Now().Add(-time.Hour)
	var jobs []*mj.Job
	for i := range 150 {
		at := base.Add(time.Duration(i) * time.Millisecond)
		j := &mj.Job{ID: fmt.Sprintf("j%03d", i), AccountID: "alice", Machine: "cpu", QueuedAt: at}
		jobs = append(jobs, j)
		key := fmt.Sprintf("%s%019d_%s", s.AccountQueuePrefix("cpu", "alice"), at.UnixNano(), j.ID)
		if _, err := e.Client.Put(ctx, key, j.ID); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct{ i, want int }{{0, 0}, {5, 5}, {100, 100}, {149, store.StandingAheadMax + 1}} {
		st, err := s.QueueStanding(ctx, jobs[c.i])
		if err != nil || st.Ahead != c.want {
			t.Fatalf("job %d: ahead %d (%v); want %d", c.i, st.Ahead, err, c.want)
		}
	}
}
