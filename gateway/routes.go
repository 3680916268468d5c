package gateway

import (
	"context"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/adaptor"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// routes lists every route of the API in one place.
func (g *Gateway) routes(app *fiber.App) {
	// accessLog first: it sees every request, gives it its id and answers errors;
	// recoverer last, so a panic still counts in measure.
	app.Use(securityHeaders, g.accessLog, cleanPath, g.withContext, measure, g.recoverer())

	app.Get("/healthz", func(c *fiber.Ctx) error { return c.JSON(fiber.Map{"status": "ok"}) })
	app.Get("/readyz", g.readyz)
	if g.Config.Server.MetricsListen == "" {
		// Else /metrics is served on server.metrics_listen only (cmd/mediajobs).
		app.Get("/metrics", adaptor.HTTPHandler(promhttp.Handler()))
	}

	// Signed links: the signature is the credential, no API key.
	app.Get("/files/*", g.download)
	app.Put("/files/*", g.upload)
	app.Post("/progress/*", g.progress)      // runners report progress (signed per attempt)
	app.Post("/upload-urls/*", g.uploadURLs) // runners ask where to upload (signed per attempt)
	// Warm runners lease jobs with their Nomad workload identity (warm.go).
	app.Post("/warm/poll", g.warmPoll)
	app.Post("/warm/renew", g.warmRenew)
	app.Post("/warm/done", g.warmDone)

	// The dashboard: its page and assets (dashboard.go), its session (session.go).
	app.Get("/", func(c *fiber.Ctx) error { return c.Redirect("/dashboard/", fiber.StatusFound) })
	app.Post("/dashboard/session", g.signIn)
	app.Get("/dashboard/session", g.getSession)
	app.Delete("/dashboard/session", g.signOut)
	app.Get("/dashboard/login", g.loginLink)
	app.Post("/dashboard/login", g.loginLinkConfirm)

	app.Get("/api/openapi.json", g.openapi) // public: the API's description
	app.Get("/api/docs", g.apiDocs)         // public: the description, readable (Redoc)
	app.Get("/api/docs/:asset", g.apiDocsAsset)
	app.Get("/dashboard/", g.dashboard) // the dashboard: the page, then the JSON API
	app.Get("/dashboard/assets/*", g.dashboard)

	api := app.Group("/api", g.authenticate)
	api.Post("/ffmpeg", g.createJob)
	api.Post("/jobs", g.createJob)
	api.Get("/jobs", g.listJobs)
	api.Get("/jobs/:id", g.getJob)
	api.Get("/jobs/:id/events", g.jobEvents) // server-sent events until the job ends
	api.Get("/events", g.accountEvents)      // server-sent events of every job of the account
	api.Post("/jobs/:id/cancel", g.cancelJob)
	api.Post("/pipelines", g.createPipeline) // steps of jobs as one request (pipelines.go)
	api.Get("/pipelines", g.listPipelines)
	api.Get("/pipelines/:id", g.getPipeline)
	api.Get("/pipelines/:id/events", g.pipelineEvents) // server-sent events until it ends (pipeline_events.go)
	api.Post("/pipelines/:id/cancel", g.cancelPipeline)
	api.Post("/tmp-file", g.createTmpFile)
	api.Get("/account", g.getAccount) // the account's limits and use (docs/limits.md)
	api.Get("/usage", g.getUsage)     // the account's metered usage (usage.go)
	api.Get("/keys", g.listKeys)
	api.Post("/keys", g.createKey)
	api.Delete("/keys/:id", g.revokeKey)
	api.Post("/webhook-secret", g.setWebhookSecret)
	api.Delete("/webhook-secret", g.deleteWebhookSecret)
}

// cleanPath collapses repeated slashes ("/api//ffmpeg" from a base URL with a
// trailing slash) instead of redirecting: clients turn a redirected POST into a GET.
func cleanPath(c *fiber.Ctx) error {
	if p := c.Path(); strings.Contains(p, "//") {
		for strings.Contains(p, "//") {
			p = strings.ReplaceAll(p, "//", "/")
		}
		c.Path(p)
	}
	return c.Next()
}

// withContext gives each request a real context with a deadline; fiber's default
// UserContext is context.Background().
func (g *Gateway) withContext(c *fiber.Ctx) error {
	r := requestOf(c)
	start := r.start // accessLog's
	if start.IsZero() {
		start = time.Now()
	}
	ctx := &r.ctx
	ctx.deadline = start.Add(g.Config.Server.RequestTimeoutD)
	defer ctx.end()
	c.SetUserContext(ctx)
	return c.Next()
}

// requestContext is a request's context: canceled when the request ends, and
// at its deadline. The timer and channel that takes are made only once
// something waits on it (Done, or a context derived from it: an etcd call);
// most requests (a job from the cache) never do.
type requestContext struct {
	deadline time.Time
	mu       sync.Mutex
	inner    atomic.Pointer[context.Context] // made by Done
	cancel   context.CancelFunc
	ended    bool
}

// ctx is the context that does the work, made on first use.
func (c *requestContext) ctx() context.Context {
	if p := c.inner.Load(); p != nil {
		return *p
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.inner.Load(); p != nil {
		return *p
	}
	ctx, cancel := context.WithDeadline(context.Background(), c.deadline)
	if c.ended {
		cancel()
	}
	c.cancel = cancel
	c.inner.Store(&ctx)
	return ctx
}

func (c *requestContext) Deadline() (time.Time, bool) { return c.deadline, true }
func (c *requestContext) Done() <-chan struct{}       { return c.ctx().Done() }

func (c *requestContext) Err() error {
	if p := c.inner.Load(); p != nil {
		return (*p).Err()
	}
	c.mu.Lock()
	ended := c.ended
	c.mu.Unlock()
	switch {
	case c.inner.Load() != nil:
		return (*c.inner.Load()).Err()
	case ended:
		return context.Canceled
	case !time.Now().Before(c.deadline):
		return context.DeadlineExceeded
	}
	return nil
}

// Value is the inner context's (none of its own): a context derived from this
// one finds the inner's cancellation there, as from any context.WithDeadline,
// once Done has made it (the context package asks Done first).
func (c *requestContext) Value(key any) any {
	if p := c.inner.Load(); p != nil {
		return (*p).Value(key)
	}
	return nil
}

func (c *requestContext) String() string { return "gateway.requestContext" }

// end cancels the context: the request is over.
func (c *requestContext) end() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended = true
	if c.cancel != nil {
		c.cancel()
	}
}

func (g *Gateway) readyz(c *fiber.Ctx) error {
	ctx, cancel := context.WithTimeout(c.UserContext(), 2e9)
	defer cancel()
	if err := g.Store.Ping(ctx); err != nil {
		// The cause goes to the log; the answer (unauthenticated) names no internals.
		g.Log.Warn("not ready: etcd is not reachable", "request_id", requestID(c), "err", err)
		return c.Status(fiber.StatusServiceUnavailable).JSON(fiber.Map{"errorCode": "unavailable", "message": "not ready: the job store is not reachable"})
	}
	return c.JSON(fiber.Map{"status": "ready"})
}

// measure records each request's count and duration by route pattern (not path,
// which would make a series per job id). A long poll (?wait=true) waits for the
// job by design: its duration goes to a histogram of its own.
func measure(c *fiber.Ctx) error {
	start := time.Now()
	longPoll := c.Method() == fiber.MethodPost && c.Query("wait") == "true" // createJob's wait
	err := c.Next()
	route := c.Route().Path
	status := c.Response().StatusCode()
	if err != nil {
		// The error handler has not run yet; classify by the error's HTTP status.
		status = statusOf(err)
	}
	m := seriesOf(c.Method(), route, status, longPoll)
	m.count.Inc()
	m.duration.Observe(time.Since(start).Seconds())
	return err
}

// series are the metrics measure adds to, for one method, route, status and
// kind of request: looked up once, not at every request (hashing the labels).
type series struct {
	count    prometheus.Counter
	duration prometheus.Observer
}

type seriesKey struct {
	method, route string
	status        int
	longPoll      bool
}

// seriesBy holds the series made so far, as a map that is replaced, never
// changed: a request reads it without a lock (a read-locked RWMutex is an
// atomic write that every request's core fights over).
var (
	seriesMu sync.Mutex // makers of new series
	seriesBy atomic.Pointer[map[seriesKey]*series]
)

func seriesOf(method, route string, status int, longPoll bool) *series {
	k := seriesKey{method, route, status, longPoll}
	if p := seriesBy.Load(); p != nil {
		if m := (*p)[k]; m != nil {
			return m
		}
	}
	seriesMu.Lock()
	defer seriesMu.Unlock()
	var old map[seriesKey]*series
	if p := seriesBy.Load(); p != nil {
		old = *p
	}
	if m := old[k]; m != nil {
		return m
	}
	// fiber's strings alias fasthttp's reused buffers: copy what outlives the request.
	k.method, k.route = strings.Clone(method), strings.Clone(route)
	m := &series{count: metrics.HTTPRequests.WithLabelValues(k.method, k.route, strconv.Itoa(status))}
	if longPoll {
		m.duration = metrics.HTTPLongPoll.WithLabelValues(k.method, k.route)
	} else {
		m.duration = metrics.HTTPDuration.WithLabelValues(k.method, k.route)
	}
	next := make(map[seriesKey]*series, len(old)+1) // as many as the metrics have series
	for k, v := range old {
		next[k] = v
	}
	next[k] = m
	seriesBy.Store(&next)
	return m
}
