package gateway

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// linkPage fetches a sign-in link's confirmation page as the browser b.
func linkPage(t *testing.T, b *browser, token string) (int, string, string) {
	t.Helper()
	req := httptest.NewRequest("GET", "/dashboard/login?token="+token, nil)
	if b.cookie != "" {
		req.AddCookie(&http.Cookie{Name: "mj_session", Value: b.cookie})
	}
	r, err := b.h.app.Test(req, 10000)
	if err != nil {
		t.Fatal(err)
	}
	page, _ := io.ReadAll(r.Body)
	return r.StatusCode, string(page), r.Header.Get("Location")
}

// TestLoginLinkPageNamesTheAccount: the confirmation page says which account the
// link signs in to (login CSRF: a link to the attacker's account would make the
// victim's uploads the attacker's), warns when the browser is signed in to
// another account, and does not use the link up.
func TestLoginLinkPageNamesTheAccount(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	acme, err := h.store.CreateAccount(ctx, "acme <media>")
	if err != nil {
		t.Fatal(err)
	}
	token, _, err := h.store.CreateLoginToken(ctx, acme.ID, 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	status, page, _ := linkPage(t, &browser{h: h}, token)
	if status != 200 || !strings.Contains(page, "as account “<strong>acme &lt;media&gt;</strong>”") || strings.Contains(page, "signed in to account") {
		t.Fatalf("the page for a browser with no session: %d %s", status, page)
	}
	// Signed in to alice: the page warns, naming both.
	alice, _ := h.signIn("alice")
	status, page, _ = linkPage(t, alice, token)
	if status != 200 || !strings.Contains(page, "This browser is signed in to account “alice”") || !strings.Contains(page, "acme &lt;media&gt;") {
		t.Fatalf("the page for a browser signed in to alice: %d %s", status, page)
	}
	// A link to the account the browser is signed in to warns of nothing.
	own, _, _ := h.store.CreateLoginToken(ctx, "alice", 10*time.Minute)
	if status, page, _ = linkPage(t, alice, own); status != 200 || !strings.Contains(page, "“<strong>alice</strong>”") || strings.Contains(page, "signed in to account") {
		t.Fatalf("alice's own link: %d %s", status, page)
	}
	// Showing the page used nothing up; an unknown or used link goes to the error.
	if status, _, r := (&browser{h: h}).confirmLink(token, "same-origin"); status != 303 || sessionCookieOf(r) == nil {
		t.Fatalf("the link after its page was shown: %d %v", status, r.Header)
	}
	for _, tok := range []string{token, strings.Repeat("0", 64)} {
		if status, _, loc := linkPage(t, &browser{h: h}, tok); status != 303 || loc != "/dashboard/?error=link" {
			t.Fatalf("the page of a used or unknown link: %d %s", status, loc)
		}
	}
}

// TestLinkSessionEndsWhenDeletingItFails: revoking the account's last key ends
// its sign-in links' sessions and unused links even when deleting them fails (here
// the session index is gone, so revocation finds nothing to delete); a link made
// afterwards lets the account back in.
func TestLinkSessionEndsWhenDeletingItFails(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	token, _, _ := h.store.CreateLoginToken(ctx, "alice", 10*time.Minute)
	unused, _, _ := h.store.CreateLoginToken(ctx, "alice", 10*time.Minute)
	_, _, r := (&browser{h: h}).confirmLink(token, "same-origin")
	b := &browser{h: h, cookie: sessionCookieOf(r).Value}
	if status, _, _ := b.req("GET", "/dashboard/session", nil, false); status != 200 {
		t.Fatalf("the link's session: %d", status)
	}
	if _, err := h.store.Client().Delete(ctx, "/test/session_index/login-link.alice/", clientv3WithPrefix()); err != nil {
		t.Fatal(err)
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
	if sess, err := h.store.Session(ctx, b.cookie); err != nil || sess == nil {
		t.Fatalf("the session was deleted after all (%v): this test proves nothing", err)
	}
	if status, _, _ := b.req("GET", "/dashboard/session", nil, false); status != 401 {
		t.Fatalf("the link's session after the last key was revoked: %d, want 401", status)
	}
	if status, _, loc := linkPage(t, &browser{h: h}, unused); status != 303 || loc != "/dashboard/?error=link" {
		t.Fatalf("the page of a link made before: %d %s", status, loc)
	}
	if status, _, r := (&browser{h: h}).confirmLink(unused, "same-origin"); status != 303 || sessionCookieOf(r) != nil {
		t.Fatalf("a link made before the account was shut out signed in: %d %v", status, r.Header)
	}
	// The operator lets the account back in with a new link.
	again, _, _ := h.store.CreateLoginToken(ctx, "alice", 10*time.Minute)
	_, _, r = (&browser{h: h}).confirmLink(again, "same-origin")
	if c := sessionCookieOf(r); c == nil {
		t.Fatalf("a new link: %v", r.Header)
	} else if status, _, _ := (&browser{h: h, cookie: c.Value}).req("GET", "/dashboard/session", nil, false); status != 200 {
		t.Fatalf("a new link's session: %d", status)
	}
}
