package config

import (
	"strings"
	"testing"
)

// TestCheckCatchesWhatServersRefuse: every mistake a server would trip over later
// is reported now, at its own file:line.
func TestCheckCatchesWhatServersRefuse(t *testing.T) {
	cases := []struct{ src, want string }{
		{"server {\n  listen = \"nonsense\"\n}\n", `c.hcl:2,3: Invalid listen`},
		{"server {\n  listen = \"127.0.0.1:99999\"\n}\n", `c.hcl:2,3: Invalid listen`},
		{"server {\n  listen = \"127.0.0.1:http\"\n}\n", `c.hcl:2,3: Invalid listen`},
		{"server {\n  listen = \"127.0.0.1:0\"\n}\n", `c.hcl:2,3: Invalid listen`},
		{"server {\n  listen = \"bad host!:8080\"\n}\n", `c.hcl:2,3: Invalid listen`},
		{"server {\n\n  rate_limit = -1\n}\n", `c.hcl:3,3: Invalid rate_limit`},
		{"server {\n  rate_burst = -5\n}\n", `c.hcl:2,3: Invalid rate_burst`},
		{"server {\n  max_body_bytes = 0\n}\n", `c.hcl:2,3: Invalid max_body_bytes`},
		{"server {\n  max_upload_bytes = -1\n}\n", `c.hcl:2,3: Invalid max_upload_bytes`},
		{"server {\n  allow_cidrs = [\n    \"10.1.0.0/16\",\n    \"10.1.2.3/16\",\n  ]\n}\n", `c.hcl:4,5: Invalid allow_cidrs`},
		{"server {\n  allow_cidrs = [\"minio.internal\"]\n}\n", `c.hcl:2,18: Invalid allow_cidrs`},
		{"server {\n  allow_cidrs = \"10.0.0.0/8\"\n}\n", `c.hcl:2,18: Unsuitable value type`},
		{"server {\n  allow_hosts = [\"minio.internal\",\n    \"http://minio.internal:9000\"]\n}\n", `c.hcl:3,5: Invalid allow_hosts`},
		{"server {\n  allow_hosts = [\"10.0.0.1\"]\n}\n", `c.hcl:2,18: Invalid allow_hosts`},
		{"etcd {\n  listen_client = \"2479\"\n}\n", `c.hcl:2,3: Invalid listen_client`},
		{"etcd {\n  embedded = false\n  endpoints = [\"etcd-1:2379:1\"]\n}\n", `c.hcl:3,3: Invalid endpoints`},
		{"webhooks {\n  concurrency = 0\n}\n", `c.hcl:2,3: Invalid concurrency`},
		{"webhooks {\n  account_concurrency = -1\n}\n", `c.hcl:2,3: Invalid account_concurrency`},
		{"webhooks {\n  concurrency = 8\n  account_concurrency = 9\n}\n", `c.hcl:3,3: Invalid account_concurrency`},
		{"storage {\n  url = \"gs://bucket\"\n}\n", `c.hcl:2,3: Invalid storage url`},
		{"storage {\n  url = \"ftp://host/dir\"\n}\n", `c.hcl:2,3: Invalid storage url`},
		{"storage {\n  path = \"\"\n}\n", `c.hcl:2,3: Missing storage`},
		{"pool \"cpu\" {\n  max_in_flight = -2\n}\n", `c.hcl:2,3: Invalid max_in_flight`},
		{"pool \"cpu\" {\n  max_in_flight = 0\n}\n", `c.hcl:2,3: Invalid max_in_flight`},
		{"pool \"cpu\" {\n  max_attempts = 0\n}\n", `c.hcl:2,3: Invalid max_attempts`},
		{"pool \"gpu\" {\n  gpu {\n    model = \"RTX (40\"\n  }\n}\n", `c.hcl:3,5: Invalid GPU model`},
		{"pool \"gpu\" {\n  gpu {\n    min_memory_mb = -1\n  }\n}\n", `c.hcl:3,5: Invalid min_memory_mb`},
		{"pool \"cpu\" {\n  constraint {\n    attribute = \"$${node.class}\"\n    operator  = \"regexp\"\n    value     = \"[a-\"\n  }\n}\n", `c.hcl:5,5: Invalid constraint`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.src), "c.hcl")
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q:\n got %v\nwant %s", c.src, err, c.want)
		}
	}
	// What is fine stays fine.
	ok := "server {\n  listen = \":8080\"\n  rate_limit = 0\n  allow_cidrs = [\"10.1.0.0/16\", \"fd12::/16\", \"192.168.7.9\"]\n  allow_hosts = [\"minio.internal\", \"*.svc.internal\"]\n}\n" +
		"etcd {\n  embedded = false\n  endpoints = [\"https://etcd-1.internal:2379\"]\n}\n" +
		"pool \"cpu\" {\n  max_in_flight = -1\n  constraint {\n    attribute = \"$${attr.kernel.name}\"\n    value = \"linux\"\n  }\n}\n"
	c, err := Parse([]byte(ok), "ok.hcl")
	if err != nil {
		t.Fatal(err)
	}
	g := c.Guard()
	if len(g.AllowCIDRs) != 3 || len(g.AllowHosts) != 2 || c.Pool("cpu").MaxInFlight != -1 || c.Pool("cpu").Constraints[0].Attribute != "${attr.kernel.name}" {
		t.Fatalf("guard %+v, pool %+v", g, c.Pool("cpu"))
	}
}

// TestNomadInterpolationHint: ${attr.x} is read by HCL itself; the error says to
// write $${attr.x}.
func TestNomadInterpolationHint(t *testing.T) {
	src := "pool \"cpu\" {\n  constraint {\n    attribute = \"${attr.kernel.name}\"\n    value     = \"linux\"\n  }\n}\n"
	_, err := Parse([]byte(src), "c.hcl")
	if err == nil || !strings.Contains(err.Error(), "c.hcl:3,20: Variables not allowed") || !strings.Contains(err.Error(), "write $${attr.kernel.name}") {
		t.Fatalf("got %v", err)
	}
}

// TestSigningSecretFor: gateway and dispatcher need a secret, dev makes its own;
// the problem points at the (empty) setting, the server block, or the file.
func TestSigningSecretFor(t *testing.T) {
	t.Setenv("MJ_UNSET_SECRET", "")
	for src, want := range map[string]string{
		"server {\n  listen = \"127.0.0.1:8080\"\n  signing_secret = env(\"MJ_UNSET_SECRET\")\n}\n": "c.hcl:3,3: Missing signing_secret",
		"\nserver {\n  listen = \"127.0.0.1:8080\"\n}\n":                                            "c.hcl:2,1: Missing signing_secret",
		"pool \"cpu\" {}\n": "c.hcl:1,1: Missing signing_secret",
	} {
		c, err := Parse([]byte(src), "c.hcl")
		if err != nil {
			t.Fatal(err)
		}
		for _, role := range []string{ForGateway, ForDispatcher} {
			if err := c.CheckFor(role); err == nil || !strings.Contains(err.Error(), want) {
				t.Errorf("%s, %q: got %v, want %s", role, src, err, want)
			}
		}
		if err := c.CheckFor(ForDev); err != nil {
			t.Errorf("dev: %v", err)
		}
	}
	c, _ := Parse([]byte("server { signing_secret = \"0123456789abcdef\" }"), "c.hcl")
	if err := c.CheckFor(ForGateway); err != nil {
		t.Fatal(err)
	}
	if err := c.CheckFor("runner"); err == nil {
		t.Fatal("unknown server accepted")
	}
}
