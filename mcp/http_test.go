package mcp

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// keyReads counts the gateway's reads of API keys from etcd.
type keyReads struct {
	*store.Store
	n atomic.Int64
}

func (s *keyReads) APIKeyByHash(ctx context.Context, hash string) (*mj.APIKey, error) {
	s.n.Add(1)
	return s.Store.APIKeyByHash(ctx, hash)
}

// mcpGateway is a gateway on real etcd that trusts loopback (the MCP host) as a
// proxy, with auth_failure_burst 5 and a clock that stands still until moved.
type mcpGateway struct {
	url   string
	reads *keyReads
	store *store.Store
	clock atomic.Pointer[time.Time]
}

func (g *mcpGateway) advance(d time.Duration) {
	t := g.clock.Load().Add(d)
	g.clock.Store(&t)
}

func (g *mcpGateway) key(t *testing.T, account string) string {
	t.Helper()
	ctx := context.Background()
	a, err := g.store.EnsureAccount(ctx, account, account)
	if err != nil {
		t.Fatal(err)
	}
	k := mj.NewAPIKeySecret()
	if _, err := g.store.AddAPIKey(ctx, a.ID, "k", k); err != nil {
		t.Fatal(err)
	}
	return k
}

func startMCPGateway(t *testing.T) *mcpGateway {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	cfg.Server.PublicURL = "http://127.0.0.1"
	cfg.Server.TrustedProxies = []string{"127.0.0.1"}
	cfg.Pools = []*config.Pool{{Name: "cpu"}}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	// About no token back while the test runs, even as the clock is moved.
	cfg.Server.AuthFailureRate, cfg.Server.AuthFailureBurst = 0.01, 5
	blobs, _ := blob.NewLocal(t.TempDir())
	g := &mcpGateway{reads: &keyReads{Store: s}, store: s}
	now := time.Now()
	g.clock.Store(&now)
	gw := &gateway.Gateway{Config: cfg, Store: g.reads, Blobs: blobs, Signer: blob.Signer{Secret: []byte("0123456789abcdef"), Base: "http://127.0.0.1"},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: func() time.Time { return *g.clock.Load() }}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := gw.App()
	go app.Listener(ln)
	t.Cleanup(func() { app.Shutdown() })
	g.url = "http://" + ln.Addr().String()
	return g
}

// gatewayClients is what `mediajobs mcp -http` gives as Clients (without
// -trusted-proxy): the gateway's client addresses and failure limits, at their
// defaults there.
func gatewayClients() Clients {
	return gwClients{&gateway.AuthFailures{Rate: 1, Burst: 20, GlobalRate: 100, GlobalBurst: 1000}}
}

type gwClients struct{ *gateway.AuthFailures }

func (gwClients) Addr(r *http.Request) netip.Addr {
	ap, _ := netip.ParseAddrPort(r.RemoteAddr)
	return gateway.ClientAddr(ap.Addr(), r.Header.Values("X-Forwarded-For"), nil)
}

// startMCP serves the HTTP server of o for the service at base on loopback and
// returns its endpoint.
func startMCP(t *testing.T, o Options, base string) string {
	t.Helper()
	o.BaseURL, o.Clients = base, gatewayClients()
	h, err := NewHTTP(o)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- h.Serve(ctx, ln) }()
	t.Cleanup(func() { cancel(); <-done })
	endpoint := "http://" + ln.Addr().String() + "/mcp"
	testenv.Eventually(t, 10*time.Second, "the MCP listener", func() bool {
		resp, err := http.Post(endpoint, "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusUnauthorized
	})
	return endpoint
}

// fromAddr is an HTTP client on loopback address local that sends key.
type fromAddr struct {
	key string
	rt  http.RoundTripper
}

func newFromAddr(local, key string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return &http.Client{Timeout: 30 * time.Second, Transport: fromAddr{key, &http.Transport{DialContext: d.DialContext}}}
}

func (f fromAddr) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+f.key)
	return f.rt.RoundTrip(r)
}

const mcpInit = `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`

