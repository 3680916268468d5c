package gateway

import (
	"context"
	"strconv"
	"sync"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
)

// queueStanding is what the store tells of a queued job's place; *store.Store has it.
type queueStanding interface {
	QueueHead(ctx context.Context, pool, account string) (*store.QueueHead, error)
}

// standingOf is the status_detail of j, a queued job not yet handed to Nomad,
// saying where it stands in its account's part of its pool's queue; false for
// any other job, and when the standing cannot be read (the stored detail
// stays). It is computed when a client reads the job (from the head of the
// account's queue in the pool: a transaction of bounded reads, or this
// gateway's copy of it, standingCache), never stored: a queued job's record is
// not rewritten while others move ahead of it (docs/scheduling.md).
func (g *Gateway) standingOf(ctx context.Context, j *mj.Job) (string, bool) {
	if (len(j.Awaits) > 0 || j.ChunkedParent()) && j.Status == mj.StatusQueued && j.NomadJobID == "" {
		return j.StatusDetail, true // as appendStanding words it, without a copy
	}
	var buf [192]byte
	b, ok := g.appendStanding(ctx, buf[:0], j)
	return string(b), ok
}

// appendStanding appends what standingOf returns, without making a string:
// GET /api/jobs/{id} writes it into the answer.
func (g *Gateway) appendStanding(ctx context.Context, b []byte, j *mj.Job) ([]byte, bool) {
	if j.Status != mj.StatusQueued || j.NomadJobID != "" {
		return b, false
	}
	if len(j.Awaits) > 0 || j.ChunkedParent() { // not in the queue: what it awaits (references.go), or its chunks (parallel.go)
		return append(b, j.StatusDetail...), true
	}
	h, err := g.queueHead(ctx, j.Machine, j.AccountID)
	if err != nil {
		return b, false
	}
	st := h.Standing(j)
	limit := g.Config.Limits.MaxRunningPerAccount
	if st.Schedule != nil && st.Schedule.MaxRunningPerPool != nil {
		limit = *st.Schedule.MaxRunningPerPool
	}
	return appendStandingDetail(b, j.Machine, st.Ahead, st.InFlight, limit, j.StatusDetail), true
}

// standingTTL bounds how long a head of a queue is kept: the account's
// settings (its limit of jobs running, named in the detail) are not watched.
// Every change of the account's jobs in the pool drops it at once.
const standingTTL = time.Second

// standingEntries bounds the heads kept (each at most StandingAheadMax+1 keys);
// past it, arbitrary ones are dropped.
const standingEntries = 1000

type standingKey struct{ pool, account string }

type standingEntry struct {
	head    *store.QueueHead // nil: none kept
	at      time.Time        // when its read began
	gen     uint64           // changes seen while reads were pending
	pending int              // reads in flight
}

// standingCache keeps, per pool and account, the head of the account's queue
// there as last read, so that clients polling their queued jobs cost etcd
// nothing. It is used only while the job watch runs (the job cache is live):
// the watch drops an account's heads with every change of its jobs (which is
// how queue and active keys change: with their job, in its transaction), and
// restarting the watch drops them all.
type standingCache struct {
	mu    sync.Mutex
	m     map[standingKey]*standingEntry
	epoch uint64 // resets
}

// get returns the kept head of pool and account, if it is younger than standingTTL.
func (c *standingCache) get(k standingKey, now time.Time) *store.QueueHead {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e := c.m[k]; e != nil && e.head != nil && now.Sub(e.at) < standingTTL && now.Sub(e.at) >= 0 {
		return e.head
	}
	return nil
}

