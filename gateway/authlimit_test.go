package gateway

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
)

// countingStore counts the etcd reads that authentication makes.
type countingStore struct {
	*store.Store
	keyReads, sessionReads atomic.Int64
}

func (s *countingStore) APIKeyByHash(ctx context.Context, hash string) (*mj.APIKey, error) {
	s.keyReads.Add(1)
	return s.Store.APIKeyByHash(ctx, hash)
}

func (s *countingStore) Session(ctx context.Context, id string) (*store.Session, error) {
	s.sessionReads.Add(1)
	return s.Store.Session(ctx, id)
}

// etcdRanges is etcd's own count of range (read) requests served
// (etcd_mvcc_range_total): the embedded server runs in this process.
func etcdRanges(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "etcd_mvcc_range_total" {
			return mf.GetMetric()[0].GetCounter().GetValue()
		}
	}
	t.Fatal("etcd_mvcc_range_total is not among the registered metrics")
	return 0
}

// limitAuthFailures turns the per-address failure limit on (the harness turns it
// off) with the defaults, on a clock that stands still: no token comes back.
func limitAuthFailures(h *harness) *countingStore {
	h.gw.Config.Server.AuthFailureRate, h.gw.Config.Server.AuthFailureBurst = 1, 20
	t0 := time.Now()
	h.gw.Now = func() time.Time { return t0 }
	cs := &countingStore{Store: h.store}
	h.gw.Store = cs
	return cs
}

// 10,000 different invalid keys from one address cost at most the burst of etcd
// reads; a key this gateway knows to be good still gets in meanwhile.
func TestInvalidKeyFloodCostsBoundedReads(t *testing.T) {
	h := newHarness(t)
	cs := limitAuthFailures(h)
	if s, _, _ := h.do("GET", "/api/jobs", "alice", nil); s != 200 {
		t.Fatalf("alice before the flood: %d", s)
	}
	base := etcdRanges(t)
	reads0 := cs.keyReads.Load()
	var unauthorized, limited int
	for i := range 10_000 {
		h.keys["junk"] = fmt.Sprintf("mj_junk%06d", i)
		s, body, hdr := h.do("GET", "/api/jobs", "junk", nil)
		switch s {
		case 401:
			unauthorized++
		case 429:
			limited++
			if i == 9_999 && (hdr.Get("Retry-After") == "" || body["errorCode"] != mj.ETooManyRequests) {
				t.Fatalf("429 without Retry-After or errorCode: %v %v", hdr, body)
			}
		default:
			t.Fatalf("junk key %d: HTTP %d %v", i, s, body)
		}
	}
	reads := cs.keyReads.Load() - reads0
	if reads > 20 || unauthorized != 20 || limited != 10_000-20 {
		t.Fatalf("10,000 junk keys: %d key reads, %d answered 401, %d answered 429; want at most 20 reads, 20 and 9,980", reads, unauthorized, limited)
	}
	if d := etcdRanges(t) - base; d > 30 {
		t.Fatalf("etcd served %g range requests during the flood; want about 20", d)
	}
	// alice's key is cached as good: not slowed by her address's failures.
	if s, _, _ := h.do("GET", "/api/jobs", "alice", nil); s != 200 {
		t.Fatalf("a known-good key during the flood: %d", s)
	}
}

