package devstack

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
	"github.com/mediajobs/mediajobs/testenv"
)

// browser starts a headless Chromium (Debian's) that can reach loopback only: every
// other host name resolves to nothing, and background services are off.
func browser(t *testing.T) context.Context {
	t.Helper()
	bin := testenv.Binary(t, "chromium")
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root in CI
		chromedp.Flag("host-resolver-rules", "MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"),
		chromedp.Flag("disable-component-update", true),
		chromedp.Flag("disable-features", "Translate,OptimizationHints,MediaRouter,DialMediaRouteProvider"),
		chromedp.WindowSize(1200, 900),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 4*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancelCtx(); cancelAlloc() })
	// confirm() dialogs (revoke, cancel) are accepted.
	chromedp.ListenTarget(ctx, func(ev any) {
		if _, ok := ev.(*page.EventJavascriptDialogOpening); ok {
			go chromedp.Run(ctx, page.HandleJavaScriptDialog(true))
		}
	})
	if err := chromedp.Run(ctx); err != nil {
		t.Fatalf("start chromium: %v", err)
	}
	return ctx
}

// screenshot saves the page under $MEDIAJOBS_SCREENSHOTS (docs/screenshots when
// refreshing the README's pictures), or nowhere.
func screenshot(t *testing.T, ctx context.Context, name string) {
	dir := os.Getenv("MEDIAJOBS_SCREENSHOTS")
	if dir == "" {
		return
	}
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatalf("screenshot %s: %v", name, err)
	}
	os.MkdirAll(dir, 0o755)
	if err := os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestDashboardInABrowser drives the dashboard in headless Chromium against the
