package dispatcher

import (
	"context"
	"fmt"
	"log/slog"
	"regexp"
	"runtime/debug"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
)

// reconcileConcurrency is how many jobs a reconcile pass settles at once: most
// need nothing, the others an etcd write or a Nomad call each.
const reconcileConcurrency = 16

// reconcilerStore is what the reconciler needs of the store (the term's: its
// writes, through the settler, are fenced).
type reconcilerStore interface {
	JobsUnder(ctx context.Context, prefix string) ([]*mj.Job, error)
	ActivePrefix() string
	Job(ctx context.Context, id string) (*mj.Job, error)
	Jobs(ctx context.Context, ids []string) ([]*mj.Job, []error)
	Follow(ctx context.Context, f store.Family, resync time.Duration, log *slog.Logger, fn func(ctx context.Context, id string, del *store.Deleted))
}

// reconciler settles the active jobs against what Nomad says now (reconcile:
// allocations the stream missed, children that vanished, jobs no node can
// place, attempts overdue: backstops.go), and stops the children no job wants
// (strays, cancelled jobs). It changes jobs through the settler.
type reconciler struct {
	cfg    *config.Config
	log    *slog.Logger
	st     func() reconcilerStore // the term's store
	nomad  *nomadAPI
	allocs NomadAllocs // nil: each child's allocations are read alone
	settle *settler
	now    func() time.Time
	every  time.Duration // ReconcileEvery
	// timeoutGrace: how long past its timeout a child may live (TimeoutGrace).
	timeoutGrace time.Duration
	poolFull     func(pool string) // the scheduler's: Nomad has no room now
}

// reconcileLoop reconciles when kicked (the event stream (re)connected, or could
// not) and every ReconcileEvery, on its own goroutine: a long pass holds up no
// event. Kicks during a pass make one more pass after it.
func (rc *reconciler) reconcileLoop(ctx context.Context, kick <-chan struct{}) {
	tick := time.NewTicker(rc.every)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-kick:
		case <-tick.C:
		}
		rc.reconcile(ctx)
	}
}

// pass is one reconcile pass's view: the active jobs as it read them and Nomad's
// lists, read once for all of them.
type pass struct {
	rc *reconciler
	// seen holds the jobs the pass read, by id (only strays adds to it, after the
	// jobs are settled).
	seen map[string]*mj.Job
	// allocs are the live allocations by child, of the pools in listed.
	allocs map[string][]allocState
	listed map[string]bool
	// children are the live children by id; nil when the list failed.
	children map[string]*api.JobListStub
	// down: a Nomad call found Nomad unreachable or in trouble (a 5xx answer), or
	// the pass panicked; the pass decides nothing more.
	down atomic.Bool
}

