package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// pipelineJSON is a pipeline of two steps, "enc" (two items) then "join",
// whose jobs have the given statuses.
func pipelineJSON(status string, enc0, enc1, join string) map[string]any {
	step := func(name, status string, needs []string, jobs ...string) map[string]any {
		var js []map[string]any
		for i, st := range jobs {
			j := map[string]any{"id": fmt.Sprintf("%s-%d", name, i), "status": st, "output_files": map[string]string{}}
			if st == "succeeded" {
				j["output_files"] = map[string]string{name + ".mp4": "http://x/files/" + name}
			}
			js = append(js, j)
		}
		return map[string]any{"name": name, "status": status, "needs": needs, "jobs": js}
	}
	stepStatus := func(sts ...string) string {
		all, started := true, false
		for _, s := range sts {
			all = all && s == "succeeded"
			started = started || s != "queued"
		}
		switch {
		case all:
			return "succeeded"
		case started:
			return "running"
		}
		return "queued"
	}
	return map[string]any{"id": "p1", "status": status, "steps": []any{
		step("enc", stepStatus(enc0, enc1), []string{}, enc0, enc1),
		step("join", stepStatus(join), []string{"enc"}, join),
	}}
}

// RunPipeline creates the pipeline with an Idempotency-Key kept across a
// retried 503, sends steps without outputs as "output_files": [], follows the
// pipeline by polling, and tells each step's changes in order.
func TestRunPipelineFollowsEachStep(t *testing.T) {
	var mu sync.Mutex
	var keys []string
	var sent map[string]any
	gets := 0
	states := []map[string]any{
		pipelineJSON("running", "running", "queued", "queued"),
		pipelineJSON("running", "running", "queued", "queued"), // no change
		pipelineJSON("running", "succeeded", "succeeded", "queued"),
		pipelineJSON("running", "succeeded", "succeeded", "running"),
		pipelineJSON("succeeded", "succeeded", "succeeded", "succeeded"),
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.Method == "POST" && r.URL.Path == "/api/pipelines":
			keys = append(keys, r.Header.Get("Idempotency-Key"))
			if len(keys) == 1 {
				w.WriteHeader(503)
				return
			}
			json.NewDecoder(r.Body).Decode(&sent)
			json.NewEncoder(w).Encode(map[string]any{"data": pipelineJSON("queued", "queued", "queued", "queued")})
		case r.Method == "GET" && r.URL.Path == "/api/pipelines/p1":
			n := min(gets, len(states)-1)
			gets++
			json.NewEncoder(w).Encode(map[string]any{"data": states[n]})
		default:
			w.WriteHeader(404)
			w.Write([]byte(`{"errorCode":"notFound","message":"no such route"}`))
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "k", WithRetries(2, 10*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	c.PollInterval = 10 * time.Millisecond
	var changes int
	var steps []string
	p, err := c.RunPipeline(context.Background(), PipelineRequest{Steps: map[string]Step{
		"enc": {CreateRequest: CreateRequest{OutputFiles: []string{"enc.mp4"}, FFmpegCommands: []string{"-i x {{enc.mp4}}"}},
			ForEach: []map[string]string{{"h": "1"}, {"h": "2"}}},
		"join": {CreateRequest: CreateRequest{InputFiles: map[string]string{"e": "step:enc[*]/enc.mp4"}, FFmpegCommands: []string{"${each:e:-i {{e}}} -f null -"}}},
	}}, &PipelineOptions{
		OnChange: func(*Pipeline) { changes++ },
		OnStep: func(p *Pipeline, s *PipelineStep) {
			steps = append(steps, s.Name+" "+string(s.Status))
		},
	})
	if err != nil || p.Status != "succeeded" {
		t.Fatalf("RunPipeline: %+v, %v", p, err)
	}
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("Idempotency-Keys %q: want the same key on the retry", keys)
	}
	join := sent["steps"].(map[string]any)["join"].(map[string]any)
	if outs, ok := join["output_files"].([]any); !ok || len(outs) != 0 {
		t.Fatalf("a step without outputs was sent with output_files %#v", join["output_files"])
	}
	if items := sent["steps"].(map[string]any)["enc"].(map[string]any)["for_each"].([]any); len(items) != 2 {
		t.Fatalf("for_each sent as %v", items)
	}
	want := "enc queued,join queued,enc running,enc succeeded,join running,join succeeded"
	if got := strings.Join(steps, ","); got != want {
		t.Fatalf("steps seen:\n%s\nwant\n%s", got, want)
	}
	if changes != 5 {
		t.Fatalf("%d changes seen, want 5 (the repeated state is not a change)", changes)
	}
	if link := p.Steps[0].Jobs[1].OutputFiles["enc.mp4"]; link != "http://x/files/enc" {
		t.Fatalf("an item's output link: %q", link)
	}
}

// Waiting on a pipeline that does not exist ends at once with the API's error;
// a cancelled context ends the wait and returns the pipeline as last seen.
func TestWaitPipelineErrors(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch {
		case r.URL.Path == "/api/pipelines/p1":
			json.NewEncoder(w).Encode(map[string]any{"data": pipelineJSON("running", "running", "queued", "queued")})
			return
		case strings.HasSuffix(r.URL.Path, "/events"):
			w.WriteHeader(404)
			w.Write([]byte(`{"errorCode":"notFound","message":"no such route: GET /api/pipelines/p1/events"}`))
			return
		}
		w.WriteHeader(404)
		w.Write([]byte(`{"errorCode":"notFound","message":"pipeline nope not found"}`))
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "k")
	c.PollInterval = 10 * time.Millisecond
	if _, err := c.WaitPipeline(context.Background(), "nope", nil); !IsCode(err, "notFound") {
		t.Fatalf("WaitPipeline of a missing pipeline: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	p, err := c.WaitPipeline(ctx, "p1", nil)
	if err != context.DeadlineExceeded || p == nil || p.Status != "running" {
		t.Fatalf("WaitPipeline past its context: %+v, %v", p, err)
	}
}

// Cancelling a pipeline that ended answers it as it ended, with the conflict;
// the list reads its page.
func TestCancelAndListPipelines(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.Method + " " + r.URL.Path {
		case "POST /api/pipelines/p1/cancel":
			w.WriteHeader(409)
			w.Write([]byte(`{"errorCode":"conflict","message":"pipeline is already succeeded"}`))
		case "GET /api/pipelines/p1":
			json.NewEncoder(w).Encode(map[string]any{"data": pipelineJSON("succeeded", "succeeded", "succeeded", "succeeded")})
		case "GET /api/pipelines":
			if r.URL.Query().Get("limit") != "1" || r.URL.Query().Get("offset") != "1" {
				w.WriteHeader(400)
				return
			}
			json.NewEncoder(w).Encode(map[string]any{"data": []any{pipelineJSON("queued", "queued", "queued", "queued")},
				"pagingParams": map[string]any{"limit": 1, "offset": 1, "total": 3, "hasMore": true}})
		default:
			w.WriteHeader(404)
		}
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "k")
	p, err := c.CancelPipeline(context.Background(), "p1")
	if !IsCode(err, "conflict") || p == nil || p.Status != "succeeded" {
		t.Fatalf("cancel of an ended pipeline: %+v, %v", p, err)
	}
	page, err := c.ListPipelines(context.Background(), PipelineListOptions{Limit: 1, Offset: 1})
	if err != nil || len(page.Pipelines) != 1 || page.Total != 3 || !page.HasMore || page.Pipelines[0].ID != "p1" {
		t.Fatalf("list: %+v, %v", page, err)
	}
}

// Where the server streams the pipeline (GET /api/pipelines/{id}/events),
// WaitPipeline follows the stream and polls no more; a stream that breaks
// before the end is read again after one GET.
func TestWaitPipelineFollowsTheStream(t *testing.T) {
	var mu sync.Mutex
	gets, streams := 0, 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		switch r.URL.Path {
		case "/api/pipelines/p1":
			gets++
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(map[string]any{"data": pipelineJSON("queued", "queued", "queued", "queued")})
		case "/api/pipelines/p1/events":
			streams++
			w.Header().Set("Content-Type", "text/event-stream")
			event := func(v any) {
				b, _ := json.Marshal(v)
				fmt.Fprintf(w, "event: pipeline\ndata: %s\n\n", b)
			}
			event(pipelineJSON("running", "running", "queued", "queued"))
			if streams == 1 {
				return // broken before the end
			}
			w.Write([]byte(": heartbeat\n\n"))
			event(pipelineJSON("running", "succeeded", "succeeded", "running"))
			event(pipelineJSON("succeeded", "succeeded", "succeeded", "succeeded"))
			w.Write([]byte("event: end\ndata: {}\n\n"))
		default:
			w.WriteHeader(404)
		}
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "k")
	c.PollInterval = 10 * time.Millisecond
	var steps []string
	p, err := c.WaitPipeline(context.Background(), "p1", &PipelineOptions{OnStep: func(_ *Pipeline, s *PipelineStep) {
		steps = append(steps, s.Name+" "+string(s.Status))
	}})
	if err != nil || p.Status != "succeeded" {
		t.Fatalf("WaitPipeline: %+v, %v", p, err)
	}
	if gets != 2 || streams != 2 {
		t.Fatalf("%d GETs and %d streams; want 2 of each (the first, and one after the broken stream)", gets, streams)
	}
	want := "enc queued,join queued,enc running,enc queued,enc running,enc succeeded,join running,join succeeded"
	if got := strings.Join(steps, ","); got != want {
		t.Fatalf("steps seen:\n%s\nwant\n%s", got, want)
	}
}
