package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

func newJob(account string, created time.Time) *mj.Job {
	return &mj.Job{
		ID: fmt.Sprintf("job-%d", created.UnixNano()), AccountID: account, Status: mj.StatusQueued,
		Machine: "cpu", OutputNames: []string{"out.mp4"}, FFmpegCommands: []string{"-i x outputs/out.mp4"},
		CreatedAt: created, QueuedAt: created, UpdatedAt: created,
	}
}

func TestCreateGetAndQueue(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	j := newJob("acct", time.Now())
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	if err := s.CreateJob(ctx, j); mj.ErrorCode(err) != mj.EConflict {
		t.Fatalf("second create: %v, want conflict", err)
	}
	got, err := s.Job(ctx, j.ID)
	if err != nil || got.ID != j.ID || got.Status != mj.StatusQueued {
		t.Fatalf("Job = %+v, %v", got, err)
	}
	if _, err := s.Job(ctx, "nope"); mj.ErrorCode(err) != mj.ENotFound {
		t.Fatalf("missing job: %v", err)
	}
	ids, _, _ := s.JobIDs(ctx, s.QueuePrefix(), 0)
	if len(ids) != 1 || ids[0] != j.ID {
		t.Fatalf("queue = %v", ids)
	}
}

func TestDerivedKeysFollowTheJob(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	j := newJob("acct", time.Now())
	j.WebhookURL = "http://127.0.0.1:1/hook"
	s.CreateJob(ctx, j)
	ids := func(prefix string) []string { v, _, _ := s.JobIDs(ctx, prefix, 0); return v }

	// dispatched: leaves the queue, enters the active set
	if _, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { j.NomadJobID = "mediajobs-cpu/dispatch-1"; return nil }); err != nil {
		t.Fatal(err)
	}
	if len(ids(s.QueuePrefix())) != 0 || len(ids(s.ActivePrefix())) != 1 {
		t.Fatalf("after dispatch: queue %v active %v", ids(s.QueuePrefix()), ids(s.ActivePrefix()))
	}
	// terminal: leaves the active set, enters the webhook outbox once
	s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { j.Status = mj.StatusRunning; return nil })
	s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { j.Status = mj.StatusSucceeded; return nil })
	if len(ids(s.ActivePrefix())) != 0 || len(ids(s.OutboxPrefix())) != 1 {
		t.Fatalf("after success: active %v outbox %v", ids(s.ActivePrefix()), ids(s.OutboxPrefix()))
	}
	// settling the delivery removes the outbox entry in the same write
	if _, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error {
		if j.Webhook == nil || j.Webhook.Status != "pending" || j.Webhook.DeliveryID == "" {
			t.Fatalf("webhook state on finishing: %+v", j.Webhook)
		}
		j.Webhook.Status = "delivered"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if len(ids(s.OutboxPrefix())) != 0 {
		t.Fatalf("settled delivery still in the outbox: %v", ids(s.OutboxPrefix()))
	}
	// a refused transition writes nothing
	_, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { j.Status = mj.StatusFailed; j.ErrorMessage = "late"; return nil })
	if mj.ErrorCode(err) != mj.EConflict {
		t.Fatalf("succeeded -> failed: %v, want conflict", err)
	}
	got, _ := s.Job(ctx, j.ID)
	if got.Status != mj.StatusSucceeded || got.ErrorMessage != "" || len(ids(s.OutboxPrefix())) != 0 {
		t.Fatalf("refused transition changed the job: %+v", got)
	}
}

