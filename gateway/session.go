package gateway

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"html"
	"net/url"
	"regexp"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
)

// Dashboard sessions (issue 14). A browser signs in with an API key (POST
// /dashboard/session) or a one-time link from `mediajobs accounts login-link`
// (GET /dashboard/login?token=…, confirmed by its page's POST) and gets the
// cookie mj_session: HttpOnly,
// SameSite=Strict, Secure over https. The cookie then authenticates /api requests
// that carry no Authorization header; those that change anything must also carry
// the session's CSRF token in X-CSRF-Token. Sessions live in etcd (store/sessions.go)
// for server.session_ttl, and end with the key that opened them (a link's, when
// the account's last key is revoked: store.revokeAPIKey).

const (
	sessionCookie = "mj_session"
	headerCSRF    = "X-CSRF-Token"
	localSession  = "session"
)

var (
	errNoSession = mj.Errorf(mj.EBadAPIKey, "not signed in, or the session has ended: sign in again")
	errCSRF      = mj.Errorf(mj.EForbidden, "missing or wrong X-CSRF-Token")
)

// safeMethod: the methods that change nothing, and so need no CSRF token.
func safeMethod(m string) bool {
	return m == fiber.MethodGet || m == fiber.MethodHead || m == fiber.MethodOptions
}

// checkSession returns the session whose cookie is id when it is still good: not
// expired, and the key that opened it not revoked. errNoSession otherwise; other
// errors are etcd's.
func (g *Gateway) checkSession(ctx context.Context, id string) (*store.Session, error) {
	return g.readSession(ctx, id, nil)
}

// readSession is checkSession that also sets *unknown (when not nil) when etcd
// holds no session with this id.
func (g *Gateway) readSession(ctx context.Context, id string, unknown *bool) (*store.Session, error) {
	if id == "" {
		return nil, errNoSession
	}
	sess, err := g.Store.Session(ctx, id)
	if mj.ErrorCode(err) == mj.ENotFound {
		if unknown != nil {
			*unknown = true
		}
		return nil, errNoSession
	}
	if err != nil {
		return nil, err
	}
	if !g.Now().Before(sess.ExpiresAt) {
		return nil, errNoSession
	}
	if sess.KeyHash != store.LoginLinkKey {
		if _, err := g.lookupKey(ctx, sess.KeyHash); err == errBadKey {
			return nil, errNoSession
		} else if err != nil {
			return nil, err
		}
		return sess, nil
	}
	// A link's session ends when the account's last key is revoked, even if
	// deleting it failed then.
	if ended, err := g.Store.LinksEnded(ctx, sess.AccountID, sess.Rev); err != nil {
		return nil, err
	} else if ended {
		if err := g.Store.DeleteSession(ctx, id); err != nil {
			g.Log.Warn("end a shut-out account's session", "account", sess.AccountID, "err", err)
		}
		return nil, errNoSession
	}
	return sess, nil
}

// sessionValid tells whether the dashboard session with this id still
// authenticates.
func (g *Gateway) sessionValid(id string) bool {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := g.checkSession(ctx, id)
	return err != errNoSession // etcd briefly down: keep the stream
}

// session is the request's session, from its cookie. A cookie counts against the
// client address's failed authentications until it proves good, and one just
// found bad is answered without reading etcd (authlimit.go).
func (g *Gateway) session(c *fiber.Ctx) (*store.Session, error) {
	// fiber's strings alias fasthttp's reused buffers: the id outlives the request
	// in a stream.
	id := strings.Clone(c.Cookies(sessionCookie))
	if id == "" {
		return nil, errNoSession
	}
	attempt, err := g.beginAuth(c)
	if err != nil {
		return nil, err
	}
	hash := mj.HashAPIKey(id) // bounded, whatever the cookie's length
	if g.badSessions.bad(hash, g.Now()) {
		return nil, errNoSession
	}
	var unknown bool
	sess, err := g.readSession(c.UserContext(), id, &unknown)
	switch {
	case unknown: // a cookie etcd does not know never becomes good
		g.badSessions.put(hash, g.Now(), g.badSessions.generation())
	case err == nil:
		attempt.ok()
	}
	return sess, err
}

