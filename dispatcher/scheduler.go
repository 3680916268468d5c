package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
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

// dispatchConcurrency is how many Nomad dispatch calls run at once.
const dispatchConcurrency = 8

// schedulerStore is what the scheduler needs of the store (the term's: its
// writes are fenced).
type schedulerStore interface {
	fairStore
	Job(ctx context.Context, id string) (*mj.Job, error)
	Jobs(ctx context.Context, ids []string) ([]*mj.Job, []error)
	UpdateJob(ctx context.Context, id string, fn func(*mj.Job) error) (*mj.Job, error)
	QueuedOutsidePools(ctx context.Context, pools []string, limit int) ([]string, error)
	Notify(ctx context.Context, poke func(), fams ...store.Family)
	// The pools' warm runners that wait for work (warmhand.go).
	WarmIdleRunners(ctx context.Context, pool string) ([]store.WarmIdle, error)
	WarmRuns(ctx context.Context) (map[string]store.WarmRun, error)
	OfferWarm(ctx context.Context, id string, w store.WarmIdle, run *store.WarmRun, fn func(*mj.Job) error) (*mj.Job, error)
}

// scheduler moves queued jobs onto Nomad and the pools' waiting warm runners:
// the dispatch loop, fair share's passes (fair.go), the hand-off to warm runners
// (warmhand.go), and the refusals and backoffs of pools in trouble. It owns the
// wake-up (others call wake), and each pool's room in Nomad (the tracker reports
// a full pool through poolFull).
type scheduler struct {
	cfg      *config.Config
	log      *slog.Logger
	st       func() schedulerStore // the term's store
	nomad    *nomadAPI
	manifest func(ctx context.Context, j *mj.Job, attempt int) ([]byte, error)
	now      func() time.Time
	// wakeup asks the dispatch loop for a pass (see wake).
	wakeup atomic.Pointer[chan struct{}]
	// What a term learns, forgotten at the next (newTerm): fair share's passes
	// (poolPasses), the pools' room in Nomad, the backoffs of pools in trouble
	// and of their legacy queue keys, and the dispatches Nomad refused.
	passes   fairPasses
	room     poolRoom
	backoff  backoffs
	refusals refusals
	// queues counts each pool's queued jobs per account (queueIndex): kept
	// across terms.
	queues lazyQueueIndex
}

// newTerm forgets what the scheduler learnt while this dispatcher led before:
// another leader may have led meanwhile. Fair share's passes start afresh from
// etcd (fair.go), and so do the pools' room in Nomad, their backoffs and the
// counts of refused dispatches (a job refused in an earlier term is not failed by
// one refusal in this one).
func (s *scheduler) newTerm() {
	s.passes.mu.Lock()
	s.passes.m = nil
	s.passes.mu.Unlock()
	s.room.reset()
	s.backoff.reset()
	s.refusals.mu.Lock()
	s.refusals.m, s.refusals.poolOK = nil, nil
	s.refusals.mu.Unlock()
}

// poolFull records that Nomad had no room for one more child of pool (the
// window, fair.go).
func (s *scheduler) poolFull(pool string) { s.room.full(pool, s.now()) }

// dispatchLoop fills each pool's free slots from its queue, by fair share across
// accounts (fair.go, docs/scheduling.md), whenever the queue or the active set
// changes, Nomad reports a change of a pool's children, and every few seconds.
// A pool in trouble (Nomad or etcd failing) waits out its own backoff; the
// others' passes go on meanwhile, at their usual pace.
func (s *scheduler) dispatchLoop(ctx context.Context) {
	wake := make(chan struct{}, 1)
	s.wakeup.Store(&wake)
	poke := s.wake
	for _, pool := range s.cfg.Pools {
		go s.watchChildren(ctx, pool)
	}
	s.st().Notify(ctx, poke, store.Queue, store.Active)
	for {
		s.failUnknownPools(ctx)
		next := s.dispatchPools(ctx)
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-time.After(next):
		}
	}
}

// idlePass is how long the dispatch loop waits for a wake-up before a pass anyway.
const idlePass = 5 * time.Second

