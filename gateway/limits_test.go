package gateway

import (
	"testing"
)

// A create over an account limit is 429 quotaExceeded naming the limit, with
// Retry-After for jobs queued, and stores nothing; GET /api/account shows the
// limits and the use.
func TestAccountQuota(t *testing.T) {
	h := newHarness(t)
	one := int64(1)
	h.gw.Config.Limits.MaxQueuedJobs = &one
	if status, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid()); status != 200 {
		t.Fatalf("first create: %d %v", status, body)
	}
	status, body, hdr := h.do("POST", "/api/ffmpeg", "alice", valid())
	details, _ := body["details"].(map[string]any)
	if status != 429 || body["errorCode"] != "quotaExceeded" || details["limit"] != "max_queued_jobs" || details["value"] != "1" || details["use"] != "1" || hdr.Get("Retry-After") != "10" {
		t.Fatalf("create over max_queued_jobs: %d %v %v", status, body, hdr)
	}
	if n := h.total("alice"); n != 1 {
		t.Fatalf("alice holds %d jobs; want 1", n)
	}
	// The timeout: refused without Retry-After (waiting does not help).
	ten := int64(10)
	h.gw.Config.Limits.MaxTimeoutSeconds = &ten
	status, body, hdr = h.do("POST", "/api/ffmpeg", "bob", with("timeout_seconds", 11))
	details, _ = body["details"].(map[string]any)
	if status != 429 || details["limit"] != "max_timeout_seconds" || details["use"] != "11" || hdr.Get("Retry-After") != "" {
		t.Fatalf("create over max_timeout_seconds: %d %v %v", status, body, hdr)
	}

	status, body, _ = h.do("GET", "/api/account", "alice", nil)
	data, _ := body["data"].(map[string]any)
	limits, _ := data["limits"].(map[string]any)
	usage, _ := data["usage"].(map[string]any)
	if status != 200 || data["name"] != "alice" || limits["max_queued_jobs"] != 1.0 || limits["max_timeout_seconds"] != 10.0 ||
		usage["queued_jobs"] != 1.0 || usage["job_bytes"].(float64) <= 0 || data["weight"] != 1.0 {
		t.Fatalf("GET /api/account: %d %v", status, body)
	}
	if status, _, _ := h.do("GET", "/api/account", "", nil); status != 401 {
		t.Fatalf("GET /api/account without a key: %d", status)
	}
}
