package netguard

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"
)

// DefaultControlPorts are the well-known ports of what a worker or a gateway
// may run beside: Nomad (HTTP, RPC, Serf), etcd (client, peer), Consul (server
// RPC, Serf, HTTP, HTTPS, gRPC, DNS) and Vault. They are refused on this host's
// own addresses (loopback, the unspecified address, its interfaces) and on
// every address that is not public, whatever the allow lists say: a Nomad
// client agent's API is what every worker has beside it, and a PUT to it
// registers a job that runs as root.
var DefaultControlPorts = []uint16{2379, 2380, 4646, 4647, 4648, 8200, 8201, 8300, 8301, 8302, 8500, 8501, 8502, 8503, 8600}

// ControlPlane is the service's own endpoints (Nomad, etcd, Consul, the
// gateway's and dispatcher's listeners): no URL a user names may reach them,
// whatever the allow lists say (docs/threat-model.md). Build it with
// NewControlPlane; a Policy without one refuses DefaultControlPorts alone.
type ControlPlane struct {
	entries []string

	mu        sync.Mutex
	current   *endpoints // nil until first use
	loaded    time.Time
	resolving bool // a refresh is under way: the others use current
}

// endpoints is one reading of the entries, never changed once built.
type endpoints struct {
	// addrs are the endpoints' addresses (names resolved); names the host
	// names as written ("nomad.internal:4646"), compared with what a URL
	// names before it is resolved.
	addrs map[netip.AddrPort]bool
	names map[string]bool
	// ports are refused on this host's own addresses: the defaults and the
	// port of every endpoint that listens on a local or unspecified address.
	ports map[uint16]bool
}

var (
	cpMu    sync.Mutex
	cpCache = map[string]*ControlPlane{}
)

// NewControlPlane is the control plane of entries: "host:port" pairs or URLs
// ("http://127.0.0.1:4646", "127.0.0.1:2379", ":8080"). A listener on a
// loopback or unspecified address (":8080", "0.0.0.0:8080") refuses its port on
// every local address. Entries that parse as neither are ignored (config check
// names them). The same entries give the same *ControlPlane, so a name is
// resolved once a minute per process, not per request.
func NewControlPlane(entries []string) *ControlPlane {
	key := strings.Join(entries, "\n")
	cpMu.Lock()
	defer cpMu.Unlock()
	if c, ok := cpCache[key]; ok {
		return c
	}
	c := &ControlPlane{entries: slices.Clone(entries)}
	cpCache[key] = c
	return c
}

// SplitEndpoint is an entry's host (lower-case, without brackets) and port;
// a URL without a port takes its scheme's (http 80, https 443).
func SplitEndpoint(e string) (host string, port uint16, err error) {
	e = strings.TrimSpace(e)
	hp := e
	if strings.Contains(e, "://") {
		u, err := url.Parse(e)
		if err != nil {
			return "", 0, fmt.Errorf("%q is not a URL or host:port", e)
		}
		hp = u.Host
		if u.Port() == "" {
			switch u.Scheme {
			case "https":
				hp = net.JoinHostPort(u.Hostname(), "443")
			default:
				hp = net.JoinHostPort(u.Hostname(), "80")
			}
		}
	}
	h, p, err := net.SplitHostPort(hp)
	if err != nil {
		return "", 0, fmt.Errorf("%q is not host:port (such as \"consul.internal:8500\")", e)
	}
	n, err := strconv.ParseUint(p, 10, 16)
	if err != nil || n == 0 {
		return "", 0, fmt.Errorf("%q has no valid port", e)
	}
	return strings.ToLower(strings.TrimSuffix(h, ".")), uint16(n), nil
}

// lookupControl resolves the control plane's names (tests swap it).
var lookupControl = net.DefaultResolver.LookupNetIP

// reresolve is how long the addresses of names are kept: endpoints move.
const reresolve = time.Minute

