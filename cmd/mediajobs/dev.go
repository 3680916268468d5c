package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
)

// devOptions are what `mediajobs dev` adds to a config: where its data lives, the
// key to print, and (in tests) the runner binary and a listener on port 0.
type devOptions struct {
	DataDir       string
	APIKey        string // use this key instead of a stored or generated one
	RunnerCommand string // default: this binary
	Listener      net.Listener
	// NomadPending: Nomad is still being built (its log's path, from run-dev.sh):
	// the API starts at once and the dispatcher once the agent answers.
	NomadPending string
}

// devStack is a running `mediajobs dev`.
type devStack struct {
	URL    string
	APIKey string
	b      *backends
}

func runDev(ctx context.Context, args []string, stdout io.Writer, log *slog.Logger) error {
	fs := flag.NewFlagSet("dev", flag.ContinueOnError)
	cfgPath := configFlag(fs)
	data := fs.String("data", ".data", "directory for etcd data, blobs, the dev key and signing secret")
	if err := fs.Parse(args); err != nil {
		return err
	}
	cfg, err := devConfig(*cfgPath, *data)
	if err != nil {
		return err
	}
	log = configLog(log, cfg)
	opts := devOptions{DataDir: *data, APIKey: os.Getenv("MEDIAJOBS_DEV_API_KEY"), NomadPending: os.Getenv("MEDIAJOBS_NOMAD_PENDING")}
	return startDev(ctx, cfg, opts, log, func(s *devStack) {
		fmt.Fprintf(stdout, `
mediajobs dev is up.

  Dashboard  %[1]s/dashboard/ (sign in with the API key)
  API        %[1]s/api (reference: %[1]s/api/docs)
  API key    %[2]s
  etcd       embedded, data in %[3]s
  Nomad      %[4]s (UI: %[4]s/ui/jobs)%[6]s
%[5]s
Try it (a 3-second test pattern, encoded by a warm runner: a timeout of at
most 2 minutes lets one take it; waits for the result):
  curl -s -H "Authorization: Bearer %[2]s" -H "Content-Type: application/json" \
    -d '{"timeout_seconds":60,"output_files":["out.mp4"],"ffmpeg_commands":["-f lavfi -i testsrc=duration=3 -c:v libx264 {{out.mp4}}"]}' \
    '%[1]s/api/ffmpeg?wait=true'
or from this binary, with live progress:
  bin/mediajobs run --timeout 60s -o out.mp4 -- -f lavfi -i testsrc=duration=3 -c:v libx264 outputs/out.mp4

`, s.URL, s.APIKey, cfg.Etcd.DataDir, nomadAddr(cfg), devListeners(cfg), nomadPendingLine(opts.NomadPending))
	})
}

// devListeners is the banner's lines for the dispatcher's and metrics listeners.
func devListeners(cfg *config.Config) string {
	var b strings.Builder
	if a := cfg.Dispatcher.Listen; a != "" {
		fmt.Fprintf(&b, "  Dispatcher http://%s/readyz, /healthz, /metrics\n", a)
	}
	switch a := cfg.Server.MetricsListen; {
	case a == "":
		fmt.Fprintf(&b, "  Metrics    %s/metrics\n", cfg.Server.PublicURL)
	case a != cfg.Dispatcher.Listen:
		fmt.Fprintf(&b, "  Metrics    http://%s/metrics\n", a)
	}
	return b.String()
}

// nomadPendingLine is the banner's word on a Nomad still being built.
func nomadPendingLine(buildLog string) string {
	if buildLog == "" {
		return ""
	}
	return "\n             still being built (log: " + buildLog + "); jobs wait in the queue until it is up"
}

func nomadAddr(cfg *config.Config) string {
	if cfg.Nomad.Address != "" {
		return cfg.Nomad.Address
	}
	if a := os.Getenv("NOMAD_ADDR"); a != "" {
		return a
	}
	return "http://127.0.0.1:4646"
}

