package dispatcher

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/mediajobs/mediajobs/webhook"
)

// testPipeline plans a pipeline of steps named in order; needs[step] is the
// step whose out.mp4 it takes (none: it takes a URL).
func testPipeline(names []string, needs map[string]string) *mj.Pipeline {
	now := time.Now().UTC()
	p := &mj.Pipeline{ID: uuid.NewString(), AccountID: "acct", CreatedAt: now, UpdatedAt: now}
	ids := map[string]string{}
	for _, name := range names {
		id := uuid.NewString()
		ids[name] = id
		j := &mj.Job{ID: id, AccountID: "acct", Status: mj.StatusQueued, Machine: "cpu",
			InputFiles: map[string]string{"v": "https://media.example/a.mp4"}, OutputNames: []string{"out.mp4"},
			FFmpegCommands: []string{"-i {{v}} {{out.mp4}}"}, TimeoutSeconds: 60,
			CreatedAt: now, QueuedAt: now, UpdatedAt: now, Pipeline: &mj.PipelineRef{ID: p.ID, Step: name}}
		step := mj.PipelineStep{Name: name, Jobs: []string{id}}
		if dep := needs[name]; dep != "" {
			j.InputFiles = map[string]string{"v": "job:" + ids[dep] + "/out.mp4"}
			j.Awaits = []string{ids[dep]}
			j.StatusDetail = j.AwaitingDetail()
			step.Needs = []string{dep}
		}
		p.Plan = append(p.Plan, j)
		p.Steps = append(p.Steps, step)
	}
	return p
}

// pipelineRig runs the awaiter and the pipeline service on a real etcd.
type pipelineRig struct {
	t   *testing.T
	ctx context.Context
	s   *store.Store
	svc *pipelines
}

func newPipelineRig(t *testing.T, opts ...func(*pipelines)) *pipelineRig {
	s, _ := testenv.Etcd(t)
	ctx, cancel := context.WithCancel(context.Background())
	cfg := config.Default()
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	blobs, _ := blob.NewLocal(t.TempDir())
	svc := &pipelines{store: s, log: slog.Default(), now: time.Now, cfg: cfg,
		sender: &webhook.Sender{AllowLoopback: true, Base: 10 * time.Millisecond, Cap: 50 * time.Millisecond, AttemptTimeout: 5 * time.Second},
		links:  blob.Links{Store: blobs, Signer: blob.Signer{Secret: []byte("0123456789abcdef"), Base: "http://gw.test"}},
		grace:  0, tick: 50 * time.Millisecond, resync: 200 * time.Millisecond}
	for _, o := range opts {
		o(svc)
	}
	a := &awaiter{store: s, log: slog.Default(), now: time.Now, resync: 200 * time.Millisecond}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); a.run(ctx) }()
	go func() { defer wg.Done(); svc.run(ctx) }()
	t.Cleanup(func() { cancel(); wg.Wait() })
	return &pipelineRig{t: t, ctx: ctx, s: s, svc: svc}
}

func (r *pipelineRig) create(p *mj.Pipeline, materialise bool) *mj.Pipeline {
	r.t.Helper()
	p, err := r.s.CreatePipeline(r.ctx, p, nil, store.Limits{})
	if err != nil {
		r.t.Fatal(err)
	}
	if materialise {
		if p, err = r.s.MaterialisePipeline(r.ctx, p.ID, time.Now()); err != nil {
			r.t.Fatal(err)
		}
	}
	return p
}

func (r *pipelineRig) job(id string) *mj.Job {
	r.t.Helper()
	j, err := r.s.Job(r.ctx, id)
	if err != nil {
		r.t.Fatal(err)
	}
	return j
}

func (r *pipelineRig) pipeline(id string) *mj.Pipeline {
	r.t.Helper()
	p, err := r.s.Pipeline(r.ctx, id)
	if err != nil {
		r.t.Fatal(err)
	}
	return p
}

func (r *pipelineRig) end(id string, fn func(j *mj.Job)) {
	r.t.Helper()
	if _, err := r.s.UpdateJob(r.ctx, id, func(j *mj.Job) error { fn(j); return nil }); err != nil {
		r.t.Fatal(err)
	}
}

func succeed(j *mj.Job) {
	j.Outputs = []mj.Output{{Name: "out.mp4", Key: mj.RunScope(j.ID, 1) + "alloc/outputs/out.mp4"}}
	j.Succeed(time.Now(), "")
}

