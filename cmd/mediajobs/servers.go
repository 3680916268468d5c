package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"

	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/server"
)

// open parses a server command's flags (-config) and opens what the config names;
// b.Log is log as the config's log block sets it.
func open(name string, args []string, log *slog.Logger) (*server.Backends, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cfgPath := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return nil, err
	}
	return server.Open(cfg, "", configLog(log, cfg))
}

func runGateway(ctx context.Context, args []string, log *slog.Logger) error {
	b, err := open("gateway", args, log)
	if err != nil {
		return err
	}
	defer b.Close()
	log = b.Log
	cfg := b.Config
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return err
	}
	log.Info("gateway listening", "addr", ln.Addr().String(), "public_url", cfg.Server.PublicURL)
	// server.metrics_listen: /metrics there, and not on the public port (gateway routes).
	stopMetrics, err := server.ServeSide(cfg.Server.MetricsListen, "metrics", metrics.Handler(), log)
	if err != nil {
		ln.Close()
		return err
	}
	defer stopMetrics()
	return server.Serve(ctx, b.Gateway(ctx, log), ln, cfg.Server.ShutdownD, log)
}

func runDispatcher(ctx context.Context, args []string, log *slog.Logger) error {
	b, err := open("dispatcher", args, log)
	if err != nil {
		return err
	}
	defer b.Close()
	log = b.Log
	d, err := b.Dispatcher(log)
	if err != nil {
		return err
	}
	stopListener, err := server.ServeSide(b.Config.Dispatcher.Listen, "dispatcher", d.Handler(), log)
	if err != nil {
		return err
	}
	defer stopListener()
	if err := d.Run(ctx); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	return nil
}
