package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
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

// eventLoop follows Nomad's allocation and evaluation events from the saved index.
// Errors arrive in-band. The stream is a best-effort tail (a slow reader is
// dropped, a fast task can skip "running" entirely), so a reconcile goroutine
// settles everything against Nomad after each (re)connect and every
// ReconcileEvery, beside the stream rather than in its way. Events are applied by
// partitioned workers (see partitions); the saved index is the watermark of what
// they have handled (an apply that failed included: reconcile repairs it, see
// watermark), and applying an event twice changes nothing.
func (d *Dispatcher) eventLoop(ctx context.Context) {
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); d.reconcileLoop(ctx, kick) }()
	work := newPartitions(eventWorkers, eventQueue)
	work.onPanic = d.workerPanicked(ctx)
	defer func() { work.close(); wg.Wait() }()
	backoff := time.Second
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			metrics.EventStreamReconnects.WithLabelValues().Inc()
		}
		index, err := d.st().EventIndex(ctx)
		if numErr := (*strconv.NumError)(nil); errors.As(err, &numErr) {
			// A damaged index never reads: resume from where Nomad is now, and
			// let reconcile settle what came before.
			d.Log.Error("saved event index is damaged; resuming from nomad's current index", "err", err)
			index, err = d.nomad.index(ctx)
		}
		if err != nil {
			// Not "start at 0": that replays Nomad's oldest retained events. The
			// stream waits for the index; reconcile settles what it can meanwhile.
			d.Log.Warn("read event index failed; retrying", "err", err, "in", backoff)
			poke()
			sleep(ctx, backoff)
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		topics := map[api.Topic][]string{api.TopicAllocation: {"*"}, api.TopicEvaluation: {"*"}}
		events, err := d.Events.Stream(sctx, topics, index, d.nomad.queryOpts)
		if err != nil {
			cancel()
			d.Log.Warn("nomad event stream unavailable; retrying", "err", err, "in", backoff)
			poke() // settle what can be settled without the stream
			sleep(ctx, backoff)
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		poke()
		d.follow(ctx, events, work, newWatermark(index), &backoff)
		cancel()
		sleep(ctx, backoff)
	}
}

// follow hands one stream's events to the workers until it ends, saving the
// watermark of the applied ones as the resume point.
func (d *Dispatcher) follow(ctx context.Context, events <-chan *api.Events, work *partitions, mark *watermark, backoff *time.Duration) {
	// The index is only where a new stream resumes, so it is saved at most every
	// eventIndexEvery, not per batch: each save is an etcd revision.
	saved, savedAt := mark.get(), time.Now()
	save := func(force bool) {
		applied := mark.get()
		if applied == saved || (!force && time.Since(savedAt) < eventIndexEvery) {
			return
		}
		if err := d.st().SaveEventIndex(ctx, applied); err != nil {
			d.Log.Warn("save event index", "err", err)
			return
		}
		saved, savedAt = applied, time.Now()
	}
	defer save(true)
	// The workers finish batches after they arrive: the watermark is saved on a
	// clock too, not only when the next batch comes.
	tick := time.NewTicker(eventIndexEvery)
	defer tick.Stop()
	// Nomad's api client swallows the stream's heartbeats: a stream with nothing to
	// say for StreamIdle may be an idle cluster or a dead agent. nomadAPI.answers tells
	// them apart; an idle cluster keeps its stream (see nomadAPI.answers).
	idle := time.NewTimer(d.StreamIdle)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			save(false)
		case <-idle.C:
			if err := d.nomad.answers(ctx); err != nil {
				if ctx.Err() == nil {
					d.Log.Warn("nomad event stream silent and nomad not answering; reconnecting", "for", d.StreamIdle, "err", err)
				}
				return
			}
			d.Log.Debug("nomad event stream quiet; nomad answers, keeping it", "for", d.StreamIdle)
			idle.Reset(d.StreamIdle)
		case evs, ok := <-events:
			if !ok {
				if ctx.Err() == nil {
					d.Log.Info("nomad event stream ended; resuming")
				}
				return
			}
			idle.Reset(d.StreamIdle)
			if evs.Err != nil {
				// Routine (an agent restart, a server leader change, a slow reader
				// dropped): the stream resumes from the saved index. Nomad staying
				// away is reported by the reconnect ("unavailable").
				d.Log.Info("nomad event stream broke; resuming", "err", evs.Err)
				return
			}
			if evs.IsHeartbeat() {
				save(true) // a quiet stream: keep the resume point current
				continue
			}
			*backoff = time.Second
			d.submit(ctx, evs, work, mark)
			// submit waits while a worker's queue is full, and nothing reads the
			// stream meanwhile: that wait is ours, not the stream's silence.
			idle.Reset(d.StreamIdle)
			save(false)
		}
	}
}

