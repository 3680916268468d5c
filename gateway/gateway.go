// Package gateway is the HTTP API (DESIGN.md §2): it validates and stores jobs,
// serves them, and serves the signed file URLs of the blob store. It is stateless;
// any number can run side by side against one etcd.
package gateway

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/netguard"
	"github.com/mediajobs/mediajobs/store"
	"github.com/valyala/fasthttp"
	"golang.org/x/sync/singleflight"
)

// Store is what the gateway needs of the job store: jobStore here, and the
// interfaces each feature declares beside its handlers, checked against
// *store.Store when this package compiles (contracts.go): nothing is upgraded
// at run time.
type Store interface {
	jobStore
	warmStore
	storageLimiter
	accountLimiter
	queueStanding
	usageReader
	destinationStore
	createChecker
	streamLimiter
	idempotentJobs
	pipelineStore // pipelines.go
	chunkedStore  // parallel.go
}

// jobStore keeps jobs, keys, sessions and progress.
type jobStore interface {
	CreateJob(ctx context.Context, j *mj.Job) error
	Job(ctx context.Context, id string) (*mj.Job, error)
	UpdateJob(ctx context.Context, id string, fn func(*mj.Job) error) (*mj.Job, error)
	WaitJob(ctx context.Context, id string, done func(*mj.Job) bool) (*mj.Job, error)
	ListJobs(ctx context.Context, account string, o store.ListOptions) (store.Page, error)
	CreateJobOnce(ctx context.Context, j *mj.Job, idem *store.Idempotency) (*mj.Job, error)
	APIKeyByHash(ctx context.Context, hash string) (*mj.APIKey, error)
	AddAPIKey(ctx context.Context, accountID, name, secret string) (*mj.APIKey, error)
	ListAPIKeys(ctx context.Context, accountID string) ([]*mj.APIKey, error)
	APIKeyHash(ctx context.Context, accountID, keyID string) (string, error)
	RevokeAPIKey(ctx context.Context, accountID, keyID string) error
	TouchAPIKey(ctx context.Context, hash string, t time.Time) error
	WatchRevokedKeys(ctx context.Context, fn func(hash string))
	SetWebhookSecret(ctx context.Context, accountID, secret string) error
	Account(ctx context.Context, id string) (*mj.Account, error)
	CreateSession(ctx context.Context, accountID, keyHash string, ttl time.Duration) (*store.Session, error)
	Session(ctx context.Context, id string) (*store.Session, error)
	DeleteSession(ctx context.Context, id string) error
	ConsumeLoginToken(ctx context.Context, token string, now time.Time) (*store.LoginToken, error)
	LoginToken(ctx context.Context, token string, now time.Time) (*store.LoginToken, error)
	LinksEnded(ctx context.Context, accountID string, rev int64) (bool, error)
	WatchJobs(ctx context.Context, from int64, fn func(c *store.JobChange)) error
	PutProgress(ctx context.Context, j *mj.Job, attempt int, p *mj.Progress) error
	WatchProgress(ctx context.Context, from int64, fn func(id string, rec *store.ProgressRecord, rev int64)) error
	Revision(ctx context.Context) (int64, error)
	Ping(ctx context.Context) error
}

// Blobs is what the gateway needs of the blob store.
type Blobs interface {
	Put(ctx context.Context, key string, r io.Reader, max int64) (int64, error)
	Open(ctx context.Context, key string) (io.ReadSeekCloser, int64, error)
	tmpBlobs
}

// Gateway holds the API's dependencies; App builds the fiber app on them.
type Gateway struct {
	Config *config.Config
	Store  Store
	Blobs  Blobs
	Signer blob.Signer
	Log    *slog.Logger
	Now    func() time.Time
	// Resolver checks where input and webhook hosts point (default: the system's).
	Resolver netguard.Resolver
	// Warm admits warm runners (warm.go); nil: none.
	Warm *WarmAuth
	// Uploaders checks that a runner asking for its job's output_destinations is
	// the Nomad allocation running the job (uploads.go); nil: Warm's verifier,
	// if any, which admits warm runners and dispatched runners whose allocation
	// the job records.
	Uploaders *UploaderAuth

	keys     keyCache
	limiters sync.Map // account id -> *rate.Limiter
	// failures limits failed authentications per client address; badKeys and
	// badSessions remember credentials just found bad (authlimit.go).
	failures    failureLimiter
	authFlight  singleflight.Group // authKey's lookups of one uncached key, shared
	badKeys     badCreds
	badSessions badCreds
	proxies     []netip.Prefix // server.trusted_proxies
	progressAt  sync.Map       // job id -> time.Time of the last stored progress
	// progressPruned is when progressAt was last pruned (unix ns).
	progressPruned atomic.Int64
	jobs           jobCache
	standing       standingCache      // heads of queues, for queued jobs' standing (standing.go)
	standingFlight singleflight.Group // its reads of one head, shared
	// hub wakes event streams (events.go); streams ends them all at shutdown.
	hub         eventHub
	streamsOnce sync.Once
	streams     context.Context
	stopStreams context.CancelFunc
	cspOnce     sync.Once
	csp         string
	times       streamTimes // zero: defaultStreamTimes (events.go)
}

