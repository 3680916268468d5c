package store_test

import (
	"context"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// keysOf lists every key under the store that names the job id.
func keysOf(t *testing.T, s *store.Store, id string) []string {
	t.Helper()
	resp, err := s.Client().Get(context.Background(), "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	var keys []string
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key), id) {
			keys = append(keys, string(kv.Key))
		}
	}
	return keys
}

func TestDeleteFinishedJobsTakesEveryDerivedKey(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	base := time.Now().Add(-48 * time.Hour)
	finish := func(j *mj.Job, at time.Time, hook mj.WebhookStatus) {
		t.Helper()
		_, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error {
			j.Status, j.FinishedAt = mj.StatusSucceeded, &at
			if hook != "" {
				j.WebhookURL = "http://127.0.0.1:1/hook"
				j.Webhook = &mj.WebhookState{Status: hook}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	old := newJob("acct", base)
	old.HasDestinations, old.Destinations = true, &mj.Destinations{URLs: map[string]string{"out.mp4": "https://b.example/out.mp4?sig=x"}}
	if _, err := s.CreateJobOnce(ctx, old, &store.Idempotency{Key: "k1", Fingerprint: "f"}); err != nil {
		t.Fatal(err)
	}
	if d, err := s.Destinations(ctx, old.ID); err != nil || d == nil || d.URLs["out.mp4"] == "" {
		t.Fatalf("destinations: %v %v", d, err)
	}
	finish(old, base, "delivered")
	pending := newJob("acct", base.Add(time.Second))
	s.CreateJob(ctx, pending)
	finish(pending, base, "pending") // its webhook is still owed: kept
	recent := newJob("acct", base.Add(2*time.Second))
	s.CreateJob(ctx, recent)
	finish(recent, time.Now(), "")
	running := newJob("acct", base.Add(3*time.Second))
	s.CreateJob(ctx, running)

	if len(keysOf(t, s, old.ID)) < 4 {
		t.Fatalf("expected the job's index keys: %v", keysOf(t, s, old.ID))
	}
	n, err := s.DeleteFinishedJobs(ctx, time.Now().Add(-time.Hour), 0)
	if err != nil || n != 1 {
		t.Fatalf("deleted %d (%v), want 1", n, err)
	}
	if keys := keysOf(t, s, old.ID); len(keys) != 0 {
		t.Fatalf("keys left behind by a deleted job: %v", keys)
	}
	if resp, _ := s.Client().Get(ctx, s.IdemPrefix(), clientv3.WithPrefix(), clientv3.WithCountOnly()); resp.Count != 0 {
		t.Fatalf("%d idempotency records left", resp.Count)
	}
	for _, j := range []*mj.Job{pending, recent, running} {
		if _, err := s.Job(ctx, j.ID); err != nil {
			t.Fatalf("job %s deleted too: %v", j.ID, err)
		}
	}
	page, _ := s.ListJobs(ctx, "acct", store.ListOptions{Limit: 10})
	if page.Total != 3 || len(page.Jobs) != 3 {
		t.Fatalf("list after delete: total %d, %d jobs", page.Total, len(page.Jobs))
	}
	// The same Idempotency-Key, reused by a later job, keeps its record when the
	// first job that used it is deleted.
	a := newJob("acct", base.Add(4*time.Second))
	s.CreateJobOnce(ctx, a, &store.Idempotency{Key: "k2", Fingerprint: "f"})
	finish(a, base, "")
	s.SweepIdempotency(ctx, time.Now().Add(time.Hour)) // its 24 h passed
	b := newJob("acct", base.Add(5*time.Second))
	s.CreateJobOnce(ctx, b, &store.Idempotency{Key: "k2", Fingerprint: "g"})
	if n, err := s.DeleteFinishedJobs(ctx, time.Now().Add(-time.Hour), 0); err != nil || n != 1 {
		t.Fatalf("deleted %d (%v), want 1", n, err)
	}
	again, err := s.CreateJobOnce(ctx, newJob("acct", time.Now()), &store.Idempotency{Key: "k2", Fingerprint: "g"})
	if err != nil || again.ID != b.ID {
		t.Fatalf("the later job's idempotency record was deleted with the earlier job: %v %v", again, err)
	}
}

func TestBackfillDoneIndexesOldJobsOnce(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	j := newJob("acct", time.Now().Add(-time.Hour))
	s.CreateJob(ctx, j)
	s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { j.Status = mj.StatusFailed; return nil })
	// A job finished before done keys existed: remove its done key.
	s.Client().Delete(ctx, s.DonePrefix(), clientv3.WithPrefix())
	if n, _ := s.DeleteFinishedJobs(ctx, time.Now(), 0); n != 0 {
		t.Fatal("deleted a job with no done key")
	}
	if n, err := s.BackfillDone(ctx); err != nil || n != 1 {
		t.Fatalf("backfill: %d %v", n, err)
	}
	if n, _ := s.BackfillDone(ctx); n != 0 {
		t.Fatal("backfill ran twice")
	}
	if n, err := s.DeleteFinishedJobs(ctx, time.Now(), 0); err != nil || n != 1 {
		t.Fatalf("deleted %d (%v) after backfill", n, err)
	}
}