// csrfOK tells whether the request carries the session's CSRF token.
func csrfOK(c *fiber.Ctx, sess *store.Session) bool {
	got := c.Get(headerCSRF)
	return got != "" && subtle.ConstantTimeCompare([]byte(got), []byte(sess.CSRFToken)) == 1
}

// cookieAuth authenticates an /api request by its session cookie (authenticate).
func (g *Gateway) cookieAuth(c *fiber.Ctx) error {
	sess, err := g.session(c)
	if err != nil {
		return err
	}
	if !safeMethod(c.Method()) && !csrfOK(c, sess) {
		return errCSRF
	}
	c.Locals(localAccount, sess.AccountID)
	c.Locals(localSession, sess)
	return g.rateLimit(c, sess.AccountID)
}

// secure tells whether the session cookie must be Secure: the request came over
// https (directly, or X-Forwarded-Proto from a proxy), or the public URL is https.
func (g *Gateway) secure(c *fiber.Ctx) bool {
	return c.Protocol() == "https" || strings.HasPrefix(g.Config.Server.PublicURL, "https://")
}

func (g *Gateway) setSessionCookie(c *fiber.Ctx, sess *store.Session) {
	c.Cookie(&fiber.Cookie{Name: sessionCookie, Value: sess.ID, Path: "/",
		MaxAge: int(g.Config.Server.SessionTTLD / time.Second), HTTPOnly: true,
		SameSite: fiber.CookieSameSiteStrictMode, Secure: g.secure(c)})
}

// clearSessionCookie tells the browser to forget the cookie (an expiry in the past:
// fasthttp writes no Max-Age=0).
func (g *Gateway) clearSessionCookie(c *fiber.Ctx) {
	c.Cookie(&fiber.Cookie{Name: sessionCookie, Value: "", Path: "/", Expires: time.Unix(0, 0).UTC(),
		HTTPOnly: true, SameSite: fiber.CookieSameSiteStrictMode, Secure: g.secure(c)})
}

// sessionView answers what the page needs to know of its session.
func (g *Gateway) sessionView(c *fiber.Ctx, sess *store.Session) error {
	a, err := g.Store.Account(c.UserContext(), sess.AccountID)
	if mj.ErrorCode(err) == mj.ENotFound {
		return errNoSession
	}
	if err != nil {
		return err
	}
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.JSON(fiber.Map{"data": fiber.Map{
		"account":    fiber.Map{"id": a.ID, "name": a.Name},
		"csrf_token": sess.CSRFToken,
		"expires_at": sess.ExpiresAt.UTC().Format(time.RFC3339),
	}})
}

// signIn: POST /dashboard/session {"api_key": "mj_…"}.
func (g *Gateway) signIn(c *fiber.Ctx) error {
	// Login CSRF: another site's form (text/plain, a top-level navigation) could
	// sign the browser in to the attacker's account. Only this page's own JSON
	// request may: browsers send no cross-site JSON without a CORS preflight, which
	// this server never grants, and they say where a request comes from.
	if ct := strings.ToLower(c.Get(fiber.HeaderContentType)); !strings.HasPrefix(ct, fiber.MIMEApplicationJSON) {
		return mj.Errorf(mj.EValidation, "send the sign-in as Content-Type: application/json")
	}
	if site := c.Get("Sec-Fetch-Site"); site != "" && site != "same-origin" && site != "none" {
		return mj.Errorf(mj.EForbidden, "sign-in is only accepted from this dashboard's own page")
	}
	body, err := g.jsonBody(c)
	if err != nil {
		return err
	}
	var req struct {
		APIKey string `json:"api_key"`
	}
	if err := json.Unmarshal(body, &req); err != nil {
		return mj.Errorf(mj.EValidation, "request body must be {\"api_key\": \"mj_...\"}: %v", err)
	}
	secret := strings.TrimSpace(req.APIKey)
	if secret == "" {
		return mj.Errorf(mj.EBadAPIKey, "missing API key: send {\"api_key\": \"mj_...\"}")
	}
	hash := mj.HashAPIKey(secret)
	// Failed sign-ins count per client address, not for everyone (authlimit.go).
	key, err := g.authKey(c, hash)
	if err != nil {
		return err
	}
	if err := g.allow(c, &g.limiters, key.AccountID); err != nil {
		return err
	}
	return g.openSession(c, key.AccountID, hash)
}