// submit queues a batch's events on their jobs' workers.
func (d *Dispatcher) submit(ctx context.Context, evs *api.Events, work *partitions, mark *watermark) {
	ids := make([]string, len(evs.Events))
	n := 0
	for i := range evs.Events {
		if id, ok := eventJobID(&evs.Events[i]); ok {
			ids[i] = id
			n++
		}
	}
	b := mark.add(evs.Index, n)
	for i, id := range ids {
		if id == "" {
			continue
		}
		ev := evs.Events[i]
		if !work.submit(ctx, id, func() { defer mark.done(b); d.handleEvent(ctx, ev) }) {
			return // leading ended: the watermark stays before this batch
		}
	}
}

// streamIdle is the default of Dispatcher.StreamIdle.
var streamIdle = 45 * time.Second

// eventIndexEvery is how often, at most, a busy stream's index is saved.
const eventIndexEvery = 5 * time.Second

func (d *Dispatcher) handleEvent(ctx context.Context, ev api.Event) {
	switch ev.Topic {
	case api.TopicAllocation:
		if a, ok := allocFromEvent(&ev); ok {
			if a.ClientStatus == api.AllocClientStatusUnknown {
				// The one state an allocation leaves again, and the event may be
				// old (a replay): what Nomad says now decides, as in reconcile.
				if a, ok = d.currentAlloc(ctx, a); !ok {
					return
				}
			}
			d.apply(ctx, a)
		}
	case api.TopicEvaluation:
		if e, err := ev.Evaluation(); err == nil && e != nil && len(e.FailedTGAllocs) > 0 {
			d.placementFailed(ctx, e.JobID, e.FailedTGAllocs)
		}
	}
}

// currentAlloc reads allocation a of a mediajobs child from Nomad again; ok is
// false when it cannot be read or is gone (reconcile settles it then).
func (d *Dispatcher) currentAlloc(ctx context.Context, a allocState) (allocState, bool) {
	if _, _, ok := mj.ParseChildID(a.NomadJobID); !ok {
		return a, false
	}
	q, cancel := d.nomad.query(ctx)
	stubs, _, err := d.Jobs.Allocations(a.NomadJobID, true, q)
	cancel()
	if err != nil {
		d.Log.Warn("read allocation again failed; reconcile settles it", "nomad_job", a.NomadJobID, "alloc", a.ID, "err", err)
		return a, false
	}
	for _, s := range stubs {
		if s.ID == a.ID {
			return fromStub(s), true
		}
	}
	return a, false
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

// vanished settles a job whose current child Nomad no longer knows (garbage
// collected, purged, an agent restarted without its state). The attempt may well
// have reported before it went: its result counts. Only without one is the
// attempt retried.
func (d *Dispatcher) vanished(ctx context.Context, j *mj.Job, child string) {
	r, prefix, err := d.anyResult(ctx, j.ID, j.Attempt)
	if err != nil {
		d.resultUnreadable(ctx, j.ID, j.Attempt, child, err)
		return
	}
	if r == nil {
		d.lost(ctx, j.ID, child, "its Nomad job "+child+" no longer exists (was Nomad restarted without its state?)")
		return
	}
	a := allocState{ID: r.AllocID, NomadJobID: child, ClientStatus: api.AllocClientStatusComplete, Reported: true}
	nj, err := d.update(ctx, j.ID, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != child {
			return errSkip
		}
		return transition(j, a, checked(d.metered(r, j), j, d.Config.Server.MaxOutputFiles), d.now(), prefix, d.maxAttempts(j), d.DisconnectGrace)
	})
	d.applied(ctx, j.ID, child, nj, err)
}