// devConfig is the config file, or the defaults with loopback inputs allowed and
// everything stored under dataDir. MEDIAJOBS_HTTP_ADDR overrides the listen address.
func devConfig(path, dataDir string) (*config.Config, error) {
	var cfg *config.Config
	var err error
	if path != "" {
		cfg, err = config.Load(path)
	} else {
		cfg = config.Default()
		cfg.Server.AllowLoopback = true
		// Destinations may try a local MinIO; the control plane (Nomad's API,
		// etcd, these listeners) stays refused all the same.
		cfg.Server.DestinationAllowLoopback = true
		// Both pools, so a newcomer without a GPU sees an nvidia job wait with its
		// reason, then fail after the queue limit.
		// Two warm runners take the cpu pool's jobs while they wait for work,
		// with or without a timeout (docs/warm.md): the memory and disk of the
		// pool's own children, so a job runs no worse on one.
		warm := &config.Warm{Count: 2, CPU: 200}
		cfg.Pools = []*config.Pool{{Name: "cpu", Warm: warm}, {Name: "nvidia", GPU: &config.GPU{}, QueueLimit: "2m"}}
		if os.Getenv("MEDIAJOBS_DRIVER") == "docker" {
			// The worker image built by deploy/worker/build-local.sh (make docker);
			// warm runners run on raw_exec only.
			cfg.Pools[0].Driver, cfg.Pools[0].Image, cfg.Pools[0].Warm = "docker", "mediajobs-worker:local", nil
		}
		cfg.Etcd.DataDir = filepath.Join(dataDir, "etcd")
		cfg.Dispatcher.Listen = "127.0.0.1:9091" // /metrics, /healthz, /readyz of the dispatcher
		cfg.Storage.Path = filepath.Join(dataDir, "blobs")
		// MEDIAJOBS_STORAGE=s3 make run starts a MinIO and names its bucket here.
		cfg.Storage.URL = os.Getenv("MEDIAJOBS_S3_URL")
		err = cfg.Finish()
	}
	if err != nil {
		return nil, err
	}
	if addr, ok := os.LookupEnv("MEDIAJOBS_DISPATCHER_ADDR"); ok {
		cfg.Dispatcher.Listen = addr // "" turns the dispatcher's listener off
	}
	if addr := os.Getenv("MEDIAJOBS_HTTP_ADDR"); addr != "" {
		derived := cfg.Server.PublicURL == "http://"+cfg.Server.Listen
		cfg.Server.Listen = addr
		if derived {
			cfg.Server.PublicURL = "http://" + addr
		}
	}
	return cfg, nil
}

// startDev runs embedded etcd, the gateway and the dispatcher until ctx ends,
// calling ready once the API answers.
func startDev(ctx context.Context, cfg *config.Config, o devOptions, log *slog.Logger, ready func(*devStack)) error {
	if !cfg.Etcd.Embedded {
		return fmt.Errorf("dev runs an embedded etcd; set etcd { embedded = true }")
	}
	b, err := openBackendsLog(cfg, filepath.Join(o.DataDir, "signing_secret"), log)
	if err != nil {
		return err
	}
	defer b.close()

	key, err := devKey(ctx, b, o)
	if err != nil {
		return err
	}
	ln := o.Listener
	if ln == nil {
		if ln, err = net.Listen("tcp", cfg.Server.Listen); err != nil {
			return fmt.Errorf("listen on %s: %w (set MEDIAJOBS_HTTP_ADDR to use another address)", cfg.Server.Listen, err)
		}
	}
	d, err := b.dispatcher(log)
	if err != nil {
		return err
	}
	if o.RunnerCommand != "" {
		d.RunnerCommand = o.RunnerCommand
	}
	// The dispatcher's listener (its handler serves /metrics too), and the
	// gateway's metrics listener unless it is the same address.
	stopListener, err := serveSide(cfg.Dispatcher.Listen, "dispatcher", d.Handler(), log)
	if err != nil {
		return fmt.Errorf("%w (set MEDIAJOBS_DISPATCHER_ADDR to use another address)", err)
	}
	defer stopListener()
	if m := cfg.Server.MetricsListen; m != cfg.Dispatcher.Listen {
		stopMetrics, err := serveSide(m, "metrics", metrics.Handler(), log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	runDispatcher := d.Run
	if err := d.RegisterPools(); err != nil {
		if o.NomadPending == "" {
			return fmt.Errorf("%w (is a Nomad agent running at %s?)", err, nomadAddr(cfg))
		}
		// The API takes jobs now; they wait in etcd until the agent is up.
		log.Info("Nomad is not up yet: jobs wait in the queue until it is", "nomad", nomadAddr(cfg), "build_log", o.NomadPending)
		runDispatcher = func(ctx context.Context) error {
			for d.RegisterPools() != nil {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Second):
				}
			}
			log.Info("Nomad is up: dispatching", "nomad", nomadAddr(cfg))
			return d.Run(ctx)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errc <- serve(ctx, b.gateway(ctx, log), ln, cfg.Server.ShutdownD, log) }()
	go func() { defer wg.Done(); errc <- runDispatcher(ctx) }()
	ready(&devStack{URL: cfg.Server.PublicURL, APIKey: key, b: b})
	err = <-errc
	cancel()
	wg.Wait()
	return err
}

// devKey makes sure the "dev" account has an API key and returns it: the given
// one, else the one stored in the data directory, else a new one stored there.
func devKey(ctx context.Context, b *backends, o devOptions) (string, error) {
	if _, err := b.store.EnsureAccount(ctx, "dev", "dev"); err != nil {
		return "", fmt.Errorf("create dev account: %w", err)
	}
	key := o.APIKey
	path := filepath.Join(o.DataDir, "dev_api_key")
	if key == "" {
		if raw, err := os.ReadFile(path); err == nil {
			key = strings.TrimSpace(string(raw))
		}
	}
	if key == "" {
		key = mj.NewAPIKeySecret()
		if err := os.MkdirAll(o.DataDir, 0o700); err != nil {
			return "", err
		}
		if err := os.WriteFile(path, []byte(key+"\n"), 0o600); err != nil {
			return "", err
		}
	}
	if _, err := b.store.AddAPIKey(ctx, "dev", "dev", key); err != nil {
		return "", err
	}
	return key, nil
}
