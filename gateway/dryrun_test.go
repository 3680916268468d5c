package gateway

import (
	"context"
	"net/url"
	"reflect"
	"strings"
	"testing"
)

// etcdRevision is etcd's current revision: every write moves it.
func (h *harness) etcdRevision() int64 { _, rev := h.etcdState(); return rev }

// A dry run answers what a create would store and run, or the create's own error,
// and writes nothing to etcd: no job, no idempotency record, no use counted.
func TestDryRun(t *testing.T) {
	h := newHarness(t)
	h.used("alice") // a key's first use is recorded in the background: before the count
	h.used("bob")
	before := h.etcdRevision()

	status, body, _ := h.do("POST", "/api/ffmpeg?dry_run=true", "alice", valid(), "Idempotency-Key", "dry-1")
	data, _ := body["data"].(map[string]any)
	job, _ := data["job"].(map[string]any)
	if status != 200 || data["dry_run"] != true || job["id"] != "" || job["status"] != "queued" {
		t.Fatalf("dry run: %d %v", status, body)
	}
	cmds, _ := data["commands"].([]any)
	if len(cmds) != 1 {
		t.Fatalf("dry run commands: %v", data["commands"])
	}
	argv := cmds[0].(map[string]any)["argv"].([]any)
	want := []any{"ffmpeg", "-hide_banner", "-nostdin", "-y", "-loglevel", "level+info", "-nostats", "-progress", "pipe:3",
		"-i", "inputs/video", "outputs/out.mp4"}
	if !reflect.DeepEqual(argv, want) {
		t.Fatalf("argv:\n got %v\nwant %v", argv, want)
	}
	pl, _ := data["placement"].(map[string]any)
	if pl["machine"] != "cpu" || pl["nomad_job"] != "mediajobs-cpu" || pl["driver"] != "raw_exec" || pl["gpus"] != 0.0 || pl["memory_mb"].(float64) <= 0 {
		t.Fatalf("placement: %v", pl)
	}
	status, body, _ = h.do("POST", "/api/jobs?dry_run=1", "alice", with("machine", "nvidia"))
	pl, _ = body["data"].(map[string]any)["placement"].(map[string]any)
	if status != 200 || pl["machine"] != "nvidia" || pl["gpus"] != 1.0 {
		t.Fatalf("dry run on /api/jobs, machine nvidia: %d %v", status, body)
	}

	// Refused exactly as a create is: the same status and body.
	for name, req := range map[string]map[string]any{
		"an absolute path":         with("ffmpeg_commands", []string{"-i /etc/passwd {{out.mp4}}"}),
		"an unknown machine":       with("machine", "tpu"),
		"a private input URL":      with("input_files", map[string]string{"video": "http://10.1.2.3/a.mp4"}),
		"no commands":              with("ffmpeg_commands", nil),
		"an undeclared output":     with("ffmpeg_commands", []string{"-i {{video}} outputs/other.mp4"}),
		"a timeout over the limit": with("timeout_seconds", 1<<30),
	} {
		ds, db, _ := h.do("POST", "/api/ffmpeg?dry_run=true", "alice", req)
		cs, cb, _ := h.do("POST", "/api/ffmpeg", "alice", req)
		if ds != 400 || ds != cs || !reflect.DeepEqual(db, cb) {
			t.Errorf("%s: dry run %d %v; create %d %v", name, ds, db, cs, cb)
		}
	}
	// A local file the client would upload first stands in as a /files/dry-run/
	// path, on any host: nothing is fetched. A create refuses the same URL.
	local := with("input_files", map[string]string{"video": "http://10.1.2.3/files/dry-run/video"})
	if status, body, _ := h.do("POST", "/api/ffmpeg?dry_run=true", "alice", local); status != 200 {
		t.Fatalf("dry run with a local file: %d %v", status, body)
	}
	if status, _, _ := h.do("POST", "/api/ffmpeg", "alice", local); status != 400 {
		t.Fatalf("create with a dry-run local file URL on a private host: %d, want 400", status)
	}
	if status, body, _ := h.do("POST", "/api/ffmpeg?dry_run=maybe", "alice", valid()); status != 400 || body["errorCode"] != "validationError" {
		t.Fatalf("dry_run=maybe: %d %v", status, body)
	}
	if after := h.etcdRevision(); after != before || h.total("alice") != 0 {
		t.Fatalf("dry runs wrote to etcd: revision %d -> %d, %d jobs", before, after, h.total("alice"))
	}

	// The account's limits: a dry run over one gets the create's 429.
	one := int64(1)
	h.gw.Config.Limits.MaxQueuedJobs = &one
	if status, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid()); status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	before = h.etcdRevision()
	status, body, hdr := h.do("POST", "/api/ffmpeg?dry_run=true", "alice", valid())
	details, _ := body["details"].(map[string]any)
	if status != 429 || body["errorCode"] != "quotaExceeded" || details["limit"] != "max_queued_jobs" || hdr.Get("Retry-After") != "" {
		t.Fatalf("dry run over max_queued_jobs: %d %v %v", status, body, hdr)
	}
	// Another account's dry run is within its own limits.
	if status, body, _ := h.do("POST", "/api/ffmpeg?dry_run=true", "bob", valid()); status != 200 {
		t.Fatalf("bob's dry run: %d %v", status, body)
	}
	if after := h.etcdRevision(); after != before {
		t.Fatalf("dry runs wrote to etcd: revision %d -> %d", before, after)
	}
}

// A create retried with its Idempotency-Key gets the job it stored, even once a
// temporary file it named has expired.
func TestIdempotentRetryAfterTheTmpFileExpired(t *testing.T) {
	h := newHarness(t)
	_, body, _ := h.do("POST", "/api/tmp-file", "alice", nil)
	data := body["data"].(map[string]any)
	up, _ := url.Parse(data["upload_url"].(string))
	if status, _, _ := h.do("PUT", up.RequestURI(), "", "bytes"); status != 200 {
		t.Fatalf("upload: %d", status)
	}
	req := with("input_files", map[string]string{"video": data["download_url"].(string)})
	status, first, _ := h.do("POST", "/api/ffmpeg", "alice", req, "Idempotency-Key", "retry-1")
	if status != 200 {
		t.Fatalf("create: %d %v", status, first)
	}
	key := strings.TrimPrefix(up.Path, "/files/")
	if err := h.gw.Blobs.(interface {
		Delete(context.Context, string) error
	}).Delete(context.Background(), key); err != nil {
		t.Fatal(err)
	}
	status, again, _ := h.do("POST", "/api/ffmpeg", "alice", req, "Idempotency-Key", "retry-1")
	if status != 200 || again["data"].(map[string]any)["id"] != first["data"].(map[string]any)["id"] {
		t.Fatalf("the retry: %d %v, want the first job", status, again)
	}
	if n := h.total("alice"); n != 1 {
		t.Fatalf("alice holds %d jobs, want 1", n)
	}
}
