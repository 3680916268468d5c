package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// logBuf is a goroutine-safe log sink that parses its JSON lines.
type logBuf struct{ testenv.LogBuffer }

func (l *logBuf) lines(t *testing.T) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, line := range strings.Split(strings.TrimSpace(l.String()), "\n") {
		if line == "" {
			continue
		}
		var m map[string]any
		if err := json.Unmarshal([]byte(line), &m); err != nil {
			t.Fatalf("log line is not JSON: %q: %v", line, err)
		}
		out = append(out, m)
	}
	return out
}

// find returns the lines with msg whose request_id is id.
func (l *logBuf) find(t *testing.T, msg, id string) []map[string]any {
	t.Helper()
	var out []map[string]any
	for _, m := range l.lines(t) {
		if m["msg"] == msg && m["request_id"] == id {
			out = append(out, m)
		}
	}
	return out
}

// jsonLog gives h's gateway a JSON log at debug into a buffer.
func jsonLog(h *harness) *logBuf {
	buf := &logBuf{}
	h.gw.Log = slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	return buf
}

func TestAccessLogCarriesRequestID(t *testing.T) {
	h := newHarness(t)
	buf := jsonLog(h)

	// An incoming sane id is kept and answered.
	status, body, hdr := h.do("POST", "/api/jobs", "alice", valid(), "X-Request-Id", "lb-7f3a:42")
	if status != 200 || hdr.Get("X-Request-Id") != "lb-7f3a:42" {
		t.Fatalf("HTTP %d, X-Request-Id %q: %v", status, hdr.Get("X-Request-Id"), body)
	}
	id := body["data"].(map[string]any)["id"].(string)
	lines := buf.find(t, "request", "lb-7f3a:42")
	if len(lines) != 1 {
		t.Fatalf("want one access line for the request, got %v\n%s", lines, buf)
	}
	l := lines[0]
	if l["method"] != "POST" || l["route"] != "/api/jobs" || l["path"] != "/api/jobs" || l["status"] != float64(200) ||
		l["account"] != "alice" || l["level"] != "INFO" || l["bytes"].(float64) <= 0 {
		t.Fatalf("access line %v", l)
	}
	if _, ok := l["duration_ms"].(float64); !ok {
		t.Fatalf("no duration: %v", l)
	}

	// None (or an insane one): one is made up, answered, and logged with the job id.
	for _, in := range []string{"", strings.Repeat("a", 200), "x y", "a\"b", "é"} {
		status, _, hdr = h.do("GET", "/api/jobs/"+id, "alice", nil, "X-Request-Id", in)
		rid := hdr.Get("X-Request-Id")
		if status != 200 || rid == "" || rid == in || !requestIDOK(rid) {
			t.Fatalf("incoming %q: HTTP %d, X-Request-Id %q", in, status, rid)
		}
		lines = buf.find(t, "request", rid)
		if len(lines) != 1 || lines[0]["job"] != id || lines[0]["route"] != "/api/jobs/:id" || lines[0]["account"] != "alice" {
			t.Fatalf("incoming %q: access lines %v", in, lines)
		}
	}

	// Refused requests are logged with the status the client got, no account.
	status, _, hdr = h.do("GET", "/api/jobs", "", nil)
	lines = buf.find(t, "request", hdr.Get("X-Request-Id"))
	if status != 401 || len(lines) != 1 || lines[0]["status"] != float64(401) || lines[0]["account"] != nil {
		t.Fatalf("HTTP %d, lines %v", status, lines)
	}
	status, _, hdr = h.do("GET", "/nope?sig=secret", "", nil)
	lines = buf.find(t, "request", hdr.Get("X-Request-Id"))
	if status != 404 || len(lines) != 1 || lines[0]["status"] != float64(404) || lines[0]["path"] != "/nope" {
		t.Fatalf("HTTP %d, lines %v", status, lines)
	}

	// Probes are logged at debug while they succeed.
	_, _, hdr = h.do("GET", "/healthz", "", nil)
	if lines = buf.find(t, "request", hdr.Get("X-Request-Id")); len(lines) != 1 || lines[0]["level"] != "DEBUG" {
		t.Fatalf("healthz lines %v", lines)
	}

	// No secret in the log: API keys, link signatures.
	out := buf.String()
	for acct, key := range h.keys {
		if strings.Contains(out, key) {
			t.Fatalf("%s's API key is in the log", acct)
		}
	}
	if strings.Contains(out, "sig=") || strings.Contains(out, "secret") {
		t.Fatalf("a query is in the log:\n%s", out)
	}
}

