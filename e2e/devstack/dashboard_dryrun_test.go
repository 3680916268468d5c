package devstack

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/chromedp/chromedp"
)

// The dashboard's job form checks the job as the user types (a dry run): a refused
// command shows the API's message beside its field before anything is submitted,
// and a good one (with a local file picked, not uploaded) shows how it will run.
// Nothing is stored.
func TestDashboardChecksAsYouType(t *testing.T) {
	e2e.NeedStack(t)
	ctx := browser(t)
	clip := filepath.Join(t.TempDir(), "clip.mp4")
	e2e.WriteFile(t, clip, "never uploaded")
	total := func() float64 {
		return e2e.Call(t, "GET", "/api/jobs?limit=1", e2e.Stack.APIKey, nil).JSON(t)["pagingParams"].(map[string]any)["total"].(float64)
	}
	before := total()

	var fieldErr, status string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/"),
		chromedp.WaitVisible("#api-key", chromedp.ByID),
		chromedp.SendKeys("#api-key", e2e.Stack.APIKey, chromedp.ByID),
		chromedp.Click(`#signin button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible("#status-filter", chromedp.ByID),
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/#/new"),
		chromedp.WaitVisible("#commands-field", chromedp.ByID),
		chromedp.SetUploadFiles("#in-file-1", []string{clip}, chromedp.ByID),
		chromedp.Evaluate(`document.getElementById("commands-field").value = ""`, nil),
		chromedp.SendKeys("#commands-field", "-i /etc/passwd {{out.mp4}}", chromedp.ByID),
		// The check runs as one types: wait for the answer to the whole command
		// (a loaded machine answers a prefix such as "-i /et" first).
		chromedp.WaitVisible(`//p[@id="dry-run" and contains(@class, "bad")]`),
		chromedp.WaitVisible(`//*[@id="err-ffmpeg_commands" and contains(., "/etc/passwd")]`),
		chromedp.Text("#err-ffmpeg_commands", &fieldErr, chromedp.ByID),
	); err != nil {
		t.Fatalf("a refused command while typing: %v", err)
	}
	if !strings.Contains(fieldErr, "/etc/passwd") {
		t.Fatalf("the command's field shows %q; want the checker's message about /etc/passwd", fieldErr)
	}
	if err := chromedp.Run(ctx,
		chromedp.Evaluate(`document.getElementById("commands-field").value = ""`, nil),
		chromedp.SendKeys("#commands-field", "-i {{video}} -vf scale=160:-2 {{out.mp4}}", chromedp.ByID),
		chromedp.WaitVisible(`//p[@id="dry-run" and contains(@class, "ok") and contains(., "outputs/out.mp4")]`),
		chromedp.Text("#dry-run", &status, chromedp.ByID),
		chromedp.Text("#err-ffmpeg_commands", &fieldErr, chromedp.ByID),
	); err != nil {
		t.Fatalf("a good command while typing: %v", err)
	}
	if !strings.Contains(status, "runs on cpu") || !strings.Contains(status, "-i inputs/video -vf scale=160:-2 outputs/out.mp4") || fieldErr != "" {
		t.Fatalf("after the fix: status %q, field error %q", status, fieldErr)
	}
	screenshot(t, ctx, "new-job-check")
	if after := total(); after != before {
		t.Fatalf("checking stored jobs: %v -> %v", before, after)
	}
}
