package workload

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/testenv"
)

// jwks serves a JWKS that tests change, and counts the fetches.
type jwks struct {
	mu      sync.Mutex
	keys    []any // public keys' JSON forms
	fetches atomic.Int32
	gate    chan struct{} // when set, each fetch waits for it to close
	srv     *httptest.Server
}

func newJWKS(t *testing.T) *jwks {
	j := &jwks{}
	j.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		j.fetches.Add(1)
		j.mu.Lock()
		gate := j.gate
		body, err := json.Marshal(map[string]any{"keys": j.keys})
		j.mu.Unlock()
		if gate != nil {
			<-gate
		}
		if err != nil {
			http.Error(w, err.Error(), 500)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write(body)
	}))
	t.Cleanup(j.srv.Close)
	return j
}

func (j *jwks) url() string { return j.srv.URL + "/.well-known/jwks.json" }

// set publishes keys (each a jose.JSONWebKey or raw JSON) in place of the old ones.
func (j *jwks) set(keys ...any) {
	j.mu.Lock()
	defer j.mu.Unlock()
	j.keys = keys
}

type signKey struct {
	kid  string
	alg  jose.SignatureAlgorithm
	priv any
}

func (k signKey) public() jose.JSONWebKey {
	var pub any
	switch p := k.priv.(type) {
	case *rsa.PrivateKey:
		pub = p.Public()
	case ed25519.PrivateKey:
		pub = p.Public()
	}
	return jose.JSONWebKey{Key: pub, KeyID: k.kid, Algorithm: string(k.alg), Use: "sig"}
}

func rsaKey(t *testing.T, kid string) signKey {
	t.Helper()
	priv, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		t.Fatal(err)
	}
	return signKey{kid: kid, alg: jose.RS256, priv: priv}
}

func edKey(t *testing.T, kid string) signKey {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return signKey{kid: kid, alg: jose.EdDSA, priv: priv}
}

var t0 = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// claims are those of a Nomad task identity issued at t0 for an hour.
func claims() map[string]any {
	return map[string]any{
		"aud":                 []string{"mediajobs"},
		"exp":                 t0.Add(time.Hour).Unix(),
		"iat":                 t0.Unix(),
		"nbf":                 t0.Unix(),
		"jti":                 "c2b5c7e4-jti",
		"sub":                 "global:default:warm:runners:runner:mediajobs",
		"nomad_namespace":     "default",
		"nomad_job_id":        "warm",
		"nomad_allocation_id": "7d1f3c5e-0000-4000-8000-000000000001",
		"nomad_task":          "runner",
	}
}

func sign(t *testing.T, k signKey, c map[string]any) string {
	t.Helper()
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: k.alg, Key: jose.JSONWebKey{Key: k.priv, KeyID: k.kid}}, (&jose.SignerOptions{}).WithType("JWT"))
	if err != nil {
		t.Fatal(err)
	}
	payload, _ := json.Marshal(c)
	jws, err := s.Sign(payload)
	if err != nil {
		t.Fatal(err)
	}
	tok, err := jws.CompactSerialize()
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// clock is a test's Now, moved by hand.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.now }
func (c *clock) add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newVerifier(j *jwks, c *clock) *Verifier {
	return &Verifier{JWKSURL: j.url(), Audience: "mediajobs", Now: c.Now}
}

// refused checks Verify refuses token with an error containing want, and that
// the error does not quote the token or any of its parts.
func refused(t *testing.T, v *Verifier, token, want string) {
	t.Helper()
	c, err := v.Verify(context.Background(), token)
	if err == nil {
		t.Fatalf("accepted %+v, want an error containing %q", c, want)
	}
	if !strings.Contains(err.Error(), want) {
		t.Fatalf("error %q, want it to contain %q", err, want)
	}
	for _, part := range strings.Split(token, ".") {
		if len(part) > 8 && strings.Contains(err.Error(), part) {
			t.Fatalf("error %q quotes the token", err)
		}
	}
}

