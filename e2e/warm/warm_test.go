package warm

import (
	"context"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// warmAllocs lists the running allocations of the warm pool's service job.
func warmAllocs(t *testing.T) []*api.AllocationListStub {
	t.Helper()
	stubs, _, err := e2e.Agent.Client.Jobs().Allocations(mj.WarmJobID(e2e.WarmPool), false, nil)
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
		stubs, _, _ := e2e.Agent.Client.Jobs().Allocations(mj.WarmJobID(e2e.WarmPool), true, nil)
		for _, a := range stubs {
			t.Logf("allocation %s: %s (desired %s)\n%s", a.ID, a.ClientStatus, a.DesiredStatus, e2e.Agent.TaskLogs(a.ID, "runner"))
		}
	})
}

// waitWarm waits for the warm pool's runners to run.
func waitWarm(t *testing.T) []*api.AllocationListStub {
	t.Helper()
	var allocs []*api.AllocationListStub
	testenv.Eventually(t, 120*time.Second, "the warm pool's 2 runners to run and wait for work", func() bool {
		allocs = warmAllocs(t)
		idle, err := e2e.Stack.Backends.Store.WarmIdleRunners(context.Background(), e2e.WarmPool)
		return len(allocs) == 2 && err == nil && len(idle) == 2
	})
	return allocs
}

// warmJob creates a job on the warm pool; timeout 0 sends none, as VGF's
// clients do (the pool's one-hour default_timeout applies).
func warmJob(t *testing.T, timeout int, cmd string, outputs ...string) string {
	t.Helper()
	body := map[string]any{
		"machine":     e2e.WarmPool,
		"input_files": map[string]string{"clip": e2e.ClipURL}, "output_files": outputs,
		"ffmpeg_commands": []string{cmd},
	}
	if timeout > 0 {
		body["timeout_seconds"] = timeout
	}
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, body)
	if r.Status != 200 && r.Status != 201 {
		t.Fatalf("create: HTTP %d %s", r.Status, r.Body)
	}
	return r.Data(t)["id"].(string)
}

// TestWarmJobEndToEnd: a short job runs on a warm runner of the pool's service
// job, and says so. So does a job without timeout_seconds (the pool's one-hour
// default) or with a longer one than max_job_seconds, when a runner waits and
// the reserve allows (docs/warm.md); with the pool's runners less its reserve
// already running such jobs, the next one is dispatched to Nomad at once, as
// its own child.
func TestWarmJobEndToEnd(t *testing.T) {
	e2e.NeedStack(t)
	warmLogs(t)
	allocs := waitWarm(t)
	ids := map[string]bool{}
	for _, a := range allocs {
		ids[a.ID] = true
	}
	const quick = "-i inputs/clip -t 1 -vf scale=160:-2 -c:v libx264 -preset ultrafast -an outputs/out.mp4"
	ranOn := func(id, path string) map[string]any {
		t.Helper()
		job := e2e.WaitTerminal(t, id)
		if job["status"] != "succeeded" {
			t.Fatalf("job %s: %v: %v", id, job["status"], job["error_message"])
		}
		w, _ := job["worker"].(map[string]any)
		switch path {
		case "warm":
			if w["path"] != "warm" || w["nomad_job_id"] != mj.WarmJobID(e2e.WarmPool) || !ids[fmt.Sprint(w["allocation_id"])] {
				t.Fatalf("job %s: worker = %v; want a warm runner, one of %v", id, w, ids)
			}
		case "dispatch":
			if w["path"] != "dispatch" || !strings.HasPrefix(fmt.Sprint(w["nomad_job_id"]), "mediajobs-"+e2e.WarmPool+"/dispatch-") || w["allocation_id"] == "" {
				t.Fatalf("job %s: worker = %v; want a dispatched child of mediajobs-%s", id, w, e2e.WarmPool)
			}
		}
		return job
	}

	// ranWarm is ranOn(…, "warm") of a job of timeout; a warm attempt whose
	// lease lapsed (its renewals too slow on a loaded machine) rightly runs
	// again elsewhere, so such a job is followed by another, up to 3.
	ranWarm := func(timeout int) map[string]any {
		t.Helper()
		for try := 1; ; try++ {
			id := warmJob(t, timeout, quick, "out.mp4")
			w, _ := e2e.WaitTerminal(t, id)["worker"].(map[string]any)
			if _, a, ok := mj.ParseChildID(fmt.Sprint(w["nomad_job_id"])); ok && a > 1 && try < 3 {
				t.Logf("job %s ran as attempt %d: its warm lease lapsed; another", id, a)
				waitWarm(t)
				continue
			}
			return ranOn(id, "warm")
		}
	}
	job := ranWarm(30)
	out := e2e.Download(t, job["output_files"].(map[string]any)["out.mp4"].(string))
	if p := e2e.Probe(t, out); len(p["streams"].([]any)) == 0 {
		t.Fatalf("output has no streams: %v", p)
	}
	waitWarm(t)
	ranWarm(0) // no timeout: the pool's default
	waitWarm(t)
	ranWarm(120) // longer than max_job_seconds

	// One long job holds a runner (2 runners, reserve 1): the next long one is
	// dispatched at once, though a runner waits.
	waitWarm(t)
	slow := warmJob(t, 0, "-stream_loop 2 -re -i inputs/clip -vf scale=160:-2 -c:v libx264 -preset ultrafast -an outputs/slow.mp4", "slow.mp4")
	runningOn(t, slow)
	ranOn(warmJob(t, 0, quick, "out.mp4"), "dispatch")
	ranOn(slow, "warm")
}

