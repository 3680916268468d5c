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
		{map[string]*Job{"1": job("1", StatusQueued, nil)}, false, StatusQueued, ""}, // 2 and 3 not stored yet
		{map[string]*Job{"1": job("1", StatusSucceeded, &now), "2": job("2", StatusQueued, nil), "3": job("3", StatusQueued, nil)}, false, StatusRunning, ""},
		{map[string]*Job{"1": job("1", StatusSucceeded, &now), "2": job("2", StatusSucceeded, &now), "3": job("3", StatusSucceeded, &now)}, false, StatusSucceeded, ""},
		{map[string]*Job{"1": job("1", StatusSucceeded, &now), "2": job("2", StatusFailed, &later), "3": job("3", StatusFailed, &now)}, false, StatusFailed, "step b[1] failed: boom 3"},
		{map[string]*Job{"1": job("1", StatusSucceeded, &now), "2": job("2", StatusCancelled, &now), "3": job("3", StatusFailed, &now)}, true, StatusCancelled, "stopped"},
	}
	cases[3].jobs["3"].Pipeline.Item = &item
	for i, c := range cases {
		p.Cancelled, p.Stop = c.cancelled, ""
		if c.cancelled {
			p.Stop = "stopped"
		}
		if st, msg := PipelineStatus(p, c.jobs); st != c.want || msg != c.msg {
			t.Errorf("case %d: %s %q, want %s %q", i, st, msg, c.want, c.msg)
		}
	}
}
