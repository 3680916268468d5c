package config

import (
	"strings"
	"testing"
)

// A pool without a sandbox is allowed, with a warning that says what it trusts;
// sandboxed pools warn of nothing.
func TestUnsandboxedPoolWarns(t *testing.T) {
	c, err := Parse([]byte("pool \"open\" {\n  sandbox = \"none\"\n}\npool \"cpu\" {}\npool \"d\" {\n  driver = \"docker\"\n  image = \"w:1\"\n}\n"), "s.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if !c.Pool("open").Unsandboxed() || c.Pool("cpu").Unsandboxed() || c.Pool("d").Unsandboxed() {
		t.Fatal("Unsandboxed: only the raw_exec pool with sandbox = \"none\"")
	}
	w := c.Warnings()
	if len(w) != 1 || !strings.Contains(w[0], `pool "open"`) || !strings.Contains(w[0], "every API key that may use the pool is trusted with its nodes") {
		t.Fatalf("warnings: %q", w)
	}
	if c, _ := Parse([]byte("pool \"cpu\" {}\n"), "s.hcl"); len(c.Warnings()) != 0 {
		t.Fatalf("a sandboxed pool warns: %q", c.Warnings())
	}
}

// A warm pool's identity tokens and Nomad's signing keys never cross the network
// in plain http, unless the operator says the network is trusted.
func TestWarmPoolRefusesPlainHTTP(t *testing.T) {
	warm := "pool \"cpu\" {\n  warm {}\n}\n"
	for _, c := range []struct{ src, want string }{
		{"server {\n  public_url = \"http://10.0.0.5:8080\"\n}\n" + warm, `s.hcl:2,3: Insecure warm pool; pool "cpu": its warm runners send their identity token to public_url = "http://10.0.0.5:8080" over plain http`},
		{"server {\n  public_url = \"http://media.example.com\"\n}\n" + warm, `s.hcl:2,3: Insecure warm pool`},
		{"nomad {\n  address = \"http://nomad.internal:4646\"\n}\n" + warm, `s.hcl:2,3: Insecure warm pool; pool "cpu": the gateway checks its warm runners' identities with the keys Nomad publishes`},
		// public_url derived from a listen address on all interfaces of another host.
		{"server {\n  listen = \"10.0.0.5:8080\"\n}\n" + warm, `s.hcl:5,3: Insecure warm pool`},
	} {
		_, err := Parse([]byte(c.src), "s.hcl")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), "allow_insecure_warm") {
			t.Errorf("%q:\n got %v\nwant %s (and the opt-out)", c.src, err, c.want)
		}
		// The opt-out, and no warm pool at all.
		optOut := strings.Replace(c.src, "server {\n", "server {\n  allow_insecure_warm = true\n", 1)
		if !strings.Contains(optOut, "allow_insecure_warm") {
			optOut = "server {\n  allow_insecure_warm = true\n}\n" + c.src
		}
		if _, err := Parse([]byte(optOut), "s.hcl"); err != nil {
			t.Errorf("%q: %v", optOut, err)
		}
		if _, err := Parse([]byte(strings.Replace(c.src, "  warm {}\n", "", 1)), "s.hcl"); err != nil {
			t.Errorf("without a warm pool: %v", err)
		}
	}
	for _, ok := range []string{
		warm, // public_url from listen 127.0.0.1:8080
		"server {\n  public_url = \"https://media.example.com\"\n}\nnomad {\n  address = \"https://nomad.internal:4646\"\n}\n" + warm,
		"server {\n  public_url = \"http://localhost:8080\"\n}\nnomad {\n  address = \"http://127.0.0.1:4646\"\n}\n" + warm,
		"server {\n  listen = \":8080\"\n  public_url = \"http://[::1]:8080\"\n}\n" + warm,
	} {
		if _, err := Parse([]byte(ok), "ok.hcl"); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
}
