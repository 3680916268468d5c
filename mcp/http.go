package mcp

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
	"github.com/modelcontextprotocol/go-sdk/auth"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// Clients tells where a request comes from and limits each client's failed
// authentications, as the gateway does. `mediajobs mcp -http` gives the
// gateway's own (gateway.ClientAddr with -trusted-proxy, gateway.AuthFailures),
// so that junk keys lock out no one but their sender (docs/mcp.md, "Limits");
// this package imports no server package.
type Clients interface {
	// Addr is the client address r comes from.
	Addr(r *http.Request) netip.Addr
	// Take takes one of addr's failure tokens before an unknown key is checked;
	// when there is none, how long until there is.
	Take(addr netip.Addr, now time.Time) (ok bool, wait time.Duration)
	// Refund gives the token back: the key was good, or could not be checked.
	Refund(addr netip.Addr)
}

// Options configures the streamable HTTP server.
type Options struct {
	// BaseURL is the service's.
	BaseURL string
	// Clients finds and limits the clients; required.
	Clients Clients
	// MaxSessions bounds the sessions open at once, in all (-max-sessions);
	// MaxSessionsPerKey, per API key (-max-sessions-per-key). 0: no bound.
	MaxSessions, MaxSessionsPerKey int
}

// HTTP is the streamable HTTP server (`mediajobs mcp -http`), at /mcp. Each
// session is a client of the service with the bearer key of the request that
// opened it, and its tools take URLs only (the server's disk is not the
// agent's); requests without a key are 401. Its bounds keep one caller from
// locking the others out or growing the process (docs/mcp.md, "Limits").
type HTTP struct {
	keys     *keyVerifier
	sessions sessions
	handler  http.Handler
}

// NewHTTP makes the server; Serve serves it.
func NewHTTP(o Options) (*HTTP, error) {
	if o.Clients == nil {
		return nil, errors.New("mcp: Options.Clients is required")
	}
	h := &HTTP{sessions: sessions{max: o.MaxSessions, perKey: o.MaxSessionsPerKey}}
	h.keys = &keyVerifier{base: o.BaseURL, clients: o.Clients, now: time.Now,
		good: map[string]time.Time{}, bad: map[string]time.Time{}}
	// The SDK asks for a server on every request, if only for the protocol
	// versions it speaks; a new session's request asks twice (the slot guard
	// gave it keeps its one server).
	versions := newServer(nil, false) // never connected
	sh := sdk.NewStreamableHTTPHandler(func(r *http.Request) *sdk.Server {
		slot, _ := r.Context().Value(sessionSlot{}).(*sessionSlot)
		if slot == nil {
			return versions
		}
		if !slot.made {
			slot.made = true
			c, err := client.New(o.BaseURL, bearer(r), client.WithUserAgent("mediajobs-mcp/"+mj.Version),
				client.WithForwardedFor(o.Clients.Addr(r).String()))
			info := auth.TokenInfoFromContext(r.Context())
			if err != nil || info == nil {
				return nil
			}
			srv := newServer(c, false)
			if h.sessions.add(info.UserID, srv) { // else over a limit: guard answered 429, bar a race
				slot.srv = srv
			}
		}
		return slot.srv
	}, &sdk.StreamableHTTPOptions{SessionTimeout: 30 * time.Minute})
	// Every request's key is checked with the service (guard), and a session is
	// bound to the key that opened it (TokenInfo.UserID): a session id is no
	// credential.
	mux := http.NewServeMux()
	mux.Handle("/mcp", h.keys.guard(&h.sessions, auth.RequireBearerToken(h.keys.verify, nil)(sh)))
	h.handler = mux
	return h, nil
}