// reconcile settles every unfinished dispatched job against Nomad: allocations the
// stream missed, children Nomad no longer knows, jobs no node could place within the
// queue limit, allocations that never started, children still alive well past the
// job's timeout, and children no job wants any more.
//
// A pass reads the active jobs in a few etcd multi-gets, and Nomad's side in one
// list of live allocations per pool and one list of live children; it then settles
// the jobs several at once, without a read or write for a job the lists show as
// the job already says. Only a child that is no longer live (it ended or vanished),
// or whose lists disagree (it changed between them, or has ended allocations), costs
// calls of its own, as does checking a child's allocations before its attempt is
// ended on them. A pass stops at the first connection error or 5xx answer (no
// cluster leader, overloaded): Nomad is down or in trouble, nothing is decided from
// its silence, and it is not sent a call per child. Only a list Nomad refuses with
// a 4xx (a filter it does not take) falls back to reading the children one by one.
func (rc *reconciler) reconcile(ctx context.Context) {
	defer rc.recoverPass(nil)
	jobs, err := rc.st().JobsUnder(ctx, rc.st().ActivePrefix())
	if err != nil {
		rc.log.Warn("reconcile: read active jobs", "err", err)
		return
	}
	p := &pass{rc: rc, seen: make(map[string]*mj.Job, len(jobs))}
	var todo []*mj.Job
	pools := map[string]bool{}
	for _, j := range jobs {
		p.seen[j.ID] = j
		if _, warm := mj.WarmRunOfChild(j.NomadJobID); warm {
			continue // its runner's lease settles it (warm.go)
		}
		if j.NomadJobID != "" && !j.Status.Terminal() {
			todo = append(todo, j)
			pools[j.Machine] = true
		}
	}
	// Allocations before children: a child's summary, read after its allocations,
	// shows whether they changed in between (see listedAllocs).
	if rc.allocs != nil {
		p.allocs, p.listed = map[string][]allocState{}, map[string]bool{}
		for pool := range pools {
			stubs, err := p.liveAllocs(ctx, pool)
			if err != nil {
				rc.log.Warn("reconcile: list allocations", "pool", pool, "err", err)
				if nomadTrouble(err) {
					return // reading each child instead would only pile onto it
				}
				continue // a 4xx (the filter refused): this pool's children are read one by one
			}
			p.listed[pool] = true
			for _, s := range stubs {
				p.allocs[s.JobID] = append(p.allocs[s.JobID], fromStub(s))
			}
		}
	}
	children, err := p.liveChildren(ctx)
	if err != nil {
		rc.log.Warn("reconcile: list nomad jobs", "err", err)
		if nomadTrouble(err) {
			return
		}
	} else {
		p.children = make(map[string]*api.JobListStub, len(children))
		for _, s := range children {
			p.children[s.ID] = s
		}
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(reconcileConcurrency, len(todo)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer rc.recoverPass(p)
			for ctx.Err() == nil && !p.down.Load() {
				i := int(next.Add(1)) - 1
				if i >= len(todo) {
					return
				}
				p.settle(ctx, todo[i])
			}
		}()
	}
	wg.Wait()
	if ctx.Err() != nil || p.down.Load() {
		return
	}
	if p.children == nil {
		rc.stopStrayChildren(ctx)
		return
	}
	p.strays(ctx, children)
}

// liveFilter selects allocations that have not ended: ended ones are settled
// through their child (see listedAllocs), and the list stays the size of the work
// in flight, not of everything Nomad still keeps.
const liveFilter = `ClientStatus != "complete" and ClientStatus != "failed" and ClientStatus != "lost"`

// liveAllocs lists the live allocations of a pool's children.
func (p *pass) liveAllocs(ctx context.Context, pool string) ([]*api.AllocationListStub, error) {
	q, cancel := p.rc.nomad.query(ctx)
	defer cancel()
	q.Filter = fmt.Sprintf("JobID matches %q and %s", "^"+regexp.QuoteMeta(mj.PoolJobID(pool)+"/dispatch-"), liveFilter)
	stubs, _, err := p.rc.allocs.List(q)
	return stubs, err
}

// liveChildren lists the mediajobs children Nomad has not finished.
func (p *pass) liveChildren(ctx context.Context) ([]*api.JobListStub, error) {
	q, cancel := p.rc.nomad.query(ctx)
	defer cancel()
	q.Prefix, q.Filter = "mediajobs-", `Status != "dead" and ParentID != ""`
	stubs, _, err := p.rc.nomad.jobs.List(q)
	return stubs, err
}

// fail records a failed Nomad call: unreachable, or a 5xx answer, stops the pass.
func (p *pass) fail(err error) {
	if nomadTrouble(err) {
		p.down.Store(true)
	}
}

// recoverPass, deferred, turns a panic of a pass (or of one of its workers, p)
// into a log line with its stack, and ends the pass rather than the process: a
// panic that recurs on every pass would otherwise crash-loop the dispatcher and
// then its standby. The next pass starts afresh.
func (rc *reconciler) recoverPass(p *pass) {
	r := recover()
	if r == nil {
		return
	}
	rc.log.Error("reconcile: pass panicked; ending it", "panic", r, "stack", string(debug.Stack()))
	if p != nil {
		p.down.Store(true)
	}
}

