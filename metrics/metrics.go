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
)
