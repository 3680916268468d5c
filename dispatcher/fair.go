package dispatcher

import (
	"context"
	"errors"
	"maps"
	"sync"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
)

// Fair-share dispatch (docs/scheduling.md). Each pass, per pool:
//
//  1. the window: how many children the pool may take now, from what Nomad
//     reports of the pool's parameterized job (children pending, i.e. dispatched
//     but not placed, and running): window(), capped by max_in_flight;
//  2. the choice: that many jobs from the etcd queue, by least weighted share
//     first across the accounts with queued jobs, first in first out within an
//     account (fairOrder);
//  3. the dispatches, in that order.
//
// The choice uses only what etcd holds (the queue, the active set, the accounts'
// weights and limits), so a new leader makes the same choices as the old one.

// fairAccount is one account's standing in a pool when a pass chooses.
type fairAccount struct {
	// Queue is the account's queued jobs in the pool, oldest first.
	Queue []store.QueueEntry
	// InFlight is how many of its jobs hold the pool's slots (a Nomad child).
	InFlight int
	// Weight is its share relative to the others' (at least 1).
	Weight int
	// Limit caps InFlight (0: no limit).
	Limit int
	// Pass is the account's virtual time in the pool (stride scheduling): where
	// it started (startPass) plus 1/Weight for every job chosen for it since.
	// The lowest goes next, so backlogged accounts start jobs in the ratio of
	// their weights whatever the number of slots, and a newcomer, which starts at
	// the lowest pass of the others, goes next.
	Pass float64
}

// fairOrder chooses up to n jobs, one at a time: each goes to the account with
// the lowest Pass, among those with a job left and below their limit, which then
// counts it as in flight and advances its Pass by 1/Weight. Ties go to the
// account whose in-flight jobs per unit of weight are fewest (InFlight/Weight),
// then to the one whose next job was queued first, then to the lower account id.
// Within an account, jobs go first in, first out. accounts is not changed;
// passes, when not nil, receives each chosen account's Pass after the choice.
func fairOrder(accounts map[string]*fairAccount, n int, passes map[string]float64) []store.QueueEntry {
	type state struct {
		id               string
		a                *fairAccount
		next, inFlight   int
		weight, limitCap int
		pass             float64
	}
	live := make([]*state, 0, len(accounts))
	for id, a := range accounts {
		if len(a.Queue) == 0 {
			continue
		}
		live = append(live, &state{id: id, a: a, inFlight: a.InFlight, weight: max(a.Weight, 1), limitCap: a.Limit, pass: a.Pass})
	}
	// less: fewer in flight per weight (cross-multiplied: exact), then the older
	// next job, then the account id.
	less := func(x, y *state) bool {
		if x.pass != y.pass {
			return x.pass < y.pass
		}
		if l, r := x.inFlight*y.weight, y.inFlight*x.weight; l != r {
			return l < r
		}
		if tx, ty := x.a.Queue[x.next].QueuedAt, y.a.Queue[y.next].QueuedAt; !tx.Equal(ty) {
			return tx.Before(ty)
		}
		return x.id < y.id
	}
	var out []store.QueueEntry
	for len(out) < n {
		var best *state
		for _, s := range live {
			if s.next >= len(s.a.Queue) || s.limitCap > 0 && s.inFlight >= s.limitCap {
				continue
			}
			if best == nil || less(s, best) {
				best = s
			}
		}
		if best == nil {
			break
		}
		out = append(out, best.a.Queue[best.next])
		best.next++
		best.inFlight++
		best.pass += 1 / float64(best.weight)
		if passes != nil {
			passes[best.id] = best.pass
		}
	}
	return out
}

// window is how many more children a pool may take now: Nomad holds pending
// (dispatched, not yet placed: waiting for a node) of them and runs running.
//
// When the pool's room in Nomad is known (see poolRoom), the pool is full at
// r.Room children, and the window keeps just one child (one more per 64 of room,
// plus r.Extra while the room is found to grow) waiting for the next slot beyond
// it, so a newcomer's job waits for about one slot. When it is not known, no more
// than the pool's lookahead, or an eighth of its running children when that is
// more, may wait in Nomad. Either way a backlog waits in the etcd queue, where
// fair share orders it.
func window(pool *config.Pool, pending, running int, r room) int {
	if r.Known {
		return r.Room + 1 + r.Room/64 + r.Extra - running - pending
	}
	return max(pool.DispatchLookahead, running/8) - pending
}

// room is what the dispatcher knows of a pool's room in Nomad.
type room struct {
	Known bool
	// Room is how many children fit: what ran when Nomad last had no room for
	// one more, or more since.
	Room int
	// Extra is how many more may wait while the room is found to grow: it
	// doubles each pass that finds more running than Room, and is 0 again at
	// the next placement failure.
	Extra int
}