// stopStrayChildren stops every live mediajobs child no job wants: its job is
// finished, or has moved on to a later attempt. The cancel loop stops a cancelled
// job's child when it sees the job leave the active set, but a delete that happened
// while no dispatcher led (or across a compaction) is never seen; and Nomad itself
// may have replaced a lost allocation of an attempt the dispatcher already retried.
// A child of the job's current attempt is left alone even when the job has not
// recorded it yet: its dispatch may be in flight. Children are deregistered, not
// purged, as a cancel does.
func (d *Dispatcher) stopStrayChildren(ctx context.Context) {
	q, cancel := d.nomad.query(ctx)
	defer cancel()
	q.Prefix = "mediajobs-"
	stubs, _, err := d.Jobs.List(q)
	if err != nil {
		d.Log.Warn("reconcile: list nomad jobs", "err", err)
		return
	}
	for _, s := range stubs {
		if ctx.Err() != nil {
			return
		}
		if s.ParentID == "" || !strings.HasPrefix(s.ParentID, "mediajobs-") || s.Stop || s.Status == "dead" {
			continue
		}
		id, attempt, ok := mj.ParseChildID(s.ID)
		if !ok {
			continue
		}
		// A job this store does not know may belong to another installation that
		// shares the Nomad namespace: leave it alone.
		j, err := d.st().Job(ctx, id)
		switch {
		case err != nil:
		case j.Status.Terminal():
			metrics.ReconcileCorrections.WithLabelValues("stray").Inc()
			d.nomad.stopChild(ctx, s.ID, "job "+string(j.Status), id)
		case attempt < max(j.Attempt, 1):
			metrics.ReconcileCorrections.WithLabelValues("stray").Inc()
			d.nomad.stopChild(ctx, s.ID, fmt.Sprintf("attempt %d was superseded by attempt %d", attempt, j.Attempt), id)
		case twin(j, s.ID, attempt):
			metrics.ReconcileCorrections.WithLabelValues("stray").Inc()
			d.nomad.stopChild(ctx, s.ID, twinWhy(j), id)
		}
	}
}

// overdue ends an attempt that Nomad will not end by itself, judged from its
// allocations: a child no node could place within the pool's queue limit (not one
// waiting for a busy node to free up) fails; an allocation placed but never started
// within start_timeout (an image pull that hangs, a wedged client) is a lost worker;
// a worker still alive well past the job's timeout is stopped and fails the job. A
// finished allocation is never overdue: its result, maybe late, settles the job.
func (d *Dispatcher) overdue(ctx context.Context, id, child string, allocs []allocState) {
	if d.resultFirst(ctx, id, child, allocs) {
		return
	}
	var why string
	j, err := d.update(ctx, id, d.overdueFn(d.now(), child, allocs, &why))
	switch {
	case err == nil && j.Status.Terminal():
		metrics.Finished(j)
		d.Log.Info("job failed by the dispatcher", "job", id, "reason", j.ErrorMessage)
		d.nomad.stopChild(ctx, child, why, id)
	case err == nil:
		if j.NomadJobID == "" { // the only retry overdueFn makes
			metrics.JobRetries.WithLabelValues(j.Machine, metrics.RetryStartTimeout).Inc()
		}
		d.Log.Info("attempt ended by the dispatcher", "job", id, "detail", j.StatusDetail)
		d.nomad.stopChild(ctx, child, why, id)
	}
}

// resultFirst applies a result a live worker has already written: past its
// deadline the runner still uploads logs and then the result (within half of
// timeout_grace, see runner.Upload), and a result, not the timeout backstop,
// settles the job. Only a running allocation can be past its timeout, so only
// running ones are read. It reports whether overdue must stop here: the result
// was applied, or the store could not say (the next pass reads it again).
func (d *Dispatcher) resultFirst(ctx context.Context, id, child string, allocs []allocState) bool {
	_, attempt, ok := mj.ParseChildID(child)
	if !ok {
		return false
	}
	for _, a := range allocs {
		if a.ClientStatus != api.AllocClientStatusRunning {
			continue
		}
		r, prefix, err := d.readResult(ctx, id, attempt, a.ID)
		if err != nil {
			d.Log.Warn("read runner result before the timeout backstop failed; will retry", "job", id, "nomad_job", child, "err", err)
			return true
		}
		if r == nil {
			continue
		}
		done := a
		done.ClientStatus, done.Reported = api.AllocClientStatusComplete, true
		j, err := d.update(ctx, id, func(j *mj.Job) error {
			if j.Status.Terminal() || j.Attempt != attempt || j.NomadJobID != child {
				return errSkip
			}
			return transition(j, done, checked(d.metered(r, j), j, d.Config.Server.MaxOutputFiles), d.now(), prefix, d.maxAttempts(j), d.DisconnectGrace)
		})
		d.applied(ctx, id, child, j, err)
		return true
	}
	return false
}

