package cluster_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/mediajobs/mediajobs/testenv/cluster"
	clientv3 "go.etcd.io/etcd/client/v3"
)

func TestMain(m *testing.M) {
	cluster.MemberMain() // the harness re-executes this binary as each etcd member
	os.Exit(m.Run())
}

// jobSeconds is how long each job's ffmpeg runs: it copies a clip this long at
// its native rate (-re), so the jobs take wall time, not CPU.
const jobSeconds = 4

// shortTimeout is the timeout_seconds of the jobs on the warm pool: at most its
// max_job_seconds, so they run on its warm runners.
const shortTimeout = 30

// TestClusterSurvivesFaults runs jobs of a few seconds through the two gateways
// of a real multi-process cluster while it kills -9, in turn, the leading
// dispatcher, a gateway, an etcd member, a warm runner with a job, a Nomad
// client with work on it, two etcd members, MinIO and the leading Nomad server,
// and pauses the leading dispatcher. One job in three is short enough for the
// warm pool (docs/warm.md). Afterwards every job has succeeded exactly once, some on
// warm runners, every output downloads through either gateway, every webhook
// was delivered once, and Nomad runs nothing but the warm runners, which hold
// no job. Each fault's recovery time is logged.
func TestClusterSurvivesFaults(t *testing.T) {
	for _, b := range []string{"ffmpeg", "ffprobe", "bwrap"} {
		testenv.Binary(t, b)
	}
	nomadBin, minioBin := testenv.NomadBinary(t), testenv.MinIOBinary(t)
	cluster.SweepStale(os.TempDir(), "mediajobs-cluster-") // left by a run killed by its -timeout
	dir, err := os.MkdirTemp("", "mediajobs-cluster-")
	if err != nil {
		t.Fatal(err)
	}
	defer os.RemoveAll(dir)
	mediajobs, err := testenv.BuildMediajobs(dir)
	if err != nil {
		t.Fatal(err)
	}
	clip := filepath.Join(dir, "clip.mp4")
	gen := exec.Command("ffmpeg", "-v", "error", "-f", "lavfi", "-i", fmt.Sprintf("testsrc=duration=%d:size=160x120:rate=10", jobSeconds),
		"-f", "lavfi", "-i", fmt.Sprintf("sine=duration=%d", jobSeconds), "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-shortest", clip)
	if out, err := gen.CombinedOutput(); err != nil {
		t.Fatalf("generate clip: %v\n%s", err, out)
	}
	inputs := httptest.NewServer(http.FileServer(http.Dir(dir)))
	defer inputs.Close()
	hooks := &receiver{byJob: map[string]map[string]int{}}
	hookSrv := httptest.NewServer(hooks)
	defer hookSrv.Close()

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var progress bytes.Buffer
	c, err := cluster.Start(ctx, cluster.Options{Dir: filepath.Join(dir, "cluster"), Mediajobs: mediajobs, Nomad: nomadBin, MinIO: minioBin, Progress: &progress})
	t.Log(strings.TrimSpace(progress.String()))
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if t.Failed() {
			for _, p := range c.AllProcs() {
				t.Logf("--- %s ---\n%s", p.Name, p.LogTail(4000))
			}
		}
		c.Close()
	}()

	// Every write of every job record, from before the first job: a job's status
	// may turn terminal once and never change after.
	w := &transitions{terminal: map[string]int{}, after: map[string][]string{}, last: map[string]mj.Status{}}
	wctx, wcancel := context.WithCancel(ctx)
	defer wcancel()
	start, err := c.Etcd3.Get(ctx, "/")
	if err != nil {
		t.Fatal(err)
	}
	go w.follow(wctx, c.Etcd3, c.Prefix+"jobs/", start.Header.Revision+1)

	api0 := client{base: c.GatewayURLs[0], key: c.APIKey}
	api1 := client{base: c.GatewayURLs[1], key: c.APIKey}
	var ids, shortIDs []string
	create := func(via client, n int) {
		for i := 0; i < n; i++ {
			tag := fmt.Sprintf("j%02d", len(ids))
			body := map[string]any{
				"input_files":     map[string]string{"in": inputs.URL + "/clip.mp4?job=" + tag},
				"output_files":    []string{"out.mp4"},
				"ffmpeg_commands": []string{"-re -i {{in}} -c copy {{out.mp4}}"},
				"webhook_url":     hookSrv.URL + "/" + tag,
			}
			// One in three, in every wave, fits the warm pool.
			short := len(ids)%3 == 2
			if short {
				body["machine"], body["timeout_seconds"] = cluster.WarmPool, shortTimeout
			}
			id, err := via.create(body)
			if err != nil {
				t.Fatalf("create %s via %s: %v", tag, via.base, err)
			}
			ids = append(ids, id)
			if short {
				shortIDs = append(shortIDs, id)
			}
		}
	}
	// The first wave alternates between the gateways.
	for i := 0; i < 15; i++ {
		create([]client{api0, api1}[i%2], 1)
	}
	running := func(n int) func() bool {
		return func() bool { return countRunning(t, c.Nomad) >= n }
	}
	testenv.Eventually(t, 90*time.Second, "jobs running on Nomad", running(4))
	var recovery []string
	report := func(fault, what string, d time.Duration) {
		line := fmt.Sprintf("%-44s %-48s %6.1f s", fault, what, d.Seconds())
		recovery = append(recovery, line)
		t.Log(line)
	}

	// 1. The leading dispatcher dies; the standby takes over after its session
	// expires (leader_ttl 3s) and picks up the stream and the work.
	leader, err := c.Leader(ctx)
	if err != nil || leader < 0 {
		t.Fatalf("no leading dispatcher: %v", err)
	}
	doneBefore := w.terminalCount()
	t0 := time.Now()
	c.Dispatchers[leader].Kill()
	if _, err := c.WaitLeader(ctx, leader, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	report("kill -9 leading dispatcher", "until the standby leads", time.Since(t0))
	testenv.Eventually(t, 90*time.Second, "a job to finish under the new leader", func() bool { return w.terminalCount() > doneBefore })
	report("", "until a job finishes under it", time.Since(t0))
	if err := c.Dispatchers[leader].Start(); err != nil {
		t.Fatal(err)
	}

	// 2. A gateway dies: clients go on against the other. It is the one runners
	// report progress to, so they carry on without it. It comes back later.
	t0 = time.Now()
	c.Gateways[0].Kill()
	create(api1, 15)
	report("kill -9 gateway1", "until 15 jobs are created through gateway2", time.Since(t0))

	// 3. An etcd member dies (the raft leader: the hardest case) and comes back.
	testenv.Eventually(t, 90*time.Second, "jobs running on Nomad", running(4))
	member, err := c.EtcdLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	t0 = time.Now()
	c.Etcd[member].Kill()
	create(api1, 10)
	report(fmt.Sprintf("kill -9 etcd%d (raft leader)", member+1), "until 10 more jobs are created (2 of 3 members)", time.Since(t0))
	t1 := time.Now()
	if err := c.Etcd[member].Start(); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the etcd cluster whole again", func() bool { return c.EtcdHealthy(ctx) == nil })
	report("", "restarted member until all 3 agree on a leader", time.Since(t1))
	t1 = time.Now()
	if err := c.Gateways[0].Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitGateway(ctx, 0, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	report("gateway1 restarted", "until /readyz answers 200", time.Since(t1))
	create(api0, 5)

	// 4. A warm runner dies with a job (kill -9 of its process, as a crash). The
	// runner Nomad restarts in place gives the job up at its first poll, or its
	// lease lapses (lease_ttl 6s): either way it runs again, once, as attempt 2.
	// The job is one that just started, so it cannot finish before the kill.
	var warmVictim *mj.Job
	var warmPid int
	testenv.Eventually(t, 90*time.Second, "a short job just started on a warm runner", func() bool {
		jobs, _ := c.Store.Jobs(ctx, shortIDs)
		for _, j := range jobs {
			if j == nil || j.Status != mj.StatusRunning || j.Attempt != 1 || j.Worker == nil || j.Worker.Path != mj.WorkerWarm ||
				j.AttemptStartedAt == nil || time.Since(*j.AttemptStartedAt) > 2*time.Second {
				continue
			}
			if pids := testenv.ProcessesWith("NOMAD_ALLOC_ID="+j.Worker.AllocationID, "runner", "-warm"); len(pids) == 1 {
				warmVictim, warmPid = j, pids[0]
				return true
			}
		}
		return false
	})
	t0 = time.Now()
	if err := syscall.Kill(warmPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "the killed warm runner's job to run again", func() bool {
		j, err := c.Store.Job(ctx, warmVictim.ID)
		return err == nil && (j.Attempt >= 2 || j.Status.Terminal())
	})
	report("kill -9 warm runner with a job", "until its job runs again (attempt 2)", time.Since(t0))
	testenv.Eventually(t, 60*time.Second, "Nomad to restart the killed warm runner", func() bool {
		return len(testenv.ProcessesWith("NOMAD_ALLOC_ID="+warmVictim.Worker.AllocationID, "runner", "-warm")) == 1
	})
	report("", "until Nomad restarted the runner", time.Since(t0))
	testenv.Eventually(t, 90*time.Second, "the killed warm runner's job to finish", func() bool { return w.isTerminal(warmVictim.ID) })
	report("", "until the job finished", time.Since(t0))
	// Attempt 2, or later when a loaded machine loses that one too (its lease
	// lapsing behind two CPU hogs): the job ran again and ended once (checked
	// below with every job).
	if j, err := c.Store.Job(ctx, warmVictim.ID); err != nil || j.Status != mj.StatusSucceeded || j.Attempt < 2 {
		t.Errorf("the job of the killed warm runner: %+v (%v); want succeeded on attempt 2 or later", j, err)
	}
	create(api0, 5) // 50 in all: fresh work for the next fault

	// 5. A Nomad client with allocations dies with its tasks, as a machine would.
	// Its work is lost: Nomad keeps the allocations "unknown" (our jobspecs'
	// disconnect block) and the dispatcher runs those jobs again elsewhere after
	// disconnect_grace (10s here); the node's own allocations never publish. A
	// warm runner there loses its job when its lease lapses, and its allocation
	// is replaced on the other client. A client with a busy warm runner is
	// preferred, when there is one.
	var victim, lostWarm int
	var lostJobs []string
	testenv.Eventually(t, 90*time.Second, "a Nomad client running jobs", func() bool {
		victim, lostJobs, lostWarm = -1, nil, 0
		for i := range c.NomadClients {
			jobs, warm := jobsOnNode(t, c, i, shortIDs)
			if len(jobs) > 0 && (victim < 0 || warm > 0) {
				victim, lostJobs, lostWarm = i, jobs, warm
			}
		}
		return victim >= 0
	})
	t0 = time.Now()
	c.NomadClients[victim].Kill()
	testenv.Eventually(t, 3*time.Minute, "the lost node's jobs to run again", func() bool {
		for _, id := range lostJobs {
			if j, err := c.Store.Job(ctx, id); err != nil || (j.Attempt < 2 && !j.Status.Terminal()) {
				return false
			}
		}
		return true
	})
	report(fmt.Sprintf("kill -9 %s with %d jobs (%d warm)", c.NomadClients[victim].Name, len(lostJobs), lostWarm), "until they run again (attempt 2)", time.Since(t0))
	testenv.Eventually(t, 3*time.Minute, "the lost node's jobs to finish elsewhere", func() bool {
		for _, id := range lostJobs {
			if !w.isTerminal(id) {
				return false
			}
		}
		return true
	})
	report("", "until they finished on the other client", time.Since(t0))
	t1 = time.Now()
	if err := c.NomadClients[victim].Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNomadClients(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	report("", "restarted client until its node is ready", time.Since(t1))

	// 6. etcd loses quorum: 2 of its 3 members are down for 30 s. The gateways
	// answer what needs etcd with 503 and a Retry-After, never a 500 or a hang;
	// a create sent then, retried with its Idempotency-Key once etcd is back,
	// makes exactly one job; the jobs in flight finish (checked below).
	create(api0, 5)
	testenv.Eventually(t, 90*time.Second, "jobs running on Nomad", running(2))
	lead, err := c.EtcdLeader(ctx)
	if err != nil {
		t.Fatal(err)
	}
	down := []int{lead, (lead + 1) % 3}
	t0 = time.Now()
	for _, i := range down {
		c.Etcd[i].Kill()
	}
	quorumKey := fmt.Sprintf("quorum-%d", time.Now().UnixNano())
	quorumBody := map[string]any{"input_files": map[string]string{"in": inputs.URL + "/clip.mp4?job=quorum"}, "output_files": []string{"out.mp4"},
		"ffmpeg_commands": []string{"-re -i {{in}} -c copy {{out.mp4}}"}, "webhook_url": hookSrv.URL + "/quorum"}
	for g, base := range c.GatewayURLs {
		status, retryAfter, body := rawCreate(t, base, c.APIKey, quorumKey, quorumBody)
		if status != http.StatusServiceUnavailable || retryAfter == "" || !strings.Contains(body, `"unavailable"`) {
			t.Errorf("gateway%d without etcd quorum: HTTP %d, Retry-After %q: %s", g+1, status, retryAfter, body)
		}
	}
	report("kill -9 etcd (2 of 3 members)", "until both gateways answered 503", time.Since(t0))
	time.Sleep(time.Until(t0.Add(30 * time.Second))) // the outage's length, not a condition
	t1 = time.Now()
	for _, i := range down {
		if err := c.Etcd[i].Start(); err != nil {
			t.Fatal(err)
		}
	}
	testenv.Eventually(t, 90*time.Second, "the etcd cluster whole again", func() bool { return c.EtcdHealthy(ctx) == nil })
	report("", "restarted members until all 3 agree on a leader", time.Since(t1))
	var quorumID string
	testenv.Eventually(t, 90*time.Second, "the create retried with its Idempotency-Key", func() bool {
		status, _, body := rawCreate(t, c.GatewayURLs[1], c.APIKey, quorumKey, quorumBody)
		var r struct{ Data jobView }
		if status != 200 || json.Unmarshal([]byte(body), &r) != nil {
			return false
		}
		quorumID = r.Data.ID
		return quorumID != ""
	})
	if status, _, body := rawCreate(t, c.GatewayURLs[0], c.APIKey, quorumKey, quorumBody); status != 200 || !strings.Contains(body, quorumID) {
		t.Errorf("the same Idempotency-Key through the other gateway: HTTP %d %s (want job %s)", status, body, quorumID)
	}
	ids = append(ids, quorumID)
	report("", "until the retried create made its one job", time.Since(t1))

	// 7. The object store (MinIO) dies while jobs run, warm and dispatched, and
	// comes back 10 s later: runners and the dispatcher wait for it, no job is
	// lost or failed for it (checked below).
	// bothPaths: of the last n jobs, some run on warm runners and some dispatched.
	// bothRunning creates waves of 6 jobs (two short: warm) through via until
	// one wave has a warm and a dispatched job running at the same moment. A
	// wave whose warm jobs end before Nomad starts a dispatched one (4-second
	// jobs, a loaded machine, a queue behind the earlier faults) is followed by
	// another, up to 4.
	bothRunning := func(via client) {
		t.Helper()
		for wave := 1; ; wave++ {
			create(via, 6)
			wave6 := ids[len(ids)-6:]
			running := func() (warm, dispatched, pending bool) {
				jobs, _ := c.Store.Jobs(ctx, wave6)
				for _, j := range jobs {
					switch {
					case j == nil:
					case j.Status == mj.StatusRunning && j.Worker != nil:
						warm = warm || j.Worker.Path == mj.WorkerWarm
						dispatched = dispatched || j.Worker.Path == mj.WorkerDispatch
						pending = true
					case !j.Status.Terminal():
						pending = true
					}
				}
				return warm, dispatched, pending
			}
			deadline := time.Now().Add(90 * time.Second)
			for time.Now().Before(deadline) {
				warm, dispatched, pending := running()
				if warm && dispatched {
					return
				}
				if !pending {
					break // the wave ended without an overlap
				}
				time.Sleep(100 * time.Millisecond) // a poll's interval
			}
			if wave == 4 {
				t.Fatalf("no wave of 4 had dispatched and warm jobs running at once")
			}
			t.Logf("wave %d had no dispatched and warm job running at once; another", wave)
		}
	}
	bothRunning(api1)
	t0 = time.Now()
	c.MinIO.Kill()
	time.Sleep(10 * time.Second) // the outage's length, not a condition
	if err := c.MinIO.Restart(); err != nil {
		t.Fatal(err)
	}
	report("kill -9 MinIO with jobs running", "10 s down, until it is ready again", time.Since(t0))

	// 8. The leading dispatcher is paused (SIGSTOP) in the middle of a burst,
	// dispatching and handing jobs to warm runners, past its session's TTL: the
	// standby takes over; the old leader then resumes and must write nothing
	// (its writes are fenced), so no job runs twice or ends twice (checked below).
	leader, err = c.Leader(ctx)
	if err != nil || leader < 0 {
		t.Fatalf("no leading dispatcher: %v", err)
	}
	create(api0, 6)
	t0 = time.Now()
	if err := syscall.Kill(c.Dispatchers[leader].Pid(), syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	if _, err := c.WaitLeader(ctx, leader, 60*time.Second); err != nil {
		syscall.Kill(c.Dispatchers[leader].Pid(), syscall.SIGCONT)
		t.Fatal(err)
	}
	report("SIGSTOP leading dispatcher mid-burst", "until the standby leads", time.Since(t0))
	create(api1, 3)
	if err := syscall.Kill(c.Dispatchers[leader].Pid(), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	report("", "SIGCONT: the old leader resumes behind the new", time.Since(t0))

	// 9. The Nomad server that leads its raft group dies in the middle of a
	// burst, with jobs running, warm and dispatched, and more being dispatched.
	// The other two elect a leader; until then Nomad answers 500 (no cluster
	// leader), or the proxy in front of the servers (nomad.address) 502, event
	// streams are cut, and the dispatcher waits. No job fails or runs twice for
	// it (checked below). The server comes back and rejoins as a voter.
	bothRunning(api0)
	nomadLeader, err := c.NomadLeader()
	if err != nil {
		t.Fatal(err)
	}
	create(api1, 6) // queued: being dispatched, or waiting for a warm runner
	t0 = time.Now()
	c.NomadServers[nomadLeader].Kill()
	create(api0, 3) // during the election
	if _, err := c.WaitNomadLeader(ctx, nomadLeader, 60*time.Second); err != nil {
		t.Fatal(err)
	}
	report(fmt.Sprintf("kill -9 %s (Nomad leader)", c.NomadServers[nomadLeader].Name), "mid-burst, until the other two elect a leader", time.Since(t0))
	burst := ids[len(ids)-9:]
	testenv.Eventually(t, 3*time.Minute, "the jobs of the burst to run", func() bool {
		jobs, _ := c.Store.Jobs(ctx, burst)
		for _, j := range jobs {
			if j == nil || (j.Status != mj.StatusRunning && !j.Status.Terminal()) {
				return false
			}
		}
		return true
	})
	report("", "until the 9 jobs of the burst run (or ended)", time.Since(t0))
	t1 = time.Now()
	if err := c.NomadServers[nomadLeader].Start(); err != nil {
		t.Fatal(err)
	}
	if err := c.WaitNomadServers(ctx, 2*time.Minute); err != nil {
		t.Fatal(err)
	}
	report("", "restarted server until all 3 agree, as voters", time.Since(t1))

	// Afterwards.
	testenv.Eventually(t, 4*time.Minute, "every job terminal", func() bool { return w.terminalCountOf(ids) == len(ids) })
	paths := map[string]int{}
	for i, id := range ids {
		j, err := []client{api0, api1}[i%2].job(id)
		if err != nil {
			t.Fatal(err)
		}
		if j.Machine == cluster.WarmPool && j.Worker != nil {
			paths[j.Worker.Path]++
		}
		if j.Status != "succeeded" {
			t.Errorf("job %s: %s: %s", id, j.Status, j.ErrorMessage)
			continue
		}
		if o := j.Outputs["out.mp4"]; o.SizeBytes <= 0 || o.DurationSeconds < jobSeconds-0.5 {
			t.Errorf("job %s: out.mp4 is %d bytes, %.1f s; want the %d s clip", id, o.SizeBytes, o.DurationSeconds, jobSeconds)
		}
		// Both gateways hand out links that download the same bytes.
		var got [2][]byte
		for g, via := range []client{api0, api1} {
			j, err := via.job(id)
			if err != nil {
				t.Fatal(err)
			}
			if got[g], err = download(j.OutputFiles["out.mp4"]); err != nil {
				t.Errorf("job %s: out.mp4 via gateway%d: %v", id, g+1, err)
			}
		}
		if len(got[0]) == 0 || !bytes.Equal(got[0], got[1]) {
			t.Errorf("job %s: out.mp4 downloads differ between the gateways (%d and %d bytes)", id, len(got[0]), len(got[1]))
		}
	}
	t.Logf("%d short jobs: %d ran last on a warm runner, %d dispatched", len(shortIDs), paths[mj.WorkerWarm], paths[mj.WorkerDispatch])
	if paths[mj.WorkerWarm] == 0 {
		t.Errorf("no short job ran on a warm runner (worker.path of %d short jobs: %v)", len(shortIDs), paths)
	}
	for _, p := range w.problems(ids) {
		t.Error(p)
	}
	testenv.Eventually(t, 90*time.Second, "every webhook delivered", func() bool { return hooks.delivered(ids) == len(ids) })
	for _, p := range hooks.problems(ids) {
		t.Error(p)
	}
	// Nomad runs nothing for the jobs: no dispatched child (of either pool) and no
	// runner process. The warm service job's allocations are not counted: they
	// run by design, between jobs; they must hold no run.
	var live, procs []string
	var runs map[string]store.WarmRun
	deadline := time.Now().Add(2 * time.Minute)
	for {
		live, procs = liveChildren(t, c.Nomad), runnerProcs(ids)
		runs, err = c.Store.WarmRuns(ctx)
		if len(live) == 0 && len(procs) == 0 && err == nil && len(runs) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 2m, Nomad children not dead:\n%s\nrunner processes: %v\nwarm runs: %v (%v)", strings.Join(live, "\n"), procs, runs, err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, p := range hooks.problems(ids) { // a late second delivery
		t.Error(p)
	}
	t.Logf("recovery times:\n%s", strings.Join(recovery, "\n"))
	if f := os.Getenv("MEDIAJOBS_CLUSTER_REPORT"); f != "" {
		os.WriteFile(f, []byte(strings.Join(recovery, "\n")+"\n"), 0o644)
	}
}

// client is the public API through one gateway.
type client struct{ base, key string }

type jobView struct {
	ID           string            `json:"id"`
	Status       string            `json:"status"`
	Machine      string            `json:"machine"`
	Worker       *mj.Worker        `json:"worker"`
	ErrorMessage string            `json:"error_message"`
	OutputFiles  map[string]string `json:"output_files"`
	Outputs      map[string]struct {
		SizeBytes       int64   `json:"size_bytes"`
		DurationSeconds float64 `json:"duration_seconds"`
	} `json:"outputs"`
}

func (c client) do(method, path string, body any) ([]byte, error) {
	var r io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		r = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, c.base+path, r)
	req.Header.Set("Authorization", "Bearer "+c.key)
	req.Header.Set("Content-Type", "application/json")
	if method == "POST" {
		req.Header.Set("Idempotency-Key", fmt.Sprintf("test-%d", time.Now().UnixNano()))
	}
	// As a well-behaved client: a 429 or 503 is tried again after Retry-After
	// (a create carries an Idempotency-Key, so a retry never makes two jobs).
	for attempt := 0; ; attempt++ {
		if body != nil {
			b, _ := json.Marshal(body)
			req.Body = io.NopCloser(bytes.NewReader(b))
		}
		resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
		if err != nil {
			return nil, err
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if (resp.StatusCode == 429 || resp.StatusCode == 503) && attempt < 20 {
			wait, _ := strconv.Atoi(resp.Header.Get("Retry-After"))
			time.Sleep(time.Duration(max(wait, 1)) * 100 * time.Millisecond)
			continue
		}
		if resp.StatusCode != 200 {
			return nil, fmt.Errorf("%s %s: %s %s", method, path, resp.Status, b)
		}
		return b, nil
	}
}

// rawCreate is one POST /api/ffmpeg with the given Idempotency-Key, not
// retried: its status, Retry-After and body.
func rawCreate(t *testing.T, base, key, idem string, body any) (int, string, string) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", base+"/api/ffmpeg", bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	req.Header.Set("Idempotency-Key", idem)
	resp, err := (&http.Client{Timeout: 2 * time.Minute}).Do(req)
	if err != nil {
		t.Fatalf("POST %s/api/ffmpeg: %v", base, err)
	}
	defer resp.Body.Close()
	rb, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header.Get("Retry-After"), string(rb)
}

func (c client) create(body any) (string, error) {
	b, err := c.do("POST", "/api/ffmpeg", body)
	if err != nil {
		return "", err
	}
	var r struct{ Data jobView }
	if err := json.Unmarshal(b, &r); err != nil || r.Data.ID == "" {
		return "", fmt.Errorf("create: %v: %s", err, b)
	}
	return r.Data.ID, nil
}

func (c client) job(id string) (*jobView, error) {
	b, err := c.do("GET", "/api/jobs/"+id, nil)
	if err != nil {
		return nil, err
	}
	var r struct{ Data jobView }
	return &r.Data, json.Unmarshal(b, &r)
}

func download(u string) ([]byte, error) {
	if u == "" {
		return nil, fmt.Errorf("no link")
	}
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Get(u)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 {
		return nil, fmt.Errorf("%s: %s", resp.Status, b)
	}
	return b, err
}

// transitions follows every write of the job records in etcd.
type transitions struct {
	mu       sync.Mutex
	terminal map[string]int       // job id -> writes that made it terminal
	after    map[string][]string  // job id -> status changes after terminal
	last     map[string]mj.Status // job id -> last status seen
	err      error
}

// follow watches from rev on. A watch that ends (etcd cancels it while a member
// has no leader) is resumed after the last revision seen; only a compaction past
// it, which would hide writes, is an error.
func (w *transitions) follow(ctx context.Context, cli *clientv3.Client, prefix string, rev int64) {
	for ctx.Err() == nil {
		rev = w.watch(ctx, cli, prefix, rev)
		if rev < 0 {
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// watch applies events from rev until the watch ends; it returns where to resume,
// or -1 after a compaction.
func (w *transitions) watch(ctx context.Context, cli *clientv3.Client, prefix string, rev int64) int64 {
	for resp := range cli.Watch(clientv3.WithRequireLeader(ctx), prefix, clientv3.WithPrefix(), clientv3.WithRev(rev)) {
		if resp.CompactRevision != 0 {
			w.mu.Lock()
			w.err = fmt.Errorf("compacted at %d: writes after %d are lost", resp.CompactRevision, rev)
			w.mu.Unlock()
			return -1
		}
		if resp.Err() != nil {
			return rev
		}
		for _, ev := range resp.Events {
			rev = ev.Kv.ModRevision + 1
			if ev.Type != clientv3.EventTypePut {
				continue
			}
			var j mj.Job
			if json.Unmarshal(ev.Kv.Value, &j) != nil {
				continue
			}
			w.mu.Lock()
			prev, seen := w.last[j.ID]
			switch {
			case seen && prev.Terminal() && j.Status != prev:
				w.after[j.ID] = append(w.after[j.ID], fmt.Sprintf("%s -> %s", prev, j.Status))
			case j.Status.Terminal() && (!seen || !prev.Terminal()):
				w.terminal[j.ID]++
			}
			w.last[j.ID] = j.Status
			w.mu.Unlock()
		}
	}
	return rev
}

func (w *transitions) terminalCount() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return len(w.terminal)
}

func (w *transitions) isTerminal(id string) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last[id].Terminal()
}

func (w *transitions) terminalCountOf(ids []string) int {
	n := 0
	for _, id := range ids {
		if w.isTerminal(id) {
			n++
		}
	}
	return n
}

// problems: a watch that broke (a compaction would hide writes), a job published
// more than once, or changed after it ended.
func (w *transitions) problems(ids []string) []string {
	w.mu.Lock()
	defer w.mu.Unlock()
	var out []string
	if w.err != nil {
		out = append(out, fmt.Sprintf("the watch on job records broke: %v", w.err))
	}
	for _, id := range ids {
		if n := w.terminal[id]; n != 1 {
			out = append(out, fmt.Sprintf("job %s turned terminal %d times; want exactly once", id, n))
		}
		if a := w.after[id]; len(a) > 0 {
			out = append(out, fmt.Sprintf("job %s changed after it ended: %v", id, a))
		}
	}
	return out
}

// receiver is a webhook receiver: per job, how often each delivery id came.
type receiver struct {
	mu    sync.Mutex
	byJob map[string]map[string]int
}

func (h *receiver) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var j struct {
		ID string `json:"id"`
	}
	json.NewDecoder(r.Body).Decode(&j)
	h.mu.Lock()
	if h.byJob[j.ID] == nil {
		h.byJob[j.ID] = map[string]int{}
	}
	h.byJob[j.ID][r.Header.Get("X-Mediajobs-Delivery")]++
	h.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

func (h *receiver) delivered(ids []string) int {
	h.mu.Lock()
	defer h.mu.Unlock()
	n := 0
	for _, id := range ids {
		if len(h.byJob[id]) > 0 {
			n++
		}
	}
	return n
}

// problems: a job whose webhook came with more than one delivery id (a second
// delivery), or with none. The same id twice is a retry, which is allowed.
func (h *receiver) problems(ids []string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, id := range ids {
		if n := len(h.byJob[id]); n != 1 {
			out = append(out, fmt.Sprintf("job %s: webhook deliveries %v; want one delivery id", id, h.byJob[id]))
		}
	}
	return out
}

// children lists the dispatched children of both pools' parameterized jobs (a
// short job that waited spill_after for a warm runner is dispatched too). The
// warm pool's service job is not one.
func children(t *testing.T, n *api.Client) []*api.JobListStub {
	t.Helper()
	var out []*api.JobListStub
	for _, pool := range []string{"cpu", cluster.WarmPool} {
		jobs, _, err := n.Jobs().List(&api.QueryOptions{Prefix: "mediajobs-" + pool + "/dispatch-"})
		if err != nil {
			t.Logf("list nomad jobs: %v", err)
			return nil
		}
		out = append(out, jobs...)
	}
	return out
}

// liveChildren lists the children that run or may still run, with their
// allocations. A stopped child whose allocations have all ended counts as done
// even if Nomad says "pending": a child whose node was lost keeps the delayed
// evaluation of its disconnect block (lost_after) pending for an hour.
func liveChildren(t *testing.T, n *api.Client) []string {
	var out []string
	for _, j := range children(t, n) {
		if j.Status == "dead" {
			continue
		}
		allocs, _, err := n.Jobs().Allocations(j.ID, true, nil)
		ended := err == nil && j.Stop
		line := fmt.Sprintf("%s %s (stopped %v):", j.ID, j.Status, j.Stop)
		for _, a := range allocs {
			line += fmt.Sprintf(" %s %s/%s on %s;", a.ID[:8], a.ClientStatus, a.DesiredStatus, a.NodeName)
			switch a.ClientStatus {
			case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
			default:
				ended = false
			}
		}
		if !ended {
			out = append(out, line)
		}
	}
	sort.Strings(out)
	return out
}

func countRunning(t *testing.T, n *api.Client) int {
	allocs, _, err := n.Allocations().List(&api.QueryOptions{Params: map[string]string{"resources": "false"}})
	if err != nil {
		return 0
	}
	k := 0
	for _, a := range allocs {
		if a.ClientStatus == api.AllocClientStatusRunning && strings.HasPrefix(a.JobID, "mediajobs-cpu/dispatch-") {
			k++
		}
	}
	return k
}

// jobsOnNode lists the mediajobs job ids with a running allocation on client i:
// dispatched children, and the jobs of warm (of those in warm) running on a warm
// runner there, whose number it returns too.
func jobsOnNode(t *testing.T, c *cluster.Cluster, i int, warm []string) ([]string, int) {
	node, err := c.NodeID(i)
	if err != nil {
		return nil, 0
	}
	allocs, _, err := c.Nomad.Nodes().Allocations(node, nil)
	if err != nil {
		return nil, 0
	}
	var ids []string
	runners := map[string]bool{}
	for _, a := range allocs {
		if a.ClientStatus != api.AllocClientStatusRunning || a.Job == nil || a.Job.Meta == nil {
			continue
		}
		if id := a.Job.Meta["mediajobs_job_id"]; id != "" {
			ids = append(ids, id)
		}
		if a.JobID == cluster.WarmJobID {
			runners[a.ID] = true
		}
	}
	busy := 0
	if len(runners) > 0 {
		jobs, _ := c.Store.Jobs(context.Background(), warm)
		for _, j := range jobs {
			if j != nil && j.Status == mj.StatusRunning && j.Worker != nil && j.Worker.Path == mj.WorkerWarm && runners[j.Worker.AllocationID] {
				ids = append(ids, j.ID)
				busy++
			}
		}
	}
	return ids, busy
}

// runnerProcs lists processes Nomad started for one of the jobs ids (by the
// dispatch meta in their environment) that still run.
func runnerProcs(ids []string) []string {
	var out []string
	envs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, f := range envs {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		for _, id := range ids {
			if bytes.Contains(b, []byte("NOMAD_META_mediajobs_job_id="+id+"\x00")) {
				out = append(out, filepath.Base(filepath.Dir(f))+" ("+id+")")
			}
		}
	}
	return out
}
