package gateway

import (
	"container/list"
	"math"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
)

// Failed authentication is cheap for the service (docs/api.md, "Rate limits"):
//
//   - each client address has a token bucket of failures (server.auth_failure_rate
//     and auth_failure_burst): a credential this gateway does not know to be good
//     takes a token before etcd is read, and gets it back when it turns out good;
//     an address with no token left is answered 429 without reading etcd;
//   - a credential just found bad (an API key, a session cookie) is remembered for
//     badCredTTL, so repeating it reads nothing from etcd.
//
// Both are bounded in entries, least recently used first out, so that an attacker
// with many addresses or many junk keys cannot grow the gateway's memory.

const (
	// maxFailureAddrs bounds the client addresses whose failures are counted.
	maxFailureAddrs = 16_384
	// maxBadCreds bounds the credentials remembered as bad.
	maxBadCreds = 4096
	// badCredTTL is how long a bad credential is remembered. A key created on this
	// gateway is forgotten at once; one created elsewhere (another gateway, the
	// admin CLI) works here at most this long after it was last tried.
	badCredTTL = 5 * time.Second
)

// lru is a map bounded in entries that drops the least recently used one.
type lru[K comparable, V any] struct {
	max   int
	m     map[K]*list.Element
	order list.List // of *lruEntry; front: the most recently used
}

type lruEntry[K comparable, V any] struct {
	key K
	val V
}

// ref returns the entry's value, made with mk when absent (evicting the least
// recently used entry when full), and marks it used.
func (c *lru[K, V]) ref(key K, mk func() V) *V {
	if e, ok := c.m[key]; ok {
		c.order.MoveToFront(e)
		return &e.Value.(*lruEntry[K, V]).val
	}
	if c.m == nil {
		c.m = map[K]*list.Element{}
	}
	if len(c.m) >= c.max {
		if b := c.order.Back(); b != nil {
			delete(c.m, b.Value.(*lruEntry[K, V]).key)
			c.order.Remove(b)
		}
	}
	e := c.order.PushFront(&lruEntry[K, V]{key: key, val: mk()})
	c.m[key] = e
	return &e.Value.(*lruEntry[K, V]).val
}

// peek returns the entry's value without marking it used.
func (c *lru[K, V]) peek(key K) (*V, bool) {
	if e, ok := c.m[key]; ok {
		return &e.Value.(*lruEntry[K, V]).val, true
	}
	return nil, false
}

func (c *lru[K, V]) remove(key K) {
	if e, ok := c.m[key]; ok {
		delete(c.m, key)
		c.order.Remove(e)
	}
}

func (c *lru[K, V]) len() int { return len(c.m) }

// failureLimiter holds a token bucket of failed authentications per client address.
type failureLimiter struct {
	mu      sync.Mutex
	buckets lru[netip.Prefix, failureBucket]
}

type failureBucket struct {
	tokens float64
	at     time.Time
}

// take takes a token from addr's bucket; when it is empty, how long until one is
// back.
func (f *failureLimiter) take(addr netip.Prefix, now time.Time, rate float64, burst int) (bool, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buckets.max = maxFailureAddrs
	b := f.buckets.ref(addr, func() failureBucket { return failureBucket{tokens: float64(burst), at: now} })
	if now.After(b.at) {
		b.tokens = math.Min(float64(burst), b.tokens+rate*now.Sub(b.at).Seconds())
		b.at = now
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / rate * float64(time.Second))
}

// refund gives back a token taken for an authentication that succeeded.
func (f *failureLimiter) refund(addr netip.Prefix, burst int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if b, ok := f.buckets.peek(addr); ok {
		b.tokens = math.Min(float64(burst), b.tokens+1)
	}
}

// badCreds remembers credentials (by hash) just found bad, until an expiry.
type badCreds struct {
	mu     sync.Mutex
	c      lru[string, time.Time]
	forgot uint64 // counts forget calls: a lookup that raced one stores nothing
}

func (b *badCreds) bad(hash string, now time.Time) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	exp, ok := b.c.peek(hash)
	if ok && !now.Before(*exp) {
		b.c.remove(hash)
		return false
	}
	return ok
}

// generation is to be read before etcd is, and passed to put.
func (b *badCreds) generation() uint64 {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.forgot
}

func (b *badCreds) put(hash string, now time.Time, gen uint64) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.forgot != gen {
		return
	}
	b.c.max = maxBadCreds
	*b.c.ref(hash, func() time.Time { return time.Time{} }) = now.Add(badCredTTL)
}

// forget drops hash: a key with it was just created.
func (b *badCreds) forget(hash string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.forgot++
	b.c.remove(hash)
}

func (b *badCreds) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.c.len()
}

// authAttempt is one authentication that may fail: begin takes a token from the
// client address's bucket (a 429 error when there is none), and ok gives it back
// when the credential turned out good. An attempt that ends otherwise keeps it.
type authAttempt struct {
	g    *Gateway
	addr netip.Prefix
	took bool
}

func (g *Gateway) beginAuth(c *fiber.Ctx) (*authAttempt, error) {
	a := &authAttempt{g: g, addr: g.clientAddr(c)}
	rate, burst := g.Config.Server.AuthFailureRate, max(g.Config.Server.AuthFailureBurst, 1)
	if rate <= 0 {
		return a, nil
	}
	ok, wait := g.failures.take(a.addr, g.Now(), rate, burst)
	if !ok {
		secs := max(int(math.Ceil(wait.Seconds())), 1)
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(secs))
		return nil, mj.Errorf(mj.ETooManyRequests, "too many failed authentications from this address; retry after %ds", secs)
	}
	a.took = true
	return a, nil
}

func (a *authAttempt) ok() {
	if a.took {
		a.g.failures.refund(a.addr, max(a.g.Config.Server.AuthFailureBurst, 1))
		a.took = false
	}
}

// clientAddr is where the request comes from, as the failure limit counts it: the
// connection's address or, when that is one of server.trusted_proxies, the last
// address in X-Forwarded-For that is not (a client may prepend anything). IPv6
// addresses count by their /64, which one host usually holds whole.
func (g *Gateway) clientAddr(c *fiber.Ctx) netip.Prefix {
	a, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	a = a.Unmap()
	if len(g.proxies) > 0 && g.trustedProxy(a) {
		hdrs := c.Request().Header.PeekAll(fiber.HeaderXForwardedFor)
	walk:
		for i := len(hdrs) - 1; i >= 0; i-- {
			parts := strings.Split(string(hdrs[i]), ",")
			for j := len(parts) - 1; j >= 0; j-- {
				p, err := parseForwarded(strings.TrimSpace(parts[j]))
				if err != nil {
					break walk
				}
				a = p.Unmap()
				if !g.trustedProxy(a) {
					break walk
				}
			}
		}
	}
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// parseForwarded reads one X-Forwarded-For entry: an address, or an address
// with a port ("1.2.3.4:5678", "[2001:db8::1]:443"), as some balancers send.
func parseForwarded(s string) (netip.Addr, error) {
	a, err := netip.ParseAddr(s)
	if err != nil {
		ap, perr := netip.ParseAddrPort(s)
		if perr != nil {
			return netip.Addr{}, err
		}
		a = ap.Addr()
	}
	return a, nil
}

func (g *Gateway) trustedProxy(a netip.Addr) bool {
	for _, p := range g.proxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// parseProxies reads server.trusted_proxies (checked by config.Finish).
func parseProxies(list []string) []netip.Prefix {
	var out []netip.Prefix
	for _, s := range list {
		if p, err := config.ParseProxy(s); err == nil {
			out = append(out, p)
		}
	}
	return out
}
