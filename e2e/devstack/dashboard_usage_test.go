package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/chromedp/chromedp"
	"github.com/mediajobs/mediajobs/testenv"
)

// dashboardUsage opens the dashboard's Usage area after job id succeeded: today's
// row of its pool and the chart's bar for today show what GET /api/usage says,
// which counts the job's figures (the account is shared with other tests, so the
// day may hold more jobs than this one).
func dashboardUsage(t *testing.T, ctx context.Context, id string) {
	t.Helper()
	j := e2e.Call(t, "GET", "/api/jobs/"+id, e2e.Stack.APIKey, nil).Data(t)
	u, ok := j["usage"].(map[string]any)
	if !ok {
		t.Fatalf("job %s has no usage: %v", id, j["usage"])
	}
	today, pool := time.Now().UTC().Format("2006-01-02"), j["machine"].(string)
	type row struct{ Jobs, CPU, Wall, Input, Output string }
	var page struct {
		Row   row
		Bar   string
		Total row
	}
	testenv.Eventually(t, 60*time.Second, "the Usage area to show what /api/usage says", func() bool {
		if err := chromedp.Run(ctx,
			chromedp.Navigate(e2e.Stack.URL+"/dashboard/#/usage?from="+today+"&to="+today),
			chromedp.WaitVisible("#usage-total", chromedp.ByID),
			chromedp.WaitVisible("#usage-chart rect.bar", chromedp.ByQuery),
			chromedp.Evaluate(fmt.Sprintf(`(() => {
				const d = (el) => el ? { Jobs: el.dataset.jobs, CPU: el.dataset.cpu, Wall: el.dataset.wall, Input: el.dataset.input, Output: el.dataset.output } : {};
				const bar = document.querySelector('#usage-chart rect.bar.cpu[data-date=%q]');
				return { Row: d(document.querySelector('#usage tr[data-date=%q][data-pool=%q]')), Bar: bar ? bar.dataset.cpu : "", Total: d(document.getElementById("usage-total")) };
			})()`, today, today, pool), &page),
		); err != nil {
			t.Fatalf("usage area: %v", err)
		}
		api := e2e.Call(t, "GET", "/api/usage?from="+today+"&to="+today, e2e.Stack.APIKey, nil).Data(t)
		var day map[string]any
		for _, d := range api["days"].([]any) {
			if m := d.(map[string]any); m["pool"] == pool {
				day = m
			}
		}
		str := func(v any) string { b, _ := json.Marshal(v); return string(b) }
		return day != nil && page.Row.Jobs == str(day["jobs"]) && page.Row.CPU == str(day["cpu_seconds"]) && page.Row.Wall == str(day["wall_seconds"]) &&
			page.Row.Input == str(day["input_bytes"]) && page.Row.Output == str(day["output_bytes"]) && page.Bar == page.Row.CPU
	})
	// The job's own figures are in the day's.
	f := func(s string) float64 { v, _ := strconv.ParseFloat(s, 64); return v }
	if f(page.Row.Jobs) < 1 || f(page.Row.CPU)+0.0005 < u["cpu_seconds"].(float64) || f(page.Row.Input) < u["input_bytes"].(float64) ||
		f(page.Row.Output) < u["output_bytes"].(float64) || u["cpu_seconds"].(float64) <= 0 || f(page.Total.CPU) < f(page.Row.CPU) {
		t.Fatalf("Usage area %+v does not count job %s's usage %v", page, id, u)
	}
	// Beside it, the account's limits and what it holds, as GET /api/account says.
	acct := e2e.Call(t, "GET", "/api/account", e2e.Stack.APIKey, nil).Data(t)
	var queued [2]string
	if err := chromedp.Run(ctx,
		chromedp.WaitVisible(`#limits tr[data-limit="max_queued_jobs"]`, chromedp.ByQuery),
		chromedp.Evaluate(`(() => { const c = document.querySelectorAll('#limits tr[data-limit="max_queued_jobs"] td'); return [c[1].textContent, c[2].textContent]; })()`, &queued),
	); err != nil {
		t.Fatalf("limits table: %v", err)
	}
	want := fmt.Sprint(acct["limits"].(map[string]any)["max_queued_jobs"])
	if want == "0" {
		want = "no limit"
	}
	if queued[0] != want {
		t.Fatalf("the Limits table shows max_queued_jobs %q; /api/account says %v", queued[0], acct["limits"])
	}
	screenshot(t, ctx, "usage")
}
