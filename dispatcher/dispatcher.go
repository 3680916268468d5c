// Package dispatcher moves queued jobs onto Nomad and Nomad's results back onto jobs.
// One dispatcher leads (etcd election); standbys wait to take over. The leader
// registers one parameterized job per pool, dispatches one child per queued job
// (by fair share across accounts, first in first out within one, no further
// ahead of the pool's free capacity than its window: docs/scheduling.md), follows Nomad's allocation
// and evaluation events and reconciles against Nomad after every (re)connect and
// periodically, re-dispatches attempts whose worker was lost, fails jobs no node can
// place after the pool's queue limit, stops cancelled and overdue children, delivers
// webhooks from the etcd outbox, and sweeps expired files and finished children.
package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/jobspecs"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/webhook"
)

// NomadJobs is what the dispatcher needs of Nomad's jobs API; *api.Jobs has it.
type NomadJobs interface {
	ParseHCLOpts(req *api.JobsParseRequest) (*api.Job, error)
	Register(job *api.Job, q *api.WriteOptions) (*api.JobRegisterResponse, *api.WriteMeta, error)
	RegisterOpts(job *api.Job, opts *api.RegisterOptions, q *api.WriteOptions) (*api.JobRegisterResponse, *api.WriteMeta, error)
	DispatchOpts(opts *api.DispatchOptions, q *api.WriteOptions) (*api.JobDispatchResponse, *api.WriteMeta, error)
	Deregister(jobID string, purge bool, q *api.WriteOptions) (string, *api.WriteMeta, error)
	Info(jobID string, q *api.QueryOptions) (*api.Job, *api.QueryMeta, error)
	List(q *api.QueryOptions) ([]*api.JobListStub, *api.QueryMeta, error)
	Allocations(jobID string, allAllocs bool, q *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error)
	Evaluations(jobID string, q *api.QueryOptions) ([]*api.Evaluation, *api.QueryMeta, error)
	Summary(jobID string, q *api.QueryOptions) (*api.JobSummary, *api.QueryMeta, error)
}

// NomadAllocs lists allocations across jobs; *api.Allocations has it.
type NomadAllocs interface {
	List(q *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error)
}

// NomadEvents is Nomad's event stream; *api.EventStream has it.
type NomadEvents interface {
	Stream(ctx context.Context, topics map[api.Topic][]string, index uint64, q *api.QueryOptions) (<-chan *api.Events, error)
}

// Store is what the dispatcher needs of the job store, declared by the part
// that uses it (jobStore here, fairStore, warmStore, storageCounter,
// usageSweeper) and checked against *store.Store when this package compiles
// (contracts.go): nothing is upgraded at run time.
type Store interface {
	jobStore
	followStore
	awaitsStore
	fairStore
	warmStore
	storageCounter
	usageSweeper
	NewLeaderSession(ctx context.Context, ttl time.Duration) (*store.LeaderSession, error)
	Maintain(ctx context.Context, o store.MaintainOptions) *store.MaintainReport
}

// jobStore reads and writes jobs.
type jobStore interface {
	Job(ctx context.Context, id string) (*mj.Job, error)
	UpdateJob(ctx context.Context, id string, fn func(*mj.Job) error) (*mj.Job, error)
	UpdateJobs(ctx context.Context, us []store.JobUpdate) ([]*mj.Job, []error)
	Jobs(ctx context.Context, ids []string) ([]*mj.Job, []error)
	JobsUnder(ctx context.Context, prefix string) ([]*mj.Job, error)
	JobIDs(ctx context.Context, prefix string, limit int) ([]string, int64, error)
	Count(ctx context.Context, prefix string) (int, error)
	DeleteOutbox(ctx context.Context, id string) error
	SweepIdempotency(ctx context.Context, cutoff time.Time) (int, error)
	DeleteFinishedJobs(ctx context.Context, cutoff time.Time, max int) (int, error)
	BackfillDone(ctx context.Context) (int, error)
	EventIndex(ctx context.Context) (uint64, error)
	SaveEventIndex(ctx context.Context, idx uint64) error
	ActivePrefix() string
	OutboxPrefix() string
	PoolActivePrefix(pool string) string
}

