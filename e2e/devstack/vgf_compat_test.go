package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/mediajobs/mediajobs/testenv"
)

// vgfClient sends requests the way Very Good FFmpeg's public Python SDK (1.2.0)
// does: base URL ending in /api, Bearer key, JSON Content-Type and Accept on every
// call (GET and body-less POSTs included), and it reads resp["data"] and, for lists,
// resp["pagingParams"]. The TypeScript SDK differs in sending JSON as text/plain
// and no Content-Type header of its own; ts=true does that.
type vgfClient struct {
	t    *testing.T
	base string
	key  string
	ts   bool
}

func (c vgfClient) request(method, path string, body any) (int, map[string]any) {
	c.t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.base+path, rd)
	req.Header.Set("Authorization", "Bearer "+c.key)
	if c.ts {
		if body != nil {
			req.Header.Set("Content-Type", "text/plain;charset=UTF-8")
		}
	} else {
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json")
		req.Header.Set("User-Agent", "very-good-ffmpeg-python/1.2.0")
	}
	// The SDK follows no redirects for POST: a 3xx must never happen.
	client := &http.Client{Timeout: 30 * time.Second, CheckRedirect: func(*http.Request, []*http.Request) error {
		return http.ErrUseLastResponse
	}}
	resp, err := client.Do(req)
	if err != nil {
		c.t.Fatalf("%s %s: %v (the Python SDK's socket timeout is 30s)", method, path, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	var out map[string]any
	if err := json.Unmarshal(raw, &out); err != nil {
		c.t.Fatalf("%s %s: HTTP %d, body is not JSON: %q", method, path, resp.StatusCode, raw)
	}
	return resp.StatusCode, out
}

// job parses a job the way Job._from_dict does: id, status, queued_at, created_at
// and updated_at are required; the rest optional with the SDK's types.
func (c vgfClient) job(raw map[string]any) map[string]any {
	c.t.Helper()
	d, ok := raw["data"].(map[string]any)
	if !ok {
		c.t.Fatalf("no data object: %v", raw)
	}
	for _, f := range []string{"id", "status", "queued_at", "created_at", "updated_at"} {
		if _, ok := d[f].(string); !ok {
			c.t.Fatalf("required field %s missing or not a string: %v", f, d[f])
		}
	}
	if !regexp.MustCompile(`^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`).MatchString(d["id"].(string)) {
		c.t.Fatalf("id %v is not a UUID (n8n's demo scrapes ids with a UUID pattern)", d["id"])
	}
	if _, ok := d["error_message"].(string); !ok {
		c.t.Fatalf("error_message must be a string, got %v", d["error_message"])
	}
	if _, ok := d["output_files"].(map[string]any); !ok {
		c.t.Fatalf("output_files must be an object, got %v", d["output_files"])
	}
	if _, ok := d["input_files"].(map[string]any); !ok {
		c.t.Fatalf("input_files must be an object, got %v", d["input_files"])
	}
	if _, ok := d["ffmpeg_commands"].([]any); !ok {
		c.t.Fatalf("ffmpeg_commands must be an array, got %v", d["ffmpeg_commands"])
	}
	for _, f := range []string{"started_at", "finished_at", "webhook_url"} {
		if v, present := d[f]; present && v != nil {
			if _, ok := v.(string); !ok {
				c.t.Fatalf("%s must be a string or null, got %v", f, v)
			}
		}
	}
	return d
}

func (c vgfClient) run(body map[string]any, wait bool) map[string]any {
	c.t.Helper()
	path := "/ffmpeg"
	if wait {
		path += "?wait=true"
	}
	status, raw := c.request("POST", path, body)
	if status != 200 {
		c.t.Fatalf("create: HTTP %d %v", status, raw)
	}
	return c.job(raw)
}

// poll is Job.wait(): GET /jobs/{id} until the status is terminal.
func (c vgfClient) poll(id string) map[string]any {
	c.t.Helper()
	var job map[string]any
	testenv.Eventually(c.t, 90*time.Second, "job "+id, func() bool {
		status, raw := c.request("GET", "/jobs/"+id, nil)
		if status != 200 {
			c.t.Fatalf("get: HTTP %d %v", status, raw)
		}
		job = c.job(raw)
		s := job["status"]
		return s == "succeeded" || s == "failed" || s == "cancelled"
	})
	return job
}

func newVGF(t *testing.T) vgfClient {
	e2e.NeedStack(t)
	return vgfClient{t: t, base: e2e.Stack.URL + "/api", key: e2e.Stack.APIKey}
}

func TestVGFSuccessWithWait(t *testing.T) {
	t.Parallel()
	c := newVGF(t)
	job := c.run(map[string]any{
		"input_files":     map[string]string{"input": e2e.ClipURL},
		"output_files":    []string{"output.mp4"},
		"ffmpeg_commands": []string{"-i {{input}} -t 2 {{output.mp4}}"},
		"machine":         "cpu",
	}, true)
	if job["status"] != "succeeded" {
		t.Fatalf("status %v: %v", job["status"], job["error_message"])
	}
	if u, _ := job["output_files"].(map[string]any)["output.mp4"].(string); !strings.HasPrefix(u, "http") {
		t.Fatalf("output_files = %v", job["output_files"])
	}
}

func TestVGFSuccessPolling(t *testing.T) {
	t.Parallel()
	c := newVGF(t)
	job := c.run(map[string]any{
		"input_files":     map[string]string{"input": e2e.ClipURL},
		"output_files":    []string{"output.mp4"},
		"ffmpeg_commands": []string{"-i {{input}} -t 2 {{output.mp4}}"},
		"machine":         "cpu",
	}, false)
	if s := job["status"]; s != "queued" && s != "running" && s != "succeeded" {
		t.Fatalf("first status %v", s)
	}
	if job = c.poll(job["id"].(string)); job["status"] != "succeeded" {
		t.Fatalf("status %v: %v", job["status"], job["error_message"])
	}
}

func TestVGFTypeScriptStyleTextPlainAndTrailingSlash(t *testing.T) {
	t.Parallel()
	c := newVGF(t)
	c.ts = true
	c.base += "/"                // TS does not trim: base "…/api/" + "/ffmpeg"
	job := c.run(map[string]any{ // no machine: defaults to cpu
		"input_files":     map[string]string{"input": e2e.ClipURL},
		"output_files":    []string{"output.mp4"},
		"ffmpeg_commands": []string{"-i {{input}} -t 1 {{output.mp4}}"},
		"webhook_url":     e2e.HookURL + "/ts",
	}, true)
	if job["status"] != "succeeded" || job["machine"] != "cpu" || job["webhook_url"] != e2e.HookURL+"/ts" {
		t.Fatalf("job %v", job)
	}
}

func TestVGFFailureStillCreates(t *testing.T) {
	t.Parallel()
	c := newVGF(t)
	// An input nobody serves: creating still succeeds (2xx); the job fails.
	job := c.run(map[string]any{
		"input_files":     map[string]string{"input": "http://127.0.0.1:1/nope.mp4"},
		"output_files":    []string{"output.mp4"},
		"ffmpeg_commands": []string{"-i {{input}} {{output.mp4}}"},
		"machine":         "cpu",
	}, true)
	if job["status"] != "failed" || job["error_message"] == "" {
		t.Fatalf("status %v, error_message %q", job["status"], job["error_message"])
	}
}

func TestVGFTimeout(t *testing.T) {
	t.Parallel()
	c := newVGF(t)
	job := c.run(map[string]any{
		"input_files":     map[string]string{"input": e2e.ClipURL},
		"output_files":    []string{"output.mp4"},
		"ffmpeg_commands": []string{"-re -stream_loop 50 -i {{input}} -c:v libx264 {{output.mp4}}"},
		"machine":         "cpu",
		"timeout_seconds": 2,
	}, true)
	msg, _ := job["error_message"].(string)
	if job["timeout_seconds"] != float64(2) || job["status"] != "failed" || !strings.Contains(msg, "timed out") {
		t.Fatalf("timeout_seconds %v, status %v, error_message %q", job["timeout_seconds"], job["status"], msg)
	}
}

func TestVGFCancel(t *testing.T) {
	t.Parallel()
	c := newVGF(t)
	job := c.run(map[string]any{
		"input_files":     map[string]string{"input": e2e.ClipURL},
		"output_files":    []string{"output.mp4"},
		"ffmpeg_commands": []string{"-re -stream_loop 50 -i {{input}} -t 60 {{output.mp4}}"},
		"machine":         "cpu",
	}, false)
	id := job["id"].(string)
	// Let it reach Nomad first, so cancelling must also stop the Nomad job.
	testenv.Eventually(t, 30*time.Second, "job to run", func() bool {
		_, raw := c.request("GET", "/jobs/"+id, nil)
		return c.job(raw)["status"] == "running"
	})
	status, raw := c.request("POST", "/jobs/"+id+"/cancel", nil)
	if status != 200 || c.job(raw)["status"] != "cancelled" {
		t.Fatalf("cancel: HTTP %d %v", status, raw)
	}
	if job = c.poll(id); job["status"] != "cancelled" {
		t.Fatalf("after cancel: %v", job["status"])
	}
	stored, err := e2e.Stack.Backends.Store.Job(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the Nomad job to stop", func() bool {
		j, _, err := e2e.Agent.Client.Jobs().Info(stored.NomadJobID, nil)
		return err == nil && j.Stop != nil && *j.Stop
	})
	if status, raw := c.request("POST", "/jobs/"+id+"/cancel", nil); status != 409 || raw["errorCode"] != "conflict" {
		t.Fatalf("second cancel: HTTP %d %v", status, raw)
	}
}

