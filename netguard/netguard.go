// Package netguard refuses outbound connections to private, link-local and other
// internal addresses, so that user-supplied URLs (inputs, webhooks) cannot reach the
// service's own network. The check runs on the resolved address at dial time, so a
// DNS name that points inside is refused too.
package netguard

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"syscall"
	"time"

	"code.dny.dev/ssrf"
)

var (
	nat64     = netip.MustParsePrefix("64:ff9b::/96")
	sixToFour = netip.MustParsePrefix("2002::/16")
	v4compat  = netip.MustParsePrefix("::/96")
)

// embeddedIPv4 returns the IPv4 address that a well-known NAT64, 6to4 or
// IPv4-compatible IPv6 address carries: a translator or relay delivers packets to
// that IPv4 address, so it is the one to check.
func embeddedIPv4(a netip.Addr) (netip.Addr, bool) {
	b := a.As16()
	switch {
	case nat64.Contains(a), v4compat.Contains(a):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(a):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

// Policy says which otherwise refused destinations a deployment allows. Its zero
// value refuses every private, loopback, link-local, metadata and reserved address.
type Policy struct {
	// AllowLoopback allows loopback addresses (127.0.0.0/8, ::1): development only.
	AllowLoopback bool
	// AllowCIDRs allows the addresses they contain (server.allow_cidrs). A
	// loopback, link-local, "this host" or cloud metadata address is allowed only by
	// a range inside its own special range, one that names it explicitly: 10.0.0.0/8
	// or 0.0.0.0/0 never open 169.254.169.254.
	AllowCIDRs []netip.Prefix
	// AllowHosts are host names (exact, or "*.example.internal" for any name under
	// it) whose private addresses may be dialed (server.allow_hosts). They never open
	// loopback, link-local or metadata addresses.
	AllowHosts []string
	// Control is the service's own endpoints, refused whatever the lists above
	// say; nil refuses DefaultControlPorts on this host's addresses.
	Control *ControlPlane
}

// control is p.Control, or the defaults.
func (p Policy) control() *ControlPlane {
	if p.Control != nil {
		return p.Control
	}
	return NewControlPlane(nil)
}

// NewPolicy parses the configured allow lists (see ParseCIDR and CheckHost).
func NewPolicy(allowLoopback bool, cidrs, hosts []string) (Policy, error) {
	p := Policy{AllowLoopback: allowLoopback}
	for _, c := range cidrs {
		pr, err := ParseCIDR(c)
		if err != nil {
			return Policy{}, err
		}
		p.AllowCIDRs = append(p.AllowCIDRs, pr)
	}
	for _, h := range hosts {
		if err := CheckHost(h); err != nil {
			return Policy{}, err
		}
		p.AllowHosts = append(p.AllowHosts, strings.ToLower(strings.TrimSuffix(h, ".")))
	}
	return p, nil
}

// ParseCIDR parses an allow_cidrs entry: a range such as "10.1.0.0/16", or one
// address (a /32 or /128).
func ParseCIDR(s string) (netip.Prefix, error) {
	if !strings.Contains(s, "/") {
		a, err := netip.ParseAddr(s)
		if err != nil || a.Zone() != "" {
			return netip.Prefix{}, fmt.Errorf("%q is not an address range such as \"10.1.0.0/16\" or an address such as \"10.1.2.3\"", s)
		}
		a = a.Unmap()
		return netip.PrefixFrom(a, a.BitLen()), nil
	}
	p, err := netip.ParsePrefix(s)
	if err != nil {
		return netip.Prefix{}, fmt.Errorf("%q is not an address range such as \"10.1.0.0/16\" or \"fd12:3456::/48\"", s)
	}
	if p.Masked() != p {
		return netip.Prefix{}, fmt.Errorf("%q has address bits set past its /%d prefix; write %q", s, p.Bits(), p.Masked().String())
	}
	if p.Addr().Is4In6() && p.Bits() >= 96 {
		p = netip.PrefixFrom(p.Addr().Unmap(), p.Bits()-96)
	}
	return p, nil
}

// CheckHost says what is wrong with an allow_hosts entry: a DNS name, or
// "*.name" for every name under it.
func CheckHost(h string) error {
	name := strings.TrimSuffix(strings.TrimPrefix(h, "*."), ".")
	if _, err := netip.ParseAddr(strings.Trim(name, "[]")); err == nil {
		return fmt.Errorf("%q is an address: list addresses in allow_cidrs (as %q), host names here", h, name)
	}
	if strings.EqualFold(name, "localhost") || strings.HasSuffix(strings.ToLower(name), ".localhost") {
		return fmt.Errorf("%q is loopback: that takes allow_loopback (development only)", h)
	}
	if name == "" || len(name) > 253 {
		return fmt.Errorf("%q is not a host name", h)
	}
	for _, label := range strings.Split(name, ".") {
		ok := label != "" && len(label) <= 63 && label[0] != '-' && label[len(label)-1] != '-'
		for _, r := range label {
			ok = ok && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_')
		}
		if !ok {
			return fmt.Errorf("%q is not a host name such as \"minio.internal\" or \"*.svc.internal\" (no scheme, port or path)", h)
		}
	}
	return nil
}

// hostAllowed reports whether host (a name as dialed, not an address) is in
// AllowHosts.
func (p Policy) hostAllowed(host string) bool {
	if len(p.AllowHosts) == 0 || host == "" {
		return false
	}
	host = strings.ToLower(strings.TrimSuffix(host, "."))
	for _, h := range p.AllowHosts {
		if suffix, ok := strings.CutPrefix(h, "*"); ok {
			if strings.HasSuffix(host, suffix) && len(host) > len(suffix) {
				return true
			}
		} else if host == h {
			return true
		}
	}
	return false
}

// cidrAllows reports whether an AllowCIDRs range contains addr and, when addr lies
// in the special range special, is itself inside special (names it explicitly).
func (p Policy) cidrAllows(addr netip.Addr, special netip.Prefix) bool {
	for _, r := range p.AllowCIDRs {
		if !r.Contains(addr) {
			continue
		}
		if !special.IsValid() || (r.Bits() >= special.Bits() && special.Contains(r.Addr())) {
			return true
		}
	}
	return false
}

// The address kinds Check tells apart.
type kind int

const (
	public    kind = iota
	thisHost       // 0.0.0.0/8, ::: the local host
	loopback       // 127.0.0.0/8, ::1
	linkLocal      // 169.254.0.0/16, fe80::/10
	metadata       // cloud metadata services
	embedded       // an IPv6 form that carries an IPv4 address
	private        // RFC 1918, shared address space, unique local IPv6
	reserved       // every other IANA special-purpose range
)

// metadataAddrs are cloud metadata and host services, reachable from inside a
// cloud VM or container: AWS, GCP, Azure, OpenStack (169.254.169.254), AWS ECS
// task metadata (169.254.170.2), AWS over IPv6 (fd00:ec2::254), Alibaba
// (100.100.100.200), Oracle (192.0.0.192), Azure's wire server (168.63.129.16, a
// public address).
var metadataAddrs = []netip.Prefix{
	netip.MustParsePrefix("169.254.169.254/32"),
	netip.MustParsePrefix("169.254.170.2/32"),
	netip.MustParsePrefix("fd00:ec2::254/128"),
	netip.MustParsePrefix("100.100.100.200/32"),
	netip.MustParsePrefix("192.0.0.192/32"),
	netip.MustParsePrefix("168.63.129.16/32"),
}

var (
	special = []struct {
		p netip.Prefix
		k kind
	}{
		{netip.MustParsePrefix("0.0.0.0/8"), thisHost},
		{netip.MustParsePrefix("::/128"), thisHost},
		{netip.MustParsePrefix("127.0.0.0/8"), loopback},
		{netip.MustParsePrefix("::1/128"), loopback},
		{netip.MustParsePrefix("169.254.0.0/16"), linkLocal},
		{netip.MustParsePrefix("fe80::/10"), linkLocal},
	}
	privateRanges = []netip.Prefix{
		netip.MustParsePrefix("10.0.0.0/8"),
		netip.MustParsePrefix("172.16.0.0/12"),
		netip.MustParsePrefix("192.168.0.0/16"),
		netip.MustParsePrefix("100.64.0.0/10"),
		netip.MustParsePrefix("fc00::/7"),
	}
)

// classify says what kind of address a (unmapped, without zone) is, and the range
// that makes it so. The reserved ranges are IANA's special-purpose registries as
// code.dny.dev/ssrf generates them; for IPv6, everything outside global unicast
// (2000::/3) is reserved too.
func classify(a netip.Addr) (kind, netip.Prefix) {
	for _, m := range metadataAddrs {
		if m.Contains(a) {
			return metadata, m
		}
	}
	for _, s := range special {
		if s.p.Contains(a) {
			return s.k, s.p
		}
	}
	if _, ok := embeddedIPv4(a); ok {
		return embedded, netip.Prefix{}
	}
	for _, p := range privateRanges {
		if p.Contains(a) {
			return private, p
		}
	}
	if a.Is4() {
		for _, p := range ssrf.IPv4DeniedPrefixes {
			if p.Contains(a) {
				return reserved, p
			}
		}
		return public, netip.Prefix{}
	}
	if !ssrf.IPv6GlobalUnicast.Contains(a) {
		return reserved, netip.MustParsePrefix("::/0") // outside 2000::/3
	}
	for _, p := range ssrf.IPv6DeniedPrefixes {
		if p.Contains(a) {
			return reserved, p
		}
	}
	return public, netip.Prefix{}
}

// Check reports why addr may not be dialed under p, or nil.
func (p Policy) Check(addr netip.Addr) error { return p.check(addr, false) }

// check is Check; viaHost: the address was resolved from a name in AllowHosts,
// which opens private and reserved addresses (never loopback, link-local, this
// host or metadata).
func (p Policy) check(addr netip.Addr, viaHost bool) error {
	// A zone (fe80::1%eth0) names an interface of this host; and no prefix
	// contains a zoned address, so the ranges below would not see it.
	if addr.Zone() != "" {
		return fmt.Errorf("address %s names a network interface (IPv6 zone), which is not allowed", addr)
	}
	addr = addr.Unmap()
	k, rng := classify(addr)
	switch k {
	case public:
		return nil
	case embedded:
		v4, _ := embeddedIPv4(addr)
		// A range that allows the IPv6 form (64:ff9b::/96, ::/0) opens private
		// addresses behind it, never the special ones (loopback, link-local, this
		// host, metadata): those are checked on the embedded address always.
		if k4, _ := classify(v4); p.cidrAllows(addr, netip.Prefix{}) && (k4 == public || k4 == private || k4 == reserved) {
			return nil
		}
		if err := p.check(v4, viaHost); err != nil {
			return fmt.Errorf("address %s embeds %s: %w", addr, v4, err)
		}
		return nil
	case loopback:
		if p.AllowLoopback || p.cidrAllows(addr, rng) {
			return nil
		}
		return fmt.Errorf("address %s is loopback, which this server does not allow (server.allow_loopback, for development)", addr)
	case thisHost:
		if p.cidrAllows(addr, rng) {
			return nil
		}
		return fmt.Errorf("address %s means this host (%s), which is not allowed", addr, rng)
	case linkLocal:
		if p.cidrAllows(addr, rng) {
			return nil
		}
		return fmt.Errorf("address %s is link-local (%s), which is not allowed; only a range of server.allow_cidrs inside %s allows it", addr, rng, rng)
	case metadata:
		if p.cidrAllows(addr, rng) {
			return nil
		}
		within := ""
		for _, s := range special {
			if s.p.Contains(addr) {
				within = fmt.Sprintf(" (in %s)", s.p)
			}
		}
		for _, r := range privateRanges {
			if r.Contains(addr) {
				within = fmt.Sprintf(" (in %s)", r)
			}
		}
		return fmt.Errorf("address %s is a cloud metadata service%s, which is not allowed; only %q in server.allow_cidrs allows it", addr, within, rng.String())
	case private:
		if viaHost || p.cidrAllows(addr, netip.Prefix{}) {
			return nil
		}
		return fmt.Errorf("address %s is a private address (%s); allow it with server.allow_cidrs, or its host name with server.allow_hosts", addr, rng)
	default:
		if viaHost || p.cidrAllows(addr, netip.Prefix{}) {
			return nil
		}
		if rng.Bits() == 0 {
			return fmt.Errorf("address %s is outside IPv6 global unicast (2000::/3), which is not allowed; allow it with server.allow_cidrs", addr)
		}
		return fmt.Errorf("address %s is in the reserved range %s; allow it with server.allow_cidrs", addr, rng)
	}
}

// Check reports why addr may not be dialed, or nil: Policy{AllowLoopback:
// allowLoopback}.Check.
func Check(addr netip.Addr, allowLoopback bool) error {
	return Policy{AllowLoopback: allowLoopback}.Check(addr)
}

// ErrRefused is what a dial the policy refuses fails with (errors.Is): the
// address will be refused however often it is tried, so clients do not retry.
var ErrRefused = errors.New("refused by the address policy")

// refusedError is a policy's refusal: its own text, and ErrRefused to errors.Is.
type refusedError struct{ err error }

func (r refusedError) Error() string        { return r.err.Error() }
func (r refusedError) Unwrap() error        { return r.err }
func (r refusedError) Is(target error) bool { return target == ErrRefused }

func refused(err error) error {
	if err == nil {
		return nil
	}
	return refusedError{err}
}

// dialer refuses addresses p refuses, after DNS resolution; viaHost as in check.
func (p Policy) dialer(viaHost bool) *net.Dialer {
	return &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return refused(fmt.Errorf("refusing to dial %s: %v", address, err))
			}
			if err := p.control().refuses(ap); err != nil {
				return refused(err)
			}
			return refused(p.check(ap.Addr(), viaHost))
		},
	}
}

