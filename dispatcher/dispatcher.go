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
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/webhook"
)

// Store is what the dispatcher needs of the job store: the union of what each
// service declares it uses (settlerStore, trackerStore, reconcilerStore,
// warmStore, schedulerStore, janitorStore, outboxStore, awaitsStore, and
// observeStore for the gauges and readiness), checked against *store.Store
// when this package compiles (contracts.go): nothing is upgraded at run time.
type Store interface {
	settlerStore
	trackerStore
	reconcilerStore
	schedulerStore
	janitorStore
	outboxStore
	awaitsStore
	pipelinesStore
	warmStore
	observeStore
	NewLeaderSession(ctx context.Context, ttl time.Duration) (*store.LeaderSession, error)
	Maintain(ctx context.Context, o store.MaintainOptions) *store.MaintainReport
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

// Dispatcher is the configuration and the leadership term; its services (the
// Nomad adapter, the scheduler, the settler, the tracker, the reconciler, the
// warm broker, the janitor, the outbox: docs/architecture.md) run the loops
// above. Fill the exported fields and call Run; the services are
// built from them at the first Run, RegisterPools, Sweep or MaintainEtcd
// (defaults), so a field changed after that is not seen.
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
	// dispatcher checks that Nomad still answers (default 45s; see nomadAPI.answers).
	StreamIdle time.Duration
	// BlobTimeout bounds each blob store call (default BlobTimeout; a janitor
	// sweep gets sweepCalls times as long). See storage.
	BlobTimeout time.Duration

	// nomad is the Nomad adapter every service calls Nomad through (nomad.go).
	nomad *nomadAPI
	// sched dispatches queued jobs (scheduler.go).
	sched *scheduler
	// jan sweeps what outlived its use, and keeps etcd small (janitor.go).
	jan *janitor
	// settle applies what became of runs to their jobs (settler.go).
	settle *settler
	// warm ends warm runs: reported, started, lapsed (warm.go).
	warm *warmBroker
	// track follows Nomad's events (events.go); recon re-reads Nomad beside
	// it (reconcile.go, backstops.go).
	track *tracker
	recon *reconciler
	// clock, when set, is the dispatcher's clock instead of time.Now (tests).
	clock func() time.Time
	// session is the etcd session this dispatcher campaigns or leads with (Ready).
	session atomic.Pointer[store.LeaderSession]
	// term is the store of the term this dispatcher leads or last led: every
	// write through it is conditioned on the term's election key (st).
	term atomic.Pointer[Store]
	// ready is the last readiness Ready found, to log only its changes.
	ready atomic.Bool
	// leading: this dispatcher leads now (Leading).
	mu      sync.Mutex
	leading bool
}

