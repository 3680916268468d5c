package e2e

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/gofiber/fiber/v2"
	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/dispatcher"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/mediajobs/mediajobs/webhook"
)

const (
	prefix  = "/mediajobs/"
	account = "bench"
	// poolCPU, poolMemory and poolDisk are the Nomad resources of the mediajobs pool
	// and of the raw job alike, so both place the same number of allocations on the
	// dev node (CPU decides: the node's MHz / 100).
	poolCPU    = 100
	poolMemory = 64
	poolDisk   = 100
	// rawJobID is the baseline's parameterized job: the same ffmpeg, no runner.
	rawJobID = "bench-raw-ffmpeg"
	// rawDispatchers is how many raw dispatch calls run at once: the dispatcher's
	// own limit (dispatchConcurrency in package dispatcher). Nomad refuses more than
	// 100 concurrent HTTP connections from one address (limits.http_max_conns_per_client).
	rawDispatchers = 8
)

// ffmpegArgs is the work of every job: 0.1 s of a sine tone into a WAV file. The
// runner adds the same leading flags (runner.ffmpeg); the baselines use them too.
var (
	ffmpegFlags = []string{"-hide_banner", "-nostdin", "-y", "-loglevel", "error", "-nostats"}
	ffmpegWork  = []string{"-f", "lavfi", "-i", "sine=duration=0.1"}
	createBody  = []byte(`{"output_files":["o.wav"],"ffmpeg_commands":["-f lavfi -i sine=duration=0.1 {{o.wav}}"]}`)
)