// listedAllocs are child's allocations from the pass's lists, when the lists can
// be trusted for it: the child is live, and its summary (read after the
// allocations) counts no ended allocation and exactly the live ones listed.
func (p *pass) listedAllocs(j *mj.Job) ([]allocState, bool) {
	s, live := p.children[j.NomadJobID]
	if !live || !p.listed[j.Machine] || s.JobSummary == nil {
		return nil, false
	}
	n, ended := 0, 0
	for _, tg := range s.JobSummary.Summary {
		n += tg.Starting + tg.Running + tg.Unknown
		ended += tg.Complete + tg.Failed + tg.Lost
	}
	allocs := p.allocs[j.NomadJobID]
	if ended > 0 || n != len(allocs) {
		return nil, false
	}
	return allocs, true
}

// childAllocs reads child's allocations from Nomad, first checking that Nomad
// still knows a child the live list lacks (one it no longer knows has vanished:
// settled here, ok false).
func (p *pass) childAllocs(ctx context.Context, j *mj.Job, child string) (allocs []allocState, ok bool) {
	rc := p.rc
	if _, live := p.children[child]; !live {
		q, cancel := rc.nomad.query(ctx)
		_, _, err := rc.nomad.jobs.Info(child, q)
		cancel()
		if isNotFound(err) {
			metrics.ReconcileCorrections.WithLabelValues("vanished").Inc()
			rc.vanished(ctx, j, child)
			return nil, false
		} else if err != nil {
			rc.log.Warn("reconcile: read nomad job", "job", j.ID, "nomad_job", child, "err", err)
			p.fail(err)
			return nil, false
		}
	}
	if p.down.Load() {
		return nil, false
	}
	q, cancel := rc.nomad.query(ctx)
	stubs, _, err := rc.nomad.jobs.Allocations(child, true, q)
	cancel()
	if err != nil {
		rc.log.Warn("reconcile: list allocations", "job", j.ID, "nomad_job", child, "err", err)
		p.fail(err)
		return nil, false
	}
	allocs = make([]allocState, len(stubs))
	for i, s := range stubs {
		allocs[i] = fromStub(s)
	}
	return allocs, true
}

// settle reconciles one job, as the pass read it, with its child.
func (p *pass) settle(ctx context.Context, j *mj.Job) {
	rc, child := p.rc, j.NomadJobID
	allocs, listed := p.listedAllocs(j)
	if listed {
		// Lists read a moment ago do not end an attempt (see below): where they
		// show an allocation whose apply could end it ("unknown": its node went
		// away, and may be back by now), the child's own allocations, read now,
		// are applied instead. Running and pending ones never end it.
		now := rc.now()
		for _, a := range allocs {
			if a.ClientStatus != api.AllocClientStatusRunning && applyNeeded(j, a, now) {
				listed = false
				break
			}
		}
	}
	if !listed {
		var ok bool
		if allocs, ok = p.childAllocs(ctx, j, child); !ok {
			return
		}
	}
	// Where Nomad ran the attempt twice (it replaced a lost allocation), the
	// allocation that finished, and may have reported, is applied first: a lost
	// sibling applied before it would start a new attempt and drop its result.
	sort.SliceStable(allocs, func(a, b int) bool { return applyOrder(allocs[a]) < applyOrder(allocs[b]) })
	now := rc.now()
	changed := false
	for _, a := range allocs {
		if applyNeeded(j, a, now) && rc.settle.apply(ctx, a) {
			metrics.ReconcileCorrections.WithLabelValues("allocation").Inc()
			changed = true
		}
	}
	if len(allocs) == 0 {
		// Not placed: the stream may have dropped the evaluation that says why
		// (capacity or infeasibility), and the queue limit depends on it: unread,
		// the job is not judged (Nomad's silence would fail it at the limit).
		refreshed, err := rc.refreshPlacement(ctx, child)
		if err != nil {
			rc.log.Warn("reconcile: read evaluations", "job", j.ID, "nomad_job", child, "err", err)
			p.fail(err)
			return
		}
		if refreshed {
			metrics.ReconcileCorrections.WithLabelValues("placement").Inc()
			changed = true
		}
	}
	if !changed { // j is still the job as stored: judge it without a read
		var why string
		cp := *j
		if rc.overdueFn(now, child, allocs, &why)(&cp) != nil {
			return
		}
	}
	if listed {
		// Lists read a moment ago do not end an attempt: its child's own
		// allocations, read now, do.
		var ok bool
		if allocs, ok = p.childAllocs(ctx, j, child); !ok {
			return
		}
	}
	rc.overdue(ctx, j.ID, child, allocs)
}

