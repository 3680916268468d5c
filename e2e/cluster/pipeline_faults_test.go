package cluster

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/e2e"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/mediajobs/mediajobs/server"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// Pipelines under faults (docs/pipelines.md): the leading dispatcher killed
// mid-pipeline, a worker killed mid-step. Steps fetch a counted copy of the clip
// (c.Inputs, tag per job), so a run is one fetch; their Nomad children are
// counted too. Per-step webhooks are off: the receiver sees only the
// pipeline's.

// TestPipelineLeaderKilledMidPipeline kills -9 the leading dispatcher while a
// fan-out's jobs run and its fan-in waits, and while a second pipeline, whose
// gateway stored its record but none of its jobs, waits for the leader to store
// them. The standby takes over: both pipelines succeed, every job ran once (one
// attempt, one Nomad child, one fetch), and each pipeline's webhook arrives once.
func TestPipelineLeaderKilledMidPipeline(t *testing.T) {
	c := e2e.NewCluster(t, e2e.Agent, "")
	d1 := c.StartDispatcher("d1")
	testenv.Eventually(t, 60*time.Second, "d1 to lead", d1.Leading)
	d2 := c.StartDispatcher("d2")
	testenv.Eventually(t, 60*time.Second, "d2 to stand by", func() bool { return strings.Contains(d2.Log.String(), "waiting for leadership") })

	a := pipelineCreate(t, c.APIURL, c.Key, fanInDoc(c, "A", "1", "3", "6"))
	aID := a["id"].(string)
	// Kill while the longest rung runs (it fetched its input) and the fan-in
	// still waits for it.
	var atKill map[string]any
	testenv.Eventually(t, 3*time.Minute, "A's longest rung to run, its fan-in waiting", func() bool {
		p := pipelineGet(t, c.APIURL, c.Key, aID)
		atKill = p
		part := pipelineStepJobs(t, p, "part")
		return part[2]["status"] == "running" && c.Inputs.Count("A-part-2") == 1 &&
			pipelineStepJobs(t, p, "join")[0]["status"] == "queued"
	})
	// B: a gateway that dies between the pipeline's record and its jobs (no
	// job stored), its leader killed before it stores them (it waits 30 s).
	b := pipelineCreate(t, crashingGateway(t, c), c.Key, fanInDoc(c, "B", "1", "1", "2"))
	bID := b["id"].(string)
	d1.Kill()
	t.Logf("killed the leader with A's jobs %s", pipelineStatuses(t, atKill))
	ctx := context.Background()
	if n, err := c.Store.Count(ctx, c.Store.PipelinePendingPrefix()); err != nil || n != 1 {
		t.Fatalf("%d pipelines with jobs to store at the kill (%v), want B's", n, err)
	}
	for _, jb := range pipelineStepJobs(t, b, "part") {
		if _, err := c.Store.Job(ctx, jb["id"].(string)); mj.ErrorCode(err) != mj.ENotFound {
			t.Fatalf("B's job %v stored by its gateway (%v)", jb["id"], err)
		}
	}
	testenv.Eventually(t, 60*time.Second, "the standby to take over", d2.Leading)

	for _, pid := range []string{aID, bID} {
		p := pipelineWaitEnd(t, c, pid)
		if p["status"] != "succeeded" {
			t.Fatalf("pipeline %s: %v (%v)", pid, p["status"], p["error_message"])
		}
	}
	for _, run := range []struct{ id, tag string }{{aID, "A"}, {bID, "B"}} {
		p := pipelineGet(t, c.APIURL, c.Key, run.id)
		for i, jb := range pipelineStepJobs(t, p, "part") {
			pipelineRanOnce(t, c, jb, fmt.Sprintf("%s-part-%d", run.tag, i), 1)
		}
		join := pipelineStepJobs(t, p, "join")[0]
		pipelineRanOnce(t, c, join, run.tag+"-join", 1)
		// The fan-in took each rung once: its length is theirs summed.
		link, _ := join["output_files"].(map[string]any)["full.mp4"].(string)
		if link == "" {
			t.Fatalf("%s's join has no output: %v", run.tag, join["output_files"])
		}
		want := map[string]float64{"A": 10, "B": 4}[run.tag]
		got, _ := strconv.ParseFloat(fmt.Sprint(e2e.Probe(t, e2e.Download(t, link))["format"].(map[string]any)["duration"]), 64)
		if got < want-0.5 || got > want+0.5 {
			t.Errorf("%s's full.mp4 lasts %.2f s, want %.0f (its rungs' lengths summed)", run.tag, got, want)
		}
		pipelineOneHook(t, run.id, "pipeline.succeeded")
	}
	if !strings.Contains(d2.Log.String(), "stored the jobs of a pipeline its gateway left") {
		t.Error("the new leader's log does not say it stored B's jobs")
	}
}

