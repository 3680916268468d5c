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
)

// Store is what the gateway needs of the job store.
type Store interface {
	CreateJob(ctx context.Context, j *mj.Job) error
	Job(ctx context.Context, id string) (*mj.Job, error)
	UpdateJob(ctx context.Context, id string, fn func(*mj.Job) error) (*mj.Job, error)
	WaitJob(ctx context.Context, id string, done func(*mj.Job) bool) (*mj.Job, error)
	ListJobs(ctx context.Context, account string, o store.ListOptions) (store.Page, error)
	CreateJobOnce(ctx context.Context, j *mj.Job, idem *store.Idempotency) (*mj.Job, error)
	APIKeyByHash(ctx context.Context, hash string) (*mj.APIKey, error)
	AddAPIKey(ctx context.Context, accountID, name, secret string) (*mj.APIKey, error)
	ListAPIKeys(ctx context.Context, accountID string) ([]*mj.APIKey, error)
	RevokeAPIKey(ctx context.Context, accountID, keyID string) error
	TouchAPIKey(ctx context.Context, hash string, t time.Time) error
	WatchRevokedKeys(ctx context.Context, fn func(hash string))
	SetWebhookSecret(ctx context.Context, accountID, secret string) error
	Account(ctx context.Context, id string) (*mj.Account, error)
	CreateSession(ctx context.Context, accountID, keyHash string, ttl time.Duration) (*store.Session, error)
	Session(ctx context.Context, id string) (*store.Session, error)
	DeleteSession(ctx context.Context, id string) error
	ConsumeLoginToken(ctx context.Context, token string, now time.Time) (*store.LoginToken, error)
	WatchJobs(ctx context.Context, from int64, fn func(id string, j *mj.Job)) error
	PutProgress(ctx context.Context, j *mj.Job, attempt int, p *mj.Progress) error
	WatchProgress(ctx context.Context, from int64, fn func(id string, rec *store.ProgressRecord)) error
	Revision(ctx context.Context) (int64, error)
	Ping(ctx context.Context) error
}

// Blobs is what the gateway needs of the blob store.
type Blobs interface {
	Put(ctx context.Context, key string, r io.Reader, max int64) (int64, error)
	Open(ctx context.Context, key string) (io.ReadSeekCloser, int64, error)
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

	keys       keyCache
	limiters   sync.Map // account id -> *rate.Limiter
	signIns    sync.Map // "" -> *rate.Limiter: dashboard sign-in attempts, all together
	progressAt sync.Map // job id -> time.Time of the last stored progress
	// progressPruned is when progressAt was last pruned (unix ns).
	progressPruned atomic.Int64
	jobs           jobCache
	// hub wakes event streams (events.go); streams ends them all at shutdown.
	hub         eventHub
	streamsOnce sync.Once
	streams     context.Context
	stopStreams context.CancelFunc
	cspOnce     sync.Once
	csp         string
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
		// A request, a large upload's body included, is read within upload_timeout;
		// an idle keep-alive connection is closed sooner.
		ReadTimeout: g.Config.Server.UploadTimeoutD,
		IdleTimeout: 2 * time.Minute,
	})
	// A graceful shutdown answers the requests in flight with "Connection: close".
	app.Server().CloseOnShutdown = true
	g.routes(app)
	return app
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
	if c.Request().IsBodyStream() {
		// The body may be unread (a refused upload, a JSON body over max_body_bytes):
		// read and discard the rest first (up to drainLimit), or a client that sends
		// it all before reading gets a connection reset instead of this answer. Then
		// close the connection, or the server would parse whatever is left of the body
		// as the next request on it.
		if e != errSlowBody {
			drainBody(c, g.Config.Server.UploadTimeoutD)
		}
		c.Context().SetConnectionClose()
	}
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
	case mj.ETooManyRequests:
		return fiber.StatusTooManyRequests
	case mj.EUnavailable:
		return fiber.StatusServiceUnavailable
	}
	return fiber.StatusInternalServerError
}

var errStoreBusy = mj.Errorf(mj.EUnavailable, "the job store (etcd) is electing a leader or lost a member; try again in a moment")

var errSlowBody = mj.Errorf(mj.EValidation, "the request did not arrive within server.upload_timeout; send it faster, or in smaller files")

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
