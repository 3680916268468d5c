package gateway

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"net"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
)

// Server-sent events: GET /api/jobs/{id}/events streams one job's view on every
// change (status, progress) and ends at its terminal state; GET /api/events streams
// every job of the account as it changes. Both are fed by the gateway's etcd
// watches (jobcache.go), with a slow re-read as a backstop for when a watch is
// down, and a comment line every heartbeat (streamTimes) so proxies and clients can tell a
// quiet stream from a dead one.

// streamTimes are the event streams' timings; a Gateway field, not package
// variables, so a test that shortens them races no stream of another test.
type streamTimes struct {
	// heartbeat: a comment line this often on a quiet stream.
	heartbeat time.Duration
	// backstop: how often a job stream re-reads without being woken.
	backstop time.Duration
	// pipelineBackstop: how often a pipeline stream re-reads without being woken,
	// for changes a restarting watch missed (pipeline_events.go).
	pipelineBackstop time.Duration
}

// defaultStreamTimes: a zero field of Gateway.times takes these.
var defaultStreamTimes = streamTimes{heartbeat: 15 * time.Second, backstop: 2 * time.Second, pipelineBackstop: 10 * time.Second}

func (g *Gateway) streamTimes() streamTimes {
	t := g.times
	if t.heartbeat <= 0 {
		t.heartbeat = defaultStreamTimes.heartbeat
	}
	if t.backstop <= 0 {
		t.backstop = defaultStreamTimes.backstop
	}
	if t.pipelineBackstop <= 0 {
		t.pipelineBackstop = defaultStreamTimes.pipelineBackstop
	}
	return t
}

// eventHub tells subscribers which jobs changed: by job id and by account; and
// which pipeline records did.
type eventHub struct {
	mu         sync.Mutex
	byJob      map[string]map[*subscriber]bool
	byAccount  map[string]map[*subscriber]bool
	byPipeline map[string]map[*subscriber]bool // pipeline_events.go
}

type subscriber struct {
	wake    chan struct{} // a change is waiting (coalesced)
	mu      sync.Mutex
	changed map[string]bool // account streams: the jobs that changed
	resync  bool            // account streams: the watch restarted
}

// maxTracked bounds the jobs an account stream remembers having sent (by a hash
// of the view sent, to skip repeats), and the changed jobs it holds before sending
// them: past that many the stream sends "resync" instead (the client lists
// again). An account stream so holds ids and hashes, never views, and bounded.
const maxTracked = 10_000

// sentViews remembers, per job, a hash of the view last sent.
type sentViews map[string]uint64

// fresh tells whether view b of job id differs from the one last sent, and
// records it as sent; it forgets everything past maxTracked jobs (at worst a
// view is sent again).
func (m sentViews) fresh(id string, b []byte) bool {
	h := fnv.New64a()
	h.Write(b)
	sum := h.Sum64()
	if old, ok := m[id]; ok && old == sum {
		return false
	}
	if _, ok := m[id]; !ok && len(m) >= maxTracked {
		clear(m)
	}
	m[id] = sum
	return true
}

func (s *subscriber) takeResync() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.resync
	s.resync = false
	return r
}

func newSubscriber() *subscriber { return &subscriber{wake: make(chan struct{}, 1)} }