// overdueFn is overdue's change of a job as of now, setting why when it ends the
// attempt; errSkip when the attempt is not overdue.
func (d *Dispatcher) overdueFn(now time.Time, child string, allocs []allocState, why *string) func(*mj.Job) error {
	placed, alive, started := len(allocs) > 0, false, false
	var pendingSince time.Time // the earliest placement of a pending allocation
	for _, a := range allocs {
		a = d.ownClock(a, now)
		switch a.ClientStatus {
		case api.AllocClientStatusPending:
			alive = true
			if pendingSince.IsZero() || a.Created.Before(pendingSince) {
				pendingSince = a.Created
			}
		case api.AllocClientStatusRunning:
			alive, started = true, true
		default:
			started = true
		}
	}
	return func(j *mj.Job) error {
		// Judged on the allocations of child: the job must still be on it.
		if j.Status.Terminal() || j.NomadJobID != child {
			return errSkip
		}
		var waited time.Duration
		if j.DispatchedAt != nil {
			waited = now.Sub(*j.DispatchedAt)
		}
		pool := d.Config.Pool(j.Machine)
		switch {
		case pool == nil && attemptStart(j) == nil && (j.DispatchedAt == nil || waited > unknownPoolGrace):
			// Its pool was removed after the dispatch: nothing would place it. A
			// started attempt runs on, to its result or its timeout.
			j.Fail(now, fmt.Sprintf("machine %q is not a pool this server has (it was removed from the dispatcher's configuration after the job was dispatched); the job cannot run", j.Machine))
			*why = "pool removed"
		case pool == nil && j.Status == mj.StatusRunning && alive && attemptStart(j) != nil && d.timedOut(j, now):
			j.Fail(now, fmt.Sprintf("job timed out after %ds (timeout_seconds); its worker did not stop by itself and was stopped (its machine %q is no longer a configured pool)", j.TimeoutSeconds, j.Machine))
			*why = whyTimedOut
		case pool == nil:
			return errSkip
		case attemptStart(j) == nil && !placed && !j.WaitingForCapacity && waited > pool.QueueLimitD:
			reason := j.PlacementReason
			if reason == "" {
				reason = "Nomad did not place it"
			}
			j.Fail(now, fmt.Sprintf("no worker could take the job within the %s queue limit of machine %q: %s", pool.QueueLimitD, j.Machine, reason))
			*why = "overdue"
		case attemptStart(j) == nil && placed && !started && !pendingSince.IsZero() && now.Sub(pendingSince) > pool.StartTimeoutD:
			j.RetryOrFail(fmt.Sprintf("its Nomad allocation was placed but did not start within the %s start_timeout of machine %q (an image pull or a client that hangs)", pool.StartTimeoutD, j.Machine), now, pool.MaxAttempts)
			*why = "did not start"
		case j.Status == mj.StatusRunning && alive && attemptStart(j) != nil && d.timedOut(j, now):
			j.Fail(now, fmt.Sprintf("job timed out after %ds (timeout_seconds); its worker did not stop by itself and was stopped", j.TimeoutSeconds))
			*why = whyTimedOut
		default:
			return errSkip
		}
		return nil
	}
}

// whyTimedOut is overdueFn's why for the timeout backstop: before it fails the
// job, overdue looks for the worker's result (see resultFirst).
const whyTimedOut = "timed out"

// timedOut tells a started attempt past its timeout and TimeoutGrace.
func (d *Dispatcher) timedOut(j *mj.Job, now time.Time) bool {
	return now.Sub(*attemptStart(j)) > time.Duration(j.TimeoutSeconds)*time.Second+d.TimeoutGrace
}

// attemptStart is when the current attempt's worker started, or nil when it has not
// (a retried attempt of a running job that waits for a node).
func attemptStart(j *mj.Job) *time.Time { return j.AttemptStart() }

// refreshPlacement reads the child's latest evaluation and records its placement
// failure, as the event stream would have; it reports whether the job changed. An
// error is Nomad's evaluations left unread: they may say the job waits for
// capacity, so nothing is to be judged on their absence.
func (d *Dispatcher) refreshPlacement(ctx context.Context, child string) (bool, error) {
	q, cancel := d.nomad.query(ctx)
	evals, _, err := d.Jobs.Evaluations(child, q)
	cancel()
	if err != nil {
		return false, err
	}
	var latest *api.Evaluation
	for _, e := range evals {
		if len(e.FailedTGAllocs) > 0 && (latest == nil || e.ModifyIndex > latest.ModifyIndex) {
			latest = e
		}
	}
	return latest != nil && d.placementFailed(ctx, child, latest.FailedTGAllocs), nil
}

// placementFailed records why Nomad cannot place a child yet; the job stays queued
// with the reason visible. When nodes that could run it exist but are busy, it
// waits for one to free up (Nomad's blocked evaluation places it then); otherwise
// the pool's queue limit fails it. It reports whether the job changed.
func (d *Dispatcher) placementFailed(ctx context.Context, child string, failed map[string]*api.AllocationMetric) bool {
	id, attempt, ok := mj.ParseChildID(child)
	if !ok {
		return false
	}
	reason, capacity := placementReason(failed)
	waiting, pool := false, "" // the child still waits: the failure is news, not a replay
	j, err := d.update(ctx, id, func(j *mj.Job) error {
		waiting, pool = !j.Status.Terminal() && attemptStart(j) == nil && j.NomadJobID == child && j.Attempt == attempt, j.Machine
		if !waiting || (j.PlacementReason == reason && j.WaitingForCapacity == capacity) {
			return errSkip
		}
		j.PlacementReason, j.WaitingForCapacity = reason, capacity
		j.StatusDetail = "waiting for a node: " + reason
		if capacity {
			j.StatusDetail = "waiting for a free node: every node that can run it is busy; " + reason
		}
		if j.Attempt > 1 {
			j.StatusDetail = fmt.Sprintf("attempt %d: %s", j.Attempt, j.StatusDetail)
		}
		return nil
	})
	if capacity && waiting {
		// Whether or not the job changed: a waiting child Nomad has no room for
		// says its pool is full (the window, fair.go).
		d.sched.poolFull(pool)
	}
	if err == nil {
		cause := "infeasible"
		if capacity {
			cause = "capacity"
		}
		metrics.PlacementFailures.WithLabelValues(j.Machine, cause).Inc()
	}
	return err == nil
}

