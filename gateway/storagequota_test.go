package gateway

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdState is etcd's key count and revision: a refused request changes neither.
func (h *harness) etcdState() (int64, int64) {
	h.t.Helper()
	r, err := h.store.Client().Get(context.Background(), "", clientv3.WithFromKey(), clientv3.WithCountOnly())
	if err != nil {
		h.t.Fatal(err)
	}
	return r.Count, r.Header.Revision
}

// used makes a request with acct's key and waits until its use is recorded
// (asynchronously, once), so that later requests write nothing of their own.
func (h *harness) used(acct string) {
	h.t.Helper()
	h.do("GET", "/api/account", acct, nil)
	testenv.Eventually(h.t, 10*time.Second, "the key's use is recorded", func() bool {
		keys, err := h.store.ListAPIKeys(context.Background(), acct)
		return err == nil && len(keys) > 0 && keys[0].LastUsed != nil
	})
}

// refused checks a request is refused with status, errorCode and (for a
// limit) details naming it, and leaves etcd as it was.
func (h *harness) refused(method, target, acct string, body any, status int, code, limit string) map[string]any {
	h.t.Helper()
	keys, rev := h.etcdState()
	st, resp, _ := h.do(method, target, acct, body)
	details, _ := resp["details"].(map[string]any)
	if st != status || resp["errorCode"] != code || (limit != "" && details["limit"] != limit) {
		h.t.Fatalf("%s %s: %d %v; want %d %s %s", method, target, st, resp, status, code, limit)
	}
	if k, r := h.etcdState(); k != keys || r != rev {
		h.t.Fatalf("%s %s was refused but wrote to etcd: keys %d -> %d, revision %d -> %d", method, target, keys, k, rev, r)
	}
	return details
}

func (h *harness) upload(u string, body string) int {
	h.t.Helper()
	req, _ := http.NewRequest("PUT", u, strings.NewReader(body))
	var status int
	if strings.HasPrefix(u, "http://gw.test/") {
		resp, err := h.app.Test(req, 10000)
		if err != nil {
			h.t.Fatal(err)
		}
		status = resp.StatusCode
	} else {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			h.t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		status = resp.StatusCode
	}
	return status
}

// A tmp-file request may declare the size: over max_upload_bytes it is 413, over
// the account's storage 429 quotaExceeded, both naming the limit and storing
// nothing; declared, it counts at once and its upload must be exactly that
// size. A bodyless request still works (VGF clients).
func TestTmpFileDeclaredSize(t *testing.T) {
	h := newHarness(t) // file storage: the gateway takes the PUT itself
	storage := int64(100)
	h.gw.Config.Limits.MaxStorageBytes = &storage
	h.used("alice")
	d := h.refused("POST", "/api/tmp-file", "alice", map[string]any{"size": 1001}, 413, "payloadTooLarge", "max_upload_bytes")
	if d["value"] != "1000" || d["use"] != "1001" {
		t.Fatalf("details %v", d)
	}
	h.refused("POST", "/api/tmp-file", "alice", map[string]any{"size": 0}, 400, "validationError", "")
	h.refused("POST", "/api/tmp-file", "alice", `{"size": "ten"}`, 400, "validationError", "")
	d = h.refused("POST", "/api/tmp-file", "alice", map[string]any{"size": 101}, 429, "quotaExceeded", "max_storage_bytes")
	if d["value"] != "100" || d["use"] != "0" {
		t.Fatalf("details %v", d)
	}
	st, body, _ := h.do("POST", "/api/tmp-file", "alice", map[string]any{"size": 60})
	if st != 200 {
		t.Fatalf("declared 60: %d %v", st, body)
	}
	up := body["data"].(map[string]any)["upload_url"].(string)
	if s := h.upload(up, strings.Repeat("x", 61)); s != 400 {
		t.Fatalf("61 bytes to a link declared for 60: HTTP %d", s)
	}
	if s := h.upload(up, strings.Repeat("x", 59)); s != 400 {
		t.Fatalf("59 bytes to a link declared for 60: HTTP %d", s)
	}
	if s := h.upload(up, strings.Repeat("x", 60)); s != 200 {
		t.Fatalf("60 bytes: HTTP %d", s)
	}
	// 60 of 100 held: 41 more is over.
	h.refused("POST", "/api/tmp-file", "alice", map[string]any{"size": 41}, 429, "quotaExceeded", "max_storage_bytes")
	st, body, _ = h.do("GET", "/api/account", "alice", nil)
	data := body["data"].(map[string]any)
	if st != 200 || data["usage"].(map[string]any)["storage_bytes"] != 60.0 || data["limits"].(map[string]any)["max_storage_bytes"] != 100.0 ||
		data["limits"].(map[string]any)["max_event_streams"] != 16.0 {
		t.Fatalf("GET /api/account: %d %v", st, body)
	}
	// Bodyless, as VGF clients ask: a link, and nothing counted yet.
	if st, body, _ := h.do("POST", "/api/tmp-file", "alice", nil); st != 200 || body["data"].(map[string]any)["upload_url"] == "" {
		t.Fatalf("bodyless tmp-file: %d %v", st, body)
	}
}

