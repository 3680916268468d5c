package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"

	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/server"
)

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
	opts := server.DevOptions{DataDir: *data, APIKey: os.Getenv("MEDIAJOBS_DEV_API_KEY"), NomadPending: os.Getenv("MEDIAJOBS_NOMAD_PENDING")}
	return server.StartDev(ctx, cfg, opts, log, func(s *server.DevStack) {
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

`, s.URL, s.APIKey, cfg.Etcd.DataDir, server.NomadAddr(cfg), devListeners(cfg), nomadPendingLine(opts.NomadPending))
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
