package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// A server without the events stream (404 "no such route"): Wait polls, and sees
// every status in order; a 429 with Retry-After is waited out and retried.
func TestWaitPollsWithoutAStream(t *testing.T) {
	var gets, limited atomic.Int32
	statuses := []string{"queued", "running", "succeeded"}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/jobs/j1/events":
			w.WriteHeader(404)
			w.Write([]byte(`{"errorCode":"notFound","message":"no such route: GET /api/jobs/j1/events"}`))
		case "/api/jobs/j1":
			if r.Header.Get("Authorization") != "Bearer k" {
				w.WriteHeader(401)
				return
			}
			if limited.Add(1) == 1 {
				w.Header().Set("Retry-After", "1")
				w.WriteHeader(429)
				w.Write([]byte(`{"errorCode":"tooManyRequests","message":"slow down"}`))
				return
			}
			n := min(int(gets.Add(1))-1, len(statuses)-1)
			json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"id": "j1", "status": statuses[n]}})
		default:
			w.WriteHeader(404)
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "k")
	if err != nil {
		t.Fatal(err)
	}
	c.PollInterval = 10 * time.Millisecond
	var seen []string
	j, err := c.Wait(context.Background(), "j1", func(j *Job) { seen = append(seen, string(j.Status)) })
	if err != nil || j.Status != "succeeded" {
		t.Fatalf("Wait: %+v, %v", j, err)
	}
	if len(seen) != 3 || seen[0] != "queued" || seen[1] != "running" || seen[2] != "succeeded" {
		t.Fatalf("changes seen: %v", seen)
	}
	if limited.Load() < 2 {
		t.Fatal("the 429 was not retried")
	}
}

func TestErrorsAreTyped(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(400)
		w.Write([]byte(`{"errorCode":"validationError","message":"bad","details":{"output_files":"missing"}}`))
	}))
	defer srv.Close()
	c, _ := New(srv.URL, "k")
	_, err := c.Create(context.Background(), CreateRequest{})
	e, ok := err.(*Error)
	if !ok || e.StatusCode != 400 || e.Code != "validationError" || e.Details["output_files"] != "missing" || !IsCode(err, "validationError") {
		t.Fatalf("error: %#v", err)
	}
	if _, err := New("not a url", "k"); err == nil {
		t.Fatal("a relative base URL was accepted")
	}
}

// Requests without a body (a temporary file, a cancel, an empty upload) go out
// without one: no Transfer-Encoding: chunked with an empty body, which a server
// that answers before reading the body would take for the start of the next
// request. A create carries its JSON with its length.
func TestBodylessRequestsSendNoBody(t *testing.T) {
	type seen struct {
		method, path string
		te           []string
		length       int64
		body         string
	}
	var mu sync.Mutex
	var got []seen
	var srv *httptest.Server
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got = append(got, seen{r.Method, r.URL.Path, r.TransferEncoding, r.ContentLength, string(b)})
		mu.Unlock()
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api/tmp-file":
			json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{
				"upload_url": srv.URL + "/files/up", "download_url": srv.URL + "/files/down"}})
		case "/files/up":
			w.Write([]byte(`{"data":{"size":0}}`))
		default:
			json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"id": "j1", "status": "cancelled"}})
		}
	}))
	defer srv.Close()
	c, err := New(srv.URL, "k")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.CreateTmpFile(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Cancel(ctx, "j1"); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Upload(ctx, strings.NewReader(""), 0, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(ctx, CreateRequest{OutputFiles: []string{"o.mp4"}, FFmpegCommands: []string{"-i x o.mp4"}}); err != nil {
		t.Fatal(err)
	}
	want := []string{"POST /api/tmp-file", "POST /api/jobs/j1/cancel", "POST /api/tmp-file", "PUT /files/up", "POST /api/ffmpeg"}
	if len(got) != len(want) {
		t.Fatalf("requests: %+v", got)
	}
	for i, s := range got {
		if s.method+" "+s.path != want[i] {
			t.Fatalf("request %d: %s %s, want %s", i, s.method, s.path, want[i])
		}
		if len(s.te) != 0 {
			t.Errorf("%s %s went out with Transfer-Encoding %v", s.method, s.path, s.te)
		}
		if s.path == "/api/ffmpeg" {
			if s.length <= 0 || int64(len(s.body)) != s.length || !strings.Contains(s.body, `"o.mp4"`) {
				t.Errorf("create: Content-Length %d, body %q", s.length, s.body)
			}
		} else if s.length != 0 || s.body != "" {
			t.Errorf("%s %s went out with Content-Length %d and body %q", s.method, s.path, s.length, s.body)
		}
	}
}

// An analysis job (no outputs) goes out with "output_files": [], which the API
// takes, even when the caller leaves OutputFiles nil (JSON null, which it refuses).
func TestCreateWithoutOutputsSendsAnEmptyList(t *testing.T) {
	var body map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"data":{"id":"j1","status":"queued"}}`))
	}))
	defer srv.Close()
	c, err := New(srv.URL, "k")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Create(context.Background(), CreateRequest{FFmpegCommands: []string{"-i inputs/a -af volumedetect -f null -"}}); err != nil {
		t.Fatal(err)
	}
	if outs, ok := body["output_files"].([]any); !ok || len(outs) != 0 {
		t.Fatalf("output_files sent as %#v, want []", body["output_files"])
	}
}

// Parallel is sent as the create's "parallel" (zero values left out, the
// service's defaults), and a chunked job's view reads back.
func TestCreateSendsParallel(t *testing.T) {
	var body map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		json.NewDecoder(r.Body).Decode(&body)
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"data":{"id":"j1","status":"queued","parallel":{"mode":"chunked","chunk_seconds":2,"max_workers":3,"pipeline_id":"p1"}}}`))
	}))
	defer srv.Close()
	c, err := New(srv.URL, "k")
	if err != nil {
		t.Fatal(err)
	}
	j, err := c.Create(context.Background(), CreateRequest{OutputFiles: []string{"out.mp4"}, FFmpegCommands: []string{"-i inputs/a -c:v libx264 outputs/out.mp4"},
		Parallel: &Parallel{MaxWorkers: 3, Fallback: true}})
	if err != nil {
		t.Fatal(err)
	}
	if p, _ := body["parallel"].(map[string]any); p == nil || p["max_workers"] != 3.0 || p["fallback"] != true || p["chunk_seconds"] != nil {
		t.Fatalf("parallel sent as %#v", body["parallel"])
	}
	if j.Parallel == nil || j.Parallel.Mode != "chunked" || j.Parallel.PipelineID != "p1" {
		t.Fatalf("view's parallel %+v", j.Parallel)
	}
}