// A key just found bad is answered from memory; one created since works once the
// short memory (badCredTTL) has passed, or at once when created on this gateway.
func TestBadKeyRemembered(t *testing.T) {
	h := newHarness(t)
	now := time.Now()
	h.gw.Now = func() time.Time { return now }
	cs := &countingStore{Store: h.store}
	h.gw.Store = cs
	secret := mj.NewAPIKeySecret()
	h.keys["later"] = secret
	for range 5 {
		if s, _, _ := h.do("GET", "/api/jobs", "later", nil); s != 401 {
			t.Fatalf("unknown key: %d", s)
		}
	}
	if n := cs.keyReads.Load(); n != 1 {
		t.Fatalf("a bad key tried 5 times read etcd %d times; want 1", n)
	}
	// Created elsewhere (the admin CLI, another gateway): good once the memory ends.
	if _, err := h.store.AddAPIKey(context.Background(), "alice", "later", secret); err != nil {
		t.Fatal(err)
	}
	if s, _, _ := h.do("GET", "/api/jobs", "later", nil); s != 401 {
		t.Fatalf("within badCredTTL of the failure: %d, want the remembered 401", s)
	}
	now = now.Add(badCredTTL)
	if s, _, _ := h.do("GET", "/api/jobs", "later", nil); s != 200 {
		t.Fatalf("a key created after it was found bad, badCredTTL later: %d", s)
	}

	// Created here: forgotten at once, and a lookup that raced the creation stores
	// nothing.
	var b badCreds
	b.put("h", now, b.generation())
	b.forget("h")
	if b.bad("h", now) {
		t.Fatal("forget left the key remembered as bad")
	}
	gen := b.generation()
	b.forget("h") // the key is created while the lookup reads etcd
	b.put("h", now, gen)
	if b.bad("h", now) {
		t.Fatal("a lookup that raced the key's creation remembered it as bad")
	}
	for i := range maxBadCreds + 100 {
		b.put(fmt.Sprint(i), now, b.generation())
	}
	if n := b.len(); n != maxBadCreds {
		t.Fatalf("remembered %d bad keys; want the bound %d", n, maxBadCreds)
	}
}

// Junk session cookies are limited like junk keys, and remembered as bad.
func TestJunkSessionCookies(t *testing.T) {
	h := newHarness(t)
	cs := limitAuthFailures(h)
	for range 10 { // each a failure, within the burst of 20
		s, _, _ := h.do("GET", "/api/jobs", "", nil, "Cookie", sessionCookie+"=junk")
		if s != 401 {
			t.Fatalf("a junk cookie: %d", s)
		}
	}
	if n := cs.sessionReads.Load(); n != 1 {
		t.Fatalf("one junk cookie 10 times read etcd %d times; want 1", n)
	}
	var limited int
	for i := range 500 {
		s, _, _ := h.do("GET", "/dashboard/session", "", nil, "Cookie", fmt.Sprintf("%s=junk%d", sessionCookie, i))
		if s == 429 {
			limited++
		} else if s != 401 {
			t.Fatalf("junk cookie %d: %d", i, s)
		}
	}
	if n := cs.sessionReads.Load(); n > 20 || limited < 500-20 {
		t.Fatalf("500 different junk cookies: %d session reads, %d limited", n, limited)
	}
}

// clientFrom is an HTTP client whose connections come from the loopback address
// local (any of 127/8 works on loopback).
func clientFrom(local string) *http.Client {
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(local)}}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: d.DialContext}}
}

func signInFrom(t *testing.T, c *http.Client, base, key string) int {
	t.Helper()
	resp, err := c.Post(base+"/dashboard/session", "application/json", strings.NewReader(`{"api_key":"`+key+`"}`))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode
}

// 1,000 junk sign-ins from one address do not stop a sign-in from another.
func TestJunkSignInsDoNotLockOthersOut(t *testing.T) {
	h := newHarness(t)
	cs := limitAuthFailures(h)
	base := h.serve()
	attacker, user := clientFrom("127.0.0.2"), clientFrom("127.0.0.3")
	var limited int
	for i := range 1000 {
		switch s := signInFrom(t, attacker, base, fmt.Sprintf("mj_junk%04d", i)); s {
		case 429:
			limited++
		case 401:
		default:
			t.Fatalf("junk sign-in %d: HTTP %d", i, s)
		}
	}
	if limited != 1000-20 || cs.keyReads.Load() > 20 {
		t.Fatalf("1,000 junk sign-ins: %d limited, %d key reads", limited, cs.keyReads.Load())
	}
	if s := signInFrom(t, user, base, h.keys["bob"]); s != 200 {
		t.Fatalf("bob's sign-in from another address after the flood: %d", s)
	}
	// The attacker's address is out of tries, even with a key it was not seen use.
	if s := signInFrom(t, attacker, base, h.keys["alice"]); s != 429 {
		t.Fatalf("a new key from the flooding address: %d, want 429", s)
	}
}