func TestVGFList(t *testing.T) {
	c := newVGF(t)
	for i := 0; i < 3; i++ { // make sure there are at least 3 jobs
		c.run(map[string]any{"output_files": []string{"o.wav"}, "ffmpeg_commands": []string{"-f lavfi -i sine=duration=0.1 {{o.wav}}"}}, false)
	}
	seen := map[string]bool{}
	for _, offset := range []string{"0", "2"} {
		status, raw := c.request("GET", "/jobs?limit=2&offset="+offset, nil)
		if status != 200 {
			t.Fatalf("list: HTTP %d %v", status, raw)
		}
		p, ok := raw["pagingParams"].(map[string]any)
		if !ok {
			t.Fatalf("no pagingParams: %v", raw)
		}
		for _, f := range []string{"limit", "offset", "total"} {
			if _, ok := p[f].(float64); !ok {
				t.Fatalf("pagingParams.%s = %v, want a number", f, p[f])
			}
		}
		if _, ok := p["hasMore"].(bool); !ok {
			t.Fatalf("pagingParams.hasMore = %v, want a bool", p["hasMore"])
		}
		items := raw["data"].([]any)
		if len(items) == 0 || len(items) > 2 {
			t.Fatalf("page at offset %s has %d items", offset, len(items))
		}
		for _, it := range items {
			id := c.job(map[string]any{"data": it})["id"].(string)
			if seen[id] {
				t.Fatalf("job %s on two pages", id)
			}
			seen[id] = true
		}
	}
	// The n8n credential test: limit only.
	if status, _ := c.request("GET", "/jobs?limit=1", nil); status != 200 {
		t.Fatalf("limit only: HTTP %d", status)
	}
}

