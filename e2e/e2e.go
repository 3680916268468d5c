// Package e2e is the end-to-end suite's harness: a real Nomad dev agent whose
// raw_exec (and docker) tasks run the real mediajobs binary and the real ffmpeg,
// a test clip and a webhook receiver on loopback, and, when a test binary asks
// for one, a `mediajobs dev` stack (embedded etcd, gateway, dispatcher) on that
// agent. The tests live in the packages below it, one test binary each, so that
// `go test ./...` runs them side by side (docs/architecture.md, "Tests"):
//
//   - devstack: the API, CLI, dashboard and MCP against one shared dev stack;
//   - cluster: installations of their own (a gateway, `mediajobs dispatcher`
//     processes a test kills and restarts, MinIO, Docker) beside the agent;
//   - warm: a warm pool's runners, which its tests count, kill and scale.
//
// Each test binary starts one agent (and at most one stack) in its TestMain,
// through Main, and shares it among its tests.
package e2e

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/server"
	"github.com/mediajobs/mediajobs/testenv"
)

// WarmPool is the warm pool of the stack Options.WarmPool asks for: 2 runners,
// jobs of up to 60 s, a 6 s lease.
const WarmPool = "short"

// What Main started for this test binary; set before any test runs.
var (
	Stack     *server.DevStack // nil without Options.DevStack
	ClipURL   string           // a 3-second clip with video and audio
	Hooks     = &HookRecorder{}
	HookURL   string
	Ffprobe   string
	Agent     *testenv.Nomad
	RunnerBin string // the mediajobs binary Nomad tasks run, and the tests run as a CLI
	setupErr  string // why the fixtures could not start (reported by every test)
)

// Options say what a test binary shares besides the agent and the fixtures.
type Options struct {
	DevStack bool // a `mediajobs dev` stack on the agent (Stack)
	WarmPool bool // with DevStack: the warm pool WarmPool beside the default one
}

