package jobspecs

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/testenv"
)

// lostGroup is the restart and reschedule policy of our jobspecs' "ffmpeg" group:
// Nomad is never to retry behind the dispatcher.
const lostGroup = `
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
`

// lostJob is a parameterized batch job shaped like ours: one group with our
// restart/reschedule policy (plus disconnect), one raw_exec task that sleeps.
func lostJob(id, disconnect string) string {
	return fmt.Sprintf(`
job %q {
  type        = "batch"
  datacenters = ["*"]
  parameterized {
    payload       = "forbidden"
    meta_required = ["mediajobs_job_id"]
  }
  group "ffmpeg" {
%s
%s
    task "runner" {
      driver = "raw_exec"
      config {
        command = "/bin/sleep"
        args    = ["300"]
      }
      kill_timeout = "1s"
      resources {
        cpu    = 20
        memory = 16
      }
    }
  }
}
`, id, lostGroup, disconnect)
}

// recommendedDisconnect is the disconnect block recommended for our "ffmpeg"
// group: Nomad keeps an allocation whose node stops heartbeating "unknown" for an
// hour and places no replacement meanwhile (replace = false only has an effect
// with lost_after > 0); the dispatcher decides, and stops the child when it
// retries. After lost_after the allocation is lost and Nomad would replace it,
// reschedule policy notwithstanding, so the dispatcher must act well before.
const recommendedDisconnect = `
    disconnect {
      lost_after = "1h"
      replace    = false
      reconcile  = "keep_replacement"
    }
`