// openSession starts a session for the account and sets its cookie, ending the
// one the browser had (if any).
func (g *Gateway) openSession(c *fiber.Ctx, accountID, keyHash string) error {
	if old := c.Cookies(sessionCookie); old != "" {
		if err := g.Store.DeleteSession(c.UserContext(), old); err != nil {
			g.Log.Warn("end the previous session", "request_id", requestID(c), "err", err)
		}
	}
	sess, err := g.Store.CreateSession(c.UserContext(), accountID, keyHash, g.Config.Server.SessionTTLD)
	if err != nil {
		return err
	}
	g.setSessionCookie(c, sess)
	c.Locals(localAccount, accountID)
	return g.sessionView(c, sess)
}

// getSession: GET /dashboard/session, the page's session (401 when there is none).
func (g *Gateway) getSession(c *fiber.Ctx) error {
	sess, err := g.session(c)
	if err != nil {
		if err == errNoSession && c.Cookies(sessionCookie) != "" {
			g.clearSessionCookie(c)
		}
		return err
	}
	c.Locals(localAccount, sess.AccountID)
	return g.sessionView(c, sess)
}

// signOut: DELETE /dashboard/session, with the CSRF token. Without a session it
// only clears the cookie.
func (g *Gateway) signOut(c *fiber.Ctx) error {
	sess, err := g.session(c)
	switch {
	case err == errNoSession:
	case err != nil:
		g.clearSessionCookie(c) // the browser forgets it even while etcd is away
		return err
	case !csrfOK(c, sess):
		return errCSRF
	default:
		if err := g.Store.DeleteSession(c.UserContext(), sess.ID); err != nil {
			g.clearSessionCookie(c)
			return err
		}
	}
	g.clearSessionCookie(c)
	c.Set(fiber.HeaderCacheControl, "no-store")
	return c.JSON(fiber.Map{"data": fiber.Map{}})
}

// loginLink: GET /dashboard/login?token=…, a one-time sign-in link made by
// `mediajobs accounts login-link`. It only shows a page asking to sign in, whose
// form posts the token (loginLinkConfirm): another site that links or redirects
// here (login CSRF: signing the browser in to the attacker's account) gets no
// session without the user's click on this page. The page names the account the
// link signs in to (read without using the token up), and warns when the browser
// is signed in to another account: a link from someone else would make the files
// this browser then uploads theirs. A malformed, used or expired link goes to
// /dashboard/?error=link.
func (g *Gateway) loginLink(c *fiber.Ctx) error {
	c.Set(fiber.HeaderCacheControl, "no-store")
	fail := func() error { return c.Redirect("/dashboard/?error=link", fiber.StatusSeeOther) }
	token := c.Query("token")
	if !loginTokenRe.MatchString(token) {
		return fail()
	}
	attempt, err := g.beginAuth(c) // an unknown link counts as a failed sign-in
	if err != nil {
		return fail()
	}
	ctx := c.UserContext()
	t, err := g.Store.LoginToken(ctx, token, g.Now())
	if err != nil {
		if mj.ErrorCode(err) != mj.ENotFound {
			return err
		}
		return fail()
	}
	attempt.ok()
	if ended, err := g.Store.LinksEnded(ctx, t.AccountID, t.Rev); err != nil {
		return err
	} else if ended {
		return fail()
	}
	a, err := g.Store.Account(ctx, t.AccountID)
	if mj.ErrorCode(err) == mj.ENotFound {
		return fail()
	} else if err != nil {
		return err
	}
	warning := ""
	if sess, err := g.checkSession(ctx, c.Cookies(sessionCookie)); err == nil && sess.AccountID != t.AccountID {
		current := sess.AccountID
		if cur, err := g.Store.Account(ctx, sess.AccountID); err == nil {
			current = cur.Name
		}
		warning = `<p><strong>This browser is signed in to account “` + html.EscapeString(current) + `”.</strong> Signing in here ends that session. ` +
			`If you did not ask for a link to “` + html.EscapeString(a.Name) + `”, do not sign in: what you upload there belongs to that account.</p>`
	}
	// The form posts to this page's own origin only; it may not be framed.
	c.Set(fiber.HeaderContentSecurityPolicy, "default-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'")
	c.Type("html", "utf-8")
	return c.SendString(`<!doctype html><html><head><meta charset="utf-8"><title>Sign in to mediajobs</title></head><body>` +
		`<form method="post" action="/dashboard/login"><input type="hidden" name="token" value="` + html.EscapeString(token) + `">` +
		`<p>Sign in to the mediajobs dashboard as account “<strong>` + html.EscapeString(a.Name) + `</strong>” with this one-time link?</p>` + warning +
		`<button type="submit">Sign in as ` + html.EscapeString(a.Name) + `</button></form></body></html>`)
}

