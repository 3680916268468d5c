package dispatcher

import (
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
)

func TestParseChildID(t *testing.T) {
	id := "c3d0d20c-3dce-4c54-a86e-109d4e53f13d"
	child := "mediajobs-cpu/dispatch-" + mj.ChildPrefix(id, 3) + "-1795238175-91175443"
	got, attempt, ok := mj.ParseChildID(child)
	if !ok || got != id || attempt != 3 {
		t.Fatalf("mj.ParseChildID(%q) = %q, %d, %v", child, got, attempt, ok)
	}
	for _, bad := range []string{"mediajobs-cpu", "other/dispatch-1795238175-91175443", "mediajobs-cpu/dispatch-" + id + "-ax-1", "x/dispatch-short-a1-1"} {
		if _, _, ok := mj.ParseChildID(bad); ok {
			t.Errorf("mj.ParseChildID(%q) accepted", bad)
		}
	}
}

func TestTransition(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	started := now.Add(-time.Minute)
	scope := "jobs/x/1/"
	cases := []struct {
		name       string
		from       mj.Status
		alloc      allocState
		result     *mj.Result
		wantStatus mj.Status
		wantErr    string // substring of error_message
		wantDetail string // substring of status_detail (retries)
		attempt    int
		skip       bool
	}{
		{name: "running", from: mj.StatusQueued, alloc: allocState{ID: "a1", ClientStatus: "running", StartedAt: started}, wantStatus: mj.StatusRunning},
		{name: "running again", from: mj.StatusRunning, alloc: allocState{ClientStatus: "running"}, skip: true},
		{name: "succeeded (skipping running)", from: mj.StatusQueued, alloc: allocState{ClientStatus: "complete"},
			result: &mj.Result{Succeeded: true, InputBytes: 10, Outputs: []mj.Output{{Name: "a.mp4", Size: 5}, {Name: "b.png", Size: 7}}}, wantStatus: mj.StatusSucceeded},
		{name: "ffmpeg failed", from: mj.StatusRunning, alloc: allocState{ClientStatus: "failed"},
			result: &mj.Result{ErrorMessage: "command 1 of 1 failed: boom"}, wantStatus: mj.StatusFailed, wantErr: "command 1 of 1 failed: boom"},
		{name: "runner crashed, retried", from: mj.StatusRunning, attempt: 1, alloc: allocState{ID: "a9", ClientStatus: "failed", TaskEvents: []string{"Received: x", "Driver Failure: no such file"}},
			wantStatus: mj.StatusRunning, wantDetail: "attempt 2 of 3: retrying because its worker ended without reporting a result (Nomad allocation a9, failed): Received: x; Driver Failure: no such file"},
		{name: "node lost, retried", from: mj.StatusQueued, attempt: 2, alloc: allocState{ID: "a3", ClientStatus: "lost"},
			wantStatus: mj.StatusQueued, wantDetail: "attempt 3 of 3: retrying because the Nomad node running it was lost"},
		{name: "node lost on the last attempt", from: mj.StatusRunning, attempt: 3, alloc: allocState{ID: "a3", ClientStatus: "lost"},
			wantStatus: mj.StatusFailed, wantErr: "attempt 3 of 3 failed: the Nomad node running it was lost (allocation a3)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := &mj.Job{Status: c.from, Attempt: c.attempt, NomadJobID: "child"}
			err := transition(j, c.alloc, c.result, now, scope, 3, defaultDisconnectGrace)
			if c.skip {
				if err != errSkip {
					t.Fatalf("err = %v, want skip", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if err := mj.ValidateTransition(c.from, j.Status); err != nil {
				t.Fatalf("transition broke the state machine: %v", err)
			}
			if j.Status != c.wantStatus || !strings.Contains(j.ErrorMessage, c.wantErr) || !strings.Contains(j.StatusDetail, c.wantDetail) {
				t.Fatalf("status %s error %q detail %q, want %s %q %q", j.Status, j.ErrorMessage, j.StatusDetail, c.wantStatus, c.wantErr, c.wantDetail)
			}
			if c.wantDetail != "" && (j.NomadJobID != "" || j.Attempt != c.attempt+1 || j.FinishedAt != nil) {
				t.Fatalf("a retry must clear the child and count the attempt: %+v", j)
			}
			if j.Status.Terminal() && (j.FinishedAt == nil || !j.FinishedAt.Equal(now)) {
				t.Fatalf("finished_at = %v", j.FinishedAt)
			}
			if c.alloc.ClientStatus == "running" && !j.StartedAt.Equal(started) {
				t.Fatalf("started_at = %v, want the task's start %v", j.StartedAt, started)
			}
			if j.Status == mj.StatusSucceeded {
				if len(j.Outputs) != 2 || j.Outputs[1].Key != scope+"outputs/b.png" || j.TotalOutputBytes != 12 || j.TotalInputBytes != 10 {
					t.Fatalf("outputs %+v totals %d/%d", j.Outputs, j.TotalInputBytes, j.TotalOutputBytes)
				}
			} else if len(j.Outputs) != 0 {
				t.Fatalf("a failed job has outputs %+v", j.Outputs)
			}
		})
	}
}

func TestAllocStateFromEventAndStub(t *testing.T) {
	ts := map[string]*api.TaskState{"runner": {StartedAt: time.Unix(100, 0), Events: []*api.TaskEvent{
		{Type: "Started", DisplayMessage: "Task started by client"}, {Type: "Terminated", DisplayMessage: "Exit Code: 1"}, {Type: "Noise"},
	}}}
	a := fromAlloc(&api.Allocation{ID: "a", JobID: "j", ClientStatus: "failed", TaskStates: ts})
	s := fromStub(&api.AllocationListStub{ID: "a", JobID: "j", ClientStatus: "failed", TaskStates: ts})
	if strings.Join(a.TaskEvents, "|") != "Started: Task started by client|Terminated: Exit Code: 1" || strings.Join(s.TaskEvents, "|") != strings.Join(a.TaskEvents, "|") || !a.StartedAt.Equal(time.Unix(100, 0)) {
		t.Fatalf("event %+v stub %+v", a, s)
	}
}

func TestPlacementReason(t *testing.T) {
	got, capacity := placementReason(map[string]*api.AllocationMetric{"ffmpeg": {
		NodesEvaluated: 1, NodesInPool: 1, ConstraintFiltered: map[string]int{"missing devices": 1},
	}})
	if got != "no node can run it (1 node(s) evaluated; 1 filtered by missing devices)" || capacity {
		t.Fatalf("reason %q, capacity %v", got, capacity)
	}
	if got, capacity := placementReason(map[string]*api.AllocationMetric{"ffmpeg": {}}); !strings.Contains(got, "no nodes are available") || capacity {
		t.Fatalf("empty pool: %q %v", got, capacity)
	}
	// Busy, not unable: one node passed the constraints and was out of memory.
	got, capacity = placementReason(map[string]*api.AllocationMetric{"ffmpeg": {
		NodesEvaluated: 2, NodesInPool: 2, NodesFiltered: 1, ConstraintFiltered: map[string]int{"${attr.kernel.name} = windows": 1},
		NodesExhausted: 1, DimensionExhausted: map[string]int{"memory": 1},
	}})
	if !capacity || !strings.Contains(got, "1 filtered by memory") {
		t.Fatalf("busy node: %q, capacity %v", got, capacity)
	}
}
