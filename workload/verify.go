// Package workload verifies Nomad workload identities: the JWTs Nomad signs for
// each task (an `identity` block in the job) and publishes the keys of at
// <nomad addr>/.well-known/jwks.json. Warm runners present theirs to the
// control plane to lease work.
package workload

import (
	"context"
	"crypto/ed25519"
	"crypto/rsa"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// Claims are what a verified workload identity says of its holder.
type Claims struct {
	Namespace    string // nomad_namespace
	JobID        string // nomad_job_id
	AllocationID string // nomad_allocation_id
	Task         string // nomad_task
	Expiry       time.Time
}

// Verifier checks tokens against the keys Nomad publishes at JWKSURL
// (<nomad addr>/.well-known/jwks.json). It is safe for concurrent use; do not
// copy it after first use. Now also times the MinRefetch limit.
type Verifier struct {
	JWKSURL  string
	Audience string           // required "aud" entry, e.g. "mediajobs"
	HTTP     *http.Client     // nil: a client with a 10 s timeout
	Now      func() time.Time // nil: time.Now
	// MinRefetch bounds how often an unknown kid triggers a refetch (default 10 s)
	MinRefetch time.Duration

	mu        sync.Mutex
	keys      jose.JSONWebKeySet
	fetched   bool      // a fetch has been tried
	lastFetch time.Time // when the last fetch started (by Now)
	lastErr   error     // how the last fetch failed, nil if it did not
	inflight  *fetchCall
}

type fetchCall struct {
	done chan struct{}
	err  error
}

const (
	// leeway absorbs clock skew between the Nomad servers and us.
	leeway = 30 * time.Second
	// maxToken: Nomad's identities are about 1 KiB; anything far larger is not one.
	maxToken = 64 << 10
	// maxJWKS bounds the JWKS body read: a handful of keys.
	maxJWKS = 1 << 20
	// fetchTimeout bounds a fetch when HTTP is a client without a timeout: the
	// fetch is shared, so it is not tied to one caller's context.
	fetchTimeout = 30 * time.Second
)

var defaultHTTP = &http.Client{Timeout: 10 * time.Second}

// Only asymmetric algorithms: Nomad signs with RS256 or EdDSA, and an HMAC
// "key" in a public JWKS would let anyone sign.
var allowedAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.EdDSA}

type nomadClaims struct {
	Audience     jwt.Audience     `json:"aud"`
	Expiry       *jwt.NumericDate `json:"exp"`
	NotBefore    *jwt.NumericDate `json:"nbf"`
	IssuedAt     *jwt.NumericDate `json:"iat"`
	Namespace    string           `json:"nomad_namespace"`
	JobID        string           `json:"nomad_job_id"`
	AllocationID string           `json:"nomad_allocation_id"`
	Task         string           `json:"nomad_task"`
}

