package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/metrics"
)

// allocState is what the dispatcher needs of an allocation, from an event or a
// list stub alike.
type allocState struct {
	ID, NomadJobID, ClientStatus string
	// TaskEvents are the runner task's event messages, oldest first.
	TaskEvents []string
	StartedAt  time.Time
}

func fromAlloc(a *api.Allocation) allocState {
	s := allocState{ID: a.ID, NomadJobID: a.JobID, ClientStatus: a.ClientStatus}
	s.TaskEvents, s.StartedAt = taskInfo(a.TaskStates)
	return s
}

func fromStub(a *api.AllocationListStub) allocState {
	s := allocState{ID: a.ID, NomadJobID: a.JobID, ClientStatus: a.ClientStatus}
	s.TaskEvents, s.StartedAt = taskInfo(a.TaskStates)
	return s
}

func taskInfo(states map[string]*api.TaskState) ([]string, time.Time) {
	ts := states["runner"]
	if ts == nil {
		return nil, time.Time{}
	}
	var msgs []string
	for _, e := range ts.Events {
		if m := e.DisplayMessage; m != "" {
			msgs = append(msgs, e.Type+": "+m)
		}
	}
	return msgs, ts.StartedAt
}

// eventLoop follows Nomad's allocation events from the saved index. Errors arrive
// in-band; after each (re)connect it reconciles, because the stream is a
// best-effort tail and a fast task can skip "running" entirely.
func (d *Dispatcher) eventLoop(ctx context.Context) {
	backoff := time.Second
	for ctx.Err() == nil {
		index, err := d.Store.EventIndex(ctx)
		if err != nil {
			d.Log.Warn("read event index", "err", err)
		}
		sctx, cancel := context.WithCancel(ctx)
		events, err := d.Events.Stream(sctx, map[api.Topic][]string{api.TopicAllocation: {"*"}}, index, d.queryOpts)
		if err != nil {
			cancel()
			d.Log.Warn("nomad event stream unavailable; retrying", "err", err, "in", backoff)
			sleep(ctx, backoff)
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		d.reconcile(ctx)
		tick := time.NewTicker(d.ReconcileEvery)
	stream:
		for {
			select {
			case <-ctx.Done():
				break stream
			case <-tick.C:
				d.reconcile(ctx)
			case evs, ok := <-events:
				if !ok {
					break stream
				}
				if evs.Err != nil {
					d.Log.Warn("nomad event stream broke; resuming", "err", evs.Err)
					break stream
				}
				if evs.IsHeartbeat() {
					continue
				}
				backoff = time.Second
				for _, ev := range evs.Events {
					if a, err := ev.Allocation(); err == nil && a != nil {
						d.apply(ctx, fromAlloc(a))
					}
				}
				if err := d.Store.SaveEventIndex(ctx, evs.Index); err != nil {
					d.Log.Warn("save event index", "err", err)
				}
			}
		}
		tick.Stop()
		cancel()
		sleep(ctx, backoff)
	}
}

// reconcile reads every unfinished dispatched job's allocations from Nomad.
func (d *Dispatcher) reconcile(ctx context.Context) {
	ids, _, err := d.Store.JobIDs(ctx, d.Store.ActivePrefix())
	if err != nil {
		d.Log.Warn("reconcile: list active jobs", "err", err)
		return
	}
	for _, id := range ids {
		j, err := d.Store.Job(ctx, id)
		if err != nil || j.NomadJobID == "" {
			continue
		}
		stubs, _, err := d.Jobs.Allocations(j.NomadJobID, true, d.queryOpts)
		if err != nil {
			d.Log.Warn("reconcile: list allocations", "job", id, "nomad_job", j.NomadJobID, "err", err)
			continue
		}
		for _, s := range stubs {
			d.apply(ctx, fromStub(s))
		}
	}
}

// apply moves a job according to one allocation's state. Events for other Nomad
// jobs, for older attempts, or for finished jobs change nothing.
func (d *Dispatcher) apply(ctx context.Context, a allocState) {
	id, attempt, ok := ParseChildID(a.NomadJobID)
	if !ok {
		return
	}
	var result *mj.Result
	switch a.ClientStatus {
	case api.AllocClientStatusRunning:
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
		result = d.readResult(ctx, id, attempt)
	default:
		return
	}
	j, err := d.Store.UpdateJob(ctx, id, func(j *mj.Job) error {
		if j.Status.Terminal() || j.Attempt != attempt || j.NomadJobID != a.NomadJobID {
			return errSkip
		}
		return transition(j, a, result, time.Now().UTC(), runScope(id, attempt))
	})
	switch {
	case err == nil:
		d.Log.Info("job updated", "job", id, "status", j.Status, "alloc", a.ID)
		if j.Status.Terminal() {
			metrics.JobsFinished.WithLabelValues(j.Machine, string(j.Status)).Inc()
		}
	case errors.Is(err, errSkip), mj.ErrorCode(err) == mj.ENotFound:
	default:
		d.Log.Warn("apply allocation", "job", id, "alloc", a.ID, "err", err)
	}
}

// transition is the pure part of apply: how an allocation state and the runner's
// result (nil when it reported none) change a job.
func transition(j *mj.Job, a allocState, r *mj.Result, now time.Time, scope string) error {
	if j.StartedAt == nil && a.ClientStatus != api.AllocClientStatusLost {
		started := now
		if !a.StartedAt.IsZero() {
			started = a.StartedAt.UTC()
		}
		j.StartedAt = &started
	}
	if a.ClientStatus == api.AllocClientStatusRunning {
		if j.Status == mj.StatusRunning {
			return errSkip
		}
		j.Status, j.StatusDetail = mj.StatusRunning, "running on Nomad allocation "+a.ID
		return nil
	}
	j.FinishedAt = &now
	j.StatusDetail = ""
	switch {
	case r != nil && r.Succeeded:
		j.Status, j.TotalInputBytes, j.TotalOutputBytes = mj.StatusSucceeded, r.InputBytes, 0
		j.Outputs = nil
		for _, o := range r.Outputs {
			o.Key = scope + "outputs/" + o.Name
			j.Outputs = append(j.Outputs, o)
			j.TotalOutputBytes += o.Size
		}
	case r != nil:
		j.Status, j.ErrorMessage, j.TotalInputBytes = mj.StatusFailed, r.ErrorMessage, r.InputBytes
	case a.ClientStatus == api.AllocClientStatusLost:
		j.Status = mj.StatusFailed
		j.ErrorMessage = "the Nomad node running the job was lost before it finished (allocation " + a.ID + ")"
	default:
		j.Status = mj.StatusFailed
		j.ErrorMessage = fmt.Sprintf("the worker ended without reporting a result (Nomad allocation %s, %s)", a.ID, a.ClientStatus)
		if len(a.TaskEvents) > 0 {
			ev := a.TaskEvents
			if len(ev) > 4 {
				ev = ev[len(ev)-4:]
			}
			j.ErrorMessage += ": " + strings.Join(ev, "; ")
		}
	}
	return nil
}

func (d *Dispatcher) readResult(ctx context.Context, id string, attempt int) *mj.Result {
	b, err := d.Blobs.ReadAll(ctx, runScope(id, attempt)+"result.json")
	if err != nil {
		if !errors.Is(err, blob.ErrNotFound) {
			d.Log.Warn("read runner result", "job", id, "err", err)
		}
		return nil
	}
	var r mj.Result
	if err := json.Unmarshal(b, &r); err != nil || r.JobID != id || r.Attempt != attempt {
		d.Log.Warn("runner result unreadable or for another job", "job", id, "err", err)
		return nil
	}
	return &r
}
