package dispatcher

import (
	"context"
	"errors"
	"log/slog"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/metrics"
)

// The tracker follows Nomad's event stream (eventLoop) and applies each
// allocation's state to its job through the settler, and each evaluation's
// placement failure through the reconciler, which it runs beside the stream
// (reconcileLoop): the stream is a best-effort tail.

// trackerStore is what the tracker needs of the store: where the stream
// resumes (the term's: its writes are fenced).
type trackerStore interface {
	EventIndex(ctx context.Context) (uint64, error)
	SaveEventIndex(ctx context.Context, idx uint64) error
}

// tracker follows Nomad's events for one dispatcher (see above).
type tracker struct {
	log    *slog.Logger
	st     func() trackerStore // the term's store
	nomad  *nomadAPI
	events NomadEvents
	settle *settler
	recon  *reconciler
	// streamIdle: how long the stream may say nothing before Nomad is asked
	// whether it still answers (StreamIdle).
	streamIdle time.Duration
}

// eventLoop follows Nomad's allocation and evaluation events from the saved index.
// Errors arrive in-band. The stream is a best-effort tail (a slow reader is
// dropped, a fast task can skip "running" entirely), so a reconcile goroutine
// settles everything against Nomad after each (re)connect and every
// ReconcileEvery, beside the stream rather than in its way. Events are applied by
// partitioned workers (see partitions); the saved index is the watermark of what
// they have handled (an apply that failed included: reconcile repairs it, see
// watermark), and applying an event twice changes nothing.
func (tr *tracker) eventLoop(ctx context.Context) {
	kick := make(chan struct{}, 1)
	poke := func() {
		select {
		case kick <- struct{}{}:
		default:
		}
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { defer wg.Done(); tr.recon.reconcileLoop(ctx, kick) }()
	work := newPartitions(eventWorkers, eventQueue)
	work.onPanic = tr.workerPanicked(ctx)
	defer func() { work.close(); wg.Wait() }()
	backoff := time.Second
	for first := true; ctx.Err() == nil; first = false {
		if !first {
			metrics.EventStreamReconnects.WithLabelValues().Inc()
		}
		index, err := tr.st().EventIndex(ctx)
		if numErr := (*strconv.NumError)(nil); errors.As(err, &numErr) {
			// A damaged index never reads: resume from where Nomad is now, and
			// let reconcile settle what came before.
			tr.log.Error("saved event index is damaged; resuming from nomad's current index", "err", err)
			index, err = tr.nomad.index(ctx)
		}
		if err != nil {
			// Not "start at 0": that replays Nomad's oldest retained events. The
			// stream waits for the index; reconcile settles what it can meanwhile.
			tr.log.Warn("read event index failed; retrying", "err", err, "in", backoff)
			poke()
			sleep(ctx, backoff)
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		sctx, cancel := context.WithCancel(ctx)
		topics := map[api.Topic][]string{api.TopicAllocation: {"*"}, api.TopicEvaluation: {"*"}}
		events, err := tr.events.Stream(sctx, topics, index, tr.nomad.queryOpts)
		if err != nil {
			cancel()
			tr.log.Warn("nomad event stream unavailable; retrying", "err", err, "in", backoff)
			poke() // settle what can be settled without the stream
			sleep(ctx, backoff)
			backoff = min(backoff*2, 30*time.Second)
			continue
		}
		poke()
		tr.follow(ctx, events, work, newWatermark(index), &backoff)
		cancel()
		sleep(ctx, backoff)
	}
}

// follow hands one stream's events to the workers until it ends, saving the
// watermark of the applied ones as the resume point.
func (tr *tracker) follow(ctx context.Context, events <-chan *api.Events, work *partitions, mark *watermark, backoff *time.Duration) {
	// The index is only where a new stream resumes, so it is saved at most every
	// eventIndexEvery, not per batch: each save is an etcd revision.
	saved, savedAt := mark.get(), time.Now()
	save := func(force bool) {
		applied := mark.get()
		if applied == saved || (!force && time.Since(savedAt) < eventIndexEvery) {
			return
		}
		if err := tr.st().SaveEventIndex(ctx, applied); err != nil {
			tr.log.Warn("save event index", "err", err)
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
	idle := time.NewTimer(tr.streamIdle)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			save(false)
		case <-idle.C:
			if err := tr.nomad.answers(ctx); err != nil {
				if ctx.Err() == nil {
					tr.log.Warn("nomad event stream silent and nomad not answering; reconnecting", "for", tr.streamIdle, "err", err)
				}
				return
			}
			tr.log.Debug("nomad event stream quiet; nomad answers, keeping it", "for", tr.streamIdle)
			idle.Reset(tr.streamIdle)
		case evs, ok := <-events:
			if !ok {
				if ctx.Err() == nil {
					tr.log.Info("nomad event stream ended; resuming")
				}
				return
			}
			idle.Reset(tr.streamIdle)
			if evs.Err != nil {
				// Routine (an agent restart, a server leader change, a slow reader
				// dropped): the stream resumes from the saved index. Nomad staying
				// away is reported by the reconnect ("unavailable").
				tr.log.Info("nomad event stream broke; resuming", "err", evs.Err)
				return
			}
			if evs.IsHeartbeat() {
				save(true) // a quiet stream: keep the resume point current
				continue
			}
			*backoff = time.Second
			tr.submit(ctx, evs, work, mark)
			// submit waits while a worker's queue is full, and nothing reads the
			// stream meanwhile: that wait is ours, not the stream's silence.
			idle.Reset(tr.streamIdle)
			save(false)
		}
	}
}

// submit queues a batch's events on their jobs' workers.
func (tr *tracker) submit(ctx context.Context, evs *api.Events, work *partitions, mark *watermark) {
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
		if !work.submit(ctx, id, func() { defer mark.done(b); tr.handleEvent(ctx, ev) }) {
			return // leading ended: the watermark stays before this batch
		}
	}
}

// streamIdle is the default of Dispatcher.StreamIdle.
var streamIdle = 45 * time.Second

// eventIndexEvery is how often, at most, a busy stream's index is saved.
const eventIndexEvery = 5 * time.Second

func (tr *tracker) handleEvent(ctx context.Context, ev api.Event) {
	switch ev.Topic {
	case api.TopicAllocation:
		if a, ok := allocFromEvent(&ev); ok {
			if a.ClientStatus == api.AllocClientStatusUnknown {
				// The one state an allocation leaves again, and the event may be
				// old (a replay): what Nomad says now decides, as in reconcile.
				if a, ok = tr.currentAlloc(ctx, a); !ok {
					return
				}
			}
			tr.settle.apply(ctx, a)
		}
	case api.TopicEvaluation:
		if e, err := ev.Evaluation(); err == nil && e != nil && len(e.FailedTGAllocs) > 0 {
			tr.recon.placementFailed(ctx, e.JobID, e.FailedTGAllocs)
		}
	}
}

// currentAlloc reads allocation a of a mediajobs child from Nomad again; ok is
// false when it cannot be read or is gone (reconcile settles it then).
func (tr *tracker) currentAlloc(ctx context.Context, a allocState) (allocState, bool) {
	if _, _, ok := mj.ParseChildID(a.NomadJobID); !ok {
		return a, false
	}
	q, cancel := tr.nomad.query(ctx)
	stubs, _, err := tr.nomad.jobs.Allocations(a.NomadJobID, true, q)
	cancel()
	if err != nil {
		tr.log.Warn("read allocation again failed; reconcile settles it", "nomad_job", a.NomadJobID, "alloc", a.ID, "err", err)
		return a, false
	}
	for _, s := range stubs {
		if s.ID == a.ID {
			return fromStub(s), true
		}
	}
	return a, false
}
