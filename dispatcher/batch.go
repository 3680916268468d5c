package dispatcher

import (
	"context"
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

	mu      sync.Mutex
	queue   []*call[In, Out]
	running bool
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
	if !g.running {
		g.running = true
		go g.loop()
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

func (g *group[In, Out]) loop() {
	for {
		calls := g.take()
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
		outs, errs := g.run(ctx, ins)
		cancel()
		for i, c := range calls {
			c.out, c.err = outs[i], errs[i]
			close(c.done)
		}
	}
}

// take removes the next group from the queue, answering at once the callers whose
// context ended. It returns nil, and marks the group idle, when nothing is left.
func (g *group[In, Out]) take() []*call[In, Out] {
	g.mu.Lock()
	defer g.mu.Unlock()
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
		g.running = false
		return nil
	}
	return calls
}
