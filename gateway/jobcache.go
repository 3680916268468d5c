package gateway

import (
	"context"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
)

// jobCacheSize bounds the cached jobs, and jobCacheBytes their estimated size
// (jobBytes); past either, arbitrary entries are dropped.
const (
	jobCacheSize  = 50_000
	jobCacheBytes = 256 << 20
)

// jobCache serves GET /api/jobs/{id} (what polling clients call) from memory. It is
// kept current by a watch on the jobs in etcd and used only while that watch runs;
// every entry carries its etcd revision, so an older copy never replaces a newer one.
type jobCache struct {
	mu      sync.Mutex
	jobs    map[string]*mj.Job
	pending map[string]int // ids being read from etcd: watch events for them are kept
	// progress holds the latest report of cached jobs, from the progress keys
	// (a second watch): it is merged into the job on get.
	progress map[string]*store.ProgressRecord
	// progressGone holds, per cached job, the revision at which its progress key
	// was deleted while the cache still had the job at an older revision. The
	// two watches deliver one transaction's changes in either order: a finished
	// attempt's progress is dropped with the job's change that ended it, never
	// before (a stream would see the running job lose its progress).
	progressGone map[string]int64
	// views holds cached jobs' answers to GET, written at their first GET
	// (encodedView); a job's is dropped with it, or when it changes.
	views map[string]*encodedView
	live  atomic.Bool
	// bytes is the estimated size of the cached jobs (jobBytes), sizes each one's;
	// maxBytes bounds bytes (jobCacheBytes when 0).
	bytes    int64
	sizes    map[string]int64
	maxBytes int64
}

// jobBytes estimates the memory a cached job holds: its strings and a fixed
// allowance per field and entry. Cheap: no encoding.
func jobBytes(j *mj.Job) int64 {
	n := 512 + len(j.ID) + len(j.AccountID) + len(j.WebhookURL) + len(j.Machine) + len(j.LogsPrefix) +
		len(j.ErrorMessage) + len(j.StatusDetail) + len(j.IdemHash) + len(j.NomadJobID) + len(j.PlacementReason)
	for k, v := range j.InputFiles {
		n += 32 + len(k) + len(v)
	}
	for k, v := range j.InputKeys {
		n += 32 + len(k) + len(v)
	}
	n += 48 * len(j.Awaits)
	for k, v := range j.Metadata {
		n += 32 + len(k) + len(v)
	}
	for _, s := range j.OutputNames {
		n += 16 + len(s)
	}
	for _, s := range j.FFmpegCommands {
		n += 16 + len(s)
	}
	for _, o := range j.Outputs {
		n += 64 + len(o.Name) + len(o.Key)
		if o.Probe != nil {
			n += 64 + len(o.Probe.Format) + 64*len(o.Probe.Streams)
		}
	}
	for _, a := range j.Analysis {
		n += 48 + len(a.Filter) + len(a.Instance) + len(a.Data)
	}
	n += 8 * len(j.LogCommands)
	if j.Webhook != nil {
		n += 128 + len(j.Webhook.LastError) + len(j.Webhook.DeliveryID)
	}
	return int64(n)
}

// evictLocked drops one arbitrary entry (map order is random); c.mu is held.
func (c *jobCache) evictLocked() {
	for k := range c.jobs {
		c.forgetLocked(k)
		return
	}
}

// forgetLocked drops the job id; c.mu is held.
func (c *jobCache) forgetLocked(id string) {
	delete(c.jobs, id)
	delete(c.progress, id)
	delete(c.progressGone, id)
	delete(c.views, id)
	c.bytes -= c.sizes[id]
	delete(c.sizes, id)
}

func (c *jobCache) get(id string) *mj.Job {
	j, _ := c.getView(id)
	return j
}

