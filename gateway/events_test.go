package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

type sseEvent struct {
	name string
	job  map[string]any
}

// readEvents parses a server-sent event stream into ch until it ends.
func readEvents(resp *http.Response, ch chan<- sseEvent) {
	defer close(ch)
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var ev sseEvent
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "event: "):
			ev.name = strings.TrimPrefix(line, "event: ")
		case strings.HasPrefix(line, "data: "):
			json.Unmarshal([]byte(strings.TrimPrefix(line, "data: ")), &ev.job)
		case line == "" && ev.name != "":
			ch <- ev
			ev = sseEvent{}
		}
	}
}

func (h *harness) stream(base, path, acct string) (*http.Response, <-chan sseEvent) {
	h.t.Helper()
	req, _ := http.NewRequest("GET", base+path, nil)
	req.Header.Set("Authorization", "Bearer "+h.keys[acct])
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		h.t.Fatal(err)
	}
	h.t.Cleanup(func() { resp.Body.Close() })
	ch := make(chan sseEvent, 64)
	if resp.StatusCode == 200 {
		go readEvents(resp, ch)
	}
	return resp, ch
}

func next(t *testing.T, ch <-chan sseEvent, what string) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatalf("stream ended before %s", what)
		}
		return ev
	case <-time.After(20 * time.Second):
		t.Fatalf("no event for %s within 20s", what)
	}
	return sseEvent{}
}

// GET /api/jobs/{id}/events streams the job's transitions and progress in order,
// as the store records them, and ends at its terminal state; the account stream
// carries them too; another account's job is 404.
func TestJobEventsStream(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.gw.Watch(ctx)
	base := h.serve()
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", map[string]any{
		"output_files": []string{"out.mp4"}, "ffmpeg_commands": []string{"-f lavfi -i testsrc=duration=1 {{out.mp4}}"},
	})
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	id := body["data"].(map[string]any)["id"].(string)

	if resp, _ := h.stream(base, "/api/jobs/"+id+"/events", "bob"); resp.StatusCode != 404 {
		t.Fatalf("bob's stream of alice's job: %d", resp.StatusCode)
	}
	all, allEvents := h.stream(base, "/api/events", "alice")
	if all.StatusCode != 200 || next(t, allEvents, "ready").name != "ready" {
		t.Fatalf("account stream: %d", all.StatusCode)
	}
	resp, events := h.stream(base, "/api/jobs/"+id+"/events", "alice")
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("stream: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	if ev := next(t, events, "the job as it is"); ev.name != "job" || ev.job["status"] != "queued" || ev.job["id"] != id {
		t.Fatalf("first event: %+v", ev)
	}

	update := func(fn func(j *mj.Job)) *mj.Job {
		j, err := h.store.UpdateJob(ctx, id, func(j *mj.Job) error { fn(j); return nil })
		if err != nil {
			t.Fatal(err)
		}
		return j
	}
	now := time.Now().UTC()
	j := update(func(j *mj.Job) { j.Status, j.StartedAt, j.Attempt = mj.StatusRunning, &now, 1 })
	if ev := next(t, events, "running"); ev.job["status"] != "running" {
		t.Fatalf("second event: %+v", ev)
	}
	pct := 42.0
	if err := h.store.PutProgress(ctx, j, 1, &mj.Progress{Percent: &pct, CommandIndex: 1, CommandCount: 1, FPS: 25, UpdatedAt: now}); err != nil {
		t.Fatal(err)
	}
	ev := next(t, events, "progress")
	if p, _ := ev.job["progress"].(map[string]any); ev.job["status"] != "running" || p == nil || p["percent"] != 42.0 {
		t.Fatalf("progress event: %+v", ev)
	}
	update(func(j *mj.Job) { j.Status, j.FinishedAt = mj.StatusSucceeded, &now })
	if ev := next(t, events, "succeeded"); ev.job["status"] != "succeeded" {
		t.Fatalf("terminal event: %+v", ev)
	}
	if ev := next(t, events, "end"); ev.name != "end" {
		t.Fatalf("after the terminal state: %+v", ev)
	}
	select {
	case _, ok := <-events:
		if ok {
			t.Fatal("the stream went on after end")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the stream stayed open after end")
	}

	// The account stream saw the same changes, in the same order.
	var seen []string
	for len(seen) == 0 || seen[len(seen)-1] != "succeeded" {
		ev := next(t, allEvents, "the account's events")
		if ev.job["id"] != id {
			t.Fatalf("account stream: another job %+v", ev)
		}
		if s := ev.job["status"].(string); len(seen) == 0 || seen[len(seen)-1] != s {
			seen = append(seen, s)
		}
	}
	if strings.Join(seen, ",") != "running,succeeded" && strings.Join(seen, ",") != "queued,running,succeeded" {
		t.Fatalf("account stream statuses: %v", seen)
	}

	// A gateway shutting down ends open streams.
	_, open := h.stream(base, "/api/events", "alice")
	next(t, open, "ready")
	h.gw.StopStreams()
	select {
	case <-open:
	case <-time.After(10 * time.Second):
		t.Fatal("StopStreams left a stream open")
	}
}

// A stream opened with a key that is then revoked ends at the next heartbeat,
// saying why.
func TestEventStreamEndsWhenItsKeyIsRevoked(t *testing.T) {
	h := newHarness(t)
	h.gw.times.heartbeat = 100 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.gw.Watch(ctx)
	base := h.serve()
	status, body, _ := h.do("POST", "/api/keys", "alice", map[string]any{"name": "second"})
	if status != 200 {
		t.Fatalf("create key: %d %v", status, body)
	}
	data := body["data"].(map[string]any)
	h.keys["alice2"] = data["secret"].(string)
	_, events := h.stream(base, "/api/events", "alice2")
	if ev := next(t, events, "ready"); ev.name != "ready" {
		t.Fatalf("first event: %+v", ev)
	}
	if status, body, _ := h.do("DELETE", "/api/keys/"+data["id"].(string), "alice", nil); status != 200 {
		t.Fatalf("revoke: %d %v", status, body)
	}
	for {
		ev := next(t, events, "the end after revocation")
		if ev.name == "end" {
			if ev.job["reason"] != "the API key was revoked" {
				t.Fatalf("end event: %+v", ev)
			}
			return
		}
	}
}