// TestPipelineWorkerKilledMidStep kills -9 the runner of a chain's running
// middle step: that job is retried as a new attempt and succeeds, the step after
// it runs once, on the retry's output, and the pipeline succeeds with one webhook.
func TestPipelineWorkerKilledMidStep(t *testing.T) {
	c := e2e.NewCluster(t, e2e.Agent, "")
	c.StartDispatcher("d")
	p := pipelineCreate(t, c.APIURL, c.Key, map[string]any{
		"steps": map[string]any{
			"head": map[string]any{
				"input_files":     map[string]string{"in": c.InURL + "?job=W-head"},
				"output_files":    []string{"h.mp4"},
				"ffmpeg_commands": []string{"-i {{in}} -t 1 -c copy {{h.mp4}}"},
			},
			"middle": map[string]any{
				"input_files":     map[string]string{"h": "step:head/h.mp4", "in": c.InURL + "?job=W-middle"},
				"output_files":    []string{"m.mp4"},
				"ffmpeg_commands": []string{"-re -stream_loop -1 -i {{in}} -i {{h}} -map 0:v -map 1:v -t 4 -c copy {{m.mp4}}"},
			},
			"tail": map[string]any{
				"input_files":     map[string]string{"m": "step:middle/m.mp4", "in": c.InURL + "?job=W-tail"},
				"output_files":    []string{"t.mp4"},
				"ffmpeg_commands": []string{"-i {{m}} -i {{in}} -map 0:v:0 -c copy {{t.mp4}}"},
			},
		},
		"webhook_url": e2e.HookURL + "/pipeline-worker-killed",
	})
	id := p["id"].(string)
	middle := pipelineStepJobs(t, p, "middle")[0]["id"].(string)
	c.WaitStatus(middle, 3*time.Minute, "running")
	child := c.Stored(middle).NomadJobID
	// Killed once it has fetched its input, as in TestCrashedRunnerIsRetriedAsANewAttempt.
	testenv.Eventually(t, 60*time.Second, "the middle step's first fetch", func() bool { return c.Inputs.Count("W-middle") >= 1 })
	if s := pipelineStepJobs(t, pipelineGet(t, c.APIURL, c.Key, id), "tail")[0]["status"]; s != "queued" {
		t.Fatalf("tail is %v while the step it takes the output of runs", s)
	}
	testenv.Eventually(t, 30*time.Second, "the middle step's runner to be killed", func() bool { return e2e.KillRunner(t, child) })
	t.Logf("killed the runner of %s", child)

	p = pipelineWaitEnd(t, c, id)
	if p["status"] != "succeeded" {
		t.Fatalf("pipeline %v (%v)", p["status"], p["error_message"])
	}
	pipelineRanOnce(t, c, pipelineStepJobs(t, p, "head")[0], "W-head", 1)
	pipelineRanOnce(t, c, pipelineStepJobs(t, p, "middle")[0], "W-middle", 2)
	if j := c.Job(middle); !strings.Contains(fmt.Sprint(j["status_detail"]), "attempt 2") {
		t.Errorf("middle's status_detail %q does not say it took a second attempt", j["status_detail"])
	}
	tail := pipelineStepJobs(t, p, "tail")[0]
	pipelineRanOnce(t, c, tail, "W-tail", 1)
	if mid, tj := c.Stored(middle), c.Stored(tail["id"].(string)); tj.StartedAt == nil || mid.FinishedAt == nil || tj.StartedAt.Before(*mid.FinishedAt) {
		t.Errorf("tail started %v, before middle's retry finished %v", tj.StartedAt, mid.FinishedAt)
	}
	pipelineOneHook(t, id, "pipeline.succeeded")
}