// mcpPost posts body to endpoint with hc (in session, when not ""); it returns
// the status, the session id and the body.
func mcpPost(t *testing.T, hc *http.Client, endpoint, session, body string) (int, string, string) {
	t.Helper()
	req, _ := http.NewRequest("POST", endpoint, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Accept", "application/json, text/event-stream")
	if session != "" {
		req.Header.Set("Mcp-Session-Id", session)
		req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Mcp-Session-Id"), string(b)
}

func mcpConnect(t *testing.T, hc *http.Client, endpoint string) *sdk.ClientSession {
	t.Helper()
	s, err := sdk.NewClient(&sdk.Implementation{Name: "mediajobs-test", Version: "1"}, nil).
		Connect(context.Background(), &sdk.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// callTool calls a tool and returns its text and whether it is a tool error.
func callTool(t *testing.T, s *sdk.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &sdk.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*sdk.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// Junk bearer keys sent to `mcp -http` lock out no one but their sender
// (security review §3): the MCP server limits failures per client address and
// remembers bad keys before asking the gateway, and tells the gateway whose
// request it is (X-Forwarded-For), so the gateway's failure budget is the
// sender's and not the MCP host's. A user connected before the flood goes on
// once the gateway's key cache expires, and a user the gateway never saw
// connects.
func TestMCPJunkKeysLockNoOneOut(t *testing.T) {
	g := startMCPGateway(t)
	alice, bob := g.key(t, "mcp-alice"), g.key(t, "mcp-bob")
	endpoint := startMCP(t, Options{MaxSessions: 1000, MaxSessionsPerKey: 16}, g.url)

	sa := mcpConnect(t, newFromAddr("127.0.0.3", alice), endpoint)
	if text, isErr := callTool(t, sa, "list_jobs", map[string]any{"limit": 1}); isErr {
		t.Fatalf("alice before the flood: %s", text)
	}

	// 200 different junk keys, then one junk key 50 times, from one address.
	reads0 := g.reads.n.Load()
	codes := map[int]int{}
	for i := range 250 {
		key := fmt.Sprintf("mj_junk%06d", min(i, 200))
		code, _, _ := mcpPost(t, newFromAddr("127.0.0.2", key), endpoint, "", mcpInit)
		codes[code]++
	}
	if codes[401]+codes[429] != 250 || codes[429] == 0 {
		t.Fatalf("junk keys answered %v; want 401 or 429 only, some 429", codes)
	}
	// The gateway sees them as 127.0.0.2's: at most its burst of 5 reads.
	if reads := g.reads.n.Load() - reads0; reads > 5 {
		t.Fatalf("250 junk keys through the MCP server cost %d key reads; want at most 5", reads)
	}

	// The gateway's key cache expires (10 s): alice's session goes on.
	g.advance(11 * time.Second)
	if text, isErr := callTool(t, sa, "list_jobs", map[string]any{"limit": 1}); isErr {
		t.Fatalf("alice after the flood: %s", text)
	}
	// bob, whom neither has seen, connects from another address.
	sb := mcpConnect(t, newFromAddr("127.0.0.4", bob), endpoint)
	if text, isErr := callTool(t, sb, "list_jobs", map[string]any{"limit": 1}); isErr {
		t.Fatalf("bob after the flood: %s", text)
	}
}

// The sessions one key, and all keys, may hold open at once are bounded; an
// ended session frees its place.
func TestMCPSessionLimits(t *testing.T) {
	g := startMCPGateway(t)
	alice, bob := g.key(t, "mcp-alice"), g.key(t, "mcp-bob")
	endpoint := startMCP(t, Options{MaxSessionsPerKey: 2, MaxSessions: 3}, g.url)
	ha, hb := newFromAddr("127.0.0.3", alice), newFromAddr("127.0.0.4", bob)

	var sessions []string
	for i := range 2 {
		code, id, body := mcpPost(t, ha, endpoint, "", mcpInit)
		if code != 200 || id == "" {
			t.Fatalf("alice's session %d: HTTP %d %s", i+1, code, body)
		}
		sessions = append(sessions, id)
	}
	if code, _, body := mcpPost(t, ha, endpoint, "", mcpInit); code != 429 || !strings.Contains(body, "max-sessions-per-key") {
		t.Fatalf("alice's 3rd session: HTTP %d %s; want 429 naming -max-sessions-per-key", code, body)
	}
	if code, _, body := mcpPost(t, hb, endpoint, "", mcpInit); code != 200 {
		t.Fatalf("bob's session: HTTP %d %s", code, body)
	}
	if code, _, body := mcpPost(t, hb, endpoint, "", mcpInit); code != 429 || !strings.Contains(body, "-max-sessions)") {
		t.Fatalf("a 4th session in all: HTTP %d %s; want 429 naming -max-sessions", code, body)
	}
	// alice ends one: she may open another.
	req, _ := http.NewRequest("DELETE", endpoint, nil)
	req.Header.Set("Mcp-Session-Id", sessions[0])
	req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
	resp, err := ha.Do(req)
	if err != nil || resp.StatusCode != http.StatusNoContent {
		t.Fatalf("DELETE the session: %v %v", resp, err)
	}
	resp.Body.Close()
	if code, _, body := mcpPost(t, ha, endpoint, "", mcpInit); code != 200 {
		t.Fatalf("alice's session after ending one: HTTP %d %s", code, body)
	}
}