func TestVerifyRSAAndEd25519(t *testing.T) {
	j := newJWKS(t)
	r, e := rsaKey(t, "rsa-1"), edKey(t, "ed-1")
	j.set(r.public(), e.public())
	v := newVerifier(j, &clock{now: t0.Add(time.Minute)})
	for _, k := range []signKey{r, e, r, e} {
		c, err := v.Verify(context.Background(), sign(t, k, claims())+"\n")
		if err != nil {
			t.Fatalf("%s: %v", k.alg, err)
		}
		want := Claims{Namespace: "default", JobID: "warm", AllocationID: "7d1f3c5e-0000-4000-8000-000000000001", Task: "runner", Expiry: time.Unix(t0.Add(time.Hour).Unix(), 0)}
		if *c != want {
			t.Fatalf("%s: claims %+v, want %+v", k.alg, *c, want)
		}
	}
	if n := j.fetches.Load(); n != 1 {
		t.Fatalf("%d JWKS fetches, want 1: keys are cached", n)
	}
	// "aud" as a single string is the same audience.
	c := claims()
	c["aud"] = "mediajobs"
	if _, err := v.Verify(context.Background(), sign(t, e, c)); err != nil {
		t.Fatal(err)
	}
}

func TestVerifyRotation(t *testing.T) {
	j := newJWKS(t)
	old, next := rsaKey(t, "old"), edKey(t, "next")
	j.set(old.public())
	clk := &clock{now: t0.Add(time.Minute)}
	v := newVerifier(j, clk)
	if _, err := v.Verify(context.Background(), sign(t, old, claims())); err != nil {
		t.Fatal(err)
	}

	// Nomad rotates: the new kid is fetched, even right after the last fetch
	// (MinRefetch has passed since the first).
	j.set(old.public(), next.public())
	clk.add(11 * time.Second)
	if _, err := v.Verify(context.Background(), sign(t, next, claims())); err != nil {
		t.Fatalf("rotated key: %v", err)
	}
	if n := j.fetches.Load(); n != 2 {
		t.Fatalf("%d fetches, want 2", n)
	}

	// A kid Nomad does not publish is refused after one refetch...
	stranger := edKey(t, "stranger")
	clk.add(11 * time.Second)
	refused(t, v, sign(t, stranger, claims()), `signing key "stranger" unknown to Nomad`)
	if n := j.fetches.Load(); n != 3 {
		t.Fatalf("%d fetches, want 3", n)
	}
	// ...and does not refetch again within MinRefetch.
	for range 5 {
		refused(t, v, sign(t, stranger, claims()), `signing key "stranger" unknown to Nomad`)
	}
	if n := j.fetches.Load(); n != 3 {
		t.Fatalf("%d fetches, want 3: refetches are rate limited", n)
	}
	// Known keys still verify meanwhile.
	if _, err := v.Verify(context.Background(), sign(t, old, claims())); err != nil {
		t.Fatal(err)
	}

	// A key Nomad stopped publishing is dropped at the next refetch.
	j.set(next.public())
	clk.add(11 * time.Second)
	refused(t, v, sign(t, stranger, claims()), "unknown to Nomad")
	refused(t, v, sign(t, old, claims()), `signing key "old" unknown to Nomad`)
}

// TestVerifySharedFetch: callers that meet an unknown kid at once share one fetch.
func TestVerifySharedFetch(t *testing.T) {
	j := newJWKS(t)
	k := edKey(t, "k")
	j.set(k.public())
	gate := make(chan struct{})
	j.gate = gate
	v := newVerifier(j, &clock{now: t0})
	tok := sign(t, k, claims())
	const n = 16
	errs := make(chan error, n)
	for range n {
		go func() {
			_, err := v.Verify(context.Background(), tok)
			errs <- err
		}()
	}
	// Let the fetch finish once one has started; later callers find the key cached.
	testenv.Eventually(t, 10*time.Second, "a JWKS fetch", func() bool { return j.fetches.Load() > 0 })
	close(gate)
	for range n {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
	if got := j.fetches.Load(); got != 1 {
		t.Fatalf("%d fetches, want 1 shared", got)
	}
}

func TestVerifyTimes(t *testing.T) {
	j := newJWKS(t)
	k := rsaKey(t, "k")
	j.set(k.public())
	clk := &clock{}
	v := newVerifier(j, clk)
	tok := sign(t, k, claims())
	exp := t0.Add(time.Hour)

	clk.now = exp.Add(31 * time.Second)
	refused(t, v, tok, "token expired at "+exp.Format(time.RFC3339))
	clk.now = exp.Add(20 * time.Second) // within the leeway
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatal(err)
	}

	clk.now = t0.Add(-31 * time.Second)
	refused(t, v, tok, "not valid before")
	clk.now = t0.Add(-20 * time.Second)
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatal(err)
	}

	c := claims()
	delete(c, "nbf")
	clk.now = t0.Add(-31 * time.Second)
	refused(t, v, sign(t, k, c), "issued in the future")
	delete(c, "iat")
	if _, err := v.Verify(context.Background(), sign(t, k, c)); err != nil {
		t.Fatalf("nbf and iat are optional: %v", err)
	}
	delete(c, "exp")
	refused(t, v, sign(t, k, c), "no exp claim")
}

