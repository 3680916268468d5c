package main

import (
	"net/http/httptest"
	"net/netip"
	"testing"
	"time"
)

// `mcp -http` finds a client as the gateway does, through -trusted-proxy
// proxies only, and gives each client address its own 20 failed keys.
func TestMCPClientsAsTheGateway(t *testing.T) {
	c := newMCPClients([]netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")})
	r := httptest.NewRequest("POST", "/mcp", nil)
	r.RemoteAddr = "127.0.0.1:4000"
	r.Header.Set("X-Forwarded-For", "203.0.113.7")
	if a := c.Addr(r); a != netip.MustParseAddr("203.0.113.7") {
		t.Fatalf("through a trusted proxy: %v, want 203.0.113.7", a)
	}
	r.RemoteAddr = "127.0.0.2:4000"
	if a := c.Addr(r); a != netip.MustParseAddr("127.0.0.2") {
		t.Fatalf("from an untrusted address that sends X-Forwarded-For: %v, want 127.0.0.2", a)
	}

	now := time.Now()
	junk, other := netip.MustParseAddr("203.0.113.7"), netip.MustParseAddr("203.0.113.8")
	for i := range 20 {
		if ok, _ := c.Take(junk, now); !ok {
			t.Fatalf("failure %d refused; want 20 allowed", i+1)
		}
	}
	if ok, wait := c.Take(junk, now); ok || wait <= 0 {
		t.Fatalf("the 21st failure: ok=%v wait=%v; want refused with a wait", ok, wait)
	}
	if ok, _ := c.Take(other, now); !ok {
		t.Fatal("another address was refused")
	}
	c.Refund(junk)
	if ok, _ := c.Take(junk, now); !ok {
		t.Fatal("a refunded token was not given back")
	}
}
