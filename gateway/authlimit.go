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
//     and auth_failure_burst), an IPv6 /64's enclosing /56 and /48 one each (4
//     and 16 times as large), and the gateway one for all addresses together
//     (auth_failure_global_rate and auth_failure_global_burst): a credential this
//     gateway does not know to be good takes a token from each before etcd is
//     read, and gives them back when it turns out good; with one of them empty
//     the request is answered 429 without reading etcd. An API key this gateway
//     found good before (and has not seen revoked since) takes none, so junk
//     from others never locks it out (auth.go, authKey);
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

// failureLimiter holds the token buckets of failed authentications: one per
// client address and, for IPv6, one per enclosing /56 and /48 (a client rotating
// through the /64s of its /48 still empties the /48's), and one for all
// addresses together, so junk credentials cost a bounded number of etcd reads
// in total however many addresses send them.
type failureLimiter struct {
	mu      sync.Mutex
	buckets lru[netip.Prefix, failureBucket]
	global  failureBucket
	started bool // global has been filled
}

type failureBucket struct {
	tokens float64
	at     time.Time
}

// fill adds what rate gave back since the bucket's last use, up to burst.
func (b *failureBucket) fill(now time.Time, rate float64, burst int) {
	if now.After(b.at) {
		b.tokens = math.Min(float64(burst), b.tokens+rate*now.Sub(b.at).Seconds())
		b.at = now
	}
}

// wait is how long until the bucket has a token again.
func (b *failureBucket) wait(rate float64) time.Duration {
	return time.Duration((1 - b.tokens) / rate * float64(time.Second))
}

// failureLimits are the rates and bursts of the failure buckets.
type failureLimits struct {
	rate        float64 // per client address
	burst       int
	globalRate  float64 // 0: no global budget
	globalBurst int
}

// outerScale is how many times an enclosing IPv6 prefix's bucket holds and
// refills what its /64's does, per level: /56 ×4, /48 ×16.
const outerScale = 4

// scopes are the prefixes whose buckets a failure from addr takes from, with
// each one's scale of the address's rate and burst: the address itself, and for
// IPv6 its /56 and /48.
func scopes(addr netip.Prefix) []scope {
	out := []scope{{addr, 1}}
	if addr.Addr().Is6() {
		for i, bits := range []int{56, 48} {
			p, _ := addr.Addr().Prefix(bits)
			out = append(out, scope{p, outerScale << (2 * i)})
		}
	}
	return out
}

type scope struct {
	p     netip.Prefix
	scale int
}

// take takes a token from each of addr's buckets and the global one, or from
// none when one is empty; then it returns how long until that one has a token.
func (f *failureLimiter) take(addr netip.Prefix, now time.Time, l failureLimits) (bool, time.Duration) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.buckets.max = maxFailureAddrs
	var wait time.Duration
	var bs []*failureBucket
	for _, sc := range scopes(addr) {
		rate, burst := l.rate*float64(sc.scale), l.burst*sc.scale
		b := f.buckets.ref(sc.p, func() failureBucket { return failureBucket{tokens: float64(burst), at: now} })
		b.fill(now, rate, burst)
		if b.tokens < 1 {
			wait = max(wait, b.wait(rate))
		}
		bs = append(bs, b)
	}
	if l.globalRate > 0 {
		if !f.started {
			f.global, f.started = failureBucket{tokens: float64(l.globalBurst), at: now}, true
		}
		f.global.fill(now, l.globalRate, l.globalBurst)
		if f.global.tokens < 1 {
			wait = max(wait, f.global.wait(l.globalRate))
		}
		bs = append(bs, &f.global)
	}
	if wait > 0 {
		return false, wait
	}
	for _, b := range bs {
		b.tokens--
	}
	return true, 0
}

