package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// stalledBlobs never answers a read of a key under stall, nor a sweep: not even
// when the caller's context ends (a hung disk; an S3 client that waits for ever).
type stalledBlobs struct {
	*fakeBlobs
	stall   string
	release chan struct{}
}

func (s *stalledBlobs) ReadAll(ctx context.Context, key string) ([]byte, error) {
	if strings.HasPrefix(key, s.stall) {
		<-s.release
		return nil, errors.New("released")
	}
	return s.fakeBlobs.ReadAll(ctx, key)
}

func (s *stalledBlobs) Sweep(context.Context, string, time.Time) (int, error) {
	<-s.release
	return 0, errors.New("released")
}

// One stalled result read holds its event worker for BlobTimeout at most: the
// events queued behind it are applied, and the stalled job is left for the next
// read.
func TestStalledBlobReadDoesNotHoldTheWorker(t *testing.T) {
	stuck, next := "00000000-0000-4000-8000-000000000801", "00000000-0000-4000-8000-000000000802"
	blobs := &stalledBlobs{fakeBlobs: &fakeBlobs{}, stall: mj.RunScope(stuck, 1), release: make(chan struct{})}
	d, ctx := fixDispatcher(t, 1, &fakeJobs{}, blobs)
	d.BlobTimeout = 100 * time.Millisecond
	rewire(d)
	started := time.Now().UTC().Add(-time.Minute)
	fixJob(t, d, &mj.Job{ID: stuck, Status: mj.StatusRunning, NomadJobID: child(stuck, 1), Attempt: 1, StartedAt: &started})
	fixJob(t, d, &mj.Job{ID: next, Status: mj.StatusQueued, NomadJobID: child(next, 1), Attempt: 1})

	work := newPartitions(1, 8) // one worker: next's event waits behind stuck's
	defer work.close()
	defer close(blobs.release) // before the workers are waited for
	mark := newWatermark(1)
	d.track.submit(ctx, &api.Events{Index: 5, Events: []api.Event{
		allocEvent(5, &api.Allocation{ID: "a1", JobID: child(stuck, 1), ClientStatus: api.AllocClientStatusComplete}),
		allocEvent(5, &api.Allocation{ID: "a2", JobID: child(next, 1), ClientStatus: api.AllocClientStatusRunning}),
	}}, work, mark)
	testenv.Eventually(t, 20*time.Second, "the event behind the stalled read applied", func() bool {
		j, err := d.Store.Job(ctx, next)
		return err == nil && j.Status == mj.StatusRunning
	})
	testenv.Eventually(t, 20*time.Second, "the batch handled", func() bool { return mark.get() == 5 })
	if j, _ := d.Store.Job(ctx, stuck); j.Status != mj.StatusRunning || j.ErrorMessage != "" {
		t.Fatalf("one timed-out read settled the job: %s %q", j.Status, j.ErrorMessage)
	}

	// The janitor's sweep has its deadline too.
	swept := make(chan struct{})
	go func() { d.Sweep(ctx, time.Now()); close(swept) }()
	select {
	case <-swept:
	case <-time.After(time.Minute):
		t.Fatal("a stalled blob sweep held the janitor")
	}
}

// A result.json the store keeps refusing (an S3 403) fails its job with the
// store's error after a bounded number of tries over a bounded time, instead of
// leaving it running for ever. One failure alone changes nothing.
func TestPersistentResultErrorFailsTheJob(t *testing.T) {
	id := "00000000-0000-4000-8000-000000000803"
	ch := child(id, 1)
	blobs := &refusedKeys{fakeBlobs: fakeBlobs{data: map[string][]byte{}}, refused: id, err: errors.New("AccessDenied: Access Denied (status code: 403)")}
	d, ctx := fixDispatcher(t, 3, &fakeJobs{children: map[string][]*api.AllocationListStub{ch: {{ID: "a1", JobID: ch, ClientStatus: "complete"}}}}, blobs)
	d.settle.res.errs.limit = time.Nanosecond // the time bound passed; the tries remain
	started := time.Now().UTC().Add(-time.Minute)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: ch, Attempt: 1, StartedAt: &started, TimeoutSeconds: 600})

	for try := 1; try < resultErrorTries; try++ {
		d.settle.apply(ctx, allocState{ID: "a1", NomadJobID: ch, ClientStatus: api.AllocClientStatusComplete})
		if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusRunning {
			t.Fatalf("after %d failed reads: %s %q", try, j.Status, j.ErrorMessage)
		}
	}
	// The store answers other calls: it is this object that is refused.
	if _, err := d.storage().List(ctx, "jobs/another/"); err != nil {
		t.Fatal(err)
	}
	d.recon.reconcile(ctx) // reconcile's reads count the same
	j, _ := d.Store.Job(ctx, id)
	if j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "could not be read from the blob store") || !strings.Contains(j.ErrorMessage, "403") {
		t.Fatalf("after %d failed reads: %s %q", resultErrorTries, j.Status, j.ErrorMessage)
	}
	if j.Attempt != 1 {
		t.Fatalf("an unreadable result was retried as attempt %d", j.Attempt)
	}
}

