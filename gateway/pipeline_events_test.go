package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// untilEvent reads events until one satisfies ok, failing on an end first.
func untilEvent(t *testing.T, ch <-chan sseEvent, what string, ok func(ev sseEvent) bool) sseEvent {
	t.Helper()
	for {
		ev := next(t, ch, what)
		if ok(ev) {
			return ev
		}
		if ev.name == "end" {
			t.Fatalf("the stream ended before %s", what)
		}
	}
}

// stepOf returns the step named name of a pipeline view (an event's data).
func stepOf(v map[string]any, name string) map[string]any {
	steps, _ := v["steps"].([]any)
	for _, s := range steps {
		if s := s.(map[string]any); s["name"] == name {
			return s
		}
	}
	return nil
}

func jobIn(step map[string]any) map[string]any {
	return step["jobs"].([]any)[0].(map[string]any)
}

// GET /api/pipelines/{id}/events streams the pipeline's view as its jobs change
// (status, progress, outputs) and as its own record changes, and ends once the
// record says it ended; another account's pipeline is 404; it counts against
// max_event_streams and ends with the gateway's streams. The backstop re-read
// is off: every event here comes from the watches.
func TestPipelineEventsStream(t *testing.T) {
	h := pipelineHarness(t)
	h.gw.times.pipelineBackstop = time.Hour
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.gw.Watch(ctx)
	base := h.serve()
	create := func() (string, string, string) {
		status, body, _ := h.do("POST", "/api/pipelines", "alice", map[string]any{
			"steps": map[string]any{
				"transcode": step(map[string]string{"v": "https://media.example/a.mp4"}, []string{"out.mp4"}, "-i {{v}} -c:v libx264 {{out.mp4}}"),
				"thumb":     step(map[string]string{"v": "step:transcode/out.mp4"}, []string{"t.png"}, "-i {{v}} -frames:v 1 {{t.png}}"),
			},
		})
		if status != 200 {
			t.Fatalf("create: %d %v", status, body)
		}
		v := body["data"].(map[string]any)
		return v["id"].(string), jobIn(stepOf(v, "transcode"))["id"].(string), jobIn(stepOf(v, "thumb"))["id"].(string)
	}
	id, a, b := create()

	if resp, _ := h.stream(base, "/api/pipelines/"+id+"/events", "bob"); resp.StatusCode != 404 {
		t.Fatalf("bob's stream of alice's pipeline: %d", resp.StatusCode)
	}
	if resp, _ := h.stream(base, "/api/pipelines/nope/events", "alice"); resp.StatusCode != 404 {
		t.Fatalf("a pipeline that does not exist: %d", resp.StatusCode)
	}
	resp, events := h.stream(base, "/api/pipelines/"+id+"/events", "alice")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	ev := next(t, events, "the pipeline as it is")
	if ev.name != "pipeline" || ev.job["id"] != id || ev.job["status"] != "queued" || len(ev.job["steps"].([]any)) != 2 {
		t.Fatalf("first event: %+v", ev)
	}

	// The stream counts against max_event_streams.
	one, limit := int64(1), h.gw.Config.Limits.MaxEventStreams
	h.gw.Config.Limits.MaxEventStreams = &one
	if resp, _ := h.stream(base, "/api/pipelines/"+id+"/events", "alice"); resp.StatusCode != 429 {
		t.Fatalf("a second stream over max_event_streams=1: %d", resp.StatusCode)
	}
	h.gw.Config.Limits.MaxEventStreams = limit

	update := func(id string, fn func(j *mj.Job)) *mj.Job {
		j, err := h.store.UpdateJob(ctx, id, func(j *mj.Job) error { fn(j); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	now := time.Now().UTC()
	ja := update(a, func(j *mj.Job) { j.Status, j.StartedAt, j.Attempt = mj.StatusRunning, &now, 1 })
	ev = untilEvent(t, events, "transcode running", func(ev sseEvent) bool { return stepOf(ev.job, "transcode")["status"] == "running" })
	if ev.job["status"] != "running" || stepOf(ev.job, "thumb")["status"] != "queued" {
		t.Fatalf("after the first job started: %+v", ev.job)
	}
	pct := 42.0
	if err := h.store.PutProgress(ctx, ja, 1, &mj.Progress{Percent: &pct, CommandIndex: 1, CommandCount: 1, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	untilEvent(t, events, "transcode's progress", func(ev sseEvent) bool {
		p, _ := jobIn(stepOf(ev.job, "transcode"))["progress"].(map[string]any)
		return p != nil && p["percent"] == 42.0
	})
	update(a, func(j *mj.Job) {
		j.Status, j.FinishedAt = mj.StatusSucceeded, &now
		j.Outputs = []mj.Output{{Name: "out.mp4", Key: "jobs/" + a + "/1/out.mp4", Size: 10}}
	})
	ev = untilEvent(t, events, "transcode succeeded", func(ev sseEvent) bool { return stepOf(ev.job, "transcode")["status"] == "succeeded" })
	link, _ := jobIn(stepOf(ev.job, "transcode"))["output_files"].(map[string]any)["out.mp4"].(string)
	if !strings.HasPrefix(link, "http://gw.test/") || stepOf(ev.job, "transcode")["duration_seconds"] == nil {
		t.Fatalf("transcode's output link and duration: %+v", stepOf(ev.job, "transcode"))
	}
	update(b, func(j *mj.Job) { j.Status, j.StartedAt, j.FinishedAt, j.Attempt = mj.StatusSucceeded, &now, &now, 1 })
	ev = untilEvent(t, events, "thumb succeeded", func(ev sseEvent) bool { return stepOf(ev.job, "thumb")["status"] == "succeeded" })
	if ev.job["finished_at"] != nil {
		t.Fatalf("the pipeline's end before its record says so: %+v", ev.job)
	}

	// The record's end (the leading dispatcher writes it) wakes the stream
	// through the pipeline watch alone, and ends it.
	if _, err := h.store.UpdatePipeline(ctx, id, func(p *mj.Pipeline) error {
		p.Status, p.FinishedAt = mj.StatusSucceeded, &now
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	ev = next(t, events, "the recorded end")
	if ev.name != "pipeline" || ev.job["status"] != "succeeded" || ev.job["finished_at"] == nil {
		t.Fatalf("after the record's end: %+v", ev)
	}
	if ev := next(t, events, "end"); ev.name != "end" {
		t.Fatalf("after the end: %+v", ev)
	}
	select {
	case _, ok := <-events:
		if ok {
			t.Fatal("the stream went on after end")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream stayed open after end")
	}

	// An ended pipeline's stream sends it once and ends.
	_, again := h.stream(base, "/api/pipelines/"+id+"/events", "alice")
	if ev := next(t, again, "the ended pipeline"); ev.name != "pipeline" || ev.job["status"] != "succeeded" {
		t.Fatalf("an ended pipeline's stream: %+v", ev)
	}
	if ev := next(t, again, "end"); ev.name != "end" {
		t.Fatalf("an ended pipeline's stream: %+v", ev)
	}

	// A gateway shutting down ends open streams.
	other, _, _ := create()
	_, open := h.stream(base, "/api/pipelines/"+other+"/events", "alice")
	next(t, open, "the second pipeline")
	h.gw.StopStreams()
	for {
		select {
		case _, ok := <-open:
			if ok {
				continue
			}
		case <-time.After(10 * time.Second):
			t.Fatal("StopStreams left a pipeline stream open")
		}
		break
	}
}

// A pipeline stream opened with a key that is then revoked ends at the next
// heartbeat, saying why.
func TestPipelineEventsEndWhenTheKeyIsRevoked(t *testing.T) {
	h := pipelineHarness(t)
	h.gw.times.heartbeat = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.gw.Watch(ctx)
	base := h.serve()
	status, body, _ := h.do("POST", "/api/keys", "alice", map[string]any{"name": "second"})
	if status != 200 {
		t.Fatalf("create key: %d %v", status, body)
	}
	key := body["data"].(map[string]any)
	h.keys["alice2"] = key["secret"].(string)
	status, body, _ = h.do("POST", "/api/pipelines", "alice2", map[string]any{
		"steps": map[string]any{"one": step(map[string]string{"v": "https://media.example/a.mp4"}, []string{"out.mp4"}, "-i {{v}} {{out.mp4}}")},
	})
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	_, events := h.stream(base, "/api/pipelines/"+body["data"].(map[string]any)["id"].(string)+"/events", "alice2")
	if ev := next(t, events, "the pipeline"); ev.name != "pipeline" {
		t.Fatalf("first event: %+v", ev)
	}
	if status, body, _ := h.do("DELETE", "/api/keys/"+key["id"].(string), "alice", nil); status != 200 {
		t.Fatalf("revoke: %d %v", status, body)
	}
	ev := untilEvent(t, events, "the end after revocation", func(ev sseEvent) bool { return ev.name == "end" })
	if ev.job["reason"] != "the API key was revoked" {
		t.Fatalf("end event: %+v", ev)
	}
}