// TestLostNodeBatchAlloc proves on a real Nomad cluster (one server, four clients)
// what Nomad does with a dispatched child of a parameterized batch job that has our
// `reschedule { attempts = 0 }` when the client node running it stops heartbeating.
func TestLostNodeBatchAlloc(t *testing.T) {
	c := startLostCluster(t, "a", "b", "c", "d")

	// Our jobspecs today: the node goes down, the allocation is lost, and Nomad
	// places a replacement of the same child, reschedule policy notwithstanding.
	t.Run("no disconnect block: lost and replaced despite reschedule attempts = 0", func(t *testing.T) {
		child, orig := c.dispatchOn(t, "lost-default", "", "b")
		c.crash(t, "b")
		c.waitNodeStatus(t, "b", api.NodeStatusDown)
		o, r := c.waitReplaced(t, child, orig.ID)
		t.Logf("node b down; original %s: client %s, desired %s (%q); replacement %s on %s: client %s, previous allocation %s, reschedule events 0",
			short(o.ID), o.ClientStatus, o.DesiredStatus, o.DesiredDescription, short(r.ID), c.nodeName(r.NodeID), r.ClientStatus, short(r.PreviousAllocation))
	})

	// replace = false without lost_after: the node still goes down, the allocation
	// is "unknown" for one evaluation, then lost (lost_after 0 has expired) and
	// replaced all the same.
	t.Run("replace = false without lost_after: still lost and replaced", func(t *testing.T) {
		child, orig := c.dispatchOn(t, "lost-replace-false", `
    disconnect {
      replace = false
    }
`, "c")
		c.crash(t, "c")
		c.waitNodeStatus(t, "c", api.NodeStatusDown)
		o, r := c.waitReplaced(t, child, orig.ID)
		var timeoutEval *api.Evaluation
		for _, e := range c.evals(t, child) {
			if e.TriggeredBy == "max-disconnect-timeout" {
				timeoutEval = e
			}
		}
		if timeoutEval == nil || timeoutEval.Status != api.EvalStatusComplete || r.EvalID != timeoutEval.ID {
			t.Fatalf("replacement placed by eval %s, want the completed max-disconnect-timeout eval %+v", r.EvalID, timeoutEval)
		}
		t.Logf("node c down; original %s: client %s, desired %s (client said %q); replacement %s on %s placed by the %s eval %s (wait_until = its creation)",
			short(o.ID), o.ClientStatus, o.DesiredStatus, o.ClientDescription, short(r.ID), c.nodeName(r.NodeID), timeoutEval.TriggeredBy, short(timeoutEval.ID))
	})

	// The recommended block: the node is "disconnected", the allocation "unknown",
	// and nothing replaces it. A node that comes back resumes it; a child the
	// dispatcher stopped meanwhile is stopped on the node when it comes back.
	t.Run("recommended: lost_after 1h, replace = false: unknown, not replaced; stopped on return once its child is stopped", func(t *testing.T) {
		child, orig := c.dispatchOn(t, "lost-recommended", recommendedDisconnect, "d")
		c.killAgent(t, "d") // its task keeps running, as on a partitioned node
		c.waitNodeStatus(t, "d", api.NodeStatusDisconnected)
		c.waitAlloc(t, child, orig.ID, "unknown", func(a *api.AllocationListStub) bool {
			return a.ClientStatus == api.AllocClientStatusUnknown && a.DesiredStatus == api.AllocDesiredStatusRun
		})
		// Every evaluation Nomad could place a replacement in has run, and one more
		// forced now: still one allocation, unknown; the next is an hour away.
		c.forceEval(t, child)
		if allocs := c.allocs(t, child); len(allocs) != 1 || allocs[0].ClientStatus != api.AllocClientStatusUnknown {
			t.Fatalf("allocations %s, want only %s unknown", c.describe(allocs), short(orig.ID))
		}
		var timeout *api.Evaluation
		for _, e := range c.evals(t, child) {
			if e.TriggeredBy == "max-disconnect-timeout" && e.Status == api.EvalStatusPending {
				timeout = e
			}
		}
		if timeout == nil || time.Until(timeout.WaitUntil) < 55*time.Minute {
			t.Fatalf("no pending max-disconnect-timeout eval about 1h ahead: %+v", timeout)
		}
		t.Logf("node d disconnected; allocations: %s; no replacement after a forced eval; lost_after eval %s waits until %s",
			c.describe(c.allocs(t, child)), short(timeout.ID), timeout.WaitUntil.Format(time.RFC3339))

		// The node comes back with the task still running: no replacement exists,
		// so the original reconnects and keeps running.
		c.restartAgent(t, "d")
		c.waitAlloc(t, child, orig.ID, "running again after reconnecting", func(a *api.AllocationListStub) bool {
			return a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun
		})
		if allocs := c.allocs(t, child); len(allocs) != 1 {
			t.Fatalf("allocations %s after reconnect", c.describe(allocs))
		}
		t.Logf("node d back: %s", c.describe(c.allocs(t, child)))

		// Disconnected again; this time the dispatcher gives up on the attempt and
		// stops the child (as stopChild does) while its allocation is unknown. When
		// the node comes back, the client stops the task.
		c.killAgent(t, "d")
		c.waitNodeStatus(t, "d", api.NodeStatusDisconnected)
		c.waitAlloc(t, child, orig.ID, "unknown", func(a *api.AllocationListStub) bool {
			return a.ClientStatus == api.AllocClientStatusUnknown
		})
		if _, _, err := c.api.Jobs().Deregister(child, false, nil); err != nil {
			t.Fatal(err)
		}
		c.waitAlloc(t, child, orig.ID, "desired stop", func(a *api.AllocationListStub) bool {
			return a.DesiredStatus == api.AllocDesiredStatusStop && a.ClientStatus == api.AllocClientStatusUnknown
		})
		if !c.clients["d"].taskRunning() {
			t.Fatal("the task on d died before d came back")
		}
		c.restartAgent(t, "d")
		c.waitAlloc(t, child, orig.ID, "stopped on the returning node", func(a *api.AllocationListStub) bool {
			return a.ClientStatus == api.AllocClientStatusComplete || a.ClientStatus == api.AllocClientStatusFailed
		})
		if allocs := c.allocs(t, child); len(allocs) != 1 {
			t.Fatalf("allocations %s", c.describe(allocs))
		}
		// Whether the client also killed the old process depends on its reattaching
		// to the task's executor, which Nomad does not always manage after a kill -9;
		// what Nomad reports (and the dispatcher reads) is the stopped allocation.
		t.Logf("child stopped while d was away; d back: %s; task process still running: %v", c.describe(c.allocs(t, child)), c.clients["d"].taskRunning())
	})
}

// lostCluster is one Nomad server and named clients, each its own agent process.
type lostCluster struct {
	bin     string
	server  *lostAgent
	api     *api.Client
	clients map[string]*lostAgent
	nodeIDs map[string]string // client name -> node ID
	used    map[string]bool   // ports handed out
}

type lostAgent struct {
	name   string
	dir    string
	http   string
	bin    string
	cfg    string
	cmd    *exec.Cmd
	exited chan struct{}
}

const lostDenylist = `
client {
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
`

