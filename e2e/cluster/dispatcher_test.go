package cluster

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/mediajobs/mediajobs/testenv"
)

const (
	quickCmd = "-i {{in}} -t 0.5 -c copy {{o.mp4}}"
	slowCmd  = "-re -i {{in}} -t 2.5 -c copy {{o.mp4}}"
	badCmd   = "-i {{in}} -c:v no_such_codec {{o.mp4}}"
)

// TestDispatcherKilledLosesNothing kills -9 the only dispatcher while jobs are in
// every state, then starts another: every job reaches its right terminal state,
// ffmpeg ran exactly once per job, and every webhook is sent.
func TestDispatcherKilledLosesNothing(t *testing.T) {
	c := e2e.NewCluster(t, e2e.Agent, "")
	d1 := c.StartDispatcher("d1")
	type item struct{ tag, id, want string }
	var items []*item
	add := func(tag, cmd, want string) *item {
		it := &item{tag: tag, id: c.Create(c.JobBody(tag, cmd)), want: want}
		items = append(items, it)
		return it
	}
	for i := 0; i < 6; i++ {
		add(fmt.Sprintf("quick-%d", i), quickCmd, "succeeded")
	}
	for i := 0; i < 4; i++ {
		add(fmt.Sprintf("bad-%d", i), badCmd, "failed")
	}
	var slow []*item
	for i := 0; i < 5; i++ {
		slow = append(slow, add(fmt.Sprintf("slow-%d", i), slowCmd, "succeeded"))
	}
	// Kill it while some jobs are done and some run.
	testenv.Eventually(t, 60*time.Second, "a job running and one finished", func() bool {
		running, done := false, false
		for _, it := range items {
			switch c.Job(it.id)["status"] {
			case "running":
				running = true
			case "succeeded", "failed":
				done = true
			}
		}
		return running && done
	})
	d1.Kill()

	// While no dispatcher runs: new jobs queue, and cancels land at once.
	var queued []*item
	for i := 0; i < 5; i++ {
		queued = append(queued, add(fmt.Sprintf("late-%d", i), quickCmd, "succeeded"))
	}
	if c.Cancel(queued[0].id) != 200 {
		t.Fatal("cancel of a queued job refused")
	}
	queued[0].want = "cancelled"
	if st := c.Cancel(slow[4].id); st == 200 {
		slow[4].want = "cancelled"
	}

	c.StartDispatcher("d2")
	for _, it := range items {
		j := c.WaitStatus(it.id, 120*time.Second, "succeeded", "failed", "cancelled")
		if j["status"] != it.want {
			t.Errorf("%s: %v (%v), want %s", it.tag, j["status"], j["error_message"], it.want)
		}
		runs := c.Inputs.Count(it.tag)
		if it.want == "cancelled" && runs > 1 || it.want != "cancelled" && runs != 1 {
			t.Errorf("%s: its runner ran %d times", it.tag, runs)
		}
	}
	if len(items) != 20 {
		t.Fatalf("%d jobs, want 20", len(items))
	}
	for _, it := range items {
		testenv.Eventually(t, 60*time.Second, "the webhook of "+it.tag, func() bool { return len(e2e.Hooks.Calls(it.id)) > 0 })
	}
	if c.Stored(queued[0].id).NomadJobID != "" {
		t.Errorf("a job cancelled before dispatch reached Nomad: %s", c.Stored(queued[0].id).NomadJobID)
	}
}

func TestOnlyTheLeaderDispatchesAndAStandbyTakesOver(t *testing.T) {
	c := e2e.NewCluster(t, e2e.Agent, "")
	d1 := c.StartDispatcher("d1")
	testenv.Eventually(t, 30*time.Second, "d1 to lead", d1.Leading)
	d2 := c.StartDispatcher("d2")
	testenv.Eventually(t, 30*time.Second, "d2 to wait", func() bool { return strings.Contains(d2.Log.String(), "waiting for leadership") })
	for i := 0; i < 3; i++ {
		id := c.Create(c.JobBody(fmt.Sprintf("a-%d", i), quickCmd))
		if j := c.WaitStatus(id, 60*time.Second, "succeeded", "failed"); j["status"] != "succeeded" {
			t.Fatalf("job %v: %v", j["status"], j["error_message"])
		}
	}
	if d2.Leading() || strings.Contains(d2.Log.String(), "dispatched") || !strings.Contains(d1.Log.String(), "dispatched") {
		t.Fatalf("the standby dispatched or led:\n%s", d2.Log.String())
	}
	d1.Kill()
	testenv.Eventually(t, 30*time.Second, "the standby to take over", d2.Leading)
	for i := 0; i < 3; i++ {
		id := c.Create(c.JobBody(fmt.Sprintf("b-%d", i), quickCmd))
		if j := c.WaitStatus(id, 60*time.Second, "succeeded", "failed"); j["status"] != "succeeded" {
			t.Fatalf("job after failover %v: %v", j["status"], j["error_message"])
		}
	}
}

