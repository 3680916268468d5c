package netguard

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
)

// The control plane is refused whatever the allow lists say: its endpoints
// by address, by name and through the names that resolve to them, and the
// well-known ports (and those of local listeners) on every local address.
func TestControlPlaneIsRefusedWhateverTheListsSay(t *testing.T) {
	open := Policy{AllowLoopback: true, AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("0.0.0.0/0"), netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::/0")},
		Control: NewControlPlane([]string{"http://10.1.2.3:4646", "https://etcd.internal:2379", ":8080", "0.0.0.0:9091", "127.0.0.1:2479"})}
	r := fakeResolver{"nomad.example": {netip.MustParseAddr("10.1.2.3")}, "sneaky.example": {netip.MustParseAddr("127.0.0.1")}}
	ctx := context.Background()
	for _, u := range []string{
		"http://10.1.2.3:4646/v1/jobs",           // the configured Nomad address
		"http://nomad.example:4646/v1/jobs",      // a name that resolves to it
		"http://etcd.internal:2379/v3/kv/put",    // a configured name
		"http://127.0.0.1:4646/v1/jobs",          // a Nomad agent beside the process
		"http://127.0.0.5:4647/",                 // any loopback address, Nomad's RPC port
		"http://[::1]:8500/v1/kv/x",              // Consul's
		"http://localhost:8080/api/jobs",         // the gateway's listener (":8080")
		"http://sneaky.example:9091/metrics",     // a name resolving to the dispatcher's
		"http://0.0.0.0:2479/",                   // the embedded etcd
		"http://[::ffff:127.0.0.1]:4646/v1/jobs", // mapped
		"http://[64:ff9b::7f00:1]:4646/v1/jobs",  // NAT64 embedding 127.0.0.1
	} {
		if err := open.CheckURL(ctx, r, u); err == nil || !strings.Contains(err.Error(), "control plane") {
			t.Errorf("%s: %v", u, err)
		}
	}
	for _, u := range []string{"http://10.1.2.3:80/x", "http://127.0.0.1:9000/bucket/o", "http://nomad.example:8081/"} {
		if err := open.CheckURL(ctx, r, u); err != nil {
			t.Errorf("%s is not the control plane: %v", u, err)
		}
	}
	// A Policy with no Control still refuses the well-known ports here.
	if err := (Policy{AllowLoopback: true}).CheckURL(ctx, r, "http://127.0.0.1:4646/v1/jobs"); err == nil {
		t.Error("the zero control plane lets 127.0.0.1:4646 through")
	}
}

// At dial time too: a redirect or a name that resolves to the control plane
// after the check never connects.
func TestDialerRefusesTheControlPlane(t *testing.T) {
	var hits atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer srv.Close()
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(srv.URL, "http://"))
	p := Policy{AllowLoopback: true, Control: NewControlPlane([]string{"127.0.0.1:" + port})}
	redirector := httptest.NewServer(http.RedirectHandler(srv.URL+"/v1/jobs", http.StatusTemporaryRedirect))
	defer redirector.Close()
	c := &http.Client{Transport: p.Transport()}
	for _, u := range []string{srv.URL, "http://localhost:" + port, "http://127.0.0.9:" + port, redirector.URL} {
		resp, err := c.Get(u)
		if err == nil {
			resp.Body.Close()
			t.Errorf("%s: connected (HTTP %d)", u, resp.StatusCode)
		} else if !strings.Contains(err.Error(), "control plane") {
			t.Errorf("%s: %v", u, err)
		}
	}
	if hits.Load() != 0 {
		t.Fatalf("the control plane got %d requests", hits.Load())
	}
}

func TestSplitEndpoint(t *testing.T) {
	for in, want := range map[string]string{
		"http://Nomad.Internal:4646": "nomad.internal 4646", "https://api.example": "api.example 443",
		"http://[::1]:2379": "::1 2379", ":8080": " 8080", "127.0.0.1:2479": "127.0.0.1 2479",
	} {
		h, p, err := SplitEndpoint(in)
		if err != nil || h+" "+itoa(p) != want {
			t.Errorf("%s: %q %d %v", in, h, p, err)
		}
	}
	for _, in := range []string{"nomad.internal", "http://x:0", "a:b"} {
		if _, _, err := SplitEndpoint(in); err == nil {
			t.Errorf("%s: no error", in)
		}
	}
}

func itoa(p uint16) string {
	return netip.AddrPortFrom(netip.IPv4Unspecified(), p).String()[len("0.0.0.0:"):]
}

// Where allow_cidrs opens the cluster's network, another machine's Nomad or
// Consul agent stays refused: the well-known ports on any address that is not
// public.
func TestControlPortsRefusedOnEveryInternalAddress(t *testing.T) {
	p := Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("172.16.0.0/12")}}
	ctx := context.Background()
	for _, u := range []string{"http://10.0.0.7:4646/v1/jobs", "http://172.17.0.1:4646/v1/jobs", "http://10.2.3.4:8500/v1/kv/x"} {
		if err := p.CheckURL(ctx, fakeResolver{}, u); err == nil || !strings.Contains(err.Error(), "control plane") {
			t.Errorf("%s: %v", u, err)
		}
	}
	if err := p.CheckURL(ctx, fakeResolver{}, "http://10.0.0.7:9000/bucket/o"); err != nil {
		t.Errorf("a MinIO the list opens: %v", err)
	}
}

// A configured name that resolves to a public address (public_url behind a
// shared front end) refuses that name, not every site on the address; one
// that resolves inside refuses its address too.
func TestControlPlaneNamesOnSharedAddresses(t *testing.T) {
	defer func(f func(context.Context, string, string) ([]netip.Addr, error)) { lookupControl = f }(lookupControl)
	lookupControl = func(_ context.Context, _, host string) ([]netip.Addr, error) {
		switch host {
		case "api.example":
			return []netip.Addr{netip.MustParseAddr("93.184.216.34")}, nil
		case "nomad.internal":
			return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
		}
		return nil, errors.New("no such host")
	}
	p := Policy{AllowCIDRs: []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8")},
		Control: NewControlPlane([]string{"https://api.example", "http://nomad.internal:4000"})}
	r := fakeResolver{"other.example": {netip.MustParseAddr("93.184.216.34")}, "alias.internal": {netip.MustParseAddr("10.1.2.3")}}
	ctx := context.Background()
	if err := p.CheckURL(ctx, r, "https://other.example/in.mp4"); err != nil {
		t.Errorf("another site on public_url's front end: %v", err)
	}
	for _, u := range []string{"https://api.example/api/jobs", "http://alias.internal:4000/v1/jobs"} {
		if err := p.CheckURL(ctx, r, u); err == nil || !strings.Contains(err.Error(), "control plane") {
			t.Errorf("%s: %v", u, err)
		}
	}
}
