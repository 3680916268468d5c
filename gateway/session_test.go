package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// browser is a dashboard client: its session cookie and CSRF token.
type browser struct {
	h      *harness
	cookie string
	csrf   string
}

// req sends a request as the browser: the cookie, no Authorization header, and the
// CSRF token when withCSRF.
func (b *browser) req(method, target string, body any, withCSRF bool, hdr ...string) (int, map[string]any, *http.Response) {
	b.h.t.Helper()
	var rd io.Reader
	if body != nil {
		j, _ := json.Marshal(body)
		rd = strings.NewReader(string(j))
	}
	req := httptest.NewRequest(method, target, rd)
	if body != nil {
		req.Header.Set("Content-Type", "application/json") // as the page's fetch
	}
	if b.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "mj_session", Value: b.cookie})
	}
	if withCSRF {
		req.Header.Set("X-CSRF-Token", b.csrf)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.h.app.Test(req, 10000)
	if err != nil {
		b.h.t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(raw, &m)
	return resp.StatusCode, m, resp
}

func sessionCookieOf(resp *http.Response) *http.Cookie {
	for _, c := range resp.Cookies() {
		if c.Name == "mj_session" {
			return c
		}
	}
	return nil
}

// signIn signs in with the account's key and checks the answer and the cookie.
func (h *harness) signIn(acct string, hdr ...string) (*browser, *http.Cookie) {
	h.t.Helper()
	b := &browser{h: h}
	status, body, resp := b.req("POST", "/dashboard/session", map[string]string{"api_key": h.keys[acct]}, false, hdr...)
	if status != 200 {
		h.t.Fatalf("sign in as %s: HTTP %d %v", acct, status, body)
	}
	d := body["data"].(map[string]any)
	a := d["account"].(map[string]any)
	exp, err := time.Parse(time.RFC3339, fmt.Sprint(d["expires_at"]))
	if a["name"] != acct || a["id"] != acct || len(fmt.Sprint(d["csrf_token"])) < 32 || err != nil || time.Until(exp) < 11*time.Hour || time.Until(exp) > 13*time.Hour {
		h.t.Fatalf("sign-in answer %v", d)
	}
	c := sessionCookieOf(resp)
	if c == nil || !regexp.MustCompile(`^[0-9a-f]{64}$`).MatchString(c.Value) {
		h.t.Fatalf("sign-in cookie: %v", resp.Header.Values("Set-Cookie"))
	}
	if !c.HttpOnly || c.SameSite != http.SameSiteStrictMode || c.Path != "/" || c.MaxAge != 12*3600 {
		h.t.Fatalf("cookie attributes: %q", resp.Header.Get("Set-Cookie"))
	}
	if cc := resp.Header.Get("Cache-Control"); cc != "no-store" {
		h.t.Errorf("sign-in answer Cache-Control %q", cc)
	}
	b.cookie, b.csrf = c.Value, d["csrf_token"].(string)
	return b, c
}

func TestDashboardSignIn(t *testing.T) {
	h := newHarness(t)
	b, c := h.signIn("alice")
	if c.Secure {
		t.Error("Secure cookie over plain http with an http public_url")
	}
	// The page learns its session (and CSRF token) on load.
	status, body, _ := b.req("GET", "/dashboard/session", nil, false)
	if d, _ := body["data"].(map[string]any); status != 200 || d["csrf_token"] != b.csrf || d["account"].(map[string]any)["name"] != "alice" {
		t.Fatalf("GET /dashboard/session: %d %v", status, body)
	}
	// etcd holds no usable cookie: only its hash.
	resp, err := h.store.Client().Get(context.Background(), "/", clientv3WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	for _, kv := range resp.Kvs {
		if strings.Contains(string(kv.Key)+string(kv.Value), b.cookie) {
			t.Fatalf("etcd holds the session id in the clear: %s", kv.Key)
		}
	}

	// Without a cookie, or with one of no session: 401, and a stale cookie is cleared.
	if status, body, _ := (&browser{h: h}).req("GET", "/dashboard/session", nil, false); status != 401 || body["errorCode"] != "badApiKey" {
		t.Fatalf("no cookie: %d %v", status, body)
	}
	status, body, r := (&browser{h: h, cookie: strings.Repeat("ab", 32)}).req("GET", "/dashboard/session", nil, false)
	if sc := sessionCookieOf(r); status != 401 || body["errorCode"] != "badApiKey" || sc == nil || sc.Value != "" || sc.Expires.After(time.Now()) {
		t.Fatalf("unknown cookie: %d %v %q", status, body, r.Header.Values("Set-Cookie"))
	}

	// A bad key: 401 with the API's message, no cookie.
	for _, k := range []string{"mj_nope", ""} {
		status, body, r := (&browser{h: h}).req("POST", "/dashboard/session", map[string]string{"api_key": k}, false)
		if status != 401 || body["errorCode"] != "badApiKey" || sessionCookieOf(r) != nil {
			t.Fatalf("sign in with %q: %d %v", k, status, body)
		}
		if k != "" && body["message"] != "invalid or revoked API key" {
			t.Fatalf("message %q", body["message"])
		}
	}
	if status, body, _ := (&browser{h: h}).req("POST", "/dashboard/session", "not an object", false); status != 400 {
		t.Fatalf("malformed body: %d %v", status, body)
	}

	// Behind a TLS proxy, and with an https public_url: Secure.
	if _, c := h.signIn("bob", "X-Forwarded-Proto", "https"); !c.Secure {
		t.Error("no Secure behind X-Forwarded-Proto: https")
	}
	h.gw.Config.Server.PublicURL = "https://media.example"
	if _, c := h.signIn("bob"); !c.Secure {
		t.Error("no Secure with an https public_url")
	}
}

// With the cookie, /api works; a state-changing request needs the CSRF token; a
// Bearer request ignores cookies altogether.
func TestCookieAuthAndCSRF(t *testing.T) {
	h := newHarness(t)
	b, _ := h.signIn("alice")
	if status, body, _ := b.req("GET", "/api/jobs", nil, false); status != 200 {
		t.Fatalf("GET /api/jobs with the cookie: %d %v", status, body)
	}
	for _, csrf := range []string{"", "wrong"} {
		hdr := []string{}
		if csrf != "" {
			hdr = []string{"X-CSRF-Token", csrf}
		}
		status, body, _ := b.req("POST", "/api/ffmpeg", valid(), false, hdr...)
		if status != 403 || body["errorCode"] != "forbidden" || body["message"] != "missing or wrong X-CSRF-Token" {
			t.Fatalf("POST with the cookie, CSRF %q: %d %v", csrf, status, body)
		}
	}
	if status, _, _ := b.req("POST", "/api/keys", map[string]string{"name": "x"}, false); status != 403 {
		t.Fatalf("POST /api/keys without CSRF: %d", status)
	}
	if n := h.total("alice"); n != 0 {
		t.Fatalf("%d jobs created without the CSRF token", n)
	}
	keys, _ := h.store.ListAPIKeys(context.Background(), "alice")
	if len(keys) != 1 {
		t.Fatalf("a key was created without the CSRF token: %d keys", len(keys))
	}
	status, body, _ := b.req("POST", "/api/ffmpeg", valid(), true)
	if status != 200 || h.total("alice") != 1 {
		t.Fatalf("POST with the cookie and CSRF: %d %v", status, body)
	}

	// Bearer wins: bob's key with alice's cookie is bob, with no CSRF needed; a bad
	// Bearer key is refused although the cookie is good.
	status, body, _ = b.req("POST", "/api/ffmpeg", valid(), false, "Authorization", "Bearer "+h.keys["bob"])
	if status != 200 || h.total("bob") != 1 || h.total("alice") != 1 {
		t.Fatalf("Bearer beside a cookie: %d %v", status, body)
	}
	if status, _, _ := b.req("GET", "/api/jobs", nil, false, "Authorization", "Bearer mj_nope"); status != 401 {
		t.Fatalf("bad Bearer beside a good cookie: %d", status)
	}

	// The per-account rate limit counts cookie requests.
	h.gw.Config.Server.RateLimit, h.gw.Config.Server.RateBurst = 1, 1
	now := time.Now()
	h.gw.Now = func() time.Time { return now }
	b.req("GET", "/api/jobs", nil, false)
	status, body, r := b.req("GET", "/api/jobs", nil, false)
	if status != 429 || r.Header.Get("Retry-After") == "" {
		t.Fatalf("cookie requests past the rate limit: %d %v", status, body)
	}
}

// A session ends with the key that opened it, expires, and ends on sign-out.
func TestSessionEnds(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	spare := mj.NewAPIKeySecret()
	h.store.AddAPIKey(ctx, "alice", "spare", spare)
	b, _ := h.signIn("alice")
	other, _ := h.signIn("alice")
	keys, _ := h.store.ListAPIKeys(ctx, "alice")
	var first string
	for _, k := range keys {
		if k.Hash == mj.HashAPIKey(h.keys["alice"]) {
			first = k.ID
		}
	}
	h.keys["alice"] = spare
	if status, body, _ := h.do("DELETE", "/api/keys/"+first, "alice", nil); status != 200 {
		t.Fatalf("revoke: %d %v", status, body)
	}
	for _, br := range []*browser{b, other} {
		if status, body, _ := br.req("GET", "/api/jobs", nil, false); status != 401 || body["errorCode"] != "badApiKey" {
			t.Fatalf("a revoked key's session on /api: %d %v", status, body)
		}
		if status, _, _ := br.req("GET", "/dashboard/session", nil, false); status != 401 {
			t.Fatalf("a revoked key's session: %d", status)
		}
		if _, err := h.store.Session(ctx, br.cookie); err != mj.ErrNotFound {
			t.Fatalf("a revoked key's session is still stored: %v", err)
		}
	}
	// A session whose key is gone is refused even if it is still stored (the
	// deletion failed, or another gateway revoked the key a moment ago).
	ghost, err := h.store.CreateSession(ctx, "alice", mj.HashAPIKey("mj_gone"), time.Hour)
	if err != nil {
		t.Fatal(err)
	}
	if status, _, _ := (&browser{h: h, cookie: ghost.ID}).req("GET", "/api/jobs", nil, false); status != 401 {
		t.Fatalf("a session of a key that does not exist: %d", status)
	}

	// Expiry: refused once server.session_ttl has passed.
	b, _ = h.signIn("bob")
	now := time.Now()
	h.gw.Now = func() time.Time { return now.Add(12*time.Hour + time.Second) }
	if status, _, _ := b.req("GET", "/api/jobs", nil, false); status != 401 {
		t.Fatalf("an expired session: %d", status)
	}
	h.gw.Now = time.Now

	// Sign-out: needs the CSRF token, then ends the session and clears the cookie.
	if status, body, _ := b.req("DELETE", "/dashboard/session", nil, false); status != 403 || body["errorCode"] != "forbidden" {
		t.Fatalf("sign-out without CSRF: %d %v", status, body)
	}
	if status, _, _ := b.req("GET", "/api/jobs", nil, false); status != 200 {
		t.Fatalf("the session after a refused sign-out: %d", status)
	}
	status, body, r := b.req("DELETE", "/dashboard/session", nil, true)
	c := sessionCookieOf(r)
	if d, ok := body["data"].(map[string]any); status != 200 || !ok || len(d) != 0 || c == nil || c.Value != "" || !c.Expires.Before(time.Now()) {
		t.Fatalf("sign-out: %d %v %q", status, body, r.Header.Values("Set-Cookie"))
	}
	if status, _, _ := b.req("GET", "/api/jobs", nil, false); status != 401 {
		t.Fatalf("the session after sign-out: %d", status)
	}
	if status, _, _ := b.req("DELETE", "/dashboard/session", nil, true); status != 200 {
		t.Fatalf("a second sign-out: %d", status)
	}
}

// A one-time link signs in once.
func TestLoginLink(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	token, _, err := h.store.CreateLoginToken(ctx, "alice", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := h.store.Client().Get(ctx, "/", clientv3WithPrefix())
	for _, kv := range raw.Kvs {
		if strings.Contains(string(kv.Key)+string(kv.Value), token) {
			t.Fatalf("etcd holds the token in the clear: %s", kv.Key)
		}
	}
	anon := &browser{h: h}
	// The link shows a page whose form posts the token; it opens no session.
	r, err := h.app.Test(httptest.NewRequest("GET", "/dashboard/login?token="+token, nil), 10000)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(r.Body)
	if status := r.StatusCode; status != 200 || sessionCookieOf(r) != nil || !strings.Contains(r.Header.Get("Content-Security-Policy"), "form-action 'self'") ||
		!strings.Contains(string(page), `<form method="post" action="/dashboard/login">`) {
		t.Fatalf("login link page: %d %v", status, r.Header)
	}
	status, _, r := anon.confirmLink(token, "same-origin")
	c := sessionCookieOf(r)
	if status != 303 || r.Header.Get("Location") != "/dashboard/" || c == nil || !c.HttpOnly || c.SameSite != http.SameSiteStrictMode {
		t.Fatalf("login link: %d %v", status, r.Header)
	}
	b := &browser{h: h, cookie: c.Value}
	status, body, _ := b.req("GET", "/dashboard/session", nil, false)
	if d, _ := body["data"].(map[string]any); status != 200 || d["account"].(map[string]any)["name"] != "alice" {
		t.Fatalf("the link's session: %d %v", status, body)
	}
	b.csrf = body["data"].(map[string]any)["csrf_token"].(string)
	if status, _, _ := b.req("POST", "/api/ffmpeg", valid(), true); status != 200 {
		t.Fatalf("the link's session on /api: %d", status)
	}

	// Used, unknown, malformed, expired: to the page with error=link, no cookie.
	expired, _, _ := h.store.CreateLoginToken(ctx, "alice", 10*time.Minute)
	for _, name := range []string{"used", "unknown", "none", "expired"} {
		tok := map[string]string{"used": token, "unknown": strings.Repeat("0", 64), "none": "", "expired": expired}[name]
		if name == "expired" {
			h.gw.Now = func() time.Time { return time.Now().Add(11 * time.Minute) }
		}
		status, _, r := anon.confirmLink(tok, "same-origin")
		if status != 303 || r.Header.Get("Location") != "/dashboard/?error=link" || sessionCookieOf(r) != nil {
			t.Fatalf("%s link: %d %v", name, status, r.Header)
		}
	}
	if status, _, r := anon.req("GET", "/dashboard/login", nil, false); status != 303 || r.Header.Get("Location") != "/dashboard/?error=link" {
		t.Fatalf("a link without a token: %d %v", status, r.Header)
	}
}

// confirmLink posts a sign-in link's token as its confirmation page's form does,
// from site (Sec-Fetch-Site; "" for none).
func (b *browser) confirmLink(token, site string, hdr ...string) (int, map[string]any, *http.Response) {
	b.h.t.Helper()
	req := httptest.NewRequest("POST", "/dashboard/login", strings.NewReader(url.Values{"token": {token}}.Encode()))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if site != "" {
		req.Header.Set("Sec-Fetch-Site", site)
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := b.h.app.Test(req, 10000)
	if err != nil {
		b.h.t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(raw, &m)
	return resp.StatusCode, m, resp
}

// TestLoginLinkRefusesCrossSite: another site cannot sign a browser in with its
// own link (login CSRF): a top-level navigation to the link shows the
// confirmation page only, and a form posted from another site is refused
// without using the token.
func TestLoginLinkRefusesCrossSite(t *testing.T) {
	h := newHarness(t)
	token, _, err := h.store.CreateLoginToken(context.Background(), "alice", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	anon := &browser{h: h}
	status, _, r := anon.req("GET", "/dashboard/login?token="+token, nil, false, "Sec-Fetch-Site", "cross-site")
	if sessionCookieOf(r) != nil || status == 303 {
		t.Fatalf("a cross-site navigation to the link signed in: %d %v", status, r.Header)
	}
	for _, c := range [][]string{
		{"cross-site"}, {"same-site"}, {"", "Origin", "https://evil.example"},
	} {
		status, body, r := anon.confirmLink(token, c[0], c[1:]...)
		if status != 403 || sessionCookieOf(r) != nil || body["errorCode"] != "forbidden" {
			t.Fatalf("a form posted from %v: %d %v", c, status, body)
		}
	}
	// The token is still good for the page itself.
	if status, _, r := anon.confirmLink(token, "same-origin"); status != 303 || sessionCookieOf(r) == nil {
		t.Fatalf("the link after refused cross-site posts: %d %v", status, r.Header)
	}
}

// TestLoginLinkSessionEndsWithTheKeys: a session opened by a link ends when the
// account's last API key is revoked.
func TestLoginLinkSessionEndsWithTheKeys(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	token, _, err := h.store.CreateLoginToken(ctx, "alice", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	_, _, r := (&browser{h: h}).confirmLink(token, "same-origin")
	b := &browser{h: h, cookie: sessionCookieOf(r).Value}
	if status, _, _ := b.req("GET", "/dashboard/session", nil, false); status != 200 {
		t.Fatalf("the link's session: %d", status)
	}
	keys, err := h.store.ListAPIKeys(ctx, "alice")
	if err != nil || len(keys) == 0 {
		t.Fatalf("alice's keys: %v %v", keys, err)
	}
	for _, k := range keys {
		if err := h.store.RevokeAnyAPIKey(ctx, "alice", k.ID); err != nil {
			t.Fatal(err)
		}
	}
	if status, _, _ := b.req("GET", "/dashboard/session", nil, false); status != 401 {
		t.Fatalf("the link's session after every key was revoked: %d, want 401", status)
	}
}

// Streams opened with the cookie end when the session does.
func TestCookieEventStream(t *testing.T) {
	h := newHarness(t)
	h.gw.times.heartbeat = 100 * time.Millisecond
	base := h.serve()
	b, _ := h.signIn("alice")
	req, _ := http.NewRequest("GET", base+"/api/events", nil)
	req.AddCookie(&http.Cookie{Name: "mj_session", Value: b.cookie})
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET /api/events with the cookie: %d", resp.StatusCode)
	}
	ch := make(chan sseEvent, 64)
	go readEvents(resp, ch)
	if ev := next(t, ch, "ready"); ev.name != "ready" {
		t.Fatalf("first event %q", ev.name)
	}
	if status, _, _ := b.req("DELETE", "/dashboard/session", nil, true); status != 200 {
		t.Fatalf("sign-out: %d", status)
	}
	ev := next(t, ch, "the end")
	if ev.name != "end" || ev.job["reason"] != "the session ended" {
		t.Fatalf("after sign-out: %q %v", ev.name, ev.job)
	}
}

func TestSignInRateLimited(t *testing.T) {
	h := newHarness(t)
	// Failed sign-ins count per client address (authlimit.go); app.Test's requests
	// all come from one.
	h.gw.Config.Server.AuthFailureRate, h.gw.Config.Server.AuthFailureBurst = 1, 2
	now := time.Now()
	h.gw.Now = func() time.Time { return now }
	anon := &browser{h: h}
	var status int
	var r *http.Response
	for range 3 {
		status, _, r = anon.req("POST", "/dashboard/session", map[string]string{"api_key": "mj_guess"}, false)
	}
	if status != 429 || r.Header.Get("Retry-After") == "" {
		t.Fatalf("third sign-in attempt within a second: %d", status)
	}
	status, _, r = anon.confirmLink(strings.Repeat("0", 64), "same-origin")
	if status != 303 || r.Header.Get("Location") != "/dashboard/?error=link" {
		t.Fatalf("link past the limit: %d %v", status, r.Header)
	}
}

func TestRootAndSecurityHeaders(t *testing.T) {
	h := newHarness(t)
	status, _, hdr := h.do("GET", "/", "", nil)
	if status != 302 || hdr.Get("Location") != "/dashboard/" {
		t.Fatalf("GET /: %d %v", status, hdr)
	}
	for _, target := range []string{"/", "/healthz", "/api/jobs", "/api/nothing", "/dashboard/session", "/api/docs"} {
		_, _, hdr := h.do("GET", target, "alice", nil)
		if hdr.Get("X-Content-Type-Options") != "nosniff" || hdr.Get("Referrer-Policy") != "no-referrer" || hdr.Get("X-Frame-Options") != "DENY" {
			t.Errorf("%s: headers %v", target, hdr)
		}
	}
	// HTML keeps its own policy (the API reference's), or gets a strict one.
	if _, _, hdr := h.do("GET", "/api/docs", "", nil); hdr.Get("Content-Security-Policy") != apiDocsCSP {
		t.Errorf("/api/docs CSP %q", hdr.Get("Content-Security-Policy"))
	}
	app := fiber.New()
	app.Use(securityHeaders)
	app.Get("/page", func(c *fiber.Ctx) error { c.Type("html"); return c.SendString("<p>hi") })
	resp, _ := app.Test(httptest.NewRequest("GET", "/page", nil))
	if resp.Header.Get("Content-Security-Policy") != defaultCSP {
		t.Errorf("an HTML answer without a policy: CSP %q", resp.Header.Get("Content-Security-Policy"))
	}
	// Downloads: nosniff (and attachment, TestDownloadIsAttachment), nothing else.
	key := "tmp/alice/x.txt"
	h.gw.Blobs.Put(context.Background(), key, strings.NewReader("hello"), 100)
	u, _ := url.Parse(h.gw.Signer.URL("GET", key, key, time.Now().Add(time.Hour)))
	_, _, hdr = h.do("GET", u.RequestURI(), "", nil)
	if hdr.Get("X-Content-Type-Options") != "nosniff" || hdr.Get("Content-Security-Policy") != "" {
		t.Errorf("download headers %v", hdr)
	}
}

// /files/ links answer byte ranges (players seek in a video), over a real
// connection.
func TestFileRanges(t *testing.T) {
	h := newHarness(t)
	base := h.serve()
	content := ""
	for i := 0; i < 100; i++ {
		content += string(rune('a' + i%26))
	}
	key := "tmp/alice/video.mp4"
	if _, err := h.gw.Blobs.Put(context.Background(), key, strings.NewReader(content), 1000); err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(h.gw.Signer.URL("GET", key, key, time.Now().Add(time.Hour)))
	link := base + u.RequestURI()
	get := func(method string, hdr ...string) (*http.Response, string) {
		t.Helper()
		req, _ := http.NewRequest(method, link, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp, string(b)
	}
	full, body := get("GET")
	etag, mod := full.Header.Get("ETag"), full.Header.Get("Last-Modified")
	if full.StatusCode != 200 || body != content || full.Header.Get("Accept-Ranges") != "bytes" || etag == "" || mod == "" ||
		full.Header.Get("Content-Type") != "video/mp4" || !strings.HasPrefix(full.Header.Get("Content-Disposition"), "attachment") {
		t.Fatalf("full GET: %d %v", full.StatusCode, full.Header)
	}
	for _, c := range []struct {
		rng, want, contentRange string
	}{
		{"bytes=10-19", content[10:20], "bytes 10-19/100"},
		{"bytes=95-", content[95:], "bytes 95-99/100"},
		{"bytes=-5", content[95:], "bytes 95-99/100"},
		{"bytes=90-500", content[90:], "bytes 90-99/100"},
		{"bytes=0-0", content[:1], "bytes 0-0/100"},
		{"bytes=90-99999999999999999999", content[90:], "bytes 90-99/100"}, // past int64: clamped
	} {
		resp, got := get("GET", "Range", c.rng)
		if resp.StatusCode != 206 || got != c.want || resp.Header.Get("Content-Range") != c.contentRange || resp.ContentLength != int64(len(c.want)) {
			t.Errorf("Range %s: %d %q %v", c.rng, resp.StatusCode, got, resp.Header)
		}
	}
	if resp, _ := get("GET", "Range", "bytes=100-"); resp.StatusCode != 416 || resp.Header.Get("Content-Range") != "bytes */100" {
		t.Errorf("unsatisfiable range: %d %v", resp.StatusCode, resp.Header)
	}
	for _, rng := range []string{"bytes=0-1,5-6", "bytes=x-y", "items=0-1", "bytes=5-1"} {
		if resp, got := get("GET", "Range", rng); resp.StatusCode != 200 || got != content {
			t.Errorf("Range %s: %d, %d bytes; want the whole file", rng, resp.StatusCode, len(got))
		}
	}
	// If-Range: the range only while the file is the version named.
	if resp, got := get("GET", "Range", "bytes=0-9", "If-Range", etag); resp.StatusCode != 206 || got != content[:10] {
		t.Errorf("If-Range with the ETag: %d", resp.StatusCode)
	}
	if resp, got := get("GET", "Range", "bytes=0-9", "If-Range", mod); resp.StatusCode != 206 || got != content[:10] {
		t.Errorf("If-Range with the date: %d", resp.StatusCode)
	}
	for _, v := range []string{`"other"`, "W/" + etag, "Mon, 02 Jan 2006 15:04:05 GMT"} {
		if resp, got := get("GET", "Range", "bytes=0-9", "If-Range", v); resp.StatusCode != 200 || got != content {
			t.Errorf("If-Range %s: %d", v, resp.StatusCode)
		}
	}
	// HEAD: the headers, no body.
	if resp, got := get("HEAD"); resp.StatusCode != 200 || resp.ContentLength != 100 || got != "" || resp.Header.Get("Accept-Ranges") != "bytes" {
		t.Errorf("HEAD: %d %d %q", resp.StatusCode, resp.ContentLength, got)
	}
	if resp, _ := get("HEAD", "Range", "bytes=0-9"); resp.StatusCode != 206 || resp.ContentLength != 10 {
		t.Errorf("HEAD with a range: %d %d", resp.StatusCode, resp.ContentLength)
	}
	// The signature still counts.
	req, _ := http.NewRequest("GET", strings.Replace(link, "sig=", "sig=x", 1), nil)
	req.Header.Set("Range", "bytes=0-9")
	if resp, err := http.DefaultClient.Do(req); err != nil || resp.StatusCode != 403 {
		t.Errorf("tampered link with a range: %v %v", resp, err)
	}
}

// the store's prefix scan, for the tests above
func clientv3WithPrefix() clientv3.OpOption { return clientv3.WithPrefix() }

// Login CSRF: another site's form (text/plain JSON-looking body, or any request a
// browser marks cross-site) cannot sign the browser in to some account.
func TestSignInRefusesOtherSites(t *testing.T) {
	h := newHarness(t)
	body := `{"api_key":"` + h.keys["alice"] + `","x":"="}`
	req := httptest.NewRequest("POST", "/dashboard/session", strings.NewReader(body))
	req.Header.Set("Content-Type", "text/plain")
	resp, err := h.app.Test(req, 10000)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 400 || sessionCookieOf(resp) != nil {
		t.Fatalf("text/plain sign-in: %d, cookie %v", resp.StatusCode, sessionCookieOf(resp))
	}
	b := &browser{h: h}
	status, _, resp2 := b.req("POST", "/dashboard/session", map[string]string{"api_key": h.keys["alice"]}, false, "Sec-Fetch-Site", "cross-site")
	if status != 403 || sessionCookieOf(resp2) != nil {
		t.Fatalf("cross-site sign-in: %d", status)
	}
}