// read is the entries' current reading. Names are resolved again each
// reresolve, outside the lock: one caller refreshes while the others go on
// with the last reading; only the first use waits for one.
func (c *ControlPlane) read() *endpoints {
	c.mu.Lock()
	cur := c.current
	refresh := cur == nil || time.Since(c.loaded) >= reresolve && !c.resolving
	if refresh && cur != nil {
		c.resolving = true
	}
	c.mu.Unlock()
	if !refresh {
		return cur
	}
	e := c.build()
	c.mu.Lock()
	c.current, c.loaded, c.resolving = e, time.Now(), false
	c.mu.Unlock()
	return e
}

// build reads the entries, resolving their names.
func (c *ControlPlane) build() *endpoints {
	e := &endpoints{addrs: map[netip.AddrPort]bool{}, names: map[string]bool{}, ports: map[uint16]bool{}}
	for _, p := range DefaultControlPorts {
		e.ports[p] = true
	}
	for _, entry := range c.entries {
		host, port, err := SplitEndpoint(entry)
		if err != nil {
			continue
		}
		if host == "" || host == "localhost" {
			e.ports[port] = true
			continue
		}
		if a, err := netip.ParseAddr(host); err == nil {
			a = a.Unmap()
			if a.IsLoopback() || a.IsUnspecified() {
				e.ports[port] = true
			}
			e.addrs[netip.AddrPortFrom(a, port)] = true
			continue
		}
		e.names[net.JoinHostPort(host, strconv.Itoa(int(port)))] = true
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		as, err := lookupControl(ctx, "ip", host)
		cancel()
		if err != nil {
			continue // it cannot be reached by that name either; the name itself is refused
		}
		for _, a := range as {
			a = a.Unmap()
			if a.IsLoopback() || a.IsUnspecified() {
				e.ports[port] = true
			}
			// A public address of a name (public_url behind a shared
			// front end) may serve other sites too: that name alone is
			// refused, not everything else on its address.
			if k, _ := classify(a); k != public {
				e.addrs[netip.AddrPortFrom(a, port)] = true
			}
		}
	}
	return e
}

// localAddrs are this host's interface addresses, read once: the control
// plane's ports on them are the agents beside this process.
var localAddrs = sync.OnceValue(func() map[netip.Addr]bool {
	m := map[netip.Addr]bool{}
	as, _ := net.InterfaceAddrs()
	for _, a := range as {
		if p, err := netip.ParsePrefix(a.String()); err == nil {
			m[p.Addr().Unmap().WithZone("")] = true
		}
	}
	return m
})

// isLocal: a is this host (loopback, unspecified, one of its interfaces).
func isLocal(a netip.Addr) bool {
	return a.IsLoopback() || a.IsUnspecified() || localAddrs()[a.WithZone("")]
}

// refusesName reports whether hostport (as a URL names it) is an endpoint
// written by name.
func (c *ControlPlane) refusesName(host string, port uint16) error {
	e := c.read()
	hp := net.JoinHostPort(strings.ToLower(strings.TrimSuffix(host, ".")), strconv.Itoa(int(port)))
	if e.names[hp] {
		return refusal(hp)
	}
	return nil
}

// refuses reports why ap is the control plane, or nil: a configured endpoint;
// a listener's port on this host; or a well-known control-plane port on any
// address that is not public (another worker's Nomad agent, reachable where
// allow_cidrs opens the cluster's network). An address that embeds an IPv4
// one (NAT64, 6to4) is checked as that too.
func (c *ControlPlane) refuses(ap netip.AddrPort) error {
	a, port := ap.Addr().Unmap().WithZone(""), ap.Port()
	candidates := []netip.Addr{a}
	if v4, ok := embeddedIPv4(a); ok {
		candidates = append(candidates, v4)
	}
	e := c.read()
	for _, a := range candidates {
		k, _ := classify(a)
		if e.addrs[netip.AddrPortFrom(a, port)] || isLocal(a) && e.ports[port] || k != public && slices.Contains(DefaultControlPorts, port) {
			return refusal(netip.AddrPortFrom(a, port).String())
		}
	}
	return nil
}

func refusal(what string) error {
	return fmt.Errorf("%s is the service's own control plane (Nomad, etcd, Consul or a mediajobs listener), which a job's URLs may never reach", what)
}