// An undeclared temporary file is checked at its first use as an input: over
// max_upload_bytes or over its account's storage it is deleted and the create
// refused naming the input and the limit; within, it counts once.
func TestTmpFileCheckedOnFirstUse(t *testing.T) {
	h := newHarness(t)
	storage := int64(100)
	h.gw.Config.Limits.MaxStorageBytes = &storage
	h.used("alice")
	newTmp := func(content string) (up, down string) {
		st, body, _ := h.do("POST", "/api/tmp-file", "alice", nil)
		if st != 200 {
			t.Fatalf("tmp-file: %d %v", st, body)
		}
		data := body["data"].(map[string]any)
		if s := h.upload(data["upload_url"].(string), content); s != 200 {
			t.Fatalf("upload of %d bytes: HTTP %d", len(content), s)
		}
		return data["upload_url"].(string), data["download_url"].(string)
	}
	job := func(u string) map[string]any {
		return with("input_files", map[string]string{"video": u})
	}
	_, big := newTmp(strings.Repeat("x", 101))
	d := h.refused("POST", "/api/ffmpeg", "alice", job(big), 429, "quotaExceeded", "max_storage_bytes")
	if d["field"] != "input_files.video" || d["use"] != "0" {
		t.Fatalf("details %v", d)
	}
	if st, _, _ := h.do("GET", strings.TrimPrefix(big, "http://gw.test"), "", nil); st != 404 {
		t.Fatalf("the refused file is still served: HTTP %d", st)
	}
	_, ok := newTmp(strings.Repeat("x", 70))
	for range 2 { // counted once
		if st, body, _ := h.do("POST", "/api/ffmpeg", "alice", job(ok)); st != 200 {
			t.Fatalf("create with a 70-byte input: %d %v", st, body)
		}
	}
	_, body, _ := h.do("GET", "/api/account", "alice", nil)
	if u := body["data"].(map[string]any)["usage"].(map[string]any)["storage_bytes"]; u != 70.0 {
		t.Fatalf("storage held %v; want 70", u)
	}
	_, more := newTmp(strings.Repeat("x", 31))
	h.refused("POST", "/api/ffmpeg", "alice", job(more), 429, "quotaExceeded", "max_storage_bytes")
}

