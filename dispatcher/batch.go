package dispatcher

import (
	"context"
	"sync"
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
	<-c.done
	return c.out, c.err
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
		// The callers are the leader's work, under one leadership context: the
		// first live one bounds the group.
		outs, errs := g.run(calls[0].ctx, ins)
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
