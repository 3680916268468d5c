package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/mediajobs/mediajobs/config"
)

const usage = `mediajobs: FFmpeg jobs on Nomad.

Usage: mediajobs <command> [flags]

Commands:
  dev         one process: embedded etcd, gateway and dispatcher, against a local Nomad
  gateway     the HTTP API (any number side by side)
  dispatcher  moves jobs between etcd and Nomad, sends webhooks
  runner      runs one job inside a Nomad task (started by Nomad, not by hand)
  keys        create an account and API key: mediajobs keys create -account NAME
  config      check a configuration file: mediajobs config check FILE

Run "mediajobs <command> -h" for its flags.
`

func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return 2
	}
	log := slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
	var err error
	switch args[0] {
	case "dev":
		err = runDev(ctx, args[1:], stdout, log)
	case "gateway":
		err = runGateway(ctx, args[1:], log)
	case "dispatcher":
		err = runDispatcher(ctx, args[1:], log)
	case "runner":
		err = runRunner(ctx, args[1:], stdout)
	case "keys":
		err = runKeys(ctx, args[1:], stdout)
	case "config":
		err = runConfigCheck(args[1:], stdout)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, usage)
		return 0
	default:
		fmt.Fprintf(stderr, "unknown command %q\n\n%s", args[0], usage)
		return 2
	}
	if err == flag.ErrHelp {
		return 0
	}
	if err != nil {
		fmt.Fprintln(stderr, "mediajobs:", err)
		if e, ok := err.(exitCoder); ok {
			return e.ExitCode()
		}
		return 1
	}
	return 0
}

type exitCoder interface{ ExitCode() int }

// loadConfig reads -config, or returns the defaults when none is given.
func loadConfig(path string) (*config.Config, error) {
	if path == "" {
		c := config.Default()
		return c, c.Finish()
	}
	return config.Load(path)
}

func configFlag(fs *flag.FlagSet) *string {
	return fs.String("config", os.Getenv("MEDIAJOBS_CONFIG"), "HCL configuration file (default: built-in defaults; see deploy/mediajobs.hcl)")
}

// runConfigCheck: `mediajobs config check [-connect] FILE` prints every problem with
// file:line, or a summary of the pools; -connect also writes, reads and deletes a
// probe file in the storage.
func runConfigCheck(args []string, stdout io.Writer) error {
	usage := fmt.Errorf("usage: mediajobs config check [-connect] FILE")
	if len(args) == 0 || args[0] != "check" {
		return usage
	}
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	connect := fs.Bool("connect", false, "also check that the storage is reachable and writable")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 1 {
		return usage
	}
	file := fs.Arg(0)
	cfg, err := config.Load(file)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s: ok\n", file)
	if *connect {
		b, err := openBlobs(cfg)
		if err == nil {
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err = b.Check(ctx)
			cancel()
			b.Close()
		}
		if err != nil {
			return fmt.Errorf("storage: %w", err)
		}
		fmt.Fprintf(stdout, "  storage %s: reachable and writable\n", storageName(cfg))
	}
	for _, p := range cfg.Pools {
		gpu := "no GPU"
		if p.GPUs() > 0 {
			gpu = fmt.Sprintf("%d nvidia/gpu", p.GPUs())
		}
		image := ""
		if p.Driver == "docker" {
			image = " image " + p.Image
		}
		fmt.Fprintf(stdout, "  pool %-10s %s%s, node pool %s, %d MHz, %d MiB, %d MB disk, %s, timeout %s (max %s), queue limit %s\n",
			p.Name, p.Driver, image, p.NodePool, p.CPU, p.Memory, p.Disk, gpu, p.DefaultTimeoutD, p.MaxTimeoutD, p.QueueLimitD)
	}
	return nil
}

// storageName names the configured store without its query (which may hold an
// endpoint, never credentials, but is noise).
func storageName(cfg *config.Config) string {
	if cfg.Storage.URL == "" {
		return cfg.Storage.Path
	}
	return strings.SplitN(cfg.Storage.URL, "?", 2)[0]
}
