package server

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/mediajobs/mediajobs/testenv"
)

// TestServeShutsDownGracefully: a request in flight when the shutdown starts is
// answered if it ends within the timeout, cut off (and the shutdown logged as
// forced) if not.
func TestServeShutsDownGracefully(t *testing.T) {
	for _, tc := range []struct {
		name      string
		handler   time.Duration
		timeout   time.Duration
		answered  bool
		wantInLog string
	}{
		{"done", 300 * time.Millisecond, 5 * time.Second, true, "shutdown done"},
		{"forced", 5 * time.Second, 300 * time.Millisecond, false, "shutdown forced"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var logs testenv.LogBuffer
			log := slog.New(slog.NewTextHandler(&logs, nil))
			app := fiber.New(fiber.Config{DisableStartupMessage: true})
			started := make(chan struct{})
			app.Get("/slow", func(c *fiber.Ctx) error {
				close(started)
				time.Sleep(tc.handler)
				return c.SendString("finished")
			})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancel(context.Background())
			served := make(chan error, 1)
			go func() { served <- Serve(ctx, app, ln, tc.timeout, log) }()

			type answer struct {
				body string
				err  error
			}
			got := make(chan answer, 1)
			go func() {
				resp, err := (&http.Client{Timeout: 10 * time.Second}).Get("http://" + ln.Addr().String() + "/slow")
				if err != nil {
					got <- answer{err: err}
					return
				}
				b, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				got <- answer{string(b), err}
			}()
			<-started
			cancel()
			start := time.Now()
			if err := <-served; err != nil {
				t.Fatalf("serve: %v", err)
			}
			if took := time.Since(start); took > tc.timeout+2*time.Second {
				t.Fatalf("shutdown took %v with a timeout of %v", took, tc.timeout)
			}
			if tc.answered {
				if a := <-got; a.err != nil || a.body != "finished" {
					t.Fatalf("request in flight: %q, %v", a.body, a.err)
				}
			}
			out := logs.String()
			if !strings.Contains(out, "shutting down") || !strings.Contains(out, tc.wantInLog) {
				t.Fatalf("log:\n%s", out)
			}
			// No new connections once it has begun.
			if c, err := net.DialTimeout("tcp", ln.Addr().String(), time.Second); err == nil {
				c.Close()
				t.Fatal("still accepting after shutdown")
			}
		})
	}
}

// TestServeClosesAnUnusedConnectionQuietly: a connection that sends nothing
// before the read timeout is closed without an answer; one whose request
// started and stalled still gets its error.
func TestServeClosesAnUnusedConnectionQuietly(t *testing.T) {
	app := fiber.New(fiber.Config{DisableStartupMessage: true, ReadTimeout: 300 * time.Millisecond})
	app.Get("/", func(c *fiber.Ctx) error { return c.SendString("ok") })
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- Serve(ctx, app, ln, time.Second, slog.New(slog.DiscardHandler)) }()
	defer func() { cancel(); <-served }()
	read := func(send string) string {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		c.SetDeadline(time.Now().Add(30 * time.Second))
		if send != "" {
			if _, err := io.WriteString(c, send); err != nil {
				t.Fatal(err)
			}
		}
		b, err := io.ReadAll(c) // until the server closes it
		if err != nil {
			t.Fatalf("reading the answer: %v", err)
		}
		return string(b)
	}
	if got := read(""); got != "" {
		t.Fatalf("an unused connection got an answer: %q", got)
	}
	if got := read("GET / HTTP/1.1\r\nHost: x\r\n"); !strings.Contains(got, "408") {
		t.Fatalf("a stalled request got %q, want its timeout", got)
	}
}