// A gateway that died after writing a pipeline's record, with one of its
// jobs stored: the leader stores the others, each once, and leaves the one
// stored (running since) as it is.
func TestPipelineLeaderFinishesACreateItsGatewayLeft(t *testing.T) {
	r := newPipelineRig(t)
	p := testPipeline([]string{"a", "b", "c"}, map[string]string{"b": "a"})
	// The one batch that made it, stored before the record the leader follows
	// (after it, the leader could store it first: the test would race it).
	first := *p.Plan[0]
	if err := r.s.CreateJob(r.ctx, &first); err != nil {
		t.Fatal(err)
	}
	p = r.create(p, false)
	r.end(first.ID, func(j *mj.Job) { now := time.Now(); j.StartedAt = &now; j.Run("") })

	testenv.Eventually(t, time.Minute, "the leader stored the jobs", func() bool { return len(r.pipeline(p.ID).Plan) == 0 })
	page, err := r.s.ListJobs(r.ctx, "acct", store.ListOptions{Limit: 100})
	if err != nil || page.Total != 3 {
		t.Fatalf("%d jobs stored, want 3 (%v)", page.Total, err)
	}
	for _, id := range p.JobIDs() {
		if j := r.job(id); j.Pipeline == nil || j.Pipeline.ID != p.ID {
			t.Fatalf("job %s: %+v", id, j.Pipeline)
		}
	}
	if j := r.job(first.ID); j.Status != mj.StatusRunning {
		t.Fatalf("the job stored before was overwritten: %s", j.Status)
	}
	pending, err := r.s.PendingPipelines(r.ctx)
	if err != nil || len(pending) != 0 {
		t.Fatalf("pending after: %v %v", pending, err)
	}
	// Again (a second leader, or the gateway's late attempt): nothing more.
	if _, err := r.s.MaterialisePipeline(r.ctx, p.ID, time.Now()); err != nil {
		t.Fatal(err)
	}
	if page, _ := r.s.ListJobs(r.ctx, "acct", store.ListOptions{Limit: 100}); page.Total != 3 {
		t.Fatalf("%d jobs after a second materialise", page.Total)
	}
}

// A pipeline with a webhook_url ends once, when its last job ends, and its
// webhook is delivered once to a real receiver, signed as the pipeline's end.
func TestPipelineEndsOnceWithOneWebhook(t *testing.T) {
	var mu sync.Mutex
	var got []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		b, _ := io.ReadAll(req.Body)
		mu.Lock()
		got = append(got, string(b))
		mu.Unlock()
	}))
	defer srv.Close()
	hooks := func() int { mu.Lock(); defer mu.Unlock(); return len(got) }

	r := newPipelineRig(t)
	p := testPipeline([]string{"a", "b"}, map[string]string{"b": "a"})
	p.WebhookURL = srv.URL + "/hook"
	p = r.create(p, true)
	a, b := p.Steps[0].Jobs[0], p.Steps[1].Jobs[0]
	r.end(a, succeed)
	testenv.Eventually(t, time.Minute, "b released", func() bool { return len(r.job(b).Awaits) == 0 })
	if st := r.pipeline(p.ID).Status; st != "" {
		t.Fatalf("the pipeline ended (%s) with a job left", st)
	}
	r.end(b, succeed)
	testenv.Eventually(t, time.Minute, "the webhook delivered", func() bool {
		pl := r.pipeline(p.ID)
		return pl.Webhook != nil && pl.Webhook.Status == mj.WebhookDelivered
	})
	pl := r.pipeline(p.ID)
	if pl.Status != mj.StatusSucceeded || pl.FinishedAt == nil {
		t.Fatalf("pipeline: %+v", pl)
	}
	// More passes find nothing to do.
	r.svc.pass(r.ctx, true)
	r.svc.pass(r.ctx, true)
	r.svc.deliverer.Wait()
	if n := hooks(); n != 1 {
		t.Fatalf("%d webhooks, want 1", n)
	}
	if ids, _ := r.s.PipelineIDs(r.ctx, r.s.PipelineOutboxPrefix()); len(ids) != 0 {
		t.Fatalf("outbox entries left: %v", ids)
	}
	if ids, _ := r.s.PipelineIDs(r.ctx, r.s.PipelineRunningPrefix()); len(ids) != 0 {
		t.Fatalf("still listed as running: %v", ids)
	}
	mu.Lock()
	body := got[0]
	mu.Unlock()
	for _, want := range []string{`"status":"succeeded"`, `"id":"` + p.ID + `"`, `"name":"b"`} {
		if !strings.Contains(body, want) {
			t.Fatalf("webhook body lacks %s: %s", want, body)
		}
	}
}

