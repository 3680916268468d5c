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
