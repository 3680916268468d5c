package gateway

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

func TestAPIKeys(t *testing.T) {
	h := newHarness(t)
	status, body, _ := h.do("GET", "/api/keys", "alice", nil)
	keys := body["data"].([]any)
	if status != 200 || len(keys) != 1 {
		t.Fatalf("list: %d %v", status, body)
	}
	first := keys[0].(map[string]any)
	if first["secret"] != nil || first["prefix"] != h.keys["alice"][:mj.APIKeyPrefixLen] || first["id"] == "" {
		t.Fatalf("listed key %v", first)
	}
	// last_used_at is recorded (asynchronously) for the key just used.
	testenv.Eventually(t, 5*time.Second, "last_used_at", func() bool {
		_, body, _ := h.do("GET", "/api/keys", "alice", nil)
		return body["data"].([]any)[0].(map[string]any)["last_used_at"] != nil
	})

	// The last key cannot be revoked.
	if status, body, _ := h.do("DELETE", "/api/keys/"+first["id"].(string), "alice", nil); status != 409 || body["errorCode"] != "conflict" {
		t.Fatalf("revoke last key: %d %v", status, body)
	}
	status, body, _ = h.do("POST", "/api/keys", "alice", map[string]string{"name": "ci"})
	created := body["data"].(map[string]any)
	secret, _ := created["secret"].(string)
	if status != 200 || created["name"] != "ci" || len(secret) < 40 {
		t.Fatalf("create: %d %v", status, body)
	}
	h.keys["alice2"] = secret
	if status, _, _ := h.do("GET", "/api/jobs", "alice2", nil); status != 200 {
		t.Fatalf("new key refused: %d", status)
	}
	// Bob cannot see or revoke Alice's keys.
	if status, _, _ := h.do("DELETE", "/api/keys/"+created["id"].(string), "bob", nil); status != 404 {
		t.Fatalf("bob revoked alice's key: %d", status)
	}
	_, body, _ = h.do("GET", "/api/keys", "bob", nil)
	if len(body["data"].([]any)) != 1 {
		t.Fatalf("bob sees %v", body["data"])
	}
	// Revoking takes effect at once, even for a key this gateway has cached.
	if status, body, _ := h.do("DELETE", "/api/keys/"+created["id"].(string), "alice", nil); status != 200 || body["data"].(map[string]any)["revoked"] != true {
		t.Fatalf("revoke: %d %v", status, body)
	}
	if status, body, _ := h.do("GET", "/api/jobs", "alice2", nil); status != 401 || body["errorCode"] != "badApiKey" {
		t.Fatalf("revoked key: %d %v", status, body)
	}
	if status, _, _ := h.do("DELETE", "/api/keys/nope", "alice", nil); status != 404 {
		t.Fatalf("unknown key: %d", status)
	}
}

func TestRevocationReachesOtherGateways(t *testing.T) {
	h := newHarness(t)
	other := &Gateway{Config: h.gw.Config, Store: h.store, Blobs: h.gw.Blobs, Signer: h.gw.Signer}
	app := other.App()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go other.Watch(ctx)
	_, body, _ := h.do("POST", "/api/keys", "alice", map[string]string{"name": "x"})
	k := body["data"].(map[string]any)
	h.keys["x"] = k["secret"].(string)
	h2 := &harness{t: t, app: app, store: h.store, keys: h.keys}
	if status, _, _ := h2.do("GET", "/api/jobs", "x", nil); status != 200 { // now cached there
		t.Fatalf("other gateway: %d", status)
	}
	h.do("DELETE", "/api/keys/"+k["id"].(string), "alice", nil)
	testenv.Eventually(t, 5*time.Second, "the other gateway to refuse the revoked key", func() bool {
		status, _, _ := h2.do("GET", "/api/jobs", "x", nil)
		return status == 401
	})
}