// poolRoom is how many children of each pool Nomad has room for, learnt from
// Nomad itself. When a waiting child cannot be placed for lack of resources (its
// evaluation's placement failure, from the event stream or reconcile), the pool
// is full: its room is the most it ran in the last roomWindow or so, as the
// passes saw it (Nomad evaluates every waiting child again as a slot frees, so
// failures come when a pass may have just seen one running less). A pass that
// finds more running raises the room (a node joined, other work left the
// nodes), and lets more wait, twice as many each time, until Nomad has no room
// again; a node that left shows at the failures after roomWindow. A new leader
// starts without it.
type poolRoom struct {
	mu    sync.Mutex
	pools map[string]*roomState
}

// roomWindow is how long what passes saw running counts towards the room.
const roomWindow = 10 * time.Second

type roomState struct {
	room
	// peak and prev are the most running seen in the current span of
	// roomWindow (since since) and in the one before; seen is the last pass.
	peak, prev  int
	since, seen time.Time
}

func (r *poolRoom) state(pool string, now time.Time) *roomState {
	if r.pools == nil {
		r.pools = map[string]*roomState{}
	}
	st := r.pools[pool]
	if st == nil {
		st = &roomState{since: now}
		r.pools[pool] = st
	}
	if age := now.Sub(st.since); age >= roomWindow {
		st.prev = st.peak
		if age >= 2*roomWindow {
			st.prev = 0 // no pass in the span before: what it saw is older
		}
		st.peak, st.since = 0, now
	}
	return st
}

// full records that Nomad had no room for one more child of pool.
func (r *poolRoom) full(pool string, now time.Time) {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(pool, now)
	if st.seen.IsZero() || now.Sub(st.seen) > roomWindow {
		return // no pass saw the pool lately (a new term, Nomad's summary unread): nothing to go by
	}
	st.room = room{Known: true, Room: max(st.peak, st.prev)}
}

// observe records what a pass found running and returns the pool's room.
func (r *poolRoom) observe(pool string, running, limit int, now time.Time) room {
	r.mu.Lock()
	defer r.mu.Unlock()
	st := r.state(pool, now)
	st.peak, st.seen = max(st.peak, running), now
	if st.Known && running > st.Room {
		st.Room = running
		st.Extra = min(max(1, 2*st.Extra), limit)
	}
	return st.room
}

// reset forgets every pool's room (a new term: Nomad's cluster may have changed
// while another leader dispatched).
func (r *poolRoom) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.pools = nil
}

// poolWindow is the pool's window given inFlight, the jobs etcd's active set
// holds for it (dispatched, not finished): those Nomad does not report running
// are pending. Nomad's own count of pending children is not used: it includes
// children mediajobs has given up on (a lost node's, held pending by their
// disconnect block's delayed evaluation for an hour), which would close the
// window for that long. ok=false when Nomad cannot say.
func (s *scheduler) poolWindow(ctx context.Context, pool *config.Pool, inFlight int) (n int, ok bool) {
	q, cancel := s.nomad.query(ctx)
	defer cancel()
	sum, _, err := s.nomad.jobs.Summary(mj.PoolJobID(pool.Name), q)
	if err != nil || sum == nil || sum.Children == nil {
		return 0, false
	}
	running := int(sum.Children.Running)
	r := s.room.observe(pool.Name, running, max(pool.DispatchLookahead, running/8), s.now())
	return window(pool, max(inFlight-running, 0), running, r), true
}