// followStore tells the loops what changed in etcd.
type followStore interface {
	Follow(ctx context.Context, f store.Family, resync time.Duration, log *slog.Logger, fn func(ctx context.Context, id string, del *store.Deleted))
	Notify(ctx context.Context, poke func(), fams ...store.Family)
	QueuedOutsidePools(ctx context.Context, pools []string, limit int) ([]string, error)
	Healthy(ctx context.Context) error
	Revision(ctx context.Context) (int64, error)
	ActiveChildren(ctx context.Context) (map[string]string, error)
}

// Blobs is what the dispatcher needs of the blob store.
type Blobs interface {
	ReadAll(ctx context.Context, key string) ([]byte, error)
	Put(ctx context.Context, key string, r io.Reader, max int64) (int64, error)
	Sweep(ctx context.Context, prefix string, cutoff time.Time) (int, error)
	List(ctx context.Context, prefix string) ([]string, error)
	Each(ctx context.Context, prefix string, fn func(key string, size int64, mod time.Time) error) error
	Delete(ctx context.Context, key string) error
}

// Dispatcher runs the loops above. Fill the fields and call Run.
type Dispatcher struct {
	Config *config.Config
	// Store is the store outside a term (campaigning, readiness); the loops of a
	// term use its fenced copy (st).
	Store  Store
	Jobs   NomadJobs
	Events NomadEvents
	// Allocs lets reconcile read a pool's live allocations in one call; without
	// it, reconcile reads them child by child.
	Allocs  NomadAllocs
	Blobs   Blobs
	Signer  blob.Signer
	Webhook *webhook.Sender
	// Accounts finds an account's webhook signing secret (nil: never sign).
	Accounts AccountSecrets
	// RunnerCommand is the mediajobs binary raw_exec pools run when they set none.
	RunnerCommand string
	Log           *slog.Logger
	// ReconcileEvery re-reads unfinished jobs from Nomad even when the stream is
	// healthy: the stream is a best-effort tail. Default 15s.
	ReconcileEvery time.Duration
	// LeaderTTL is the etcd session TTL: a standby takes over this long after the
	// leader dies. Default 10s.
	LeaderTTL time.Duration
	// TimeoutGrace is how long past a job's timeout a child may live before the
	// dispatcher stops it. Default 60s.
	TimeoutGrace time.Duration
	// DisconnectGrace is how long an attempt whose node stopped heartbeating waits
	// for it before it runs again elsewhere (dispatcher.disconnect_grace).
	DisconnectGrace time.Duration
	// Name identifies this dispatcher in the election (default host:pid).
	Name string
	// CallTimeout bounds each Nomad call (default NomadTimeout).
	CallTimeout time.Duration
	// StreamIdle is how long Nomad's event stream may deliver nothing before the
	// dispatcher checks that Nomad still answers (default 45s; see nomadAnswers).
	StreamIdle time.Duration
	// BlobTimeout bounds each blob store call (default BlobTimeout; a janitor
	// sweep gets sweepCalls times as long). See storage.
	BlobTimeout time.Duration

	writeOpts *api.WriteOptions
	queryOpts *api.QueryOptions
	// Nomad's events and reconcile write jobs in groups too (see update).
	writes *group[store.JobUpdate, *mj.Job]
	// ungrouped: update writes each job alone (the old path, for the benchmark).
	ungrouped bool
	// resultErrs tracks results the blob store could not read (see resultUnreadable).
	resultErrs readFailures
	// blobAnswered: when the blob store last answered a call (see timedBlobs).
	blobAnswered atomic.Int64
	// seen: when this dispatcher first saw allocations' timed states (clock.go).
	seen sightings
	// clock, when set, is the dispatcher's clock instead of time.Now (tests).
	clock func() time.Time
	// timer, when set, is the dispatch loop's timer instead of time.After (tests).
	timer func(time.Duration) <-chan time.Time
	// backoff spaces the passes of a pool in trouble, and the retries of its
	// legacy queue keys (dispatch.go).
	backoff backoffs
	// nomadDown: a dispatch found Nomad unreachable or failing (5xx), and none has
	// succeeded since.
	nomadDown atomic.Bool
	// session is the etcd session this dispatcher campaigns or leads with (Ready).
	session atomic.Pointer[store.LeaderSession]
	// term is the store of the term this dispatcher leads or last led: every
	// write through it is conditioned on the term's election key (st).
	term atomic.Pointer[Store]
	// ready is the last readiness Ready found, to log only its changes.
	ready   atomic.Bool
	mu      sync.Mutex
	leading bool
	// registered holds the pools whose parameterized job Nomad accepted.
	registered map[string]bool
	// wakeup asks the dispatch loop for a pass (see wake).
	wakeup atomic.Pointer[chan struct{}]
	// passes holds each pool's accounts' virtual times for fair share's ties
	// (poolPasses, fair.go).
	passesMu sync.Mutex
	passes   map[string]map[string]float64
	// room is each pool's room in Nomad, as far as known (fair.go).
	room poolRoom
	// queues counts each pool's queued jobs per account (queueIndex, fair.go).
	queuesOnce sync.Once
	queues     *store.QueueIndex
	// refusals counts the dispatches Nomad refused, per job, and poolOK holds
	// when each pool's last dispatch succeeded (dispatch.go).
	refusalsMu sync.Mutex
	refusals   map[string]refusal
	poolOK     map[string]time.Time
	// late holds, per job id, what lateUsage added to a cancelled job's usage,
	// counted in the usage metrics once its write lands (applied).
	late sync.Map
	// tallyAfter is where the janitor's next page of uncounted outputs starts
	// (storagequota.go; the janitor runs one sweep at a time).
	tallyAfter string
}