func startLostCluster(t *testing.T, clients ...string) *lostCluster {
	t.Helper()
	c := &lostCluster{bin: testenv.NomadBinary(t), clients: map[string]*lostAgent{}, nodeIDs: map[string]string{}, used: map[string]bool{}}
	var rpc string
	c.server = c.start(t, "server", func(dir string, http, rpcPort, serf string) string {
		rpc = rpcPort
		return fmt.Sprintf(`
name                 = "server"
disable_update_check = true
data_dir             = %q
bind_addr            = "127.0.0.1"
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = %s
  rpc  = %s
  serf = %s
}
server {
  enabled                = true
  bootstrap_expect       = 1
  # A client that stops heartbeating is down within about 3s.
  heartbeat_grace        = "1s"
  min_heartbeat_ttl      = "1s"
  failover_heartbeat_ttl = "5s"
}
%s
`, dir, http, rpcPort, serf, lostDenylist)
	})
	conf := api.DefaultConfig()
	conf.Address = "http://" + c.server.http
	conf.Region, conf.Namespace, conf.SecretID = "", "", ""
	var err error
	if c.api, err = api.NewClient(conf); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 60*time.Second, "a Nomad leader", func() bool {
		l, err := c.api.Status().Leader()
		return err == nil && l != ""
	})
	for _, name := range clients {
		c.clients[name] = c.start(t, name, func(dir string, http, rpcPort, serf string) string {
			return fmt.Sprintf(`
name                 = %q
disable_update_check = true
data_dir             = %q
bind_addr            = "127.0.0.1"
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = %s
  rpc  = %s
  serf = %s
}
client {
  enabled           = true
  servers           = ["127.0.0.1:%s"]
  network_interface = "lo"
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`, name, dir, http, rpcPort, serf, rpc)
		})
	}
	testenv.Eventually(t, 90*time.Second, "every client node ready with raw_exec", func() bool {
		nodes, _, err := c.api.Nodes().List(&api.QueryOptions{Params: map[string]string{"resources": "false"}})
		if err != nil {
			return false
		}
		for _, n := range nodes {
			if d, ok := n.Drivers["raw_exec"]; ok && d.Healthy && n.Status == api.NodeStatusReady {
				c.nodeIDs[n.Name] = n.ID
			}
		}
		return len(c.nodeIDs) == len(clients)
	})
	return c
}

// start starts one agent whose config cfg renders, on free loopback ports; an
// agent that exits while starting (a port taken meanwhile) is tried again.
func (c *lostCluster) start(t *testing.T, name string, cfg func(dir, http, rpc, serf string) string) *lostAgent {
	t.Helper()
retry:
	for attempt := 1; ; attempt++ {
		dir, err := os.MkdirTemp("", "mediajobs-lost-"+name+"-")
		if err != nil {
			t.Fatal(err)
		}
		a := &lostAgent{name: name, dir: dir}
		t.Cleanup(a.close)
		// Ports distinct among themselves and from every agent's before.
		var ports []string
		for len(ports) < 3 {
			addrs, err := testenv.FreeAddrs(3)
			if err != nil {
				t.Fatal(err)
			}
			for _, addr := range addrs {
				if p := addr[strings.LastIndexByte(addr, ':')+1:]; !c.used[p] && len(ports) < 3 {
					c.used[p], ports = true, append(ports, p)
				}
			}
		}
		a.http = "127.0.0.1:" + ports[0]
		cfgPath := filepath.Join(dir, "agent.hcl")
		if err := os.WriteFile(cfgPath, []byte(cfg(filepath.Join(dir, "data"), ports[0], ports[1], ports[2])), 0o600); err != nil {
			t.Fatal(err)
		}
		a.bin, a.cfg = c.bin, cfgPath
		if err := a.run(); err != nil {
			t.Fatal(err)
		}
		// Up when its HTTP API answers.
		conf := api.DefaultConfig()
		conf.Address = "http://" + a.http
		conf.Region, conf.Namespace, conf.SecretID = "", "", ""
		cl, err := api.NewClient(conf)
		if err != nil {
			t.Fatal(err)
		}
		deadline := time.Now().Add(60 * time.Second)
		for {
			if _, err := cl.Agent().Self(); err == nil {
				return a
			}
			select {
			case <-a.exited:
				if attempt < 3 {
					t.Logf("agent %s exited while starting; new ports:\n%s", name, a.logTail())
					continue retry
				}
				t.Fatalf("agent %s exited while starting:\n%s", name, a.logTail())
			case <-time.After(100 * time.Millisecond):
			}
			if time.Now().After(deadline) {
				t.Fatalf("agent %s: no HTTP API after 60s:\n%s", name, a.logTail())
			}
		}
	}
}