// slowWarmJob creates a warm job that runs about 9 s (the clip, three times, at
// its own rate), with a webhook; marker names its output, to find its ffmpeg.
func slowWarmJob(t *testing.T, marker string) string { return loopingWarmJob(t, marker, 2) }

// loopingWarmJob is slowWarmJob reading the clip loops+1 times (-1: until its
// timeout of 50 s ends it).
func loopingWarmJob(t *testing.T, marker string, loops int) string {
	t.Helper()
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{
		"machine": e2e.WarmPool, "timeout_seconds": 50, "webhook_url": e2e.HookURL,
		"input_files":     map[string]string{"clip": e2e.ClipURL},
		"output_files":    []string{marker + ".mp4"},
		"ffmpeg_commands": []string{fmt.Sprintf("-stream_loop %d -re -i inputs/clip -vf scale=160:-2 -c:v libx264 -preset ultrafast -an outputs/%s.mp4", loops, marker)},
	})
	if r.Status != 200 {
		t.Fatalf("create: HTTP %d %s", r.Status, r.Body)
	}
	return r.Data(t)["id"].(string)
}

// runningOn waits for job id to run on a warm runner and returns its allocation.
func runningOn(t *testing.T, id string) string {
	t.Helper()
	var alloc string
	testenv.Eventually(t, 60*time.Second, "job "+id+" to run on a warm runner", func() bool {
		job := e2e.Call(t, "GET", "/api/jobs/"+id, e2e.Stack.APIKey, nil).Data(t)
		w, _ := job["worker"].(map[string]any)
		if job["status"] == "running" && w["path"] == "warm" {
			alloc = fmt.Sprint(w["allocation_id"])
		}
		return alloc != ""
	})
	return alloc
}

// runnerPid is the pid of the warm runner process of alloc.
func runnerPid(t *testing.T, alloc string) int {
	t.Helper()
	var pids []int
	testenv.Eventually(t, 30*time.Second, "the warm runner process of "+alloc, func() bool {
		pids = testenv.ProcessesWith("NOMAD_ALLOC_ID="+alloc, "runner", "-warm")
		return len(pids) == 1
	})
	return pids[0]
}

// succeededOnce waits for job id to succeed on attempt 2 with its outputs
// published under that attempt, and its webhook delivered once.
func succeededOnce(t *testing.T, id string) map[string]any {
	t.Helper()
	job := e2e.WaitTerminal(t, id)
	if job["status"] != "succeeded" {
		t.Fatalf("job %v: %v", job["status"], job["error_message"])
	}
	if d := fmt.Sprint(job["status_detail"]); !strings.Contains(d, "attempt 2") {
		t.Fatalf("status_detail %q: want a success on attempt 2", d)
	}
	for name, u := range job["output_files"].(map[string]any) {
		if !strings.Contains(fmt.Sprint(u), "%2F2%2F") && !strings.Contains(fmt.Sprint(u), "/2/") {
			t.Fatalf("output %s is not attempt 2's: %v", name, u)
		}
	}
	testenv.Eventually(t, 30*time.Second, "the webhook of "+id, func() bool {
		j := e2e.Call(t, "GET", "/api/jobs/"+id, e2e.Stack.APIKey, nil).Data(t)
		w, _ := j["webhook"].(map[string]any)
		return w["status"] == "delivered"
	})
	if n := len(e2e.Hooks.Calls(id)); n != 1 {
		t.Fatalf("%d webhooks for job %s; want 1", n, id)
	}
	return job
}