func TestVerifyClaims(t *testing.T) {
	j := newJWKS(t)
	k := edKey(t, "k")
	j.set(k.public())
	v := newVerifier(j, &clock{now: t0})

	c := claims()
	c["aud"] = []string{"vault.io", "consul.io"}
	refused(t, v, sign(t, k, c), `audience ["vault.io" "consul.io"] not accepted`)
	delete(c, "aud")
	refused(t, v, sign(t, k, c), "not accepted")

	for _, claim := range []string{"nomad_allocation_id", "nomad_job_id"} {
		c := claims()
		delete(c, claim)
		refused(t, v, sign(t, k, c), "lacks nomad_allocation_id or nomad_job_id")
	}
}

func b64(s string) string { return base64.RawURLEncoding.EncodeToString([]byte(s)) }

func TestVerifyRefusesAlgs(t *testing.T) {
	j := newJWKS(t)
	r, e := rsaKey(t, "rsa"), edKey(t, "ed")
	// An HMAC key in the set too: a JWKS is public, so it must verify nothing.
	secret := []byte("0123456789abcdef0123456789abcdef")
	j.set(r.public(), e.public(), jose.JSONWebKey{Key: secret, KeyID: "hmac", Algorithm: "HS256"})
	v := newVerifier(j, &clock{now: t0})
	payload, _ := json.Marshal(claims())

	// alg none, with and without a signature part.
	for _, kid := range []string{"rsa", "ed", ""} {
		hdr := b64(`{"alg":"none","typ":"JWT","kid":"` + kid + `"}`)
		refused(t, v, hdr+"."+b64(string(payload))+".", `alg "none", not accepted`)
		refused(t, v, hdr+"."+b64(string(payload))+"."+b64("x"), `alg "none", not accepted`)
	}

	// HS256 with the published key (or the RSA key's modulus) as the secret.
	refused(t, v, sign(t, signKey{kid: "hmac", alg: jose.HS256, priv: secret}, claims()), `alg "HS256", not accepted`)
	n := r.priv.(*rsa.PrivateKey).N.Bytes()
	refused(t, v, sign(t, signKey{kid: "rsa", alg: jose.HS256, priv: n}, claims()), `alg "HS256", not accepted`)
	// Other asymmetric algs Nomad does not use.
	refused(t, v, sign(t, signKey{kid: "rsa", alg: jose.PS256, priv: r.priv}, claims()), `alg "PS256", not accepted`)
	refused(t, v, sign(t, signKey{kid: "rsa", alg: jose.RS512, priv: r.priv}, claims()), `alg "RS512", not accepted`)

	// An allowed alg that does not match the named key's type.
	other := rsaKey(t, "ed")
	refused(t, v, sign(t, other, claims()), `token alg RS256 does not match the type of signing key "ed"`)
	otherEd := edKey(t, "rsa")
	refused(t, v, sign(t, otherEd, claims()), `token alg EdDSA does not match the type of signing key "rsa"`)

	// The header names a known kid, but another key signed.
	refused(t, v, sign(t, rsaKey(t, "rsa"), claims()), `does not verify with signing key "rsa"`)
	refused(t, v, sign(t, edKey(t, "ed"), claims()), `does not verify with signing key "ed"`)

	// A tampered payload.
	tok := strings.Split(sign(t, e, claims()), ".")
	c := claims()
	c["nomad_job_id"] = "other"
	forged, _ := json.Marshal(c)
	refused(t, v, tok[0]+"."+b64(string(forged))+"."+tok[2], `does not verify with signing key "ed"`)

	// No kid.
	s, err := jose.NewSigner(jose.SigningKey{Algorithm: jose.EdDSA, Key: e.priv}, nil)
	if err != nil {
		t.Fatal(err)
	}
	jws, _ := s.Sign(payload)
	nokid, _ := jws.CompactSerialize()
	refused(t, v, nokid, "no kid")

	// Not a compact JWS.
	refused(t, v, "", "no workload identity token")
	refused(t, v, "abc.def", "malformed")
	refused(t, v, jws.FullSerialize(), "malformed")
}