func (d *Dispatcher) defaults() {
	if d.Log == nil {
		d.Log = slog.Default()
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
	if d.nomad == nil {
		d.nomad = newNomadAPI(d.Jobs, d.Config, d.RunnerCommand, d.CallTimeout, d.Log)
	}
	if d.settle == nil {
		s := &settler{cfg: d.Config, log: d.Log, nomad: d.nomad, now: d.now, disconnectGrace: d.DisconnectGrace,
			res: newResults(d.Blobs, cmp.Or(d.BlobTimeout, BlobTimeout), d.Log), st: func() settlerStore { return d.st() }}
		s.writes = &group[store.JobUpdate, *mj.Job]{run: s.updateJobs, key: func(u store.JobUpdate) string { return u.ID }, max: 64, log: d.Log}
		d.settle = s
	}
	if d.sched == nil {
		d.sched = &scheduler{cfg: d.Config, log: d.Log, nomad: d.nomad, manifest: d.manifest, now: d.now,
			st: func() schedulerStore { return d.st() }}
	}
	if d.warm == nil {
		d.warm = &warmBroker{log: d.Log, settle: d.settle, now: d.now, wake: d.sched.wake, timeoutGrace: d.TimeoutGrace,
			leaseTTL: d.warmLeaseTTL, st: func() warmStore { return d.st() }}
	}
	if d.recon == nil {
		d.recon = &reconciler{cfg: d.Config, log: d.Log, nomad: d.nomad, allocs: d.Allocs, settle: d.settle, now: d.now,
			every: d.ReconcileEvery, timeoutGrace: d.TimeoutGrace, poolFull: d.sched.poolFull, st: func() reconcilerStore { return d.st() }}
	}
	if d.track == nil {
		d.track = &tracker{log: d.Log, nomad: d.nomad, events: d.Events, settle: d.settle, recon: d.recon, streamIdle: d.StreamIdle,
			st: func() trackerStore { return d.st() }}
	}
	if d.jan == nil {
		d.jan = &janitor{cfg: d.Config, log: d.Log, etcd: d.Store, nomad: d.nomad, blobs: d.Blobs, timed: d.storage(),
			blobTimeout: cmp.Or(d.BlobTimeout, BlobTimeout), st: func() janitorStore { return d.st() }}
	}
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
		d.sched.newTerm()
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

// warmLeaseTTL is pool's warm lease_ttl; the default for a pool whose warm
// block went (its runs still end).
func (d *Dispatcher) warmLeaseTTL(pool string) time.Duration {
	if p := d.Config.Pool(pool); p != nil && p.Warm != nil && p.Warm.LeaseTTLD > 0 {
		return p.Warm.LeaseTTLD
	}
	ttl, _ := time.ParseDuration(config.DefaultWarmLeaseTTL)
	return ttl
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

// lead registers the pools and runs the loops until ctx ends. A pool Nomad refuses
// (a node pool that does not exist, a bad constraint) does not hold up the others:
// the loops start anyway, only registered pools are dispatched to, and the refused
// ones are registered again in the background.
func (d *Dispatcher) lead(ctx context.Context) {
	d.nomad.forgetPools()
	var failed []*config.Pool
	for _, pool := range d.Config.Pools {
		if err := d.nomad.registerPool(ctx, pool); err != nil {
			if d.nomad.poolRegistered(pool.Name) { // only its warm runners failed
				d.Log.Warn("register warm runners failed; retrying, the pool's jobs are dispatched meanwhile", "pool", pool.Name, "err", err)
			} else {
				d.Log.Warn("register pool failed; its jobs wait, the other pools run", "pool", pool.Name, "err", err)
			}
			failed = append(failed, pool)
		}
	}
	if err := d.nomad.stopRemovedWarm(ctx); err != nil {
		d.Log.Warn("stopping the warm runners of removed pools failed; the next leadership tries again", "err", err)
	}
	loops := []func(context.Context){d.sched.dispatchLoop, d.track.eventLoop, d.recon.cancelLoop, d.webhookLoop, d.jan.janitorLoop, d.jan.maintainLoop, d.queueMetricsLoop, d.warm.warmLoop, d.awaitsLoop, d.pipelinesLoop}
	if len(failed) > 0 {
		loops = append(loops, func(ctx context.Context) { d.nomad.retryPools(ctx, failed) })
	}
	var wg sync.WaitGroup
	for _, loop := range loops {
		wg.Add(1)
		go func() { defer wg.Done(); loop(ctx) }()
	}
	wg.Wait()
}

// RegisterPools registers every pool's parameterized job and warm runners (see
// registerPool) and stops the warm runners of pools no longer configured; it
// returns the failures, each naming its pool, after trying them all.
func (d *Dispatcher) RegisterPools() error {
	if d.nomad == nil {
		d.defaults()
	}
	var errs []error
	for _, pool := range d.Config.Pools {
		if err := d.nomad.registerPool(context.Background(), pool); err != nil {
			errs = append(errs, err)
		}
	}
	if err := d.nomad.stopRemovedWarm(context.Background()); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// links makes file URLs: the store's own when it presigns (S3), else the gateway's.
func (d *Dispatcher) links() blob.Links { return blob.Links{Store: d.Blobs, Signer: d.Signer} }

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

// Sweep runs one janitor pass as of now (janitor.go).
func (d *Dispatcher) Sweep(ctx context.Context, now time.Time) {
	if d.jan == nil {
		d.defaults()
	}
	d.jan.sweep(ctx, now)
}

// MaintainEtcd runs one etcd maintenance pass (maintenance.go).
func (d *Dispatcher) MaintainEtcd(ctx context.Context) *store.MaintainReport {
	if d.jan == nil {
		d.defaults()
	}
	return d.jan.maintainEtcd(ctx)
}
