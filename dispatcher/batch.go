package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"
)

// group runs calls in groups: while one group's call is in flight, the calls that
// arrive wait and then go together in the next. A burst of webhook deliveries costs
// a few etcd transactions instead of several each, and a lone call waits for
// nothing. A group holds at most max calls and one per key (etcd refuses two writes
// of a key in one transaction).
type group[In, Out any] struct {
	run func(ctx context.Context, ins []In) ([]Out, []error)
	key func(In) string
	max int
	// log reports a panic of run (nil: slog.Default()).
	log *slog.Logger
	// par is how many groups may be in flight at once (0, 1: one). A further
	// one starts only while a full group waits, so groups stay as large as
	// before and a burst is not held to one etcd commit at a time.
	par int

	mu      sync.Mutex
	queue   []*call[In, Out]
	running bool // the first group's loop
	spills  int  // the further groups' loops
}

// groupTimeout bounds one group's call (etcd transactions, in practice).
const groupTimeout = 30 * time.Second

type call[In, Out any] struct {
	ctx  context.Context
	in   In
	done chan struct{}
	out  Out
	err  error
}

// Do runs in with the next group and returns its outcome.
func (g *group[In, Out]) Do(ctx context.Context, in In) (Out, error) {
	c := &call[In, Out]{ctx: ctx, in: in, done: make(chan struct{})}
	g.mu.Lock()
	g.queue = append(g.queue, c)
	switch {
	case !g.running:
		g.running = true
		go g.loop(false)
	case g.spills+1 < g.par && len(g.queue) >= g.max:
		g.spills++
		go g.loop(true)
	}
	g.mu.Unlock()
	select {
	case <-c.done:
		return c.out, c.err
	case <-ctx.Done(): // the group goes on; its outcome for this call is dropped
		var zero Out
		return zero, ctx.Err()
	}
}

func (g *group[In, Out]) loop(spill bool) {
	for {
		calls := g.take(spill)
		if calls == nil {
			return
		}
		ins := make([]In, len(calls))
		for i, c := range calls {
			ins[i] = c.in
		}
		// One caller's context ending must not fail the others' calls: the group
		// runs on its own, bounded in time.
		ctx, cancel := context.WithTimeout(context.WithoutCancel(calls[0].ctx), groupTimeout)
		outs, errs := g.safeRun(ctx, ins)
		cancel()
		for i, c := range calls {
			c.out, c.err = outs[i], errs[i]
			close(c.done)
		}
	}
}

// safeRun is run, answering every call of the group with an error when it panics:
// no caller waits forever, and the loop goes on with the next group. (Panics of
// one job's change are caught closer, in updateJobs, failing only that job.)
func (g *group[In, Out]) safeRun(ctx context.Context, ins []In) (outs []Out, errs []error) {
	defer func() {
		v := recover()
		if v == nil {
			return
		}
		log := g.log
		if log == nil {
			log = slog.Default()
		}
		log.Error("internal error: panic in a write group; its calls fail", "calls", len(ins), "panic", fmt.Sprint(v), "stack", string(debug.Stack()))
		outs, errs = make([]Out, len(ins)), make([]error, len(ins))
		for i := range errs {
			errs[i] = fmt.Errorf("internal error: %v", v)
		}
	}()
	return g.run(ctx, ins)
}

// take removes the next group from the queue, answering at once the callers whose
// context ended. It returns nil, and marks the loop ended, when nothing is left
// (for a spill loop: when no full group waits).
func (g *group[In, Out]) take(spill bool) []*call[In, Out] {
	g.mu.Lock()
	defer g.mu.Unlock()
	if spill && len(g.queue) < g.max {
		g.spills--
		return nil
	}
	var calls, rest []*call[In, Out]
	seen := map[string]bool{}
	for _, c := range g.queue {
		k := g.key(c.in)
		switch {
		case c.ctx.Err() != nil:
			c.err = c.ctx.Err()
			close(c.done)
		case len(calls) == g.max || seen[k]:
			rest = append(rest, c)
		default:
			seen[k] = true
			calls = append(calls, c)
		}
	}
	g.queue = rest
	if len(calls) == 0 {
		if spill {
			g.spills--
		} else {
			g.running = false
		}
		return nil
	}
	return calls
}