func TestVerifyJWKSProblems(t *testing.T) {
	k := edKey(t, "k")
	tok := sign(t, k, claims())

	// A key of a type go-jose does not know is skipped, not fatal to the set.
	j := newJWKS(t)
	j.set(json.RawMessage(`{"kty":"ML-DSA","kid":"pq","x":"AAAA"}`), k.public())
	if _, err := newVerifier(j, &clock{now: t0}).Verify(context.Background(), tok); err != nil {
		t.Fatal(err)
	}

	// A key for encryption ("use":"enc") does not verify signatures.
	enc := k.public()
	enc.Use = "enc"
	j.set(enc)
	refused(t, newVerifier(j, &clock{now: t0}), tok, `signing key "k" unknown to Nomad`)

	// Nomad unreachable: the fetch error says so, and is not retried at once.
	down := newJWKS(t)
	down.srv.Close()
	clk := &clock{now: t0}
	v := newVerifier(down, clk)
	refused(t, v, tok, `signing key "k" unknown: fetching Nomad's keys failed`)
	refused(t, v, tok, "fetching Nomad's keys failed")

	// Not a JWKS.
	bad := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/404" {
			http.NotFound(w, r)
			return
		}
		w.Write([]byte("<html>"))
	}))
	defer bad.Close()
	refused(t, &Verifier{JWKSURL: bad.URL, Audience: "mediajobs", Now: clk.Now}, tok, "not a JWKS")
	refused(t, &Verifier{JWKSURL: bad.URL + "/404", Audience: "mediajobs", Now: clk.Now}, tok, "HTTP 404")

	refused(t, &Verifier{JWKSURL: j.url()}, tok, "JWKSURL and Audience must be set")
}

// TestVerifyContext: a caller whose context ends stops waiting for a slow fetch.
func TestVerifyContext(t *testing.T) {
	j := newJWKS(t)
	k := edKey(t, "k")
	j.set(k.public())
	gate := make(chan struct{})
	j.gate = gate
	defer close(gate)
	v := newVerifier(j, &clock{now: t0})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := v.Verify(ctx, sign(t, k, claims()))
		done <- err
	}()
	testenv.Eventually(t, 10*time.Second, "a JWKS fetch", func() bool { return j.fetches.Load() > 0 })
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("got %v, want context.Canceled", err)
	}
}