// Main starts the shared fixtures, runs the tests and stops what it started;
// a TestMain returns its code. Under -short it starts nothing: NeedStack skips.
func Main(m *testing.M, o Options) int {
	if testing.Short() {
		return m.Run()
	}
	tmp, err := os.MkdirTemp("", "mediajobs-e2e-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	missing := func(what string) int {
		setupErr = what
		return m.Run()
	}
	ffmpegBin, err := exec.LookPath("ffmpeg")
	if err != nil {
		return missing("ffmpeg")
	}
	if Ffprobe, err = exec.LookPath("ffprobe"); err != nil {
		return missing("ffprobe")
	}
	nomadBin := testenv.FindNomad()
	if nomadBin == "" {
		return missing("nomad (deploy/scripts/install-nomad.sh builds it)")
	}

	// A 3-second test clip with video and audio, served over loopback.
	clip := filepath.Join(tmp, "clip.mp4")
	gen := exec.Command(ffmpegBin, "-v", "error", "-f", "lavfi", "-i", "testsrc=duration=3:size=320x240:rate=25",
		"-f", "lavfi", "-i", "sine=duration=3", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-shortest", clip)
	if out, err := gen.CombinedOutput(); err != nil {
		panic(fmt.Sprintf("generate clip: %v\n%s", err, out))
	}
	files := httptest.NewServer(http.FileServer(http.Dir(tmp)))
	defer files.Close()
	ClipURL = files.URL + "/clip.mp4"
	hookSrv := httptest.NewServer(Hooks)
	defer hookSrv.Close()
	HookURL = hookSrv.URL

	bin, err := testenv.BuildMediajobs(tmp)
	if err != nil {
		panic(err)
	}
	RunnerBin = bin
	Agent, err = testenv.StartNomad(nomadBin)
	if err != nil {
		setupErr = "nomad agent: " + err.Error()
		return m.Run()
	}
	defer Agent.Close()

	if o.DevStack {
		ready, err := startStack(ctx, &wg, tmp, bin, o)
		if err != nil {
			panic(err)
		}
		var ok bool
		if Stack, ok = <-ready; !ok {
			return m.Run()
		}
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- nomad agent log (tail) ---\n%s\n", Tail(Agent.Log(), 4000))
	}
	return code
}

// startStack starts `mediajobs dev` in-process on the agent; the channel yields
// the stack once its API answers, or closes (setupErr says why) if it cannot start.
func startStack(ctx context.Context, wg *sync.WaitGroup, tmp, bin string, o Options) (<-chan *server.DevStack, error) {
	cfg := config.Default()
	cfg.Server.AllowLoopback = true
	// Destinations on a loopback receiver (as `mediajobs dev`); the control
	// plane stays refused (controlplane_test.go).
	cfg.Server.DestinationAllowLoopback = true
	cfg.Server.WaitLimit = "60s"
	cfg.Server.RateLimit = 0 // the tests poll fast; gateway tests cover the limit
	cfg.Etcd.DataDir = filepath.Join(tmp, "etcd")
	cfg.Etcd.ListenClient = "127.0.0.1:0"
	cfg.Etcd.ListenPeer = FreeAddr()
	cfg.Storage.Path = filepath.Join(tmp, "blobs")
	cfg.Nomad.Address = Agent.Addr
	cfg.Dispatcher.Listen = FreeAddr() // dev serves the dispatcher's listener too (devstack/metrics_test.go)
	cfg.Pools = []*config.Pool{{Name: "cpu"}}
	if o.WarmPool {
		// Small runners, and a lease short enough that the fault tests see a lapse
		// soon, long enough that a loaded machine's slow renewals (two CPU hogs
		// beside make test) do not lapse it.
		cfg.Pools = append(cfg.Pools, &config.Pool{Name: WarmPool, Memory: 256, Warm: &config.Warm{Count: 2, MaxJobSeconds: 60, CPU: 100, Memory: 256, LeaseTTL: "15s"}})
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	cfg.Server.Listen = ln.Addr().String()
	cfg.Server.PublicURL = "http://" + ln.Addr().String()
	if err := cfg.Finish(); err != nil {
		return nil, err
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ready := make(chan *server.DevStack, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		opts := server.DevOptions{DataDir: tmp, APIKey: "mj_e2e_test_key_0123456789", RunnerCommand: bin, Listener: ln}
		if err := server.StartDev(ctx, cfg, opts, log, func(s *server.DevStack) { ready <- s }); err != nil && ctx.Err() == nil {
			setupErr = "mediajobs dev: " + err.Error()
			close(ready)
		}
	}()
	return ready, nil
}

// NeedStack skips the test under -short (Main starts nothing then), and fails
// (CI) or skips it when the shared fixtures could not start.
func NeedStack(t *testing.T) {
	t.Helper()
	testenv.Long(t, "needs the dev stack on Nomad")
	if setupErr != "" {
		testenv.Missing(t, setupErr)
	}
}

// FileExists says whether p exists.
func FileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// FreeAddr returns a loopback host:port nobody listens on right now.
func FreeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// ExitStderr is what a failed exec.Command(...).Output() wrote to stderr.
func ExitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// Run runs the mediajobs binary (RunnerBin) with args, as a shell would: the
// process's environment, stdout and stderr to the writers. Its exit code, or -1
// if it could not start. When ctx ends the process gets SIGTERM (a graceful
// shutdown, as from a service manager), and SIGKILL 30 s later.
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	cmd := exec.CommandContext(ctx, RunnerBin, args...)
	cmd.Stdout, cmd.Stderr = stdout, stderr
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	err := cmd.Run()
	// After SIGTERM, Run reports ctx's error even when the process then exits
	// with 0 (a clean shutdown): its own code is the answer.
	if st := cmd.ProcessState; st != nil && st.ExitCode() >= 0 {
		return st.ExitCode()
	}
	fmt.Fprintf(stderr, "run %s: %v\n", RunnerBin, err)
	return -1
}