// The client address is the connection's unless it is a trusted proxy; then the
// last address in X-Forwarded-For not itself a trusted proxy.
func TestClientAddr(t *testing.T) {
	h := newHarness(t)
	addr := func(remote string, xff ...string) string {
		var req fasthttp.Request
		for _, x := range xff {
			req.Header.Add("X-Forwarded-For", x)
		}
		var fctx fasthttp.RequestCtx
		fctx.Init(&req, net.TCPAddrFromAddrPort(netip.MustParseAddrPort(remote)), nil)
		c := h.app.AcquireCtx(&fctx)
		defer h.app.ReleaseCtx(c)
		return h.gw.clientAddr(c).String()
	}
	if got := addr("192.0.2.7:5000", "1.2.3.4"); got != "192.0.2.7/32" {
		t.Fatalf("no trusted proxies: %s, want the connection's address", got)
	}
	h.gw.proxies = parseProxies([]string{"192.0.2.7", "10.0.0.0/8"})
	if got := addr("192.0.2.7:5000", "6.6.6.6, 1.2.3.4, 10.1.1.1"); got != "1.2.3.4/32" {
		t.Fatalf("behind trusted proxies: %s, want 1.2.3.4/32", got)
	}
	if got := addr("192.0.2.8:5000", "1.2.3.4"); got != "192.0.2.8/32" {
		t.Fatalf("a connection from an untrusted address: %s, want its own", got)
	}
	if got := addr("192.0.2.7:5000", "6.6.6.6", "2001:db8:1:2:3:4:5:6"); got != "2001:db8:1:2::/64" {
		t.Fatalf("an IPv6 client: %s, want its /64", got)
	}
	if got := addr("192.0.2.7:5000", "1.2.3.4:5678"); got != "1.2.3.4/32" {
		t.Fatalf("an entry with a port: %s, want 1.2.3.4/32", got)
	}
	if got := addr("192.0.2.7:5000", "[2001:db8:9::1]:443"); got != "2001:db8:9::/64" {
		t.Fatalf("an IPv6 entry with a port: %s", got)
	}
	if got := addr("192.0.2.7:5000", "junk"); got != "192.0.2.7/32" {
		t.Fatalf("an unreadable X-Forwarded-For: %s, want the proxy's address", got)
	}
	if got := addr("[2001:db8::1]:5000"); got != "2001:db8::/64" {
		t.Fatalf("an IPv6 connection: %s", got)
	}
}

// A connection that sends its headers slowly is closed after header_timeout; a
// slow but steady upload is bounded by upload_timeout only.
func TestHeaderTimeoutSeparateFromBody(t *testing.T) {
	h := newHarness(t)
	h.gw.Config.Server.HeaderTimeoutD = time.Second
	h.app = h.gw.App() // the server's timeouts are set when the app is made
	base := h.serve()

	slow := dialRaw(t, base)
	go func() {
		io.WriteString(slow.conn, "GET /healthz HTTP/1.1\r\nHost: gw.test\r\n")
		for i := 0; ; i++ {
			if _, err := fmt.Fprintf(slow.conn, "X-Slow-%d: x\r\n", i); err != nil {
				return
			}
			time.Sleep(100 * time.Millisecond) // the pace of a slow client
		}
	}()
	// dialRaw's 30 s deadline bounds this read; upload_timeout is 1 h. A reset is
	// a close too: the client was still writing when the server closed.
	if _, err := io.ReadAll(slow.br); err != nil && !errors.Is(err, syscall.ECONNRESET) {
		t.Fatalf("a connection sending headers slowly was not closed by the server: %v", err)
	}

	key := "tmp/alice/0b8e7f5e-3c1a-4d2b-9f00-1234567890ab"
	u := h.gw.Signer.URL("PUT", key, key, time.Now().Add(time.Hour))
	up := dialRaw(t, base)
	up.send("PUT " + strings.TrimPrefix(u, "http://gw.test") + " HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 500\r\n\r\n")
	for range 10 { // 4 s in all, four times header_timeout
		up.send(strings.Repeat("x", 50))
		time.Sleep(400 * time.Millisecond) // the pace of a slow client
	}
	if status, body, _ := up.answer("a slow upload"); status != 200 || !strings.Contains(body, `"size":500`) {
		t.Fatalf("a slow, steady upload: HTTP %d %s", status, body)
	}
}