// TestVerifyNomadIdentity verifies the identity a real Nomad dev agent writes
// into a task's secrets dir, as a warm runner would present it.
func TestVerifyNomadIdentity(t *testing.T) {
	agent, err := testenv.StartNomad(testenv.NomadBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	out := t.TempDir()
	jwtPath := filepath.Join(out, "jwt")
	const id = "workload-identity-test"
	hcl := fmt.Sprintf(`
job %q {
  type        = "batch"
  datacenters = ["*"]
  group "warm" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    task "runner" {
      driver = "raw_exec"
      config {
        command = "/bin/sh"
        # Copied then renamed, so the test never reads a partial file; the
        # sleep is the task's life.
        args = ["-c", "cp \"$NOMAD_SECRETS_DIR/nomad_mediajobs.jwt\" %[2]s.tmp && mv %[2]s.tmp %[2]s && exec sleep 300"]
      }
      identity {
        name = "mediajobs"
        aud  = ["mediajobs"]
        ttl  = "1h"
        file = true
      }
      kill_timeout = "1s"
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
`, id, jwtPath)
	jobs := agent.Client.Jobs()
	job, err := jobs.ParseHCLOpts(&api.JobsParseRequest{JobHCL: hcl, Canonicalize: true})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if resp, _, err := jobs.Register(job, nil); err != nil || resp.Warnings != "" {
		t.Fatalf("register: %v %+v", err, resp)
	}
	// Stop it and wait for its task to end before the agent goes: a stopped
	// agent leaves its tasks running. Not purged, so the allocation stays
	// readable until it is terminal.
	defer func() {
		if _, _, err := jobs.Deregister(id, false, nil); err != nil {
			t.Errorf("stop: %v", err)
			return
		}
		testenv.Eventually(t, 60*time.Second, "the job to stop", func() bool {
			allocs, _, err := jobs.Allocations(id, true, nil)
			if err != nil {
				return false
			}
			for _, a := range allocs {
				if a.ClientStatus != api.AllocClientStatusComplete && a.ClientStatus != api.AllocClientStatusFailed && a.ClientStatus != api.AllocClientStatusLost {
					return false
				}
			}
			return true
		})
	}()

	var alloc *api.AllocationListStub
	testenv.Eventually(t, 90*time.Second, "the task running and its identity copied", func() bool {
		allocs, _, err := jobs.Allocations(id, false, nil)
		if err != nil || len(allocs) != 1 || allocs[0].ClientStatus != api.AllocClientStatusRunning {
			return false
		}
		alloc = allocs[0]
		_, err = os.Stat(jwtPath)
		return err == nil
	})
	tok, err := os.ReadFile(jwtPath)
	if err != nil {
		t.Fatal(err)
	}

	// Which alg Nomad signs with (RS256 or EdDSA, the two accepted).
	hdr, _, _ := strings.Cut(string(tok), ".")
	raw, err := base64.RawURLEncoding.DecodeString(hdr)
	if err != nil {
		t.Fatal(err)
	}
	var h struct{ Alg, Kid string }
	if err := json.Unmarshal(raw, &h); err != nil {
		t.Fatal(err)
	}
	t.Logf("Nomad signed the workload identity with alg %s (kid %s)", h.Alg, h.Kid)

	v := &Verifier{JWKSURL: agent.Addr + "/.well-known/jwks.json", Audience: "mediajobs"}
	c, err := v.Verify(context.Background(), string(tok))
	if err != nil {
		t.Fatalf("verify: %v", err)
	}
	for _, k := range v.keys.Keys {
		t.Logf("Nomad publishes key %s: %T, alg %s", k.KeyID, k.Key, k.Algorithm)
	}
	if c.AllocationID != alloc.ID || c.JobID != id || c.Namespace != "default" || c.Task != "runner" {
		t.Fatalf("claims %+v, want allocation %s of job %s, task runner in default", c, alloc.ID, id)
	}
	if now := time.Now(); !c.Expiry.After(now) || c.Expiry.After(now.Add(time.Hour+time.Minute)) {
		t.Fatalf("expiry %s, want within the hour ttl from %s", c.Expiry, now)
	}

	// The same token for another audience is refused.
	other := &Verifier{JWKSURL: v.JWKSURL, Audience: "vault.io"}
	refused(t, other, string(tok), `audience ["mediajobs"] not accepted`)
}

// TestVerifyReadsOldKeysAgain: a key Nomad stopped publishing is dropped once
// the keys are older than keyMaxAge, even though no unknown kid asked for them:
// the first use after that reads them again in the background.
func TestVerifyReadsOldKeysAgain(t *testing.T) {
	j := newJWKS(t)
	k := rsaKey(t, "k")
	j.set(k.public())
	clk := &clock{now: t0}
	v := newVerifier(j, clk)
	tok := sign(t, k, claims())
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatal(err)
	}
	j.set(rsaKey(t, "other").public()) // k revoked
	clk.add(keyMaxAge + time.Second)
	if _, err := v.Verify(context.Background(), tok); err != nil {
		t.Fatalf("a cached key is used while it is read again: %v", err)
	}
	testenv.Eventually(t, 10*time.Second, "the keys to be read again", func() bool {
		v.mu.Lock()
		defer v.mu.Unlock()
		return j.fetches.Load() == 2 && v.inflight == nil
	})
	refused(t, v, tok, `signing key "k" unknown`)
}
