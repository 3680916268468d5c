package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"net"
)

func runGateway(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("gateway", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	b, err := openBackends(cfg, "")
	if err != nil {
		return err
	}
	defer b.close()
	ln, err := net.Listen("tcp", cfg.Server.Listen)
	if err != nil {
		return err
	}
	log.Info("gateway listening", "addr", ln.Addr().String(), "public_url", cfg.Server.PublicURL)
	return serve(ctx, b.gateway(ctx, log), ln)
}

func runDispatcher(ctx context.Context, args []string, log *slog.Logger) error {
	fs := flag.NewFlagSet("dispatcher", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := loadConfig(*cfgPath)
	if err != nil {
		return err
	}
	b, err := openBackends(cfg, "")
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
