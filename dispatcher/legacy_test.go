package dispatcher

import (
	"context"
	"sort"

	"github.com/hashicorp/nomad/api"
)

// The dispatcher as it was before reconcile and the event stream were spread over
// goroutines, kept for the benchmark's baseline and for tests that compare the two:
// a reconcile pass that reads each active job, then its child and the child's
// allocations from Nomad, one job after another; and events applied one after
// another as the stream delivers them. Run with d.settle.ungrouped for the old writes.

func (d *Dispatcher) reconcileSequential(ctx context.Context) {
	ids, _, err := d.Store.(interface { // the store's; the dispatcher no longer lists ids
		JobIDs(ctx context.Context, prefix string, limit int) ([]string, int64, error)
	}).JobIDs(ctx, d.Store.ActivePrefix(), 0)
	if err != nil {
		d.Log.Warn("reconcile: list active jobs", "err", err)
		return
	}
	for _, id := range ids {
		if ctx.Err() != nil {
			return
		}
		j, err := d.Store.Job(ctx, id)
		if err != nil || j.NomadJobID == "" || j.Status.Terminal() {
			continue
		}
		child := j.NomadJobID
		q, cancel := d.nomad.query(ctx)
		_, _, err = d.Jobs.Info(child, q)
		cancel()
		if isNotFound(err) {
			d.recon.vanished(ctx, j, child)
			continue
		} else if err != nil {
			d.Log.Warn("reconcile: read nomad job", "job", id, "nomad_job", child, "err", err)
			if unreachable(err) {
				return
			}
			continue
		}
		q, cancel = d.nomad.query(ctx)
		stubs, _, err := d.Jobs.Allocations(child, true, q)
		cancel()
		if err != nil {
			d.Log.Warn("reconcile: list allocations", "job", id, "nomad_job", child, "err", err)
			if unreachable(err) {
				return
			}
			continue
		}
		allocs := make([]allocState, len(stubs))
		for i, s := range stubs {
			allocs[i] = fromStub(s)
		}
		sort.SliceStable(allocs, func(a, b int) bool { return applyOrder(allocs[a]) < applyOrder(allocs[b]) })
		for _, a := range allocs {
			d.settle.apply(ctx, a)
		}
		if len(allocs) == 0 {
			d.recon.refreshPlacement(ctx, child)
		}
		d.recon.overdue(ctx, id, child, allocs)
	}
	d.recon.stopStrayChildren(ctx)
}

// eventsSequential applies a stream's events one after another until ctx ends or
// the stream does, calling applied with each batch's index once it is applied.
func (d *Dispatcher) eventsSequential(ctx context.Context, events <-chan *api.Events, applied func(uint64)) {
	for {
		select {
		case <-ctx.Done():
			return
		case evs, ok := <-events:
			if !ok || evs.Err != nil {
				return
			}
			for _, ev := range evs.Events {
				d.handleEventDecoded(ctx, ev)
			}
			applied(evs.Index)
		}
	}
}

// handleEventDecoded is handleEvent as it was: the whole allocation decoded.
func (d *Dispatcher) handleEventDecoded(ctx context.Context, ev api.Event) {
	if ev.Topic != api.TopicAllocation {
		d.track.handleEvent(ctx, ev)
	} else if a, err := ev.Allocation(); err == nil && a != nil {
		d.settle.apply(ctx, fromAlloc(a))
	}
}