// fairPass reads what a pass of the pool chooses from and returns the ids of the
// jobs to dispatch, in order: at most the window, within max_in_flight. failed
// reports an etcd read that failed.
//
// extra is how many more the pass chooses for a warm pool (warm.go), idle how
// many of its runners wait for a job: nomad says how many of the chosen Nomad
// may take. refund gives back the share of a chosen job that is not dispatched
// after all (it waits for a warm runner, or the window closed), so the passes
// count the jobs that started.
// toNomad false is a pass for the waiting warm runners alone (a pool in its
// Nomad backoff): it asks Nomad nothing, and nomad is 0.
//
// The pass reads no queue when nothing could take a job (Nomad's window is
// closed and no runner waits); else it reads, from the queue index, which
// accounts have queued jobs, and then only the first few keys of each
// (queueHeads): its cost grows with the accounts that have work, not with the
// jobs queued.
func (s *scheduler) fairPass(ctx context.Context, pool *config.Pool, extra, idle int, toNomad bool) (chosen []store.QueueEntry, nomad int, refund func(store.QueueEntry), failed bool) {
	refund = func(store.QueueEntry) {}
	fs := s.st()
	inFlight, total, err := fs.PoolInFlight(ctx, pool.Name)
	if err != nil {
		return nil, 0, refund, true
	}
	if toNomad { // a pass for warm runners alone asks Nomad nothing
		n, known := s.poolWindow(ctx, pool, total)
		if !known {
			n = pool.DispatchLookahead
		}
		if pool.MaxInFlight > 0 {
			n = min(n, pool.MaxInFlight-total)
		}
		nomad = max(n, 0)
	}
	n := nomad + extra
	if n <= 0 || nomad == 0 && idle == 0 {
		return nil, 0, refund, false
	}
	qi := s.queueIndex(fs)
	if err := qi.Sync(ctx); err != nil {
		// Still reading the queue: not trouble, its end wakes the loop.
		return nil, 0, refund, !errors.Is(err, store.ErrQueueIndexLoading)
	}
	queued, legacy := qi.Pool(pool.Name)
	if migrate := "migrate/" + pool.Name; len(legacy) > 0 && s.backoff.left(migrate, s.now()) == 0 {
		// Queued by a version before fair-share dispatch: moved to their
		// accounts' queues, and chosen from there from the next pass on.
		moved, err := fs.MigrateQueueKeys(ctx, legacy)
		if err != nil {
			// Tried again after a backoff, not at once: a key that cannot be
			// moved (its record undecodable, etcd failing) must not make the
			// loop spin. The pool's other jobs are chosen meanwhile.
			wait := s.backoff.failed(migrate, s.now())
			s.log.Warn("could not move queue keys of an older version to their accounts' queues; retrying", "pool", pool.Name, "keys", len(legacy), "moved", moved, "in", wait, "err", err)
		} else {
			s.backoff.ok(migrate)
			s.log.Info("moved queue keys of an older version to their accounts' queues", "pool", pool.Name, "keys", moved)
			s.wake()
		}
	}
	if len(queued) == 0 {
		return nil, 0, refund, false
	}
	scheds, err := fs.AccountSchedules(ctx)
	if err != nil {
		return nil, 0, refund, true
	}
	limit := 0
	if s.cfg.Limits != nil {
		limit = s.cfg.Limits.MaxRunningPerAccount
	}
	accounts := make(map[string]*fairAccount, len(queued))
	for id := range queued {
		a := &fairAccount{InFlight: inFlight[id], Weight: 1, Limit: limit}
		if sc, ok := scheds[id]; ok {
			if sc.Weight > 0 {
				a.Weight = sc.Weight
			}
			if sc.MaxRunningPerPool != nil {
				a.Limit = *sc.MaxRunningPerPool
			}
		}
		accounts[id] = a
	}
	passes := s.poolPasses(pool.Name, accounts)
	refund = func(e store.QueueEntry) {
		a := accounts[e.Account]
		if a == nil {
			return
		}
		s.passes.mu.Lock()
		defer s.passes.mu.Unlock()
		if p, ok := s.passes.m[pool.Name][e.Account]; ok {
			s.passes.m[pool.Name][e.Account] = p - 1/float64(max(a.Weight, 1))
		}
	}
	chosen, err = s.queueHeads(ctx, fs, pool.Name, accounts, queued, n, passes)
	if err != nil {
		return nil, 0, refund, true
	}
	return chosen, nomad, refund, false
}

// queueHeads fills each account's Queue with the first keys of its part of the
// pool's queue, as few as the choice of n needs, and returns fairOrder's choice.
// Each account's first read takes about twice its even share of n (fewer when
// it has fewer queued, none when it is at its limit). An account all of whose
// keys read were chosen, with more queued and room under its limit, might have
// taken more: its read (alone) is doubled and the choice made again, from the
// same passes.
func (s *scheduler) queueHeads(ctx context.Context, fs fairStore, pool string, accounts map[string]*fairAccount, queued map[string]int, n int, passes map[string]float64) ([]store.QueueEntry, error) {
	share := max(2, 2*((n+len(accounts)-1)/len(accounts)))
	want := make(map[string]int, len(accounts))
	for id, a := range accounts {
		want[id] = min(queued[id], n, share)
		if a.Limit > 0 {
			want[id] = min(want[id], max(a.Limit-a.InFlight, 0))
		}
	}
	start := maps.Clone(passes)
	read := want
	for {
		heads, err := fs.QueueHeads(ctx, pool, read)
		if err != nil {
			return nil, err
		}
		for id, q := range heads {
			accounts[id].Queue = q // key order: first in, first out
		}
		chosen := fairOrder(accounts, n, passes)
		taken := map[string]int{}
		for _, e := range chosen {
			taken[e.Account]++
		}
		more := map[string]int{}
		for id, a := range accounts {
			k := len(a.Queue)
			if k == 0 || taken[id] < k || k < want[id] {
				continue // not all chosen, or all it has
			}
			next := min(2*k, queued[id], n)
			if a.Limit > 0 {
				next = min(next, a.Limit-a.InFlight)
			}
			if next > k {
				more[id] = next
			}
		}
		if len(more) == 0 {
			return chosen, nil
		}
		for id, k := range more {
			want[id] = k
		}
		read = more // the others keep what they read
		// Choose again from where the pass began.
		for id := range passes {
			passes[id] = start[id]
		}
	}
}

