package devstack

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
)

// TestLoginLinkInABrowser: in headless Chromium against the real stack, another
// site (a page on another port: same site, another origin) that redirects the
// browser to a sign-in link, or posts the link's form itself, signs no one in;
// the link itself shows a page whose button signs in to the dashboard.
func TestLoginLinkInABrowser(t *testing.T) {
	e2e.NeedStack(t)
	ctx := browser(t)
	account := e2e.Call(t, "GET", "/api/account", e2e.Stack.APIKey, nil).Data(t)["id"].(string)
	link := func() (string, string) {
		tok, _, err := e2e.Stack.Backends.Store.CreateLoginToken(context.Background(), account, 10*time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		return e2e.Stack.URL + "/dashboard/login?token=" + tok, tok
	}
	signedIn := func() bool {
		var status int
		if err := chromedp.Run(ctx, chromedp.Navigate(e2e.Stack.URL+"/healthz"),
			chromedp.Evaluate(`fetch("/dashboard/session").then(r => r.status)`, &status, awaitPromise)); err != nil {
			t.Fatal(err)
		}
		return status == 200
	}

	redirectTo, _ := link()
	_, postTok := link()
	evil := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/redirect":
			http.Redirect(w, r, redirectTo, http.StatusFound)
		case "/post":
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte(`<form id=f method=post action="` + e2e.Stack.URL + `/dashboard/login"><input type=hidden name=token value="` + postTok + `"></form><script>document.getElementById("f").submit()</script>`))
		}
	}))
	defer evil.Close()

	var body string
	if err := chromedp.Run(ctx, chromedp.Navigate(evil.URL+"/redirect"), chromedp.WaitVisible(`form button[type=submit]`, chromedp.ByQuery)); err != nil {
		t.Fatalf("another site redirecting to the link: %v", err)
	}
	if signedIn() {
		t.Fatal("another site's redirect to a sign-in link signed the browser in")
	}
	if err := chromedp.Run(ctx, chromedp.Navigate(evil.URL+"/post"),
		chromedp.WaitVisible(`//body[contains(., "forbidden")]`), chromedp.Text("body", &body, chromedp.ByQuery)); err != nil {
		t.Fatalf("another site posting the link's form: %v", err)
	}
	if !strings.Contains(body, "confirmation page") || signedIn() {
		t.Fatalf("another site's form post: %q", body)
	}

	// The link itself, then its button (the redirected-to token was not used).
	if err := chromedp.Run(ctx, chromedp.Navigate(redirectTo), chromedp.WaitVisible(`form button[type=submit]`, chromedp.ByQuery),
		chromedp.Click(`form button[type=submit]`, chromedp.ByQuery), chromedp.WaitVisible("#status-filter", chromedp.ByID)); err != nil {
		t.Fatalf("the link's page and its button: %v", err)
	}
	if !signedIn() {
		t.Fatal("the link's button did not sign in")
	}
}

// awaitPromise makes Evaluate wait for the promise the expression returns.
func awaitPromise(p *runtime.EvaluateParams) *runtime.EvaluateParams { return p.WithAwaitPromise(true) }