// Verify checks token's signature against Nomad's keys and its claims, and
// returns the claims. Errors never include the token.
func (v *Verifier) Verify(ctx context.Context, token string) (*Claims, error) {
	if v.JWKSURL == "" || v.Audience == "" {
		return nil, errors.New("workload identity verifier: JWKSURL and Audience must be set")
	}
	// The file Nomad writes may be read with a trailing newline.
	token = strings.TrimSpace(token)
	if token == "" {
		return nil, errors.New("no workload identity token given")
	}
	if len(token) > maxToken {
		return nil, fmt.Errorf("workload identity token is %d bytes, more than the %d accepted", len(token), maxToken)
	}
	// Compact serialization only: a JWT is never the JSON form, which may carry
	// unprotected headers and several signatures.
	jws, err := jose.ParseSignedCompact(token, allowedAlgs)
	if err != nil {
		var alg *jose.ErrUnexpectedSignatureAlgorithm
		if errors.As(err, &alg) {
			return nil, fmt.Errorf("token signed with alg %q, not accepted (only RS256 and EdDSA)", clip(string(alg.Got)))
		}
		return nil, fmt.Errorf("malformed workload identity token: %v", err)
	}
	if len(jws.Signatures) != 1 {
		return nil, fmt.Errorf("token has %d signatures, want 1", len(jws.Signatures))
	}
	hdr := jws.Signatures[0].Header
	if hdr.KeyID == "" {
		return nil, errors.New("token header has no kid: it names no Nomad signing key")
	}
	keys, err := v.keysFor(ctx, hdr.KeyID)
	if err != nil {
		return nil, err
	}
	payload, err := verifyWith(jws, hdr, keys)
	if err != nil {
		return nil, err
	}

	var c nomadClaims
	if err := json.Unmarshal(payload, &c); err != nil {
		return nil, fmt.Errorf("token claims are not valid JSON claims: %v", err)
	}
	now := v.now()
	if c.Expiry == nil {
		return nil, errors.New("token has no exp claim: Nomad identities always expire")
	}
	exp := c.Expiry.Time()
	if now.After(exp.Add(leeway)) {
		return nil, fmt.Errorf("token expired at %s (now %s): read the identity file again, Nomad renews it", exp.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if c.NotBefore != nil && now.Add(leeway).Before(c.NotBefore.Time()) {
		return nil, fmt.Errorf("token not valid before %s (now %s): check the clocks", c.NotBefore.Time().UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if c.IssuedAt != nil && now.Add(leeway).Before(c.IssuedAt.Time()) {
		return nil, fmt.Errorf("token issued in the future, at %s (now %s): check the clocks", c.IssuedAt.Time().UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	}
	if !slices.Contains(c.Audience, v.Audience) {
		return nil, fmt.Errorf("audience %q not accepted: want %q (the task's identity block needs aud = [%q])", []string(c.Audience), v.Audience, v.Audience)
	}
	if c.AllocationID == "" || c.JobID == "" {
		return nil, errors.New("token lacks nomad_allocation_id or nomad_job_id: not a Nomad workload identity")
	}
	return &Claims{
		Namespace:    c.Namespace,
		JobID:        c.JobID,
		AllocationID: c.AllocationID,
		Task:         c.Task,
		Expiry:       exp,
	}, nil
}

// verifyWith checks the signature with the keys named by the header's kid
// whose type matches its alg (and whose own alg, if set, is the same).
func verifyWith(jws *jose.JSONWebSignature, hdr jose.Header, keys []jose.JSONWebKey) ([]byte, error) {
	alg := jose.SignatureAlgorithm(hdr.Algorithm)
	var matched bool
	for _, k := range keys {
		if k.Algorithm != "" && k.Algorithm != string(alg) {
			continue
		}
		switch k.Key.(type) {
		case *rsa.PublicKey:
			if alg != jose.RS256 {
				continue
			}
		case ed25519.PublicKey:
			if alg != jose.EdDSA {
				continue
			}
		default:
			continue
		}
		matched = true
		if payload, err := jws.Verify(k.Key); err == nil {
			return payload, nil
		}
	}
	if !matched {
		return nil, fmt.Errorf("token alg %s does not match the type of signing key %q", alg, clip(hdr.KeyID))
	}
	return nil, fmt.Errorf("token signature does not verify with signing key %q", clip(hdr.KeyID))
}

// keyMaxAge is how long fetched keys are trusted before they are read again.
const keyMaxAge = 15 * time.Minute

// keysFor returns the cached keys with kid, refetching the JWKS once (shared
// by concurrent callers, at most every MinRefetch) when there are none.
func (v *Verifier) keysFor(ctx context.Context, kid string) ([]jose.JSONWebKey, error) {
	v.mu.Lock()
	if ks := v.keys.Key(kid); len(ks) > 0 {
		// Known: used now, and read again in the background once old, so a
		// key Nomad stopped publishing (rotated out, revoked) is dropped.
		if now := v.now(); v.inflight == nil && now.Sub(v.lastFetch) > keyMaxAge {
			c := &fetchCall{done: make(chan struct{})}
			v.inflight, v.lastFetch = c, now
			go v.fetch(context.WithoutCancel(ctx), c)
		}
		v.mu.Unlock()
		return ks, nil
	}
	c := v.inflight
	if c == nil {
		now := v.now()
		if v.fetched && now.Sub(v.lastFetch) < v.minRefetch() {
			err := v.unknownLocked(kid, v.lastErr)
			v.mu.Unlock()
			return nil, err
		}
		c = &fetchCall{done: make(chan struct{})}
		v.inflight, v.fetched, v.lastFetch = c, true, now
		go v.fetch(context.WithoutCancel(ctx), c)
	}
	v.mu.Unlock()

	select {
	case <-c.done:
	case <-ctx.Done():
		return nil, fmt.Errorf("waiting for Nomad's signing keys: %w", ctx.Err())
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	if ks := v.keys.Key(kid); len(ks) > 0 {
		return ks, nil
	}
	return nil, v.unknownLocked(kid, c.err)
}

func (v *Verifier) unknownLocked(kid string, fetchErr error) error {
	if fetchErr != nil {
		return fmt.Errorf("signing key %q unknown: fetching Nomad's keys failed: %v", clip(kid), fetchErr)
	}
	return fmt.Errorf("signing key %q unknown to Nomad (not in %s)", clip(kid), v.JWKSURL)
}

func (v *Verifier) fetch(ctx context.Context, c *fetchCall) {
	ctx, cancel := context.WithTimeout(ctx, fetchTimeout)
	defer cancel()
	set, err := v.get(ctx)
	v.mu.Lock()
	if err == nil {
		// Replaced, not merged: a key Nomad no longer publishes is not trusted.
		v.keys = set
	}
	v.lastErr, c.err, v.inflight = err, err, nil
	v.mu.Unlock()
	close(c.done)
}

func (v *Verifier) get(ctx context.Context) (jose.JSONWebKeySet, error) {
	var set jose.JSONWebKeySet
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, v.JWKSURL, nil)
	if err != nil {
		return set, err
	}
	req.Header.Set("Accept", "application/json")
	client := v.HTTP
	if client == nil {
		client = defaultHTTP
	}
	resp, err := client.Do(req)
	if err != nil {
		return set, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKS+1))
	if err != nil {
		return set, fmt.Errorf("GET %s: %v", v.JWKSURL, err)
	}
	if resp.StatusCode != http.StatusOK {
		return set, fmt.Errorf("GET %s: HTTP %d", v.JWKSURL, resp.StatusCode)
	}
	if len(body) > maxJWKS {
		return set, fmt.Errorf("GET %s: more than %d bytes", v.JWKSURL, maxJWKS)
	}
	// Key by key: a key of a type go-jose does not know (RFC 7517 §5 says to
	// ignore those) must not make the whole set unusable.
	var raw struct {
		Keys []json.RawMessage `json:"keys"`
	}
	if err := json.Unmarshal(body, &raw); err != nil {
		return set, fmt.Errorf("GET %s: not a JWKS: %v", v.JWKSURL, err)
	}
	for _, r := range raw.Keys {
		var k jose.JSONWebKey
		if err := json.Unmarshal(r, &k); err != nil {
			continue
		}
		if k.Use != "" && k.Use != "sig" {
			continue
		}
		// Public keys only: a JWKS never holds secrets, and a symmetric key
		// anyone can read must not verify anything.
		if pub := k.Public(); pub.Valid() && pub.IsPublic() {
			set.Keys = append(set.Keys, pub)
		}
	}
	return set, nil
}

// clip shortens what an unverified header says before it goes into an error.
func clip(s string) string {
	if len(s) > 64 {
		return s[:64] + "…"
	}
	return s
}

func (v *Verifier) now() time.Time {
	if v.Now != nil {
		return v.Now()
	}
	return time.Now()
}

func (v *Verifier) minRefetch() time.Duration {
	if v.MinRefetch > 0 {
		return v.MinRefetch
	}
	return 10 * time.Second
}