// startPass is where an account's Pass starts when this leader has none for it:
// its share of the slots it holds now (InFlight/Weight), or floor, the lowest
// pass of the accounts already known, when that is more, so an account gets no
// run of wins for having been away.
func startPass(a *fairAccount, floor float64) float64 {
	return max(float64(a.InFlight)/float64(max(a.Weight, 1)), floor)
}

// poolPasses sets each account's Pass from what this leader chose before (or
// startPass), and returns the pool's passes for fairOrder to advance. Only
// accounts with queued jobs are kept: the map is bounded by the queue. A new
// leader starts every account from the slots it holds (etcd's active set), so
// fairness carries over a failover approximately, not exactly.
func (s *scheduler) poolPasses(pool string, accounts map[string]*fairAccount) map[string]float64 {
	s.passes.mu.Lock()
	defer s.passes.mu.Unlock()
	if s.passes.m == nil {
		s.passes.m = map[string]map[string]float64{}
	}
	old := s.passes.m[pool]
	floor, found := 0.0, false
	for id := range accounts {
		if p, ok := old[id]; ok && (!found || p < floor) {
			floor, found = p, true
		}
	}
	now := make(map[string]float64, len(accounts))
	for id, a := range accounts {
		p, ok := old[id]
		if !ok {
			p = startPass(a, floor)
		}
		a.Pass, now[id] = p, p
	}
	s.passes.m[pool] = now
	return now
}

// fairStore is what fair-share dispatch reads; *store.Store has it.
type fairStore interface {
	RunQueueIndex(changed func(), failed func(error)) *store.QueueIndex
	QueueHeads(ctx context.Context, pool string, want map[string]int) (map[string][]store.QueueEntry, error)
	PoolInFlight(ctx context.Context, pool string) (map[string]int, int, error)
	MigrateQueueKeys(ctx context.Context, keys []string) (int, error)
	AccountSchedules(ctx context.Context) (map[string]store.Schedule, error)
}

// lazyQueueIndex is the queue index, started at its first use (queueIndex).
type lazyQueueIndex struct {
	once sync.Once
	qi   *store.QueueIndex
}

// fairPasses holds each pool's accounts' virtual times for fair share's ties
// (poolPasses).
type fairPasses struct {
	mu sync.Mutex
	m  map[string]map[string]float64
}

// queueIndex is the dispatcher's index of the queue (store.QueueIndex), started
// at its first use and kept as long as its etcd client: it counts queued jobs
// whoever leads, so a new term finds it ready.
func (s *scheduler) queueIndex(fs fairStore) *store.QueueIndex {
	s.queues.once.Do(func() {
		s.queues.qi = fs.RunQueueIndex(s.wake, func(err error) {
			s.log.Warn("queue index: reading the queue's keys again", "err", err)
		})
	})
	return s.queues.qi
}

// wake asks the dispatch loop for another pass.
func (s *scheduler) wake() {
	w := s.wakeup.Load()
	if w == nil {
		return
	}
	select {
	case *w <- struct{}{}:
	default:
	}
}

// watchChildren wakes the dispatch loop whenever the children of the pool's
// parameterized job change in Nomad (one placed, started or ended: a slot may
// have freed), by a blocking query on the job's summary.
func (s *scheduler) watchChildren(ctx context.Context, pool *config.Pool) {
	var index uint64
	for ctx.Err() == nil {
		q, cancel := context.WithTimeout(ctx, s.nomad.timeout+5*time.Minute)
		opts := s.nomad.queryOpts.WithContext(q)
		opts.WaitIndex, opts.WaitTime = index, 5*time.Minute
		start := time.Now()
		_, meta, err := s.nomad.jobs.Summary(mj.PoolJobID(pool.Name), opts)
		cancel()
		switch {
		case err != nil:
			sleep(ctx, 2*time.Second) // not registered yet, or Nomad away
			continue
		case meta.LastIndex != index:
			index = meta.LastIndex
			s.wake()
		}
		if time.Since(start) < 100*time.Millisecond {
			sleep(ctx, time.Second) // an answer that did not block: do not spin
		}
	}
}
