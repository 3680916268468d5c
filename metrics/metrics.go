// Package metrics holds the Prometheus collectors of the gateway and the dispatcher,
// served at /metrics.
package metrics

import (
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	// HTTPRequests counts API requests by method, route pattern and status code.
	HTTPRequests = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_http_requests_total", Help: "HTTP requests by method, route and status.",
	}, []string{"method", "route", "status"})

	// HTTPDuration is the time to answer a request, by method and route pattern.
	HTTPDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Name: "mediajobs_http_request_duration_seconds", Help: "Time to answer an HTTP request.",
		Buckets: prometheus.ExponentialBuckets(0.0005, 4, 10),
	}, []string{"method", "route"})

	// JobsCreated counts created jobs by machine.
	JobsCreated = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_jobs_created_total", Help: "Jobs created, by machine.",
	}, []string{"machine"})

	// JobsFinished counts jobs reaching a terminal status, by machine and status.
	JobsFinished = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_jobs_finished_total", Help: "Jobs that reached succeeded, failed or cancelled.",
	}, []string{"machine", "status"})

	// Dispatches counts Nomad dispatches by pool and result (ok, error).
	Dispatches = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_nomad_dispatches_total", Help: "Nomad dispatches by pool and result.",
	}, []string{"pool", "result"})

	// Webhooks counts finished webhook deliveries by result (delivered, failed).
	Webhooks = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_webhook_deliveries_total", Help: "Webhook deliveries by result.",
	}, []string{"result"})

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

	// EtcdDefrags counts defragmentations by endpoint and result (ok, error).
	EtcdDefrags = promauto.NewCounterVec(prometheus.CounterOpts{
		Name: "mediajobs_etcd_defrags_total", Help: "etcd member defragmentations by endpoint and result.",
	}, []string{"endpoint", "result"})

	// EtcdAlarm is 1 while etcd has an alarm of the type (NOSPACE: the quota is
	// reached and every write is refused; CORRUPT), else 0.
	EtcdAlarm = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Name: "mediajobs_etcd_alarm", Help: "1 while etcd has an active alarm of the type (NOSPACE, CORRUPT), else 0 (leading dispatcher).",
	}, []string{"type"})
)
