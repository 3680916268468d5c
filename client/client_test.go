package client

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
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