// Serve serves streamable HTTP on ln until ctx ends.
func (h *HTTP) Serve(ctx context.Context, ln net.Listener) error {
	srv := &http.Server{Handler: h.handler, ReadHeaderTimeout: 10 * time.Second}
	go func() { <-ctx.Done(); srv.Close() }()
	if err := srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// keyVerifier checks API keys with the service (GET /api/account), remembering
// a good one for a minute (a revoked key stops working within that minute) and
// a bad one for badKeyTTL. A key never found good takes a token of the client
// address's failure limit (Clients) first, so junk costs the service a bounded number of
// checks, and locks out only its own sender.
type keyVerifier struct {
	base    string
	clients Clients
	now     func() time.Time
	mu      sync.Mutex
	good    map[string]time.Time // sha256 of a key → when the service last said it is good
	bad     map[string]time.Time // sha256 of a key → until when it is taken as bad
}

const (
	goodKeyTTL = time.Minute
	badKeyTTL  = 10 * time.Second
	maxKeys    = 4096 // in each of good and bad
)

// verifiedKey marks a request whose key guard found good.
type verifiedKey struct{}

// sessionSlot holds the server of a request that opens a session.
type sessionSlot struct {
	made bool
	srv  *sdk.Server
}

func keyID(key string) string {
	sum := sha256.Sum256([]byte(key))
	return hex.EncodeToString(sum[:])
}

// guard answers a request whose key is not good (401), whose address is out of
// failures (429), or that would open a session over its limits (429); it passes
// the others on, marked as checked for verify.
func (v *keyVerifier) guard(open *sessions, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		key := bearer(r)
		if key == "" {
			next.ServeHTTP(w, r) // 401 from RequireBearerToken
			return
		}
		id := keyID(key)
		if status, retry, msg := v.check(r, key, id); status != 0 {
			if retry > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(retry))
			}
			if status == http.StatusUnauthorized {
				w.Header().Set("WWW-Authenticate", "Bearer")
			}
			http.Error(w, msg, status)
			return
		}
		ctx := context.WithValue(r.Context(), verifiedKey{}, id)
		if r.Method == http.MethodPost && r.Header.Get("Mcp-Session-Id") == "" { // a new session
			if msg := open.full(id); msg != "" {
				http.Error(w, msg, http.StatusTooManyRequests)
				return
			}
			slot := &sessionSlot{}
			defer func() { open.settle(slot.srv) }()
			ctx = context.WithValue(ctx, sessionSlot{}, slot)
		}
		next.ServeHTTP(w, r.WithContext(ctx))
	})
}

// check checks key (whose sha256 is id) for r: status 0 when it is good, else
// the status, Retry-After seconds and message to answer with.
func (v *keyVerifier) check(r *http.Request, key, id string) (status, retry int, msg string) {
	now := v.now()
	v.mu.Lock()
	at, known := v.good[id]
	until, bad := v.bad[id]
	v.mu.Unlock()
	if known && now.Sub(at) < goodKeyTTL {
		return 0, 0, ""
	}
	if bad && now.Before(until) {
		return http.StatusUnauthorized, 0, "invalid token: the mediajobs API key was refused"
	}
	addr := v.clients.Addr(r)
	took := false
	if !known { // a key found good before is no junk: it takes no token
		ok, wait := v.clients.Take(addr, now)
		if !ok {
			secs := max(int(math.Ceil(wait.Seconds())), 1)
			return http.StatusTooManyRequests, secs, fmt.Sprintf("too many failed authentications from this address; retry after %ds", secs)
		}
		took = true
	}
	c, err := client.New(v.base, key, client.WithUserAgent("mediajobs-mcp/"+mj.Version),
		client.WithForwardedFor(addr.String()), client.WithRetries(0, 0))
	if err != nil {
		return http.StatusInternalServerError, 0, err.Error()
	}
	_, err = c.Account(r.Context())
	v.mu.Lock()
	defer v.mu.Unlock()
	switch {
	case err == nil:
		if took {
			v.clients.Refund(addr)
		}
		bound(v.good, now, goodKeyTTL)
		v.good[id] = now
		return 0, 0, ""
	case client.IsCode(err, mj.EBadAPIKey):
		delete(v.good, id)
		bound(v.bad, now, 0)
		v.bad[id] = now.Add(badKeyTTL)
		return http.StatusUnauthorized, 0, "invalid token: the mediajobs API key was refused"
	case client.IsCode(err, mj.ETooManyRequests):
		return http.StatusTooManyRequests, 1, err.Error()
	default: // the service is away: not the key's fault
		if took {
			v.clients.Refund(addr)
		}
		return http.StatusBadGateway, 0, "the mediajobs service could not check the key: " + err.Error()
	}
}

