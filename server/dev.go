package server

import (
	"context"
	"fmt"
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

// DevOptions are what `mediajobs dev` adds to a config: where its data lives, the
// key to print, and (in tests) the runner binary and a listener on port 0.
type DevOptions struct {
	DataDir       string
	APIKey        string // use this key instead of a stored or generated one
	RunnerCommand string // default: this binary
	Listener      net.Listener
	// NomadPending: Nomad is still being built (its log's path, from run-dev.sh):
	// the API starts at once and the dispatcher once the agent answers.
	NomadPending string
}

// DevStack is a running `mediajobs dev`.
type DevStack struct {
	URL      string
	APIKey   string
	Backends *Backends
}

// NomadAddr is the Nomad address the config's clients use.
func NomadAddr(cfg *config.Config) string {
	if cfg.Nomad.Address != "" {
		return cfg.Nomad.Address
	}
	if a := os.Getenv("NOMAD_ADDR"); a != "" {
		return a
	}
	return "http://127.0.0.1:4646"
}

// StartDev runs embedded etcd, the gateway and the dispatcher until ctx ends,
// calling ready once the API answers.
func StartDev(ctx context.Context, cfg *config.Config, o DevOptions, log *slog.Logger, ready func(*DevStack)) error {
	if !cfg.Etcd.Embedded {
		return fmt.Errorf("dev runs an embedded etcd; set etcd { embedded = true }")
	}
	b, err := Open(cfg, filepath.Join(o.DataDir, "signing_secret"), log)
	if err != nil {
		return err
	}
	defer b.Close()

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
	d, err := b.Dispatcher(log)
	if err != nil {
		return err
	}
	if o.RunnerCommand != "" {
		d.RunnerCommand = o.RunnerCommand
	}
	// The dispatcher's listener (its handler serves /metrics too), and the
	// gateway's metrics listener unless it is the same address.
	stopListener, err := ServeSide(cfg.Dispatcher.Listen, "dispatcher", d.Handler(), log)
	if err != nil {
		return fmt.Errorf("%w (set MEDIAJOBS_DISPATCHER_ADDR to use another address)", err)
	}
	defer stopListener()
	if m := cfg.Server.MetricsListen; m != cfg.Dispatcher.Listen {
		stopMetrics, err := ServeSide(m, "metrics", metrics.Handler(), log)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}
	runDispatcher := d.Run
	if err := d.RegisterPools(); err != nil {
		if o.NomadPending == "" {
			return fmt.Errorf("%w (is a Nomad agent running at %s?)", err, NomadAddr(cfg))
		}
		// The API takes jobs now; they wait in etcd until the agent is up.
		log.Info("Nomad is not up yet: jobs wait in the queue until it is", "nomad", NomadAddr(cfg), "build_log", o.NomadPending)
		runDispatcher = func(ctx context.Context) error {
			for d.RegisterPools() != nil {
				select {
				case <-ctx.Done():
					return nil
				case <-time.After(time.Second):
				}
			}
			log.Info("Nomad is up: dispatching", "nomad", NomadAddr(cfg))
			return d.Run(ctx)
		}
	}

	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errc <- Serve(ctx, b.Gateway(ctx, log), ln, cfg.Server.ShutdownD, log) }()
	go func() { defer wg.Done(); errc <- runDispatcher(ctx) }()
	ready(&DevStack{URL: cfg.Server.PublicURL, APIKey: key, Backends: b})
	err = <-errc
	cancel()
	wg.Wait()
	return err
}

// devKey makes sure the "dev" account has an API key and returns it: the given
// one, else the one stored in the data directory, else a new one stored there.
func devKey(ctx context.Context, b *Backends, o DevOptions) (string, error) {
	if _, err := b.Store.EnsureAccount(ctx, "dev", "dev"); err != nil {
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
	if _, err := b.Store.AddAPIKey(ctx, "dev", "dev", key); err != nil {
		return "", err
	}
	return key, nil
}