func TestConcurrentUpdatesAreSerialised(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	j := newJob("acct", time.Now())
	s.CreateJob(ctx, j)
	var wg sync.WaitGroup
	for i := 0; i < 20; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if _, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { j.Attempt++; return nil }); err != nil {
				t.Error(err)
			}
		}()
	}
	wg.Wait()
	got, _ := s.Job(ctx, j.ID)
	if got.Attempt != 20 {
		t.Fatalf("Attempt = %d after 20 concurrent increments: a write was lost", got.Attempt)
	}
	// Two racing terminal transitions: exactly one wins.
	var wins, conflicts int
	var mu sync.Mutex
	for _, st := range []mj.Status{mj.StatusCancelled, mj.StatusFailed, mj.StatusSucceeded} {
		wg.Add(1)
		go func(st mj.Status) {
			defer wg.Done()
			_, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { j.Status = st; return nil })
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				wins++
			} else if mj.ErrorCode(err) == mj.EConflict {
				conflicts++
			}
		}(st)
	}
	wg.Wait()
	if wins != 1 || conflicts != 2 {
		// (a same-status write is allowed, so each loser must have lost to another status)
		t.Fatalf("wins=%d conflicts=%d, want 1 and 2", wins, conflicts)
	}
}

func TestUpdateJobsIsUpdateJobForMany(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	// More jobs than one transaction takes (64), each with a pending webhook.
	const n = 150
	var ids []string
	t0 := time.Now()
	for i := 0; i < n; i++ {
		j := newJob("acct", t0.Add(time.Duration(i)))
		j.WebhookURL = "http://127.0.0.1:1/hook"
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		if _, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { j.Status = mj.StatusFailed; return nil }); err != nil {
			t.Fatal(err)
		}
		ids = append(ids, j.ID)
	}
	outbox := func() int { c, _ := s.Count(ctx, s.OutboxPrefix()); return c }
	if outbox() != n {
		t.Fatalf("outbox = %d, want %d", outbox(), n)
	}
	read, errs := s.Jobs(ctx, append(ids, "nope"))
	if mj.ErrorCode(errs[n]) != mj.ENotFound || read[n] != nil {
		t.Fatalf("missing job: %v %v", read[n], errs[n])
	}
	// Job 0's From is stale (changed after it was read), job 1 has no From, job 2
	// refuses its change, the last one does not exist.
	if _, err := s.UpdateJob(ctx, ids[0], func(j *mj.Job) error { j.ErrorMessage = "changed meanwhile"; return nil }); err != nil {
		t.Fatal(err)
	}
	settle := func(j *mj.Job) error {
		if j.Webhook == nil || j.Webhook.Status != "pending" {
			return fmt.Errorf("job %s: webhook %+v", j.ID, j.Webhook)
		}
		j.Webhook.Status, j.Webhook.Attempts = "delivered", 1
		return nil
	}
	var us []store.JobUpdate
	for i, id := range ids {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		u := store.JobUpdate{ID: id, From: read[i], Fn: settle}
		switch i {
		case 1:
			u.From = nil
		case 2:
			u.Fn = func(j *mj.Job) error { j.Status = mj.StatusRunning; return nil }
		}
		us = append(us, u)
	}
	us = append(us, store.JobUpdate{ID: "nope", Fn: settle})
	jobs, errs := s.UpdateJobs(ctx, us)
	if mj.ErrorCode(errs[2]) != mj.EConflict || jobs[2] != nil {
		t.Fatalf("failed -> running: %v, want conflict", errs[2])
	}
	if mj.ErrorCode(errs[n]) != mj.ENotFound {
		t.Fatalf("missing job: %v", errs[n])
	}
	for i, id := range ids {
		if i == 2 {
			continue
		}
		if errs[i] != nil {
			t.Fatalf("update %d: %v", i, errs[i])
		}
		got, _ := s.Job(ctx, id)
		if got.Webhook.Status != "delivered" || jobs[i].Revision != got.Revision {
			t.Fatalf("job %d = %+v (revision %d), returned revision %d", i, got.Webhook, got.Revision, jobs[i].Revision)
		}
	}
	if got, _ := s.Job(ctx, ids[0]); got.ErrorMessage != "changed meanwhile" {
		t.Fatalf("the stale From overwrote a newer change: %q", got.ErrorMessage)
	}
	if got, _ := s.Job(ctx, ids[2]); got.Status != mj.StatusFailed || got.Webhook.Status != "pending" {
		t.Fatalf("a refused update wrote: %+v", got)
	}
	// Settling removed the outbox entries in the same writes; only job 2's is left.
	if outbox() != 1 {
		t.Fatalf("outbox = %d, want 1", outbox())
	}
}