func TestIdempotencyKey(t *testing.T) {
	h := newHarness(t)
	// Ten concurrent retries of one request create one job.
	ids := make(chan string, 10)
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid(), "Idempotency-Key", "order-1")
			if status != 200 {
				t.Errorf("retry: %d %v", status, body)
				return
			}
			ids <- body["data"].(map[string]any)["id"].(string)
		}()
	}
	wg.Wait()
	close(ids)
	seen := map[string]bool{}
	for id := range ids {
		seen[id] = true
	}
	if len(seen) != 1 || h.total("alice") != 1 {
		t.Fatalf("%d distinct jobs, %d stored; want 1", len(seen), h.total("alice"))
	}
	// Key order and spacing do not make another request.
	if status, body, _ := h.do("POST", "/api/ffmpeg", "alice", `{"output_files": ["out.mp4"], "ffmpeg_commands": ["-i {{video}} {{out.mp4}}"],
		"input_files": {"video": "https://media.example/a.mp4"}}`, "Idempotency-Key", "order-1"); status != 200 || h.total("alice") != 1 {
		t.Fatalf("same request, other key order: %d %v", status, body)
	}
	// The same key with another request is a conflict; another account's same key is its own.
	if status, body, _ := h.do("POST", "/api/ffmpeg", "alice", with("metadata", map[string]string{"x": "y"}), "Idempotency-Key", "order-1"); status != 409 {
		t.Fatalf("reused key, other body: %d %v", status, body)
	}
	if status, _, _ := h.do("POST", "/api/ffmpeg", "bob", valid(), "Idempotency-Key", "order-1"); status != 200 || h.total("bob") != 1 {
		t.Fatalf("bob's order-1: %d", status)
	}
	// A refused request stores nothing under the key.
	h.do("POST", "/api/ffmpeg", "alice", with("output_files", []string{}), "Idempotency-Key", "order-2")
	if status, _, _ := h.do("POST", "/api/ffmpeg", "alice", valid(), "Idempotency-Key", "order-2"); status != 200 || h.total("alice") != 2 {
		t.Fatalf("key of a refused request: %d, %d jobs", status, h.total("alice"))
	}
}

func TestListPagingAndStatus(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for i := 0; i < 5; i++ {
		_, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid())
		ids = append(ids, body["data"].(map[string]any)["id"].(string))
	}
	h.do("POST", "/api/jobs/"+ids[1]+"/cancel", "alice", nil)
	h.do("POST", "/api/jobs/"+ids[3]+"/cancel", "alice", nil)

	_, body, _ := h.do("GET", "/api/jobs?limit=2&offset=0", "alice", nil)
	p := body["pagingParams"].(map[string]any)
	got := body["data"].([]any)
	if p["total"] != float64(5) || p["hasMore"] != true || p["limit"] != float64(2) || len(got) != 2 || got[0].(map[string]any)["id"] != ids[4] {
		t.Fatalf("page 1: %v", body)
	}
	_, body, _ = h.do("GET", "/api/jobs?limit=2&offset=4", "alice", nil)
	if p := body["pagingParams"].(map[string]any); p["hasMore"] != false || len(body["data"].([]any)) != 1 || body["data"].([]any)[0].(map[string]any)["id"] != ids[0] {
		t.Fatalf("last page: %v", body)
	}
	_, body, _ = h.do("GET", "/api/jobs?offset=10", "alice", nil)
	if len(body["data"].([]any)) != 0 {
		t.Fatalf("past the end: %v", body)
	}
	_, body, _ = h.do("GET", "/api/jobs?status=cancelled", "alice", nil)
	got = body["data"].([]any)
	if len(got) != 2 || got[0].(map[string]any)["id"] != ids[3] || got[1].(map[string]any)["id"] != ids[1] || body["pagingParams"].(map[string]any)["total"] != float64(2) {
		t.Fatalf("cancelled: %v", body)
	}
	_, body, _ = h.do("GET", "/api/jobs?status=queued&limit=1", "alice", nil)
	if body["pagingParams"].(map[string]any)["total"] != float64(3) || body["data"].([]any)[0].(map[string]any)["status"] != "queued" {
		t.Fatalf("queued: %v", body)
	}
	if status, _, _ := h.do("GET", "/api/jobs?status=done", "alice", nil); status != 400 {
		t.Fatalf("unknown status: %d", status)
	}
}

func TestRateLimit(t *testing.T) {
	h := newHarness(t)
	now := time.Unix(1_800_000_000, 0)
	h.gw.Now = func() time.Time { return now }
	h.gw.Config.Server.RateLimit, h.gw.Config.Server.RateBurst = 2, 3
	for i := 0; i < 3; i++ { // the burst
		if status, _, _ := h.do("GET", "/api/jobs", "alice", nil); status != 200 {
			t.Fatalf("request %d within the burst: %d", i, status)
		}
	}
	status, body, hdr := h.do("GET", "/api/jobs", "alice", nil)
	if status != 429 || body["errorCode"] != "tooManyRequests" {
		t.Fatalf("over the limit: %d %v", status, body)
	}
	if ra, err := strconv.Atoi(hdr.Get("Retry-After")); err != nil || ra < 1 {
		t.Fatalf("Retry-After %q", hdr.Get("Retry-After"))
	}
	// Other accounts have their own bucket; the clock refills this one.
	if status, _, _ := h.do("GET", "/api/jobs", "bob", nil); status != 200 {
		t.Fatalf("bob limited by alice's use: %d", status)
	}
	now = now.Add(time.Second)
	if status, _, _ := h.do("GET", "/api/jobs", "alice", nil); status != 200 {
		t.Fatalf("after a second: %d", status)
	}
}