// real stack: sign in with a key; create a key and see it listed; revoke it and see
// the API refuse it; upload a local file through the job form, watch the job
// succeed without a reload, and see the video preview load; see its usage in the
// Usage area; sign out.
func TestDashboardInABrowser(t *testing.T) {
	e2e.NeedStack(t)
	ctx := browser(t)
	clip := filepath.Join(t.TempDir(), "clip.mp4")
	e2e.WriteFile(t, clip, string(e2e.Call(t, "GET", e2e.ClipURL, "", nil).Body))

	// / leads to the dashboard's sign-in.
	var loc string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(e2e.Stack.URL+"/"),
		chromedp.WaitVisible("#api-key", chromedp.ByID),
		chromedp.Location(&loc),
	); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(loc, "/dashboard/") {
		t.Fatalf("/ went to %s", loc)
	}
	screenshot(t, ctx, "signin")
	// A wrong key is refused with the API's message.
	var msg string
	if err := chromedp.Run(ctx,
		chromedp.SendKeys("#api-key", "mj_not_a_key", chromedp.ByID),
		chromedp.Click(`#signin button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible(`//p[@id="signin-error" and normalize-space(text()) != ""]`),
		chromedp.Text("#signin-error", &msg, chromedp.ByID),
	); err != nil || !strings.Contains(msg, "API key") {
		t.Fatalf("wrong key: %q %v", msg, err)
	}
	if err := chromedp.Run(ctx,
		chromedp.Evaluate(`document.getElementById("api-key").value = ""`, nil),
		chromedp.SendKeys("#api-key", e2e.Stack.APIKey, chromedp.ByID),
		chromedp.Click(`#signin button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible("#status-filter", chromedp.ByID),
	); err != nil {
		t.Fatalf("sign in: %v", err)
	}

	// Keys: create one, see its secret once and its row; revoke it; the API refuses it.
	var secret string
	name := "browser-" + time.Now().Format("150405.000")
	if err := chromedp.Run(ctx,
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/#/keys"),
		chromedp.WaitVisible("#key-name", chromedp.ByID),
		chromedp.SendKeys("#key-name", name, chromedp.ByID),
		chromedp.Click(`#create-key button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible("#new-secret", chromedp.ByID),
		chromedp.Text("#new-secret", &secret, chromedp.ByID),
		chromedp.WaitVisible(`//table[@id="keys"]//td[text()="`+name+`"]`),
	); err != nil || !strings.HasPrefix(secret, "mj_") {
		t.Fatalf("create key: %q %v", secret, err)
	}
	if r := e2e.Call(t, "GET", e2e.Stack.URL+"/api/jobs", secret, nil); r.Status != 200 {
		t.Fatalf("the new key does not work: %d", r.Status)
	}
	screenshot(t, ctx, "keys")
	if err := chromedp.Run(ctx,
		chromedp.Click(`//table[@id="keys"]//tr[td[text()="`+name+`"]]//button`),
		chromedp.WaitNotPresent(`//table[@id="keys"]//td[text()="`+name+`"]`),
	); err != nil {
		t.Fatalf("revoke: %v", err)
	}
	testenv.Eventually(t, 30*time.Second, "the revoked key to be refused", func() bool {
		return e2e.Call(t, "GET", e2e.Stack.URL+"/api/jobs", secret, nil).Status == 401
	})

	// New job: a local file through the form; the page follows it to succeeded.
	var id string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/#/new"),
		chromedp.WaitVisible("#in-file-1", chromedp.ByID),
		chromedp.SetUploadFiles("#in-file-1", []string{clip}, chromedp.ByID),
		chromedp.Evaluate(`document.getElementById("outputs-field").value = "out.mp4"; document.getElementById("commands-field").value = "-re -i {{video}} -c copy {{out.mp4}}"`, nil),
		chromedp.Evaluate(`window.__noReload = 1`, nil),
		chromedp.Click("#submit-job", chromedp.ByID),
		chromedp.WaitVisible("#job", chromedp.ByID),
		chromedp.Evaluate(`location.hash.split("/")[2]`, &id),
	); err != nil {
		t.Fatalf("submit the form: %v", err)
	}
	var running bool
	if err := chromedp.Run(ctx,
		chromedp.WaitVisible(`#job [data-status="running"], #job [data-status="succeeded"]`, chromedp.ByQuery),
		chromedp.Evaluate(`!!document.querySelector('#job [data-status="running"]')`, &running),
	); err != nil {
		t.Fatalf("job %s never ran: %v", id, err)
	}
	if running {
		screenshot(t, ctx, "job-running")
	}
	var noReload int
	var ready int
	if err := chromedp.Run(ctx,
		chromedp.WaitVisible(`#job [data-status="succeeded"]`, chromedp.ByQuery),
		chromedp.Evaluate(`window.__noReload || 0`, &noReload),
		chromedp.WaitVisible(`#outputs video`, chromedp.ByQuery),
		chromedp.Poll(`document.querySelector("#outputs video").readyState >= 1`, nil, chromedp.WithPollingTimeout(30*time.Second)),
		chromedp.Evaluate(`document.querySelector("#outputs video").readyState`, &ready),
	); err != nil {
		t.Fatalf("job %s: %v", id, err)
	}
	if noReload != 1 {
		t.Fatal("the page reloaded while following the job")
	}
	if j := e2e.Call(t, "GET", e2e.Stack.URL+"/api/jobs/"+id, e2e.Stack.APIKey, nil).Data(t); j["status"] != "succeeded" {
		t.Fatalf("job %s: %v", id, j["status"])
	}
	screenshot(t, ctx, "job")
	dashboardUsage(t, ctx, id)
	if err := chromedp.Run(ctx,
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/#/jobs"),
		chromedp.WaitVisible(`#jobs tr[data-id="`+id+`"]`, chromedp.ByQuery),
	); err != nil {
		t.Fatalf("jobs list: %v", err)
	}
	screenshot(t, ctx, "jobs")

	// Validation errors show next to the field.
	var fieldErr string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/#/new"),
		chromedp.WaitVisible("#commands-field", chromedp.ByID),
		chromedp.Evaluate(`document.getElementById("commands-field").value = "-i /etc/passwd {{out.mp4}}"`, nil),
		chromedp.Click("#submit-job", chromedp.ByID),
		chromedp.WaitVisible(`//p[@id="err-ffmpeg_commands" and normalize-space(text()) != ""]`),
		chromedp.Text("#err-ffmpeg_commands", &fieldErr, chromedp.ByID),
	); err != nil || fieldErr == "" {
		t.Fatalf("validation error next to the commands: %q %v", fieldErr, err)
	}

	// Sign out: back to sign-in, and the session no longer works.
	if err := chromedp.Run(ctx,
		chromedp.Click("#signout", chromedp.ByID),
		chromedp.WaitVisible("#api-key", chromedp.ByID),
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/#/keys"),
		chromedp.WaitVisible("#api-key", chromedp.ByID),
	); err != nil {
		t.Fatalf("sign out: %v", err)
	}
}
