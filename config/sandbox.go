package config

import (
	"fmt"
	"net/netip"
	"net/url"
	"strings"

	"github.com/hashicorp/hcl/v2"
)

// Unsandboxed tells whether the pool runs ffmpeg without a sandbox (raw_exec with
// sandbox = "none"): the command checker then applies its strict rules
// (command.Spec.Unsandboxed), and every API key that may use the pool is trusted
// with its nodes.
func (p *Pool) Unsandboxed() bool { return p.Driver == "raw_exec" && p.Sandbox == "none" }

// Warnings lists what is allowed but risky in the configuration: `mediajobs
// config check` prints them, and the servers log them as they start.
func (c *Config) Warnings() []string {
	var out []string
	for _, p := range c.Pools {
		if p.Unsandboxed() {
			out = append(out, fmt.Sprintf("pool %q: sandbox = \"none\" runs ffmpeg without a sandbox: every API key that may use the pool is trusted with its nodes. "+
				"The checker refuses the forms that open files it cannot see (-safe 0 lists, playlists), but a crafted input can still make ffmpeg read any file the runner can, "+
				"on a node shared with warm runners their identity tokens too. Use it only where every key holder is trusted, on nodes of its own (node_pool), or use sandbox = \"bwrap\".", p.Name))
		}
	}
	return out
}

// plainRemote tells whether raw is a plain http:// URL to a host other than this
// machine (a loopback address, localhost, or no host: the listener's own).
func plainRemote(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil || !strings.EqualFold(u.Scheme, "http") {
		return false
	}
	return !localHost(u.Hostname())
}

// PlainRemote is plainRemote for callers outside the package: the gateway refuses
// to fetch Nomad's signing keys (JWKS) over plain http from another machine unless
// server.allow_insecure_warm is set.
func PlainRemote(raw string) bool { return plainRemote(raw) }

func localHost(h string) bool {
	if h == "" || strings.EqualFold(h, "localhost") || strings.HasSuffix(strings.ToLower(h), ".localhost") {
		return true
	}
	a, err := netip.ParseAddr(h)
	return err == nil && (a.IsLoopback() || a.IsUnspecified())
}

// checkWarmTransport refuses warm pool p when its runners' identity tokens or the
// keys that check them would cross the network in clear: public_url (where the
// runners send their token) or nomad.address (where the gateway fetches Nomad's
// signing keys) plain http:// to another machine, unless
// server.allow_insecure_warm. A Nomad address from NOMAD_ADDR is checked as the
// gateway starts (cmd/mediajobs/warm.go).
func (c *Config) checkWarmTransport(p *Pool, ck *checker) {
	s := c.Server
	if s.AllowInsecureWarm {
		return
	}
	at := func(rng hcl.Range) hcl.Range {
		if rng.Filename == "" {
			return p.Warm.DefRange
		}
		return rng
	}
	if plainRemote(s.PublicURL) {
		ck.bad(at(s.PublicURLRange), "Insecure warm pool", fmt.Sprintf("pool %q: its warm runners send their identity token to public_url = %q over plain http, where anyone on the network could take it and lease other accounts' jobs. "+
			"Serve the gateway over https (or on loopback), or set server.allow_insecure_warm = true if the network is trusted.", p.Name, s.PublicURL))
	}
	if c.Nomad != nil && plainRemote(c.Nomad.Address) {
		ck.bad(at(c.Nomad.AddrRange), "Insecure warm pool", fmt.Sprintf("pool %q: the gateway checks its warm runners' identities with the keys Nomad publishes, and nomad.address = %q is plain http, where anyone on the path could swap the keys and forge identities. "+
			"Use Nomad's https address (its tls settings apply), or set server.allow_insecure_warm = true if the network is trusted.", p.Name, c.Nomad.Address))
	}
}