func TestFieldsOfTheJobObject(t *testing.T) {
	h := newHarness(t)
	_, body, _ := h.do("POST", "/api/ffmpeg", "alice", with("webhook_url", "https://hooks.example/x"))
	job := body["data"].(map[string]any)
	for _, f := range []string{"id", "status", "output_files", "error_message", "created_at", "queued_at", "updated_at",
		"started_at", "finished_at", "machine", "input_files", "ffmpeg_commands", "webhook_url", "timeout_seconds",
		"metadata", "progress", "outputs", "status_detail", "webhook", "total_input_bytes", "total_output_bytes"} {
		if _, ok := job[f]; !ok {
			t.Errorf("job object lacks %s", f)
		}
	}
	if job["webhook_url"] != "https://hooks.example/x" {
		t.Errorf("webhook_url %v", job["webhook_url"])
	}
}

func TestMetrics(t *testing.T) {
	h := newHarness(t)
	_, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid())
	id := body["data"].(map[string]any)["id"].(string)
	h.do("GET", "/api/jobs/"+id, "alice", nil)
	h.do("GET", "/api/jobs/"+id, "bob", nil)
	// Over a real connection: the exposition is large (the embedded etcd's metrics
	// share the registry), more than fiber's in-memory test harness reliably returns.
	resp, err := http.Get(h.serve() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	text := string(raw)
	for _, want := range []string{
		`mediajobs_http_requests_total{method="GET",route="/api/jobs/:id",status="200"}`,
		`mediajobs_http_requests_total{method="GET",route="/api/jobs/:id",status="404"}`,
		`mediajobs_jobs_created_total{pool="cpu"}`,
		`mediajobs_http_request_duration_seconds_bucket`,
	} {
		if !strings.Contains(text, want) {
			t.Errorf("/metrics (HTTP %d, %d bytes, starts %.300q) lacks %s", resp.StatusCode, len(text), text, want)
		}
	}
	if strings.Contains(text, id) {
		t.Error("a job id leaked into a metric label")
	}
}

func TestProgressEndpoint(t *testing.T) {
	h := newHarness(t)
	_, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid())
	id := body["data"].(map[string]any)["id"].(string)
	h.store.UpdateJob(context.Background(), id, func(j *mj.Job) error { j.Status, j.Attempt = mj.StatusRunning, 1; return nil })
	link := func(attempt int) string {
		scope := fmt.Sprintf("jobs/%s/%d/progress", id, attempt)
		u, _ := url.Parse(h.gw.Signer.URLFor("/progress/", "PROGRESS", scope, scope, time.Now().Add(time.Hour)))
		return u.RequestURI()
	}
	report := `{"percent": 42.5, "command_index": 1, "command_count": 2, "fps": 25, "speed": 1.5, "out_time_seconds": 4.2}`
	if status, body, _ := h.do("POST", link(1), "", report); status != 200 || body["data"].(map[string]any)["stored"] != true {
		t.Fatalf("report: %d %v", status, body)
	}
	_, body, _ = h.do("GET", "/api/jobs/"+id, "alice", nil)
	if p := body["data"].(map[string]any)["progress"].(map[string]any); p["percent"] != 42.5 || p["command_count"] != float64(2) {
		t.Fatalf("progress on the job: %v", p)
	}
	if status, _, _ := h.do("POST", strings.Replace(link(1), "sig=", "sig=x", 1), "", report); status != 403 {
		t.Fatalf("tampered link: %d", status)
	}
	h.gw.progressAt.Delete(id) // past the 1 s gap
	if _, body, _ := h.do("POST", link(2), "", report); body["data"].(map[string]any)["stored"] != false {
		t.Fatalf("report for another attempt stored: %v", body)
	}
	h.store.UpdateJob(context.Background(), id, func(j *mj.Job) error { j.Status = mj.StatusSucceeded; return nil })
	h.gw.progressAt.Delete(id)
	if _, body, _ := h.do("POST", link(1), "", report); body["data"].(map[string]any)["stored"] != false {
		t.Fatalf("report for a finished job stored: %v", body)
	}
	_, body, _ = h.do("GET", "/api/jobs/"+id, "alice", nil)
	if body["data"].(map[string]any)["progress"] != nil {
		t.Fatal("a finished job shows progress")
	}
}

