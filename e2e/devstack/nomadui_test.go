package devstack

import (
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/chromedp/chromedp"
	"github.com/mediajobs/mediajobs/testenv"
)

// TestNomadUIShowsTheWork: operators watch the work in Nomad's web UI. The Nomad
// that make builds (deploy/scripts/install-nomad.sh, -tags ui) serves it: in
// headless Chromium, /ui/jobs lists the pool's parameterized job, and the page of
// the child dispatched for a mediajobs job shows that job's id (its dispatch meta).
// A Nomad built without the UI answers a stub page and fails this test.
func TestNomadUIShowsTheWork(t *testing.T) {
	e2e.NeedStack(t)
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{
		"input_files":     map[string]string{"clip": e2e.ClipURL},
		"output_files":    []string{"out.mp4"},
		"ffmpeg_commands": []string{"-i inputs/clip -t 1 -c copy outputs/out.mp4"},
	})
	if r.Status != 200 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	id := r.Data(t)["id"].(string)
	if j := e2e.WaitTerminal(t, id); j["status"] != "succeeded" {
		t.Fatalf("job %s: %v %v", id, j["status"], j["error_message"])
	}
	child := nomadChildOf(t, id)

	ctx := browser(t)
	var body string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(e2e.Agent.Addr+"/ui/jobs"),
		chromedp.Poll(`document.body.innerText.includes("mediajobs-cpu")`, nil, chromedp.WithPollingTimeout(60*time.Second)),
		chromedp.Text("body", &body, chromedp.ByQuery),
	); err != nil {
		t.Fatalf("/ui/jobs never listed mediajobs-cpu: %v\n%s", err, e2e.Tail(body, 2000))
	}
	screenshot(t, ctx, "nomad-ui")

	// The child's own page: Nomad's UI addresses a job as <id>@<namespace>.
	page := e2e.Agent.Addr + "/ui/jobs/" + url.PathEscape(child+"@default")
	if err := chromedp.Run(ctx,
		chromedp.Navigate(page),
		chromedp.Poll(`document.body.innerText.includes("`+id+`")`, nil, chromedp.WithPollingTimeout(60*time.Second)),
	); err != nil {
		chromedp.Run(ctx, chromedp.Text("body", &body, chromedp.ByQuery))
		t.Fatalf("%s never showed the mediajobs job id %s: %v\n%s", page, id, err, e2e.Tail(body, 2000))
	}
	screenshot(t, ctx, "nomad-ui-child")
}

// nomadChildOf finds, through Nomad's API, the child job dispatched for the
// mediajobs job id (its meta mediajobs_job_id).
func nomadChildOf(t *testing.T, id string) string {
	t.Helper()
	var child string
	testenv.Eventually(t, 30*time.Second, "the Nomad child of "+id, func() bool {
		resp, err := http.Get(e2e.Agent.Addr + "/v1/jobs?prefix=mediajobs-cpu/dispatch-&meta=true")
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		var jobs []struct {
			ID   string
			Meta map[string]string
		}
		if err := json.NewDecoder(resp.Body).Decode(&jobs); err != nil {
			return false
		}
		for _, j := range jobs {
			if j.Meta == nil { // an e2e.Agent that ignores meta=true: read the job itself
				if r, err := http.Get(e2e.Agent.Addr + "/v1/job/" + url.PathEscape(j.ID)); err == nil {
					json.NewDecoder(r.Body).Decode(&j)
					r.Body.Close()
				}
			}
			if j.Meta["mediajobs_job_id"] == id && strings.HasPrefix(j.ID, "mediajobs-cpu/") {
				child = j.ID
				return true
			}
		}
		return false
	})
	return child
}