// DialContext dials address (host:port) if p allows every address it connects to;
// a host name in AllowHosts may reach private addresses.
func (p Policy) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return nil, refused(fmt.Errorf("refusing to dial %s: %v", address, err))
	}
	if n, err := strconv.ParseUint(port, 10, 16); err == nil {
		if err := p.control().refusesName(host, uint16(n)); err != nil {
			return nil, refused(err)
		}
	}
	return p.dialer(p.hostAllowed(host)).DialContext(ctx, network, address)
}

// Transport is an http.Transport whose connections pass p's checks. Proxies from
// the environment are ignored: they would bypass the check.
func (p Policy) Transport() *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = p.DialContext
	return t
}

// Transport is Policy{AllowLoopback: allowLoopback}.Transport().
func Transport(allowLoopback bool) *http.Transport {
	return Policy{AllowLoopback: allowLoopback}.Transport()
}

// Resolver looks up a host's addresses; *net.Resolver has it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL refuses an http(s) URL whose host is, or resolves to, an address p
// refuses, or that names the control plane. A host that does not resolve
// passes: it cannot be reached either, and the send- or fetch-time dialer
// checks again whatever it resolves to then.
func (p Policy) CheckURL(ctx context.Context, r Resolver, raw string) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	host := u.Hostname()
	_, port, err := SplitEndpoint(raw)
	if err != nil {
		return err
	}
	cp := p.control()
	if err := cp.refusesName(host, port); err != nil {
		return err
	}
	checkAddr := func(a netip.Addr, viaHost bool) error {
		if err := cp.refuses(netip.AddrPortFrom(a, port)); err != nil {
			return err
		}
		return p.check(a, viaHost)
	}
	if addr, err := netip.ParseAddr(host); err == nil {
		return checkAddr(addr, false)
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return checkAddr(netip.MustParseAddr("127.0.0.1"), false)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	viaHost := p.hostAllowed(host)
	for _, a := range addrs {
		if err := checkAddr(a, viaHost); err != nil {
			return fmt.Errorf("%s resolves to a refused address: %w", host, err)
		}
	}
	return nil
}

// CheckURL is Policy{AllowLoopback: allowLoopback}.CheckURL.
func CheckURL(ctx context.Context, r Resolver, raw string, allowLoopback bool) error {
	return Policy{AllowLoopback: allowLoopback}.CheckURL(ctx, r, raw)
}
