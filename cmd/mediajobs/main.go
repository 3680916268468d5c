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
	os.Exit(run(ctx, os.Args[1:], os.Stdout, os.Stderr))
}
