package gateway

import (
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"runtime/debug"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/gofiber/fiber/v2/middleware/recover"
)

// HeaderRequestID carries a request's id: taken from the request when it is sane
// (requestIDOK), else generated, and always returned in the response.
const HeaderRequestID = "X-Request-Id"

const (
	localRequestID = "requestID"
	localPanicked  = "panicked"
)

// maxRequestID bounds an incoming X-Request-Id (a UUID is 36, a W3C trace id 32).
const maxRequestID = 128

// requestIDOK reports whether an incoming request id may be used (and logged) as
// it is: 1 to maxRequestID characters of letters, digits and - _ . : = + / @.
func requestIDOK(s string) bool {
	if s == "" || len(s) > maxRequestID {
		return false
	}
	for i := 0; i < len(s); i++ {
		switch b := s[i]; {
		case 'a' <= b && b <= 'z', 'A' <= b && b <= 'Z', '0' <= b && b <= '9':
		case strings.IndexByte("-_.:=+/@", b) >= 0:
		default:
			return false
		}
	}
	return true
}

// newRequestID is 32 random hex digits. An id names a request in logs and is no
// secret: the runtime's generator (seeded from the system's, per thread) makes
// it without a system call.
func newRequestID() string {
	var r [16]byte
	binary.LittleEndian.PutUint64(r[:8], rand.Uint64())
	binary.LittleEndian.PutUint64(r[8:], rand.Uint64())
	var h [32]byte
	hex.Encode(h[:], r[:])
	return string(h[:])
}

// requestID is the id of c's request ("" outside accessLog).
func requestID(c *fiber.Ctx) string {
	if r, ok := c.Locals(localRequestID).(*request); ok {
		return r.id
	}
	return ""
}

// request is what the middleware keep of a request, in one allocation: its id
// and start (accessLog) and its context (withContext).
type request struct {
	id    string
	start time.Time
	ctx   requestContext
}

// requestOf is c's request, made if accessLog did not (tests of single middleware).
func requestOf(c *fiber.Ctx) *request {
	if r, ok := c.Locals(localRequestID).(*request); ok {
		return r
	}
	r := &request{}
	c.Locals(localRequestID, r)
	return r
}

// quietRoutes are probed and scraped every few seconds: their successful requests
// are logged at debug, not info.
var quietRoutes = map[string]bool{"/healthz": true, "/readyz": true, "/metrics": true}

// accessLog is the outermost middleware: it gives the request its id (answered in
// X-Request-Id), lets the error handler answer any error (so the line carries the
// status the client got), and logs one line per request: method, route (the
// pattern), path (never the query, which carries link signatures), status,
// duration, response bytes, request id, the account once authenticated, and the
// job id of routes that name one.
func (g *Gateway) accessLog(c *fiber.Ctx) error {
	start := time.Now()
	id := c.Get(HeaderRequestID)
	if !requestIDOK(id) {
		id = newRequestID()
	} else {
		id = strings.Clone(id) // fiber's strings alias fasthttp's reused buffers
	}
	c.Locals(localRequestID, &request{id: id, start: start})
	c.Set(HeaderRequestID, id)

	if err := c.Next(); err != nil {
		if herr := g.errorHandler(c, err); herr != nil {
			g.Log.Error("error handler failed", "request_id", id, "err", herr)
			c.Status(fiber.StatusInternalServerError)
		}
	}
	// The handler may have reset the headers; the id is always answered.
	c.Set(HeaderRequestID, id)

	status := c.Response().StatusCode()
	route := c.Route().Path
	level := slog.LevelInfo
	if quietRoutes[route] && status < 400 {
		level = slog.LevelDebug
	}
	if !g.Log.Enabled(c.UserContext(), level) {
		return nil
	}
	// Response().Body() would read a streamed body (a download) into memory.
	bytes := c.Response().Header.ContentLength()
	if !c.Response().IsBodyStream() {
		bytes = len(c.Response().Body())
	}
	end := time.Now()    // the line's time, and the request's end
	var buf [9]slog.Attr // no allocation for the list: at most 9
	attrs := append(buf[:0],
		slog.String("method", c.Method()), slog.String("route", route), slog.String("path", c.Path()),
		slog.Int("status", status),
		slog.Float64("duration_ms", float64(end.Sub(start).Microseconds())/1000),
		slog.Int("bytes", bytes), slog.String("request_id", id),
	)
	if acct, ok := c.Locals(localAccount).(string); ok {
		attrs = append(attrs, slog.String("account", acct))
	}
	if strings.Contains(route, ":id") && strings.HasPrefix(route, "/api/jobs/") {
		attrs = append(attrs, slog.String("job", c.Params("id")))
	}
	// The record goes to the handler as Logger.LogAttrs would send it, but with
	// no caller's pc: finding it walks the stack at every request, and the
	// access line's source would only ever name this function.
	r := slog.NewRecord(end, level, "request", 0)
	r.AddAttrs(attrs...)
	g.Log.Handler().Handle(c.UserContext(), r)
	return nil
}

// recoverer turns a panic in a handler into an unknownError answer (500), logged
// with the request id and the stack.
func (g *Gateway) recoverer() fiber.Handler {
	rec := recover.New(recover.Config{EnableStackTrace: true, StackTraceHandler: func(c *fiber.Ctx, v any) {
		c.Locals(localPanicked, true)
		g.Log.Error("handler panicked", "request_id", requestID(c), "method", c.Method(), "path", c.Path(),
			"panic", fmt.Sprint(v), "stack", string(debug.Stack()))
	}})
	return func(c *fiber.Ctx) error {
		err := rec(c)
		if c.Locals(localPanicked) != nil {
			// Whatever was panicked with (an *mj.Error too) answers unknownError.
			return fmt.Errorf("panic: %v", err)
		}
		return err
	}
}

// drainLimit and drainTime bound how much of a request body the server reads and
// discards after answering without reading it (a refused upload, a JSON body over
// max_body_bytes, a bad key): a client that sends its whole body before reading
// the answer (most do) would otherwise see the connection reset instead of the
// answer. A body longer than this gets the reset: its Content-Length is checked
// first, so nothing is read in vain.
const (
	drainLimit = 64 << 20
	drainTime  = 30 * time.Second
)
