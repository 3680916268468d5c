package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// A leader that lost its election key (its session expired while it was paused)
// writes nothing: job updates, batches, outbox and event index are all refused.
func TestGuardRefusesADeposedLeader(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	j := newJob("acct", time.Now())
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	sess, err := s.NewLeaderSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	term, err := sess.Campaign(ctx, "a")
	if err != nil {
		t.Fatal(err)
	}
	lead := term.Store()
	if _, err := lead.UpdateJob(ctx, j.ID, func(j *mj.Job) error { j.StatusDetail = "leading"; return nil }); err != nil {
		t.Fatalf("the leader's write: %v", err)
	}
	// Deposed: the session ends (as when its lease expires) and another leads.
	sess.Close() // revokes its lease, and with it the election key
	sess2, err := s.NewLeaderSession(ctx, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer sess2.Close()
	if _, err := sess2.Campaign(ctx, "b"); err != nil {
		t.Fatal(err)
	}
	before, _ := s.Job(ctx, j.ID)
	if _, err := lead.UpdateJob(ctx, j.ID, func(j *mj.Job) error { j.StatusDetail = "deposed"; return nil }); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("UpdateJob by a deposed leader: %v", err)
	}
	_, errs := lead.UpdateJobs(ctx, []store.JobUpdate{{ID: j.ID, From: before, Fn: func(j *mj.Job) error { j.StatusDetail = "deposed"; return nil }}})
	if !errors.Is(errs[0], store.ErrNotLeader) {
		t.Fatalf("UpdateJobs by a deposed leader: %v", errs[0])
	}
	if err := lead.SaveEventIndex(ctx, 99); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("SaveEventIndex by a deposed leader: %v", err)
	}
	if err := lead.DeleteOutbox(ctx, j.ID); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("DeleteOutbox by a deposed leader: %v", err)
	}
	after, _ := s.Job(ctx, j.ID)
	if after.Revision != before.Revision || after.StatusDetail != "leading" {
		t.Fatalf("a deposed leader changed the job: %q (revision %d, was %d)", after.StatusDetail, after.Revision, before.Revision)
	}
	if idx, _ := s.EventIndex(ctx); idx == 99 {
		t.Fatal("a deposed leader saved the event index")
	}
}