func TestVGFTmpFileUpload(t *testing.T) {
	t.Parallel()
	c := newVGF(t)
	status, raw := c.request("POST", "/tmp-file", nil)
	if status != 200 {
		t.Fatalf("tmp-file: HTTP %d %v", status, raw)
	}
	d := raw["data"].(map[string]any)
	up, _ := d["upload_url"].(string)
	down, _ := d["download_url"].(string)
	if !regexp.MustCompile(`^https?://`).MatchString(down) || !strings.HasPrefix(up, "http") {
		t.Fatalf("tmp-file data %v", d)
	}
	clip := e2e.Call(t, "GET", e2e.ClipURL, "", nil).Body
	req, _ := http.NewRequest("PUT", up, bytes.NewReader(clip)) // no Authorization: the URL is the credential
	req.Header.Set("Content-Type", "video/mp4")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 200 && resp.StatusCode != 204 {
		t.Fatalf("upload: HTTP %d (the Python SDK accepts only 200 or 204)", resp.StatusCode)
	}
	if got := e2e.Call(t, "GET", down, "", nil); got.Status != 200 || !bytes.Equal(got.Body, clip) {
		t.Fatalf("download: HTTP %d, %d bytes, want the %d uploaded", got.Status, len(got.Body), len(clip))
	}
	if r := e2e.Call(t, "GET", strings.Replace(down, "m=GET", "m=PUT", 1), "", nil); r.Status != 403 {
		t.Fatalf("tampered download link: HTTP %d", r.Status)
	}
	job := c.run(map[string]any{
		"input_files":     map[string]string{"input": down},
		"output_files":    []string{"output.mp4"},
		"ffmpeg_commands": []string{"-i {{input}} -t 2 {{output.mp4}}"},
		"machine":         "cpu",
	}, true)
	if job["status"] != "succeeded" {
		t.Fatalf("job on a temporary file: %v %v", job["status"], job["error_message"])
	}
}

func TestVGFErrorsCarryMessage(t *testing.T) {
	t.Parallel()
	c := newVGF(t)
	c.key = "sk_wrong"
	if status, raw := c.request("GET", "/jobs/x", nil); status != 401 || raw["message"] == "" {
		t.Fatalf("bad key: HTTP %d %v", status, raw)
	}
	c.key = e2e.Stack.APIKey
	if status, raw := c.request("GET", "/jobs/9f8e7d6c-0000-4000-8000-000000000000", nil); status != 404 || raw["message"] == "" {
		t.Fatalf("unknown job: HTTP %d %v", status, raw)
	}
	if status, raw := c.request("POST", "/ffmpeg", map[string]any{"output_files": []string{}}); status != 400 || raw["message"] == "" {
		t.Fatalf("bad request: HTTP %d %v", status, raw)
	}
}
