package server

import (
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/config"
)

// A Nomad address config check never saw (NOMAD_ADDR) is checked as the gateway
// builds its warm runners' verifier: plain http to another machine admits no
// warm runner unless server.allow_insecure_warm. Nothing is dialled here.
func TestWarmAuthRefusesPlainHTTPNomad(t *testing.T) {
	cfg := config.Default()
	cfg.Pools = []*config.Pool{{Name: "cpu", Warm: &config.Warm{}}}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	cfg.Nomad.Address = "http://nomad.example.internal:4646" // as from NOMAD_ADDR
	if _, err := WarmAuth(cfg); err == nil || !strings.Contains(err.Error(), "plain http") || !strings.Contains(err.Error(), "allow_insecure_warm") {
		t.Fatalf("WarmAuth over plain http: %v", err)
	}
	for _, addr := range []string{"https://nomad.example.internal:4646", "http://127.0.0.1:4646"} {
		cfg.Nomad.Address = addr
		if a, err := WarmAuth(cfg); err != nil || a == nil {
			t.Fatalf("WarmAuth with %s: %v", addr, err)
		}
	}
	cfg.Nomad.Address, cfg.Server.AllowInsecureWarm = "http://nomad.example.internal:4646", true
	if a, err := WarmAuth(cfg); err != nil || a == nil {
		t.Fatalf("WarmAuth with the opt-out: %v", err)
	}
}
