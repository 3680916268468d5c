package jobspecs

import (
	"fmt"
	"sort"
	"strings"
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/testenv"
)

// TestNomadAcceptsRenderedJobs proves a real Nomad agent parses, validates and plans
// what Render produces, with the properties the dispatcher relies on: the CPU plans
// place; a GPU plan on this node (no GPU) reports the missing device.
func TestNomadAcceptsRenderedJobs(t *testing.T) {
	agent, err := testenv.StartNomad(testenv.NomadBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	jobs := agent.Client.Jobs()
	pools := testPools()
	names := make([]string, 0, len(pools))
	for n := range pools {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, name := range names {
		pool := pools[name]
		t.Run(name, func(t *testing.T) {
			if pool.Driver == "docker" && !agent.DockerHealthy() {
				testenv.Missing(t, "a Nomad docker driver (start dockerd: deploy/scripts/start-dockerd.sh)")
			}
			r, err := Render(pool, "/usr/local/bin/mediajobs")
			if err != nil {
				t.Fatal(err)
			}
			job, err := jobs.ParseHCLOpts(&api.JobsParseRequest{JobHCL: r.HCL, Variables: r.Variables, Canonicalize: true})
			if err != nil {
				t.Fatalf("parse: %v", err)
			}
			if *job.ID != r.JobID || *job.Type != "batch" || job.ParameterizedJob == nil || job.ParameterizedJob.Payload != "required" {
				t.Fatalf("job %s type %s parameterized %+v", *job.ID, *job.Type, job.ParameterizedJob)
			}
			tg := job.TaskGroups[0]
			if *tg.RestartPolicy.Attempts != 0 || *tg.ReschedulePolicy.Attempts != 0 || *tg.ReschedulePolicy.Unlimited {
				t.Fatalf("Nomad may retry behind the dispatcher: restart %+v reschedule %+v", tg.RestartPolicy, tg.ReschedulePolicy)
			}
			if *tg.EphemeralDisk.SizeMB != pool.Disk {
				t.Fatalf("ephemeral disk %d MB, want %d", *tg.EphemeralDisk.SizeMB, pool.Disk)
			}
			if len(job.Constraints) != len(pool.Constraints) {
				t.Fatalf("constraints %+v", job.Constraints)
			}
			var main *api.Task
			for _, task := range tg.Tasks {
				if task.Name == "runner" {
					main = task
				}
				// The docker pool's ffmpeg task must not see the manifest's signed
				// links; every other task needs the manifest.
				wantManifest := !(pool.Driver == "docker" && task.Name == "runner")
				if got := task.DispatchPayload != nil && task.DispatchPayload.File == "manifest.json"; got != wantManifest {
					t.Fatalf("task %s: gets the manifest %v, want %v", task.Name, got, wantManifest)
				}
				if pool.Driver == "raw_exec" && !strings.Contains(strings.Join(anyStrings(task.Config["args"]), " "), "-sandbox "+pool.Sandbox) {
					t.Fatalf("task %s args %v: no -sandbox %s", task.Name, task.Config["args"], pool.Sandbox)
				}
			}
			if main == nil || *main.Resources.CPU != pool.CPU || *main.Resources.MemoryMB != pool.Memory {
				t.Fatalf("main task %+v", main)
			}
			if pool.Driver == "docker" {
				checkDockerSandbox(t, tg.Tasks)
			}
			devices := main.Resources.Devices
			if want := pool.GPUs(); len(devices) != min(want, 1) || (want > 0 && (devices[0].Name != "nvidia/gpu" || *devices[0].Count != uint64(want))) {
				t.Fatalf("devices %+v, want %d nvidia/gpu", devices, want)
			}
			if g := pool.GPU; g != nil && (g.MinMemoryMB > 0 || g.Model != "") {
				var cs string
				for _, c := range devices[0].Constraints {
					cs += c.LTarget + " " + c.Operand + " " + c.RTarget + "; "
				}
				if !strings.Contains(cs, "${device.attr.memory}") || !strings.Contains(cs, "${device.model}") {
					t.Fatalf("GPU constraints %s", cs)
				}
			}
			if resp, _, err := jobs.Validate(job, nil); err != nil || resp.Error != "" {
				t.Fatalf("validate: %v %+v", err, resp)
			}
			plan, _, err := jobs.Plan(job, true, nil)
			if err != nil || plan.Diff == nil || plan.Diff.Type != "Added" {
				t.Fatalf("plan: %v %+v", err, plan)
			}
			// A parameterized job places nothing itself: plan a dispatched copy.
			child := *job
			child.ParameterizedJob = nil
			id := "plan-" + name
			child.ID, child.Name = &id, &id
			plan, _, err = jobs.Plan(&child, true, nil)
			if err != nil {
				t.Fatalf("plan child: %v", err)
			}
			failed := plan.FailedTGAllocs["ffmpeg"]
			if pool.GPUs() == 0 && failed != nil {
				t.Fatalf("a CPU pool does not place: %+v", failed)
			}
			if pool.GPUs() > 0 {
				if failed == nil || !strings.Contains(fmt.Sprint(failed.ConstraintFiltered), "missing devices") {
					t.Fatalf("GPU plan on a node without GPUs: %+v, want missing devices", failed)
				}
			}
		})
	}
}

// checkDockerSandbox: ffmpeg's task has no network and a read-only root; only the
// fetch, progress and upload tasks reach the network.
func checkDockerSandbox(t *testing.T, tasks []*api.Task) {
	t.Helper()
	want := map[string]string{"fetch": "host", "runner": "none", "progress": "host", "upload": "host"}
	for _, task := range tasks {
		if task.Driver != "docker" || task.Config["network_mode"] != want[task.Name] || task.Config["readonly_rootfs"] != true {
			t.Fatalf("task %s: driver %s config %v", task.Name, task.Driver, task.Config)
		}
		if task.User != "65534:65534" {
			t.Fatalf("task %s runs as %q, want 65534:65534", task.Name, task.User)
		}
		// Only fetch, which runs before ffmpeg and outside its container, holds
		// the workload identity that gets the destinations' ticket; no identity
		// is in a file or the environment of ffmpeg's task.
		var mediajobs *api.WorkloadIdentity
		for _, wi := range task.Identities {
			if wi.Name == "mediajobs" {
				mediajobs = wi
			}
			if task.Name == "runner" && (wi.File || wi.Env) {
				t.Fatalf("ffmpeg's task gets identity %s (file %v, env %v)", wi.Name, wi.File, wi.Env)
			}
		}
		if task.Name == "runner" && task.Identity != nil && (task.Identity.File || task.Identity.Env) {
			t.Fatalf("ffmpeg's task gets its default identity: %+v", task.Identity)
		}
		if got := mediajobs != nil && fmt.Sprint(mediajobs.Audience) == "[mediajobs]" && mediajobs.File; got != (task.Name == "fetch") {
			t.Fatalf("task %s: identity mediajobs %+v", task.Name, mediajobs)
		}
		delete(want, task.Name)
	}
	if len(want) != 0 {
		t.Fatalf("tasks missing: %v", want)
	}
}

func anyStrings(v any) []string {
	var out []string
	if l, ok := v.([]any); ok {
		for _, x := range l {
			out = append(out, fmt.Sprint(x))
		}
	}
	return out
}