// fanInDoc is a pipeline of a fan-out, step part, whose items copy secs[i]
// seconds of the looped clip (fetched as <tag>-part-<i>), then a fan-in, step
// join, concatenating them (fetching the clip as <tag>-join to count its runs).
func fanInDoc(c *e2e.Cluster, tag string, secs ...string) map[string]any {
	var items []map[string]string
	for _, s := range secs {
		items = append(items, map[string]string{"secs": s})
	}
	return map[string]any{
		"steps": map[string]any{
			"part": map[string]any{
				"input_files":     map[string]string{"in": c.InURL + "?job=" + tag + "-part-${index}"},
				"output_files":    []string{"part.mp4"},
				"ffmpeg_commands": []string{"-re -stream_loop -1 -i {{in}} -t ${item.secs} -map 0:v -c copy {{part.mp4}}"},
				"for_each":        items,
			},
			"join": map[string]any{
				"input_files":  map[string]string{"p": "step:part[*]/part.mp4", "clip": c.InURL + "?job=" + tag + "-join"},
				"output_files": []string{"full.mp4"},
				"ffmpeg_commands": []string{`${each:p:-i {{p}}} -i {{clip}} -filter_complex "${each:p:[${index}:v]}concat=n=${count:p}:v=1:a=0[v]" ` +
					`-map [v] -c:v libx264 -preset ultrafast {{full.mp4}}`},
			},
		},
		"webhook_url": e2e.HookURL + "/pipeline-" + tag,
	}
}

// pipelineStatuses lists the status of each job of pipeline view p.
func pipelineStatuses(t *testing.T, p map[string]any) string {
	var out []string
	for _, s := range p["steps"].([]any) {
		name := s.(map[string]any)["name"].(string)
		for i, j := range pipelineStepJobs(t, p, name) {
			out = append(out, fmt.Sprintf("%s[%d] %v", name, i, j["status"]))
		}
	}
	return strings.Join(out, ", ")
}

func pipelineCreate(t *testing.T, apiURL, key string, doc map[string]any) map[string]any {
	t.Helper()
	r := e2e.Call(t, "POST", apiURL+"/api/pipelines", key, doc)
	if r.Status != 200 {
		t.Fatalf("create pipeline: HTTP %d %s", r.Status, r.Body)
	}
	return r.Data(t)
}

func pipelineGet(t *testing.T, apiURL, key, id string) map[string]any {
	t.Helper()
	return e2e.Call(t, "GET", apiURL+"/api/pipelines/"+id, key, nil).Data(t)
}

// pipelineStepJobs are the jobs of step name in pipeline view p, in item order.
func pipelineStepJobs(t *testing.T, p map[string]any, name string) []map[string]any {
	t.Helper()
	return e2e.StepJobs(e2e.PipelineStep(t, p, name))
}