// dispatchPools makes one pass over the registered pools (the others wait for
// retryPools), each unless it waits out a backoff, and returns how long until the
// next pass is due without a wake-up: idlePass, or sooner when a backoff ends.
func (s *scheduler) dispatchPools(ctx context.Context) time.Duration {
	next := idlePass
	for _, pool := range s.cfg.Pools {
		if !s.nomad.poolRegistered(pool.Name) {
			continue
		}
		if left := s.backoff.left(pool.Name, s.now()); left > 0 {
			next = min(next, left)
			s.handWarmOnly(ctx, pool) // warm runners need no Nomad
			continue
		}
		if s.dispatchPool(ctx, pool) {
			// Nomad or etcd is failing for this pool: do not spin on it.
			next = min(next, s.backoff.failed(pool.Name, s.now()))
		} else {
			s.backoff.ok(pool.Name)
		}
	}
	return next
}

// Backoff of a pool in trouble: the first retry after troubleBackoff, each next
// one twice as late, up to maxTroubleBackoff, until a pass goes through.
const (
	troubleBackoff    = 2 * time.Second
	maxTroubleBackoff = 16 * time.Second
)

// backoffs holds, per key (a pool's name, or another of its retries), when it
// may be tried again and how long its last wait was.
type backoffs struct {
	mu sync.Mutex
	m  map[string]backoffState
}

type backoffState struct {
	until time.Time
	wait  time.Duration
}

// left is how long key still waits at now (0: not backed off).
func (b *backoffs) left(key string, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return max(b.m[key].until.Sub(now), 0)
}

// failed backs key off from now, twice as long as the last time, and returns
// the wait.
func (b *backoffs) failed(key string, now time.Time) time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.m == nil {
		b.m = map[string]backoffState{}
	}
	st := b.m[key]
	st.wait = min(max(2*st.wait, troubleBackoff), maxTroubleBackoff)
	st.until = now.Add(st.wait)
	b.m[key] = st
	return st.wait
}

// ok ends key's backoff: its next trouble waits troubleBackoff again.
func (b *backoffs) ok(key string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	delete(b.m, key)
}

func (b *backoffs) reset() {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.m = nil
}

// dispatchPool dispatches the pool's next queued jobs, as many as its window
// allows, in fair-share order (fairPass), and reports trouble: a read, or a
// dispatch, failed for a reason other than Nomad refusing that one job (see
// dispatchIDs).
func (s *scheduler) dispatchPool(ctx context.Context, pool *config.Pool) bool {
	warm := s.warmRunners(ctx, pool)
	idle, busy := len(warm.idle), warm.busy
	extra := idle
	if busy > 0 || idle > 0 {
		// Jobs that wait for a busy runner are chosen, and skipped: look past
		// some of them for jobs Nomad can take.
		extra += min(64, 4*(busy+idle))
	}
	chosen, nomad, refund, failed := s.fairPass(ctx, pool, extra, idle, true)
	if failed {
		return true
	}
	// The same fair-share choice serves both paths: the jobs that fit go to the
	// waiting warm runners first, the rest to Nomad within its window.
	if idle > 0 {
		chosen = s.handWarm(ctx, pool, chosen, warm, refund)
	}
	return s.dispatchIDs(ctx, pool, s.forNomad(ctx, pool, chosen, nomad, busy+idle > 0, refund))
}

// handWarmOnly hands the pool's queued jobs that fit to its waiting warm
// runners, and nothing to Nomad: the pass of a pool whose Nomad side waits out
// a backoff. Its trouble changes no backoff: the next full pass judges.
func (s *scheduler) handWarmOnly(ctx context.Context, pool *config.Pool) {
	warm := s.warmRunners(ctx, pool)
	idle := len(warm.idle)
	if idle == 0 {
		return
	}
	chosen, _, refund, failed := s.fairPass(ctx, pool, idle+min(64, 4*idle), idle, false)
	if failed {
		return
	}
	for _, e := range s.handWarm(ctx, pool, chosen, warm, refund) {
		refund(e) // not dispatched in this pass
	}
}