func TestPanicAnswersUnknownError(t *testing.T) {
	h := newHarness(t)
	buf := jsonLog(h)
	// Test-only routes, behind the same middleware as every route.
	h.app.Get("/test/panic", func(*fiber.Ctx) error { panic("boom") })
	h.app.Get("/test/panic-error", func(*fiber.Ctx) error { panic(mj.ErrNotFound) })
	h.app.Get("/api/test/panic", func(*fiber.Ctx) error { panic(errors.New("deep")) })

	for _, tc := range []struct{ path, acct string }{{"/test/panic", ""}, {"/test/panic-error", ""}, {"/api/test/panic", "bob"}} {
		rid := "panic-" + strings.ReplaceAll(tc.path, "/", "-")
		status, body, hdr := h.do("GET", tc.path, tc.acct, nil, "X-Request-Id", rid)
		if status != 500 || body["errorCode"] != "unknownError" || hdr.Get("X-Request-Id") != rid {
			t.Fatalf("%s: HTTP %d %v, X-Request-Id %q", tc.path, status, body, hdr.Get("X-Request-Id"))
		}
		if strings.Contains(fmt.Sprint(body), "boom") || strings.Contains(fmt.Sprint(body), "goroutine") {
			t.Fatalf("%s: the answer tells internals: %v", tc.path, body)
		}
		p := buf.find(t, "handler panicked", rid)
		if len(p) != 1 || p[0]["level"] != "ERROR" || !strings.Contains(p[0]["stack"].(string), "accesslog_test.go") {
			t.Fatalf("%s: panic lines %v\n%s", tc.path, p, buf)
		}
		if f := buf.find(t, "request failed", rid); len(f) != 1 {
			t.Fatalf("%s: request failed lines %v", tc.path, f)
		}
		if a := buf.find(t, "request", rid); len(a) != 1 || a[0]["status"] != float64(500) {
			t.Fatalf("%s: access lines %v", tc.path, a)
		}
	}
	// The server goes on.
	if status, _, _ := h.do("GET", "/healthz", "", nil); status != 200 {
		t.Fatalf("healthz after a panic: HTTP %d", status)
	}
}

// pingDown is a store whose Ping fails with an error naming internals.
type pingDown struct{ Store }

func (pingDown) Ping(context.Context) error {
	return errors.New("context deadline exceeded: dial tcp 10.20.30.40:2379: connect: connection refused")
}

func TestReadyzTellsNoInternals(t *testing.T) {
	h := newHarness(t)
	buf := jsonLog(h)
	if status, body, _ := h.do("GET", "/readyz", "", nil); status != 200 || body["status"] != "ready" {
		t.Fatalf("HTTP %d %v", status, body)
	}
	h.gw.Store = pingDown{h.gw.Store}
	status, body, hdr := h.do("GET", "/readyz", "", nil)
	if status != 503 || body["errorCode"] != "unavailable" {
		t.Fatalf("HTTP %d %v", status, body)
	}
	if msg := fmt.Sprint(body["message"]); strings.Contains(msg, "10.20.30.40") || strings.Contains(msg, "dial") || strings.Contains(msg, "2379") {
		t.Fatalf("readyz tells internals: %q", msg)
	}
	l := buf.find(t, "not ready: etcd is not reachable", hdr.Get("X-Request-Id"))
	if len(l) != 1 || !strings.Contains(fmt.Sprint(l[0]["err"]), "10.20.30.40:2379") {
		t.Fatalf("the cause is not in the log: %v\n%s", l, buf)
	}
	if a := buf.find(t, "request", hdr.Get("X-Request-Id")); len(a) != 1 || a[0]["level"] != "INFO" || a[0]["status"] != float64(503) {
		t.Fatalf("a failing probe is logged at info: %v", a)
	}
}

// TestWholeBodyFirstGets413: a client that writes all of an oversized body before
// reading (as most HTTP clients do) reads the 413 answer, not a reset connection.
func TestWholeBodyFirstGets413(t *testing.T) {
	h := newHarness(t)
	jsonLog(h)
	addr := strings.TrimPrefix(h.serve(), "http://")
	big := fmt.Sprintf(`{"output_files":["out.mp4"],"ffmpeg_commands":["-i x out.mp4"],"metadata":{"k":"%s"}}`, strings.Repeat("x", 24<<20))
	for _, tc := range []struct {
		name, acct string
		chunked    bool
		status     int
		code       string
	}{
		{"content-length", "alice", false, 413, "payloadTooLarge"},
		{"chunked", "alice", true, 413, "payloadTooLarge"},
		{"no key", "", false, 401, "badApiKey"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			conn, err := net.Dial("tcp", addr)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Close()
			conn.SetDeadline(time.Now().Add(60 * time.Second))
			var req bytes.Buffer
			fmt.Fprintf(&req, "POST /api/ffmpeg HTTP/1.1\r\nHost: gw.test\r\nContent-Type: application/json\r\n")
			if tc.acct != "" {
				fmt.Fprintf(&req, "Authorization: Bearer %s\r\n", h.keys[tc.acct])
			}
			if tc.chunked {
				req.WriteString("Transfer-Encoding: chunked\r\n\r\n")
				for rest := big; rest != ""; {
					n := min(len(rest), 1<<20)
					fmt.Fprintf(&req, "%x\r\n%s\r\n", n, rest[:n])
					rest = rest[n:]
				}
				req.WriteString("0\r\n\r\n")
			} else {
				fmt.Fprintf(&req, "Content-Length: %d\r\n\r\n%s", len(big), big)
			}
			// The whole request first, ...
			if _, err := conn.Write(req.Bytes()); err != nil {
				t.Fatalf("writing the body: %v", err)
			}
			// ... then the answer.
			resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
			if err != nil {
				t.Fatalf("reading the answer: %v", err)
			}
			raw, _ := io.ReadAll(resp.Body)
			var body map[string]any
			if err := json.Unmarshal(raw, &body); err != nil || resp.StatusCode != tc.status || body["errorCode"] != tc.code {
				t.Fatalf("HTTP %d %s", resp.StatusCode, raw)
			}
		})
	}
}
