package dispatcher

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/url"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
)

// The awaiter releases a waiting job into its pool's queue, with the output's
// key, when the job it awaits succeeds; fails it naming the job when that one
// fails or is cancelled; and settles a job created awaiting one that had
// already ended (the create raced the end).
func TestAwaiterReleasesAndFailsWaitingJobs(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Now().UTC()
	job := func(inputs map[string]string, awaits ...string) *mj.Job {
		j := &mj.Job{ID: uuid.NewString(), AccountID: "acct", Status: mj.StatusQueued, Machine: "cpu",
			InputFiles: inputs, OutputNames: []string{"out.mp4"}, FFmpegCommands: []string{"-i {{v}} {{out.mp4}}"},
			Awaits: awaits, CreatedAt: now, QueuedAt: now, UpdatedAt: now}
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	ref := func(dep *mj.Job) map[string]string { return map[string]string{"v": "job:" + dep.ID + "/out.mp4"} }
	a := &awaiter{store: s, log: slog.Default(), now: time.Now, resync: time.Minute}
	go a.run(ctx)

	ok, bad := job(nil), job(nil)
	released, failed := job(ref(ok), ok.ID), job(ref(bad), bad.ID)
	end := func(id string, fn func(j *mj.Job)) {
		if _, err := s.UpdateJob(ctx, id, func(j *mj.Job) error { fn(j); return nil }); err != nil {
			t.Fatal(err)
		}
	}
	key := mj.RunScope(ok.ID, 1) + "alloc/outputs/out.mp4"
	end(ok.ID, func(j *mj.Job) { j.Outputs = []mj.Output{{Name: "out.mp4", Key: key}}; j.Succeed(time.Now(), "") })
	end(bad.ID, func(j *mj.Job) { j.Fail(time.Now(), "ffmpeg exited with code 1") })

	read := func(id string) *mj.Job {
		j, err := s.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	testenv.Eventually(t, time.Minute, "the waiting job released", func() bool { return len(read(released.ID).Awaits) == 0 })
	if j := read(released.ID); j.Status != mj.StatusQueued || j.InputKeys["v"] != key || j.StatusDetail != "" {
		t.Fatalf("released: %s %v %q", j.Status, j.InputKeys, j.StatusDetail)
	}
	queue, _, _ := s.JobIDs(ctx, s.QueuePrefix(), 0)
	if !slices.Contains(queue, released.ID) {
		t.Fatalf("the released job is not in the queue: %v", queue)
	}
	testenv.Eventually(t, time.Minute, "the job awaiting a failed one failed", func() bool { return read(failed.ID).Status == mj.StatusFailed })
	if msg := read(failed.ID).ErrorMessage; !strings.Contains(msg, "input_files.v: job "+bad.ID+" failed") || !strings.Contains(msg, "ffmpeg exited with code 1") {
		t.Fatalf("error_message %q", msg)
	}

	// Created awaiting a job that had ended meanwhile: settled as its awaits
	// key appears.
	cancelled := job(nil)
	end(cancelled.ID, func(j *mj.Job) { j.Cancel(time.Now(), "by the test") })
	late := job(ref(cancelled), cancelled.ID)
	testenv.Eventually(t, time.Minute, "the late waiter failed", func() bool { return read(late.ID).Status == mj.StatusFailed })
	if msg := read(late.ID).ErrorMessage; !strings.Contains(msg, "was cancelled") {
		t.Fatalf("error_message %q", msg)
	}
	if left, _, _ := s.JobIDs(ctx, s.AwaitsPrefix(), 0); len(left) != 0 {
		t.Fatalf("awaits keys left: %v", left)
	}
}

// A released job's manifest carries a signed link to each referenced output in
// place of its job:<id>/<output> value; other inputs go as given.
func TestManifestSignsReferencedOutputs(t *testing.T) {
	cfg := config.Default()
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	blobs, _ := blob.NewLocal(t.TempDir())
	signer := blob.Signer{Secret: []byte("0123456789abcdef"), Base: "http://gw.test"}
	d := &Dispatcher{Config: cfg, Blobs: blobs, Signer: signer}
	key := mj.RunScope("3f2a7c1e-8d4b-4e6f-9a0b-1c2d3e4f5a6b", 1) + "alloc/outputs/out.mp4"
	j := &mj.Job{ID: "j", Machine: "cpu", TimeoutSeconds: 60,
		InputFiles: map[string]string{"v": "job:3f2a7c1e-8d4b-4e6f-9a0b-1c2d3e4f5a6b/out.mp4", "u": "https://media.example/a.mp4"},
		InputKeys:  map[string]string{"v": key}}
	b, err := d.manifest(context.Background(), j, 1)
	if err != nil {
		t.Fatal(err)
	}
	var m mj.Manifest
	json.Unmarshal(b, &m)
	if m.InputFiles["u"] != "https://media.example/a.mp4" {
		t.Fatalf("a URL input became %q", m.InputFiles["u"])
	}
	u, err := url.Parse(m.InputFiles["v"])
	if err != nil || !strings.HasPrefix(m.InputFiles["v"], "http://gw.test/files/"+key) || signer.Verify("GET", key, u.Query(), time.Now()) != nil {
		t.Fatalf("the referenced output's link %q is not a signed link to %s (%v)", m.InputFiles["v"], key, err)
	}
	if j.InputFiles["v"] != "job:3f2a7c1e-8d4b-4e6f-9a0b-1c2d3e4f5a6b/out.mp4" {
		t.Fatal("the manifest rewrote the job's own inputs")
	}
}

// An await that no input names only orders a job after another (a chunked
// job's max_workers): the job waits while that one runs, is released with no
// input keys once it succeeded, and fails, saying so, once it failed.
func TestAwaiterOrderOnlyAwaits(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	now := time.Now().UTC()
	job := func(awaits ...string) *mj.Job {
		j := &mj.Job{ID: uuid.NewString(), AccountID: "acct", Status: mj.StatusQueued, Machine: "cpu",
			InputFiles: map[string]string{"v": "https://media.example/a.mp4"}, OutputNames: []string{"out.mp4"}, FFmpegCommands: []string{"-i {{v}} {{out.mp4}}"},
			Awaits: awaits, CreatedAt: now, QueuedAt: now, UpdatedAt: now}
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		return j
	}
	read := func(id string) *mj.Job {
		j, err := s.Job(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	first, other := job(), job()
	after, afterBad := job(first.ID), job(other.ID)
	a := &awaiter{store: s, log: slog.Default(), now: time.Now, resync: 100 * time.Millisecond}
	go a.run(ctx)
	if _, err := s.UpdateJob(ctx, first.ID, func(j *mj.Job) error { now := time.Now(); j.StartedAt = &now; j.Run(""); return nil }); err != nil {
		t.Fatal(err)
	}
	// Settled while first runs: after waits.
	a.settle(ctx, after.ID)
	if j := read(after.ID); len(j.Awaits) != 1 || j.Status != mj.StatusQueued || !strings.Contains(j.AwaitingDetail(), first.ID+" to succeed") {
		t.Fatalf("released while the job it runs after runs: %+v", j)
	}
	if _, err := s.UpdateJob(ctx, first.ID, func(j *mj.Job) error { j.Succeed(time.Now(), ""); return nil }); err != nil {
		t.Fatal(err)
	}
	if _, err := s.UpdateJob(ctx, other.ID, func(j *mj.Job) error { j.Fail(time.Now(), "ffmpeg exited 1"); return nil }); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "after released", func() bool { return len(read(after.ID).Awaits) == 0 })
	if j := read(after.ID); j.Status != mj.StatusQueued || len(j.InputKeys) != 0 {
		t.Fatalf("released: %+v", j)
	}
	testenv.Eventually(t, time.Minute, "afterBad failed", func() bool { return read(afterBad.ID).Status == mj.StatusFailed })
	if j := read(afterBad.ID); !strings.Contains(j.ErrorMessage, other.ID+", which this job runs after, failed") {
		t.Fatalf("error %q", j.ErrorMessage)
	}
}