// NomadTimeout bounds every Nomad call, on top of the leader's context: a
// half-open connection cannot stall dispatch or reconcile. (ParseHCLOpts takes no
// options: the Nomad client's own HTTP timeout bounds it, see cmd/mediajobs.)
const NomadTimeout = 30 * time.Second

// query and write are the options of one Nomad call made on behalf of ctx.
func (d *Dispatcher) query(ctx context.Context) (*api.QueryOptions, context.CancelFunc) {
	c, cancel := context.WithTimeout(ctx, d.CallTimeout)
	return d.queryOpts.WithContext(c), cancel
}

func (d *Dispatcher) write(ctx context.Context) (*api.WriteOptions, context.CancelFunc) {
	c, cancel := context.WithTimeout(ctx, d.CallTimeout)
	return d.writeOpts.WithContext(c), cancel
}

// maxPayload stays under Nomad's 16 KiB dispatch payload limit; a larger manifest
// goes to the blob store and the payload carries a signed URL to it.
const maxPayload = 15 * 1024

func (d *Dispatcher) defaults() {
	if d.Log == nil {
		d.Log = slog.Default()
	}
	if d.writes == nil {
		d.writes = &group[store.JobUpdate, *mj.Job]{run: d.updateJobs, key: func(u store.JobUpdate) string { return u.ID }, max: 64, log: d.Log}
	}
	if d.ReconcileEvery == 0 {
		d.ReconcileEvery = 15 * time.Second
	}
	if d.LeaderTTL == 0 {
		d.LeaderTTL = 10 * time.Second
	}
	if d.CallTimeout == 0 {
		d.CallTimeout = NomadTimeout
	}
	if d.StreamIdle == 0 {
		d.StreamIdle = streamIdle
	}
	if d.DisconnectGrace == 0 {
		d.DisconnectGrace = defaultDisconnectGrace
	}
	if d.TimeoutGrace == 0 {
		d.TimeoutGrace = 60 * time.Second
	}
	if d.Name == "" {
		host, _ := os.Hostname()
		d.Name = host + ":" + strconv.Itoa(os.Getpid())
	}
	d.writeOpts = &api.WriteOptions{Region: d.Config.Nomad.Region, Namespace: d.Config.Nomad.Namespace}
	d.queryOpts = &api.QueryOptions{Region: d.Config.Nomad.Region, Namespace: d.Config.Nomad.Namespace}
}

// Leading reports whether this dispatcher is the leader now.
func (d *Dispatcher) Leading() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.leading
}

func (d *Dispatcher) setLeading(v bool) {
	d.mu.Lock()
	d.leading = v
	d.mu.Unlock()
	if v {
		metrics.DispatcherLeader.WithLabelValues().Set(1)
		metrics.LeadershipChanges.WithLabelValues().Inc()
	} else {
		metrics.DispatcherLeader.WithLabelValues().Set(0)
	}
}

