package gateway

import (
	"context"
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
	expires time.Time
	touched time.Time
}

type keyCache struct {
	mu sync.Mutex
	m  map[string]*cachedKey // by hash
}

func (c *keyCache) get(hash string, now time.Time) *cachedKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[hash]; e != nil && now.Before(e.expires) {
		return e
	}
	return nil
}

func (c *keyCache) put(hash string, k *mj.APIKey, now time.Time) *cachedKey {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]*cachedKey{}
	}
	e := c.m[hash]
	if e == nil {
		e = &cachedKey{}
		c.m[hash] = e
	}
	e.key, e.expires = k, now.Add(keyCacheTTL)
	return e
}

func (c *keyCache) drop(hash string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.m, hash)
}

// dueTouch reports whether e's last use should be written now, and marks it so.
func (c *keyCache) dueTouch(e *cachedKey, now time.Time) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if now.Sub(e.touched) < touchEvery {
		return false
	}
	e.touched = now
	return true
}

// authenticate resolves "Authorization: Bearer <key>" to the key's account. Keys
// are looked up by their SHA-256 hash; the secret is never stored.
func (g *Gateway) authenticate(c *fiber.Ctx) error {
	h := c.Get(fiber.HeaderAuthorization)
	scheme, secret, ok := strings.Cut(h, " ")
	secret = strings.TrimSpace(secret)
	if !ok || !strings.EqualFold(scheme, "Bearer") || secret == "" {
		return mj.Errorf(mj.EBadAPIKey, "missing API key: send the header \"Authorization: Bearer <API_KEY>\"")
	}
	hash := mj.HashAPIKey(secret)
	now := g.Now()
	e := g.keys.get(hash, now)
	if e == nil {
		k, err := g.Store.APIKeyByHash(c.UserContext(), hash)
		if mj.ErrorCode(err) == mj.ENotFound {
			return mj.Errorf(mj.EBadAPIKey, "invalid or revoked API key")
		}
		if err != nil {
			return err
		}
		e = g.keys.put(hash, k, now)
	}
	if g.keys.dueTouch(e, now) {
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			defer cancel()
			if err := g.Store.TouchAPIKey(ctx, hash, now); err != nil {
				g.Log.Warn("record key use", "key", e.key.ID, "err", err)
			}
		}()
	}
	c.Locals(localAccount, e.key.AccountID)
	return g.rateLimit(c, e.key.AccountID)
}

func account(c *fiber.Ctx) string { return c.Locals(localAccount).(string) }

// rateLimit applies the account's token bucket (per gateway process).
func (g *Gateway) rateLimit(c *fiber.Ctx, accountID string) error {
	limit := g.Config.Server.RateLimit
	if limit <= 0 {
		return c.Next()
	}
	v, _ := g.limiters.LoadOrStore(accountID, rate.NewLimiter(rate.Limit(limit), max(g.Config.Server.RateBurst, 1)))
	r := v.(*rate.Limiter).ReserveN(g.Now(), 1)
	if d := r.DelayFrom(g.Now()); d > 0 {
		r.CancelAt(g.Now())
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(int(math.Ceil(d.Seconds()))))
		return mj.Errorf(mj.ETooManyRequests, "rate limit of %g requests per second exceeded; retry after %s", limit, d.Round(time.Millisecond))
	}
	return c.Next()
}

// Watch keeps this gateway's caches current: it drops revoked keys as soon as any
// gateway revokes them, and follows job changes for the job cache (which is used only
// while this runs). Run it for the gateway's lifetime.
func (g *Gateway) Watch(ctx context.Context) {
	go g.watchJobs(ctx)
	g.Store.WatchRevokedKeys(ctx, g.keys.drop)
}