// placementReason turns Nomad's placement metrics into one sentence, and says
// whether the cause is capacity: some node passed every constraint and was only
// out of resources (CPU, memory, disk, free GPUs) at the time.
func placementReason(failed map[string]*api.AllocationMetric) (string, bool) {
	var parts []string
	capacity := len(failed) > 0
	for _, m := range failed {
		if m == nil {
			continue
		}
		if m.NodesExhausted == 0 {
			capacity = false
		}
		if m.NodesEvaluated == 0 && m.NodesInPool == 0 {
			parts = append(parts, "no nodes are available in the node pool")
			continue
		}
		parts = append(parts, fmt.Sprintf("%d node(s) evaluated", m.NodesEvaluated))
		for _, set := range []map[string]int{m.ConstraintFiltered, m.ClassFiltered, m.DimensionExhausted} {
			keys := make([]string, 0, len(set))
			for k := range set {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				parts = append(parts, fmt.Sprintf("%d filtered by %s", set[k], k))
			}
		}
		if m.NodesExhausted > 0 && len(m.DimensionExhausted) == 0 {
			parts = append(parts, fmt.Sprintf("%d node(s) out of resources", m.NodesExhausted))
		}
	}
	if len(parts) == 0 {
		return "no node can run it", false
	}
	// Clipped as stored, so an unchanged reason compares equal and is not rewritten.
	return mj.Clip("no node can run it ("+strings.Join(parts, "; ")+")", mj.MaxDetailBytes-100), capacity
}

// apply moves a job according to one allocation's state, and reports whether it
// did. Events for other Nomad jobs, for older attempts, or for finished jobs change
// nothing.
func (d *Dispatcher) apply(ctx context.Context, a allocState) bool {
	id, attempt, ok := mj.ParseChildID(a.NomadJobID)
	if !ok {
		return false
	}
	var result *mj.Result
	prefix := mj.RunScope(id, attempt)
	switch a.ClientStatus {
	case api.AllocClientStatusRunning:
	case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost, api.AllocClientStatusUnknown:
		var err error
		if result, prefix, err = d.readResult(ctx, id, attempt, a.ID); err != nil {
			// Not "no result": the store could not say. Leave the job as it is; the
			// next reconcile reads the allocation, and the result, again (unless the
			// error persists: see resultUnreadable).
			d.resultUnreadable(ctx, id, attempt, a.NomadJobID, err)
			return false
		}
	default:
		return false
	}
	now := d.now()
	a = d.ownClock(a, now)
	var twinOf string
	j, err := d.update(ctx, id, func(j *mj.Job) error {
		if twin(j, a.NomadJobID, attempt) && a.ClientStatus == api.AllocClientStatusRunning {
			twinOf = twinWhy(j)
		}
		if j.Status.Terminal() || j.Attempt != attempt || j.NomadJobID != a.NomadJobID {
			return d.lateUsage(j, a.NomadJobID, attempt, result)
		}
		return transition(j, a, checked(d.metered(result, j), j, d.Config.Server.MaxOutputFiles), now, prefix, d.maxAttempts(j), d.DisconnectGrace)
	})
	if twinOf != "" && errors.Is(err, errSkip) {
		metrics.ReconcileCorrections.WithLabelValues("stray").Inc()
		d.nomad.stopChild(ctx, a.NomadJobID, twinOf, id)
	}
	d.applied(ctx, id, a.NomadJobID, j, err)
	if result != nil {
		// Read: the grace of a late result is over, and its sighting need
		// not wait for the prune.
		d.seen.forget("reported/" + a.ID)
	}
	if err == nil && retried(j) {
		metrics.JobRetries.WithLabelValues(j.Machine, retryReason(a)).Inc()
	}
	return err == nil
}

