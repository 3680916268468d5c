// Package netguard refuses outbound connections to private, link-local and other
// internal addresses, so that user-supplied URLs (inputs, webhooks) cannot reach the
// service's own network. The check runs on the resolved address at dial time, so a
// DNS name that points inside is refused too.
package netguard

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strings"
	"syscall"
	"time"
)

var blocked = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),
	netip.MustParsePrefix("10.0.0.0/8"),
	netip.MustParsePrefix("100.64.0.0/10"),
	netip.MustParsePrefix("169.254.0.0/16"),
	netip.MustParsePrefix("172.16.0.0/12"),
	netip.MustParsePrefix("192.0.0.0/24"),
	netip.MustParsePrefix("192.168.0.0/16"),
	netip.MustParsePrefix("198.18.0.0/15"),
	netip.MustParsePrefix("224.0.0.0/4"),
	netip.MustParsePrefix("240.0.0.0/4"),
	netip.MustParsePrefix("fc00::/7"),
	netip.MustParsePrefix("fe80::/10"),
	netip.MustParsePrefix("ff00::/8"),
	netip.MustParsePrefix("::/128"),
	// Local-use NAT64 (RFC 8215): translates into a site's own IPv4 network.
	netip.MustParsePrefix("64:ff9b:1::/48"),
	// Teredo and IPv4-translated addresses tunnel to IPv4 hosts; discard-only and
	// documentation ranges are never a real receiver.
	netip.MustParsePrefix("2001::/32"),
	netip.MustParsePrefix("::ffff:0:0:0/96"),
	netip.MustParsePrefix("100::/64"),
	netip.MustParsePrefix("2001:db8::/32"),
}

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

// Check reports why addr may not be dialed, or nil.
func Check(addr netip.Addr, allowLoopback bool) error {
	// A zone (fe80::1%eth0) names an interface of this host; and no prefix
	// contains a zoned address, so the ranges below would not see it.
	if addr.Zone() != "" {
		return fmt.Errorf("address %s names a network interface (IPv6 zone), which is not allowed", addr)
	}
	addr = addr.Unmap()
	if addr.IsLoopback() {
		if allowLoopback {
			return nil
		}
		return fmt.Errorf("address %s is loopback, which this server does not allow", addr)
	}
	// :: and ::1 (above) are in ::/96 too but keep their own meaning.
	if v4, ok := embeddedIPv4(addr); ok && !addr.IsUnspecified() {
		if err := Check(v4, allowLoopback); err != nil {
			return fmt.Errorf("address %s embeds %s: %w", addr, v4, err)
		}
		return nil
	}
	for _, p := range blocked {
		if p.Contains(addr) {
			return fmt.Errorf("address %s is in the private or reserved range %s", addr, p)
		}
	}
	return nil
}

// Dialer returns a dialer that refuses blocked addresses after DNS resolution.
func Dialer(allowLoopback bool) *net.Dialer {
	return &net.Dialer{
		Timeout:   30 * time.Second,
		KeepAlive: 30 * time.Second,
		Control: func(_, address string, _ syscall.RawConn) error {
			ap, err := netip.ParseAddrPort(address)
			if err != nil {
				return fmt.Errorf("refusing to dial %s: %v", address, err)
			}
			return Check(ap.Addr(), allowLoopback)
		},
	}
}

// Transport is an http.Transport whose connections pass Check. Proxies from the
// environment are ignored: they would bypass the check.
func Transport(allowLoopback bool) *http.Transport {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.Proxy = nil
	t.DialContext = Dialer(allowLoopback).DialContext
	return t
}

// Resolver looks up a host's addresses; *net.Resolver has it.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// CheckURL refuses an http(s) URL whose host is, or resolves to, an address Check
// refuses. A host that does not resolve passes: it cannot be reached either, and the
// send- or fetch-time dialer checks again whatever it resolves to then.
func CheckURL(ctx context.Context, r Resolver, raw string, allowLoopback bool) error {
	u, err := url.Parse(raw)
	if err != nil {
		return err
	}
	host := u.Hostname()
	if addr, err := netip.ParseAddr(host); err == nil {
		return Check(addr, allowLoopback)
	}
	if strings.EqualFold(host, "localhost") || strings.HasSuffix(strings.ToLower(host), ".localhost") {
		return Check(netip.MustParseAddr("127.0.0.1"), allowLoopback)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	addrs, err := r.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil
	}
	for _, a := range addrs {
		if err := Check(a, allowLoopback); err != nil {
			return fmt.Errorf("%s resolves to a refused address: %w", host, err)
		}
	}
	return nil
}