// Progress reports never rewrite the job record: they go to the job's own progress
// key, are merged into GET and list, and the key goes with the job's end.
func TestProgressKeepsOffTheJobRecord(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	_, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid())
	id := body["data"].(map[string]any)["id"].(string)
	running, _ := h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status, j.Attempt = mj.StatusRunning, 1; return nil })
	scope := fmt.Sprintf("jobs/%s/1/progress", id)
	u, _ := url.Parse(h.gw.Signer.URLFor("/progress/", "PROGRESS", scope, scope, time.Now().Add(time.Hour)))
	for i, pct := range []float64{10, 20, 30} {
		h.gw.progressAt.Delete(id) // past the gap between stored reports
		report := fmt.Sprintf(`{"percent": %v, "command_index": 1, "command_count": 1}`, pct)
		if status, body, _ := h.do("POST", u.RequestURI(), "", report); status != 200 || body["data"].(map[string]any)["stored"] != true {
			t.Fatalf("report %d: %d %v", i, status, body)
		}
	}
	if j, err := h.store.Job(ctx, id); err != nil || j.Revision != running.Revision {
		t.Fatalf("the job record was rewritten by progress reports (mod revision %d, want %d): %v", j.Revision, running.Revision, err)
	}
	pk, err := h.store.Client().Get(ctx, h.store.ProgressPrefix()+id)
	if err != nil || len(pk.Kvs) != 1 || pk.Kvs[0].Lease == 0 {
		t.Fatalf("progress key %v (%v): want one, on a lease", pk.Kvs, err)
	}
	testenv.Eventually(t, 10*time.Second, "GET shows the last report", func() bool {
		_, body, _ := h.do("GET", "/api/jobs/"+id, "alice", nil)
		p, _ := body["data"].(map[string]any)["progress"].(map[string]any)
		return p != nil && p["percent"] == 30.0
	})
	_, body, _ = h.do("GET", "/api/jobs?status=running", "alice", nil)
	if list := body["data"].([]any); len(list) != 1 || list[0].(map[string]any)["progress"].(map[string]any)["percent"] != 30.0 {
		t.Fatalf("list: %v", list)
	}
	if j, err := h.store.Job(ctx, id); err != nil || j.Progress == nil || *j.Progress.Percent != 30 {
		t.Fatalf("store.Job: %+v %v", j, err)
	}
	h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status = mj.StatusFailed; return nil })
	if pk, _ := h.store.Client().Get(ctx, h.store.ProgressPrefix()+id); len(pk.Kvs) != 0 {
		t.Fatal("the progress key outlived the job's end")
	}
}

// A runner's upload goes in only while its attempt is the job's current one: a
// worker of a superseded attempt, or of a finished job, adds nothing.
func TestUploadsOnlyToTheCurrentAttempt(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	_, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid())
	id := body["data"].(map[string]any)["id"].(string)
	put := func(attempt int) int {
		key := fmt.Sprintf("jobs/%s/%d/0b8e7f5e-3c1a-4d2b-9f00-1234567890ab/result.json", id, attempt)
		scope := fmt.Sprintf("jobs/%s/%d/", id, attempt)
		u, _ := url.Parse(h.gw.Signer.URL("PUT", scope, key, time.Now().Add(time.Hour)))
		status, _, _ := h.do("PUT", u.RequestURI(), "", "{}")
		return status
	}
	if s := put(1); s != 200 {
		t.Fatalf("attempt 1 of a queued job: %d", s)
	}
	h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Attempt = 2; return nil })
	if s := put(1); s != 409 {
		t.Fatalf("a superseded attempt's upload: %d, want 409", s)
	}
	if s := put(2); s != 200 {
		t.Fatalf("the current attempt's upload: %d", s)
	}
	h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status = mj.StatusCancelled; return nil })
	if s := put(2); s != 409 {
		t.Fatalf("an upload to a cancelled job: %d, want 409", s)
	}
}

