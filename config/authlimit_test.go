package config

import (
	"strings"
	"testing"
	"time"
)

// The failed-authentication limit, trusted proxies and header timeout: defaults
// for a Config built in code, and entries that are not addresses refused.
func TestAuthLimitSettings(t *testing.T) {
	c := Default()
	c.Server.AuthFailureRate, c.Server.AuthFailureBurst, c.Server.HeaderTimeout = 0, 0, "" // unset
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	if s := c.Server; s.AuthFailureRate != 1 || s.AuthFailureBurst != 20 || s.HeaderTimeoutD != 10*time.Second {
		t.Fatalf("defaults: rate %g burst %d header_timeout %s", s.AuthFailureRate, s.AuthFailureBurst, s.HeaderTimeoutD)
	}
	c = Default()
	c.Server.TrustedProxies = []string{"10.0.0.0/8", "192.0.2.1", "proxy.internal"}
	err := c.Finish()
	if err == nil || !strings.Contains(err.Error(), `"proxy.internal"`) {
		t.Fatalf("a host name among trusted_proxies: %v", err)
	}
	for in, want := range map[string]string{"10.1.2.3/8": "10.0.0.0/8", "192.0.2.1": "192.0.2.1/32", "::ffff:192.0.2.1": "192.0.2.1/32", "2001:db8::/32": "2001:db8::/32"} {
		if p, err := ParseProxy(in); err != nil || p.String() != want {
			t.Fatalf("ParseProxy(%q) = %s, %v; want %s", in, p, err, want)
		}
	}
}

// The four auth_failure settings share one table (server.go): each pair's
// defaults, and each message word for word, as before the table.
func TestAuthLimitMessages(t *testing.T) {
	c := Default()
	c.Server.AuthFailureGlobalRate, c.Server.AuthFailureGlobalBurst = 0, 0 // unset
	if err := c.Finish(); err != nil {
		t.Fatal(err)
	}
	if s := c.Server; s.AuthFailureGlobalRate != 100 || s.AuthFailureGlobalBurst != 1000 {
		t.Fatalf("global defaults: rate %g burst %d", s.AuthFailureGlobalRate, s.AuthFailureGlobalBurst)
	}
	src := "server {\n  auth_failure_rate = -0.5\n  auth_failure_burst = -1\n  auth_failure_global_rate = -2\n  auth_failure_global_burst = -3\n}\n"
	_, err := Parse([]byte(src), "a.hcl")
	if err == nil {
		t.Fatal("negative auth_failure settings accepted")
	}
	for _, want := range []string{
		"a.hcl:2,3: Invalid auth_failure_rate; auth_failure_rate = -0.5: use failed authentications per second per client address above 0 (default 1), or 0 for no limit.",
		"a.hcl:3,3: Invalid auth_failure_burst; auth_failure_burst = -1: use the failed authentications a client address may make at once (default 20).",
		"a.hcl:4,3: Invalid auth_failure_global_rate; auth_failure_global_rate = -2: use failed authentications per second from all client addresses together above 0 (default 100), or 0 for no global limit.",
		"a.hcl:5,3: Invalid auth_failure_global_burst; auth_failure_global_burst = -3: use the failed authentications all client addresses together may make at once (default 1000).",
	} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("missing %q in\n%v", want, err)
		}
	}
}
