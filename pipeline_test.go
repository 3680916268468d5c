package mediajobs

import (
	"testing"
	"time"
)

// A pipeline's status follows its jobs: queued until one starts, running
// until all ended, then succeeded, cancelled (by the client) or failed naming
// the first step that failed.
func TestPipelineStatus(t *testing.T) {
	now := time.Now()
	later := now.Add(time.Second)
	item := 1
	p := &Pipeline{Steps: []PipelineStep{{Name: "a", Jobs: []string{"1"}}, {Name: "b", Jobs: []string{"2", "3"}}}}
	job := func(id string, st Status, fin *time.Time) *Job {
		return &Job{ID: id, Status: st, FinishedAt: fin, ErrorMessage: "boom " + id, Pipeline: &PipelineRef{Step: map[string]string{"1": "a", "2": "b", "3": "b"}[id]}}
	}
	cases := []struct {
		jobs      map[string]*Job
		cancelled bool
		want      Status
		msg       string
	}{
		{map[string]*Job{"1": job("1", StatusQueued, nil)}, false, StatusQueued, ""}, // 2 and 3 not stored yet (planned)
		{map[string]*Job{"1": job("1", StatusSucceeded, &now), "2": job("2", StatusQueued, nil), "3": job("3", StatusQueued, nil)}, false, StatusRunning, ""},
		{map[string]*Job{"1": job("1", StatusSucceeded, &now), "2": job("2", StatusSucceeded, &now), "3": job("3", StatusSucceeded, &now)}, false, StatusSucceeded, ""},
		{map[string]*Job{"1": job("1", StatusSucceeded, &now), "2": job("2", StatusFailed, &later), "3": job("3", StatusFailed, &now)}, false, StatusFailed, "step b[1] failed: boom 3"},
		{map[string]*Job{"1": job("1", StatusSucceeded, &now), "2": job("2", StatusCancelled, &now), "3": job("3", StatusFailed, &now)}, true, StatusCancelled, "stopped"},
	}
	cases[3].jobs["3"].Pipeline.Item = &item
	for i, c := range cases {
		p.Cancelled, p.Stop, p.Plan = c.cancelled, "", nil
		if i == 0 {
			p.Plan = []*Job{{ID: "2"}, {ID: "3"}}
		}
		if c.cancelled {
			p.Stop = "stopped"
		}
		if st, msg := PipelineStatus(p, c.jobs); st != c.want || msg != c.msg {
			t.Errorf("case %d: %s %q, want %s %q", i, st, msg, c.want, c.msg)
		}
	}
}

// Once every job is stored (no plan), a job missing was deleted by the
// retention after it ended: it counts as ended, failing nothing by itself;
// the view shows it deleted, not queued.
func TestPipelineWithADeletedJob(t *testing.T) {
	now := time.Now()
	p := &Pipeline{Steps: []PipelineStep{{Name: "a", Jobs: []string{"1"}}, {Name: "b", Jobs: []string{"2"}}}}
	b := &Job{ID: "2", Status: StatusSucceeded, StartedAt: &now, FinishedAt: &now, Pipeline: &PipelineRef{Step: "b"}}
	jobs := map[string]*Job{"2": b}
	if st, msg := PipelineStatus(p, jobs); st != StatusSucceeded || msg != "" {
		t.Errorf("a deleted, b succeeded: %s %q, want succeeded", st, msg)
	}
	b.Status, b.FinishedAt = StatusRunning, nil
	if st, _ := PipelineStatus(p, jobs); st != StatusRunning {
		t.Errorf("a deleted, b running: %s, want running", st)
	}
	// Under fail_fast the failed job deleted: the stop still says why.
	b.Status, b.FinishedAt = StatusCancelled, &now
	p.FailFast, p.Stop = true, "step a failed, and the pipeline stops at its first failure (fail_fast)"
	if st, msg := PipelineStatus(p, jobs); st != StatusFailed || msg != p.Stop {
		t.Errorf("fail_fast, a deleted: %s %q, want failed with the stop", st, msg)
	}
	p.Status = StatusFailed
	v := ViewPipeline(p, jobs, func(string) string { return "" })
	if j := v.Steps[0].Jobs[0]; j.Status != StatusDeleted || j.StatusDetail == "" {
		t.Errorf("a deleted job's view: %s %q, want deleted with a note", j.Status, j.StatusDetail)
	}
	if v.Steps[0].Status == StatusQueued {
		t.Errorf("the step of a deleted job: %s", v.Steps[0].Status)
	}
	// With a plan, a job missing is not stored yet: queued.
	p.Status, p.Plan = "", []*Job{{ID: "1"}}
	if j := ViewPipeline(p, jobs, func(string) string { return "" }).Steps[0].Jobs[0]; j.Status != StatusQueued {
		t.Errorf("a job not stored yet: %s, want queued", j.Status)
	}
}