// lateUsage is the update, by the result r of attempt on child, of a job that
// was cancelled while that attempt ran (docs/usage.md): the job stays
// cancelled, and its usage becomes, figure by figure, the larger of what the
// cancel metered (wall time: mj.CancelledUsage) and what the runner reports
// (CPU time, output bytes, ...); the store adds the difference to the account's
// day in the same write (store/usage.go). A destination that cancels the job
// before it answers the upload so leaves the work billed. Any other job, or a
// result that adds nothing, is skipped (errSkip). Both the Nomad path (apply)
// and the warm one (applyWarmDone) call it when they skip a job.
func (d *Dispatcher) lateUsage(j *mj.Job, child string, attempt int, r *mj.Result) error {
	if r == nil || j.Status != mj.StatusCancelled || j.NomadJobID != child || max(j.Attempt, 1) != attempt {
		return errSkip
	}
	rep := checked(d.metered(r, j), j, d.Config.Server.MaxOutputFiles).Usage
	if rep == nil {
		return errSkip
	}
	u := *rep
	if o := j.Usage; o != nil {
		u = mj.Usage{WallSeconds: max(u.WallSeconds, o.WallSeconds), CPUSeconds: max(u.CPUSeconds, o.CPUSeconds),
			GPUSeconds: max(u.GPUSeconds, o.GPUSeconds), InputBytes: max(u.InputBytes, o.InputBytes), OutputBytes: max(u.OutputBytes, o.OutputBytes)}
		if u == *o {
			return errSkip
		}
	}
	added := u
	if o := j.Usage; o != nil {
		added = mj.Usage{WallSeconds: u.WallSeconds - o.WallSeconds, CPUSeconds: u.CPUSeconds - o.CPUSeconds, GPUSeconds: u.GPUSeconds - o.GPUSeconds,
			InputBytes: u.InputBytes - o.InputBytes, OutputBytes: u.OutputBytes - o.OutputBytes}
	}
	d.late.Store(j.ID, added)
	j.Usage = &u
	return nil
}

// retried tells a job just sent back to the queue as a new attempt.
func retried(j *mj.Job) bool { return j.NomadJobID == "" && !j.Status.Terminal() }

// retryReason is mediajobs_job_retries_total's reason for an attempt that
// transition retried on allocation a.
func retryReason(a allocState) string {
	switch a.ClientStatus {
	case api.AllocClientStatusLost:
		return metrics.RetryNodeLost
	case api.AllocClientStatusUnknown:
		return metrics.RetryNodeDisconnected
	}
	return metrics.RetryWorkerCrashed
}

// lost re-dispatches (or fails, after the last attempt) a job whose child vanished.
func (d *Dispatcher) lost(ctx context.Context, id, child, why string) {
	j, err := d.update(ctx, id, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != child {
			return errSkip
		}
		j.RetryOrFail(why, d.now(), d.maxAttempts(j))
		return nil
	})
	d.applied(ctx, id, child, j, err)
	if err == nil && retried(j) {
		metrics.JobRetries.WithLabelValues(j.Machine, metrics.RetryVanished).Inc()
	}
}

func (d *Dispatcher) applied(ctx context.Context, id, child string, j *mj.Job, err error) {
	switch {
	case err == nil && j.Status == mj.StatusCancelled:
		// The dispatcher never cancels: this is a late result's usage
		// (lateUsage); the cancel itself ended the job, once.
		d.Log.Info("metered the usage its runner reported after the job was cancelled", "job", id, "nomad_job", child)
		if added, ok := d.late.LoadAndDelete(id); ok {
			metrics.LateUsage(j, added.(mj.Usage))
		}
	case err == nil:
		d.Log.Info("job updated", "job", id, "status", j.Status, "attempt", j.Attempt, "detail", j.StatusDetail)
		if j.Status.Terminal() {
			metrics.Finished(j)
			d.countOutputs(ctx, j) // storage held (storagequota.go)
		}
		if j.NomadJobID == "" && !j.Status.Terminal() {
			d.nomad.stopChild(ctx, child, "re-dispatching", id) // usually dead already
		}
	case errors.Is(err, errSkip), mj.ErrorCode(err) == mj.ENotFound:
		d.late.Delete(id)
	default:
		d.late.Delete(id)
		d.Log.Warn("apply nomad state", "job", id, "nomad_job", child, "err", err)
	}
}

// maxAttempts is the job's pool's max_attempts, plus the attempts stopping warm
// runners handed back (GivenBack, bounded in warm.go): those are not the job's.
func (d *Dispatcher) maxAttempts(j *mj.Job) int {
	if p := d.Config.Pool(j.Machine); p != nil {
		return p.MaxAttempts + j.GivenBack
	}
	return 1 + j.GivenBack
}