// GET /api/keys and revoking work whatever the number of keys (an etcd
// transaction holds at most 128 operations).
func TestManyKeys(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	for i := range 300 {
		if _, err := h.store.AddAPIKey(ctx, "alice", fmt.Sprint("k", i), mj.NewAPIKeySecret()); err != nil {
			t.Fatal(err)
		}
	}
	s, body, _ := h.do("GET", "/api/keys", "alice", nil)
	if s != 200 {
		t.Fatalf("listing 301 keys: HTTP %d %v", s, body)
	}
	list := body["data"].([]any)
	if len(list) != 301 {
		t.Fatalf("listed %d keys, want 301", len(list))
	}
	seen := map[string]bool{}
	for _, k := range list {
		seen[k.(map[string]any)["id"].(string)] = true
	}
	if len(seen) != 301 {
		t.Fatalf("listed %d distinct keys, want 301", len(seen))
	}
	victim := list[150].(map[string]any)["id"].(string)
	if s, body, _ := h.do("DELETE", "/api/keys/"+victim, "alice", nil); s != 200 {
		t.Fatalf("revoking one of 301 keys: HTTP %d %v", s, body)
	}
	if s, _, _ := h.do("DELETE", "/api/keys/"+victim, "alice", nil); s != 404 {
		t.Fatalf("revoking it again: HTTP %d, want 404", s)
	}
	keys, err := h.store.ListAPIKeys(ctx, "alice")
	if err != nil || len(keys) != 300 {
		t.Fatalf("after revoking: %d keys, %v", len(keys), err)
	}
	// Bob cannot revoke alice's key.
	if s, _, _ := h.do("DELETE", "/api/keys/"+keys[0].ID, "bob", nil); s != 404 {
		t.Fatalf("another account's key: HTTP %d, want 404", s)
	}
}

// gatedStore holds every API key read until open is closed.
type gatedStore struct {
	*countingStore
	open chan struct{}
}

func (s *gatedStore) APIKeyByHash(ctx context.Context, hash string) (*mj.APIKey, error) {
	s.keyReads.Add(1)
	<-s.open
	return s.Store.APIKeyByHash(ctx, hash)
}

// A burst of requests with a good key that is not cached (its cache entry just
// expired) makes one read and one attempt against the failure limit: none of
// them is answered 429 however many arrive together.
func TestGoodKeyBurstIsNotLimited(t *testing.T) {
	h := newHarness(t)
	cs := limitAuthFailures(h)
	h.gw.Config.Server.AuthFailureBurst = 2
	g := &gatedStore{countingStore: cs, open: make(chan struct{})}
	h.gw.Store = g
	const n = 40
	statuses := make(chan int, n)
	var started atomic.Int64
	for range n {
		go func() {
			started.Add(1)
			s, _, _ := h.do("GET", "/api/jobs", "alice", nil)
			statuses <- s
		}()
	}
	testenv.Eventually(t, 10*time.Second, "the burst to start and the key to be read", func() bool {
		return started.Load() == n && g.keyReads.Load() >= 1
	})
	close(g.open)
	for range n {
		if s := <-statuses; s != 200 {
			t.Fatalf("a request of the burst: HTTP %d; want 200", s)
		}
	}
	if r := g.keyReads.Load(); r != 1 {
		t.Fatalf("%d key reads for one key; want 1", r)
	}
}

// trustTestProxy makes h's requests (app.Test's, from 0.0.0.0) come from a
// trusted proxy that names the client in X-Forwarded-For.
func trustTestProxy(h *harness) {
	h.gw.proxies = parseProxies([]string{"0.0.0.0/32"})
}

