package gateway

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// jobCacheSize bounds the cached jobs; past it, an arbitrary entry is dropped.
const jobCacheSize = 50_000

// jobCache serves GET /api/jobs/{id} (what polling clients call) from memory. It is
// kept current by a watch on the jobs in etcd and used only while that watch runs;
// every entry carries its etcd revision, so an older copy never replaces a newer one.
type jobCache struct {
	mu      sync.Mutex
	jobs    map[string]*mj.Job
	pending map[string]int // ids being read from etcd: watch events for them are kept
	live    atomic.Bool
}

func (c *jobCache) get(id string) *mj.Job {
	if !c.live.Load() {
		return nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.jobs[id]
}

// reading marks id as being read, so a change that lands during the read is kept.
func (c *jobCache) reading(id string) func() {
	c.mu.Lock()
	if c.pending == nil {
		c.pending = map[string]int{}
	}
	c.pending[id]++
	c.mu.Unlock()
	return func() {
		c.mu.Lock()
		if c.pending[id]--; c.pending[id] <= 0 {
			delete(c.pending, id)
		}
		c.mu.Unlock()
	}
}

// put stores j unless a newer copy is cached. force is for the watch: it updates
// entries that are cached or being read, and ignores the rest.
func (c *jobCache) put(j *mj.Job, fromWatch bool) {
	if j == nil || !c.live.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	old, cached := c.jobs[j.ID]
	if fromWatch && !cached && c.pending[j.ID] == 0 {
		return
	}
	if cached && old.Revision >= j.Revision {
		return
	}
	if c.jobs == nil {
		c.jobs = map[string]*mj.Job{}
	}
	if !cached && len(c.jobs) >= jobCacheSize {
		for k := range c.jobs { // map order is random: evict one
			delete(c.jobs, k)
			break
		}
	}
	c.jobs[j.ID] = j
}

func (c *jobCache) drop(id string) {
	c.mu.Lock()
	delete(c.jobs, id)
	c.mu.Unlock()
}

func (c *jobCache) reset(live bool) {
	c.mu.Lock()
	c.jobs = nil
	c.live.Store(live)
	c.mu.Unlock()
}

// watchJobs keeps the cache current; whenever the watch fails the cache is dropped
// and bypassed until a new watch runs.
func (g *Gateway) watchJobs(ctx context.Context) {
	for ctx.Err() == nil {
		rev, err := g.Store.Revision(ctx)
		if err == nil {
			g.jobs.reset(true)
			err = g.Store.WatchJobs(ctx, rev, func(id string, j *mj.Job) {
				if j == nil {
					g.jobs.drop(id)
				} else {
					g.jobs.put(j, true)
				}
			})
		}
		g.jobs.reset(false)
		if ctx.Err() == nil {
			g.Log.Warn("job watch stopped; serving jobs from etcd until it is back", "err", err)
			select {
			case <-ctx.Done():
			case <-time.After(time.Second):
			}
		}
	}
}

// job reads a job through the cache.
func (g *Gateway) job(ctx context.Context, id string) (*mj.Job, error) {
	if j := g.jobs.get(id); j != nil {
		return j, nil
	}
	done := g.jobs.reading(id)
	defer done()
	j, err := g.Store.Job(ctx, id)
	if err == nil {
		g.jobs.put(j, false)
	}
	return j, err
}