// loginTokenRe is the form of a sign-in link's token (store.RandomToken).
var loginTokenRe = regexp.MustCompile(`^[0-9a-f]{64}$`)

// loginLinkConfirm: POST /dashboard/login (token=…), the confirmation page's
// form. Only that page may post it: browsers say where a request comes from
// (Sec-Fetch-Site, else Origin). It opens a session and sends the browser to the
// dashboard; a bad, used or expired link goes to /dashboard/?error=link.
func (g *Gateway) loginLinkConfirm(c *fiber.Ctx) error {
	c.Set(fiber.HeaderCacheControl, "no-store")
	if !sameOrigin(c) {
		return mj.Errorf(mj.EForbidden, "a sign-in link is only accepted from its own confirmation page: open the link itself")
	}
	fail := func() error { return c.Redirect("/dashboard/?error=link", fiber.StatusSeeOther) }
	body, err := g.jsonBody(c) // bounded like any body
	if err != nil {
		return err
	}
	form, err := url.ParseQuery(string(body))
	if err != nil {
		return fail()
	}
	attempt, err := g.beginAuth(c) // a bad link counts as a failed sign-in
	if err != nil {
		return fail()
	}
	t, err := g.Store.ConsumeLoginToken(c.UserContext(), form.Get("token"), g.Now())
	if err != nil {
		if mj.ErrorCode(err) != mj.ENotFound {
			g.Log.Warn("sign-in link", "request_id", requestID(c), "err", err)
		}
		return fail()
	}
	attempt.ok()
	// A link made before the account was shut out opens nothing.
	if ended, err := g.Store.LinksEnded(c.UserContext(), t.AccountID, t.Rev); err != nil || ended {
		return fail()
	}
	if old := c.Cookies(sessionCookie); old != "" {
		if err := g.Store.DeleteSession(c.UserContext(), old); err != nil {
			g.Log.Warn("end the previous session", "request_id", requestID(c), "err", err)
		}
	}
	sess, err := g.Store.CreateSession(c.UserContext(), t.AccountID, store.LoginLinkKey, g.Config.Server.SessionTTLD)
	if err != nil {
		g.Log.Warn("sign-in link: open a session", "request_id", requestID(c), "err", err)
		return fail()
	}
	g.setSessionCookie(c, sess)
	c.Locals(localAccount, t.AccountID)
	return c.Redirect("/dashboard/", fiber.StatusSeeOther)
}

// sameOrigin tells whether a browser says the request comes from this origin:
// Sec-Fetch-Site same-origin, or without it an Origin naming this host. A request
// that says neither (no browser) is let through: it cannot carry a victim's
// browser's state.
func sameOrigin(c *fiber.Ctx) bool {
	if site := c.Get("Sec-Fetch-Site"); site != "" {
		return site == "same-origin"
	}
	origin := c.Get(fiber.HeaderOrigin)
	if origin == "" {
		return true
	}
	u, err := url.Parse(origin)
	return err == nil && strings.EqualFold(u.Host, c.Hostname())
}
