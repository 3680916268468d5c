package gateway

import (
	"strings"
	"testing"
)

// The service's own control plane (Nomad, etcd, the listeners) is refused to
// inputs, webhooks and destinations at create, even where loopback is allowed
// (make run); destinations follow their own allow list, not the inputs'.
func TestControlPlaneRefusedAtCreate(t *testing.T) {
	h := newHarness(t)
	cfg := h.gw.Config
	cfg.Server.AllowLoopback = true
	cfg.Nomad.Address = "http://127.0.0.1:4646"
	cfg.Server.Listen = "127.0.0.1:8080"
	refused := func(field string, body map[string]any, why ...string) {
		t.Helper()
		status, resp, _ := h.do("POST", "/api/ffmpeg", "alice", body)
		d, _ := resp["details"].(map[string]any)
		msg, _ := d[field].(string)
		if status != 400 || !strings.Contains(msg, append(why, "control plane")[0]) {
			t.Errorf("%s: HTTP %d %v", field, status, resp)
		}
	}
	dest := func(u string) map[string]any {
		b := valid()
		b["output_destinations"] = map[string]string{"out.mp4": u}
		return b
	}
	input := func(u string) map[string]any {
		return with("input_files", map[string]string{"video": u})
	}
	refused("input_files.video", input("http://127.0.0.1:4646/v1/jobs"))
	refused("input_files.video", input("http://localhost:8080/api/jobs"))
	refused("webhook_url", with("webhook_url", "http://127.0.0.1:2479/v3/kv/put"))
	// The inputs' allow_loopback does not open loopback to destinations.
	refused("output_destinations.out.mp4", dest("http://127.0.0.1:9000/bucket/out.mp4"), "loopback")
	cfg.Server.DestinationAllowLoopback = true
	refused("output_destinations.out.mp4", dest("http://127.0.0.1:4646/v1/jobs"))
	refused("output_destinations.out.mp4", dest("http://[::1]:8500/v1/kv/x"))
	if n := h.total("alice"); n != 0 {
		t.Fatalf("%d jobs stored by refused creates", n)
	}
	// What is not the control plane passes under the lists that allow it.
	if status, resp, _ := h.do("POST", "/api/ffmpeg", "alice", dest("http://127.0.0.1:9000/bucket/out.mp4")); status != 200 {
		t.Fatalf("a loopback destination with destination_allow_loopback: HTTP %d %v", status, resp)
	}
}