// TestWarmRunnerKilledMidJob: kill -9 a warm runner while its job runs. Its
// lease lapses (Nomad restarts the task, whose first poll also ends the run it
// lost), the job runs again once, as attempt 2, and is published and announced
// once.
func TestWarmRunnerKilledMidJob(t *testing.T) {
	e2e.NeedStack(t)
	warmLogs(t)
	waitWarm(t)
	marker := fmt.Sprintf("killed%d", time.Now().UnixNano())
	id := slowWarmJob(t, marker)
	alloc := runningOn(t, id)
	testenv.Eventually(t, 30*time.Second, "the job's ffmpeg", func() bool { return len(testenv.ProcessesWith("", "ffmpeg", marker)) > 0 })
	if err := syscall.Kill(runnerPid(t, alloc), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// The sandbox dies with its runner: nothing of attempt 1 runs on.
	testenv.Eventually(t, 30*time.Second, "attempt 1's ffmpeg to end with its runner", func() bool {
		return len(testenv.ProcessesWith("", "ffmpeg", marker)) <= 1 // attempt 2's, at most
	})
	succeededOnce(t, id)
	waitWarm(t) // the killed runner is back, and waits again
}

// TestWarmRunnerCutOff: stop a warm runner (SIGSTOP) while its job runs. Its
// lease lapses, the job runs again on the other runner and succeeds once; the
// stopped runner, resumed, learns its lease is gone, and a result it would
// report for the old run is refused.
func TestWarmRunnerCutOff(t *testing.T) {
	e2e.NeedStack(t)
	warmLogs(t)
	waitWarm(t)
	marker := fmt.Sprintf("cutoff%d", time.Now().UnixNano())
	id := slowWarmJob(t, marker)
	alloc := runningOn(t, id)
	runs, err := e2e.Stack.Backends.Store.WarmRuns(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var old string
	for run, r := range runs {
		if r.JobID == id {
			old = run
		}
	}
	if old == "" {
		t.Fatalf("no run of job %s in %v", id, runs)
	}
	pid := runnerPid(t, alloc)
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	resumed := false
	resume := func() {
		if !resumed {
			resumed = true
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}
	defer resume()
	job := succeededOnce(t, id)
	if w, _ := job["worker"].(map[string]any); w["allocation_id"] == alloc {
		t.Fatalf("attempt 2 ran on the stopped runner %s", alloc)
	}
	// A late result of the old run, with the stopped runner's own identity.
	jwt, err := os.ReadFile(e2e.Agent.SecretsFile(alloc, "runner", "nomad_mediajobs.jwt"))
	if err != nil {
		t.Fatal(err)
	}
	late := e2e.Call(t, "POST", "/warm/done", strings.TrimSpace(string(jwt)), map[string]any{
		"pool": e2e.WarmPool, "run": old, "job_id": id, "attempt": 1, "outcome": "reported"})
	if late.Status != 409 {
		t.Fatalf("late result: HTTP %d %s; want 409", late.Status, late.Body)
	}
	resume()
	waitWarm(t) // resumed, it dropped the old job and waits again
	if j := e2e.Call(t, "GET", "/api/jobs/"+id, e2e.Stack.APIKey, nil).Data(t); j["status"] != "succeeded" || len(e2e.Hooks.Calls(id)) != 1 {
		t.Fatalf("after the old runner resumed: %v, %d webhooks", j["status"], len(e2e.Hooks.Calls(id)))
	}
}

// TestWarmCancelStopsFFmpeg: cancelling a warm job stops its ffmpeg on the
// runner, and the runner takes the next job.
func TestWarmCancelStopsFFmpeg(t *testing.T) {
	e2e.NeedStack(t)
	warmLogs(t)
	waitWarm(t)
	marker := fmt.Sprintf("cancel%d", time.Now().UnixNano())
	id := loopingWarmJob(t, marker, -1) // ends only when stopped, or at its timeout
	runningOn(t, id)
	testenv.Eventually(t, 30*time.Second, "the job's ffmpeg", func() bool { return len(testenv.ProcessesWith("", "ffmpeg", marker)) > 0 })
	if r := e2e.Call(t, "POST", "/api/jobs/"+id+"/cancel", e2e.Stack.APIKey, nil); r.Status != 200 {
		t.Fatalf("cancel: HTTP %d %s", r.Status, r.Body)
	}
	// Well within the job's timeout (50 s), which would stop it too; a loaded
	// machine takes seconds to carry the cancel to the runner.
	testenv.Eventually(t, 30*time.Second, "the cancelled job's ffmpeg to stop", func() bool {
		return len(testenv.ProcessesWith("", "ffmpeg", marker)) == 0
	})
	waitWarm(t)
	next := e2e.WaitTerminal(t, warmJob(t, 30, "-i inputs/clip -t 1 -vf scale=160:-2 -c:v libx264 -preset ultrafast -an outputs/out.mp4", "out.mp4"))
	if next["status"] != "succeeded" {
		t.Fatalf("next job: %v: %v", next["status"], next["error_message"])
	}
}

// TestWarmLeasesSurviveLeaderChange: the leading dispatcher dies while a warm
// runner runs a job. The lease is etcd's and the runner renews it through the
// gateway, so the job runs on, once, and the new leader applies its result.
func TestWarmLeasesSurviveLeaderChange(t *testing.T) {
	c := e2e.NewCluster(t, e2e.Agent, fmt.Sprintf(`
pool "clwarm" {
  runner_command = %q
  cpu            = 100
  memory         = 128
  warm {
    count           = 1
    max_job_seconds = 60
    cpu             = 100
    memory          = 256
    lease_ttl       = "20s" # survives a loaded machine's slow renewals; the failover is the test
  }
}`, e2e.RunnerBin))
	d1 := c.StartDispatcher("d1")
	testenv.Eventually(t, 30*time.Second, "d1 to lead", d1.Leading)
	d2 := c.StartDispatcher("d2")
	testenv.Eventually(t, 30*time.Second, "d2 to wait", func() bool { return strings.Contains(d2.Log.String(), "waiting for leadership") })
	testenv.Eventually(t, 120*time.Second, "the warm runner to wait for work", func() bool {
		idle, err := c.Store.WarmIdleRunners(context.Background(), "clwarm")
		return err == nil && len(idle) == 1
	})
	body := c.JobBody("leader", "-stream_loop 2 -re -i inputs/in -vf scale=160:-2 -c:v libx264 -preset ultrafast -an outputs/o.mp4")
	body["machine"], body["timeout_seconds"] = "clwarm", 50
	id := c.Create(body)
	testenv.Eventually(t, 60*time.Second, "the job to run on the warm runner", func() bool {
		j := c.Job(id)
		w, _ := j["worker"].(map[string]any)
		return j["status"] == "running" && w["path"] == "warm"
	})
	d1.Kill()
	testenv.Eventually(t, 30*time.Second, "d2 to take over", d2.Leading)
	j := c.WaitStatus(id, 90*time.Second, "succeeded", "failed", "cancelled")
	if j["status"] != "succeeded" {
		t.Fatalf("job %v: %v", j["status"], j["error_message"])
	}
	if st := c.Stored(id); st.Attempt != 1 {
		t.Fatalf("the job ran as attempt %d (%s); the lease should have survived the failover", st.Attempt, st.StatusDetail)
	}
	if n := c.Inputs.Count("leader"); n != 1 {
		t.Fatalf("the job's input was fetched %d times; want once", n)
	}
	testenv.Eventually(t, 30*time.Second, "the webhook", func() bool { return len(e2e.Hooks.Calls(id)) > 0 })
	if n := len(e2e.Hooks.Calls(id)); n != 1 {
		t.Fatalf("%d webhooks; want 1", n)
	}
	// This installation shares the Nomad e2e.Agent with the shared stack, whose warm
	// pool it does not configure: its dispatchers must leave those runners be.
	other, _, err := e2e.Agent.Client.Jobs().Info(mj.WarmJobID(e2e.WarmPool), nil)
	if err != nil || other.Stop != nil && *other.Stop {
		t.Fatalf("the other installation's warm job %s was stopped (err %v)", mj.WarmJobID(e2e.WarmPool), err)
	}
}

// scaleWarm sets the warm job's count through Nomad's scale API, as an operator
// or the autoscaler would (refused while a deployment runs: tried again).
func scaleWarm(t *testing.T, n int) {
	t.Helper()
	testenv.Eventually(t, 60*time.Second, fmt.Sprintf("Nomad to scale the warm job to %d", n), func() bool {
		_, _, err := e2e.Agent.Client.Jobs().Scale(mj.WarmJobID(e2e.WarmPool), "warm", &n, "warm_e2e_test", false, nil, nil)
		return err == nil
	})
}

// TestWarmScaleWithJobsInFlight: scaling the warm job down while both runners
// hold a job stops one runner, which gives its job back; the job runs again
// and, like the other, succeeds once. Scaling up adds a runner that takes jobs.
func TestWarmScaleWithJobsInFlight(t *testing.T) {
	e2e.NeedStack(t)
	warmLogs(t)
	waitWarm(t)
	t.Cleanup(func() {
		scaleWarm(t, 2)
		waitWarm(t)
	})
	// Nomad refuses to scale while a deployment of the job runs: let the last
	// one finish before the jobs start, so the scale lands while they run.
	testenv.Eventually(t, 120*time.Second, "the warm job's deployment to finish", func() bool {
		d, _, err := e2e.Agent.Client.Jobs().LatestDeployment(mj.WarmJobID(e2e.WarmPool), nil)
		return err == nil && (d == nil || d.Status != "running")
	})
	a := slowWarmJob(t, fmt.Sprintf("scaleA%d", time.Now().UnixNano()))
	b := slowWarmJob(t, fmt.Sprintf("scaleB%d", time.Now().UnixNano()))
	runningOn(t, a)
	runningOn(t, b)
	scaleWarm(t, 1)
	for _, id := range []string{a, b} {
		if j := e2e.Call(t, "GET", "/api/jobs/"+id, e2e.Stack.APIKey, nil).Data(t); j["status"] != "running" {
			t.Fatalf("job %s was %v before the scale landed; the test needs both running", id, j["status"])
		}
	}
	retried := 0
	for _, id := range []string{a, b} {
		job := e2e.WaitTerminal(t, id)
		if job["status"] != "succeeded" {
			t.Fatalf("job %s: %v: %v", id, job["status"], job["error_message"])
		}
		if strings.Contains(fmt.Sprint(job["status_detail"]), "attempt 2") {
			retried++
		}
		testenv.Eventually(t, 30*time.Second, "the webhook of "+id, func() bool { return len(e2e.Hooks.Calls(id)) > 0 })
		if n := len(e2e.Hooks.Calls(id)); n != 1 {
			t.Fatalf("%d webhooks for %s; want 1", n, id)
		}
	}
	if retried != 1 {
		t.Fatalf("%d jobs ran again; want the one whose runner was scaled away", retried)
	}

	scaleWarm(t, 3)
	testenv.Eventually(t, 120*time.Second, "3 warm runners waiting for work", func() bool {
		idle, err := e2e.Stack.Backends.Store.WarmIdleRunners(context.Background(), e2e.WarmPool)
		return err == nil && len(idle) == 3 && len(warmAllocs(t)) == 3
	})
	used := map[string]bool{}
	var ids []string
	for i := 0; i < 3; i++ {
		ids = append(ids, slowWarmJob(t, fmt.Sprintf("scaleC%d%d", i, time.Now().UnixNano())))
	}
	for _, id := range ids {
		used[runningOn(t, id)] = true
	}
	if len(used) != 3 {
		t.Fatalf("3 jobs ran on %d runners; want all 3 busy", len(used))
	}
	for _, id := range ids {
		if job := e2e.WaitTerminal(t, id); job["status"] != "succeeded" {
			t.Fatalf("job %s: %v: %v", id, job["status"], job["error_message"])
		}
	}
}
