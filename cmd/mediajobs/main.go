// Command mediajobs is the whole service in one binary: `mediajobs gateway`,
// `mediajobs dispatcher`, `mediajobs runner`, `mediajobs dev` and `mediajobs keys`.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	// The first signal starts a graceful shutdown (server.shutdown_timeout); a second
	// one ends the process at once.
	go func() { <-ctx.Done(); stop() }()
	setDefaultLog = true
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
