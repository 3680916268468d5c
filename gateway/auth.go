package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"golang.org/x/time/rate"
)

const localAccount = "account"

// keyCacheTTL bounds how long a cached key is trusted without asking etcd. Revoked
// keys leave the cache at once (revoke on this gateway, or the etcd watch run by
// Watch for the others); the TTL only matters if that watch is down.
const keyCacheTTL = 10 * time.Second

// touchEvery is how often a key's last_used_at is written: at most once a minute.
const touchEvery = time.Minute

type cachedKey struct {
	key     *mj.APIKey
	account any // key.AccountID, boxed once for the request's locals
	expires time.Time
	touched time.Time
}

type keyCache struct {
	mu sync.Mutex
	m  map[string]*cachedKey // by hash
	// revoked counts drops: a key read from etcd before a drop may be revoked
	// already, and is then not cached (the drop may have found nothing to remove).
	revoked uint64
}

// get returns a copy of the cached key, taken under the lock: put replaces it.
func (c *keyCache) get(hash string, now time.Time) (mj.APIKey, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[hash]; e != nil && now.Before(e.expires) {
		return *e.key, true
	}
	return mj.APIKey{}, false
}

// getHex is get for a hash in hex held in a byte slice; it also returns the
// key's account as the request's locals hold it, and whether its last use is
// to be written now (dueTouch, in the same hold of the lock). It allocates
// nothing.
func (c *keyCache) getHex(hash []byte, now time.Time) (key mj.APIKey, acct any, touch, ok bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[string(hash)]; e != nil && now.Before(e.expires) {
		if now.Sub(e.touched) >= touchEvery {
			e.touched, touch = now, true
		}
		return *e.key, e.account, touch, true
	}
	return mj.APIKey{}, nil, false, false
}

// generation is to be read before the key is read from etcd, and passed to put.
func (c *keyCache) generation() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.revoked
}

// put caches k unless a key was dropped since gen.
func (c *keyCache) put(hash string, k *mj.APIKey, now time.Time, gen uint64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.revoked != gen {
		return
	}
	if c.m == nil {
		c.m = map[string]*cachedKey{}
	}
	e := c.m[hash]
	if e == nil {
		e = &cachedKey{}
		c.m[hash] = e
	}
	e.key, e.account, e.expires = k, k.AccountID, now.Add(keyCacheTTL)
}

// known reports whether the key was found good before and not revoked since
// (its entry stays, expired, until a drop): such a key is no junk, and its
// lookups take nothing from the failure limits (authlimit.go).
func (c *keyCache) known(hash string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.m[hash] != nil
}

func (c *keyCache) drop(hash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.revoked++
	delete(c.m, hash)
}

// dueTouch reports whether the cached key's last use should be written now, and
// marks it so. A key that is not cached is touched once it is. hash is in hex.
func (c *keyCache) dueTouch(hash []byte, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[string(hash)]
	if e == nil || now.Sub(e.touched) < touchEvery {
		return false
	}
	e.touched = now
	return true
}

// errBadKey is the answer to a key that does not exist (never did, or revoked).
var errBadKey = mj.Errorf(mj.EBadAPIKey, "invalid or revoked API key")

// authenticate resolves "Authorization: Bearer <key>" to the key's account. Keys
// are looked up by their SHA-256 hash; the secret is never stored. A request with
// no Authorization header may instead carry a dashboard session's cookie
// (session.go); a request with one ignores cookies.
func (g *Gateway) authenticate(c *fiber.Ctx) error {
	h := c.Get(fiber.HeaderAuthorization)
	if h == "" && c.Cookies(sessionCookie) != "" {
		return g.cookieAuth(c)
	}
	scheme, secret, ok := strings.Cut(h, " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return mj.Errorf(mj.EBadAPIKey, "missing API key: send the header \"Authorization: Bearer <API_KEY>\"")
	}
	// The key's hash, in hex, on the stack: a key found in the cache costs no
	// allocation.
	var hb [2 * sha256.Size]byte
	hashHex(hb[:], secret)
	now := g.Now()
	key, acct, touch, ok := g.keys.getHex(hb[:], now)
	if !ok {
		var err error
		if key, err = g.authKey(c, string(hb[:])); err != nil {
			return err
		}
		acct = key.AccountID
		touch = g.keys.dueTouch(hb[:], now)
	}
	if touch {
		g.touchKey(hb[:], key, now)
	}
	c.Locals(localAccount, acct)
	return g.rateLimit(c, key.AccountID)
}

// hashHex writes mj.HashAPIKey(secret) into dst (2*sha256.Size bytes).
func hashHex(dst []byte, secret string) {
	var buf [256]byte
	var sum [sha256.Size]byte
	if len(secret) <= len(buf) {
		sum = sha256.Sum256(buf[:copy(buf[:], secret)])
	} else {
		sum = sha256.Sum256([]byte(secret))
	}
	hex.Encode(dst, sum[:])
}