// In S3 mode (real MinIO): a declared size is signed into the presigned PUT, so
// MinIO itself refuses a body of another size; an undeclared upload over
// max_upload_bytes, which MinIO accepts, is refused at its first use and deleted.
func TestTmpFileS3Bounded(t *testing.T) {
	m := testenv.StartMinIO(t)
	m.SetEnv(t)
	h := newHarness(t)
	b, err := blob.Open(context.Background(), m.URL())
	if err != nil {
		t.Fatal(err)
	}
	h.gw.Blobs = b
	h.gw.Config.Server.AllowLoopback = true // MinIO listens on loopback here
	h.app = h.gw.App()
	h.used("alice")

	st, body, _ := h.do("POST", "/api/tmp-file", "alice", map[string]any{"size": 10})
	data, _ := body["data"].(map[string]any)
	up, _ := data["upload_url"].(string)
	if st != 200 || !strings.HasPrefix(up, m.Endpoint+"/") {
		t.Fatalf("declared tmp-file: %d %v", st, body)
	}
	if s := h.upload(up, strings.Repeat("x", 11)); s != 403 {
		t.Fatalf("MinIO took 11 bytes on a link signed for 10: HTTP %d", s)
	}
	if s := h.upload(up, strings.Repeat("x", 10)); s != 200 {
		t.Fatalf("10 bytes on a link signed for 10: HTTP %d", s)
	}

	// Undeclared, as VGF clients do: MinIO takes 1001 bytes (max_upload_bytes is 1000).
	st, body, _ = h.do("POST", "/api/tmp-file", "alice", nil)
	data, _ = body["data"].(map[string]any)
	if st != 200 {
		t.Fatalf("bodyless tmp-file: %d %v", st, body)
	}
	if s := h.upload(data["upload_url"].(string), strings.Repeat("x", 1001)); s != 200 {
		t.Fatalf("undeclared upload: HTTP %d", s)
	}
	key, ok := h.gw.tmpKey(context.Background(), data["download_url"].(string))
	if !ok {
		t.Fatalf("the download_url is not recognized as a temporary file: %s", data["download_url"])
	}
	if _, _, err := b.Stat(context.Background(), key); err != nil {
		t.Fatalf("the upload is not in the bucket: %v", err)
	}
	d := h.refused("POST", "/api/ffmpeg", "alice", with("input_files", map[string]string{"video": data["download_url"].(string)}), 413, "payloadTooLarge", "max_upload_bytes")
	if d["field"] != "input_files.video" || d["use"] != "1001" {
		t.Fatalf("details %v", d)
	}
	if _, _, err := b.Stat(context.Background(), key); err != blob.ErrNotFound {
		t.Fatalf("the oversized file is still in the bucket: %v", err)
	}
}

// Event streams open per account: the one past max_event_streams is 429
// quotaExceeded naming it, and a closed stream makes room again.
func TestEventStreamsLimited(t *testing.T) {
	h := newHarness(t)
	one := int64(1)
	h.gw.Config.Limits.MaxEventStreams = &one
	// A closed stream is noticed at its next write: heartbeats often.
	h.gw.times.heartbeat = 100 * time.Millisecond
	base := h.serve()
	resp, ch := h.stream(base, "/api/events", "alice")
	if resp.StatusCode != 200 {
		t.Fatalf("first stream: HTTP %d", resp.StatusCode)
	}
	next(t, ch, "ready")
	h.used("alice") // the key's first use is recorded in the background: before the count
	keys, rev := h.etcdState()
	second, _ := h.stream(base, "/api/events", "alice") // a real connection: a stream would not end
	var body map[string]any
	json.NewDecoder(io.LimitReader(second.Body, 4096)).Decode(&body)
	st := second.StatusCode
	details, _ := body["details"].(map[string]any)
	if st != 429 || body["errorCode"] != "quotaExceeded" || details["limit"] != "max_event_streams" || details["value"] != "1" || details["use"] != "1" {
		t.Fatalf("second stream: %d %v", st, body)
	}
	if k, r := h.etcdState(); k != keys || r != rev {
		t.Fatalf("a refused stream wrote to etcd: keys %d -> %d, revision %d -> %d", keys, k, rev, r)
	}
	if r2, _ := h.stream(base, "/api/events", "bob"); r2.StatusCode != 200 {
		t.Fatalf("another account's stream: HTTP %d", r2.StatusCode)
	}
	resp.Body.Close()
	testenv.Eventually(t, 10*time.Second, "the closed stream stops counting", func() bool {
		_, body, _ := h.do("GET", "/api/account", "alice", nil)
		return body["data"].(map[string]any)["usage"].(map[string]any)["event_streams"] == 0.0
	})
	if r3, _ := h.stream(base, "/api/events", "alice"); r3.StatusCode != 200 {
		t.Fatalf("a stream after the first closed: HTTP %d", r3.StatusCode)
	}
}
