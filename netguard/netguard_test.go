package netguard

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
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