// getView is get, with the job's answer to GET when one is kept for it
// (never for a copy with its progress merged in).
func (c *jobCache) getView(id string) (*mj.Job, *encodedView) {
	if !c.live.Load() {
		return nil, nil
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	j := c.jobs[id]
	if rec := c.progress[id]; j != nil && rec != nil && !j.Status.Terminal() && rec.Attempt == max(j.Attempt, 1) {
		cp := *j
		cp.Progress = &rec.Progress
		return &cp, nil
	}
	if v := c.views[id]; v != nil && v.job == j {
		return j, v
	}
	return j, nil
}

// putView keeps v, the answer to GET written from v.job, while that job is the
// one cached (not a copy, nor one replaced meanwhile), counted in the cache's
// size.
func (c *jobCache) putView(v *encodedView) {
	if !c.live.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	id := v.job.ID
	if c.jobs[id] != v.job || c.views[id] != nil {
		return
	}
	limit := c.maxBytes
	if limit <= 0 {
		limit = jobCacheBytes
	}
	size := v.size()
	if c.bytes+size > limit {
		return // the job is still served from the cache, its answer written each time
	}
	if c.views == nil {
		c.views = map[string]*encodedView{}
	}
	c.views[id] = v
	c.sizes[id] += size
	c.bytes += size
}

// putProgress records a progress report written at revision rev (rec nil: the
// key was deleted) of a cached job, or of one being read.
func (c *jobCache) putProgress(id string, rec *store.ProgressRecord, rev int64) {
	if !c.live.Load() {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	j, cached := c.jobs[id]
	if rec == nil && cached && j.Revision < rev && c.progress[id] != nil {
		// The change that deleted it has not reached the job yet (put drops it).
		if c.progressGone == nil {
			c.progressGone = map[string]int64{}
		}
		c.progressGone[id] = rev
		return
	}
	if rec == nil || (!cached && c.pending[id] == 0) {
		delete(c.progress, id)
		delete(c.progressGone, id)
		return
	}
	if gone, ok := c.progressGone[id]; ok && rec.Revision > gone {
		delete(c.progressGone, id) // a newer report (the next attempt's)
	}
	if c.progress == nil {
		c.progress = map[string]*store.ProgressRecord{}
	}
	if old := c.progress[id]; old == nil || old.Revision < rec.Revision {
		c.progress[id] = rec
	}
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
	limit := c.maxBytes
	if limit <= 0 {
		limit = jobCacheBytes
	}
	size := jobBytes(j)
	if size > limit {
		c.forgetLocked(j.ID) // served from etcd
		return
	}
	if cached {
		c.bytes -= c.sizes[j.ID]
		delete(c.sizes, j.ID)
		delete(c.jobs, j.ID) // not evicted below while its size is not counted
		delete(c.views, j.ID)
	}
	for len(c.jobs) > 0 && (len(c.jobs) >= jobCacheSize || c.bytes+size > limit) {
		c.evictLocked()
	}
	if c.sizes == nil {
		c.sizes = map[string]int64{}
	}
	c.sizes[j.ID] = size
	c.bytes += size
	if gone, ok := c.progressGone[j.ID]; ok && j.Revision >= gone {
		delete(c.progress, j.ID)
		delete(c.progressGone, j.ID)
	}
	if j.Progress != nil { // read from etcd with its progress: keep it beside, unless newer is
		if c.progress == nil {
			c.progress = map[string]*store.ProgressRecord{}
		}
		if old := c.progress[j.ID]; old == nil || old.Revision < j.ProgressRevision {
			c.progress[j.ID] = &store.ProgressRecord{Attempt: max(j.Attempt, 1), Progress: *j.Progress, Revision: j.ProgressRevision}
		}
		cp := *j
		cp.Progress = nil
		j = &cp
	}
	c.jobs[j.ID] = j
}

// cachedAt is the cached job id, without its progress, and its revision; nil
// if none.
func (c *jobCache) cachedAt(id string) (*mj.Job, int64) {
	if !c.live.Load() {
		return nil, 0
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if j := c.jobs[id]; j != nil {
		return j, j.Revision
	}
	return nil, 0
}

// isPending reports whether id is being read from etcd (reading).
func (c *jobCache) isPending(id string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.pending[id] > 0
}

func (c *jobCache) drop(id string) {
	c.mu.Lock()
	c.forgetLocked(id)
	c.mu.Unlock()
}

func (c *jobCache) reset(live bool) {
	c.mu.Lock()
	c.jobs, c.progress, c.progressGone, c.views, c.sizes, c.bytes = nil, nil, nil, nil, nil, 0
	c.live.Store(live)
	c.mu.Unlock()
}

// watchJobs keeps the cache current, jobs and their progress, and wakes pipeline
// streams; whenever a watch fails the cache is dropped and bypassed until new
// watches run.
func (g *Gateway) watchJobs(ctx context.Context) {
	for restarts := 0; ctx.Err() == nil; restarts++ {
		rev, err := g.Store.Revision(ctx)
		if err == nil {
			g.standing.reset()
			g.jobs.reset(true)
			if restarts > 0 {
				g.hub.resync()
			}
			wctx, cancel := context.WithCancel(ctx)
			errs := make(chan error, 3)
			go func() {
				errs <- g.Store.WatchJobs(wctx, rev, g.jobWritten)
			}()
			go func() {
				errs <- g.Store.WatchProgress(wctx, rev, func(id string, rec *store.ProgressRecord, rev int64) {
					g.jobs.putProgress(id, rec, rev)
					g.hub.notify(id, g.jobs.accountOf(id))
				})
			}()
			go func() { // pipeline records, for their streams (pipeline_events.go)
				errs <- g.Store.WatchPipelines(wctx, rev, g.hub.notifyPipeline)
			}()
			err = <-errs
			g.jobs.reset(false) // before the other watches stop: no update is lost
			g.standing.reset()
			cancel()
			<-errs
			<-errs
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

// jobWritten applies a change of a job seen by the watch: to the cache, the
// standing cache and the event streams. The record is decoded only when one of
// them needs more than the cache has: a job this gateway created, cached at the
// revision its create wrote, is not decoded again.
func (g *Gateway) jobWritten(ch *store.JobChange) {
	id := ch.ID
	old, oldRev := g.jobs.cachedAt(id)
	if ch.Deleted() {
		if old != nil {
			g.jobChanged(old)
		} else {
			g.standing.reset() // whose queue it left is not known here
		}
		g.hub.notify(id, g.jobs.accountOf(id))
		g.jobs.drop(id)
		return
	}
	if old != nil && ch.Revision <= oldRev {
		// Cached already as written (this gateway's own create or change):
		// its account's heads and streams are told all the same.
		g.jobChanged(old)
		g.hub.notify(id, old.AccountID)
		return
	}
	if old == nil && !g.jobs.isPending(id) && g.standing.empty() && !g.hub.hasAccounts() {
		// No one here needs the record: the job's own streams are woken.
		g.hub.notify(id, "")
		return
	}
	j, err := ch.Job()
	if err != nil {
		// Undecodable (damaged, or of a newer version): forgotten, so it is
		// read from etcd when asked for.
		g.Log.Warn("job watch: a job record cannot be decoded", "job", id, "err", err)
		g.jobs.drop(id)
		g.standing.reset()
		g.hub.notify(id, g.jobs.accountOf(id))
		return
	}
	g.jobChanged(j)
	g.jobs.put(j, true)
	g.hub.notify(id, j.AccountID)
}

// job reads a job through the cache. id may alias a reused buffer (fiber's
// Params): what outlives the call is a copy.
func (g *Gateway) job(ctx context.Context, id string) (*mj.Job, error) {
	if j := g.jobs.get(id); j != nil {
		return j, nil
	}
	return g.readJob(ctx, id)
}

// jobView is job, with the job's answer to GET when the cache keeps one.
func (g *Gateway) jobView(ctx context.Context, id string) (*mj.Job, *encodedView, error) {
	if j, v := g.jobs.getView(id); j != nil {
		return j, v, nil
	}
	j, err := g.readJob(ctx, id)
	return j, nil, err
}

// readJob reads a job from etcd, and caches it.
func (g *Gateway) readJob(ctx context.Context, id string) (*mj.Job, error) {
	id = strings.Clone(id)
	done := g.jobs.reading(id)
	defer done()
	j, err := g.Store.Job(ctx, id)
	if err == nil {
		g.jobs.put(j, false)
	}
	return j, err
}
