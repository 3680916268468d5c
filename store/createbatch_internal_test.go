package store

import (
	"context"
	"fmt"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// A gateway's kept reading does not let it cross a limit another gateway has
// brought the account near meanwhile: under a queued limit its write fails if
// a job was queued since its reading, and it reads again; near half the limit
// it reads again at once.
func TestKeptReadingSeesOtherGateways(t *testing.T) {
	defer func(ttl time.Duration) { readingTTL = ttl }(readingTTL)
	readingTTL = time.Hour // the reading is kept however slow this machine
	e, err := StartEmbedded(t.TempDir(), "127.0.0.1:0", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer e.Close()
	a, b := New(e.Client, "/t/"), New(e.Client, "/t/") // two gateways
	ctx := context.Background()
	n := 0
	create := func(s *Store, l Limits) error {
		n++
		at := time.Now().Add(time.Duration(n) * time.Millisecond)
		j := &mj.Job{ID: fmt.Sprintf("00000000-0000-4000-8000-%012d", n), AccountID: "acct", Status: mj.StatusQueued, Machine: "cpu",
			OutputNames: []string{"o.mp4"}, FFmpegCommands: []string{"-i x outputs/o.mp4"}, CreatedAt: at, QueuedAt: at, UpdatedAt: at}
		_, err := s.CreateJobWithin(ctx, j, nil, l)
		return err
	}
	l := Limits{MaxQueuedJobs: 200}
	if err := create(a, l); err != nil { // a keeps its reading: 1 queued
		t.Fatal(err)
	}
	for range 199 { // b: the account at its limit
		if err := create(b, l); err != nil {
			t.Fatal(err)
		}
	}
	// a's kept reading says 1 queued, far from the limit.
	if err := create(a, l); mj.ErrorCode(err) != mj.EQuotaExceeded {
		t.Fatalf("a create past max_queued_jobs on a kept reading: %v", err)
	}
	if got, _ := a.Count(ctx, a.statusIndexPrefix("acct", mj.StatusQueued)); got != 200 {
		t.Fatalf("%d queued; want the limit, 200", got)
	}
}
