package server

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	"github.com/gofiber/fiber/v2"
)

// ServeSide serves h on addr, a side listener beside the API (server.metrics_listen,
// dispatcher.listen), until stop is called; an empty addr serves nothing. Listening
// happens before it returns, so a taken address fails the command at start.
func ServeSide(addr, what string, h http.Handler, log *slog.Logger) (stop func(), err error) {
	if addr == "" {
		return func() {}, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("%s listener: %w", what, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second, WriteTimeout: time.Minute,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelWarn)}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			log.Error(what+" listener failed", "addr", addr, "err", err)
		}
	}()
	log.Info(what+" listening", "addr", ln.Addr().String())
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		srv.Shutdown(ctx)
		<-done
	}, nil
}

// Serve runs app on ln until ctx ends, then shuts it down gracefully: it stops
// accepting, closes idle connections, and gives the requests in flight (a ?wait=true
// among them) up to timeout (server.shutdown_timeout) to finish; whatever is left
// then is cut off. Each step is logged.
func Serve(ctx context.Context, app *fiber.App, ln net.Listener, timeout time.Duration, log *slog.Logger) error {
	errc := make(chan error, 1)
	go func() { errc <- app.Listener(quietListener{ln}) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	start := time.Now()
	addr := ln.Addr().String()
	log.Info("shutting down: no new connections, requests in flight may finish", "addr", addr,
		"open_connections", app.Server().GetOpenConnectionsCount(), "timeout", timeout.String())
	err := app.ShutdownWithTimeout(timeout)
	switch {
	case errors.Is(err, context.DeadlineExceeded):
		log.Warn("shutdown forced: requests still in flight after shutdown_timeout are cut off", "addr", addr, "timeout", timeout.String())
		return nil
	case err != nil:
		log.Error("shutdown failed", "addr", addr, "err", err)
		return fmt.Errorf("shutdown: %w", err)
	}
	log.Info("shutdown done", "addr", addr, "took", time.Since(start).Round(time.Millisecond).String())
	return nil
}