// refund gives back the tokens taken for an authentication that succeeded.
func (f *failureLimiter) refund(addr netip.Prefix, l failureLimits) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, sc := range scopes(addr) {
		if b, ok := f.buckets.peek(sc.p); ok {
			b.tokens = math.Min(float64(l.burst*sc.scale), b.tokens+1)
		}
	}
	if l.globalRate > 0 {
		f.global.tokens = math.Min(float64(l.globalBurst), f.global.tokens+1)
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

// failureLimits are the configured rates and bursts (auth_failure_*).
func (g *Gateway) failureLimits() failureLimits {
	s := g.Config.Server
	return failureLimits{rate: s.AuthFailureRate, burst: max(s.AuthFailureBurst, 1),
		globalRate: s.AuthFailureGlobalRate, globalBurst: max(s.AuthFailureGlobalBurst, 1)}
}

func (g *Gateway) beginAuth(c *fiber.Ctx) (*authAttempt, error) {
	a := &authAttempt{g: g, addr: g.clientAddr(c)}
	l := g.failureLimits()
	if l.rate <= 0 {
		return a, nil
	}
	ok, wait := g.failures.take(a.addr, g.Now(), l)
	if !ok {
		secs := max(int(math.Ceil(wait.Seconds())), 1)
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(secs))
		return nil, mj.Errorf(mj.ETooManyRequests, "too many failed authentications from this address or in all; retry after %ds", secs)
	}
	a.took = true
	return a, nil
}

func (a *authAttempt) ok() {
	if a.took {
		a.g.failures.refund(a.addr, a.g.failureLimits())
		a.took = false
	}
}

// clientAddr is where the request comes from, as the failure limit counts it
// (ClientPrefix): the connection's address or, when that is one of
// server.trusted_proxies, the one X-Forwarded-For names.
func (g *Gateway) clientAddr(c *fiber.Ctx) netip.Prefix {
	a, _ := netip.AddrFromSlice(c.Context().RemoteIP())
	var xff []string
	if len(g.proxies) > 0 {
		for _, h := range c.Request().Header.PeekAll(fiber.HeaderXForwardedFor) {
			xff = append(xff, string(h))
		}
	}
	return clientPrefix(ClientAddr(a, xff, g.proxies))
}

// clientPrefix is the prefix a client address counts by: IPv6 addresses by
// their /64, which one host usually holds whole.
func clientPrefix(a netip.Addr) netip.Prefix {
	bits := 32
	if a.Is6() {
		bits = 64
	}
	p, _ := a.Prefix(bits)
	return p
}

// ClientAddr is where a request from remote comes from: remote or, when that
// is one of proxies, the last address in its X-Forwarded-For headers (xff, in
// order) that is not (a client may prepend anything). `mediajobs mcp -http`
// finds its clients the same way.
func ClientAddr(remote netip.Addr, xff []string, proxies []netip.Prefix) netip.Addr {
	a := remote.Unmap()
	trusted := func(a netip.Addr) bool {
		for _, p := range proxies {
			if p.Contains(a) {
				return true
			}
		}
		return false
	}
	if trusted(a) {
	walk:
		for i := len(xff) - 1; i >= 0; i-- {
			parts := strings.Split(xff[i], ",")
			for j := len(parts) - 1; j >= 0; j-- {
				p, err := parseForwarded(strings.TrimSpace(parts[j]))
				if err != nil {
					break walk
				}
				a = p.Unmap()
				if !trusted(a) {
					break walk
				}
			}
		}
	}
	return a
}

// AuthFailures limits failed authentications as the gateway does (per client
// address, an IPv6 one by its /64 with the /56 and /48 around it, and in all);
// `mediajobs mcp -http` puts one in front of the gateway. 0 Rate: no limit.
type AuthFailures struct {
	Rate        float64
	Burst       int
	GlobalRate  float64
	GlobalBurst int
	f           failureLimiter
}

func (a *AuthFailures) limits() failureLimits {
	return failureLimits{rate: a.Rate, burst: max(a.Burst, 1), globalRate: a.GlobalRate, globalBurst: max(a.GlobalBurst, 1)}
}

// Take takes a failure's token for addr before a credential is checked; when
// there is none, how long until there is.
func (a *AuthFailures) Take(addr netip.Addr, now time.Time) (bool, time.Duration) {
	if a.Rate <= 0 {
		return true, 0
	}
	return a.f.take(clientPrefix(addr), now, a.limits())
}

// Refund gives the token back: the credential was good.
func (a *AuthFailures) Refund(addr netip.Addr) {
	if a.Rate > 0 {
		a.f.refund(clientPrefix(addr), a.limits())
	}
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
