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

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/logging"
	"github.com/mediajobs/mediajobs/server"
	"github.com/spf13/cobra"
)

// run is the binary: a spf13/cobra command tree. The server and admin commands
// keep their own flag parsing (their flags are documented in their -h); the client
// commands (run, jobs, upload) and version are cobra's, with shell completion.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	// Text at info until a server command has read its config's log block (configLog).
	log := logging.New(stderr, logging.FormatText, slog.LevelInfo)
	root := &cobra.Command{
		Use:           "mediajobs",
		Short:         "FFmpeg jobs on Nomad",
		Long:          "mediajobs: an HTTP API that runs FFmpeg jobs on Nomad workers, and the tools to use and run it.",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	// passthrough is a command that parses its own flags (package flag).
	passthrough := func(use, short string, fn func(args []string) error) *cobra.Command {
		return &cobra.Command{Use: use, Short: short, DisableFlagParsing: true,
			RunE: func(_ *cobra.Command, args []string) error { return fn(args) }}
	}
	root.AddGroup(&cobra.Group{ID: "use", Title: "Use the service:"}, &cobra.Group{ID: "serve", Title: "Run the service:"})
	for _, c := range []*cobra.Command{
		passthrough("dev", "one process: embedded etcd, gateway and dispatcher, against a local Nomad", func(a []string) error { return runDev(ctx, a, stdout, log) }),
		passthrough("gateway", "the HTTP API (any number side by side)", func(a []string) error { return runGateway(ctx, a, log) }),
		passthrough("dispatcher", "moves jobs between etcd and Nomad, sends webhooks", func(a []string) error { return runDispatcher(ctx, a, log) }),
		passthrough("runner", "runs one job inside a Nomad task (started by Nomad, not by hand)", func(a []string) error { return runRunner(ctx, a, stdout) }),
		passthrough("accounts", "accounts of a running installation: accounts create -name NAME | list | login-link -account NAME [-ttl 10m] | limits NAME [-max-queued-jobs N ...]", func(a []string) error { return runAccounts(ctx, a, stdout) }),
		passthrough("keys", "API keys of a running installation: keys create -account NAME [-name KEY] | list -account NAME | revoke -account NAME -key ID [-force]", func(a []string) error { return runKeys(ctx, a, stdout) }),
		passthrough("config", "check a configuration file: config check [-for gateway,dispatcher|dev] [-connect] FILE", func(a []string) error { return runConfigCheck(a, stdout) }),
	} {
		c.GroupID = "serve"
		root.AddCommand(c)
	}
	api := &apiFlags{}
	for _, c := range []*cobra.Command{runCmd(api), jobsCmd(api), pipelineCmd(api), uploadCmd(api), mcpCmd(api)} {
		c.GroupID = "use"
		api.add(c)
		root.AddCommand(c)
	}
	root.AddCommand(&cobra.Command{Use: "version", Short: "print the version", Args: cobra.NoArgs,
		Run: func(cmd *cobra.Command, _ []string) { fmt.Fprintf(cmd.OutOrStdout(), "mediajobs %s\n", mj.Version) }})
	if len(args) == 0 {
		root.SetOut(stderr)
		root.Help()
		return 2
	}
	root.SetArgs(goStyleFlags(root, args))
	err := root.ExecuteContext(ctx)
	if err == flag.ErrHelp || err == nil {
		return 0
	}
	fmt.Fprintln(stderr, "mediajobs:", err)
	if e, ok := err.(exitCoder); ok {
		return e.ExitCode()
	}
	// cobra's own errors are usage errors: unknown commands and flags, bad values,
	// wrong argument counts.
	for _, p := range []string{"unknown ", "invalid argument", "accepts ", "requires ", "flag needs an argument", "bad flag syntax"} {
		if strings.HasPrefix(err.Error(), p) {
			return 2
		}
	}
	return 1
}