// checked turns a successful result whose outputs j did not declare into a
// failed one: the result was written by a worker that runs users' commands.
func checked(r *mj.Result, j *mj.Job, maxOutputs int) *mj.Result {
	r = mj.BoundResult(r) // error text and probe data within the job record's bounds
	if r == nil || !r.Succeeded {
		return r
	}
	if err := mj.CheckOutputs(r.Outputs, j.OutputNames, maxOutputs); err != nil {
		return &mj.Result{JobID: r.JobID, Attempt: r.Attempt, InputBytes: r.InputBytes, ErrorMessage: err.Error(), Usage: failedUsage(r.Usage)}
	}
	return r
}

// defaultDisconnectGrace is dispatcher.disconnect_grace's default: how long an
// allocation whose node stopped heartbeating ("unknown": the jobspecs' disconnect
// block keeps Nomad from replacing it for an hour) may stay so before the attempt
// counts as lost: the next attempt is a new child, and this one is stopped.
const defaultDisconnectGrace = 5 * time.Minute

// resultGrace is how long a result the runner reported (its reporting task exited
// 0 or 1) may take to become readable before it counts as missing.
const resultGrace = 2 * time.Minute

// transition is the pure part of apply: how an allocation state and the runner's
// result (nil when it reported none) change a job. A result, success or failure, is
// final, and its outputs are the ones under prefix (the allocation's own). No
// result means the worker was lost or crashed, which is retried, unless the runner
// said it reported: then the result is late, and the next pass reads it again.
func transition(j *mj.Job, a allocState, r *mj.Result, now time.Time, prefix string, maxAttempts int, disconnectGrace time.Duration) error {
	if a.ClientStatus == api.AllocClientStatusRunning {
		// A retried attempt of a running job stays running but starts a new clock.
		// (Attempt 1 with no AttemptStartedAt was stored before it existed: its
		// StartedAt is the attempt's start.)
		if j.Status == mj.StatusRunning && (j.AttemptStartedAt != nil || j.Attempt <= 1) {
			return errSkip
		}
		started := now
		if !a.StartedAt.IsZero() {
			started = a.StartedAt.UTC()
		}
		if j.Status != mj.StatusRunning {
			j.StartedAt = &started
		}
		// The timeout backstop's clock is the dispatcher's own, from when it saw
		// the attempt running: a node clock behind it would shorten the timeout
		// (docs/state_machine.md).
		seen := now
		j.AttemptStartedAt = &seen
		j.Worker = &mj.Worker{Path: mj.WorkerDispatch, NomadJobID: a.NomadJobID, AllocationID: a.ID}
		j.PlacementReason = ""
		j.Run("running on Nomad allocation " + a.ID)
		return nil
	}
	if _, warm := mj.WarmRunOfChild(a.NomadJobID); r != nil && !warm && (j.Worker == nil || j.Worker.AllocationID == "") {
		j.Worker = &mj.Worker{Path: mj.WorkerDispatch, NomadJobID: a.NomadJobID, AllocationID: a.ID}
	}
	if r != nil && j.StartedAt == nil {
		started := now
		if !a.StartedAt.IsZero() {
			started = a.StartedAt.UTC()
		}
		j.StartedAt = &started // a fast task can skip "running" in the stream
	}
	if r != nil {
		// One log per command at most, under the allocation's own prefix.
		j.LogCommands, j.LogsPrefix = nil, prefix
		seen := map[int]bool{}
		for _, l := range r.Logs {
			if l.Command >= 1 && l.Command <= len(j.FFmpegCommands) && !seen[l.Command] {
				seen[l.Command] = true
				j.LogCommands = append(j.LogCommands, l.Command)
			}
		}
		if len(j.LogCommands) == 0 {
			j.LogsPrefix = ""
		}
		j.Analysis = r.Analysis // bounded (checked)
		j.Usage = r.Usage       // this attempt's: the one metered (usage.go)
	}
	switch {
	case r != nil && r.Succeeded:
		detail := ""
		if j.Attempt > 1 {
			detail = fmt.Sprintf("succeeded on attempt %d (earlier workers were lost)", j.Attempt)
		}
		j.Succeed(now, detail)
		j.TotalInputBytes, j.TotalOutputBytes, j.Outputs = r.InputBytes, 0, nil
		for _, o := range r.Outputs {
			o.Key = prefix + mj.OutputsDir + o.Name
			j.Outputs = append(j.Outputs, o)
			j.TotalOutputBytes += o.Size
		}
	case r != nil:
		j.Fail(now, r.ErrorMessage)
		j.TotalInputBytes = r.InputBytes
	case a.ClientStatus == api.AllocClientStatusLost:
		j.RetryOrFail("the Nomad node running it was lost (allocation "+a.ID+")", now, maxAttempts)
	case a.ClientStatus == api.AllocClientStatusUnknown && now.Sub(a.Modified) < disconnectGrace:
		return errSkip // its node may be back in a moment, with the run intact
	case a.ClientStatus == api.AllocClientStatusUnknown:
		j.RetryOrFail(fmt.Sprintf("the Nomad node running it has been disconnected for over %s (allocation %s)", disconnectGrace, a.ID), now, maxAttempts)
	case a.Reported && now.Sub(a.ReportedAt) < resultGrace:
		return errSkip // reported, not readable yet: read it again, never re-run it
	default:
		why := fmt.Sprintf("its worker ended without reporting a result (Nomad allocation %s, %s)", a.ID, a.ClientStatus)
		if len(a.TaskEvents) > 0 {
			ev := a.TaskEvents
			if len(ev) > 4 {
				ev = ev[len(ev)-4:]
			}
			why += ": " + strings.Join(ev, "; ")
		}
		j.RetryOrFail(why, now, maxAttempts)
	}
	return nil
}