// dispatchIDs dispatches ids in order (dispatchConcurrency at a time) and reports
// whether any dispatch failed for a reason other than Nomad refusing the job: a
// refused job is the job's own trouble (it is tried again at the next pass, and
// failed by refused), not a reason to slow its pool. The first goes alone, before the others: it is the
// one fair share ranks first (often a newcomer's), and Nomad places a full pool's
// children in the order their evaluations were created, which concurrent
// dispatches would leave to chance.
func (s *scheduler) dispatchIDs(ctx context.Context, pool *config.Pool, ids []string) bool {
	var failed, down atomic.Bool
	sem := make(chan struct{}, dispatchConcurrency)
	var wg sync.WaitGroup
	for i, id := range ids {
		sem <- struct{}{}
		if down.Load() || ctx.Err() != nil {
			<-sem // Nomad is unreachable: the pass stops, the queue waits in etcd
			break
		}
		wg.Add(1)
		one := func() {
			defer func() { <-sem; wg.Done() }()
			err := s.dispatch(ctx, id)
			if err == nil {
				s.nomad.markUp()
				s.refusals.mu.Lock()
				delete(s.refusals.m, id)
				s.refusals.mu.Unlock()
				return
			}
			if ctx.Err() != nil || errors.Is(err, store.ErrNotLeader) {
				return
			}
			var rf *refusedError
			if !errors.As(err, &rf) {
				failed.Store(true)
			}
			detail := mj.Clip("waiting to reach Nomad: "+err.Error(), mj.MaxDetailBytes)
			if nomadTrouble(err) {
				// Unreachable, or answering 5xx (no cluster leader, overloaded): an
				// outage, whatever its text. One job says so, once per outage: the
				// passes that follow while it lasts write nothing.
				down.Store(true)
				if !s.nomad.markDown() {
					return
				}
				s.log.Warn("nomad unreachable or failing; dispatching stops until it answers", "pool", pool.Name, "err", err)
				detail = "waiting for Nomad, which is unreachable or cannot take jobs now; the job is dispatched when it answers again"
			} else {
				s.log.Warn("dispatch failed; will retry", "job", id, "err", err)
				if s.refused(ctx, id, err) {
					return // failed: Nomad kept refusing it
				}
			}
			// Only a new detail is written: an outage costs no etcd write per pass.
			s.st().UpdateJob(ctx, id, func(j *mj.Job) error {
				if j.Status.Terminal() || j.NomadJobID != "" || j.StatusDetail == detail {
					return errSkip
				}
				j.StatusDetail = detail
				return nil
			})
		}
		if i == 0 {
			one()
		} else {
			go one()
		}
	}
	wg.Wait()
	return failed.Load()
}

var errSkip = mj.Errorf(mj.EConflict, "skip")

// unknownPoolGrace is how long a job of a pool missing from this dispatcher's
// configuration waits before it fails.
const unknownPoolGrace = 5 * time.Minute

// failUnknownPools fails the queued jobs whose machine names a pool that is not in
// the configuration (it was removed or renamed), after unknownPoolGrace: no loop
// would ever dispatch them.
// It reads only the gaps of the queue between the configured pools' parts, so a
// healthy queue costs a few empty range reads.
func (s *scheduler) failUnknownPools(ctx context.Context) {
	pools := make([]string, 0, len(s.cfg.Pools))
	for _, p := range s.cfg.Pools {
		pools = append(pools, p.Name)
	}
	keys, err := s.st().QueuedOutsidePools(ctx, pools, 1000)
	if err != nil {
		s.log.Warn("list queued jobs of unknown pools", "err", err)
		return
	}
	for _, key := range keys {
		if at, ok := store.QueuedAtFromKey(key); ok && time.Since(at) < unknownPoolGrace {
			continue // no read while the grace lasts
		}
		id := store.IDFromKey(key)
		j, err := s.st().UpdateJob(ctx, id, func(j *mj.Job) error {
			if j.Status.Terminal() || j.NomadJobID != "" || s.cfg.Pool(j.Machine) != nil {
				return errSkip
			}
			// A gateway may know a new pool before this dispatcher's config does
			// (a rolling change): give the configuration time to catch up.
			if time.Since(j.QueuedAt) < unknownPoolGrace {
				return errSkip
			}
			now := time.Now().UTC()
			j.PlacementReason = ""
			j.Fail(now, fmt.Sprintf("machine %q is not a pool this server has (it is not in the dispatcher's configuration); the job cannot run", j.Machine))
			return nil
		})
		switch {
		case err == nil:
			metrics.Finished(j)
			s.log.Warn("failed a job of an unknown pool", "job", id, "pool", j.Machine)
		case errors.Is(err, errSkip), mj.ErrorCode(err) == mj.ENotFound:
		default:
			s.log.Warn("fail a job of an unknown pool", "job", id, "err", err)
		}
	}
}