// App returns the fiber app serving the whole API.
func (g *Gateway) App() *fiber.App {
	if g.Now == nil {
		g.Now = time.Now
	}
	if g.Log == nil {
		g.Log = slog.Default()
	}
	if g.Resolver == nil {
		g.Resolver = net.DefaultResolver
	}
	app := fiber.New(fiber.Config{
		AppName:               "mediajobs",
		DisableStartupMessage: true,
		ErrorHandler:          g.errorHandler,
		// Uploads stream into the blob store; JSON bodies are checked against
		// max_body_bytes by the handlers themselves.
		StreamRequestBody: true,
		// Otherwise fasthttp reads a multipart/form-data body into memory and temp
		// files before routing, ignoring BodyLimit and before the signature check;
		// no handler wants a parsed form, and uploads must stream as sent.
		DisablePreParseMultipartForm: true,
		BodyLimit:                    bodyLimit(g.Config.Server.MaxUploadBytes),
		// A request's line and headers are read within header_timeout; its body,
		// a large upload's included, within upload_timeout from then (HeaderReceived
		// below). An idle keep-alive connection is closed after IdleTimeout.
		ReadTimeout: g.Config.Server.HeaderTimeoutD,
		IdleTimeout: 2 * time.Minute,
	})
	g.proxies = parseProxies(g.Config.Server.TrustedProxies)
	// A graceful shutdown answers the requests in flight with "Connection: close".
	app.Server().CloseOnShutdown = true
	// fasthttp calls this once the headers are in, and moves the connection's read
	// deadline to upload_timeout from then: the body has that long (docs/configuration.md).
	app.Server().HeaderReceived = func(h *fasthttp.RequestHeader) fasthttp.RequestConfig {
		if cl := h.ContentLength(); cl == 0 || cl == -2 {
			// No body (-2: neither a length nor chunked; fasthttp reads none):
			// nothing is left to read, and moving the deadline would cost a
			// timer change at every GET.
			return fasthttp.RequestConfig{}
		}
		return fasthttp.RequestConfig{ReadTimeout: g.Config.Server.UploadTimeoutD}
	}
	app.Server().Handler = g.keepInStep(app.Server().Handler)
	g.routes(app)
	return app
}

// keepInStep serves a request with next, then reads and discards whatever of its
// body next left unread, before the answer is sent: with StreamRequestBody fasthttp
// leaves an unread body (all of a chunked one, past the first 8 KiB of one with a
// Content-Length) on the connection, where it would be parsed as the next request
// ("cannot find http request method in "0\r\n\r\n"" for the empty chunked body
// of a bodyless POST). Reading it first also lets a client that sends its whole
// body before reading (most do) get the answer rather than a reset connection.
// The discarding is bounded (drainLimit bytes, drainTime, and the request's
// upload_timeout); a body that does not end within them, or whose reading failed,
// closes the connection after the answer instead.
func (g *Gateway) keepInStep(next fasthttp.RequestHandler) fasthttp.RequestHandler {
	return func(ctx *fasthttp.RequestCtx) {
		next(ctx)
		if ctx.Request.IsBodyStream() && !discardBody(ctx, g.Config.Server.UploadTimeoutD) {
			ctx.SetConnectionClose()
		}
	}
}

// discardBody reads and discards what is left of ctx's streamed request body, and
// reports whether it reached the body's end (so the connection may serve another
// request).
func discardBody(ctx *fasthttp.RequestCtx, uploadTimeout time.Duration) bool {
	b := streamOf(ctx)
	if b.err != nil {
		return b.err == io.EOF
	}
	if cl := ctx.Request.Header.ContentLength(); cl > drainLimit {
		return false // nothing read in vain
	}
	// The request's own read deadline (upload_timeout from its start) still holds;
	// the draining gets at most drainTime of it. The next request on the connection
	// gets its own deadline from the server.
	deadline := time.Now().Add(drainTime)
	if d := ctx.Time().Add(uploadTimeout); uploadTimeout > 0 && d.Before(deadline) {
		deadline = d
	}
	if conn := ctx.Conn(); conn != nil {
		conn.SetReadDeadline(deadline)
	}
	n, err := io.CopyN(io.Discard, b, drainLimit+1)
	return err == io.EOF && n <= drainLimit
}

// streamedBody is a request's streamed body that remembers how its reading
// ended: fasthttp's chunked stream, read again after its end, would read the next
// request's bytes as a chunk.
type streamedBody struct {
	r   io.Reader
	err error // io.EOF once the body has ended, or the error that cut it short
}

func (b *streamedBody) Read(p []byte) (int, error) {
	if b.err != nil {
		return 0, b.err
	}
	n, err := b.r.Read(p)
	if err != nil {
		b.err = err
	}
	return n, err
}

// streamKey holds a request's *streamedBody among its fasthttp user values.
type streamKey struct{}

