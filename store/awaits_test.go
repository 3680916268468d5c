package store_test

import (
	"context"
	"log/slog"
	"slices"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// A job that awaits another's output has no queue key, an awaits key per job it
// awaits (Waiters lists it), and enters the queue when it is released; ending
// while it waits removes its awaits keys. TailDone tells the jobs that end.
func TestAwaitingJobStaysOutOfTheQueue(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ids := func(prefix string) []string { v, _, _ := s.JobIDs(ctx, prefix, 0); return v }
	now := time.Now()
	dep, other := newJob("acct", now), newJob("acct", now.Add(time.Millisecond))
	waiter := newJob("acct", now.Add(-time.Hour)) // created before them
	waiter.InputFiles = map[string]string{"a": "job:" + dep.ID + "/out.mp4", "b": "job:" + other.ID + "/out.mp4"}
	waiter.Awaits = []string{dep.ID, other.ID}
	for _, j := range []*mj.Job{dep, other, waiter} {
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
	}

	if q := ids(s.QueuePrefix()); slices.Contains(q, waiter.ID) || len(q) != 2 {
		t.Fatalf("queue %v: the waiting job is in it", q)
	}
	if w, err := s.Waiters(ctx, dep.ID); err != nil || !slices.Equal(w, []string{waiter.ID}) {
		t.Fatalf("Waiters(dep) = %v, %v", w, err)
	}
	if len(ids(s.AwaitsPrefix())) != 2 {
		t.Fatalf("awaits keys %v", ids(s.AwaitsPrefix()))
	}

	// One of two released: still waiting, one awaits key left.
	if _, err := s.UpdateJob(ctx, waiter.ID, func(j *mj.Job) error { j.Release(dep.ID, map[string]string{"a": "k"}, time.Now()); return nil }); err != nil {
		t.Fatal(err)
	}
	if q := ids(s.QueuePrefix()); slices.Contains(q, waiter.ID) {
		t.Fatal("in the queue while it still awaits a job")
	}
	if w, _ := s.Waiters(ctx, dep.ID); len(w) != 0 {
		t.Fatalf("Waiters(dep) after its release = %v", w)
	}
	// The other released: in the queue as of its release, no awaits key, its
	// keys kept.
	released := now.Add(time.Hour)
	got, err := s.UpdateJob(ctx, waiter.ID, func(j *mj.Job) error { j.Release(other.ID, map[string]string{"b": "k2"}, released); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if q := ids(s.QueuePrefix()); !slices.Contains(q, waiter.ID) || len(ids(s.AwaitsPrefix())) != 0 {
		t.Fatalf("after release: queue %v awaits %v", q, ids(s.AwaitsPrefix()))
	}
	if got.InputKeys["a"] != "k" || got.InputKeys["b"] != "k2" || got.Awaits != nil {
		t.Fatalf("released job: %v %v", got.InputKeys, got.Awaits)
	}
	if q := ids(s.QueuePrefix()); !slices.Contains(q, waiter.ID) {
		t.Fatal("not in the queue")
	}
	head, err := s.QueueHead(ctx, "cpu", "acct")
	if err != nil {
		t.Fatal(err)
	}
	if st := head.Standing(got); st.Ahead != 2 {
		t.Fatalf("the released job has %d jobs ahead of it; want the 2 queued before its release", st.Ahead)
	}

	// A waiting job that ends (cancelled) leaves no awaits key; its end is told.
	third := newJob("acct", now.Add(3*time.Millisecond))
	third.InputFiles, third.Awaits = map[string]string{"a": "job:" + dep.ID + "/out.mp4"}, []string{dep.ID}
	if err := s.CreateJob(ctx, third); err != nil {
		t.Fatal(err)
	}
	rev, err := s.Revision(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ended := make(chan string, 10)
	go s.TailDone(ctx, rev, slog.Default(), func(_ context.Context, id string) { ended <- id })
	if _, err := s.UpdateJob(ctx, third.ID, func(j *mj.Job) error { j.Cancel(time.Now(), "by the test"); return nil }); err != nil {
		t.Fatal(err)
	}
	if a := ids(s.AwaitsPrefix()); len(a) != 0 {
		t.Fatalf("a cancelled waiting job left awaits keys %v", a)
	}
	select {
	case id := <-ended:
		if id != third.ID {
			t.Fatalf("TailDone told %s, want %s", id, third.ID)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("TailDone did not tell the job that ended")
	}
}
