package netguard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"testing"
)

func TestCheck(t *testing.T) {
	for addr, ok := range map[string]bool{
		"10.1.2.3": false, "172.16.0.1": false, "192.168.1.1": false, "169.254.169.254": false,
		"100.64.0.1": false, "fe80::1": false, "fd00::1": false, "::ffff:10.0.0.1": false, "0.0.0.0": false,
		"127.0.0.1": false, "::1": false, "8.8.8.8": true, "2001:4860:4860::8888": true, "::": false,
		// IPv6 forms that carry an IPv4 address: judged by that address.
		"64:ff9b::a9fe:a9fe": false, "64:ff9b::7f00:1": false, "64:ff9b::808:808": true,
		"64:ff9b:1::a00:1": false, "64:ff9b:1:ffff::c0a8:101": false, "64:ff9b:1::808:808": false, // local-use NAT64: the site's own network
		"2002:a9fe:a9fe::": false, "2002:7f00:1::1": false, "2002:c0a8:101:1::1": false, "2002:808:808::1": true,
		"::10.0.0.1": false, "::169.254.169.254": false, "::127.0.0.1": false, "::8.8.8.8": true,
		"2001:0:4136:e378:8000:63bf:3fff:fdd2": false, "::ffff:0:a00:1": false, "100::1": false, "2001:db8::1": false, // Teredo, IPv4-translated, discard, documentation
	} {
		if err := Check(netip.MustParseAddr(addr), false); (err == nil) != ok {
			t.Errorf("Check(%s) = %v, want allowed=%v", addr, err, ok)
		}
	}
	if Check(netip.MustParseAddr("127.0.0.1"), true) != nil || Check(netip.MustParseAddr("10.0.0.1"), true) == nil {
		t.Error("allowLoopback must allow loopback and nothing else")
	}
	for _, a := range []string{"::1", "64:ff9b::7f00:1", "2002:7f00:1::", "::127.0.0.1"} {
		if err := Check(netip.MustParseAddr(a), true); err != nil {
			t.Errorf("Check(%s, allowLoopback) = %v", a, err)
		}
	}
	if Check(netip.MustParseAddr("::"), true) == nil || Check(netip.MustParseAddr("64:ff9b::a00:1"), true) == nil {
		t.Error("allowLoopback allowed :: or an embedded private address")
	}
}

func TestTransportRefusesLoopbackUnlessAllowed(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer srv.Close()
	_, err := (&http.Client{Transport: Transport(false)}).Get(srv.URL)
	if err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("loopback dial: %v, want refusal", err)
	}
	resp, err := (&http.Client{Transport: Transport(true)}).Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
}

// TestZonedAddressesAreRefused: netip.Prefix.Contains is false for any address
// with a zone, so fe80::1%eth0 once passed every range. Refused as an address, as
// a URL at create time, and at dial time (nothing listens there: the dial is
// refused before any packet, and the error says why).
func TestZonedAddressesAreRefused(t *testing.T) {
	for _, a := range []string{"fe80::1%eth0", "fd00::1%lo", "::1%lo", "2001:4860:4860::8888%eth0", "ff02::1%eth0"} {
		if err := Check(netip.MustParseAddr(a), true); err == nil || !strings.Contains(err.Error(), "zone") {
			t.Errorf("Check(%s) = %v, want a refusal naming the zone", a, err)
		}
	}
	for _, u := range []string{"http://[fe80::1%25eth0]/x", "http://[fd00::1%25lo]:8080/x", "https://[::1%25lo]/"} {
		if err := CheckURL(context.Background(), net.DefaultResolver, u, true); err == nil {
			t.Errorf("CheckURL(%s) allowed a zoned address", u)
		}
	}
	c := &http.Client{Transport: Transport(true)}
	_, err := c.Get("http://[fe80::1%25lo]:9/")
	if err == nil || !strings.Contains(err.Error(), "zone") {
		t.Errorf("dial of a zoned address: %v, want refused by the guard", err)
	}
}

