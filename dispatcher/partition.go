package dispatcher

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"runtime/debug"
	"sync"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
)

// Nomad's events are applied by eventWorkers workers, each event by the worker its
// mediajobs job id hashes to: one job's events stay in stream order, while
// different jobs' events (an etcd read, often a write, sometimes a blob read
// each) overlap, and their writes go to etcd in groups (see update).
const (
	eventWorkers = 32
	// eventQueue is each worker's backlog before the stream reader waits on it.
	eventQueue = 256
)

// partitions runs tasks on a fixed set of workers; a task's key picks its worker,
// so the tasks of one key run one at a time, in the order submitted. A task that
// panics is recovered: onPanic gets its key (the eventLoop's fails that job) and
// the worker goes on with the next task.
type partitions struct {
	queues []chan keyedTask
	wg     sync.WaitGroup
	// onPanic, set before the first submit, handles a task's panic (nil: logged).
	onPanic func(key string, v any, stack []byte)
}

type keyedTask struct {
	key string
	run func()
}

func newPartitions(n, depth int) *partitions {
	p := &partitions{queues: make([]chan keyedTask, n)}
	for i := range p.queues {
		q := make(chan keyedTask, depth)
		p.queues[i] = q
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			for t := range q {
				p.run(t)
			}
		}()
	}
	return p
}

func (p *partitions) run(t keyedTask) {
	defer func() {
		v := recover()
		switch {
		case v == nil:
		case p.onPanic != nil:
			p.onPanic(t.key, v, debug.Stack())
		default:
			slog.Error("internal error: panic in a worker", "key", t.key, "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		}
	}()
	t.run()
}

// submit queues task on key's worker, waiting while that worker's backlog is full;
// it reports false, and drops the task, when ctx ends first.
func (p *partitions) submit(ctx context.Context, key string, task func()) bool {
	h := fnv.New32a()
	h.Write([]byte(key))
	select {
	case p.queues[h.Sum32()%uint32(len(p.queues))] <- keyedTask{key, task}:
		return true
	case <-ctx.Done():
		return false
	}
}

// close lets the workers finish what is queued, and waits for them.
func (p *partitions) close() {
	for _, q := range p.queues {
		close(q)
	}
	p.wg.Wait()
}

// watermark is how far a stream's events have been applied: the highest index
// whose batch, and every batch before it, is applied in full. Batches complete out
// of order; resuming from the watermark skips only applied events (Nomad resends
// the batch at the index itself, which applying again leaves as it is).
//
// "Applied" means handled, not stored: an event whose apply failed (an etcd error,
// or a result the blob store could not read, left to be read again) counts too, so
// the saved index can pass events whose effects were never written. Resuming does
// not replay them; the reconcile pass that follows every (re)connect, and every
// ReconcileEvery, reads Nomad's state and repairs what they would have done.
type watermark struct {
	mu      sync.Mutex
	mark    uint64
	pending []*eventBatch // in arrival order
}

type eventBatch struct {
	index uint64
	left  int // events not yet applied; guarded by watermark.mu
}

func newWatermark(from uint64) *watermark { return &watermark{mark: from} }

// add registers a batch of n events to apply; one of none is applied already.
func (w *watermark) add(index uint64, n int) *eventBatch {
	w.mu.Lock()
	defer w.mu.Unlock()
	b := &eventBatch{index: index, left: n}
	w.pending = append(w.pending, b)
	w.advance()
	return b
}

// done records that one event of b was handled, whether or not its apply stored
// anything (see watermark).
func (w *watermark) done(b *eventBatch) {
	w.mu.Lock()
	defer w.mu.Unlock()
	b.left--
	w.advance()
}

func (w *watermark) get() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.mark
}

// advance drops the applied batches at the head. The mark moves to the last of
// their indexes that no pending batch shares (Nomad sends one batch per index, but
// nothing here depends on it).
func (w *watermark) advance() {
	n := 0
	for n < len(w.pending) && w.pending[n].left <= 0 {
		n++
	}
	if n == 0 {
		return
	}
	limit := ^uint64(0)
	if n < len(w.pending) {
		limit = w.pending[n].index
	}
	for _, b := range w.pending[:n] {
		if b.index < limit {
			w.mark = max(w.mark, b.index)
		}
	}
	w.pending = append(w.pending[:0], w.pending[n:]...)
}

// eventJobID is the mediajobs job an allocation or evaluation event is about, read
// from the raw payload (decoding the whole allocation is left to the worker). Events
// of other Nomad jobs (not a mediajobs child) change nothing and are not applied.
func eventJobID(ev *api.Event) (string, bool) {
	var v any
	switch ev.Topic {
	case api.TopicAllocation:
		v = ev.Payload["Allocation"]
	case api.TopicEvaluation:
		v = ev.Payload["Evaluation"]
	default:
		return "", false
	}
	m, _ := v.(map[string]any)
	child, _ := m["JobID"].(string)
	id, _, ok := mj.ParseChildID(child)
	return id, ok
}
