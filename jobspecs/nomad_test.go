package jobspecs

import (
	"testing"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
)

// TestNomadAcceptsRenderedJobs proves a real Nomad agent parses, validates and plans
// what Render produces, with the properties the dispatcher relies on.
func TestNomadAcceptsRenderedJobs(t *testing.T) {
	agent, err := testenv.StartNomad(testenv.NomadBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	defer agent.Close()
	jobs := agent.Client.Jobs()
	for _, pool := range []*config.Pool{
		{Name: "cpu", Driver: "raw_exec", Datacenters: []string{"*"}, NodePool: "default", CPU: 500, Memory: 256},
		{Name: "nvidia", Driver: "raw_exec", Datacenters: []string{"dc1"}, NodePool: "default", CPU: 500, Memory: 256, GPUs: 1},
	} {
		r, err := Render(pool, "/usr/local/bin/mediajobs")
		if err != nil {
			t.Fatal(err)
		}
		job, err := jobs.ParseHCLOpts(&api.JobsParseRequest{JobHCL: r.HCL, Variables: r.Variables, Canonicalize: true})
		if err != nil {
			t.Fatalf("%s: parse: %v", pool.Name, err)
		}
		if *job.ID != r.JobID || *job.Type != "batch" || job.ParameterizedJob == nil || job.ParameterizedJob.Payload != "required" {
			t.Fatalf("%s: job %s type %s parameterized %+v", pool.Name, *job.ID, *job.Type, job.ParameterizedJob)
		}
		tg := job.TaskGroups[0]
		if *tg.RestartPolicy.Attempts != 0 || *tg.ReschedulePolicy.Attempts != 0 || *tg.ReschedulePolicy.Unlimited {
			t.Fatalf("%s: Nomad may retry behind the dispatcher: restart %+v reschedule %+v", pool.Name, tg.RestartPolicy, tg.ReschedulePolicy)
		}
		task := tg.Tasks[0]
		if task.DispatchPayload == nil || task.DispatchPayload.File != "manifest.json" || *task.Resources.CPU != 500 {
			t.Fatalf("%s: task %+v", pool.Name, task)
		}
		if want := pool.GPUs; len(task.Resources.Devices) != want || (want > 0 && (task.Resources.Devices[0].Name != "nvidia/gpu" || *task.Resources.Devices[0].Count != uint64(want))) {
			t.Fatalf("%s: devices %+v, want %d nvidia/gpu", pool.Name, task.Resources.Devices, want)
		}
		if resp, _, err := jobs.Validate(job, nil); err != nil || resp.Error != "" {
			t.Fatalf("%s: validate: %v %+v", pool.Name, err, resp)
		}
		if plan, _, err := jobs.Plan(job, true, nil); err != nil || plan == nil || plan.Diff == nil || plan.Diff.Type != "Added" {
			t.Fatalf("%s: plan: %v %+v", pool.Name, err, plan)
		}
	}
}