// env is the whole stack in one process, except Nomad and what it runs: embedded
// etcd, the gateway on a loopback listener, a dispatcher leading against a Nomad dev
// agent whose raw_exec tasks run the real `mediajobs runner`; plus a parameterized
// raw job for the baseline and an event-stream tracker for it.
type env struct {
	dir    string
	ffmpeg string
	nomad  *testenv.Nomad
	emb    *store.Embedded
	st     *store.Store
	cfg    *config.Config
	app    *fiber.App
	gwURL  string
	key    string
	client *http.Client
	disp   *dispatcher.Dispatcher
	logf   *os.File

	rawJobs *api.Jobs // a Nomad client of its own, configured like the dispatcher's
	raw     *tracker
	payload []byte        // the raw dispatch payload: as large as a runner manifest
	rawSem  chan struct{} // dispatch calls in flight, as many as the dispatcher makes

	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// noDNS refuses every lookup: benchmarks use IP-literal URLs only.
type noDNS struct{}

func (noDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return nil, fmt.Errorf("benchmarks do no DNS (asked for %q)", host)
}

func freeAddr() (string, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer l.Close()
	return l.Addr().String(), nil
}

func newClient(conns int) *http.Client {
	return &http.Client{
		Timeout: 2 * time.Minute,
		Transport: &http.Transport{
			Proxy:               nil,
			MaxIdleConns:        conns,
			MaxIdleConnsPerHost: conns,
			IdleConnTimeout:     time.Minute,
			DisableCompression:  true,
		},
	}
}

func nomadClient(addr string) (*api.Client, error) {
	conf := api.DefaultConfig()
	conf.Address = addr
	conf.Region, conf.Namespace, conf.SecretID = "", "", ""
	return api.NewClient(conf)
}

// startEnv brings the stack up; nomadBin and ffmpeg were found by the caller.
func startEnv(nomadBin, ffmpeg string) (_ *env, err error) {
	e := &env{ffmpeg: ffmpeg, client: newClient(512), rawSem: make(chan struct{}, rawDispatchers)}
	defer func() {
		if err != nil {
			err = fmt.Errorf("%w%s", err, e.logTail())
			e.close()
		}
	}()
	if e.dir, err = os.MkdirTemp("", "mediajobs-bench-e2e-"); err != nil {
		return nil, err
	}
	if e.logf, err = os.Create(filepath.Join(e.dir, "mediajobs.log")); err != nil {
		return nil, err
	}
	runnerBin, err := testenv.BuildMediajobs(e.dir)
	if err != nil {
		return nil, err
	}
	if e.nomad, err = testenv.StartNomad(nomadBin); err != nil {
		return nil, err
	}
	peer, err := freeAddr()
	if err != nil {
		return nil, err
	}
	if e.emb, err = store.StartEmbedded(filepath.Join(e.dir, "etcd"), "127.0.0.1:0", peer); err != nil {
		return nil, err
	}
	e.st = store.New(e.emb.Client, prefix)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	e.gwURL = "http://" + ln.Addr().String()
	cfg := config.Default()
	cfg.Server.Listen = ln.Addr().String()
	cfg.Server.PublicURL = e.gwURL
	cfg.Server.AllowLoopback = true
	cfg.Server.RateLimit = 0 // 200 jobs at once from one account is the point
	cfg.Etcd.Prefix = prefix
	cfg.Storage.Path = filepath.Join(e.dir, "blobs")
	cfg.Nomad.Address = e.nomad.Addr
	cfg.Pools = []*config.Pool{{Name: "cpu", RunnerCommand: runnerBin, CPU: poolCPU, Memory: poolMemory, Disk: poolDisk},
		warmPoolConfig(runnerBin)}
	if *hookConc > 0 {
		cfg.Webhooks.Concurrency = *hookConc
	}
	if err := cfg.Finish(); err != nil {
		ln.Close()
		return nil, err
	}
	e.cfg = cfg
	blobs, err := blob.NewLocal(cfg.Storage.Path)
	if err != nil {
		ln.Close()
		return nil, err
	}
	signer := blob.Signer{Secret: []byte("bench-e2e-signing-secret-0123456789"), Base: e.gwURL}
	log := slog.New(slog.NewTextHandler(e.logf, &slog.HandlerOptions{Level: slog.LevelWarn}))

	ctx, cancel := context.WithCancel(context.Background())
	e.cancel = cancel
	// The gateway as backends.gateway builds it: with its watches running.
	g := &gateway.Gateway{Config: cfg, Store: e.st, Blobs: blobs, Signer: signer, Log: log, Resolver: noDNS{}}
	if g.Warm, err = warmAuth(e.nomad.Addr); err != nil {
		ln.Close()
		return nil, err
	}
	e.app = g.App()
	e.wg.Add(2)
	go func() { defer e.wg.Done(); g.Watch(ctx) }()
	go func() { defer e.wg.Done(); e.app.Listener(ln) }()

	// The dispatcher as backends.dispatcher builds it, on a Nomad client of its own.
	nc, err := nomadClient(e.nomad.Addr)
	if err != nil {
		return nil, err
	}
	e.disp = &dispatcher.Dispatcher{
		Config: cfg, Store: e.st, Jobs: nc.Jobs(), Allocs: nc.Allocations(), Events: nc.EventStream(),
		Blobs: blobs, Signer: signer, RunnerCommand: runnerBin, Log: log,
		ReconcileEvery: cfg.Dispatcher.ReconcileD, LeaderTTL: cfg.Dispatcher.LeaderTTLD, TimeoutGrace: cfg.Dispatcher.TimeoutGraceD,
		Accounts: e.st,
		Webhook: &webhook.Sender{Base: cfg.Webhooks.BaseD, Cap: cfg.Webhooks.CapD,
			AttemptTimeout: cfg.Webhooks.TimeoutD, AllowLoopback: cfg.Server.AllowLoopback,
			MaxIdlePerHost: cfg.Webhooks.Concurrency},
	}
	if err := e.disp.RegisterPools(); err != nil {
		return nil, err
	}
	e.wg.Add(1)
	go func() { defer e.wg.Done(); e.disp.Run(ctx) }()

	if _, err := e.st.EnsureAccount(ctx, account, account); err != nil {
		return nil, err
	}
	e.key = mj.NewAPIKeySecret()
	if _, err := e.st.AddAPIKey(ctx, account, "bench", e.key); err != nil {
		return nil, err
	}

	// The baseline: the same work as a parameterized raw_exec job of its own.
	rc, err := nomadClient(e.nomad.Addr)
	if err != nil {
		return nil, err
	}
	e.rawJobs = rc.Jobs()
	if err := e.registerRaw(); err != nil {
		return nil, err
	}
	if e.raw, err = startTracker(ctx, rc, rawJobID+"/"); err != nil {
		return nil, err
	}
	// A runner manifest is ~700 bytes of JSON; the raw dispatch carries as much.
	e.payload = []byte(`{"pad":"` + strings.Repeat("x", 700) + `"}`)

	deadline := time.Now().Add(30 * time.Second)
	for !e.disp.Leading() {
		if time.Now().After(deadline) {
			return nil, errors.New("dispatcher did not take the lead within 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// One job each way, untimed: the first placement warms Nomad's caches (and
	// proves the stack works before anything is measured).
	if _, err := e.mediajobsJob(ctx); err != nil {
		return nil, fmt.Errorf("warm-up job through mediajobs: %w", err)
	}
	if _, err := e.rawJob(ctx); err != nil {
		return nil, fmt.Errorf("warm-up raw Nomad dispatch: %w", err)
	}
	// The warm pool's runners stay down until a warm benchmark scales them up
	// (warm_test.go), so the other benchmarks run on the node as before. The
	// dispatcher registered them as it took the lead, before the job above ran.
	if err := e.scaleWarm(ctx, 0); err != nil {
		return nil, err
	}
	return e, nil
}

// registerRaw registers the baseline job: the raw_exec pool's jobspec with the
// runner replaced by ffmpeg itself (same resources and ephemeral disk, restart and
// reschedule policy, payload file and log settings).
func (e *env) registerRaw() error {
	args, _ := json.Marshal(append(append(append([]string{}, ffmpegFlags...), ffmpegWork...), "${NOMAD_TASK_DIR}/o.wav"))
	hcl := fmt.Sprintf(`
job %[1]q {
  type        = "batch"
  datacenters = ["*"]
  node_pool   = "default"

  parameterized {
    payload       = "required"
    meta_required = ["bench_id"]
  }

  group "ffmpeg" {
    restart {
      attempts = 0
      mode     = "fail"
    }
    reschedule {
      attempts  = 0
      unlimited = false
    }
    ephemeral_disk {
      size = %[6]d
    }
    task "ffmpeg" {
      driver = "raw_exec"
      config {
        command = %[2]q
        args    = %[3]s
      }
      dispatch_payload {
        file = "manifest.json"
      }
      resources {
        cpu    = %[4]d
        memory = %[5]d
      }
      logs {
        max_files     = 2
        max_file_size = 10
      }
    }
  }
}
`, rawJobID, e.ffmpeg, args, poolCPU, poolMemory, poolDisk)
	job, err := e.rawJobs.ParseHCLOpts(&api.JobsParseRequest{JobHCL: hcl, Canonicalize: true})
	if err != nil {
		return fmt.Errorf("parse raw job: %w", err)
	}
	_, _, err = e.rawJobs.Register(job, nil)
	return err
}

func (e *env) logTail() string {
	var parts []string
	if e.logf != nil {
		if b, err := os.ReadFile(e.logf.Name()); err == nil && len(b) > 0 {
			parts = append(parts, "mediajobs log:\n"+tail(string(b), 3000))
		}
	}
	if e.nomad != nil {
		parts = append(parts, "nomad log:\n"+tail(e.nomad.Log(), 3000))
	}
	if len(parts) == 0 {
		return ""
	}
	return "\n" + strings.Join(parts, "\n")
}

func tail(s string, n int) string {
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// close stops everything startEnv started, in reverse order.
func (e *env) close() {
	if e.cancel != nil {
		e.cancel()
	}
	if e.app != nil {
		e.app.ShutdownWithTimeout(5 * time.Second)
	}
	e.wg.Wait()
	if e.nomad != nil {
		e.nomad.Close() // stops the agent; it stops its tasks
	}
	if e.emb != nil {
		e.emb.Close()
	}
	if e.logf != nil {
		e.logf.Close()
	}
	if e.dir != "" {
		os.RemoveAll(e.dir)
	}
}

// create POSTs body to the gateway and returns the new job's id.
func (e *env) create(ctx context.Context, body []byte) (string, error) {
	return testenv.CreateJob(ctx, e.client, e.gwURL, e.key, body)
}

// sample is one timed job: its start, its end as the client saw it, and the Nomad
// child that ran it.
type sample struct {
	start, end time.Time
	child      string // Nomad job ID
	task       string // the task's name in the child
}

func (s sample) took() time.Duration { return s.end.Sub(s.start) }

// mediajobsJob is one job through mediajobs: POST, then wait (an etcd watch on the
// job key, store.WaitJob) until it is terminal. It returns the time from before the
// POST to the watch event that shows it succeeded.
func (e *env) mediajobsJob(ctx context.Context) (time.Duration, error) {
	s, err := e.mediajobsSample(ctx)
	return s.took(), err
}

func (e *env) mediajobsSample(ctx context.Context) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	id, err := e.create(ctx, createBody)
	if err != nil {
		return sample{}, err
	}
	j, err := e.st.WaitJob(ctx, id, func(j *mj.Job) bool { return j.Status.Terminal() })
	end := time.Now()
	if err != nil {
		return sample{}, err
	}
	if j.Status != mj.StatusSucceeded {
		return sample{}, fmt.Errorf("job %s is %s, not succeeded: %s%s", id, j.Status, j.ErrorMessage, j.StatusDetail)
	}
	return sample{start: start, end: end, child: j.NomadJobID, task: "runner"}, nil
}

// rawJob is the same work dispatched straight to Nomad: dispatch, then wait for
// the allocation's terminal client status on the event stream.
func (e *env) rawJob(ctx context.Context) (time.Duration, error) {
	s, err := e.rawSample(ctx)
	return s.took(), err
}

func (e *env) rawSample(ctx context.Context) (sample, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	e.rawSem <- struct{}{}
	resp, _, err := e.rawJobs.DispatchOpts(&api.DispatchOptions{
		JobID: rawJobID, Meta: map[string]string{"bench_id": fmt.Sprint(start.UnixNano())}, Payload: e.payload,
	}, nil)
	<-e.rawSem
	if err != nil {
		return sample{}, fmt.Errorf("dispatch: %w", err)
	}
	status, err := e.raw.wait(ctx, resp.DispatchedJobID)
	end := time.Now()
	if err != nil {
		return sample{}, fmt.Errorf("raw job %s: %w", resp.DispatchedJobID, err)
	}
	if status != api.AllocClientStatusComplete {
		return sample{}, fmt.Errorf("raw job %s ended %s", resp.DispatchedJobID, status)
	}
	return sample{start: start, end: end, child: resp.DispatchedJobID, task: "ffmpeg"}, nil
}

// phases splits a sample at its task's start and end as Nomad recorded them:
// request → task started (API, dispatch, scheduling, placement, task setup), task
// started → task finished (the process itself), task finished → the client saw
// the job done (Nomad's client-to-server sync, the event stream, and for mediajobs
// the dispatcher's result read and store update and the watch).
func (e *env) phases(s sample) ([3]time.Duration, error) {
	allocs, _, err := e.rawJobs.Allocations(s.child, true, nil)
	if err != nil {
		return [3]time.Duration{}, err
	}
	if len(allocs) != 1 || allocs[0].TaskStates[s.task] == nil {
		return [3]time.Duration{}, fmt.Errorf("%s: %d allocations, no task state for %q", s.child, len(allocs), s.task)
	}
	ts := allocs[0].TaskStates[s.task]
	return [3]time.Duration{ts.StartedAt.Sub(s.start), ts.FinishedAt.Sub(ts.StartedAt), s.end.Sub(ts.FinishedAt)}, nil
}

// execJob is the same ffmpeg command run directly, in a fresh directory.
func (e *env) execJob(ctx context.Context) (time.Duration, error) {
	return e.execArgs(ctx, append(append([]string{}, ffmpegWork...), "o.wav"))
}

// execArgs times ffmpeg alone on args (its flags as the runner's), in a
// directory of its own.
func (e *env) execArgs(ctx context.Context, args []string) (time.Duration, error) {
	dir, err := os.MkdirTemp(e.dir, "exec-")
	if err != nil {
		return 0, err
	}
	defer os.RemoveAll(dir)
	start := time.Now()
	cmd := exec.CommandContext(ctx, e.ffmpeg, append(append([]string{}, ffmpegFlags...), args...)...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return 0, fmt.Errorf("ffmpeg: %v: %s", err, out)
	}
	return took, nil
}

// tracker follows Nomad's allocation events and remembers the first terminal
// client status of each allocation whose job ID has the given prefix, so a waiter
// that registers after the event still finds it.
type tracker struct {
	mu      sync.Mutex
	done    map[string]string // Nomad job ID -> terminal client status
	waiters map[string][]chan string
}

func startTracker(ctx context.Context, c *api.Client, jobPrefix string) (*tracker, error) {
	// Start at the current index: the stream replays nothing older.
	_, meta, err := c.Jobs().List(nil)
	if err != nil {
		return nil, err
	}
	t := &tracker{done: map[string]string{}, waiters: map[string][]chan string{}}
	go func() {
		index := meta.LastIndex
		for ctx.Err() == nil {
			events, err := c.EventStream().Stream(ctx, map[api.Topic][]string{api.TopicAllocation: {"*"}}, index, nil)
			if err != nil {
				time.Sleep(100 * time.Millisecond)
				continue
			}
			for evs := range events {
				if evs.Err != nil {
					break
				}
				if evs.IsHeartbeat() {
					continue
				}
				index = evs.Index
				for _, ev := range evs.Events {
					a, err := ev.Allocation()
					if err != nil || a == nil || !strings.HasPrefix(a.JobID, jobPrefix) {
						continue
					}
					switch a.ClientStatus {
					case api.AllocClientStatusComplete, api.AllocClientStatusFailed, api.AllocClientStatusLost:
						t.finish(a.JobID, a.ClientStatus)
					}
				}
			}
		}
	}()
	return t, nil
}

func (t *tracker) finish(job, status string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if _, seen := t.done[job]; seen {
		return
	}
	t.done[job] = status
	for _, w := range t.waiters[job] {
		w <- status
	}
	delete(t.waiters, job)
}

func (t *tracker) wait(ctx context.Context, job string) (string, error) {
	t.mu.Lock()
	if s, ok := t.done[job]; ok {
		t.mu.Unlock()
		return s, nil
	}
	ch := make(chan string, 1)
	t.waiters[job] = append(t.waiters[job], ch)
	t.mu.Unlock()
	select {
	case s := <-ch:
		return s, nil
	case <-ctx.Done():
		return "", ctx.Err()
	}
}