// applyNeeded tells, from the job as the pass read it, whether apply could change
// it: a running allocation the job already shows running, a pending one, or one of
// another attempt is passed over without a read.
func applyNeeded(j *mj.Job, a allocState, now time.Time) bool {
	_, attempt, ok := mj.ParseChildID(a.NomadJobID)
	if !ok || j.Status.Terminal() || j.Attempt != attempt || j.NomadJobID != a.NomadJobID {
		return false
	}
	switch a.ClientStatus {
	case api.AllocClientStatusRunning:
		cp := *j
		return transition(&cp, a, nil, now, "", 1, defaultDisconnectGrace) != errSkip
	case api.AllocClientStatusPending:
		return false
	}
	return true
}

// strays stops the live children no job wants (see stopStrayChildren), from the
// pass's list of live children. A job's own current child needs no read; the jobs
// of the others are read in multi-gets. Finished and superseded only ever become
// true, so a job read at the start of the pass is good enough to stop on.
func (p *pass) strays(ctx context.Context, children []*api.JobListStub) {
	rc := p.rc
	type cand struct {
		child, id string
		attempt   int
	}
	var cands []cand
	var unread []string
	for _, s := range children {
		if s.ParentID == "" || !strings.HasPrefix(s.ParentID, "mediajobs-") || s.Stop || s.Status == "dead" {
			continue
		}
		id, attempt, ok := mj.ParseChildID(s.ID)
		if !ok {
			continue
		}
		// A job's own current child needs no read. A job still nil here is one
		// not in the pass's snapshot, already queued to be read (a job with two
		// live children): only its first child queues the read.
		j, read := p.seen[id]
		if j != nil && j.NomadJobID == s.ID && !j.Status.Terminal() {
			continue
		}
		if !read {
			p.seen[id] = nil // read once below
			unread = append(unread, id)
		}
		cands = append(cands, cand{s.ID, id, attempt})
	}
	jobs, errs := rc.st().Jobs(ctx, unread)
	for i, id := range unread {
		if errs[i] == nil {
			p.seen[id] = jobs[i]
		}
	}
	for _, c := range cands {
		if ctx.Err() != nil {
			return
		}
		// A job this store does not know may belong to another installation that
		// shares the Nomad namespace: leave it alone.
		j := p.seen[c.id]
		switch {
		case j == nil:
		case j.Status.Terminal():
			metrics.ReconcileCorrections.WithLabelValues("stray").Inc()
			rc.nomad.stopChild(ctx, c.child, "job "+string(j.Status), c.id)
		case c.attempt < max(j.Attempt, 1):
			metrics.ReconcileCorrections.WithLabelValues("stray").Inc()
			rc.nomad.stopChild(ctx, c.child, fmt.Sprintf("attempt %d was superseded by attempt %d", c.attempt, j.Attempt), c.id)
		case twin(j, c.child, c.attempt):
			metrics.ReconcileCorrections.WithLabelValues("stray").Inc()
			rc.nomad.stopChild(ctx, c.child, twinWhy(j), c.id)
		}
	}
}

// twin tells a second child of the job's current attempt: Nomad checks a
// dispatch's idempotency token against a snapshot, so two dispatches of one
// attempt in flight together (a timed-out one and its retry) can both start one.
// The child the job records is the attempt's; a job that records none yet may
// have its dispatch in flight, and is left alone.
func twin(j *mj.Job, child string, attempt int) bool {
	return !j.Status.Terminal() && attempt == max(j.Attempt, 1) && j.NomadJobID != "" && j.NomadJobID != child
}

func twinWhy(j *mj.Job) string {
	return fmt.Sprintf("a second child of attempt %d; the job runs on %s", max(j.Attempt, 1), j.NomadJobID)
}
