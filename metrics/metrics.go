// Package metrics holds the Prometheus collectors of the gateway and the dispatcher,
// served at /metrics (see docs/operations.md, "Metrics and alerts").
//
// The dispatcher's series without labels are vectors with no label names: a vector
// exports nothing until WithLabelValues() is called, so a gateway-only process does
// not show a misleading mediajobs_dispatcher_leader 0 or outbox depth 0. The leading
// dispatcher's gauges (queue, outbox, etcd) are dropped when it stops leading, so
// only the leader reports them.
package metrics

import (
	"net/http"
	"runtime"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// Retry reasons (mediajobs_job_retries_total's reason label): why an attempt ended
// without a result and the job was queued again as a new attempt.
const (
	RetryNodeLost         = "node_lost"         // Nomad lost the node (allocation lost)
	RetryNodeDisconnected = "node_disconnected" // the node stopped heartbeating for disconnect_grace
	RetryWorkerCrashed    = "worker_crashed"    // the allocation ended without reporting a result
	RetryStartTimeout     = "start_timeout"     // placed but not started within start_timeout
	RetryVanished         = "nomad_job_vanished"
)

var (
	// HTTPRequests counts API requests by method, route pattern and status code.
	HTTPRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_http_requests_total", Help: "HTTP requests by method, route and status.",
	}, []string{"method", "route", "status"})

	// HTTPDuration is the time to answer a request, by method and route pattern;
	// long polls (?wait=true) are in HTTPLongPoll instead.
	HTTPDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mediajobs_http_request_duration_seconds", Help: "Time to answer an HTTP request (long polls, ?wait=true, excluded: see mediajobs_http_long_poll_duration_seconds).",
		Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60},
	}, []string{"method", "route"})

	// HTTPLongPoll is the time to answer a long poll (POST /api/ffmpeg?wait=true),
	// which waits for the job up to server.wait_limit by design.
	HTTPLongPoll = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mediajobs_http_long_poll_duration_seconds", Help: "Time to answer a long poll (?wait=true), which waits up to server.wait_limit.",
		Buckets: []float64{.1, .25, .5, 1, 2.5, 5, 10, 15, 20, 25, 30, 45, 60, 120},
	}, []string{"method", "route"})

	// JobsCreated counts created jobs by pool.
	JobsCreated = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_jobs_created_total", Help: "Jobs created, by pool.",
	}, []string{"pool"})

	// JobsFinished counts jobs reaching a terminal status, by pool and status.
	JobsFinished = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_jobs_finished_total", Help: "Jobs that reached succeeded, failed or cancelled, by pool and status.",
	}, []string{"pool", "status"})

	// QueueWait is how long finished jobs waited from queued_at to started_at.
	QueueWait = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mediajobs_queue_wait_seconds", Help: "Time from queued to started of the jobs that started, observed when they finish, by pool.",
		Buckets: []float64{.25, .5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 21600},
	}, []string{"pool"})

	// RunTime is how long finished jobs ran, from started_at to finished_at.
	RunTime = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mediajobs_run_seconds", Help: "Time from started to finished of the jobs that started (every attempt included), by pool.",
		Buckets: []float64{.5, 1, 2, 5, 10, 30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400, 21600},
	}, []string{"pool"})

	// JobsQueued and JobsRunning are the leading dispatcher's periodic counts of a
	// pool's queue (waiting in etcd for a dispatch) and active set (a Nomad child
	// in flight: waiting for a node, starting or running).
	JobsQueued = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_jobs_queued", Help: "Jobs waiting in the dispatch queue, not yet handed to Nomad, by pool (leading dispatcher).",
	}, []string{"pool"})
	JobsRunning = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_jobs_running", Help: "Jobs handed to Nomad and not finished (waiting for a node, starting or running), by pool (leading dispatcher).",
	}, []string{"pool"})
	// WarmIdle and WarmBusy count a warm pool's runners waiting for a job and
	// holding one (docs/warm.md): what an autoscaler policy on the warm job reads.
	WarmIdle = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_warm_runners_idle", Help: "Warm runners waiting for a job, by pool (leading dispatcher).",
	}, []string{"pool"})
	WarmBusy = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_warm_runners_busy", Help: "Warm runners holding a job's lease, by pool (leading dispatcher).",
	}, []string{"pool"})
	// OldestQueued is the age of the oldest job in a pool's dispatch queue.
	OldestQueued = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_oldest_queued_seconds", Help: "Age (since queued_at) of the oldest job in the dispatch queue, 0 when it is empty, by pool (leading dispatcher).",
	}, []string{"pool"})

	// JobRetries counts attempts that ended without a result and were queued again.
	JobRetries = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_job_retries_total", Help: "Attempts retried as a new attempt, by pool and reason (node_lost, node_disconnected, worker_crashed, start_timeout, nomad_job_vanished).",
	}, []string{"pool", "reason"})

	// PlacementFailures counts placement failures recorded on jobs: cause
	// "capacity" (nodes that could run it are busy: it waits) or "infeasible" (no
	// node can run it: the queue limit fails it).
	PlacementFailures = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_placement_failures_total", Help: "Nomad placement failures recorded on jobs (each new reason), by pool and cause (capacity, infeasible).",
	}, []string{"pool", "cause"})

	// Dispatches counts Nomad dispatches by pool and result (ok, error).
	Dispatches = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_nomad_dispatches_total", Help: "Nomad dispatches by pool and result (ok, error; warm: a job handed to a warm runner instead).",
	}, []string{"pool", "result"})

	// DispatcherLeader is 1 while this dispatcher leads, else 0.
	DispatcherLeader = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_dispatcher_leader", Help: "1 while this dispatcher is the leader, else 0.",
	}, nil)
	// LeadershipChanges counts the times this dispatcher became the leader.
	LeadershipChanges = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_dispatcher_leadership_changes_total", Help: "Times this dispatcher became the leader.",
	}, nil)

	// EventStreamReconnects counts reconnects of Nomad's event stream (after a
	// break, a silence or a refusal) while leading.
	EventStreamReconnects = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_nomad_event_stream_reconnects_total", Help: "Reconnects of the Nomad event stream.",
	}, nil)

	// ReconcileCorrections counts what a reconcile pass found the event stream had
	// missed: kind allocation (an allocation's state), placement (why it waits),
	// vanished (a child Nomad no longer knows), stray (a child no job wants, stopped).
	ReconcileCorrections = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_reconcile_corrections_total", Help: "Changes made by reconcile that the event stream had not made, by kind (allocation, placement, vanished, stray).",
	}, []string{"kind"})

	// DispatcherPanics counts panics the dispatcher recovered from while handling a
	// job (the job failed with an internal error; the log has the stack).
	DispatcherPanics = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_dispatcher_panics_total", Help: "Panics the dispatcher recovered from while handling a job; each failed its job with an internal error (the log has the stack).",
	}, nil)

	// UnreadableJobs counts job records skipped because they could not be decoded
	// (written by a newer version, or damaged); the log names each key.
	UnreadableJobs = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_store_unreadable_jobs_total", Help: "Job records skipped by a listing because they could not be decoded (a newer version's record, or a damaged one); the log names the key.",
	}, nil)

	// BlobErrors counts the dispatcher's blob store calls that failed or ran past
	// their deadline, by operation (read, list, put, sweep).
	BlobErrors = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_dispatcher_blob_errors_total", Help: "Dispatcher blob store calls that failed or ran past their deadline, by operation (read, list, put, sweep).",
	}, []string{"op"})

	// OutboxDepth is how many webhook deliveries are pending in the etcd outbox.
	OutboxDepth = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_outbox_depth", Help: "Webhook deliveries pending in the etcd outbox (leading dispatcher).",
	}, nil)

	// Webhooks counts settled webhook deliveries by outcome (delivered, failed:
	// every attempt failed).
	Webhooks = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_webhook_deliveries_total", Help: "Settled webhook deliveries by outcome (delivered, failed).",
	}, []string{"outcome"})

	// WebhookLatency is the time from a job's end to its webhook delivery settling.
	WebhookLatency = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mediajobs_webhook_delivery_seconds", Help: "Time from a job's end to its webhook delivery settling (retries included), by outcome.",
		Buckets: []float64{.05, .1, .25, .5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600},
	}, []string{"outcome"})

	// EtcdDBSize is each etcd member's database file size, by client endpoint, as
	// the leading dispatcher last read it.
	EtcdDBSize = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_etcd_db_size_bytes", Help: "Size of each etcd member's database file, by endpoint (leading dispatcher).",
	}, []string{"endpoint"})

	// EtcdDBSizeInUse is the part of EtcdDBSize that holds data; the rest is free
	// space a defragmentation gives back.
	EtcdDBSizeInUse = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_etcd_db_size_in_use_bytes", Help: "Bytes of each etcd member's database that hold data, by endpoint (leading dispatcher).",
	}, []string{"endpoint"})

	// EtcdQuota is etcd.quota_backend_bytes: past it etcd raises NOSPACE.
	EtcdQuota = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_etcd_quota_backend_bytes", Help: "etcd's backend quota as configured (etcd.quota_backend_bytes); a member's database past it raises NOSPACE (leading dispatcher).",
	}, nil)

	// EtcdDefrags counts defragmentations by endpoint and result (ok, error).
	EtcdDefrags = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_etcd_defrags_total", Help: "etcd member defragmentations by endpoint and result.",
	}, []string{"endpoint", "result"})

	// EtcdAlarm is 1 while etcd has an alarm of the type (NOSPACE: the quota is
	// reached and every write is refused; CORRUPT), else 0.
	EtcdAlarm = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_etcd_alarm", Help: "1 while etcd has an active alarm of the type (NOSPACE, CORRUPT), else 0 (leading dispatcher).",
	}, []string{"type"})

	// BuildInfo is 1, labelled with the build's version and Go version.
	BuildInfo = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_build_info", Help: "Always 1; the labels say which build runs (version: mediajobs.Version, set with -ldflags -X).",
	}, []string{"version", "goversion"})
)

func init() {
	BuildInfo.WithLabelValues(mj.Version, runtime.Version()).Set(1)
}

// Finished records a job that just reached a terminal status: the count by pool
// and status, its usage when its result was applied (usage.go), and, when it
// started, its queue wait and run time.
func Finished(j *mj.Job) {
	JobsFinished.WithLabelValues(j.Machine, string(j.Status)).Inc()
	metered(j) // usage.go
	if j.StartedAt == nil {
		return
	}
	if !j.QueuedAt.IsZero() {
		QueueWait.WithLabelValues(j.Machine).Observe(max(j.StartedAt.Sub(j.QueuedAt), 0).Seconds())
	}
	end := time.Now()
	if j.FinishedAt != nil {
		end = *j.FinishedAt
	}
	RunTime.WithLabelValues(j.Machine).Observe(max(end.Sub(*j.StartedAt), 0).Seconds())
}

// Handler serves every collector of this process in Prometheus' text format.
func Handler() http.Handler { return promhttp.Handler() }