// pipelineWaitEnd waits until pipeline id's end is recorded (finished_at; its
// status shows ended as soon as its jobs have, before that) and no pipeline
// webhook is due (the outbox entry is written with the end and removed with
// the delivery's outcome), and returns its view.
func pipelineWaitEnd(t *testing.T, c *e2e.Cluster, id string) map[string]any {
	t.Helper()
	var p map[string]any
	testenv.Eventually(t, 5*time.Minute, "pipeline "+id+" to end and its webhook to be sent", func() bool {
		p = pipelineGet(t, c.APIURL, c.Key, id)
		switch p["status"] {
		case "succeeded", "failed", "cancelled":
			if p["finished_at"] == nil {
				return false // ended by its jobs, its end (and outbox entry) not recorded yet
			}
			n, err := c.Store.Count(context.Background(), c.Store.PipelineOutboxPrefix())
			return err == nil && n == 0
		}
		return false
	})
	if w, _ := p["webhook"].(map[string]any); w == nil || w["status"] != "delivered" {
		// The view read may predate the delivery's record: read again.
		p = pipelineGet(t, c.APIURL, c.Key, id)
	}
	return p
}

// pipelineRanOnce checks that job jb (a pipeline view's) succeeded on its
// attempt-th attempt, having started one Nomad child and fetched tag once per
// attempt.
func pipelineRanOnce(t *testing.T, c *e2e.Cluster, jb map[string]any, tag string, attempts int) {
	t.Helper()
	id := jb["id"].(string)
	j := c.Stored(id)
	children, _, err := e2e.Agent.Client.Jobs().PrefixList(mj.PoolJobID("cpu") + "/dispatch-" + id)
	if err != nil {
		t.Fatal(err)
	}
	if j.Status != mj.StatusSucceeded || j.Attempt != attempts || c.Inputs.Count(tag) != attempts || len(children) != attempts {
		var ids []string
		for _, ch := range children {
			ids = append(ids, ch.ID)
		}
		t.Errorf("job %s (%s): %s on attempt %d, %d fetches, Nomad children %v; want succeeded on attempt %d, one fetch and one child each",
			id, tag, j.Status, j.Attempt, c.Inputs.Count(tag), ids, attempts)
	}
}

// pipelineOneHook checks that pipeline id's webhook arrived exactly once, as
// event, and that its record says delivered.
func pipelineOneHook(t *testing.T, id, event string) {
	t.Helper()
	calls := e2e.Hooks.Calls(id)
	if len(calls) != 1 {
		var ids []string
		for _, call := range calls {
			ids = append(ids, call.Header.Get("X-Mediajobs-Delivery"))
		}
		t.Fatalf("pipeline %s: %d webhook deliveries (delivery ids %v), want exactly one", id, len(calls), ids)
	}
	if got := calls[0].Header.Get("X-Mediajobs-Event"); got != event || calls[0].Job["status"] != "succeeded" {
		t.Errorf("pipeline %s's webhook: event %q, status %v; want %q", id, got, calls[0].Job["status"], event)
	}
}

// unmaterialised is a store whose pipeline jobs are never stored: a gateway on
// it dies, as far as the pipeline is concerned, between its record and its jobs.
type unmaterialised struct{ *store.Store }

func (unmaterialised) MaterialisePipeline(context.Context, string, time.Time) (*mj.Pipeline, error) {
	return nil, errors.New("the gateway died before storing the pipeline's jobs")
}

// crashingGateway starts a second gateway of c on the unmaterialised store and
// returns its URL.
func crashingGateway(t *testing.T, c *e2e.Cluster) string {
	t.Helper()
	blobs, err := server.OpenBlobs(c.Config)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway.Gateway{Config: c.Config, Store: unmaterialised{c.Store}, Blobs: blobs,
		Signer: blob.Signer{Secret: []byte(c.Secret), Base: c.APIURL}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if g.Warm, err = server.WarmAuth(c.Config); err != nil {
		t.Fatal(err)
	}
	if g.Uploaders, _, err = server.UploaderAuth(c.Config); err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	app := g.App()
	go app.Listener(ln)
	t.Cleanup(func() { app.Shutdown() })
	return "http://" + ln.Addr().String()
}