// dispatch submits one queued job to its pool's parameterized Nomad job. The
// idempotency token (job id + attempt) makes a retry after a crash between the
// dispatch and the store update return the same child instead of a second one.
// Nomad answers a token it has seen with that child even when it was stopped
// (by a deposed leader, below, or as a twin): such a child never runs, and
// recording it would cost the job an attempt, so the attempt's next token
// (id/attempt/2, /3, ...) starts another. Every leader tries the tokens in the
// same order, so a retry still finds the child it started.
func (s *scheduler) dispatch(ctx context.Context, id string) error {
	j, err := s.st().Job(ctx, id)
	if err != nil {
		return err
	}
	if j.Status.Terminal() || j.NomadJobID != "" {
		return nil
	}
	attempt := max(j.Attempt, 1)
	payload, err := s.manifest(ctx, j, attempt)
	if err != nil {
		return err
	}
	opts := &api.DispatchOptions{
		JobID:            mj.PoolJobID(j.Machine),
		Meta:             map[string]string{"mediajobs_job_id": j.ID, "mediajobs_attempt": fmt.Sprint(attempt)},
		Payload:          payload,
		IdPrefixTemplate: mj.ChildPrefix(j.ID, attempt),
	}
	wo, cancel := s.nomad.write(ctx)
	defer cancel()
	wo.IdempotencyToken = fmt.Sprintf("%s/%d", j.ID, attempt)
	resp, _, err := s.nomad.jobs.DispatchOpts(opts, wo)
	if parentGone(err) {
		// Nomad lost the parameterized job (a dev agent restarted), or an operator
		// stopped it: register it again now, not at the next leadership.
		if pool := s.cfg.Pool(j.Machine); pool != nil && s.nomad.registerPool(ctx, pool) == nil {
			resp, _, err = s.nomad.jobs.DispatchOpts(opts, wo)
		}
	}
	for k := 2; err == nil && s.nomad.stoppedChild(ctx, resp); k++ {
		if k > maxTokens {
			err = fmt.Errorf("Nomad has only stopped children for attempt %d's %d idempotency tokens (its garbage collection forgets them)", attempt, maxTokens)
			break
		}
		wo.IdempotencyToken = fmt.Sprintf("%s/%d/%d", j.ID, attempt, k)
		resp, _, err = s.nomad.jobs.DispatchOpts(opts, wo)
	}
	if err != nil {
		metrics.Dispatches.WithLabelValues(j.Machine, "error").Inc()
		err = fmt.Errorf("nomad dispatch: %w", err)
		if refusedByNomad(err) {
			return &refusedError{pool: j.Machine, err: err}
		}
		return err
	}
	metrics.Dispatches.WithLabelValues(j.Machine, "ok").Inc()
	s.dispatchedOK(j.Machine)
	now := time.Now().UTC()
	child, recorded := resp.DispatchedJobID, false
	_, err = s.st().UpdateJob(ctx, id, func(j *mj.Job) error {
		// The idempotency token gives a retried dispatch the same child: another
		// leader (or an earlier pass) may have recorded it already.
		recorded = j.NomadJobID == child
		if j.Status.Terminal() || j.NomadJobID != "" || max(j.Attempt, 1) != attempt {
			return errSkip // cancelled (or handled) meanwhile
		}
		j.NomadJobID, j.Attempt, j.DispatchedAt, j.PlacementReason, j.WaitingForCapacity = child, attempt, &now, "", false
		j.Worker = &mj.Worker{Path: mj.WorkerDispatch, NomadJobID: child}
		j.StatusDetail = "dispatched to Nomad as " + child + "; waiting for a node"
		if attempt > 1 {
			j.StatusDetail = fmt.Sprintf("attempt %d: %s", attempt, j.StatusDetail)
		}
		return nil
	})
	switch {
	case err == nil:
		s.log.Info("dispatched", "job", id, "attempt", attempt, "nomad_job", child)
	case err == errSkip && !recorded:
		// Cancelled, finished or moved on between our read and the dispatch: stop
		// what we just started. A child the job records is never stopped here, and
		// neither is anything when etcd failed the write: this leader's next pass
		// (or the next leader) decides from what is stored.
		s.nomad.stopChild(ctx, child, "dispatched for a job that no longer wants it", id)
		return nil
	case err == errSkip:
		return nil
	case errors.Is(err, store.ErrNotLeader) && !recorded:
		// Deposed while Nomad dispatched: the new leader runs the job (perhaps
		// on a warm runner) without this child, which would run it twice and
		// could cost it an attempt. Stop it, even as this leader's context ends,
		// unless the job, read again now, records it (a new leader's dispatch of
		// the same token found it). A later dispatch of the attempt starts
		// another child (see above).
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.nomad.timeout)
		defer cancel()
		if cur, rerr := s.st().Job(sctx, id); mj.ErrorCode(rerr) == mj.ENotFound || rerr == nil && cur.NomadJobID != child {
			s.nomad.stopChild(sctx, child, "dispatched by a leader deposed before it recorded it", id)
		}
	}
	return err
}

