package main

import (
	"context"
	"fmt"
	"strings"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/mediajobs/mediajobs/workload"
)

// warmAuth admits the warm runners of the config's warm pools (docs/warm.md):
// their workload identities are checked against the keys Nomad publishes, and
// their allocations with Nomad's API. Nil when no pool is warm.
func warmAuth(cfg *config.Config) (*gateway.WarmAuth, error) {
	warm := false
	for _, p := range cfg.Pools {
		warm = warm || p.Warm != nil
	}
	if !warm {
		return nil, nil
	}
	client, _, hc, err := nomadClientsHTTP(cfg)
	if err != nil {
		return nil, err
	}
	addr := client.Address()
	if !strings.HasPrefix(addr, "http://") && !strings.HasPrefix(addr, "https://") {
		return nil, fmt.Errorf("nomad address %q: warm runners need Nomad's HTTP API to check their identities", addr)
	}
	return &gateway.WarmAuth{
		// Nomad's own TLS settings (a private CA, client certificates) apply.
		Verifier: &workload.Verifier{JWKSURL: strings.TrimSuffix(addr, "/") + "/.well-known/jwks.json", Audience: "mediajobs", HTTP: hc},
		Allocs:   nomadAllocs{client.Allocations()},
	}, nil
}

// nomadAllocs reads allocations from Nomad's API.
type nomadAllocs struct{ a *api.Allocations }

func (n nomadAllocs) AllocStatus(ctx context.Context, id string) (string, string, error) {
	q := (&api.QueryOptions{}).WithContext(ctx)
	a, _, err := n.a.Info(id, q)
	if err != nil {
		return "", "", err
	}
	return a.ClientStatus, a.DesiredStatus, nil
}
