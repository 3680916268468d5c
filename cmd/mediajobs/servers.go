package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
)

// open parses a server command's flags (-config) and opens what the config names.
func open(name string, args []string) (*backends, error) {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	cfgPath := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return nil, err
	}
	return openBackends(cfg, "")
}

func runGateway(ctx context.Context, args []string, log *slog.Logger) error {
	b, err := open("gateway", args)
	if err != nil {
		return err
	}
	defer b.close()
	cfg := b.cfg
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return err
	}
	log.Info("gateway listening", "addr", ln.Addr().String(), "public_url", cfg.Server.PublicURL)
	return serve(ctx, b.gateway(ctx, log), ln)
}

func runDispatcher(ctx context.Context, args []string, log *slog.Logger) error {
	b, err := open("dispatcher", args)
	if err != nil {
		return err
	}
	defer b.close()
	d, err := b.dispatcher(log)
	if err != nil {
		return err
	}
	if err := d.Run(ctx); err != nil {
		return fmt.Errorf("dispatcher: %w", err)
	}
	return nil
}
