package gateway

import (
	"strings"
	"testing"
)

// TestAllowListsOpenInternalDestinations: server.allow_cidrs and allow_hosts let
// inputs and webhooks name internal addresses; everything else stays refused, and
// the refusal names the setting. Nothing is connected to: the gateway only checks.
func TestAllowListsOpenInternalDestinations(t *testing.T) {
	h := newHarness(t)
	h.gw.Config.Server.AllowCIDRs = []string{"127.0.0.2/32", "10.1.0.0/24"}
	h.gw.Config.Server.AllowHosts = []string{"internal.example"}
	if err := h.gw.Config.Finish(); err != nil {
		t.Fatal(err)
	}
	h.gw.Config.Server.RateLimit = 0
	for _, c := range []struct {
		name, input, hook string
		ok                bool
	}{
		{"listed loopback alias", "http://127.0.0.2:9/a.mp4", "http://127.0.0.2:9/hook", true},
		{"listed range", "http://10.1.0.3/a.mp4", "http://10.1.0.200/hook", true},
		// internal.example resolves to 10.1.2.3 (fakeDNS), outside the listed range.
		{"listed host (private by DNS)", "https://internal.example/a.mp4", "https://internal.example/hook", true},
		{"unlisted loopback", "http://127.0.0.3:9/a.mp4", "", false},
		{"unlisted private", "http://10.2.0.1/a.mp4", "", false},
		{"metadata", "http://169.254.169.254/latest", "", false},
		{"unlisted webhook", "http://10.1.0.3/a.mp4", "http://192.168.0.1/hook", false},
	} {
		body := with("input_files", map[string]string{"video": c.input})
		if c.hook != "" {
			body["webhook_url"] = c.hook
		}
		status, resp, _ := h.do("POST", "/api/ffmpeg", "alice", body)
		if (status == 200) != c.ok {
			t.Errorf("%s: HTTP %d %v", c.name, status, resp)
		}
		if c.name == "unlisted private" && !strings.Contains(resp["message"].(string)+toString(resp["details"]), "server.allow_cidrs") {
			t.Errorf("refusal does not name server.allow_cidrs: %v", resp)
		}
	}
}

func toString(v any) string {
	m, _ := v.(map[string]any)
	var b strings.Builder
	for k, v := range m {
		b.WriteString(k + ": ")
		if s, ok := v.(string); ok {
			b.WriteString(s)
		}
		b.WriteString("\n")
	}
	return b.String()
}