// The same with the gateway's job cache live (the watch on jobs and progress
// keys): GET follows each stored report, and a finished job shows none.
func TestProgressThroughTheCache(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.gw.Watch(ctx)
	testenv.Eventually(t, 10*time.Second, "the job cache to go live", h.gw.jobs.live.Load)
	_, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid())
	id := body["data"].(map[string]any)["id"].(string)
	h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status, j.Attempt = mj.StatusRunning, 1; return nil })
	scope := fmt.Sprintf("jobs/%s/1/progress", id)
	u, _ := url.Parse(h.gw.Signer.URLFor("/progress/", "PROGRESS", scope, scope, time.Now().Add(time.Hour)))
	percent := func() any {
		_, body, _ := h.do("GET", "/api/jobs/"+id, "alice", nil)
		if p, ok := body["data"].(map[string]any)["progress"].(map[string]any); ok {
			return p["percent"]
		}
		return nil
	}
	for _, pct := range []float64{10, 20} {
		h.gw.progressAt.Delete(id)
		if status, body, _ := h.do("POST", u.RequestURI(), "", fmt.Sprintf(`{"percent": %v}`, pct)); status != 200 || body["data"].(map[string]any)["stored"] != true {
			t.Fatalf("report %v: %d %v", pct, status, body)
		}
		testenv.Eventually(t, 10*time.Second, fmt.Sprintf("GET to show %v%%", pct), func() bool { return percent() == pct })
	}
	if h.gw.jobs.get(id) == nil {
		t.Fatal("the job is not served from the cache")
	}
	h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status = mj.StatusSucceeded; return nil })
	testenv.Eventually(t, 10*time.Second, "a finished job to show no progress", func() bool {
		_, body, _ := h.do("GET", "/api/jobs/"+id, "alice", nil)
		return body["data"].(map[string]any)["status"] == "succeeded" && body["data"].(map[string]any)["progress"] == nil
	})
}

// A runner asks for one upload link per file it found: only for its job's current
// attempt, only for result.json and declared outputs, under its allocation.
func TestUploadURLs(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	_, body, _ := h.do("POST", "/api/ffmpeg", "alice", map[string]any{
		"output_files": []string{"seg_%03d.ts"}, "ffmpeg_commands": []string{"-f lavfi -i testsrc -t 1 {{seg_%03d.ts}}"}})
	id := body["data"].(map[string]any)["id"].(string)
	h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status, j.Attempt = mj.StatusRunning, 1; return nil })
	ask := func(attempt int, req string, tamper bool) (int, map[string]any) {
		scope := fmt.Sprintf("jobs/%s/%d/uploads", id, attempt)
		u, _ := url.Parse(h.gw.Signer.URLFor("/upload-urls/", "UPLOADS", scope, scope, time.Now().Add(time.Hour)))
		uri := u.RequestURI()
		if tamper {
			uri = strings.Replace(uri, "sig=", "sig=x", 1)
		}
		status, body, _ := h.do("POST", uri, "", req)
		return status, body
	}
	alloc := "0b8e7f5e-3c1a-4d2b-9f00-1234567890ab"
	status, body := ask(1, `{"alloc":"`+alloc+`","files":["result.json","outputs/seg_000.ts","outputs/seg_001.ts"]}`, false)
	if status != 200 {
		t.Fatalf("upload links: %d %v", status, body)
	}
	urls := body["data"].(map[string]any)["urls"].(map[string]any)
	if len(urls) != 3 || !strings.Contains(urls["outputs/seg_001.ts"].(string), "/files/jobs/"+id+"/1/"+alloc+"/outputs/seg_001.ts?") {
		t.Fatalf("links %v", urls)
	}
	// The command's log (one command here) goes up beside the result.
	if status, body := ask(1, `{"alloc":"`+alloc+`","files":["result.json","logs/1.log"]}`, false); status != 200 ||
		!strings.Contains(body["data"].(map[string]any)["urls"].(map[string]any)["logs/1.log"].(string), "/"+alloc+"/logs/1.log?") {
		t.Fatalf("log link: %d %v", status, body)
	}
	for name, req := range map[string]string{
		"an undeclared output":      `{"files":["outputs/other.mp4"]}`,
		"a path outside":            `{"files":["../x"]}`,
		"a bad allocation":          `{"alloc":"../..","files":["result.json"]}`,
		"the log of no command":     `{"files":["logs/2.log"]}`,
		"a log path outside":        `{"files":["logs/../x.log"]}`,
		"a log with a leading zero": `{"files":["logs/01.log"]}`,
		"a log of command zero":     `{"files":["logs/0.log"]}`,
	} {
		if status, body := ask(1, req, false); status != 400 {
			t.Errorf("%s: %d %v", name, status, body)
		}
	}
	if status, _ := ask(1, `{"files":["result.json"]}`, true); status != 403 {
		t.Errorf("tampered link: %d", status)
	}
	if status, _ := ask(2, `{"files":["result.json"]}`, false); status != 409 {
		t.Errorf("another attempt: %d", status)
	}
	h.store.UpdateJob(ctx, id, func(j *mj.Job) error { j.Status = mj.StatusCancelled; return nil })
	if status, _ := ask(1, `{"files":["result.json"]}`, false); status != 409 {
		t.Errorf("a cancelled job: %d", status)
	}
}