// maxTokens bounds the idempotency tokens one dispatch tries (see dispatch).
const maxTokens = 4

// A job whose dispatch Nomad refuses is tried again at each pass. Once refused
// dispatchRefusals times over at least dispatchRefusalSpan, while other jobs of
// its pool were dispatched since its first refusal (so the trouble is the job's,
// not the pool's), it fails with Nomad's answer rather than wait queued for
// ever. The counts are the leader's, in memory: each term counts afresh (newTerm).
const (
	dispatchRefusals    = 5
	dispatchRefusalSpan = time.Minute
)

type refusal struct {
	first time.Time
	n     int
}

// refusals counts the dispatches Nomad refused, per job, and holds when each
// pool's last dispatch succeeded.
type refusals struct {
	mu     sync.Mutex
	m      map[string]refusal
	poolOK map[string]time.Time
}

// dispatchedOK records that Nomad took a dispatch of pool's now.
func (s *scheduler) dispatchedOK(pool string) {
	s.refusals.mu.Lock()
	defer s.refusals.mu.Unlock()
	if s.refusals.poolOK == nil {
		s.refusals.poolOK = map[string]time.Time{}
	}
	s.refusals.poolOK[pool] = s.now()
}

// refused counts a failed dispatch of job id, and fails the job when Nomad has
// refused it often and long enough while taking the pool's others. It reports
// whether it failed the job.
func (s *scheduler) refused(ctx context.Context, id string, err error) bool {
	var rf *refusedError
	if !errors.As(err, &rf) {
		return false
	}
	now := s.now()
	s.refusals.mu.Lock()
	if s.refusals.m == nil {
		s.refusals.m = map[string]refusal{}
	}
	if len(s.refusals.m) > 1000 {
		// Jobs cancelled while refused leave theirs: drop those long past the span.
		for k, r := range s.refusals.m {
			if now.Sub(r.first) > 10*dispatchRefusalSpan {
				delete(s.refusals.m, k)
			}
		}
	}
	r, ok := s.refusals.m[id]
	if !ok {
		r.first = now
	}
	r.n++
	s.refusals.m[id] = r
	others := s.refusals.poolOK[rf.pool].After(r.first)
	s.refusals.mu.Unlock()
	if r.n < dispatchRefusals || now.Sub(r.first) < dispatchRefusalSpan || !others {
		return false
	}
	j, uerr := s.st().UpdateJob(ctx, id, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != "" {
			return errSkip
		}
		j.PlacementReason = ""
		j.Fail(now, mj.Clip(fmt.Sprintf("Nomad refused to run the job (%d tries over %s, while it took other jobs of pool %q): %s. Nothing ran; correct the job, or ask the operator, and submit it again.",
			r.n, now.Sub(r.first).Round(time.Second), j.Machine, strings.Join(strings.Fields(rf.err.Error()), " ")), mj.MaxDetailBytes))
		return nil
	})
	s.refusals.mu.Lock()
	delete(s.refusals.m, id)
	s.refusals.mu.Unlock()
	if uerr != nil {
		return errors.Is(uerr, errSkip)
	}
	metrics.Finished(j)
	s.log.Warn("failed a job Nomad kept refusing", "job", id, "tries", r.n, "err", rf.err)
	return true
}
