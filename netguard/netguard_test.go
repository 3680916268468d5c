package netguard

import (
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