// streamOf is ctx's streamed request body (nil when fasthttp holds it in memory
// or there is none), the same one on every call.
func streamOf(ctx *fasthttp.RequestCtx) *streamedBody {
	if !ctx.Request.IsBodyStream() {
		return nil
	}
	if b, ok := ctx.UserValue(streamKey{}).(*streamedBody); ok {
		return b
	}
	b := &streamedBody{r: ctx.RequestBodyStream()}
	ctx.SetUserValue(streamKey{}, b)
	return b
}

// requestBody is c's request body as it streams in, or nil when it is in memory
// (c.Body()). Every handler reads a streamed body through it, never through
// fasthttp's RequestBodyStream, so that keepInStep knows where the reading ended.
func requestBody(c *fiber.Ctx) io.Reader {
	if b := streamOf(c.Context()); b != nil {
		return b
	}
	return nil
}

func bodyLimit(n int64) int {
	if n <= 0 || n > int64(^uint32(0)>>1) {
		return int(^uint32(0) >> 1)
	}
	return int(n)
}

// errorHandler is the one place that maps errors to HTTP. Domain errors keep their
// code and message; anything else is logged and reported as unknownError.
func (g *Gateway) errorHandler(c *fiber.Ctx, err error) error {
	e := clientError(err)
	if e.Code == mj.EInternal {
		g.Log.Error("request failed", "request_id", requestID(c), "method", c.Method(), "path", c.Path(), "err", err)
	}
	// Whatever the handler left of the request's body (a refused upload, a JSON
	// body over max_body_bytes) is read after this answer is made and before it is
	// sent (keepInStep).
	if (e.Code == mj.ETooManyRequests || e.Code == mj.EUnavailable) && c.GetRespHeader(fiber.HeaderRetryAfter) == "" {
		c.Set(fiber.HeaderRetryAfter, "1")
	}
	body := fiber.Map{"errorCode": e.Code, "message": e.Message}
	if len(e.Details) > 0 {
		body["details"] = e.Details
	}
	return c.Status(httpStatus(e.Code)).JSON(body)
}

// clientError is what a client is told of err: domain errors as they are, a few
// known causes by name, anything else as unknownError (the detail goes to the log).
func clientError(err error) *mj.Error {
	var e *mj.Error
	var fe *fiber.Error
	switch {
	case errors.As(err, &e) && e.Code != mj.EInternal:
		return e
	case errors.As(err, &fe):
		return fiberError(fe)
	case errors.Is(err, blob.ErrTooLarge):
		return mj.Errorf(mj.EPayloadTooLarge, "the upload exceeds max_upload_bytes")
	case errors.Is(err, os.ErrDeadlineExceeded):
		return errSlowBody
	case errors.Is(err, context.DeadlineExceeded):
		return mj.Errorf(mj.EUnavailable, "the request took too long; try again")
	case store.Transient(err):
		return errStoreBusy
	}
	return mj.Errorf(mj.EInternal, "internal error; the server log has details")
}

// statusOf is the HTTP status the error handler will give err.
func statusOf(err error) int { return httpStatus(clientError(err).Code) }

func httpStatus(code string) int {
	switch code {
	case mj.EValidation:
		return fiber.StatusBadRequest
	case mj.EBadAPIKey:
		return fiber.StatusUnauthorized
	case mj.EForbidden:
		return fiber.StatusForbidden
	case mj.ENotFound:
		return fiber.StatusNotFound
	case mj.EConflict:
		return fiber.StatusConflict
	case mj.EPayloadTooLarge:
		return fiber.StatusRequestEntityTooLarge
	case mj.ETooManyRequests, mj.EQuotaExceeded:
		return fiber.StatusTooManyRequests
	case mj.EUnavailable:
		return fiber.StatusServiceUnavailable
	}
	return fiber.StatusInternalServerError
}

var errStoreBusy = mj.Errorf(mj.EUnavailable, "the job store (etcd) is electing a leader or lost a member; try again in a moment")

var errSlowBody = mj.Errorf(mj.EValidation, "the request did not arrive in time (its headers within server.header_timeout, its body within server.upload_timeout); send it faster, or in smaller files")

func fiberError(fe *fiber.Error) *mj.Error {
	switch fe.Code {
	case fiber.StatusNotFound:
		return mj.Errorf(mj.ENotFound, "no such route")
	case fiber.StatusMethodNotAllowed:
		return mj.Errorf(mj.ENotFound, "no such route for this method")
	case fiber.StatusRequestEntityTooLarge:
		return mj.Errorf(mj.EPayloadTooLarge, "request body too large")
	case fiber.StatusBadRequest:
		return mj.Errorf(mj.EValidation, "%s", fe.Message)
	case fiber.StatusRequestTimeout:
		return errSlowBody
	}
	if fe.Code >= 500 {
		return mj.Errorf(mj.EInternal, "%s", fe.Message)
	}
	return mj.Errorf(mj.EValidation, "%s", fe.Message)
}
