package dispatcher

import (
	"time"

	"github.com/hashicorp/nomad/api"
)

// allocState is what the dispatcher needs of an allocation, from an event or a
// list stub alike.
type allocState struct {
	ID, NomadJobID, ClientStatus string
	// TaskEvents are the runner task's event messages, oldest first.
	TaskEvents []string
	StartedAt  time.Time
	// Reported: the task that reports the result (upload on docker pools, runner
	// on raw_exec) exited 0 or 1, which it does only after the result went up;
	// ReportedAt is when it ended. A result missing then is late, not lost.
	Reported   bool
	ReportedAt time.Time
	// Modified is when Nomad last changed the allocation: for an "unknown" one,
	// when its node went away. Created is when it was placed.
	Modified, Created time.Time
}

func fromAlloc(a *api.Allocation) allocState {
	s := allocState{ID: a.ID, NomadJobID: a.JobID, ClientStatus: a.ClientStatus, Modified: time.Unix(0, a.ModifyTime), Created: time.Unix(0, a.CreateTime)}
	s.taskInfo(a.TaskStates)
	return s
}

// allocFromEvent is fromAlloc of an allocation event, read straight from the
// payload's generic map: decoding the whole allocation (ev.Allocation) cost more
// CPU than applying it. Numbers arrive as float64 and times as RFC 3339 strings,
// as ev.Allocation reads them.
func allocFromEvent(ev *api.Event) (allocState, bool) {
	m, ok := ev.Payload["Allocation"].(map[string]any)
	if !ok {
		return allocState{}, false
	}
	str := func(m map[string]any, k string) string { s, _ := m[k].(string); return s }
	num := func(m map[string]any, k string) int64 { f, _ := m[k].(float64); return int64(f) }
	at := func(m map[string]any, k string) time.Time { t, _ := time.Parse(time.RFC3339, str(m, k)); return t }
	s := allocState{ID: str(m, "ID"), NomadJobID: str(m, "JobID"), ClientStatus: str(m, "ClientStatus"),
		Modified: time.Unix(0, num(m, "ModifyTime")), Created: time.Unix(0, num(m, "CreateTime"))}
	all, _ := m["TaskStates"].(map[string]any)
	states := map[string]*api.TaskState{}
	for _, name := range []string{"runner", "upload"} { // what taskInfo reads
		t, ok := all[name].(map[string]any)
		if !ok {
			continue
		}
		ts := &api.TaskState{State: str(t, "State"), StartedAt: at(t, "StartedAt"), FinishedAt: at(t, "FinishedAt")}
		evs, _ := t["Events"].([]any)
		for _, e := range evs {
			if e, ok := e.(map[string]any); ok {
				ts.Events = append(ts.Events, &api.TaskEvent{Type: str(e, "Type"), DisplayMessage: str(e, "DisplayMessage"), ExitCode: int(num(e, "ExitCode"))})
			}
		}
		states[name] = ts
	}
	s.taskInfo(states)
	return s, true
}

func fromStub(a *api.AllocationListStub) allocState {
	s := allocState{ID: a.ID, NomadJobID: a.JobID, ClientStatus: a.ClientStatus, Modified: time.Unix(0, a.ModifyTime), Created: time.Unix(0, a.CreateTime)}
	s.taskInfo(a.TaskStates)
	return s
}

func (s *allocState) taskInfo(states map[string]*api.TaskState) {
	ts := states["runner"]
	if ts == nil {
		return
	}
	for _, e := range ts.Events {
		if m := e.DisplayMessage; m != "" {
			s.TaskEvents = append(s.TaskEvents, e.Type+": "+m)
		}
	}
	s.StartedAt = ts.StartedAt
	rep := ts
	if up := states["upload"]; up != nil {
		rep = up
	}
	if rep.State != "dead" {
		return
	}
	for i := len(rep.Events) - 1; i >= 0; i-- {
		if e := rep.Events[i]; e.Type == api.TaskTerminated {
			// cmd/mediajobs runner: 0 succeeded, 1 failed, both reported; 2 not.
			s.Reported, s.ReportedAt = e.ExitCode == 0 || e.ExitCode == 1, rep.FinishedAt
			return
		}
	}
}

// applyOrder ranks allocations for apply: finished ones first, lost ones last.
func applyOrder(a allocState) int {
	switch a.ClientStatus {
	case api.AllocClientStatusComplete:
		return 0
	case api.AllocClientStatusFailed:
		return 1
	case api.AllocClientStatusRunning, api.AllocClientStatusPending:
		return 2
	}
	return 3
}