// reading marks a read of k's head as begun at now; done keeps its result
// unless k's jobs changed, or the cache was reset, meanwhile.
func (c *standingCache) reading(k standingKey) (done func(h *store.QueueHead, at time.Time)) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[standingKey]*standingEntry{}
	}
	e := c.m[k]
	if e == nil {
		for len(c.m) >= standingEntries {
			for old := range c.m {
				delete(c.m, old)
				break
			}
		}
		e = &standingEntry{}
		c.m[k] = e
	}
	e.pending++
	gen, epoch := e.gen, c.epoch
	return func(h *store.QueueHead, at time.Time) {
		c.mu.Lock()
		defer c.mu.Unlock()
		e.pending--
		if c.m[k] != e || c.epoch != epoch {
			return // evicted or reset meanwhile
		}
		if h != nil && e.gen == gen {
			e.head, e.at = h, at
		}
		if e.head == nil && e.pending == 0 {
			delete(c.m, k)
		}
	}
}

// drop forgets k's head: a job of the account in the pool changed.
func (c *standingCache) drop(k standingKey) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e := c.m[k]
	if e == nil {
		return
	}
	e.gen++
	e.head = nil
	if e.pending == 0 {
		delete(c.m, k)
	}
}

// empty reports whether no head is kept or being read.
func (c *standingCache) empty() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.m) == 0
}

// reset forgets every head (the job watch restarted or stopped, or a job
// whose account is not known was deleted).
func (c *standingCache) reset() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.epoch++
	clear(c.m)
}

// jobChanged drops what the standing cache keeps of j's account and pool.
func (g *Gateway) jobChanged(j *mj.Job) {
	g.standing.drop(standingKey{j.Machine, j.AccountID})
}

// queueHead is the head of account's queue in pool: this gateway's copy while
// the job watch runs and it is recent, else read from etcd.
func (g *Gateway) queueHead(ctx context.Context, pool, account string) (*store.QueueHead, error) {
	if !g.jobs.live.Load() {
		return g.Store.QueueHead(ctx, pool, account)
	}
	k := standingKey{pool, account}
	now := g.Now()
	if h := g.standing.get(k, now); h != nil {
		return h, nil
	}
	// Readers that miss together (a head just dropped, polled by many) share
	// one read.
	v, err, _ := g.standingFlight.Do(pool+"\x00"+account, func() (any, error) {
		done := g.standing.reading(k)
		h, err := g.Store.QueueHead(ctx, pool, account)
		done(h, now)
		return h, err
	})
	h, _ := v.(*store.QueueHead)
	return h, err
}

// standingDetail words a queued job's standing (docs/scheduling.md).
func standingDetail(pool string, ahead, inFlight, limit int, stored string) string {
	var buf [192]byte
	return string(appendStandingDetail(buf[:0], pool, ahead, inFlight, limit, stored))
}

// appendStandingDetail appends standingDetail's words.
func appendStandingDetail(b []byte, pool string, ahead, inFlight, limit int, stored string) []byte {
	switch {
	case ahead > store.StandingAheadMax:
		b = append(b, "waiting: more than "...)
		b = strconv.AppendInt(b, store.StandingAheadMax, 10)
		b = append(b, " of your jobs are ahead in pool "...)
		b = append(b, pool...)
	case ahead == 0:
		b = append(b, "waiting: your next job in pool "...)
		b = append(b, pool...)
		b = append(b, "; dispatched when the pool has room and it is your account's turn"...)
	case ahead == 1:
		b = append(b, "waiting: 1 of your jobs is ahead in pool "...)
		b = append(b, pool...)
	default:
		b = append(b, "waiting: "...)
		b = strconv.AppendInt(b, int64(ahead), 10)
		b = append(b, " of your jobs are ahead in pool "...)
		b = append(b, pool...)
	}
	if limit > 0 && inFlight >= limit {
		b = append(b, "; account limit "...)
		b = strconv.AppendInt(b, int64(limit), 10)
		b = append(b, " running reached ("...)
		b = strconv.AppendInt(b, int64(inFlight), 10)
		b = append(b, " running)"...)
	}
	if stored != "" {
		b = append(b, "; "...)
		b = append(b, stored...)
	}
	return b
}