func TestNomadRestartLosesNoJob(t *testing.T) {
	e2e.NeedStack(t)
	n, err := testenv.StartNomad(testenv.NomadBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer n.Close()
	c := e2e.NewCluster(t, n, "")
	c.StartDispatcher("d")
	id := c.Create(c.JobBody("r", slowCmd))
	c.WaitStatus(id, 60*time.Second, "running")
	if err := n.Restart(); err != nil {
		t.Fatal(err)
	}
	j := c.WaitStatus(id, 120*time.Second, "succeeded", "failed")
	if j["status"] != "succeeded" || c.Stored(id).Attempt != 2 || !strings.Contains(j["status_detail"].(string), "attempt 2") {
		t.Fatalf("after Nomad lost its state: %v attempt %d (%v / %v)", j["status"], c.Stored(id).Attempt, j["error_message"], j["status_detail"])
	}
	// A job created after the restart still runs: the pools were registered again.
	id = c.Create(c.JobBody("r2", quickCmd))
	if j := c.WaitStatus(id, 60*time.Second, "succeeded", "failed"); j["status"] != "succeeded" {
		t.Fatalf("new job after restart: %v %v", j["status"], j["error_message"])
	}
}

func TestGPUJobWithoutGPUWaitsWithReasonThenFails(t *testing.T) {
	c := e2e.NewCluster(t, e2e.Agent, fmt.Sprintf(`pool "nvidia" {
  runner_command = %q
  gpu {}
  cpu            = 100
  memory         = 128
  queue_limit    = "5s"
}`, e2e.RunnerBin))
	c.StartDispatcher("d")
	body := c.JobBody("gpu", "-i {{in}} -c copy {{o.mp4}}")
	body["machine"] = "nvidia"
	id := c.Create(body)
	var j map[string]any
	testenv.Eventually(t, 30*time.Second, "the placement reason", func() bool {
		j = c.Job(id)
		return j["status"] == "queued" && strings.Contains(j["status_detail"].(string), "no node can run it")
	})
	t.Logf("status_detail: %s", j["status_detail"])
	j = c.WaitStatus(id, 60*time.Second, "failed")
	if msg := j["error_message"].(string); !strings.Contains(msg, "queue limit") || !strings.Contains(msg, "no node can run it") {
		t.Fatalf("error_message %q", msg)
	}
	child := c.Stored(id).NomadJobID
	testenv.Eventually(t, 30*time.Second, "the child to be stopped", func() bool {
		nj, _, err := e2e.Agent.Client.Jobs().Info(child, nil)
		return err == nil && nj.Stop != nil && *nj.Stop
	})
	if c.Inputs.Count("gpu") != 0 {
		t.Fatal("the GPU job ran")
	}
}

func TestCancelInEveryState(t *testing.T) {
	c := e2e.NewCluster(t, e2e.Agent, fmt.Sprintf(`pool "nvidia" {
  runner_command = %q
  gpu {}
  cpu            = 100
  memory         = 128
}`, e2e.RunnerBin))
	// Queued, before any dispatcher runs: never reaches Nomad.
	early := c.Create(c.JobBody("c-early", quickCmd))
	if c.Cancel(early) != 200 {
		t.Fatal("cancel refused")
	}
	c.StartDispatcher("d")
	// Queued in Nomad, not placed (no GPU here).
	body := c.JobBody("c-gpu", quickCmd)
	body["machine"] = "nvidia"
	gpu := c.Create(body)
	testenv.Eventually(t, 30*time.Second, "the GPU job to be dispatched", func() bool { return c.Stored(gpu).NomadJobID != "" })
	gpuChild := c.Stored(gpu).NomadJobID
	// Running.
	run := c.Create(c.JobBody("c-run", slowCmd))
	c.WaitStatus(run, 60*time.Second, "running")
	runChild := c.Stored(run).NomadJobID
	for _, id := range []string{gpu, run} {
		r := e2e.Call(t, "POST", c.APIURL+"/api/jobs/"+id+"/cancel", c.Key, nil)
		if r.Status != 200 || r.Data(t)["status"] != "cancelled" {
			t.Fatalf("cancel: %d %s", r.Status, r.Body)
		}
	}
	for _, child := range []string{gpuChild, runChild} {
		testenv.Eventually(t, 30*time.Second, "nomad job "+child+" to stop", func() bool {
			nj, _, err := e2e.Agent.Client.Jobs().Info(child, nil)
			return err == nil && nj.Stop != nil && *nj.Stop
		})
	}
	// Whatever the stopped allocation reports later changes nothing.
	testenv.Eventually(t, 30*time.Second, "the running allocation to end", func() bool {
		allocs, _, _ := e2e.Agent.Client.Jobs().Allocations(runChild, true, nil)
		for _, a := range allocs {
			if a.ClientStatus == "running" || a.ClientStatus == "pending" {
				return false
			}
		}
		return len(allocs) > 0
	})
	for _, id := range []string{early, gpu, run} {
		j := c.Job(id)
		if j["status"] != "cancelled" || len(j["output_files"].(map[string]any)) != 0 {
			t.Errorf("%s: %v outputs %v", id, j["status"], j["output_files"])
		}
		if c.Cancel(id) != 409 {
			t.Errorf("second cancel of %s not refused", id)
		}
	}
	if c.Stored(early).NomadJobID != "" || c.Inputs.Count("c-early") != 0 {
		t.Error("the job cancelled before dispatch was dispatched")
	}
}

func TestCrashedRunnerIsRetriedAsANewAttempt(t *testing.T) {
	c := e2e.NewCluster(t, e2e.Agent, "")
	c.StartDispatcher("d")
	id := c.Create(c.JobBody("crash", "-re -i {{in}} -t 2.5 -c copy {{o.mp4}}"))
	c.WaitStatus(id, 60*time.Second, "running")
	child := c.Stored(id).NomadJobID
	// Killed once it has fetched its input (a loaded machine may show the task
	// running before the runner gets that far): two runs, two fetches.
	testenv.Eventually(t, 60*time.Second, "the first run's fetch", func() bool { return c.Inputs.Count("crash") >= 1 })
	testenv.Eventually(t, 20*time.Second, "the runner to be killed", func() bool { return e2e.KillRunner(t, child) })
	j := c.WaitStatus(id, 90*time.Second, "succeeded", "failed")
	if j["status"] != "succeeded" || c.Stored(id).Attempt != 2 || c.Inputs.Count("crash") != 2 {
		t.Fatalf("status %v (%v), attempt %d, runs %d", j["status"], j["error_message"], c.Stored(id).Attempt, c.Inputs.Count("crash"))
	}
	if !strings.Contains(j["status_detail"].(string), "attempt 2") {
		t.Errorf("status_detail %q does not say it took a second attempt", j["status_detail"])
	}
	// A failing command is final: one attempt.
	bad := c.Create(c.JobBody("crash-bad", badCmd))
	if j := c.WaitStatus(bad, 60*time.Second, "failed"); c.Stored(bad).Attempt != 1 || c.Inputs.Count("crash-bad") != 1 {
		t.Fatalf("failed command retried: attempt %d, runs %d (%v)", c.Stored(bad).Attempt, c.Inputs.Count("crash-bad"), j["error_message"])
	}
}

func TestPoolCapDispatchesFirstInFirstOut(t *testing.T) {
	c := e2e.NewCluster(t, e2e.Agent, "")
	// Re-declare the cpu pool with a cap of one child in flight.
	cfg := strings.Replace(e2e.ReadFile(t, c.CfgFile), `pool "cpu" {`, "pool \"cpu\" {\n  max_in_flight = 1", 1)
	e2e.WriteFile(t, c.CfgFile, cfg)
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, c.Create(c.JobBody(fmt.Sprintf("cap-%d", i), "-re -i {{in}} -t 1 -c copy {{o.mp4}}")))
	}
	c.StartDispatcher("d")
	ctx := context.Background()
	maxInFlight := 0
	testenv.Eventually(t, 90*time.Second, "all three to finish", func() bool {
		n, _ := c.Store.Count(ctx, c.Store.PoolActivePrefix("cpu"))
		maxInFlight = max(maxInFlight, n)
		for _, id := range ids {
			if s := c.Job(id)["status"]; s != "succeeded" && s != "failed" {
				return false
			}
		}
		return true
	})
	if maxInFlight > 1 {
		t.Fatalf("%d children in flight with max_in_flight = 1", maxInFlight)
	}
	for i := 1; i < len(ids); i++ {
		prev, cur := c.Stored(ids[i-1]), c.Stored(ids[i])
		if cur.Status != "succeeded" || !prev.StartedAt.Before(*cur.StartedAt) {
			t.Fatalf("job %d started %v, job %d started %v: not first in, first out", i-1, prev.StartedAt, i, cur.StartedAt)
		}
	}
}
