package config

import (
	"strings"
	"testing"
)

// server.metrics_listen and dispatcher.listen: off by default, host:port when set,
// and metrics_listen is not the public listen address.
func TestMetricsAndDispatcherListen(t *testing.T) {
	c, err := Parse([]byte(`
server {
  metrics_listen = "127.0.0.1:9090"
}
dispatcher {
  listen = ":9091"
}
`), "ok.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.MetricsListen != "127.0.0.1:9090" || c.Dispatcher.Listen != ":9091" {
		t.Fatalf("decoded %q %q", c.Server.MetricsListen, c.Dispatcher.Listen)
	}
	if d := Default(); d.Server.MetricsListen != "" || d.Dispatcher.Listen != "" {
		t.Fatalf("defaults %q %q, want both off", d.Server.MetricsListen, d.Dispatcher.Listen)
	}
	for _, c := range []struct{ hcl, want string }{
		{"server {\n  metrics_listen = \"9090\"\n}\n", "bad.hcl:2,3: Invalid metrics_listen"},
		{"server {\n  listen = \"127.0.0.1:8080\"\n  metrics_listen = \"127.0.0.1:8080\"\n}\n", "bad.hcl:3,3: Invalid metrics_listen"},
		{"dispatcher {\n  listen = \"127.0.0.1:0\"\n}\n", "bad.hcl:2,3: Invalid listen"},
		{"dispatcher {\n  listen = \"nohost:x\"\n}\n", "bad.hcl:2,3: Invalid listen"},
	} {
		_, err := Parse([]byte(c.hcl), "bad.hcl")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.hcl, err, c.want)
		}
	}
}
