package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// observeStore is what the queue gauges and readiness read of the store,
// besides the scheduler's queue index.
type observeStore interface {
	Count(ctx context.Context, prefix string) (int, error)
	PoolActivePrefix(pool string) string
	OutboxPrefix() string
	WarmIdlePrefix(pool string) string
	WarmRunPrefix() string
	Healthy(ctx context.Context) error
}

// queueMetricsEvery is how often the leader counts the queue, the active set and
// the outbox for the gauges.
const queueMetricsEvery = 10 * time.Second

// readyTimeout bounds one readiness check (etcd and Nomad together).
const readyTimeout = 2 * time.Second

// queueMetricsLoop keeps the queue gauges while this dispatcher leads, and drops
// them when leadership ends, so only the leader reports them.
func (d *Dispatcher) queueMetricsLoop(ctx context.Context) {
	defer func() {
		metrics.JobsQueued.Reset()
		metrics.JobsRunning.Reset()
		metrics.OldestQueued.Reset()
		metrics.OutboxDepth.Reset()
		metrics.WarmIdle.Reset()
		metrics.WarmBusy.Reset()
	}()
	for {
		d.countQueues(ctx)
		select {
		case <-ctx.Done():
			return
		case <-time.After(queueMetricsEvery):
		}
	}
}

// countQueues sets the queue gauges: per pool, the jobs queued as the queue
// index counts them (no read of the queue), the oldest queued from the first
// key of each account's part of the queue (each first in first out: one key per
// account with queued jobs), and one count of the active set; one count of the
// outbox. A failed read leaves the gauges as they were until the next pass.
func (d *Dispatcher) countQueues(ctx context.Context) {
	fs := d.st()
	ctx, cancel := context.WithTimeout(ctx, queueMetricsEvery)
	defer cancel()
	qi := d.sched.queueIndex(fs)
	if qi.Sync(ctx) != nil {
		return
	}
	now := time.Now()
	for _, pool := range d.Config.Pools {
		queued, legacy := qi.Pool(pool.Name)
		first := make(map[string]int, len(queued))
		total := len(legacy)
		for a, n := range queued {
			first[a], total = 1, total+n
		}
		heads, err := fs.QueueHeads(ctx, pool.Name, first)
		if err != nil {
			return
		}
		oldest := 0.0
		for _, q := range heads {
			if len(q) > 0 {
				oldest = max(oldest, now.Sub(q[0].QueuedAt).Seconds())
			}
		}
		for _, k := range legacy {
			if at, ok := store.QueuedAtFromKey(k); ok {
				oldest = max(oldest, now.Sub(at).Seconds())
			}
		}
		running, err := d.st().Count(ctx, d.st().PoolActivePrefix(pool.Name))
		if err != nil {
			return
		}
		metrics.JobsQueued.WithLabelValues(pool.Name).Set(float64(total))
		metrics.OldestQueued.WithLabelValues(pool.Name).Set(oldest)
		metrics.JobsRunning.WithLabelValues(pool.Name).Set(float64(running))
		if ws := d.st(); pool.Warm != nil {
			idle, ierr := d.st().Count(ctx, ws.WarmIdlePrefix(pool.Name))
			busy, berr := d.st().Count(ctx, ws.WarmRunPrefix()+pool.Name+"/")
			if ierr == nil && berr == nil {
				metrics.WarmIdle.WithLabelValues(pool.Name).Set(float64(idle))
				metrics.WarmBusy.WithLabelValues(pool.Name).Set(float64(busy))
			}
		}
	}
	if n, err := d.st().Count(ctx, d.st().OutboxPrefix()); err == nil {
		metrics.OutboxDepth.WithLabelValues().Set(float64(n))
	}
}

// Why a dispatcher is not ready: the fixed texts /readyz answers with.
var (
	errNoSession = errors.New("no etcd session")
	errEtcdDown  = errors.New("etcd is not reachable")
	errNomadDown = errors.New("nomad is not reachable")
)

// Ready reports whether this dispatcher can do its work, leading or standing by:
// it holds a live etcd session (it campaigns or leads), etcd answers (with a
// leader), and Nomad answers a cheap job list with this dispatcher's token.
// Leadership is not a condition: a standby is ready to take over
// (mediajobs_dispatcher_leader says who leads).
func (d *Dispatcher) Ready(ctx context.Context) error {
	s := d.session.Load()
	if s == nil {
		return errNoSession
	}
	select {
	case <-s.Done():
		return errNoSession
	default:
	}
	ctx, cancel := context.WithTimeout(ctx, readyTimeout)
	defer cancel()
	if err := d.Store.Healthy(ctx); err != nil {
		return fmt.Errorf("%w: %w", errEtcdDown, err)
	}
	q := &api.QueryOptions{Region: d.Config.Nomad.Region, Namespace: d.Config.Nomad.Namespace, Prefix: "mediajobs-", PerPage: 1}
	if _, _, err := d.Jobs.List(q.WithContext(ctx)); err != nil {
		return fmt.Errorf("%w: %w", errNomadDown, err)
	}
	return nil
}

// checkReady is Ready, logging when the answer changes (the error's text goes to
// the log, never into an HTTP answer).
func (d *Dispatcher) checkReady(ctx context.Context) error {
	err := d.Ready(ctx)
	if was := d.ready.Swap(err == nil); was != (err == nil) {
		log := d.Log
		if log == nil { // Handler may serve before Run set the defaults
			log = slog.Default()
		}
		if err != nil {
			log.Warn("dispatcher not ready", "err", err)
		} else {
			log.Info("dispatcher ready")
		}
	}
	return err
}

// Handler serves the dispatcher's listener (dispatcher.listen): /metrics (every
// collector of this process, plus mediajobs_dispatcher_ready, checked at each
// scrape), /healthz (the process answers) and /readyz (Ready: 200, or 503 with a
// fixed reason). No answer carries an internal error's text.
func (d *Dispatcher) Handler() http.Handler {
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "mediajobs_dispatcher_ready",
		Help: "1 when this dispatcher is ready (etcd session alive, etcd and Nomad reachable), else 0; checked at each scrape.",
	}, func() float64 {
		if d.checkReady(context.Background()) != nil {
			return 0
		}
		return 1
	}))
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(prometheus.Gatherers{prometheus.DefaultGatherer, reg}, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		writeJSONStatus(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, r *http.Request) {
		err := d.checkReady(r.Context())
		if err == nil {
			writeJSONStatus(w, http.StatusOK, map[string]string{"status": "ready"})
			return
		}
		why := errNoSession
		for _, e := range []error{errEtcdDown, errNomadDown} {
			if errors.Is(err, e) {
				why = e
			}
		}
		writeJSONStatus(w, http.StatusServiceUnavailable, map[string]string{"errorCode": "unavailable", "message": "not ready: " + why.Error()})
	})
	return mux
}

func writeJSONStatus(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(status)
	json.NewEncoder(w).Encode(v)
}
