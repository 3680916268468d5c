package dispatcher

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"maps"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
)

// dispatchConcurrency is how many Nomad dispatch calls run at once.
const dispatchConcurrency = 8

// dispatchLoop fills each pool's free slots from its queue, by fair share across
// accounts (fair.go, docs/scheduling.md), whenever the queue or the active set
// changes, Nomad reports a change of a pool's children, and every few seconds.
// A pool in trouble (Nomad or etcd failing) waits out its own backoff; the
// others' passes go on meanwhile, at their usual pace.
func (d *Dispatcher) dispatchLoop(ctx context.Context) {
	wake := make(chan struct{}, 1)
	d.wakeup.Store(&wake)
	poke := d.wake
	for _, pool := range d.Config.Pools {
		go d.watchChildren(ctx, pool)
	}
	d.st().Notify(ctx, poke, store.Queue, store.Active)
	for {
		d.failUnknownPools(ctx)
		next := d.dispatchPools(ctx)
		select {
		case <-ctx.Done():
			return
		case <-wake:
		case <-d.after(next):
		}
	}
}

// idlePass is how long the dispatch loop waits for a wake-up before a pass anyway.
const idlePass = 5 * time.Second

// dispatchPools makes one pass over the registered pools (the others wait for
// retryPools), each unless it waits out a backoff, and returns how long until the
// next pass is due without a wake-up: idlePass, or sooner when a backoff ends.
func (d *Dispatcher) dispatchPools(ctx context.Context) time.Duration {
	next := idlePass
	for _, pool := range d.Config.Pools {
		if !d.poolRegistered(pool.Name) {
			continue
		}
		if left := d.backoff.left(pool.Name, d.now()); left > 0 {
			next = min(next, left)
			d.handWarmOnly(ctx, pool) // warm runners need no Nomad
			continue
		}
		if d.dispatchPool(ctx, pool) {
			// Nomad or etcd is failing for this pool: do not spin on it.
			next = min(next, d.backoff.failed(pool.Name, d.now()))
		} else {
			d.backoff.ok(pool.Name)
		}
	}
	return next
}