// Run campaigns for leadership and, while leading, runs every loop; it returns when
// ctx ends. Losing the etcd session (a partition, a long pause) stops the loops and
// campaigns again; every write is conditioned on the election key, so a deposed
// leader's late writes are refused.
func (d *Dispatcher) Run(ctx context.Context) error {
	d.defaults()
	metrics.DispatcherLeader.WithLabelValues().Set(0)
	// Exported from the start, at 0, by dispatchers only (see package metrics).
	metrics.LeadershipChanges.WithLabelValues()
	metrics.EventStreamReconnects.WithLabelValues()
	defer d.session.Store(nil)
	for ctx.Err() == nil {
		sess, err := d.Store.NewLeaderSession(ctx, d.LeaderTTL)
		if err != nil {
			d.Log.Warn("etcd session failed; retrying", "err", err)
			sleep(ctx, time.Second)
			continue
		}
		d.session.Store(sess)
		d.Log.Info("dispatcher waiting for leadership", "name", d.Name)
		term, err := sess.Campaign(ctx, d.Name)
		if err != nil {
			sess.Close()
			if ctx.Err() == nil {
				d.Log.Warn("campaign failed; retrying", "err", err)
				sleep(ctx, time.Second)
			}
			continue
		}
		d.Log.Info("dispatcher leading", "name", d.Name)
		d.newTerm()
		// Every write of the term's loops goes through the term's store, which
		// conditions it on the election key: a paused leader whose session
		// expired cannot write after the next took over.
		var fenced Store = term.Store()
		d.term.Store(&fenced)
		lctx, cancel := context.WithCancel(ctx)
		go func() {
			select {
			case <-sess.Done():
				d.Log.Warn("etcd session lost; stepping down")
			case <-lctx.Done():
			}
			cancel()
		}()
		d.setLeading(true)
		d.lead(lctx)
		d.setLeading(false)
		cancel()
		rctx, rcancel := context.WithTimeout(context.Background(), 2*time.Second)
		term.Resign(rctx)
		rcancel()
		sess.Close()
	}
	return nil
}

// st is the store the loops use: the current (or last) term's, which refuses
// every write once its leadership is gone; the plain store before any term
// (tests that drive one loop).
func (d *Dispatcher) st() Store {
	if t := d.term.Load(); t != nil {
		return *t
	}
	return d.Store
}

// newTerm forgets what this dispatcher learnt while it led before: another
// leader may have led meanwhile. Fair share's passes start afresh from etcd
// (fair.go), and so do the pools' room in Nomad, their backoffs and the counts of
// refused dispatches (a job refused in an earlier term is not failed by one
// refusal in this one).
func (d *Dispatcher) newTerm() {
	d.passesMu.Lock()
	d.passes = nil
	d.passesMu.Unlock()
	d.room.reset()
	d.backoff.reset()
	d.refusalsMu.Lock()
	d.refusals, d.poolOK = nil, nil
	d.refusalsMu.Unlock()
}

// lead registers the pools and runs the loops until ctx ends. A pool Nomad refuses
// (a node pool that does not exist, a bad constraint) does not hold up the others:
// the loops start anyway, only registered pools are dispatched to, and the refused
// ones are registered again in the background.
func (d *Dispatcher) lead(ctx context.Context) {
	d.mu.Lock()
	d.registered = nil
	d.mu.Unlock()
	var failed []*config.Pool
	for _, pool := range d.Config.Pools {
		if err := d.registerPool(ctx, pool); err != nil {
			if d.poolRegistered(pool.Name) { // only its warm runners failed
				d.Log.Warn("register warm runners failed; retrying, the pool's jobs are dispatched meanwhile", "pool", pool.Name, "err", err)
			} else {
				d.Log.Warn("register pool failed; its jobs wait, the other pools run", "pool", pool.Name, "err", err)
			}
			failed = append(failed, pool)
		}
	}
	if err := d.stopRemovedWarm(ctx); err != nil {
		d.Log.Warn("stopping the warm runners of removed pools failed; the next leadership tries again", "err", err)
	}
	loops := []func(context.Context){d.dispatchLoop, d.eventLoop, d.cancelLoop, d.webhookLoop, d.janitorLoop, d.etcdMaintenanceLoop, d.queueMetricsLoop, d.warmLoop, d.awaitsLoop}
	if len(failed) > 0 {
		loops = append(loops, func(ctx context.Context) { d.retryPools(ctx, failed) })
	}
	var wg sync.WaitGroup
	for _, loop := range loops {
		wg.Add(1)
		go func() { defer wg.Done(); loop(ctx) }()
	}
	wg.Wait()
}