// Failures further apart than resultErrorGap are not one persistent error, nor
// are failures while the store answers nothing else (an outage).
func TestReadFailuresNeedPersistence(t *testing.T) {
	var r readFailures
	t0 := time.Now()
	up := t0.Add(time.Second) // the store answered other calls after the first failure
	for i, at := range []time.Duration{0, resultErrorLimit / 3, 2 * resultErrorLimit / 3, resultErrorLimit} {
		if p, _, _ := r.note("j", 1, t0.Add(at), up); p != (i == 3) {
			t.Fatalf("failure %d at %s: persistent = %v", i+1, at, p)
		}
	}
	if p, _, tries := r.note("j", 1, t0.Add(resultErrorLimit+time.Second), up); p || tries != 1 {
		t.Fatalf("a reported failure is forgotten: persistent %v, tries %d", p, tries)
	}
	late := t0.Add(2*resultErrorLimit + 2*resultErrorGap)
	if p, since, tries := r.note("j", 1, late, up); p || tries != 1 || !since.Equal(late) {
		t.Fatalf("a failure after a gap starts afresh: %v %v %d", p, since, tries)
	}
	var outage readFailures
	for i := 0; i < 10; i++ {
		at := t0.Add(time.Duration(i) * resultErrorLimit / 4)
		if p, _, _ := outage.note("j", 1, at, t0.Add(-time.Second)); p {
			t.Fatalf("failure %d while the store answered nothing since: persistent", i+1)
		}
	}
}

// refusedKeys refuses every call about keys containing refused (an S3 403 on
// one job's objects) and answers the rest.
type refusedKeys struct {
	fakeBlobs
	refused string
	err     error
}

func (r *refusedKeys) ReadAll(ctx context.Context, key string) ([]byte, error) {
	if strings.Contains(key, r.refused) {
		return nil, r.err
	}
	return r.fakeBlobs.ReadAll(ctx, key)
}

func (r *refusedKeys) List(ctx context.Context, prefix string) ([]string, error) {
	if strings.Contains(prefix, r.refused) {
		return nil, r.err
	}
	return r.fakeBlobs.List(ctx, prefix)
}

// A whole store that refuses everything (an outage, revoked credentials) fails no
// job, however long it lasts: the results are read once it is back.
func TestBlobOutageFailsNoJob(t *testing.T) {
	id := "00000000-0000-4000-8000-000000000804"
	ch := child(id, 1)
	blobs := &fakeBlobs{err: errors.New("AccessDenied: Access Denied (status code: 403)"), data: map[string][]byte{}}
	d, ctx := fixDispatcher(t, 3, &fakeJobs{children: map[string][]*api.AllocationListStub{ch: {{ID: "a1", JobID: ch, ClientStatus: "complete"}}}}, blobs)
	d.settle.res.errs.limit = time.Nanosecond
	started := time.Now().UTC().Add(-time.Minute)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: ch, Attempt: 1, StartedAt: &started, TimeoutSeconds: 600})
	for try := 1; try <= 3*resultErrorTries; try++ {
		d.settle.apply(ctx, allocState{ID: "a1", NomadJobID: ch, ClientStatus: api.AllocClientStatusComplete})
		if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusRunning {
			t.Fatalf("after %d failed reads in an outage: %s %q", try, j.Status, j.ErrorMessage)
		}
	}
}

// A result read that times out (a slow store) never fails its job, however often,
// while the store answers other calls: the result may well be there.
func TestSlowResultReadsFailNoJob(t *testing.T) {
	id := "00000000-0000-4000-8000-000000000805"
	ch := child(id, 1)
	blobs := &refusedKeys{fakeBlobs: fakeBlobs{data: map[string][]byte{}}, refused: id,
		err: fmt.Errorf("blob store read: no answer within 30s: %w", context.DeadlineExceeded)}
	d, ctx := fixDispatcher(t, 3, &fakeJobs{children: map[string][]*api.AllocationListStub{ch: {{ID: "a1", JobID: ch, ClientStatus: "complete"}}}}, blobs)
	d.settle.res.errs.limit = time.Nanosecond
	started := time.Now().UTC().Add(-time.Minute)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: ch, Attempt: 1, StartedAt: &started, TimeoutSeconds: 600})
	for try := 1; try <= 3*resultErrorTries; try++ {
		if _, err := d.storage().List(ctx, "jobs/another/"); err != nil {
			t.Fatal(err)
		}
		d.settle.apply(ctx, allocState{ID: "a1", NomadJobID: ch, ClientStatus: api.AllocClientStatusComplete})
		if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusRunning {
			t.Fatalf("after %d slow reads: %s %q", try, j.Status, j.ErrorMessage)
		}
	}
}
