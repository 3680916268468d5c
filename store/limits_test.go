package store_test

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdState is the store's key count and etcd's revision: a refused request
// changes neither.
func etcdState(t *testing.T, cli *clientv3.Client) (int64, int64) {
	t.Helper()
	resp, err := cli.Get(context.Background(), "", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		t.Fatal(err)
	}
	return resp.Count, resp.Header.Revision
}

// wantQuota checks err is quotaExceeded naming limit, value and use.
func wantQuota(t *testing.T, err error, limit, value, use string) {
	t.Helper()
	var e *mj.Error
	if !errors.As(err, &e) || e.Code != mj.EQuotaExceeded || e.Details["limit"] != limit || e.Details["value"] != value || e.Details["use"] != use {
		t.Fatalf("got %v (%+v); want quotaExceeded %s value %s use %s", err, e, limit, value, use)
	}
}

// Each limit of amounts held: the create that would cross it is refused with
// quotaExceeded naming the limit, and etcd holds nothing new.
func TestCreateWithinLimits(t *testing.T) {
	s, e := testenv.Etcd(t)
	ctx := context.Background()
	now := time.Now()
	at := func(i int) time.Time { return now.Add(time.Duration(i) * time.Millisecond) }
	refused := func(j *mj.Job, idem *store.Idempotency, l store.Limits, limit, value, use string) {
		t.Helper()
		keys, rev := etcdState(t, e.Client)
		_, err := s.CreateJobWithin(ctx, j, idem, l)
		wantQuota(t, err, limit, value, use)
		if k, r := etcdState(t, e.Client); k != keys || r != rev {
			t.Fatalf("%s: a refused create wrote to etcd: keys %d -> %d, revision %d -> %d", limit, keys, k, rev, r)
		}
	}

	// Jobs queued.
	l := store.Limits{MaxQueuedJobs: 2}
	for i := range 2 {
		if _, err := s.CreateJobWithin(ctx, newJob("a", at(i)), nil, l); err != nil {
			t.Fatal(err)
		}
	}
	refused(newJob("a", at(2)), nil, l, "max_queued_jobs", "2", "2")
	if _, err := s.CreateJobWithin(ctx, newJob("b", at(3)), nil, l); err != nil {
		t.Fatalf("another account's create: %v", err)
	}
	// The account's own override replaces the default.
	three := int64(3)
	if err := s.SetAccountSchedule(ctx, "a", store.Schedule{LimitOverrides: store.LimitOverrides{MaxQueuedJobs: &three}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.CreateJobWithin(ctx, newJob("a", at(4)), nil, l); err != nil {
		t.Fatalf("under the account's own limit: %v", err)
	}
	refused(newJob("a", at(5)), nil, l, "max_queued_jobs", "3", "3")

	// Bytes of job records: the account's records so far, then one more.
	lim, u, _, err := s.AccountLimits(ctx, "a", l)
	if err != nil || lim.MaxQueuedJobs != 3 || u.QueuedJobs != 3 || u.JobBytes <= 0 {
		t.Fatalf("AccountLimits: %+v %+v %v", lim, u, err)
	}
	_, u, _, _ = s.AccountLimits(ctx, "b", l)
	j := newJob("b", at(6))
	refused(j, nil, store.Limits{MaxJobBytes: u.JobBytes + 10}, "max_job_bytes", itoa(u.JobBytes+10), itoa(u.JobBytes))
	if _, err := s.CreateJobWithin(ctx, newJob("b", at(6)), nil, store.Limits{MaxJobBytes: 2*u.JobBytes + 200}); err != nil {
		t.Fatalf("within max_job_bytes: %v", err)
	}

	// The largest timeout.
	j = newJob("c", at(7))
	j.TimeoutSeconds = 601
	refused(j, nil, store.Limits{MaxTimeoutSeconds: 600}, "max_timeout_seconds", "600", "601")
}

func itoa(n int64) string { return strconv.FormatInt(n, 10) }

// An account over its quota: its running job still finishes, its webhook is
// queued for delivery, a retried create (same Idempotency-Key) gets its job,
// and the retention gives the bytes back.
func TestOverQuotaLosesNothingRunning(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	l := store.Limits{MaxQueuedJobs: 1}
	now := time.Now().Add(-time.Hour)
	run := newJob("a", now)
	run.WebhookURL = "https://hooks.example/x"
	idem := &store.Idempotency{Key: "k", Fingerprint: "f"}
	if _, err := s.CreateJobWithin(ctx, run, idem, l); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateJob(ctx, run.ID, func(j *mj.Job) error { j.Status, j.NomadJobID = mj.StatusRunning, "n/1"; return nil }); err != nil {
		t.Fatal(err)
	}
	queued := newJob("a", now.Add(time.Millisecond))
	if _, err := s.CreateJobWithin(ctx, queued, nil, l); err != nil {
		t.Fatal(err)
	}
	_, err := s.CreateJobWithin(ctx, newJob("a", now.Add(2*time.Millisecond)), nil, l)
	wantQuota(t, err, "max_queued_jobs", "1", "1")
	// A retry of the first create is answered with its job, not refused.
	again, err := s.CreateJobWithin(ctx, newJob("a", now.Add(3*time.Millisecond)), idem, l)
	if err != nil || again.ID != run.ID {
		t.Fatalf("retried create over quota: %+v, %v; want job %s", again, err, run.ID)
	}
	done, err := s.UpdateJob(ctx, run.ID, func(j *mj.Job) error {
		j.Status = mj.StatusSucceeded
		j.Webhook = &mj.WebhookState{Status: "pending"}
		return nil
	})
	if err != nil || done.Status != mj.StatusSucceeded {
		t.Fatalf("the running job could not finish over quota: %v", err)
	}
	if ids, _, err := s.JobIDs(ctx, s.OutboxPrefix(), 0); err != nil || len(ids) != 1 || ids[0] != run.ID {
		t.Fatalf("webhook outbox %v, %v; want %s", ids, err, run.ID)
	}
	// Delivered: the retention deletes the job and gives its bytes back.
	if _, err := s.UpdateJob(ctx, run.ID, func(j *mj.Job) error { j.Webhook = &mj.WebhookState{Status: "delivered"}; return nil }); err != nil {
		t.Fatal(err)
	}
	_, before, _, _ := s.AccountLimits(ctx, "a", l)
	if n, err := s.DeleteFinishedJobs(ctx, time.Now().Add(time.Hour), 0); err != nil || n != 1 {
		t.Fatalf("DeleteFinishedJobs = %d, %v", n, err)
	}
	_, after, _, _ := s.AccountLimits(ctx, "a", l)
	if after.JobBytes != before.JobBytes-run.RecordBytes || run.RecordBytes <= 0 || after.QueuedJobs != 1 {
		t.Fatalf("usage before %+v, after %+v; the deleted job counted %d bytes", before, after, run.RecordBytes)
	}
}

// Creates racing from several gateways (here goroutines on one store) never take
// an account past its limit: the create's transaction compares what it read.
func TestConcurrentCreatesStayWithinLimit(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	now := time.Now()
	errs := make(chan error, 8)
	for i := range 8 {
		go func() {
			_, err := s.CreateJobWithin(ctx, newJob("r", now.Add(time.Duration(i)*time.Millisecond)), nil, store.Limits{MaxQueuedJobs: 3})
			errs <- err
		}()
	}
	ok := 0
	for range 8 {
		switch err := <-errs; mj.ErrorCode(err) {
		case mj.EQuotaExceeded:
		default:
			if err != nil {
				t.Fatal(err)
			}
			ok++
		}
	}
	if _, u, _, _ := s.AccountLimits(ctx, "r", store.Limits{}); ok != 3 || u.QueuedJobs != 3 {
		t.Fatalf("%d creates accepted, %d queued; want 3", ok, u.QueuedJobs)
	}
}

// Far from its limits, an account's creates do not contend: 100 at once all
// succeed (none is refused as "too many creates at once"), and the byte counter,
// spread over shards, adds up to every record.
func TestConcurrentCreatesFarFromTheLimits(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	now := time.Now()
	const n = 100
	limits := store.Limits{MaxQueuedJobs: 1000, MaxJobBytes: 1 << 30}
	jobs := make(chan *mj.Job, n)
	errs := make(chan error, n)
	for i := range n {
		go func() {
			j, err := s.CreateJobWithin(ctx, newJob("c", now.Add(time.Duration(i)*time.Millisecond)), nil, limits)
			jobs <- j
			errs <- err
		}()
	}
	var want int64
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
		want += (<-jobs).RecordBytes
	}
	if _, u, _, _ := s.AccountLimits(ctx, "c", limits); u.QueuedJobs != n || u.JobBytes != want {
		t.Fatalf("usage %+v, want %d queued and %d bytes", u, n, want)
	}
}

// What a create stores beside the record counts against max_job_bytes with it
// (security review §1): with 64 KiB allowed, two jobs carrying about 30 KiB of
// destination URLs each fit and the third is refused. The URLs go when the job
// ends, and the retention gives back exactly what was counted, Idempotency-Key
// records included, so the account holds nothing afterwards.
func TestDestinationsCountAgainstMaxJobBytes(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	l := store.Limits{MaxJobBytes: 64 << 10}
	base := time.Now().Add(-time.Hour)
	withDestinations := func(i int) *mj.Job {
		j := newJob("a", base.Add(time.Duration(i)*time.Millisecond))
		d := &mj.Destinations{URLs: map[string]string{}, KeepOutputs: true}
		for k := range 20 { // 20 URLs of 1.5 KiB: about 30 KiB
			name := "o" + strconv.Itoa(k) + ".mp4"
			j.OutputNames = append(j.OutputNames, name)
			d.URLs[name] = "https://bucket.example/" + name + "?sig=" + strings.Repeat("x", 1500)
		}
		j.HasDestinations, j.Destinations = true, d
		return j
	}
	var created []*mj.Job
	for i := range 2 {
		j, err := s.CreateJobWithin(ctx, withDestinations(i), &store.Idempotency{Key: "k" + strconv.Itoa(i), Fingerprint: "f"}, l)
		if err != nil {
			t.Fatalf("create %d: %v", i+1, err)
		}
		if j.RecordBytes < 30<<10 {
			t.Fatalf("create %d counted %d bytes; its destinations alone are over 30 KiB", i+1, j.RecordBytes)
		}
		created = append(created, j)
	}
	_, u, _, _ := s.AccountLimits(ctx, "a", l)
	_, err := s.CreateJobWithin(ctx, withDestinations(2), nil, l)
	wantQuota(t, err, "max_job_bytes", itoa(64<<10), itoa(u.JobBytes))

	// A finished job's destinations go with the transition that ends it.
	for _, j := range created {
		if _, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { j.Status = mj.StatusCancelled; return nil }); err != nil {
			t.Fatal(err)
		}
		if d, err := s.Destinations(ctx, j.ID); err != nil || d != nil {
			t.Fatalf("destinations of a finished job: %v, %v; want none", d, err)
		}
	}
	if _, u, _, _ = s.AccountLimits(ctx, "a", l); u.JobBytes != created[0].RecordBytes+created[1].RecordBytes {
		t.Fatalf("held %d; the finished jobs count %d until the retention deletes them", u.JobBytes, created[0].RecordBytes+created[1].RecordBytes)
	}
	if n, err := s.DeleteFinishedJobs(ctx, time.Now().Add(time.Hour), 0); err != nil || n != 2 {
		t.Fatalf("DeleteFinishedJobs = %d, %v", n, err)
	}
	if _, u, _, _ = s.AccountLimits(ctx, "a", l); u.JobBytes != 0 {
		t.Fatalf("held %d after the retention; want 0", u.JobBytes)
	}
	resp, err := s.Client().Get(ctx, "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if k := string(kv.Key); strings.Contains(k, "destinations/") || strings.Contains(k, "idem/") {
			t.Fatalf("left behind: %s", k)
		}
	}
}