// 20,000 junk keys, each from its own /64 of one /48, cost a bounded number of
// etcd reads (security review §5): the /48's bucket empties as the /64s' do not.
// A known-good key from the same /48 still gets in.
func TestJunkKeysFromRotatedPrefixesCostBoundedReads(t *testing.T) {
	h := newHarness(t)
	cs := limitAuthFailures(h)
	trustTestProxy(h)
	from := func(i int) string { return fmt.Sprintf("2001:db8:7:%x::1", i) }
	if s, _, _ := h.do("GET", "/api/jobs", "alice", nil, "X-Forwarded-For", from(0)); s != 200 {
		t.Fatalf("alice before the flood: %d", s)
	}
	reads0 := cs.keyReads.Load()
	var limited int
	for i := range 20_000 {
		h.keys["junk"] = fmt.Sprintf("mj_junk%06d", i)
		switch s, body, _ := h.do("GET", "/api/jobs", "junk", nil, "X-Forwarded-For", from(i%65536)); s {
		case 429:
			limited++
		case 401:
		default:
			t.Fatalf("junk key %d: HTTP %d %v", i, s, body)
		}
	}
	// The /48's bucket holds 16 times an address's burst (20).
	if reads := cs.keyReads.Load() - reads0; reads > 16*20 || limited < 20_000-16*20 {
		t.Fatalf("20,000 junk keys from one /48: %d key reads, %d answered 429; want at most 320 reads", reads, limited)
	}
	if s, _, _ := h.do("GET", "/api/jobs", "alice", nil, "X-Forwarded-For", from(9)); s != 200 {
		t.Fatalf("a known-good key from the flooding /48: %d", s)
	}
}

// Junk keys from 5,000 different addresses cost at most the global budget of
// etcd reads (auth_failure_global_burst), and a key seen good before still gets
// in once its cache entry expired, while the budget is spent; a key never seen
// waits for it.
func TestJunkKeysFromManyAddressesCostTheGlobalBudget(t *testing.T) {
	h := newHarness(t)
	cs := limitAuthFailures(h)
	trustTestProxy(h)
	h.gw.Config.Server.AuthFailureGlobalRate, h.gw.Config.Server.AuthFailureGlobalBurst = 1, 200
	t0 := h.gw.Now()
	if s, _, _ := h.do("GET", "/api/jobs", "alice", nil, "X-Forwarded-For", "198.51.100.1"); s != 200 {
		t.Fatalf("alice before the flood: %d", s)
	}
	reads0 := cs.keyReads.Load()
	var limited int
	for i := range 5_000 {
		h.keys["junk"] = fmt.Sprintf("mj_junk%06d", i)
		ip := fmt.Sprintf("10.%d.%d.1", i/250, i%250)
		switch s, body, hdr := h.do("GET", "/api/jobs", "junk", nil, "X-Forwarded-For", ip); s {
		case 429:
			if limited++; hdr.Get("Retry-After") == "" {
				t.Fatalf("429 without Retry-After: %v", body)
			}
		case 401:
		default:
			t.Fatalf("junk key %d: HTTP %d %v", i, s, body)
		}
	}
	if reads := cs.keyReads.Load() - reads0; reads > 200 || limited != 5_000-200 {
		t.Fatalf("5,000 junk keys from 5,000 addresses: %d key reads, %d answered 429; want at most 200 reads", reads, limited)
	}
	// alice's cache entry expires; the budget, back by a few tokens, is spent again.
	later := t0.Add(keyCacheTTL + time.Second)
	h.gw.Now = func() time.Time { return later }
	for i := range 100 {
		h.keys["junk"] = fmt.Sprintf("mj_more%06d", i)
		h.do("GET", "/api/jobs", "junk", nil, "X-Forwarded-For", fmt.Sprintf("10.200.%d.1", i))
	}
	if s, _, _ := h.do("GET", "/api/jobs", "alice", nil, "X-Forwarded-For", "198.51.100.1"); s != 200 {
		t.Fatalf("a key seen good before, with the global budget spent: %d", s)
	}
	if s, _, _ := h.do("GET", "/api/jobs", "bob", nil, "X-Forwarded-For", "198.51.100.2"); s != 429 {
		t.Fatalf("a key never seen, with the global budget spent: %d, want 429", s)
	}
}