// A failed step fails what takes its outputs; an independent branch runs on
// and the pipeline fails when it ends, naming the step. Under fail_fast the
// first failure cancels every job not ended instead.
func TestPipelineFailedStep(t *testing.T) {
	for _, failFast := range []bool{false, true} {
		r := newPipelineRig(t)
		p := testPipeline([]string{"a", "b", "c"}, map[string]string{"c": "a"})
		p.FailFast = failFast
		p = r.create(p, true)
		a, b, c := p.Steps[0].Jobs[0], p.Steps[1].Jobs[0], p.Steps[2].Jobs[0]
		r.end(a, func(j *mj.Job) { j.Fail(time.Now(), "ffmpeg exited with code 1") })
		testenv.Eventually(t, time.Minute, "c ended", func() bool { return r.job(c).Status.Terminal() })
		if !failFast {
			if j := r.job(c); j.Status != mj.StatusFailed || !strings.Contains(j.ErrorMessage, "job "+a+" (step a) failed") {
				t.Fatalf("c: %s %q", j.Status, j.ErrorMessage)
			}
			if j := r.job(b); j.Status != mj.StatusQueued {
				t.Fatalf("the independent branch: %s", j.Status)
			}
			if st := r.pipeline(p.ID).Status; st != "" {
				t.Fatalf("the pipeline ended (%s) with a branch running", st)
			}
			r.end(b, succeed)
		} else {
			testenv.Eventually(t, time.Minute, "b cancelled", func() bool { return r.job(b).Status == mj.StatusCancelled })
			if pl := r.pipeline(p.ID); !strings.Contains(pl.Stop, "step a failed") {
				t.Fatalf("stop: %q", pl.Stop)
			}
		}
		testenv.Eventually(t, time.Minute, "the pipeline ended", func() bool { return r.pipeline(p.ID).Status.Terminal() })
		pl := r.pipeline(p.ID)
		if pl.Status != mj.StatusFailed || !strings.Contains(pl.ErrorMessage, "step a failed: ffmpeg exited with code 1") {
			t.Fatalf("fail_fast %v: pipeline %s %q", failFast, pl.Status, pl.ErrorMessage)
		}
		if !failFast && r.job(b).Status != mj.StatusSucceeded {
			t.Fatalf("the independent branch: %s", r.job(b).Status)
		}
	}
}

// A stop recorded (a gateway's cancel, or the leader's own fail_fast stop)
// whose cancels did not all happen, the writer having died: the leader
// cancels every job not ended.
func TestPipelineRecordedStopIsCarriedOut(t *testing.T) {
	r := newPipelineRig(t)
	p := r.create(testPipeline([]string{"a", "b"}, nil), true)
	a, b := p.Steps[0].Jobs[0], p.Steps[1].Jobs[0]
	if _, err := r.s.UpdatePipeline(r.ctx, p.ID, func(pl *mj.Pipeline) error {
		pl.Cancelled, pl.Stop = true, "the pipeline was cancelled by the client"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "a and b cancelled", func() bool {
		return r.job(a).Status == mj.StatusCancelled && r.job(b).Status == mj.StatusCancelled
	})
	testenv.Eventually(t, time.Minute, "the pipeline ended", func() bool { return r.pipeline(p.ID).Status == mj.StatusCancelled })
}

// A job the retention deleted before its pipeline ended (it ended
// job_retention before the last one) counts as ended, its outcome unknown:
// the pipeline ends, succeeded if nothing else failed (docs/pipelines.md).
func TestPipelineEndsAfterRetentionDeletedAJob(t *testing.T) {
	r := newPipelineRig(t)
	p := r.create(testPipeline([]string{"a", "b"}, nil), true)
	a, b := p.Steps[0].Jobs[0], p.Steps[1].Jobs[0]
	r.end(a, succeed)
	cutoff := r.job(a).FinishedAt.Add(time.Millisecond)
	if n, err := r.s.DeleteFinishedJobs(r.ctx, cutoff, 0); err != nil || n != 1 {
		t.Fatalf("deleted %d %v", n, err)
	}
	r.end(b, succeed)
	testenv.Eventually(t, time.Minute, "the pipeline ended", func() bool { return r.pipeline(p.ID).Status.Terminal() })
	if st := r.pipeline(p.ID).Status; st != mj.StatusSucceeded {
		t.Fatalf("pipeline %s, want succeeded", st)
	}
}

// Under fail_fast, a job that failed while the pipeline's jobs were being
// stored stops the pipeline as soon as they are (the gateway's last write),
// not at the next resync.
func TestPipelineFailFastDuringMaterialisation(t *testing.T) {
	r := newPipelineRig(t, func(p *pipelines) { p.grace, p.resync = time.Hour, time.Hour })
	p := testPipeline([]string{"a", "b", "c"}, nil)
	p.FailFast = true
	first := *p.Plan[0]
	p = r.create(p, false)
	if err := r.s.CreateJob(r.ctx, &first); err != nil { // the gateway's first batch
		t.Fatal(err)
	}
	r.end(first.ID, func(j *mj.Job) { j.Fail(time.Now(), "ffmpeg exited with code 1") })
	if _, err := r.s.MaterialisePipeline(r.ctx, p.ID, time.Now()); err != nil { // and the rest
		t.Fatal(err)
	}
	b, c := p.Steps[1].Jobs[0], p.Steps[2].Jobs[0]
	testenv.Eventually(t, time.Minute, "b and c cancelled", func() bool {
		return r.job(b).Status == mj.StatusCancelled && r.job(c).Status == mj.StatusCancelled
	})
	testenv.Eventually(t, time.Minute, "the pipeline failed", func() bool { return r.pipeline(p.ID).Status == mj.StatusFailed })
}
