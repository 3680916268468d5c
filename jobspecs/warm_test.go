package jobspecs

import (
	"fmt"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
)

// warmTestPools are the warm pools the golden files and the Nomad test render.
func warmTestPools() map[string]*config.Pool {
	return map[string]*config.Pool{
		"cpu": {Name: "cpu", Driver: "raw_exec", Sandbox: "bwrap", Datacenters: []string{"*"}, NodePool: "default", CPU: 500, Memory: 256, Disk: 300,
			Warm: &config.Warm{Count: 2, Min: 0, Max: 10, MaxJobSeconds: 120, CPU: 200, Memory: 128, Disk: 100, LeaseTTL: "10s"}},
		"nvidia": {Name: "nvidia", Driver: "raw_exec", Sandbox: "bwrap", Datacenters: []string{"dc1", "dc2"}, NodePool: "default",
			CPU: 500, Memory: 256, Disk: 300, GPU: &config.GPU{Count: 1, Vendor: "nvidia", MinMemoryMB: 8000, Model: "RTX|A[0-9]+"},
			RunnerCommand: `/opt/media "jobs"/${x}`,
			Constraints:   []*config.Constraint{{Attribute: "${attr.kernel.name}", Operator: "=", Value: "linux"}},
			Warm:          &config.Warm{Count: 1, Min: 1, Max: 4, MaxJobSeconds: 60, CPU: 1000, Memory: 2048, Disk: 500, LeaseTTL: "10s"}},
	}
}

const testControlURL = "http://127.0.0.1:8080"

func TestRenderWarmGolden(t *testing.T) {
	for name, pool := range warmTestPools() {
		r, err := RenderWarm(pool, "/usr/local/bin/mediajobs", testControlURL)
		if err != nil {
			t.Fatal(err)
		}
		if r.JobID != "mediajobs-"+name+"-warm" || r.JobID != mj.WarmJobID(name) {
			t.Errorf("JobID = %q", r.JobID)
		}
		matchGolden(t, filepath.Join("testdata", name+".warm.vars.hcl"), r.Variables)
	}
	if _, err := RenderWarm(&config.Pool{Name: "x", Driver: "raw_exec"}, "", testControlURL); err == nil {
		t.Error("a pool without a warm block rendered warm runners")
	}
	if _, err := RenderWarm(&config.Pool{Name: "d", Driver: "docker", Warm: &config.Warm{}}, "", testControlURL); err == nil {
		t.Error("a docker pool rendered warm runners")
	}
	// The warm jobspec is not a driver's.
	if _, err := Render(&config.Pool{Name: "x", Driver: "warm"}, ""); err == nil {
		t.Error("driver \"warm\" rendered")
	}
}

// A pool built by config, its defaults applied, renders its warm values.
func TestRenderWarmFromConfig(t *testing.T) {
	c, err := config.Parse([]byte("pool \"cpu\" {\n  memory = 300\n  warm {\n    count = 3\n    max = 5\n    cpu = 250\n  }\n}\n"), "w.hcl")
	if err != nil {
		t.Fatal(err)
	}
	r, err := RenderWarm(c.Pool("cpu"), "/bin/mj", c.Server.PublicURL)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"count = 3\n", "min = 0\n", "max = 5\n", "cpu = 250\n", "memory = 300\n", "disk = 2048\n", `sandbox = "bwrap"`, `control_url = "http://127.0.0.1:8080"`, `runner_command = "/bin/mj"`} {
		if !strings.Contains(r.Variables, want) {
			t.Errorf("variables lack %q:\n%s", want, r.Variables)
		}
	}
}

