package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// A job's usage is added to its account's day in the write that ends it, once:
// batched (several jobs on one counter shard among them) or alone, and never
// again by a replayed update or a later write of the finished job. The janitor's
// sweep deletes days past the retention.
func TestUsageCountedOnceInTheTerminalWrite(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	acct, err := s.CreateAccount(ctx, "metered")
	if err != nil {
		t.Fatal(err)
	}
	yesterday, today := time.Now().UTC().AddDate(0, 0, -1), time.Now().UTC()
	var ids []string
	for i := range 71 {
		j := newJob(acct.ID, today.Add(time.Duration(i)*time.Millisecond))
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	use := mj.Usage{WallSeconds: 1.5, CPUSeconds: 0.25, InputBytes: 10, OutputBytes: 20}
	// finish is the dispatcher's apply: a finished job is left alone.
	finish := func(at time.Time) func(*mj.Job) error {
		return func(j *mj.Job) error {
			if j.Status.Terminal() {
				return fmt.Errorf("skip")
			}
			u := use
			j.Status, j.FinishedAt, j.Usage = mj.StatusSucceeded, &at, &u
			return nil
		}
	}
	// 70 in one batch (4 counter shards: more than 16 jobs on one, so several
	// transactions), 1 alone, finished yesterday.
	var batch []store.JobUpdate
	for _, id := range ids[:70] {
		batch = append(batch, store.JobUpdate{ID: id, Fn: finish(today)})
	}
	want := func(n int64) store.UsageTotals {
		return store.UsageTotals{Jobs: n, WallSeconds: 1.5 * float64(n), CPUSeconds: 0.25 * float64(n), InputBytes: 10 * n, OutputBytes: 20 * n}
	}
	check := func(when string) {
		t.Helper()
		r, err := s.AccountUsage(ctx, acct.ID, yesterday.Format(store.DayLayout), today.Format(store.DayLayout))
		if err != nil {
			t.Fatal(err)
		}
		if r.Total != want(71) || len(r.Days) != 2 || r.Days[0].Day != yesterday.Format(store.DayLayout) || r.Days[0].UsageTotals != want(1) ||
			r.Days[1].UsageTotals != want(70) || r.Days[1].Pool != "cpu" {
			t.Fatalf("%s: usage %+v; want 1 job yesterday, 70 today", when, r)
		}
	}
	for round := range 2 { // the second: a replay of every write
		jobs, errs := s.UpdateJobs(ctx, batch)
		for i, err := range errs {
			if (round == 0) != (err == nil) {
				t.Fatalf("round %d: job %d: %v", round, i, err)
			}
			if round == 0 && (jobs[i].Usage == nil || *jobs[i].Usage != use) {
				t.Fatalf("job %d usage %+v", i, jobs[i].Usage)
			}
		}
		if _, err := s.UpdateJob(ctx, ids[70], finish(yesterday)); (round == 0) != (err == nil) {
			t.Fatalf("round %d: alone: %v", round, err)
		}
	}
	check("after replays")
	// A later write of a finished job (its webhook's outcome) counts nothing.
	if _, err := s.UpdateJob(ctx, ids[0], func(j *mj.Job) error { j.Webhook = &mj.WebhookState{Status: "delivered"}; return nil }); err != nil {
		t.Fatal(err)
	}
	check("after a later write")
	// Other accounts and other days are not summed in.
	if r, err := s.AccountUsage(ctx, "someone-else", yesterday.Format(store.DayLayout), today.Format(store.DayLayout)); err != nil || r.Total.Jobs != 0 {
		t.Fatalf("another account: %+v, %v", r, err)
	}
	if r, err := s.AccountUsage(ctx, acct.ID, today.Format(store.DayLayout), today.Format(store.DayLayout)); err != nil || r.Total != want(70) {
		t.Fatalf("today only: %+v, %v", r, err)
	}
	// A batch one of whose jobs changed since it was read: its counter's group
	// fails and is done job by job, still once each.
	var stale []store.JobUpdate
	for i := range 3 {
		j := newJob(acct.ID, today.Add(time.Second+time.Duration(i)*time.Millisecond))
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		read, err := s.Job(ctx, j.ID)
		if err != nil {
			t.Fatal(err)
		}
		stale = append(stale, store.JobUpdate{ID: j.ID, Fn: finish(today), From: read})
	}
	if _, err := s.UpdateJob(ctx, stale[1].ID, func(j *mj.Job) error { j.StatusDetail = "changed"; return nil }); err != nil {
		t.Fatal(err)
	}
	if _, errs := s.UpdateJobs(ctx, stale); errs[0] != nil || errs[1] != nil || errs[2] != nil {
		t.Fatalf("stale batch: %v", errs)
	}
	if r, err := s.AccountUsage(ctx, acct.ID, today.Format(store.DayLayout), today.Format(store.DayLayout)); err != nil || r.Total != want(73) {
		t.Fatalf("after a stale batch: %+v, %v; want 73 jobs today", r.Total, err)
	}
	// The retention: days before the cutoff go, the rest stays.
	if n, err := s.SweepUsage(ctx, today.Format(store.DayLayout)); err != nil || n != 1 {
		t.Fatalf("SweepUsage deleted %d counters (%v); want yesterday's one", n, err)
	}
	if r, _ := s.AccountUsage(ctx, acct.ID, yesterday.Format(store.DayLayout), today.Format(store.DayLayout)); r.Total != want(73) {
		t.Fatalf("after the sweep: %+v", r)
	}
}

// Many jobs with webhooks that end in one batch on one counter: each ending is
// several operations (the job, its indexes, the webhook's outbox), and a nested
// transaction may hold only what the outer one leaves of etcd's 128. All end,
// each counted once.
func TestManyWebhookJobsEndInOneBatch(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	acct, err := s.CreateAccount(ctx, "burst")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	var batch []store.JobUpdate
	for i := range 64 {
		j := newJob(acct.ID, now.Add(time.Duration(i)*time.Millisecond))
		j.WebhookURL = "https://hooks.example/done"
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		batch = append(batch, store.JobUpdate{ID: j.ID, Fn: func(j *mj.Job) error {
			u := mj.Usage{WallSeconds: 1}
			j.Status, j.FinishedAt, j.Usage = mj.StatusSucceeded, &now, &u
			return nil
		}})
	}
	_, errs := s.UpdateJobs(ctx, batch)
	for i, err := range errs {
		if err != nil {
			t.Fatalf("job %d of the batch: %v", i, err)
		}
	}
	r, err := s.AccountUsage(ctx, acct.ID, now.Format(store.DayLayout), now.Format(store.DayLayout))
	if err != nil || r.Total.Jobs != 64 || r.Total.WallSeconds != 64 {
		t.Fatalf("usage %+v, %v; want 64 jobs", r.Total, err)
	}
}

// A damaged usage counter does not stop jobs from ending: it counts again from
// zero.
func TestDamagedUsageCounterStopsNoJob(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	acct, err := s.CreateAccount(ctx, "damaged")
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now().UTC()
	j := newJob(acct.ID, now)
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	// Every shard of today's counter for this account and pool, damaged.
	for shard := range 16 {
		key := fmt.Sprintf("/test/meter/%s/%s/cpu/%d", acct.ID, now.Format(store.DayLayout), shard)
		if _, err := e.Client.Put(ctx, key, "{not json"); err != nil {
			t.Fatal(err)
		}
	}
	u := mj.Usage{WallSeconds: 2}
	if _, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error {
		j.Status, j.FinishedAt, j.Usage = mj.StatusSucceeded, &now, &u
		return nil
	}); err != nil {
		t.Fatalf("a job could not end beside a damaged counter: %v", err)
	}
	r, err := s.AccountUsage(ctx, acct.ID, now.Format(store.DayLayout), now.Format(store.DayLayout))
	if err != nil || r.Total.Jobs < 1 {
		t.Fatalf("usage %+v, %v", r.Total, err)
	}
}