func TestListNewestFirstPerAccount(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	base := time.Now()
	for i := 0; i < 7; i++ {
		s.CreateJob(ctx, newJob("a", base.Add(time.Duration(i)*time.Second)))
	}
	s.CreateJob(ctx, newJob("b", base.Add(time.Hour)))

	p, err := s.ListJobs(ctx, "a", store.ListOptions{Limit: 3})
	if err != nil {
		t.Fatal(err)
	}
	if p.Total != 7 || len(p.Jobs) != 3 || p.Next == "" {
		t.Fatalf("page 1: total %d, %d jobs, next %q", p.Total, len(p.Jobs), p.Next)
	}
	for i, j := range p.Jobs {
		if want := newJob("a", base.Add(time.Duration(6-i)*time.Second)).ID; j.ID != want {
			t.Fatalf("page 1 [%d] = %s, want %s", i, j.ID, want)
		}
	}
	off, _ := s.ListJobs(ctx, "a", store.ListOptions{Limit: 3, Offset: 3})
	cur, _ := s.ListJobs(ctx, "a", store.ListOptions{Limit: 3, After: p.Next})
	if len(off.Jobs) != 3 || off.Jobs[0].ID != cur.Jobs[0].ID || off.Jobs[0].ID == p.Jobs[2].ID {
		t.Fatalf("offset and cursor pages disagree: %v vs %v", off.Jobs[0].ID, cur.Jobs[0].ID)
	}
	last, _ := s.ListJobs(ctx, "a", store.ListOptions{Limit: 3, Offset: 6})
	if len(last.Jobs) != 1 || last.Next != "" {
		t.Fatalf("last page: %d jobs, next %q", len(last.Jobs), last.Next)
	}
	b, _ := s.ListJobs(ctx, "b", store.ListOptions{Limit: 50})
	if b.Total != 1 || len(b.Jobs) != 1 || b.Jobs[0].AccountID != "b" {
		t.Fatalf("account b sees %+v", b)
	}
}

func TestAPIKeysStoredHashed(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	acct, _ := s.CreateAccount(ctx, "acme")
	secret := mj.NewAPIKeySecret()
	k, err := s.AddAPIKey(ctx, acct.ID, "ci", secret)
	if err != nil {
		t.Fatal(err)
	}
	again, _ := s.AddAPIKey(ctx, acct.ID, "ci", secret)
	if again.ID != k.ID {
		t.Fatal("adding the same secret twice made a second key")
	}
	got, err := s.APIKeyByHash(ctx, mj.HashAPIKey(secret))
	if err != nil || got.AccountID != acct.ID {
		t.Fatalf("lookup: %+v %v", got, err)
	}
	// The secret appears nowhere in etcd.
	resp, _ := e.Client.Get(ctx, "", clientv3WithPrefix())
	for _, kv := range resp.Kvs {
		if contains(string(kv.Value), secret) || contains(string(kv.Key), secret) {
			t.Fatalf("secret stored in clear under %s", kv.Key)
		}
	}
}

func TestQueuedAtFromKey(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	j := newJob("acct", time.Unix(1700000000, 123456789))
	if err := s.CreateJob(ctx, j); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Client().Get(ctx, s.QueuePrefix(), clientv3WithPrefix())
	if err != nil || len(resp.Kvs) != 1 {
		t.Fatalf("queue: %v %v", resp, err)
	}
	if at, ok := store.QueuedAtFromKey(string(resp.Kvs[0].Key)); !ok || !at.Equal(j.QueuedAt) {
		t.Fatalf("QueuedAtFromKey(%s) = %v, %v; want %v", resp.Kvs[0].Key, at, ok, j.QueuedAt)
	}
	if _, ok := store.QueuedAtFromKey("/p/queue/cpu/nonsense"); ok {
		t.Fatal("a key without a time parsed")
	}
}
