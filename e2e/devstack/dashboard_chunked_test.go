package devstack

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/chromedp/chromedp"
)

// The dashboard asks for chunked encoding (docs/chunked.md) and follows it, in
// headless Chromium against the real stack: the job form's "Encode in chunks"
// box makes the check-as-you-type name why a command cannot be split and say
// how a good one will be; the created job's page shows its chunks (done of
// all, each chunk's state and span on the source) and the other steps, kept
// current without a reload, and, once stitched, the verification's verdict
// and each of its checks.
func TestDashboardChunkedJob(t *testing.T) {
	e2e.NeedStack(t)
	t.Parallel()
	src := chunkedSourceFile(t, "160x120")
	ctx := browser(t)
	setCommand := func(cmd string) chromedp.Action {
		return chromedp.Tasks{
			chromedp.Evaluate(`document.getElementById("commands-field").value = ""`, nil),
			chromedp.SendKeys("#commands-field", cmd, chromedp.ByID),
		}
	}
	var fieldErr, check string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/"),
		chromedp.WaitVisible("#api-key", chromedp.ByID),
		chromedp.SendKeys("#api-key", e2e.Stack.APIKey, chromedp.ByID),
		chromedp.Click(`#signin button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible("#status-filter", chromedp.ByID),
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/#/new"),
		chromedp.WaitVisible("#parallel-field", chromedp.ByID),
		chromedp.SetUploadFiles("#in-file-1", []string{src}, chromedp.ByID),
		chromedp.Click("#parallel-field", chromedp.ByID),
		chromedp.SendKeys("#chunk-seconds-field", "2", chromedp.ByID),
		chromedp.SendKeys("#max-workers-field", "2", chromedp.ByID),
		// A fade-in cannot be split: the check names it beside the box.
		setCommand("-i {{video}} -vf fade=t=in:st=0:d=1 -c:v libx264 {{out.mp4}}"),
		chromedp.WaitVisible(`//*[@id="err-parallel" and contains(., "fade")]`),
		chromedp.Text("#err-parallel", &fieldErr, chromedp.ByID),
		setCommand("-i {{video}} -c:v libx264 -preset veryfast -crf 30 -c:a aac -b:a 64k {{out.mp4}}"),
		chromedp.WaitVisible(`//p[@id="dry-run" and contains(@class, "ok") and contains(., "outputs/out.mp4")]`),
		chromedp.Text("#dry-run", &check, chromedp.ByID),
	); err != nil {
		t.Fatalf("the job form with chunks: %v", err)
	}
	if !strings.Contains(fieldErr, "fade") {
		t.Fatalf("the parallel box's error %q; want the chunked checker's reason (fade)", fieldErr)
	}
	if !strings.Contains(check, "in chunks of about 2 s, at most 2 at once (steps plan, encode, audio, stitch)") {
		t.Fatalf("the check says %q; want how the job will be split", check)
	}
	screenshot(t, ctx, "new-job-chunked")

	var loc, first string
	if err := chromedp.Run(ctx,
		chromedp.Click("#submit-job", chromedp.ByID),
		chromedp.WaitVisible("#chunks", chromedp.ByID),
		chromedp.Location(&loc),
		chromedp.Evaluate(`window.__noReload = 1; document.querySelector("#job > p > .status").dataset.status`, &first),
	); err != nil {
		t.Fatalf("create the chunked job: %v", err)
	}
	// Its plan, chunks and stitch are jobs run one after another: the page
	// opens on a job still going, and follows it.
	if first == "succeeded" || first == "failed" || first == "cancelled" {
		t.Fatalf("the chunked job had ended (%s) before its page opened: nothing to follow live", first)
	}
	id := loc[strings.LastIndex(loc, "/")+1:]
	j := getJob(t, id)
	if p, _ := j["parallel"].(map[string]any); p == nil || p["mode"] != "chunked" || p["chunk_seconds"] != 2.0 || p["max_workers"] != 2.0 {
		t.Fatalf("the job the form created: %v", j["parallel"])
	}

	// The page follows the job until it ends: every chunk done, the report in.
	wctx, cancel := context.WithTimeout(ctx, 6*time.Minute)
	defer cancel()
	var summary, verdict string
	var chunks, checks []map[string]string
	var noReload bool
	if err := chromedp.Run(wctx,
		chromedp.WaitVisible(`//div[@id="job"]/p/span[@data-status="succeeded" or @data-status="failed" or @data-status="cancelled"]`),
	); err != nil {
		t.Fatalf("follow the chunked job: %v (it is %v)", err, getJob(t, id)["status"])
	}
	if j := getJob(t, id); j["status"] != "succeeded" {
		t.Fatalf("chunked job %v: %v", j["status"], j["error_message"])
	}
	if err := chromedp.Run(ctx,
		chromedp.WaitVisible(`#verification-verdict`, chromedp.ByID),
		chromedp.Text("#chunks-summary", &summary, chromedp.ByID),
		chromedp.Text("#verification-verdict", &verdict, chromedp.ByID),
		chromedp.Evaluate(`[...document.querySelectorAll("#chunk-list li")].map((li) => ({status: li.dataset.status, text: li.textContent}))`, &chunks),
		chromedp.Evaluate(`[...document.querySelectorAll("#verification-checks li")].map((li) => ({check: li.dataset.check, ok: li.dataset.ok, text: li.textContent}))`, &checks),
		chromedp.Evaluate(`window.__noReload === 1`, &noReload),
	); err != nil {
		t.Fatalf("the ended job's page: %v", err)
	}
	if !noReload {
		t.Fatal("the page was reloaded: the job's page should follow it in place")
	}
	if !strings.HasPrefix(summary, "3/3 chunks done") {
		t.Fatalf("chunks summary %q, want 3/3 chunks done", summary)
	}
	if len(chunks) != 3 || !strings.Contains(chunks[1]["text"], "2–4 s") {
		t.Fatalf("chunk list %v: want three chunks, the second from 2 to 4 s", chunks)
	}
	for _, c := range chunks {
		if c["status"] != "succeeded" {
			t.Fatalf("chunk list %v", chunks)
		}
	}
	if !strings.HasPrefix(verdict, "passed") {
		t.Fatalf("verification verdict %q", verdict)
	}
	got := map[string]bool{}
	for _, c := range checks {
		if c["ok"] != "true" {
			t.Fatalf("check %v did not hold in a passing report: %v", c, checks)
		}
		got[c["check"]] = true
	}
	for _, want := range []string{"frames", "chunks", "seams", "timestamps", "duration", "av", "decode"} {
		if !got[want] {
			t.Fatalf("the verification shows checks %v, no %s", checks, want)
		}
	}
	if !strings.Contains(checks[0]["text"], "150 in the source, 150 stitched, 150 decoded") {
		t.Fatalf("frames check %q", checks[0]["text"])
	}
	var steps []map[string]string
	if err := chromedp.Run(ctx,
		chromedp.Evaluate(`[...document.querySelectorAll("#chunk-steps .chunk-step")].map((s) => ({step: s.dataset.step, status: s.dataset.status}))`, &steps),
	); err != nil {
		t.Fatal(err)
	}
	if len(steps) != 3 {
		t.Fatalf("steps beside the chunks %v, want plan, audio and stitch", steps)
	}
	for _, s := range steps {
		if s["status"] != "succeeded" {
			t.Fatalf("steps beside the chunks %v", steps)
		}
	}
	screenshot(t, ctx, "job-chunked")
}
