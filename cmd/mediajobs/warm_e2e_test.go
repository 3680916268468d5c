package main

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/jobspecs"
	"github.com/mediajobs/mediajobs/testenv"
)

// warmPool is the shared stack's warm pool (e2e_test.go): 2 runners, jobs of up
// to 60 s, a 3 s lease.
const warmPool = "short"

// warmAllocs lists the running allocations of the warm pool's service job.
func warmAllocs(t *testing.T) []*api.AllocationListStub {
	t.Helper()
	c, err := api.NewClient(&api.Config{Address: agent.Addr})
	if err != nil {
		t.Fatal(err)
	}
	stubs, _, err := c.Jobs().Allocations(jobspecs.WarmJobID(warmPool), false, nil)
	if err != nil {
		return nil
	}
	var out []*api.AllocationListStub
	for _, s := range stubs {
		if s.ClientStatus == "running" && s.DesiredStatus == "run" {
			out = append(out, s)
		}
	}
	return out
}

// warmLogs dumps the warm runners' task logs when t fails.
func warmLogs(t *testing.T) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		for _, a := range warmAllocs(t) {
			t.Log(agent.TaskLogs(a.ID, "runner"))
		}
	})
}

// waitWarm waits for the warm pool's runners to run.
func waitWarm(t *testing.T) []*api.AllocationListStub {
	t.Helper()
	var allocs []*api.AllocationListStub
	testenv.Eventually(t, 120*time.Second, "the warm pool's 2 runners to run and wait for work", func() bool {
		allocs = warmAllocs(t)
		idle, err := stack.b.store.WarmIdleRunners(context.Background(), warmPool)
		return len(allocs) == 2 && err == nil && len(idle) == 2
	})
	return allocs
}

func warmJob(t *testing.T, timeout int, cmd string, outputs ...string) string {
	t.Helper()
	r := call(t, "POST", "/api/ffmpeg", stack.APIKey, map[string]any{
		"machine": warmPool, "timeout_seconds": timeout,
		"input_files": map[string]string{"clip": clipURL}, "output_files": outputs,
		"ffmpeg_commands": []string{cmd},
	})
	if r.Status != 200 && r.Status != 201 {
		t.Fatalf("create: HTTP %d %s", r.Status, r.Body)
	}
	return r.data(t)["id"].(string)
}

// TestWarmJobEndToEnd: a short job runs on a warm runner of the pool's service
// job, and says so; a job whose timeout is longer than max_job_seconds is
// dispatched to Nomad as its own child, as before.
func TestWarmJobEndToEnd(t *testing.T) {
	needStack(t)
	warmLogs(t)
	allocs := waitWarm(t)
	ids := map[string]bool{}
	for _, a := range allocs {
		ids[a.ID] = true
	}

	id := warmJob(t, 30, "-i inputs/clip -t 1 -vf scale=160:-2 -c:v libx264 -preset ultrafast -an outputs/out.mp4", "out.mp4")
	job := waitTerminal(t, id)
	if job["status"] != "succeeded" {
		t.Fatalf("warm job: %v: %v", job["status"], job["error_message"])
	}
	w, _ := job["worker"].(map[string]any)
	if w["path"] != "warm" || w["nomad_job_id"] != jobspecs.WarmJobID(warmPool) || !ids[fmt.Sprint(w["allocation_id"])] {
		t.Fatalf("worker = %v; want a warm runner, one of %v", w, ids)
	}
	out := download(t, job["output_files"].(map[string]any)["out.mp4"].(string))
	if p := probe(t, out); len(p["streams"].([]any)) == 0 {
		t.Fatalf("output has no streams: %v", p)
	}

	id = warmJob(t, 120, "-i inputs/clip -t 1 -vf scale=160:-2 -c:v libx264 -preset ultrafast -an outputs/out.mp4", "out.mp4")
	job = waitTerminal(t, id)
	if job["status"] != "succeeded" {
		t.Fatalf("long job: %v: %v", job["status"], job["error_message"])
	}
	w, _ = job["worker"].(map[string]any)
	if w["path"] != "dispatch" || !strings.HasPrefix(fmt.Sprint(w["nomad_job_id"]), "mediajobs-"+warmPool+"/dispatch-") || w["allocation_id"] == "" {
		t.Fatalf("worker = %v; want a dispatched child of mediajobs-%s", w, warmPool)
	}
}
