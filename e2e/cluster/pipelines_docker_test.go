package cluster

import (
	"fmt"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"
)

// The worked ladder of docs/pipelines.md (e2e.LadderPipeline, which the
// devstack's TestPipelineLadderEndToEnd runs on raw_exec) with every step on
// a docker pool, in the worker image: every rendition is probed, the master
// playlist opens through its signed link with ffprobe, and one pipeline
// webhook arrives.
func TestPipelineLadderOnDocker(t *testing.T) {
	needDocker(t)
	c := e2e.NewCluster(t, e2e.Agent, dockerPool(""))
	c.StartDispatcher("d")
	r := e2e.Call(t, "POST", c.APIURL+"/api/pipelines", c.Key, e2e.LadderPipeline(c.InURL+"?job=ladder", "docker", e2e.HookURL+"/pipeline-ladder-docker"))
	if r.Status != 200 {
		t.Fatalf("create pipeline: HTTP %d %s", r.Status, r.Body)
	}
	p := r.Data(t)
	if hls := e2e.PipelineStep(t, p, "hls"); fmt.Sprint(hls["needs"]) != "[rung]" {
		t.Fatalf("hls needs %v", hls["needs"])
	}
	p = e2e.WaitPipeline(t, c.APIURL, c.Key, p["id"].(string), 6*time.Minute)
	// Each step's job ran on the docker pool.
	for _, s := range p["steps"].([]any) {
		for _, j := range e2e.StepJobs(s.(map[string]any)) {
			if job := c.Job(j["id"].(string)); job["machine"] != "docker" {
				t.Fatalf("step %v's job ran on %v", s.(map[string]any)["name"], job["machine"])
			}
		}
	}
	e2e.CheckLadder(t, c.APIURL, c.Key, p)
	// Both steps that read src fetched it once each (a rung per item).
	if n := c.Inputs.Count("ladder"); n != len(e2e.LadderHeights)+1 {
		t.Fatalf("the source was fetched %d times, want %d (each rung and thumbs once)", n, len(e2e.LadderHeights)+1)
	}
}
