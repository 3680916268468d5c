package config

import (
	"os"
	"strings"
	"testing"
	"time"
)

func TestParseExample(t *testing.T) {
	c, err := Load("../deploy/mediajobs.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cpu := c.Pool("cpu")
	if cpu == nil || cpu.Driver != "docker" || cpu.Image != "mediajobs-worker:local" || cpu.MaxTimeoutD != 6*time.Hour {
		t.Fatalf("cpu pool = %+v", cpu)
	}
	if c.Pool("nvidia") == nil || c.Pool("nvidia").GPUs() != 1 {
		t.Fatalf("nvidia pool = %+v", c.Pool("nvidia"))
	}
	if c.Server.WaitLimitD != 25*time.Second || c.Storage.TTL != 24*time.Hour {
		t.Fatalf("server %+v storage %+v", c.Server, c.Storage)
	}
	// The shipped config keeps /metrics off the public listener.
	if c.Server.MetricsListen == "" || c.Server.MetricsListen == c.Server.Listen {
		t.Fatalf("deploy/mediajobs.hcl serves /metrics on the public listener (metrics_listen %q, listen %q)", c.Server.MetricsListen, c.Server.Listen)
	}
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte(""), "empty.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.Listen != "127.0.0.1:8080" || c.Server.PublicURL != "http://127.0.0.1:8080" || !c.Etcd.Embedded {
		t.Fatalf("defaults: %+v %+v", c.Server, c.Etcd)
	}
	if c.Server.SessionTTLD != 12*time.Hour {
		t.Fatalf("session_ttl default: %v", c.Server.SessionTTLD)
	}
	if p := c.Pool("cpu"); p == nil || p.Driver != "raw_exec" || p.DefaultTimeoutD != time.Hour || p.Sandbox != "bwrap" {
		t.Fatalf("default pool: %+v", p)
	}
}

func TestEnvFunction(t *testing.T) {
	os.Setenv("MJ_TEST_SECRET", "0123456789abcdef0123")
	c, err := Parse([]byte(`server { signing_secret = env("MJ_TEST_SECRET") }`), "x.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if c.Server.SigningSecret != "0123456789abcdef0123" {
		t.Fatalf("secret = %q", c.Server.SigningSecret)
	}
}

func TestErrorsPointAtFileAndLine(t *testing.T) {
	cases := []struct{ src, want string }{
		{"server {\n  wait_limit = \"soon\"\n}\n", `bad.hcl:2,3: Invalid duration`},
		{"server {\n  session_ttl = \"10s\"\n}\n", `bad.hcl:2,3: Invalid session_ttl`},
		{"server {\n  session_ttl = \"forever\"\n}\n", `bad.hcl:2,3: Invalid duration`},
		{"pool \"cpu\" {\n  driver = \"podman\"\n}\n", `bad.hcl:2,3: Unsupported driver`},
		{"pool \"cpu\" {}\npool \"cpu\" {}\n", `bad.hcl:2,1: Duplicate pool`},
		{"pool \"cpu\" {\n  cpu = 10\n}\n", `bad.hcl:2,3: Invalid cpu`},
		{"server {\n  listen = 8080\n  bogus = 1\n}\n", `bad.hcl:3,3: Unsupported argument`},
		{"storage {\n  type = \"s4\"\n}\n", `bad.hcl:2,3: Unsupported storage type`},
		{"server {\n", `bad.hcl:1,8: Unclosed configuration block`},
		{"pool \"cpu\" {\n default_timeout = \"2h\"\n max_timeout = \"1h\"\n}\n", `bad.hcl:2,2: Invalid default_timeout`},
		{"pool \"cpu\" {\n  driver = \"docker\"\n}\n", `bad.hcl:1,1: Missing image`},
		{"pool \"gpu\" {\n  gpu {\n    vendor = \"amd\"\n  }\n}\n", `bad.hcl:3,5: Unsupported GPU vendor`},
		{"pool \"gpu\" {\n  gpu {\n    count = 40\n  }\n}\n", `bad.hcl:3,5: Invalid GPU count`},
		{"pool \"cpu\" {\n  constraint {\n    attribute = \"$${node.class}\"\n    operator = \"~\"\n  }\n}\n", `bad.hcl:2,3: Invalid constraint`},
		// Nomad's ${...} must be escaped as $${...} in this file.
		{"pool \"cpu\" {\n  constraint {\n    attribute = \"${node.class}\"\n  }\n}\n", `bad.hcl:3,20: Variables not allowed`},
		{"pool \"cpu\" {\n  disk = 10\n}\n", `bad.hcl:2,3: Invalid disk`},
		// Unsandboxed only when said so, and only where it means something.
		{"pool \"cpu\" {\n  sandbox = \"off\"\n}\n", `bad.hcl:2,3: Invalid sandbox`},
		{"pool \"cpu\" {\n  sandbox = \"\"\n}\n", ``},
		{"pool \"d\" {\n  driver = \"docker\"\n  image = \"x\"\n  sandbox = \"bwrap\"\n}\n", `bad.hcl:4,3: Invalid sandbox`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.src), "bad.hcl")
		if c.want == "" {
			if err != nil {
				t.Errorf("Parse(%q) = %v, want no error", c.src, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want %q", c.src, err, c.want)
		}
	}
	// Every problem is reported, not just the first.
	_, err := Parse([]byte("server {\n wait_limit = \"x\"\n request_timeout = \"y\"\n}\n"), "bad.hcl")
	if err == nil || !strings.Contains(err.Error(), "bad.hcl:2") || !strings.Contains(err.Error(), "bad.hcl:3") {
		t.Errorf("want both problems, got %v", err)
	}
}