// run starts the agent process (again) with its config and data dir.
func (a *lostAgent) run() error {
	logf, err := os.OpenFile(filepath.Join(a.dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close()
	cmd := exec.Command(a.bin, "agent", "-config", a.cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	a.cmd, a.exited = cmd, exited
	return nil
}

func (a *lostAgent) logTail() string {
	b, _ := os.ReadFile(filepath.Join(a.dir, "agent.log"))
	s := strings.TrimSpace(string(b))
	if len(s) > 3000 {
		s = "…" + s[len(s)-3000:]
	}
	return s
}

// kill SIGKILLs the agent, as a crashed node would stop, and then what it started
// (logmon, executors, tasks): processes below it still running the nomad binary,
// and everything that names its directory or runs in it.
func (a *lostAgent) kill(bin string) {
	if a.cmd == nil || a.cmd.Process == nil {
		return
	}
	below := testenv.Descendants(a.cmd.Process.Pid)
	a.cmd.Process.Kill()
	<-a.exited
	for _, pid := range below {
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.HasPrefix(string(cmd), bin) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	testenv.KillUnder(a.dir)
	a.cmd = nil
}

// close stops the agent and its tasks, unmounts what the client mounted in its
// alloc dirs (secrets, private tmpfs when run as root) and removes its files.
func (a *lostAgent) close() {
	if a.cmd != nil {
		a.kill(a.bin)
	}
	testenv.KillUnder(a.dir)
	testenv.UnmountUnder(a.dir)
	os.RemoveAll(a.dir)
}

// dispatchOn registers the job with the disconnect block, dispatches one child
// while only client `on` is eligible, waits until its allocation runs there and
// makes client a eligible again. It returns the child's ID and allocation.
func (c *lostCluster) dispatchOn(t *testing.T, id, disconnect, on string) (string, *api.AllocationListStub) {
	t.Helper()
	job, err := c.api.Jobs().ParseHCLOpts(&api.JobsParseRequest{JobHCL: lostJob(id, disconnect), Canonicalize: true})
	if err != nil {
		t.Fatalf("parse: %v", err)
	}
	if resp, _, err := c.api.Jobs().Register(job, nil); err != nil || resp.Warnings != "" {
		t.Fatalf("register: %v %+v", err, resp)
	}
	for name, nodeID := range c.nodeIDs {
		if c.clients[name].cmd == nil {
			continue // a node we crashed
		}
		if _, err := c.api.Nodes().ToggleEligibility(nodeID, name == on, nil); err != nil {
			t.Fatal(err)
		}
	}
	resp, _, err := c.api.Jobs().Dispatch(id, map[string]string{"mediajobs_job_id": id}, nil, "", nil)
	if err != nil {
		t.Fatalf("dispatch: %v", err)
	}
	var alloc *api.AllocationListStub
	testenv.Eventually(t, 90*time.Second, "the child's allocation running on "+on, func() bool {
		allocs, _, err := c.api.Jobs().Allocations(resp.DispatchedJobID, true, nil)
		if err != nil || len(allocs) != 1 {
			return false
		}
		alloc = allocs[0]
		return alloc.ClientStatus == api.AllocClientStatusRunning
	})
	if alloc.NodeID != c.nodeIDs[on] {
		t.Fatalf("allocation on %s, want %s", c.nodeName(alloc.NodeID), on)
	}
	// Replacements, if any, go to a.
	if _, err := c.api.Nodes().ToggleEligibility(c.nodeIDs["a"], true, nil); err != nil {
		t.Fatal(err)
	}
	return resp.DispatchedJobID, alloc
}

// crash kills client name and its tasks: the node stops heartbeating.
func (c *lostCluster) crash(t *testing.T, name string) {
	t.Helper()
	c.clients[name].kill(c.bin)
}

func (c *lostCluster) waitNodeStatus(t *testing.T, name, status string) {
	t.Helper()
	testenv.Eventually(t, 90*time.Second, "node "+name+" "+status, func() bool {
		n, _, err := c.api.Nodes().Info(c.nodeIDs[name], nil)
		return err == nil && n.Status == status
	})
}

// killAgent SIGKILLs client name's agent only: its task keeps running, as on a
// node cut off from the servers.
func (c *lostCluster) killAgent(t *testing.T, name string) {
	t.Helper()
	a := c.clients[name]
	a.cmd.Process.Kill()
	<-a.exited
	a.cmd = nil
}

// restartAgent starts client name's agent again on its data dir and waits until
// its node is ready.
func (c *lostCluster) restartAgent(t *testing.T, name string) {
	t.Helper()
	if err := c.clients[name].run(); err != nil {
		t.Fatal(err)
	}
	c.waitNodeStatus(t, name, api.NodeStatusReady)
}

// taskRunning reports whether the job's task (sleep) runs in the agent's dir.
func (a *lostAgent) taskRunning() bool {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	for _, p := range procs {
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		cwd, _ := os.Readlink(filepath.Join(p, "cwd"))
		if strings.HasPrefix(string(cmdline), "/bin/sleep\x00300") && strings.HasPrefix(cwd, a.dir+"/") {
			return true
		}
	}
	return false
}

func (c *lostCluster) allocs(t *testing.T, child string) []*api.AllocationListStub {
	t.Helper()
	allocs, _, err := c.api.Jobs().Allocations(child, true, nil)
	if err != nil {
		t.Fatal(err)
	}
	return allocs
}

func (c *lostCluster) evals(t *testing.T, child string) []*api.Evaluation {
	t.Helper()
	evals, _, err := c.api.Jobs().Evaluations(child, nil)
	if err != nil {
		t.Fatal(err)
	}
	return evals
}

// waitAlloc waits until allocation id of child satisfies cond.
func (c *lostCluster) waitAlloc(t *testing.T, child, id, what string, cond func(*api.AllocationListStub) bool) {
	t.Helper()
	testenv.Eventually(t, 90*time.Second, "allocation "+short(id)+" "+what, func() bool {
		for _, a := range c.allocs(t, child) {
			if a.ID == id {
				return cond(a)
			}
		}
		return false
	})
}

// waitReplaced waits until the original allocation is lost (desired stop) and
// another allocation of the same child, which names it as its previous one, runs
// on a; the replacement carries no reschedule events: no reschedule happened.
func (c *lostCluster) waitReplaced(t *testing.T, child, origID string) (orig *api.AllocationListStub, repl *api.Allocation) {
	t.Helper()
	testenv.Eventually(t, 90*time.Second, "the lost allocation and a running replacement", func() bool {
		orig, repl = nil, nil
		allocs := c.allocs(t, child)
		for _, a := range allocs {
			if a.ID == origID {
				orig = a
			} else if a.ClientStatus == api.AllocClientStatusRunning {
				full, _, err := c.api.Allocations().Info(a.ID, nil)
				if err != nil {
					t.Fatal(err)
				}
				repl = full
			}
		}
		return len(allocs) == 2 && orig != nil && orig.ClientStatus == api.AllocClientStatusLost && repl != nil
	})
	if orig.DesiredStatus != api.AllocDesiredStatusStop || repl.PreviousAllocation != origID || c.nodeName(repl.NodeID) != "a" {
		t.Fatalf("original %s desired %s; replacement %s on %s, previous %s", short(origID), orig.DesiredStatus, short(repl.ID), c.nodeName(repl.NodeID), repl.PreviousAllocation)
	}
	if repl.RescheduleTracker != nil && len(repl.RescheduleTracker.Events) > 0 {
		t.Fatalf("replacement carries reschedule events %+v", repl.RescheduleTracker.Events)
	}
	return orig, repl
}

// forceEval makes Nomad evaluate child now and waits until that evaluation, and
// every other one not waiting for a later time, is complete.
func (c *lostCluster) forceEval(t *testing.T, child string) {
	t.Helper()
	id, _, err := c.api.Jobs().ForceEvaluate(child, nil)
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "evaluations of "+child+" done", func() bool {
		forced := false
		for _, e := range c.evals(t, child) {
			if e.ID == id {
				forced = e.Status == api.EvalStatusComplete
			} else if e.Status != api.EvalStatusComplete && !e.WaitUntil.After(time.Now()) {
				return false
			}
		}
		return forced
	})
}

// describe lists allocations as id@node client/desired.
func (c *lostCluster) describe(allocs []*api.AllocationListStub) string {
	var parts []string
	for _, a := range allocs {
		parts = append(parts, fmt.Sprintf("%s@%s %s/%s", short(a.ID), c.nodeName(a.NodeID), a.ClientStatus, a.DesiredStatus))
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

func (c *lostCluster) nodeName(id string) string {
	for n, i := range c.nodeIDs {
		if i == id {
			return n
		}
	}
	return id
}

func short(id string) string { return id[:min(8, len(id))] }
