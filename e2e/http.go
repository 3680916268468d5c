package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/testenv"
)

// Response is an HTTP answer, read whole.
type Response struct {
	Status int
	Header http.Header
	Body   []byte
}

// JSON is the body as a JSON object.
func (r Response) JSON(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v\n%s", err, r.Body)
	}
	return m
}

// Data is the body's "data" object.
func (r Response) Data(t *testing.T) map[string]any {
	t.Helper()
	d, ok := r.JSON(t)["data"].(map[string]any)
	if !ok {
		t.Fatalf("no data object in %s", r.Body)
	}
	return d
}

// Call sends a request with key as the bearer token (none when empty); a path
// starting with "/" is the shared stack's. body is sent as is (string, []byte)
// or as JSON; headers are name, value pairs.
func Call(t *testing.T, method, path, key string, body any, headers ...string) Response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	url := path
	if strings.HasPrefix(path, "/") {
		url = Stack.URL + path
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return Response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// UploadTmp stores b as a temporary file through api's /api/tmp-file (api
// empty: the shared stack's) with key, and answers its download link.
func UploadTmp(t *testing.T, api, key string, b []byte) string {
	t.Helper()
	r := Call(t, "POST", api+"/api/tmp-file", key, nil)
	if r.Status != 200 {
		t.Fatalf("tmp-file: HTTP %d %s", r.Status, r.Body)
	}
	d := r.Data(t)
	if up := Call(t, "PUT", d["upload_url"].(string), "", b); up.Status/100 != 2 {
		t.Fatalf("upload: HTTP %d %s", up.Status, up.Body)
	}
	return d["download_url"].(string)
}

// Status is the HTTP status of a GET of url, 0 when nothing answers.
func Status(url string) int {
	resp, err := (&http.Client{Timeout: 5 * time.Second}).Get(url)
	if err != nil {
		return 0
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// WaitTerminal polls the shared stack's GET /api/jobs/{id} until the job is terminal.
func WaitTerminal(t *testing.T, id string) map[string]any {
	t.Helper()
	var job map[string]any
	testenv.Eventually(t, 90*time.Second, "job "+id+" to finish", func() bool {
		job = Call(t, "GET", "/api/jobs/"+id, Stack.APIKey, nil).Data(t)
		s := job["status"]
		return s == "succeeded" || s == "failed" || s == "cancelled"
	})
	return job
}

// Probe is ffprobe's JSON of a file's format and streams.
func Probe(t *testing.T, path string) map[string]any {
	t.Helper()
	out, err := exec.Command(Ffprobe, "-v", "error", "-show_format", "-show_streams", "-of", "json", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	var m map[string]any
	json.Unmarshal(out, &m)
	return m
}

// Download fetches a signed link (no API key) into the test's temporary directory.
func Download(t *testing.T, url string) string {
	t.Helper()
	r := Call(t, "GET", url, "", nil)
	if r.Status != 200 {
		t.Fatalf("download %s: HTTP %d %s", url, r.Status, r.Body)
	}
	p := filepath.Join(t.TempDir(), "out"+filepath.Ext(strings.SplitN(url, "?", 2)[0]))
	os.WriteFile(p, r.Body, 0o644)
	return p
}

// HookRecorder is a webhook receiver on loopback (HookURL).
type HookRecorder struct {
	mu  sync.Mutex
	got []HookCall
}

// HookCall is one webhook delivery.
type HookCall struct {
	Header http.Header
	Job    map[string]any
}

func (h *HookRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var job map[string]any
	json.Unmarshal(body, &job)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, HookCall{Header: r.Header.Clone(), Job: job})
	w.WriteHeader(204)
}

// Calls are the deliveries of job id's webhook so far.
func (h *HookRecorder) Calls(id string) []HookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []HookCall
	for _, c := range h.got {
		if c.Job["id"] == id {
			out = append(out, c)
		}
	}
	return out
}