// TestNomadAcceptsWarmJobs: a real Nomad agent parses, validates and plans what
// RenderWarm produces: a service job with the runners' count, a scaling block, the
// workload identity the runner reads, and the CPU pool places on this node.
func TestNomadAcceptsWarmJobs(t *testing.T) {
	agent, err := testenv.StartNomad(testenv.NomadBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	jobs := agent.Client.Jobs()
	pools := warmTestPools()
	names := make([]string, 0, len(pools))
	for n := range pools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		pool := pools[name]
		t.Run(name, func(t *testing.T) {
			r, err := RenderWarm(pool, "/usr/local/bin/mediajobs", testControlURL)
			if err != nil {
				t.Fatal(err)
			}
			job, err := jobs.ParseHCLOpts(&api.JobsParseRequest{JobHCL: r.HCL, Variables: r.Variables, Canonicalize: true})
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if *job.ID != r.JobID || *job.Name != r.JobID || *job.Type != "service" || job.ParameterizedJob != nil {
				t.Fatalf("job %s name %s type %s parameterized %+v", *job.ID, *job.Name, *job.Type, job.ParameterizedJob)
			}
			if job.Meta["mediajobs_pool"] != pool.Name || job.Meta["mediajobs_role"] != "warm-runner" {
				t.Fatalf("meta %v", job.Meta)
			}
			if len(job.Constraints) != len(pool.Constraints) || fmt.Sprint(job.Datacenters) != fmt.Sprint(pool.Datacenters) {
				t.Fatalf("constraints %+v datacenters %v", job.Constraints, job.Datacenters)
			}
			w := pool.Warm
			if len(job.TaskGroups) != 1 {
				t.Fatalf("groups %+v", job.TaskGroups)
			}
			tg := job.TaskGroups[0]
			if *tg.Name != "warm" || *tg.Count != w.Count {
				t.Fatalf("group %s count %d, want warm %d", *tg.Name, *tg.Count, w.Count)
			}
			if s := tg.Scaling; s == nil || s.Enabled == nil || !*s.Enabled || s.Min == nil || *s.Min != int64(w.Min) || s.Max == nil || *s.Max != int64(w.Max) {
				t.Fatalf("scaling %+v, want enabled min %d max %d", s, w.Min, w.Max)
			}
			if rp := tg.RestartPolicy; *rp.Attempts != 10 || *rp.Interval != 5*time.Minute || *rp.Delay != 2*time.Second || *rp.Mode != "delay" {
				t.Fatalf("restart %+v", rp)
			}
			if *tg.EphemeralDisk.SizeMB != w.Disk {
				t.Fatalf("ephemeral disk %d MB, want %d", *tg.EphemeralDisk.SizeMB, w.Disk)
			}
			if len(tg.Tasks) != 1 || tg.Tasks[0].Name != "runner" {
				t.Fatalf("tasks %+v", tg.Tasks)
			}
			task := tg.Tasks[0]
			wantCmd := pool.RunnerCommand
			if wantCmd == "" {
				wantCmd = "/usr/local/bin/mediajobs"
			}
			if task.Driver != "raw_exec" || task.Config["command"] != wantCmd {
				t.Fatalf("task driver %s config %v", task.Driver, task.Config)
			}
			wantArgs := "runner -warm -pool " + pool.Name + " -control " + testControlURL + " -sandbox bwrap"
			if got := strings.Join(anyStrings(task.Config["args"]), " "); got != wantArgs {
				t.Fatalf("args %q, want %q", got, wantArgs)
			}
			if *task.KillTimeout != 30*time.Second || task.KillSignal != "SIGINT" {
				t.Fatalf("kill_timeout %v kill_signal %q", *task.KillTimeout, task.KillSignal)
			}
			var id *api.WorkloadIdentity
			for _, wi := range task.Identities {
				if wi.Name == "mediajobs" {
					id = wi
				}
			}
			if id == nil || fmt.Sprint(id.Audience) != "[mediajobs]" || id.TTL != time.Hour || !id.File {
				t.Fatalf("identities %+v, want mediajobs (aud mediajobs, ttl 1h, file)", task.Identities)
			}
			if *task.Resources.CPU != w.CPU || *task.Resources.MemoryMB != w.Memory {
				t.Fatalf("resources cpu %d memory %d, want %d %d", *task.Resources.CPU, *task.Resources.MemoryMB, w.CPU, w.Memory)
			}
			devices := task.Resources.Devices
			if want := pool.GPUs(); len(devices) != min(want, 1) || (want > 0 && (devices[0].Name != "nvidia/gpu" || *devices[0].Count != uint64(want) || len(devices[0].Constraints) != 2)) {
				t.Fatalf("devices %+v, want %d nvidia/gpu", devices, want)
			}
			if resp, _, err := jobs.Validate(job, nil); err != nil || resp.Error != "" {
				t.Fatalf("validate: %v %+v", err, resp)
			}
			plan, _, err := jobs.Plan(job, true, nil)
			if err != nil || plan.Diff == nil || plan.Diff.Type != "Added" {
				t.Fatalf("plan: %v %+v", err, plan)
			}
			failed := plan.FailedTGAllocs["warm"]
			if pool.GPUs() == 0 && failed != nil {
				t.Fatalf("a CPU pool's runners do not place: %+v", failed)
			}
			if pool.GPUs() > 0 && (failed == nil || !strings.Contains(fmt.Sprint(failed.ConstraintFiltered), "missing devices")) {
				t.Fatalf("GPU plan on a node without GPUs: %+v, want missing devices", failed)
			}
		})
	}
}