// bound makes room in m (of times; ttl: how long one is worth keeping) for one
// more entry: the stale ones go, and if that is not enough, all of them (they
// are checked again).
func bound(m map[string]time.Time, now time.Time, ttl time.Duration) {
	if len(m) < maxKeys {
		return
	}
	for k, t := range m {
		if !now.Before(t.Add(ttl)) {
			delete(m, k)
		}
	}
	if len(m) >= maxKeys {
		clear(m)
	}
}

// verify is RequireBearerToken's verifier: the key guard checked for this request.
func (v *keyVerifier) verify(ctx context.Context, key string, _ *http.Request) (*auth.TokenInfo, error) {
	id := keyID(key)
	if ctx.Value(verifiedKey{}) != id {
		return nil, fmt.Errorf("%w: the mediajobs API key was refused", auth.ErrInvalidToken)
	}
	return &auth.TokenInfo{UserID: id, Expiration: v.now().Add(time.Hour)}, nil
}

// bearer is the request's bearer token, read as the SDK reads it.
func bearer(r *http.Request) string {
	f := strings.Fields(r.Header.Get("Authorization"))
	if len(f) != 2 || !strings.EqualFold(f[0], "Bearer") {
		return ""
	}
	return f[1]
}

// sessions bounds the sessions open at once, per key and in all: each holds
// a server, a client of the service and their goroutines until it ends (DELETE)
// or idles out (30 min).
type sessions struct {
	max, perKey int
	mu          sync.Mutex
	open        map[*sdk.Server]sessionEntry // one server per session
}

// sessionEntry is a server's: settled once the request that made it is over,
// and the session connected in it (or failed to).
type sessionEntry struct {
	key     string
	settled bool
}

// over is why key may open no more sessions now ("" when it may), having
// dropped the servers whose session ended. The caller holds s.mu.
func (s *sessions) over(key string) string {
	all, mine := 0, 0
	for srv, e := range s.open {
		live := !e.settled
		for range srv.Sessions() {
			live = true
		}
		if !live {
			delete(s.open, srv)
			continue
		}
		all++
		if e.key == key {
			mine++
		}
	}
	switch {
	case s.perKey > 0 && mine >= s.perKey:
		return fmt.Sprintf("this API key has %d MCP sessions open, the most it may (-max-sessions-per-key): end one (DELETE /mcp with its Mcp-Session-Id) or let one idle out (30 min)", mine)
	case s.max > 0 && all >= s.max:
		return fmt.Sprintf("this MCP server has %d sessions open, the most it may (-max-sessions); try again later", all)
	}
	return ""
}

// full is why key may open no more sessions now ("" when it may).
func (s *sessions) full(key string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.over(key)
}

// add counts srv as a session of key, unless that would cross a limit.
func (s *sessions) add(key string, srv *sdk.Server) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over(key) != "" {
		return false
	}
	if s.open == nil {
		s.open = map[*sdk.Server]sessionEntry{}
	}
	s.open[srv] = sessionEntry{key: key}
	return true
}

// settle marks srv's session as connected, or failed: from now on it counts
// while it is open.
func (s *sessions) settle(srv *sdk.Server) {
	if srv == nil {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e, ok := s.open[srv]; ok {
		e.settled = true
		s.open[srv] = e
	}
}