// authKey is lookupKey for a credential a client presents: a key cached as good
// passes at once; a key found good before is read again (the cache's entry
// expired) without counting against the failure limits; any other counts
// against them (authlimit.go), and a key just found bad is answered without
// reading etcd.
func (g *Gateway) authKey(c *fiber.Ctx, hash string) (mj.APIKey, error) {
	now := g.Now()
	if key, ok := g.keys.get(hash, now); ok {
		return key, nil
	}
	known := g.keys.known(hash)
	// Concurrent requests with one uncached key (a client's burst as its key's
	// cache entry expires) make one attempt: each of them taking a token of the
	// failure limit would turn a good key's burst into 429s.
	// Shared only by requests from one client address (one failure budget),
	// under a context of its own: no caller's deadline ends the others' lookup.
	v, err, _ := g.authFlight.Do(g.clientAddr(c).String()+" "+hash, func() (any, error) {
		attempt := &authAttempt{} // takes nothing: a key found good before
		if !known {
			var err error
			if attempt, err = g.beginAuth(c); err != nil {
				return mj.APIKey{}, err
			}
		}
		if g.badKeys.bad(hash, now) {
			return mj.APIKey{}, errBadKey
		}
		gen := g.badKeys.generation()
		ctx, cancel := context.WithTimeout(context.WithoutCancel(c.UserContext()), max(g.Config.Server.RequestTimeoutD, 10*time.Second))
		defer cancel()
		key, err := g.lookupKey(ctx, hash)
		switch {
		case err == errBadKey:
			g.badKeys.put(hash, now, gen)
		case err == nil:
			attempt.ok()
		}
		return key, err
	})
	return v.(mj.APIKey), err
}

// lookupKey returns the key with this hash, from the cache or etcd; errBadKey when
// there is none.
func (g *Gateway) lookupKey(ctx context.Context, hash string) (mj.APIKey, error) {
	now := g.Now()
	if key, ok := g.keys.get(hash, now); ok {
		return key, nil
	}
	gen := g.keys.generation()
	k, err := g.Store.APIKeyByHash(ctx, hash)
	if mj.ErrorCode(err) == mj.ENotFound {
		if g.keys.known(hash) { // revoked while this gateway's watch missed it
			g.keys.drop(hash)
		}
		return mj.APIKey{}, errBadKey
	}
	if err != nil {
		return mj.APIKey{}, err
	}
	g.keys.put(hash, k, now, gen)
	return *k, nil
}

// touchKey records the key's use at now, which keyCache found due (at most
// once a minute). hash is in hex.
func (g *Gateway) touchKey(hexHash []byte, key mj.APIKey, now time.Time) {
	hash := string(hexHash)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := g.Store.TouchAPIKey(ctx, hash, now); err != nil {
			g.Log.Warn("record key use", "key", key.ID, "err", err)
		}
	}()
}

func account(c *fiber.Ctx) string { return c.Locals(localAccount).(string) }

// rateLimit applies the account's token bucket (per gateway process).
func (g *Gateway) rateLimit(c *fiber.Ctx, accountID string) error {
	if err := g.allow(c, &g.limiters, accountID); err != nil {
		return err
	}
	return c.Next()
}

// allow takes one request from the token bucket of key in limiters (made on first
// use with rate_limit and rate_burst); a tooManyRequests error, with Retry-After
// set, when it is empty.
func (g *Gateway) allow(c *fiber.Ctx, limiters *sync.Map, key string) error {
	limit := g.Config.Server.RateLimit
	if limit <= 0 {
		return nil
	}
	v, ok := limiters.Load(key)
	if !ok { // a new bucket only for a new key: the key is cloned, fiber's strings are reused buffers
		v, _ = limiters.LoadOrStore(strings.Clone(key), rate.NewLimiter(rate.Limit(limit), max(g.Config.Server.RateBurst, 1)))
	}
	lim := v.(*rate.Limiter)
	if lim.AllowN(g.Now(), 1) {
		return nil
	}
	// Empty: how long until a token, for Retry-After; the reservation is given back.
	r := lim.ReserveN(g.Now(), 1)
	if d := r.DelayFrom(g.Now()); d > 0 {
		r.CancelAt(g.Now())
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(int(math.Ceil(d.Seconds()))))
		return mj.Errorf(mj.ETooManyRequests, "rate limit of %g requests per second exceeded; retry after %s", limit, d.Round(time.Millisecond))
	}
	return nil
}

// Watch keeps this gateway's caches current: it drops revoked keys as soon as any
// gateway revokes them, and follows job changes for the job cache (which is used only
// while this runs). Run it for the gateway's lifetime.
func (g *Gateway) Watch(ctx context.Context) {
	go g.watchJobs(ctx)
	go func() {
		<-ctx.Done()
		g.StopStreams() // or fiber's Shutdown would wait for every open stream
	}()
	g.Store.WatchRevokedKeys(ctx, g.keys.drop)
}
