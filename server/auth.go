package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/mediajobs/mediajobs/workload"
)

// WarmAuth admits the warm runners of the config's warm pools (docs/warm.md):
// their workload identities are checked against the keys Nomad publishes, and
// their allocations with Nomad's API. Nil when no pool is warm.
func WarmAuth(cfg *config.Config) (*gateway.WarmAuth, error) {
	warm := false
	for _, p := range cfg.Pools {
		warm = warm || p.Warm != nil
	}
	if !warm {
		return nil, nil
	}
	v, client, err := identityVerifier(cfg)
	if err != nil {
		return nil, err
	}
	// The keys fetched there decide which identities are good: over plain http to
	// another machine, anyone on the path could swap them (config check refuses
	// the same in nomad.address; this also covers NOMAD_ADDR).
	if addr := client.Address(); config.PlainRemote(addr) && !cfg.Server.AllowInsecureWarm {
		return nil, fmt.Errorf("nomad address %q is plain http to another machine: the gateway would fetch the keys that check warm runners' identities in clear, and anyone on the path could forge identities; use Nomad's https address, or set server.allow_insecure_warm = true if the network is trusted", addr)
	}
	return &gateway.WarmAuth{Verifier: v, Allocs: nomadAllocs{client.Allocations()}}, nil
}

// identityVerifier checks Nomad workload identities (audience "mediajobs")
// against the keys Nomad publishes: warm runners', and those of per-job runners
// asking for their job's output_destinations (UploaderAuth). Nomad's own TLS
// settings (a private CA, client certificates) apply to the fetch.
func identityVerifier(cfg *config.Config) (*workload.Verifier, *api.Client, error) {
	client, _, hc, err := nomadClientsHTTP(cfg)
	if err != nil {
		return nil, nil, err
	}
	addr := client.Address()
	if !strings.HasPrefix(addr, "http://") && !strings.HasPrefix(addr, "https://") {
		return nil, nil, fmt.Errorf("nomad address %q: workload identities are checked with Nomad's HTTP API", addr)
	}
	return &workload.Verifier{JWKSURL: strings.TrimSuffix(addr, "/") + "/.well-known/jwks.json", Audience: "mediajobs", HTTP: hc}, client, nil
}

// UploaderAuth hands output_destinations only to the allocation running the job
// (gateway.Gateway.Uploaders): its identity, checked with Nomad's keys, and its
// job, read from Nomad.
func UploaderAuth(cfg *config.Config) (*gateway.UploaderAuth, string, error) {
	v, client, err := identityVerifier(cfg)
	if err != nil {
		return nil, "", err
	}
	return &gateway.UploaderAuth{Verifier: v, Allocs: nomadAllocs{client.Allocations()}}, client.Address(), nil
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

// AllocJob says which Nomad job allocation id belongs to (for a dispatched
// child, the child), and its client status; "" when Nomad knows no such
// allocation.
func (n nomadAllocs) AllocJob(ctx context.Context, id string) (string, string, error) {
	q := (&api.QueryOptions{}).WithContext(ctx)
	a, _, err := n.a.Info(id, q)
	var unexpected api.UnexpectedResponseError
	if errors.As(err, &unexpected) && unexpected.StatusCode() == http.StatusNotFound {
		return "", "", nil
	}
	if err != nil {
		return "", "", err
	}
	return a.JobID, a.ClientStatus, nil
}
