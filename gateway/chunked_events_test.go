package gateway

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// chunkedSetup creates a chunked job through the API and starts the
// gateway's watches; it returns the job's id, its pipeline's and the plan
// job's. The re-reads of the streams are off (an hour): every event a test
// waits for comes from the watches.
func chunkedSetup(t *testing.T, h *harness, ctx context.Context) (id, pid, plan string) {
	t.Helper()
	h.gw.times.backstop, h.gw.times.pipelineBackstop = time.Hour, time.Hour
	go h.gw.Watch(ctx)
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", chunkable())
	data, _ := body["data"].(map[string]any)
	p, _ := data["parallel"].(map[string]any)
	if status != 200 || p["mode"] != "chunked" {
		t.Fatalf("create: %d %v", status, body)
	}
	id, pid = data["id"].(string), p["pipeline_id"].(string)
	pl, err := h.store.Pipeline(ctx, pid)
	if err != nil || len(pl.Steps) != 1 || len(pl.Steps[0].Jobs) != 1 {
		t.Fatalf("pipeline %+v, %v", pl, err)
	}
	return id, pid, pl.Steps[0].Jobs[0]
}

// extendChunked does what the leader does once the plan job succeeded (it
// must have): extends the pipeline with two chunks' encode jobs and the
// stitch, and stores them. It returns the encode jobs' ids.
func extendChunked(t *testing.T, h *harness, ctx context.Context, id, pid, plan string) []string {
	t.Helper()
	parent, err := h.store.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	pj, err := h.store.Job(ctx, plan)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := h.store.Pipeline(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	list := &mj.ChunkList{Chunks: []json.RawMessage{
		json.RawMessage(`{"start":0,"end":2,"frames":50}`), json.RawMessage(`{"start":2,"end":4,"frames":50}`),
	}}
	steps, jobs, err := mj.ExtendChunked(pl, parent, pj, list, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, extended, err := h.store.ExtendPipeline(ctx, pid, steps, jobs, store.Limits{}); err != nil || !extended {
		t.Fatalf("extend: %v %v", extended, err)
	}
	if _, err := h.store.MaterialisePipeline(ctx, pid, time.Now()); err != nil {
		t.Fatal(err)
	}
	return steps[0].Jobs
}

// planSucceeded records the plan job's success with the outputs the
// extension reads.
func planSucceeded(t *testing.T, h *harness, ctx context.Context, plan string) {
	t.Helper()
	now := time.Now().UTC()
	if _, err := h.store.UpdateJob(ctx, plan, func(j *mj.Job) error {
		j.Status, j.StartedAt, j.FinishedAt, j.Attempt = mj.StatusSucceeded, &now, &now, 1
		for _, name := range []string{mj.ChunkPlanFile, mj.ChunkListFile, mj.ChunkFileName(0), mj.ChunkFileName(1)} {
			j.Outputs = append(j.Outputs, mj.Output{Name: name, Key: "jobs/" + plan + "/1/" + name, Size: 10})
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
}

// parallelStep is the step named name of a job view's parallel.steps.
func parallelStep(v map[string]any, name string) map[string]any {
	p, _ := v["parallel"].(map[string]any)
	return stepOf(p, name)
}

// chunkJobIn is job k of step s (nil if s has none such).
func chunkJobIn(s map[string]any, k int) map[string]any {
	if s == nil {
		return nil
	}
	jobs, _ := s["jobs"].([]any)
	if k >= len(jobs) {
		return nil
	}
	return jobs[k].(map[string]any)
}

func percentOf(sj map[string]any) any {
	if p, _ := sj["progress"].(map[string]any); p != nil {
		return p["percent"]
	}
	return nil
}

// A chunked job's own stream follows its pipeline: an event, the job's view
// with parallel.steps, when one of its pipeline's jobs changes (status,
// progress), the encode jobs the extension adds after the stream opened
// included; it ends with the job.
func TestChunkedJobEventsFollowItsChunks(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id, pid, plan := chunkedSetup(t, h, ctx)
	base := h.serve()
	_, events := h.stream(base, "/api/jobs/"+id+"/events", "alice")
	ev := next(t, events, "the job as it is")
	if ev.name != "job" || ev.job["id"] != id || chunkJobIn(parallelStep(ev.job, "plan"), 0)["id"] != plan {
		t.Fatalf("first event: want the job with its plan step: %+v", ev)
	}

	now := time.Now().UTC()
	pj := runningJob(t, h, ctx, plan, now)
	untilEvent(t, events, "the plan job running", func(ev sseEvent) bool {
		return chunkJobIn(parallelStep(ev.job, "plan"), 0)["status"] == "running"
	})
	putPercent(t, h, ctx, pj, 40.0, now)
	untilEvent(t, events, "the plan job's progress", func(ev sseEvent) bool {
		return percentOf(chunkJobIn(parallelStep(ev.job, "plan"), 0)) == 40.0
	})
	planSucceeded(t, h, ctx, plan)
	untilEvent(t, events, "the plan job succeeded", func(ev sseEvent) bool {
		return chunkJobIn(parallelStep(ev.job, "plan"), 0)["status"] == "succeeded"
	})

	// The encode jobs, added after the stream opened.
	encodes := extendChunked(t, h, ctx, id, pid, plan)
	ev = untilEvent(t, events, "the encode step", func(ev sseEvent) bool { return chunkJobIn(parallelStep(ev.job, "encode"), 1) != nil })
	if sj := chunkJobIn(parallelStep(ev.job, "encode"), 1); sj["id"] != encodes[1] {
		t.Fatalf("encode step: %+v", parallelStep(ev.job, "encode"))
	}
	ej := runningJob(t, h, ctx, encodes[1], now)
	untilEvent(t, events, "the second chunk running", func(ev sseEvent) bool {
		return chunkJobIn(parallelStep(ev.job, "encode"), 1)["status"] == "running"
	})
	putPercent(t, h, ctx, ej, 70, now)
	ev = untilEvent(t, events, "the second chunk's progress", func(ev sseEvent) bool {
		return percentOf(chunkJobIn(parallelStep(ev.job, "encode"), 1)) == 70.0
	})
	if ev.job["status"] != "queued" && ev.job["status"] != "running" {
		t.Fatalf("the job's own status: %+v", ev.job)
	}

	// Its cancel (the job's own change) is sent, then the end.
	if status, body, _ := h.do("POST", "/api/jobs/"+id+"/cancel", "alice", nil); status != 200 {
		t.Fatalf("cancel: %d %v", status, body)
	}
	// The job is recorded cancelled before its chunks are: the stream goes on
	// until they are (chunkedEndLinger at most), its last event showing them.
	var lastEv sseEvent
	for ev := next(t, events, "the end"); ev.name != "end"; ev = next(t, events, "the end") {
		lastEv = ev
	}
	if lastEv.job["status"] != "cancelled" || chunkJobIn(parallelStep(lastEv.job, "encode"), 1)["status"] != "cancelled" {
		t.Fatalf("the last event before the end: %+v", lastEv.job)
	}
	select {
	case _, ok := <-events:
		if ok {
			t.Fatal("the stream went on after end")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream stayed open after end")
	}
}

// A pipeline's stream follows the jobs its record gains after the stream
// opened (a chunked job's encode jobs, added by the extension) as they
// change, without waiting for its re-read (an hour here).
func TestPipelineEventsFollowJobsAddedLater(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id, pid, plan := chunkedSetup(t, h, ctx)
	base := h.serve()
	resp, events := h.stream(base, "/api/pipelines/"+pid+"/events", "alice")
	if resp.StatusCode != 200 {
		t.Fatalf("stream: %d", resp.StatusCode)
	}
	if ev := next(t, events, "the pipeline as it is"); ev.name != "pipeline" || len(ev.job["steps"].([]any)) != 1 {
		t.Fatalf("first event: %+v", ev)
	}
	planSucceeded(t, h, ctx, plan)
	untilEvent(t, events, "the plan job succeeded", func(ev sseEvent) bool {
		return chunkJobIn(stepOf(ev.job, "plan"), 0)["status"] == "succeeded"
	})
	encodes := extendChunked(t, h, ctx, id, pid, plan)
	untilEvent(t, events, "the encode step", func(ev sseEvent) bool { return chunkJobIn(stepOf(ev.job, "encode"), 0) != nil })
	now := time.Now().UTC()
	ej := runningJob(t, h, ctx, encodes[0], now)
	untilEvent(t, events, "the first chunk running", func(ev sseEvent) bool {
		return chunkJobIn(stepOf(ev.job, "encode"), 0)["status"] == "running"
	})
	putPercent(t, h, ctx, ej, 25.0, now)
	untilEvent(t, events, "the first chunk's progress", func(ev sseEvent) bool {
		return percentOf(chunkJobIn(stepOf(ev.job, "encode"), 0)) == 25.0
	})
}

// GET shows a chunked job's running chunks with their progress, as its stream
// does: its pipeline's jobs are read through the job cache, which has it.
func TestChunkedJobGetShowsChunkProgress(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	id, pid, plan := chunkedSetup(t, h, ctx)
	planSucceeded(t, h, ctx, plan)
	encodes := extendChunked(t, h, ctx, id, pid, plan)
	now := time.Now().UTC()
	ej := runningJob(t, h, ctx, encodes[0], now)
	putPercent(t, h, ctx, ej, 40.0, now)
	var last map[string]any
	testenv.Eventually(t, 30*time.Second, "GET to show the first chunk's progress", func() bool {
		status, body, _ := h.do("GET", "/api/jobs/"+id, "alice", nil)
		last, _ = body["data"].(map[string]any)
		return status == 200 && percentOf(chunkJobIn(parallelStep(last, "encode"), 0)) == 40.0
	})
	if sj := chunkJobIn(parallelStep(last, "encode"), 0); sj["id"] != encodes[0] || sj["status"] != "running" {
		t.Fatalf("the first chunk in GET: %+v", sj)
	}
}

// runningJob records job id running (attempt 1, started at now).
func runningJob(t *testing.T, h *harness, ctx context.Context, id string, now time.Time) *mj.Job {
	t.Helper()
	j, err := h.store.UpdateJob(ctx, id, func(j *mj.Job) error {
		j.Status, j.StartedAt, j.Attempt = mj.StatusRunning, &now, 1
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// putPercent records j's progress (attempt 1) at pct percent.
func putPercent(t *testing.T, h *harness, ctx context.Context, j *mj.Job, pct float64, now time.Time) {
	t.Helper()
	if err := h.store.PutProgress(ctx, j, 1, &mj.Progress{Percent: &pct, CommandIndex: 1, CommandCount: 1, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
}