func (s *subscriber) signal(id string) {
	s.mu.Lock()
	if s.changed != nil {
		if len(s.changed) >= maxTracked && !s.changed[id] {
			clear(s.changed) // too many to send one by one: the client lists again
			s.resync = true
		} else if !s.resync {
			s.changed[id] = true
		}
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

// hasAccounts reports whether any account stream is open.
func (h *eventHub) hasAccounts() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.byAccount) > 0
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

// resync tells every account stream that the watch restarted, so that changes
// made while it was down, which no event carried, are read again by the clients.
func (h *eventHub) resync() {
	h.mu.Lock()
	var subs []*subscriber
	for _, m := range h.byAccount {
		for s := range m {
			subs = append(subs, s)
		}
	}
	h.mu.Unlock()
	for _, s := range subs {
		s.mu.Lock()
		s.resync = true
		s.mu.Unlock()
		select {
		case s.wake <- struct{}{}:
		default:
		}
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

// streamWriteTimeout bounds one write to a stream's client: one that keeps its
// connection open but stops reading is dropped, rather than holding the stream
// (and a shutting-down gateway) forever.
const streamWriteTimeout = 30 * time.Second

// stream holds what a stream re-checks as it goes: its connection (for write
// deadlines) and the key that opened it (a revoked key ends the stream), or the
// dashboard session (signed out, expired or its key revoked: the stream ends).
type stream struct {
	g       *Gateway
	conn    net.Conn
	keyHash string
	session string // the session's id, for a stream opened by its cookie
}

func (g *Gateway) newStream(c *fiber.Ctx) *stream {
	if sess, ok := c.Locals(localSession).(*store.Session); ok {
		return &stream{g: g, conn: c.Context().Conn(), session: sess.ID}
	}
	_, secret, _ := strings.Cut(c.Get(fiber.HeaderAuthorization), " ")
	return &stream{g: g, conn: c.Context().Conn(), keyHash: mj.HashAPIKey(strings.TrimSpace(secret))}
}

// deadline sets the write deadline of the next write.
func (s *stream) deadline() {
	if s.conn != nil {
		s.conn.SetWriteDeadline(time.Now().Add(streamWriteTimeout))
	}
}

// beat writes a heartbeat; false ends the stream: the client is gone, or the key
// that opened it was revoked since (then it is told so).
func (s *stream) beat(w *bufio.Writer) bool {
	s.deadline()
	if s.session != "" {
		if !s.g.sessionValid(s.session) {
			sse(w, "end", []byte(`{"reason":"the session ended"}`))
			return false
		}
	} else if !s.g.keyValid(s.keyHash) {
		sse(w, "end", []byte(`{"reason":"the API key was revoked"}`))
		return false
	}
	if _, err := w.WriteString(": ping\n\n"); err != nil {
		return false
	}
	return w.Flush() == nil
}

// run is a stream's loop until done ends or a write fails: a heartbeat when
// idle, and next after every wake and every backstop tick (backstop 0: none;
// tick says which). next reports whether to go on.
func (s *stream) run(w *bufio.Writer, done context.Context, wake <-chan struct{}, backstop time.Duration, next func(tick bool) bool) {
	beat := time.NewTicker(s.g.streamTimes().heartbeat)
	defer beat.Stop()
	var ticks <-chan time.Time
	if backstop > 0 {
		t := time.NewTicker(backstop)
		defer t.Stop()
		ticks = t.C
	}
	for {
		tick := false
		select {
		case <-done.Done():
			return
		case <-beat.C:
			if !s.beat(w) {
				return
			}
			continue
		case <-wake:
		case <-ticks:
			tick = true
		}
		if !next(tick) {
			return
		}
	}
}

// recoverStream keeps a panic in a stream (run by fasthttp after the handler
// returned, outside the recover middleware) from taking the gateway down.
func (g *Gateway) recoverStream() {
	if r := recover(); r != nil {
		g.Log.Error("event stream panicked", "panic", r, "stack", string(debug.Stack()))
	}
}

// keyValid tells whether the key with this hash still authenticates.
func (g *Gateway) keyValid(hash string) bool {
	if _, ok := g.keys.get(hash, g.Now()); ok {
		return true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := g.Store.APIKeyByHash(ctx, hash)
	return mj.ErrorCode(err) != mj.ENotFound // etcd briefly down: keep the stream
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

// jobEvents: GET /api/jobs/{id}/events. A chunked parent's stream follows its
// pipeline too (chunkedFollow).
func (g *Gateway) jobEvents(c *fiber.Ctx) error {
	j, err := g.ownJob(c)
	if err != nil {
		return notFound(err, c.Params("id"))
	}
	id := j.ID
	closeStream, err := g.openStream(c) // max_event_streams (streamquota.go)
	if err != nil {
		return err
	}
	sub := newSubscriber()
	chunked := j.ChunkedParent() && j.Parallel.PipelineID != ""
	if chunked {
		sub.changed = map[string]bool{} // what woke it: the job, its pipeline's record or jobs; set before the hub sees sub
	}
	unsubscribe := g.hub.add(&g.hub.byJob, id, sub) // before the first read: no change is missed
	var chunks *chunkedFollow
	if chunked {
		chunks = &chunkedFollow{g: g, id: j.Parallel.PipelineID, sub: sub, jobs: pipelineFollow{hub: &g.hub, sub: sub}}
		chunks.unsubscribe = g.hub.add(&g.hub.byPipeline, chunks.id, sub) // before its first read, too
	}
	done := g.streamCtx()
	st := g.newStream(c)
	startSSE(c)
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer closeStream()
		defer unsubscribe()
		defer chunks.stop()
		defer g.recoverStream()
		var last []byte
		var lastSent time.Time
		// send writes the job's view if it changed; it reports whether to go on.
		send := func(j *mj.Job) bool {
			v := g.view(j)
			p, jobs, ok := chunks.read(j)
			if !ok && last != nil && !j.Status.Terminal() {
				return true // sent without its steps, it would seem to lose them
			}
			// Compared with its steps unsigned: a signed link differs at every render.
			fillSteps(&v, p, jobs, func(key string) string { return key })
			b, _ := json.Marshal(v)
			if string(b) != string(last) {
				out := b
				if p != nil {
					exp := g.Now().Add(g.Config.Storage.TTL)
					links := g.links()
					fillSteps(&v, p, jobs, func(key string) string { return links.Download(context.Background(), key, exp) })
					out, _ = json.Marshal(v)
				}
				st.deadline()
				if !sse(w, "job", out) {
					return false
				}
				last, lastSent = b, time.Now()
			}
			if j.Status.Terminal() {
				if chunks.settling(p, jobs) {
					return true
				}
				sse(w, "end", []byte(`{}`))
				return false
			}
			return true
		}
		if !send(j) {
			return
		}
		lastRead := time.Now()
		backstop := g.streamTimes().backstop
		st.run(w, done, sub.wake, backstop, func(tick bool) bool {
			if tick && !g.jobs.live.Load() && time.Since(lastRead) < 5*backstop {
				return true // the watch is down: read etcd less often
			}
			if chunks != nil && chunks.hold(id, tick, lastSent) {
				return true
			}
			lastRead = time.Now()
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			j, err := g.job(ctx, id)
			cancel()
			if err != nil {
				if mj.ErrorCode(err) == mj.ENotFound {
					sse(w, "end", []byte(`{}`))
					return false
				}
				return true // etcd briefly unreachable: the backstop tries again
			}
			return send(j)
		})
	})
	return nil
}

// chunkedEventsEvery spaces the events of a chunked job that its chunks'
// progress causes (each running chunk reports every 2 s, and every event
// carries all the steps): a change of the job itself is sent at once. A var for
// tests.
var chunkedEventsEvery = time.Second

// chunkedFollow is what a chunked parent's stream follows besides the job
// (docs/chunked.md): its pipeline's record, re-read when it changes (the
// extension after the plan adds the encode, audio, reference and stitch jobs),
// and every job the record lists, as the pipeline stream does. Its events
// carry the job's view with parallel.steps, as GET shows them (with each
// running job's progress). Used by the stream's goroutine alone; nil for any
// other job.
type chunkedFollow struct {
	g           *Gateway
	id          string // the pipeline's
	sub         *subscriber
	jobs        pipelineFollow
	unsubscribe func()
	p           *mj.Pipeline // as last read; nil: read it
	readAt      time.Time
	stale       bool        // its record changed since: read it again
	timer       *time.Timer // a held change's later wake
	due         time.Time
	endBy       time.Time // the job ended: the end is sent by then (settling)
	endTimer    *time.Timer
}

// hold takes what woke the stream (job id, the pipeline's record, its jobs)
// and tells whether to hold the event for now: only the pipeline's jobs or
// record changed, and the last event is under chunkedEventsEvery old; a wake is
// then set for when it is not.
func (c *chunkedFollow) hold(id string, tick bool, lastSent time.Time) bool {
	own := tick
	for _, k := range c.sub.take() {
		switch k {
		case id:
			own = true
		case c.id:
			c.stale = true
		}
	}
	if tick && time.Since(c.readAt) >= c.g.streamTimes().pipelineBackstop {
		c.stale = true // for a change a restarting watch missed
	}
	wait := chunkedEventsEvery - time.Since(lastSent)
	if own || wait <= 0 {
		return false
	}
	if now := time.Now(); c.due.Before(now) {
		c.due = now.Add(wait)
		c.timer = time.AfterFunc(wait, func() { c.sub.signal("") })
	}
	return true
}

// read returns the pipeline and its jobs as they are now, for j's steps (none
// for any other job, nor when its pipeline is gone, as GET); false when they
// cannot be read now (etcd briefly unreachable: the backstop tries again).
func (c *chunkedFollow) read(j *mj.Job) (*mj.Pipeline, map[string]*mj.Job, bool) {
	if c == nil {
		return nil, nil, true
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if c.p == nil || c.stale || j.Status.Terminal() {
		p, err := c.g.Store.Pipeline(ctx, c.id)
		switch {
		case mj.ErrorCode(err) == mj.ENotFound:
			return nil, nil, true
		case err != nil:
			return nil, nil, false
		}
		c.p, c.stale, c.readAt = p, false, time.Now()
		c.jobs.follow(p.JobIDs()) // before its jobs are read: no change is missed
	}
	jobs, err := c.g.pipelineJobs(ctx, c.p)
	if err != nil {
		return nil, nil, false
	}
	return c.p, jobs, true
}

// chunkedEndLinger bounds how long a chunked job's stream waits, after the
// job ended, for its pipeline's jobs to end too; a var for tests.
var chunkedEndLinger = 10 * time.Second

// settling tells whether the stream of an ended chunked job waits for its
// pipeline's jobs still being stopped (a cancel, or a failure that cancels the
// rest, ends the job first), so that its last event shows them ended; at most
// chunkedEndLinger.
func (c *chunkedFollow) settling(p *mj.Pipeline, jobs map[string]*mj.Job) bool {
	if c == nil || p == nil {
		return false
	}
	now := time.Now()
	if c.endBy.IsZero() {
		c.endBy = now.Add(chunkedEndLinger)
		c.endTimer = time.AfterFunc(chunkedEndLinger, func() { c.sub.signal("") })
	}
	if !now.Before(c.endBy) {
		return false
	}
	if len(p.Plan) > 0 {
		return true // jobs still to be stored (then cancelled)
	}
	for _, id := range p.JobIDs() {
		if j := jobs[id]; j != nil && !j.Status.Terminal() {
			return true
		}
	}
	return false
}

func (c *chunkedFollow) stop() {
	if c == nil {
		return
	}
	c.unsubscribe()
	c.jobs.stop()
	for _, t := range []*time.Timer{c.timer, c.endTimer} {
		if t != nil {
			t.Stop()
		}
	}
}

// fillSteps sets v's parallel steps and, until it ended, its usage (the sum so
// far of its jobs', in the order of the steps: the same bytes every render) from
// pipeline p and its jobs, as GET does (parallelSteps).
func fillSteps(v *mj.JobView, p *mj.Pipeline, jobs map[string]*mj.Job, sign func(key string) string) {
	if p == nil || v.Parallel == nil {
		return
	}
	v.Parallel.Steps = mj.ViewPipeline(p, jobs, sign).Steps
	if v.Usage != nil {
		return
	}
	ids := p.JobIDs()
	ordered := make([]*mj.Job, len(ids))
	for i, id := range ids {
		ordered[i] = jobs[id]
	}
	v.Usage = mj.SumUsage(ordered)
}

// accountEvents: GET /api/events, every job of the account as it changes (from
// the moment of connecting; list first with GET /api/jobs).
func (g *Gateway) accountEvents(c *fiber.Ctx) error {
	acct := account(c)
	closeStream, err := g.openStream(c) // max_event_streams (streamquota.go)
	if err != nil {
		return err
	}
	sub := newSubscriber()
	sub.changed = map[string]bool{}
	unsubscribe := g.hub.add(&g.hub.byAccount, acct, sub)
	done := g.streamCtx()
	st := g.newStream(c)
	startSSE(c)
	c.Context().SetBodyStreamWriter(func(w *bufio.Writer) {
		defer closeStream()
		defer unsubscribe()
		defer g.recoverStream()
		last := sentViews{} // forgotten at the end
		if !sse(w, "ready", []byte(`{}`)) {
			return
		}
		st.run(w, done, sub.wake, 0, func(bool) bool {
			if sub.takeResync() {
				// The watch restarted: changes in the gap were not seen.
				clear(last)
				st.deadline()
				if !sse(w, "resync", []byte(`{}`)) {
					return false
				}
			}
			for _, id := range sub.take() {
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				j, err := g.job(ctx, id)
				cancel()
				if err != nil || j.AccountID != acct {
					continue
				}
				b, _ := json.Marshal(g.view(j))
				if !last.fresh(id, b) {
					continue
				}
				st.deadline()
				if !sse(w, "job", b) {
					return false
				}
			}
			return true
		})
	})
	return nil
}
