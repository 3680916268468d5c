package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
)

// Server-sent events: GET /api/jobs/{id}/events streams one job's view on every
// change (status, progress) and ends at its terminal state; GET /api/events streams
// every job of the account as it changes. Both are fed by the gateway's etcd
// watches (jobcache.go), with a slow re-read as a backstop for when a watch is
// down, and a comment line every eventsHeartbeat so proxies and clients can tell a
// quiet stream from a dead one.

const (
	eventsHeartbeat = 15 * time.Second
	eventsBackstop  = 2 * time.Second
)

// eventHub tells subscribers which jobs changed: by job id and by account.
type eventHub struct {
	mu        sync.Mutex
	byJob     map[string]map[*subscriber]bool
	byAccount map[string]map[*subscriber]bool
}

type subscriber struct {
	wake    chan struct{} // a change is waiting (coalesced)
	mu      sync.Mutex
	changed map[string]bool // account streams: the jobs that changed
}

func newSubscriber() *subscriber { return &subscriber{wake: make(chan struct{}, 1)} }

func (s *subscriber) signal(id string) {
	s.mu.Lock()
	if s.changed != nil {
		s.changed[id] = true
	}
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// take returns and forgets the jobs that changed (account streams).
func (s *subscriber) take() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	ids := make([]string, 0, len(s.changed))
	for id := range s.changed {
		ids = append(ids, id)
	}
	clear(s.changed)
	return ids
}

func (h *eventHub) add(m *map[string]map[*subscriber]bool, key string, s *subscriber) func() {
	h.mu.Lock()
	if *m == nil {
		*m = map[string]map[*subscriber]bool{}
	}
	if (*m)[key] == nil {
		(*m)[key] = map[*subscriber]bool{}
	}
	(*m)[key][s] = true
	h.mu.Unlock()
	return func() {
		h.mu.Lock()
		delete((*m)[key], s)
		if len((*m)[key]) == 0 {
			delete(*m, key)
		}
		h.mu.Unlock()
	}
}

// notify wakes the subscribers of job id and of its account (when known).
func (h *eventHub) notify(id, account string) {
	h.mu.Lock()
	var subs []*subscriber
	for s := range h.byJob[id] {
		subs = append(subs, s)
	}
	if account != "" {
		for s := range h.byAccount[account] {
			subs = append(subs, s)
		}
	}
	h.mu.Unlock()
	for _, s := range subs {
		s.signal(id)
	}
}

// accountOf is the account of a cached job, for progress changes (whose keys do
// not name it).
func (c *jobCache) accountOf(id string) string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if j := c.jobs[id]; j != nil {
		return j.AccountID
	}
	return ""
}

// sse writes one event; false when the client is gone.
func sse(w *bufio.Writer, event string, data []byte) bool {
	fmt.Fprintf(w, "event: %s\ndata: %s\n\n", event, data)
	return w.Flush() == nil
}

func startSSE(c *fiber.Ctx) {
	c.Set(fiber.HeaderContentType, "text/event-stream")
	c.Set(fiber.HeaderCacheControl, "no-cache")
	c.Set("X-Accel-Buffering", "no") // nginx: do not buffer the stream
}

// streamCtx ends when the gateway shuts down (Shutdown waits for open streams).
func (g *Gateway) streamCtx() context.Context {
	g.streamsOnce.Do(func() {
		if g.streams == nil {
			g.streams, g.stopStreams = context.WithCancel(context.Background())
		}
	})
	return g.streams
}

// StopStreams ends every event stream, so that a shutting-down gateway is not held
// open by them.
func (g *Gateway) StopStreams() {
	g.streamCtx()
	g.stopStreams()
}

// jobEvents: GET /api/jobs/{id}/events.
func (g *Gateway) jobEvents(c *fiber.Ctx) error {
	j, err := g.ownJob(c)
	if err != nil {
		return notFound(err, c.Params("id"))
	}
	id := j.ID
	sub := newSubscriber()
	unsubscribe := g.hub.add(&g.hub.byJob, id, sub) // before the first read: no change is missed
	done := g.streamCtx()
	startSSE(c)
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer unsubscribe()
		var last []byte
		// send writes the job's view if it changed; it reports whether to go on.
		send := func(j *mj.Job) bool {
			b, _ := json.Marshal(g.view(j))
			if string(b) != string(last) {
				if !sse(w, "job", b) {
					return false
				}
				last = b
			}
			if j.Status.Terminal() {
				sse(w, "end", []byte(`{}`))
				return false
			}
			return true
		}
		if !send(j) {
			return
		}
		beat := time.NewTicker(eventsHeartbeat)
		defer beat.Stop()
		backstop := time.NewTicker(eventsBackstop)
		defer backstop.Stop()
		for {
			select {
			case <-done.Done():
				return
			case <-beat.C:
				if _, err := w.WriteString(": ping\n\n"); err != nil || w.Flush() != nil {
					return
				}
				continue
			case <-sub.wake:
			case <-backstop.C:
			}
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			j, err := g.job(ctx, id)
			cancel()
			if err != nil {
				if mj.ErrorCode(err) == mj.ENotFound {
					sse(w, "end", []byte(`{}`))
					return
				}
				continue // etcd briefly unreachable: the backstop tries again
			}
			if !send(j) {
				return
			}
		}
	})
	return nil
}

// accountEvents: GET /api/events, every job of the account as it changes (from
// the moment of connecting; list first with GET /api/jobs).
func (g *Gateway) accountEvents(c *fiber.Ctx) error {
	acct := account(c)
	sub := newSubscriber()
	sub.changed = map[string]bool{}
	unsubscribe := g.hub.add(&g.hub.byAccount, acct, sub)
	done := g.streamCtx()
	startSSE(c)
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer unsubscribe()
		last := map[string]string{} // job id -> last view sent; forgotten at the end
		if !sse(w, "ready", []byte(`{}`)) {
			return
		}
		beat := time.NewTicker(eventsHeartbeat)
		defer beat.Stop()
		for {
			select {
			case <-done.Done():
				return
			case <-beat.C:
				if _, err := w.WriteString(": ping\n\n"); err != nil || w.Flush() != nil {
					return
				}
				continue
			case <-sub.wake:
			}
			for _, id := range sub.take() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				j, err := g.job(ctx, id)
				cancel()
				if err != nil || j.AccountID != acct {
					continue
				}
				b, _ := json.Marshal(g.view(j))
				if last[id] == string(b) {
					continue
				}
				if !sse(w, "job", b) {
					return
				}
				if j.Status.Terminal() {
					delete(last, id)
				} else {
					last[id] = string(b)
				}
			}
		}
	})
	return nil
}