// retryPools registers the pools Nomad refused again, with backoff, until all are in.
func (d *Dispatcher) retryPools(ctx context.Context, pools []*config.Pool) {
	backoff := 2 * time.Second
	for len(pools) > 0 {
		if sleep(ctx, backoff); ctx.Err() != nil {
			return
		}
		backoff = min(backoff*2, time.Minute)
		var still []*config.Pool
		for _, pool := range pools {
			if err := d.registerPool(ctx, pool); err != nil {
				d.Log.Warn("register pool failed; retrying", "pool", pool.Name, "err", err, "in", backoff)
				still = append(still, pool)
			}
		}
		pools = still
	}
}

// RegisterPools registers every pool's parameterized job and warm runners (see
// registerPool) and stops the warm runners of pools no longer configured; it
// returns the failures, each naming its pool, after trying them all.
func (d *Dispatcher) RegisterPools() error {
	if d.writeOpts == nil {
		d.defaults()
	}
	var errs []error
	for _, pool := range d.Config.Pools {
		if err := d.registerPool(context.Background(), pool); err != nil {
			errs = append(errs, err)
		}
	}
	if err := d.stopRemovedWarm(context.Background()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// registerPool renders a pool's jobspec, has Nomad parse it, and registers it;
// then registers the pool's warm runners, or stops them when the pool has no warm
// block (any more). Registering an unchanged job is a no-op in Nomad, so this is
// idempotent. The pool counts as registered (its jobs are dispatched) once its
// parameterized job is in, even when its warm runners then fail: the error says so,
// and the caller retries the whole.
func (d *Dispatcher) registerPool(ctx context.Context, pool *config.Pool) error {
	r, err := jobspecs.Render(pool, d.RunnerCommand)
	if err != nil {
		return fmt.Errorf("pool %q: %w", pool.Name, err)
	}
	job, err := d.parseJob(r)
	if err != nil {
		return fmt.Errorf("pool %q: nomad could not parse the jobspec: %w", pool.Name, err)
	}
	wo, cancel := d.write(ctx)
	defer cancel()
	if _, _, err := d.Jobs.Register(job, wo); err != nil {
		return fmt.Errorf("pool %q: register nomad job %s: %w", pool.Name, r.JobID, err)
	}
	d.mu.Lock()
	if d.registered == nil {
		d.registered = map[string]bool{}
	}
	d.registered[pool.Name] = true
	d.mu.Unlock()
	d.Log.Info("registered pool", "pool", pool.Name, "nomad_job", r.JobID)
	if pool.Warm == nil {
		if err := d.stopWarm(ctx, pool.Name, "the pool has no warm block"); err != nil {
			return fmt.Errorf("pool %q: stop warm runners %s: %w", pool.Name, mj.WarmJobID(pool.Name), err)
		}
		return nil
	}
	if err := d.registerWarm(ctx, pool); err != nil {
		return fmt.Errorf("pool %q: warm runners: %w", pool.Name, err)
	}
	return nil
}

// parseJob has Nomad parse a rendered jobspec, in the configured namespace and
// region.
func (d *Dispatcher) parseJob(r jobspecs.Rendered) (*api.Job, error) {
	job, err := d.Jobs.ParseHCLOpts(&api.JobsParseRequest{JobHCL: r.HCL, Variables: r.Variables, Canonicalize: true})
	if err != nil {
		return nil, err
	}
	if ns := d.Config.Nomad.Namespace; ns != "" {
		job.Namespace = &ns
	}
	if rg := d.Config.Nomad.Region; rg != "" {
		job.Region = &rg
	}
	return job, nil
}

// registerWarm registers a warm pool's service job (jobspecs/warm.nomad.hcl). It
// keeps the count Nomad has (PreserveCounts): an operator's `nomad job scale` or an
// autoscaler's is never reset by a new leader or a restart; warm.count only sets the
// first one.
func (d *Dispatcher) registerWarm(ctx context.Context, pool *config.Pool) error {
	r, err := jobspecs.RenderWarm(pool, d.RunnerCommand, d.Config.Server.PublicURL)
	if err != nil {
		return err
	}
	job, err := d.parseJob(r)
	if err != nil {
		return fmt.Errorf("nomad could not parse the warm jobspec: %w", err)
	}
	wo, cancel := d.write(ctx)
	defer cancel()
	if _, _, err := d.Jobs.RegisterOpts(job, &api.RegisterOptions{PreserveCounts: true}, wo); err != nil {
		return fmt.Errorf("register nomad job %s: %w", r.JobID, err)
	}
	d.Log.Info("registered warm runners", "pool", pool.Name, "nomad_job", r.JobID)
	return nil
}

// warmRole is the meta mediajobs_role of the warm runners' job: only a job that
// says so is ever stopped as one (a pool named "x-warm" has a parameterized job
// with the ID of pool x's runners; config refuses both at once, not one after the
// other).
const warmRole = "warm-runner"

// stopWarm stops (deregisters, without purging: its history stays in Nomad) pool's
// warm runners if Nomad runs them; none is fine.
func (d *Dispatcher) stopWarm(ctx context.Context, pool, why string) error {
	id := mj.WarmJobID(pool)
	q, qcancel := d.query(ctx)
	job, _, err := d.Jobs.Info(id, q)
	qcancel()
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if job == nil || job.Meta["mediajobs_role"] != warmRole || (job.Stop != nil && *job.Stop) {
		return nil
	}
	// Another installation sharing the Nomad namespace may have a warm pool of
	// that name: only runners that lease from this one are ours to stop.
	if c := job.Meta["mediajobs_control"]; c != d.Config.Server.PublicURL {
		return nil
	}
	wo, cancel := d.write(ctx)
	defer cancel()
	if _, _, err := d.Jobs.Deregister(id, false, wo); err != nil && !isNotFound(err) {
		return err
	}
	d.Log.Info("stopped warm runners", "pool", pool, "nomad_job", id, "why", why)
	return nil
}

// stopRemovedWarm stops the warm runners of pools that are no longer configured
// (a pool removed from the file); their parameterized jobs stay, placing nothing.
func (d *Dispatcher) stopRemovedWarm(ctx context.Context) error {
	q, cancel := d.query(ctx)
	q.Prefix, q.Filter = "mediajobs-", `ParentID == "" and Status != "dead" and ID matches "-warm$"`
	stubs, _, err := d.Jobs.List(q)
	cancel()
	if err != nil {
		return fmt.Errorf("list nomad jobs: %w", err)
	}
	var errs []error
	for _, s := range stubs {
		if s.ParentID != "" || s.Stop || s.Type != "service" || !strings.HasSuffix(s.ID, "-warm") {
			continue
		}
		pool := strings.TrimSuffix(strings.TrimPrefix(s.ID, "mediajobs-"), "-warm")
		if d.Config.Pool(pool) != nil {
			continue // registerPool keeps or stops it
		}
		if err := d.stopWarm(ctx, pool, "the pool is no longer configured"); err != nil {
			errs = append(errs, fmt.Errorf("stop warm runners %s of removed pool %q: %w", s.ID, pool, err))
		}
	}
	return errors.Join(errs...)
}

// poolRegistered reports whether Nomad accepted the pool's parameterized job.
func (d *Dispatcher) poolRegistered(name string) bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.registered[name]
}

// links makes file URLs: the store's own when it presigns (S3), else the gateway's.
func (d *Dispatcher) links() blob.Links { return blob.Links{Store: d.Blobs, Signer: d.Signer} }

// isNotFound tells Nomad's 404 from other errors. Only Nomad's own answer counts:
// a connection error names the URL, and a job id in it may well contain "404".
func isNotFound(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode() == 404
	}
	var uep *api.UnexpectedResponseError
	if errors.As(err, &uep) {
		return uep.StatusCode() == 404
	}
	return err != nil && strings.HasPrefix(err.Error(), "Unexpected response code: 404")
}

func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}

func mustJSON(v any) []byte {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}
