package devstack

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/chromedp/chromedp"
)

// The dashboard's Pipelines area draws a pipeline as a graph in headless
// Chromium against the real stack: a cut, two renditions of it (fan-out) and a
// thumbnail of it, each a node with its state, duration and output links, an
// edge from the cut to each step that takes its output, the fanned-out step's
// items one by one; the page follows the pipeline live (its event stream, no
// reload) until every node shows succeeded. The list shows it, and a step's
// job links back to it.
func TestDashboardPipelineGraph(t *testing.T) {
	e2e.NeedStack(t)
	ctx := browser(t)
	if err := chromedp.Run(ctx,
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/"),
		chromedp.WaitVisible("#api-key", chromedp.ByID),
		chromedp.SendKeys("#api-key", e2e.Stack.APIKey, chromedp.ByID),
		chromedp.Click(`#signin button[type=submit]`, chromedp.ByQuery),
		chromedp.WaitVisible("#status-filter", chromedp.ByID),
	); err != nil {
		t.Fatalf("sign in: %v", err)
	}

	// -re: the cut lasts the clip's 3 seconds, so the page opens on a
	// pipeline not ended yet.
	r := e2e.Call(t, "POST", "/api/pipelines", e2e.Stack.APIKey, map[string]any{
		"steps": map[string]any{
			"cut": map[string]any{
				"input_files":     map[string]string{"v": e2e.ClipURL},
				"output_files":    []string{"cut.mp4"},
				"ffmpeg_commands": []string{"-re -i {{v}} -c copy {{cut.mp4}}"},
			},
			"rung": map[string]any{
				"input_files":     map[string]string{"src": "step:cut/cut.mp4"},
				"output_files":    []string{"r${item.h}.mp4"},
				"ffmpeg_commands": []string{"-i {{src}} -vf scale=-2:${item.h} -c:v libx264 -preset ultrafast -c:a copy {{r${item.h}.mp4}}"},
				"for_each":        []map[string]string{{"h": "120"}, {"h": "160"}},
			},
			"thumb": map[string]any{
				"input_files":     map[string]string{"v": "step:cut/cut.mp4"},
				"output_files":    []string{"t.png"},
				"ffmpeg_commands": []string{"-i {{v}} -frames:v 1 {{t.png}}"},
			},
		},
	})
	if r.Status != 200 {
		t.Fatalf("create the pipeline: %d %s", r.Status, r.Body)
	}
	p := r.Data(t)
	id := p["id"].(string)

	var first string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/#/pipelines/"+id),
		chromedp.WaitVisible(`#graph .node[data-step="thumb"]`, chromedp.ByQuery),
		chromedp.Evaluate(`window.__noReload = 1; document.querySelector("#pipeline-status").dataset.status`, &first),
	); err != nil {
		t.Fatalf("open the pipeline: %v", err)
	}
	if first == "succeeded" || first == "failed" || first == "cancelled" {
		t.Fatalf("the pipeline had ended (%s) before the page opened: nothing to follow live", first)
	}
	screenshot(t, ctx, "pipeline-running")

	wctx, cancel := context.WithTimeout(ctx, 3*time.Minute)
	defer cancel()
	if err := chromedp.Run(wctx,
		chromedp.WaitVisible(`#pipeline-status[data-status="succeeded"]`, chromedp.ByQuery),
	); err != nil {
		got := e2e.Call(t, "GET", "/api/pipelines/"+id, e2e.Stack.APIKey, nil).Body
		t.Fatalf("the page never showed the pipeline succeeded: %v; the API says %s", err, got)
	}
	type node struct {
		Step, Status, Duration string
		Needs                  string
		Items                  []string // each item's status
		Outputs                []string // hrefs
	}
	var page struct {
		Status   string
		NoReload int
		Nodes    []node
		Edges    []string
	}
	var raw string
	if err := chromedp.Run(ctx, chromedp.Evaluate(`JSON.stringify({
		status: document.querySelector("#pipeline-status").dataset.status,
		noReload: window.__noReload || 0,
		nodes: [...document.querySelectorAll("#graph .node")].map((n) => ({
			step: n.dataset.step, status: n.dataset.status, needs: n.dataset.needs,
			duration: n.querySelector(".duration").textContent,
			items: [...n.querySelectorAll(".items li")].map((li) => li.dataset.status),
			outputs: [...n.querySelectorAll("a.output")].map((a) => a.href),
		})),
		edges: [...document.querySelectorAll("#graph path.edge")].map((e) => e.dataset.from + "->" + e.dataset.to),
	})`, &raw)); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(raw), &page); err != nil {
		t.Fatalf("%v: %s", err, raw)
	}
	if page.NoReload != 1 {
		t.Fatal("the page reloaded while following the pipeline")
	}
	steps := map[string]node{}
	for _, n := range page.Nodes {
		steps[n.Step] = n
		if n.Status != "succeeded" || n.Duration == "" || len(n.Outputs) == 0 {
			t.Fatalf("node %s: %+v; the API says %s", n.Step, n, e2e.Call(t, "GET", "/api/pipelines/"+id, e2e.Stack.APIKey, nil).Body)
		}
		for _, href := range n.Outputs {
			if !strings.HasPrefix(href, "http") {
				t.Fatalf("node %s's output link %q", n.Step, href)
			}
		}
	}
	if len(steps) != 3 || steps["rung"].Needs != "cut" || steps["thumb"].Needs != "cut" || steps["cut"].Needs != "" {
		t.Fatalf("nodes: %+v", page.Nodes)
	}
	if it := steps["rung"].Items; len(it) != 2 || it[0] != "succeeded" || it[1] != "succeeded" || len(steps["rung"].Outputs) != 2 {
		t.Fatalf("the fanned-out step's items: %+v", steps["rung"])
	}
	edges := strings.Join(page.Edges, " ")
	if len(page.Edges) != 2 || !strings.Contains(edges, "cut->rung") || !strings.Contains(edges, "cut->thumb") {
		t.Fatalf("edges: %v", page.Edges)
	}
	screenshot(t, ctx, "pipeline")

	// The list shows it; a step's job page links back to it.
	thumbJob := ""
	for _, s := range p["steps"].([]any) {
		if s := s.(map[string]any); s["name"] == "thumb" {
			thumbJob = s["jobs"].([]any)[0].(map[string]any)["id"].(string)
		}
	}
	if err := chromedp.Run(ctx,
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/#/pipelines"),
		chromedp.WaitVisible(`#pipelines tr[data-id="`+id+`"] [data-status="succeeded"]`, chromedp.ByQuery),
		chromedp.Navigate(e2e.Stack.URL+"/dashboard/#/jobs/"+thumbJob),
		chromedp.WaitVisible(`#job-pipeline a[href="#/pipelines/`+id+`"]`, chromedp.ByQuery),
	); err != nil {
		t.Fatalf("the list and the job's link back: %v", err)
	}
}