// after is the dispatch loop's timer: time.After, or the test's.
func (d *Dispatcher) after(wait time.Duration) <-chan time.Time {
	if d.timer != nil {
		return d.timer(wait)
	}
	return time.After(wait)
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
func (d *Dispatcher) dispatchPool(ctx context.Context, pool *config.Pool) bool {
	warm := d.warmRunners(ctx, pool)
	idle, busy := len(warm.idle), warm.busy
	extra := idle
	if busy > 0 || idle > 0 {
		// Jobs that wait for a busy runner are chosen, and skipped: look past
		// some of them for jobs Nomad can take.
		extra += min(64, 4*(busy+idle))
	}
	chosen, nomad, refund, failed := d.fairPass(ctx, pool, extra, idle, true)
	if failed {
		return true
	}
	// The same fair-share choice serves both paths: the jobs that fit go to the
	// waiting warm runners first, the rest to Nomad within its window.
	if idle > 0 {
		chosen = d.handWarm(ctx, pool, chosen, warm, refund)
	}
	return d.dispatchIDs(ctx, pool, d.forNomad(ctx, pool, chosen, nomad, busy+idle > 0, refund))
}

// handWarmOnly hands the pool's queued jobs that fit to its waiting warm
// runners, and nothing to Nomad: the pass of a pool whose Nomad side waits out
// a backoff. Its trouble changes no backoff: the next full pass judges.
func (d *Dispatcher) handWarmOnly(ctx context.Context, pool *config.Pool) {
	warm := d.warmRunners(ctx, pool)
	idle := len(warm.idle)
	if idle == 0 {
		return
	}
	chosen, _, refund, failed := d.fairPass(ctx, pool, idle+min(64, 4*idle), idle, false)
	if failed {
		return
	}
	for _, e := range d.handWarm(ctx, pool, chosen, warm, refund) {
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
func (d *Dispatcher) dispatchIDs(ctx context.Context, pool *config.Pool, ids []string) bool {
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
			err := d.dispatch(ctx, id)
			if err == nil {
				d.nomadDown.Store(false)
				d.refusalsMu.Lock()
				delete(d.refusals, id)
				d.refusalsMu.Unlock()
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
				if d.nomadDown.Swap(true) {
					return
				}
				d.Log.Warn("nomad unreachable or failing; dispatching stops until it answers", "pool", pool.Name, "err", err)
				detail = "waiting for Nomad, which is unreachable or cannot take jobs now; the job is dispatched when it answers again"
			} else {
				d.Log.Warn("dispatch failed; will retry", "job", id, "err", err)
				if d.refused(ctx, id, err) {
					return // failed: Nomad kept refusing it
				}
			}
			// Only a new detail is written: an outage costs no etcd write per pass.
			d.st().UpdateJob(ctx, id, func(j *mj.Job) error {
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
func (d *Dispatcher) failUnknownPools(ctx context.Context) {
	pools := make([]string, 0, len(d.Config.Pools))
	for _, p := range d.Config.Pools {
		pools = append(pools, p.Name)
	}
	keys, err := d.st().QueuedOutsidePools(ctx, pools, 1000)
	if err != nil {
		d.Log.Warn("list queued jobs of unknown pools", "err", err)
		return
	}
	for _, key := range keys {
		if at, ok := store.QueuedAtFromKey(key); ok && time.Since(at) < unknownPoolGrace {
			continue // no read while the grace lasts
		}
		id := store.IDFromKey(key)
		j, err := d.st().UpdateJob(ctx, id, func(j *mj.Job) error {
			if j.Status.Terminal() || j.NomadJobID != "" || d.Config.Pool(j.Machine) != nil {
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
			d.Log.Warn("failed a job of an unknown pool", "job", id, "pool", j.Machine)
		case errors.Is(err, errSkip), mj.ErrorCode(err) == mj.ENotFound:
		default:
			d.Log.Warn("fail a job of an unknown pool", "job", id, "err", err)
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
func (d *Dispatcher) dispatch(ctx context.Context, id string) error {
	j, err := d.st().Job(ctx, id)
	if err != nil {
		return err
	}
	if j.Status.Terminal() || j.NomadJobID != "" {
		return nil
	}
	attempt := max(j.Attempt, 1)
	payload, err := d.manifest(ctx, j, attempt)
	if err != nil {
		return err
	}
	opts := &api.DispatchOptions{
		JobID:            mj.PoolJobID(j.Machine),
		Meta:             map[string]string{"mediajobs_job_id": j.ID, "mediajobs_attempt": fmt.Sprint(attempt)},
		Payload:          payload,
		IdPrefixTemplate: mj.ChildPrefix(j.ID, attempt),
	}
	wo, cancel := d.write(ctx)
	defer cancel()
	wo.IdempotencyToken = fmt.Sprintf("%s/%d", j.ID, attempt)
	resp, _, err := d.Jobs.DispatchOpts(opts, wo)
	if parentGone(err) {
		// Nomad lost the parameterized job (a dev agent restarted), or an operator
		// stopped it: register it again now, not at the next leadership.
		if pool := d.Config.Pool(j.Machine); pool != nil && d.registerPool(ctx, pool) == nil {
			resp, _, err = d.Jobs.DispatchOpts(opts, wo)
		}
	}
	for k := 2; err == nil && d.stoppedChild(ctx, resp); k++ {
		if k > maxTokens {
			err = fmt.Errorf("Nomad has only stopped children for attempt %d's %d idempotency tokens (its garbage collection forgets them)", attempt, maxTokens)
			break
		}
		wo.IdempotencyToken = fmt.Sprintf("%s/%d/%d", j.ID, attempt, k)
		resp, _, err = d.Jobs.DispatchOpts(opts, wo)
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
	d.dispatchedOK(j.Machine)
	now := time.Now().UTC()
	child, recorded := resp.DispatchedJobID, false
	_, err = d.st().UpdateJob(ctx, id, func(j *mj.Job) error {
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
		d.Log.Info("dispatched", "job", id, "attempt", attempt, "nomad_job", child)
	case err == errSkip && !recorded:
		// Cancelled, finished or moved on between our read and the dispatch: stop
		// what we just started. A child the job records is never stopped here, and
		// neither is anything when etcd failed the write: this leader's next pass
		// (or the next leader) decides from what is stored.
		d.stopChild(ctx, child, "dispatched for a job that no longer wants it", id)
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
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.CallTimeout)
		defer cancel()
		if cur, rerr := d.st().Job(sctx, id); mj.ErrorCode(rerr) == mj.ENotFound || rerr == nil && cur.NomadJobID != child {
			d.stopChild(sctx, child, "dispatched by a leader deposed before it recorded it", id)
		}
	}
	return err
}

// maxTokens bounds the idempotency tokens one dispatch tries (see dispatch).
const maxTokens = 4

// stoppedChild tells a dispatch Nomad answered with a child it already had for
// the token (it created no evaluation) that was stopped since. A child Nomad
// cannot describe now counts as not stopped: it is recorded, as it was before.
func (d *Dispatcher) stoppedChild(ctx context.Context, resp *api.JobDispatchResponse) bool {
	if resp == nil || resp.EvalID != "" {
		return false
	}
	q, cancel := d.query(ctx)
	defer cancel()
	job, _, err := d.Jobs.Info(resp.DispatchedJobID, q)
	return err == nil && job != nil && job.Stop != nil && *job.Stop
}

// refusedError is a dispatch Nomad answered with a refusal (refusedByNomad), which may
// be the job's own trouble.
type refusedError struct {
	pool string
	err  error
}

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// refusedByNomad tells an answer of Nomad's that refuses a dispatch without saying the
// server, the pool's parent job or the token is at fault: a 4xx or 500 other
// than an outage (nomadTrouble), a missing or stopped parent job (parentGone),
// an authorization error (401, 403, an expired token) or throttling (408, 429).
func refusedByNomad(err error) bool {
	code := statusCode(err)
	if code < 400 || code > 500 || nomadTrouble(err) || parentGone(err) {
		return false
	}
	switch code {
	case 401, 403, 408, 429:
		return false
	}
	return !tokenTrouble.MatchString(err.Error())
}

var tokenTrouble = regexp.MustCompile(`(?i)permission denied|acl token|token (expired|not found)|unauthori[sz]ed`)

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

// dispatchedOK records that Nomad took a dispatch of pool's now.
func (d *Dispatcher) dispatchedOK(pool string) {
	d.refusalsMu.Lock()
	defer d.refusalsMu.Unlock()
	if d.poolOK == nil {
		d.poolOK = map[string]time.Time{}
	}
	d.poolOK[pool] = d.now()
}

// refused counts a failed dispatch of job id, and fails the job when Nomad has
// refused it often and long enough while taking the pool's others. It reports
// whether it failed the job.
func (d *Dispatcher) refused(ctx context.Context, id string, err error) bool {
	var rf *refusedError
	if !errors.As(err, &rf) {
		return false
	}
	now := d.now()
	d.refusalsMu.Lock()
	if d.refusals == nil {
		d.refusals = map[string]refusal{}
	}
	if len(d.refusals) > 1000 {
		// Jobs cancelled while refused leave theirs: drop those long past the span.
		for k, r := range d.refusals {
			if now.Sub(r.first) > 10*dispatchRefusalSpan {
				delete(d.refusals, k)
			}
		}
	}
	r, ok := d.refusals[id]
	if !ok {
		r.first = now
	}
	r.n++
	d.refusals[id] = r
	others := d.poolOK[rf.pool].After(r.first)
	d.refusalsMu.Unlock()
	if r.n < dispatchRefusals || now.Sub(r.first) < dispatchRefusalSpan || !others {
		return false
	}
	j, uerr := d.st().UpdateJob(ctx, id, func(j *mj.Job) error {
		if j.Status.Terminal() || j.NomadJobID != "" {
			return errSkip
		}
		j.PlacementReason = ""
		j.Fail(now, mj.Clip(fmt.Sprintf("Nomad refused to run the job (%d tries over %s, while it took other jobs of pool %q): %s. Nothing ran; correct the job, or ask the operator, and submit it again.",
			r.n, now.Sub(r.first).Round(time.Second), j.Machine, strings.Join(strings.Fields(rf.err.Error()), " ")), mj.MaxDetailBytes))
		return nil
	})
	d.refusalsMu.Lock()
	delete(d.refusals, id)
	d.refusalsMu.Unlock()
	if uerr != nil {
		return errors.Is(uerr, errSkip)
	}
	metrics.Finished(j)
	d.Log.Warn("failed a job Nomad kept refusing", "job", id, "tries", r.n, "err", rf.err)
	return true
}

// parentGone tells a dispatch refused because the pool's parameterized job is
// missing or stopped: Nomad answers 404, or a 500 naming it (Job.Dispatch's own
// errors), which no retry clears until it is registered again.
func parentGone(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return isNotFound(err) || strings.Contains(msg, "parameterized job not found") ||
		strings.Contains(msg, "is stopped") || strings.Contains(msg, "is not a parameterized job") ||
		strings.Contains(msg, "job not found")
}

// manifest is the runner's dispatch payload: the job, and a signed URL under which
// it uploads this attempt's outputs and result.
func (d *Dispatcher) manifest(ctx context.Context, j *mj.Job, attempt int) ([]byte, error) {
	scope := mj.RunScope(j.ID, attempt)
	// Valid for the whole life of the attempt: queueing, the timeout, uploading.
	exp := time.Now().Add(time.Duration(j.TimeoutSeconds)*time.Second + 48*time.Hour)
	pool := d.Config.Pool(j.Machine)
	m := mj.Manifest{
		JobID: j.ID, Attempt: attempt, InputFiles: d.inputURLs(ctx, j, exp), OutputNames: j.OutputNames,
		FFmpegCommands: j.FFmpegCommands, TimeoutSeconds: j.TimeoutSeconds,
		// Half the backstop's grace: the result is up before it looks (resultFirst).
		ReportSeconds:     max(int(d.TimeoutGrace/time.Second)/2, 1),
		UploadURL:         d.Signer.URL("PUT", scope, scope+"{path}", exp),
		ProgressURL:       d.Signer.URLFor("/progress/", "PROGRESS", scope+"progress", scope+"progress", exp),
		UploadsURL:        d.Signer.URLFor("/upload-urls/", "UPLOADS", scope+"uploads", scope+"uploads", exp),
		MaxOutputFiles:    d.Config.Server.MaxOutputFiles,
		AllowLoopback:     d.Config.Server.AllowLoopback,
		AllowCIDRs:        d.Config.Server.AllowCIDRs,
		AllowHosts:        d.Config.Server.AllowHosts,
		DestAllowLoopback: d.Config.Server.DestinationAllowLoopback,
		DestAllowCIDRs:    d.Config.Server.DestinationAllowCIDRs,
		DestAllowHosts:    d.Config.Server.DestinationAllowHosts,
		ControlPlane:      d.Config.ControlPlane(),
		AllowGPU:          pool != nil && pool.GPUs() > 0,
		MaxInputBytes:     j.MaxInputBytes,
	}
	if pool != nil {
		m.DiskBytes = int64(pool.Disk) << 20 // Nomad's MB are MiB
	}
	b := mustJSON(m)
	if len(b) <= maxPayload {
		return b, nil
	}
	// A random name: the manifest holds the job's input URLs and upload links, and
	// its key must not be derivable from the job id an output link shows.
	key := scope + "manifest-" + uuid.NewString() + ".json"
	if _, err := d.storage().Put(ctx, key, bytes.NewReader(b), 0); err != nil {
		return nil, fmt.Errorf("store large manifest: %w", err)
	}
	return mustJSON(mj.Manifest{ManifestURL: d.links().URL(ctx, "GET", key, key, exp)}), nil
}

// cancelLoop stops the Nomad child of every job that leaves the active set as
// cancelled (the gateway marks it; Nomad follows).
func (d *Dispatcher) cancelLoop(ctx context.Context) {
	d.st().Follow(ctx, store.Active, time.Hour, d.Log, func(ctx context.Context, id string, del *store.Deleted) {
		if del == nil || del.Prev == nil {
			return
		}
		j, err := d.st().Job(ctx, id)
		if err != nil || j.Status != mj.StatusCancelled {
			return
		}
		d.stopChild(ctx, string(del.Prev), "job cancelled", id)
	})
}

// stopChild deregisters a Nomad child (not purged: the operator can still read it).
// A warm run has no child of its own: its runner learns from its lease that the
// job went on without it, and stops it (gateway/warm.go).
func (d *Dispatcher) stopChild(ctx context.Context, child, why, id string) {
	if _, warm := mj.WarmRunOfChild(child); warm {
		return
	}
	wo, cancel := d.write(ctx)
	defer cancel()
	if _, _, err := d.Jobs.Deregister(child, false, wo); err != nil && !isNotFound(err) {
		d.Log.Warn("could not stop nomad job", "job", id, "nomad_job", child, "why", why, "err", err)
		return
	}
	d.Log.Info("stopped nomad job", "job", id, "nomad_job", child, "why", why)
}

// inputURLs are the URLs the runner fetches j's inputs from: as the client gave
// them, but an input naming another job's output (job:<id>/<output>) is a
// signed link to that output in storage (InputKeys, set when it was released;
// docs/references.md), fetched like a temporary file.
func (d *Dispatcher) inputURLs(ctx context.Context, j *mj.Job, exp time.Time) map[string]string {
	if len(j.InputKeys) == 0 {
		return j.InputFiles
	}
	in := maps.Clone(j.InputFiles)
	for name, key := range j.InputKeys {
		in[name] = d.links().URL(ctx, "GET", key, key, exp)
	}
	return in
}