func mustPolicy(t *testing.T, loopback bool, cidrs, hosts []string) Policy {
	t.Helper()
	p, err := NewPolicy(loopback, cidrs, hosts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestAllowCIDRs decides addresses without connecting anywhere: listed private
// ranges open, loopback, link-local, "this host" and metadata addresses only when a
// range names them explicitly.
func TestAllowCIDRs(t *testing.T) {
	p := mustPolicy(t, false, []string{"10.1.0.0/16", "fd12:3456::/48", "169.254.7.0/24", "100.100.100.200", "0.0.0.0/0", "::/0"}, nil)
	for addr, ok := range map[string]bool{
		"10.1.2.3": true, "::ffff:10.1.2.3": true, "64:ff9b::a01:203": true, "fd12:3456::1": true, "169.254.7.7": true,
		"100.100.100.200": true, "8.8.8.8": true,
		"10.2.0.1": true, "192.168.1.1": true, // 0.0.0.0/0 opens every private address...
		// ...but never the special ones a broad range does not name.
		"127.0.0.1": false, "::1": false, "0.0.0.0": false, "::": false, "169.254.169.254": false, "169.254.1.1": false,
		"fe80::1": false, "fd00:ec2::254": false, "168.63.129.16": false, "192.0.0.192": false,
		// ::/0 allows the NAT64 form, but not of a special address behind it.
		"64:ff9b::a9fe:a9fe": false, "64:ff9b::7f00:1": false, "64:ff9b::c0a8:101": true,
	} {
		if err := p.Check(netip.MustParseAddr(addr)); (err == nil) != ok {
			t.Errorf("Check(%s) = %v, want allowed=%v", addr, err, ok)
		}
	}
	narrow := mustPolicy(t, false, []string{"10.1.0.0/16", "fc00::/7", "100.64.0.0/10", "169.254.0.0/16"}, nil)
	for addr, ok := range map[string]bool{
		"10.1.9.9": true, "10.2.0.1": false, "fd00::1": true, "fd00:ec2::254": false, "100.64.0.1": true,
		"100.100.100.200": false, "169.254.1.1": true, "169.254.169.254": false, "169.254.170.2": false,
	} {
		if err := narrow.Check(netip.MustParseAddr(addr)); (err == nil) != ok {
			t.Errorf("narrow Check(%s) = %v, want allowed=%v", addr, err, ok)
		}
	}
	err := narrow.Check(netip.MustParseAddr("192.168.1.1"))
	if err == nil || !strings.Contains(err.Error(), "is a private address") || !strings.Contains(err.Error(), "allow it with server.allow_cidrs") {
		t.Errorf("refusal %v does not name the setting", err)
	}
	if err := narrow.Check(netip.MustParseAddr("169.254.169.254")); err == nil || !strings.Contains(err.Error(), `"169.254.169.254/32" in server.allow_cidrs`) {
		t.Errorf("metadata refusal: %v", err)
	}
	if err := (Policy{}).Check(netip.MustParseAddr("127.0.0.1")); err == nil || !strings.Contains(err.Error(), "allow_loopback") {
		t.Errorf("loopback refusal: %v", err)
	}
}

func TestParseAllowLists(t *testing.T) {
	for in, want := range map[string]string{"10.1.0.0/16": "10.1.0.0/16", "10.1.2.3": "10.1.2.3/32", "fd00::1": "fd00::1/128", "::ffff:10.0.0.0/104": "10.0.0.0/8"} {
		if p, err := ParseCIDR(in); err != nil || p.String() != want {
			t.Errorf("ParseCIDR(%q) = %v, %v; want %s", in, p, err, want)
		}
	}
	for in, msg := range map[string]string{"10.1.2.3/16": `write "10.1.0.0/16"`, "minio.internal": "not an address range", "10.0.0.0/33": "not an address range", "fe80::1%eth0": "not an address"} {
		if _, err := ParseCIDR(in); err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("ParseCIDR(%q) = %v, want %q", in, err, msg)
		}
	}
	for _, ok := range []string{"minio.internal", "*.svc.cluster.local", "MinIO.Internal.", "s3_store"} {
		if err := CheckHost(ok); err != nil {
			t.Errorf("CheckHost(%q) = %v", ok, err)
		}
	}
	for _, bad := range []string{"", "10.1.2.3", "http://minio.internal", "minio.internal:9000", "localhost", "a..b", "-a.b", "minio.internal/x"} {
		if err := CheckHost(bad); err == nil {
			t.Errorf("CheckHost(%q) accepted", bad)
		}
	}
}

type fakeResolver map[string][]netip.Addr

func (f fakeResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := f[host]; ok {
		return a, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// TestAllowHosts: a listed name may resolve to private addresses, never to
// loopback, link-local or metadata ones.
func TestAllowHosts(t *testing.T) {
	r := fakeResolver{
		"minio.internal": {netip.MustParseAddr("10.1.2.3")}, "a.svc.internal": {netip.MustParseAddr("fd00::5")},
		"svc.internal": {netip.MustParseAddr("10.9.9.9")}, "evil.internal": {netip.MustParseAddr("169.254.169.254")},
		"lo.internal": {netip.MustParseAddr("127.0.0.1")}, "other.example": {netip.MustParseAddr("192.168.0.1")},
	}
	p := mustPolicy(t, false, nil, []string{"minio.internal", "*.svc.internal", "evil.internal", "lo.internal"})
	ctx := context.Background()
	for u, ok := range map[string]bool{
		"http://minio.internal:9000/b/k": true, "https://MINIO.internal./x": true, "http://a.svc.internal/x": true,
		"http://svc.internal/x": false, "http://evil.internal/x": false, "http://lo.internal/x": false,
		"http://other.example/x": false, "http://10.1.2.3/x": false,
	} {
		if err := p.CheckURL(ctx, r, u); (err == nil) != ok {
			t.Errorf("CheckURL(%s) = %v, want allowed=%v", u, err, ok)
		}
	}
	if err := (Policy{}).CheckURL(ctx, r, "http://minio.internal/x"); err == nil || !strings.Contains(err.Error(), "server.allow_hosts") {
		t.Errorf("refusal without allow_hosts: %v", err)
	}
}

// TestAllowedLoopbackAlias dials for real, on loopback only: with allow_loopback
// off, 127.0.0.2 is treated as an internal range listed in allow_cidrs and
// reached, while 127.0.0.3, unlisted, is refused before any packet.
func TestAllowedLoopbackAlias(t *testing.T) {
	listen := func(addr string) *httptest.Server {
		ln, err := net.Listen("tcp", addr+":0")
		if err != nil {
			t.Skipf("cannot listen on %s: %v", addr, err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("ok")) }))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		return srv
	}
	listed, unlisted := listen("127.0.0.2"), listen("127.0.0.3")
	p := mustPolicy(t, false, []string{"127.0.0.2/32"}, nil)
	c := &http.Client{Transport: p.Transport()}
	resp, err := c.Get(listed.URL)
	if err != nil {
		t.Fatalf("allowlisted 127.0.0.2: %v", err)
	}
	resp.Body.Close()
	if _, err := c.Get(unlisted.URL); err == nil || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("unlisted 127.0.0.3: %v, want refused", err)
	}
	if err := p.CheckURL(context.Background(), net.DefaultResolver, unlisted.URL); err == nil {
		t.Fatal("CheckURL allowed the unlisted alias")
	}
	if err := p.CheckURL(context.Background(), net.DefaultResolver, listed.URL); err != nil {
		t.Fatalf("CheckURL refused the listed alias: %v", err)
	}
	// A listed host name never opens loopback.
	hostOnly := Policy{AllowHosts: []string{"localhost"}}
	port := listed.Listener.Addr().(*net.TCPAddr).Port
	if _, err := (&http.Client{Transport: hostOnly.Transport()}).Get("http://localhost:" + strconv.Itoa(port)); err == nil {
		t.Fatal("allow_hosts opened loopback")
	}
}

// A dial the policy refuses says so to errors.Is (ErrRefused), through
// net/http's wrapping, so that clients do not retry it; its text is the
// policy's own.
func TestRefusedDialIsErrRefused(t *testing.T) {
	c := &http.Client{Transport: Policy{}.Transport()}
	_, err := c.Get("http://127.0.0.1:1/x") // nothing is dialed
	if !errors.Is(err, ErrRefused) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("a refused dial: %v (ErrRefused %v)", err, errors.Is(err, ErrRefused))
	}
	allowed := &http.Client{Transport: Policy{AllowLoopback: true}.Transport()}
	if _, err := allowed.Get("http://127.0.0.1:1/x"); err == nil || errors.Is(err, ErrRefused) {
		t.Fatalf("a dial the policy allows, refused by the host: %v", err)
	}
}