// goStyleFlags lets the client commands take their long flags with one dash, as
// every other command of the binary (package flag) does: "-machine nvidia" is
// "--machine nvidia". Words after "--" are left alone (they are ffmpeg's).
func goStyleFlags(root *cobra.Command, args []string) []string {
	cmd, _, err := root.Find(args)
	if err != nil || cmd.DisableFlagParsing {
		return args
	}
	out := append([]string(nil), args...)
	for i, a := range out {
		if a == "--" {
			break
		}
		if !strings.HasPrefix(a, "-") || strings.HasPrefix(a, "--") || len(a) < 3 {
			continue
		}
		name, _, _ := strings.Cut(a[1:], "=")
		if cmd.Flags().Lookup(name) != nil || cmd.InheritedFlags().Lookup(name) != nil {
			out[i] = "-" + a
		}
	}
	return out
}

type exitCoder interface{ ExitCode() int }

// configLog is the log of a server command once its config is read: the log
// block's format and level, on run's writer. In the process (main, not tests) it
// becomes slog's default too, for the few places that log without one passed in.
func configLog(log *slog.Logger, cfg *config.Config) *slog.Logger {
	l := logging.Reconfigure(log, cfg.Log.Format, cfg.Log.LevelV)
	if setDefaultLog && l != log {
		slog.SetDefault(l)
	}
	return l
}

// setDefaultLog is set by main: tests run commands side by side, each with its own
// writer, and must not redirect the process-wide default.
var setDefaultLog bool

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

// runConfigCheck: `mediajobs config check [-for SERVERS] [-connect] FILE` prints
// every problem with file:line (what config.Load refuses, and what each server
// named by -for would refuse to start with: config.CheckFor, as they call it), or a
// summary of the pools; -connect also writes, reads and deletes a probe file in the
// storage.
func runConfigCheck(args []string, stdout io.Writer) error {
	usage := fmt.Errorf("usage: mediajobs config check [-for gateway,dispatcher|dev] [-connect] FILE")
	if len(args) == 0 || args[0] != "check" {
		return usage
	}
	fs := flag.NewFlagSet("config check", flag.ContinueOnError)
	connect := fs.Bool("connect", false, "also check that the storage is reachable and writable")
	forServers := fs.String("for", config.ForGateway+","+config.ForDispatcher, "the servers the file is for, comma-separated: gateway, dispatcher, dev (dev makes its own signing secret)")
	if err := fs.Parse(args[1:]); err != nil || fs.NArg() != 1 {
		return usage
	}
	file := fs.Arg(0)
	cfg, err := config.Load(file)
	if err != nil {
		return err
	}
	for _, role := range strings.Split(*forServers, ",") {
		if err := cfg.CheckFor(strings.TrimSpace(role)); err != nil {
			return err
		}
	}
	fmt.Fprintf(stdout, "%s: ok\n", file)
	for _, w := range cfg.Warnings() {
		fmt.Fprintf(stdout, "  warning: %s\n", w)
	}
	if *connect {
		b, err := server.OpenBlobs(cfg)
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
			if !p.CanEncode() {
				gpu += " (no NVENC: " + p.GPU.NoNVENCWhy + ")"
			}
		}
		image := ""
		if p.Driver == "docker" {
			image = " image " + p.Image
		}
		fmt.Fprintf(stdout, "  pool %-10s %s%s, node pool %s, %d MHz, %d MiB, %d MB disk, %s, timeout %s (max %s), queue limit %s\n",
			p.Name, p.Driver, image, p.NodePool, p.CPU, p.Memory, p.Disk, gpu, p.DefaultTimeoutD, p.MaxTimeoutD, p.QueueLimitD)
		if w := p.Warm; w != nil {
			reserve := config.DefaultWarmReserve
			if w.Reserve != nil {
				reserve = *w.Reserve
			}
			fmt.Fprintf(stdout, "    warm: %d runners (scaling %d–%d) of %d MHz, %d MiB; jobs up to %ds wait for one (spill after %s), %d kept for them; lease %s\n",
				w.Count, w.Min, w.Max, w.CPU, w.Memory, w.MaxJobSeconds, w.SpillAfterD, reserve, w.LeaseTTLD)
		}
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