// readResult reads the result allocation alloc of an attempt reported, and returns
// the prefix its files are under. Runners upload under their allocation's own
// prefix (jobs/<id>/<attempt>/<alloc>/), so a replacement Nomad placed for a lost
// allocation never mixes its files with the original's; a runner that knew no
// allocation id used the attempt's prefix. Nil and no error means no result (or an
// unreadable one); an error means the blob store could not answer, which says
// nothing about the result.
func (d *Dispatcher) readResult(ctx context.Context, id string, attempt int, alloc string) (*mj.Result, string, error) {
	scope := mj.RunScope(id, attempt)
	if alloc != "" {
		r, err := d.resultAt(ctx, id, attempt, scope+alloc+"/")
		if r != nil || err != nil {
			return r, scope + alloc + "/", err
		}
	}
	r, err := d.resultAt(ctx, id, attempt, scope)
	return r, scope, err
}

// anyResult finds a result of the attempt when the allocation that wrote it is
// no longer known (its child vanished from Nomad): the first readable one.
func (d *Dispatcher) anyResult(ctx context.Context, id string, attempt int) (*mj.Result, string, error) {
	scope := mj.RunScope(id, attempt)
	keys, err := d.storage().List(ctx, scope)
	if err != nil {
		return nil, "", err
	}
	sort.Strings(keys)
	var first *mj.Result
	var firstPrefix string
	for _, k := range keys {
		prefix, ok := strings.CutSuffix(k, mj.ResultFile)
		alloc := strings.TrimSuffix(strings.TrimPrefix(prefix, scope), "/")
		// The attempt's own result, or an allocation's: its directory is a Nomad
		// allocation id (the runner chose it: a longer name would not be bounded).
		if _, err := uuid.Parse(alloc); !ok || (alloc != "" && (err != nil || len(alloc) != 36)) {
			continue
		}
		r, err := d.resultAt(ctx, id, attempt, prefix)
		if err != nil {
			return nil, "", err
		}
		if r == nil {
			continue
		}
		r.AllocID = alloc
		if r.Succeeded { // a copy that succeeded wins over one that failed
			return r, prefix, nil
		}
		if first == nil {
			first, firstPrefix = r, prefix
		}
	}
	return first, firstPrefix, nil
}

func (d *Dispatcher) resultAt(ctx context.Context, id string, attempt int, prefix string) (*mj.Result, error) {
	b, err := d.storage().ReadAll(ctx, prefix+mj.ResultFile)
	if errors.Is(err, blob.ErrNotFound) {
		return nil, nil
	}
	if errors.Is(err, blob.ErrTooLarge) {
		return &mj.Result{JobID: id, Attempt: attempt, ErrorMessage: fmt.Sprintf("the worker's result.json was larger than %d bytes; nothing was published", blob.MaxSmall)}, nil
	}
	if err != nil {
		return nil, err
	}
	var r mj.Result
	if err := json.Unmarshal(b, &r); err != nil || r.JobID != id || r.Attempt != attempt {
		d.Log.Warn("runner result unreadable or for another job", "job", id, "err", err)
		return nil, nil
	}
	return &r, nil
}

// cancelLoop stops the Nomad child of every job that leaves the active set as
// cancelled (the gateway marks it; Nomad follows).
func (d *Dispatcher) cancelLoop(ctx context.Context) {
	d.st().Follow(ctx, store.Active, time.Hour, d.Log, func(ctx context.Context, id string, del *store.Deleted) {
		if del == nil || del.Prev == nil {
			return
		}
		j, err := d.st().Job(ctx, id)
		if err != nil || j.Status != mj.StatusCancelled {
			return
		}
		d.nomad.stopChild(ctx, string(del.Prev), "job cancelled", id)
	})
}
