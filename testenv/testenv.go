// Package testenv starts the real components tests run against: embedded etcd, a
// Nomad dev agent on free ports, ffmpeg. Whether a test that needs one runs is
// decided here and nowhere else (decide): `make test-short` (go test -short)
// skips what needs a long-tier component, and a component that is not installed
// fails the test when CI is set (outside -short) and skips it, loudly, otherwise.
package testenv

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/store"
)

// longTier lists the programs only `make test` brings (test-deps, docker, the
// Nomad and MinIO builds): a test that runs one is skipped under -short. The
// short tier (`make test-short`) needs Go and nothing else, and uses ffmpeg and
// ffprobe when they are installed; bubblewrap's tests are here because they
// would take the short run past its 2 minutes.
var longTier = map[string]bool{
	"nomad": true, "minio": true, "docker": true, "chromium": true,
	"bwrap": true, "promtool": true, "node": true,
}

// decide is the one place that says whether a test needing what runs:
//   - under -short, a long-tier need skips it, installed or not;
//   - installed, it runs;
//   - not installed, it fails when CI is set (`make test` installs everything) and
//     is skipped, loudly, otherwise; under -short always skipped, as the short
//     tier must pass on a machine with Go alone.
func decide(t testing.TB, what string, long, found bool) {
	t.Helper()
	switch {
	case long && testing.Short():
		t.Skipf("SKIPPED under -short: %s; `make test` runs it", what)
	case found:
	case os.Getenv("CI") != "" && !testing.Short():
		t.Fatalf("%s is required in CI; `make test` installs it", what)
	default:
		t.Skipf("SKIPPED: %s is not available; run `make test` to install it", what)
	}
}

// Missing fails (in CI) or skips the test because what is not available.
func Missing(t testing.TB, what string) {
	t.Helper()
	decide(t, what, false, false)
}

// Long skips the test under -short (`make test-short`): it needs a long-tier
// component (why says which) or takes too long for the short tier.
func Long(t testing.TB, why string) {
	t.Helper()
	decide(t, why, true, true)
}

// Binary returns the path of a program, or fails/skips (decide; longTier says
// which programs only `make test` runs).
func Binary(t testing.TB, name string) string {
	t.Helper()
	if longTier[name] {
		decide(t, "needs "+name, true, true) // before the lookup: skipped even if installed
	}
	p, err := exec.LookPath(name)
	decide(t, name, false, err == nil)
	return p
}

// Etcd starts an embedded etcd in a temporary directory and returns a store on it.
func Etcd(t testing.TB) (*store.Store, *store.Embedded) {
	t.Helper()
	e, err := store.StartEmbedded(t.TempDir(), "127.0.0.1:0", FreeAddr(t), store.EmbeddedOptions{FastStart: fastEtcd()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return store.New(e.Client, "/test/"), e
}

// EtcdWith is Etcd with the embedded server's compaction and quota settings.
func EtcdWith(t testing.TB, opts store.EmbeddedOptions) (*store.Store, *store.Embedded) {
	t.Helper()
	opts.FastStart = fastEtcd()
	e, err := store.StartEmbedded(t.TempDir(), "127.0.0.1:0", FreeAddr(t), opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(e.Close)
	return store.New(e.Client, "/test/"), e
}

// fastEtcd: test etcd elects at once (store.EmbeddedOptions.FastStart) in the
// short tier, where the start of hundreds of servers is most of the wait. The
// full suite keeps etcd's own timing: with two CPU-bound processes beside it, a
// 10 ms tick was seen to answer "leader changed" once a run.
func fastEtcd() bool { return testing.Short() }

// FreeAddr returns a loopback host:port nobody listens on right now.
func FreeAddr(t testing.TB) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().String()
}

// FreeAddrs returns n distinct free 127.0.0.1 addresses. All listeners stay open
// until all are chosen, or the kernel may hand out one port twice; another process
// may still take one before the caller binds it (callers retry on a failed start).
func FreeAddrs(n int) ([]string, error) {
	addrs := make([]string, n)
	listeners := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for i := range addrs {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		listeners = append(listeners, l)
		addrs[i] = l.Addr().String()
	}
	return addrs, nil
}

// CachedNomad is where deploy/scripts/install-nomad.sh caches the Nomad it builds
// (with its web UI: the build tags are part of the name).
func CachedNomad() string { return filepath.Join(CacheDir(), "nomad-1.11.3-ui") }

// CacheDir is where the install scripts cache what they build:
// $MEDIAJOBS_CACHE, else $XDG_CACHE_HOME/mediajobs, else ~/.cache/mediajobs.
func CacheDir() string {
	if c := os.Getenv("MEDIAJOBS_CACHE"); c != "" {
		return c
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, _ := os.UserHomeDir()
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "mediajobs")
}

// NomadBinary finds the nomad binary (FindNomad), or fails/skips; under -short
// it skips without looking.
func NomadBinary(t testing.TB) string {
	t.Helper()
	decide(t, "needs Nomad", true, true)
	p := FindNomad()
	decide(t, "nomad", false, p != "")
	return p
}

// FindNomad is NomadBinary outside a test (TestMain): $NOMAD_BIN, the cache
// `make` builds into, PATH; "" when there is none.
func FindNomad() string {
	if p := os.Getenv("NOMAD_BIN"); p != "" {
		return p
	}
	if _, err := os.Stat(CachedNomad()); err == nil {
		return CachedNomad()
	}
	p, _ := exec.LookPath("nomad")
	return p
}

// Nomad is a running `nomad agent -dev`.
type Nomad struct {
	Addr   string
	Client *api.Client
	cmd    *exec.Cmd
	dir    string
	bin    string
	cfg    string
	exited chan struct{} // closed when the agent process has exited
}

// StartNomad starts a Nomad dev agent on free loopback ports, with the cloud
// fingerprinters denied and raw_exec enabled, and waits until its node is ready.
// Stop it with Close. Used from TestMain, so it takes no *testing.T.
func StartNomad(bin string) (*Nomad, error) {
	// A free port can be taken by another process between our check and the
	// agent's bind (packages test in parallel); the agent then exits, and a new
	// set of ports is tried.
	for attempt := 1; ; attempt++ {
		n, err := startNomad(bin)
		if err == nil || !errors.Is(err, errAgentExited) || attempt == 3 {
			return n, err
		}
	}
}

var errAgentExited = errors.New("nomad agent exited")

func startNomad(bin string) (*Nomad, error) {
	dir, err := os.MkdirTemp("", "mediajobs-nomad-")
	if err != nil {
		return nil, err
	}
	addrs, err := FreeAddrs(3)
	if err != nil {
		return nil, err
	}
	ports := make([]int, 3)
	for i, a := range addrs {
		ports[i], _ = strconv.Atoi(a[strings.LastIndexByte(a, ':')+1:])
	}
	cfg := fmt.Sprintf(`
disable_update_check = true
bind_addr = "127.0.0.1"
data_dir  = %q
ports {
  http = %d
  rpc  = %d
  serf = %d
}
client {
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
# The worker image is built here, never pulled: the driver's image GC would
# remove it 3 minutes after its last task, under the next package's tests.
# Ended containers are kept until Close, so that a test can read a short task's
# log from docker itself (Nomad's log shipper may miss the end of one).
plugin "docker" {
  config {
    gc {
      image     = false
      container = false
    }
  }
}
`, filepath.Join(dir, "data"), ports[0], ports[1], ports[2])
	cfgPath := filepath.Join(dir, "agent.hcl")
	if err := os.WriteFile(cfgPath, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	n := &Nomad{Addr: fmt.Sprintf("http://127.0.0.1:%d", ports[0]), dir: dir, bin: bin, cfg: cfgPath}
	conf := api.DefaultConfig()
	conf.Address = n.Addr
	conf.Region, conf.Namespace, conf.SecretID = "", "", ""
	if n.Client, err = api.NewClient(conf); err != nil {
		return nil, err
	}
	if err := n.start(); err != nil {
		n.Close()
		return nil, err
	}
	return n, nil
}

// Restart kills the agent and its tasks and starts it again on the same ports
// with its state wiped, as a machine that rebooted and lost its disk would: the
// tasks it ran reported nothing. (A task left running would report, and a
// dispatcher applies what a vanished child reported.)
func (n *Nomad) Restart() error {
	n.Stop()
	return n.start()
}

// Stop kills the agent and its tasks and wipes its state; Start starts it again
// on the same ports (Restart is both).
func (n *Nomad) Stop() {
	var tasks []int
	if n.cmd != nil && n.cmd.Process != nil {
		tasks = Descendants(n.cmd.Process.Pid)
	}
	n.stop(true)
	for _, pid := range tasks {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	KillUnder(filepath.Join(n.dir, "data"))
	UnmountUnder(filepath.Join(n.dir, "data"))
	os.RemoveAll(filepath.Join(n.dir, "data"))
}

// Start starts a stopped agent (Stop) and waits until its node is ready.
func (n *Nomad) Start() error { return n.start() }

func (n *Nomad) start() error {
	logf, err := os.OpenFile(filepath.Join(n.dir, "agent.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	cmd := exec.Command(n.bin, "agent", "-dev", "-config", n.cfg)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return err
	}
	n.cmd = cmd
	exited := make(chan struct{})
	n.exited = exited
	go func() { cmd.Wait(); close(exited) }()
	dir := n.dir
	deadline := time.Now().Add(90 * time.Second)
	for {
		nodes, _, err := n.Client.Nodes().List(nil)
		if err == nil && len(nodes) > 0 && nodes[0].Status == "ready" {
			if d, ok := nodes[0].Drivers["raw_exec"]; ok && d.Healthy && (!dockerRunning() || n.DockerHealthy()) {
				return nil
			}
		}
		if time.Now().After(deadline) {
			log, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
			return fmt.Errorf("nomad agent not ready after 90s (last error %v); log tail:\n%s", err, tail(string(log), 3000))
		}
		select {
		case <-exited:
			log, _ := os.ReadFile(filepath.Join(dir, "agent.log"))
			return fmt.Errorf("%w while starting; log tail:\n%s", errAgentExited, tail(string(log), 3000))
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Log returns the agent's log so far, for failure messages.
func (n *Nomad) Log() string {
	b, _ := os.ReadFile(filepath.Join(n.dir, "agent.log"))
	return string(b)
}

// Close stops the agent, the task processes it leaves behind, and removes its files.
func (n *Nomad) Close() {
	var children []int
	if n.cmd != nil && n.cmd.Process != nil {
		children = Descendants(n.cmd.Process.Pid) // logmon and executors
	}
	// This agent's docker containers (kept when they end: gc.container off).
	var containers []string
	if n.Client != nil {
		if allocs, _, err := n.Client.Allocations().List(nil); err == nil {
			for _, a := range allocs {
				out, _ := exec.Command("docker", "ps", "-aq", "--filter", "label=com.hashicorp.nomad.alloc_id="+a.ID).Output()
				containers = append(containers, strings.Fields(string(out))...)
			}
		}
	}
	n.stop(false)
	if len(containers) > 0 {
		exec.Command("docker", append([]string{"rm", "-f"}, containers...)...).Run()
	}
	for _, pid := range children {
		// Only what still runs the nomad binary: a pid may have been reused since.
		if cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.HasPrefix(string(cmd), n.bin) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
	KillUnder(n.dir)
	UnmountUnder(n.dir)
	os.RemoveAll(n.dir)
}

// Descendants lists the processes below pid.
func Descendants(pid int) []int {
	parent := map[int]int{}
	stats, _ := filepath.Glob("/proc/[0-9]*/stat")
	for _, f := range stats {
		b, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so split after the ")".
		rest := string(b[strings.LastIndexByte(string(b), ')')+1:])
		fields := strings.Fields(rest)
		p, _ := strconv.Atoi(filepath.Base(filepath.Dir(f)))
		if len(fields) > 1 {
			pp, _ := strconv.Atoi(fields[1])
			parent[p] = pp
		}
	}
	var out []int
	for p := range parent {
		for q := parent[p]; q > 1; q = parent[q] {
			if q == pid {
				out = append(out, p)
				break
			}
		}
	}
	return out
}

// UnmountUnder detaches every mount point inside dir, deepest first: a Nomad
// client run as root mounts a tmpfs on each task's secrets and private dirs, and
// leaves them mounted when it stops.
func UnmountUnder(dir string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(b), "\n") {
		fields := strings.Fields(line)
		if len(fields) > 4 && strings.HasPrefix(fields[4], dir+"/") {
			points = append(points, fields[4])
		}
	}
	sort.Sort(sort.Reverse(sort.StringSlice(points)))
	for _, p := range points {
		syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

// KillUnder SIGKILLs every process whose command line names dir or whose working
// directory is inside it. A Nomad client leaves its task executors (and their tasks)
// running when it stops, so that a restarted client can take them back; a test
// agent that is gone for good must not leave them behind.
func KillUnder(dir string) {
	procs, _ := filepath.Glob("/proc/[0-9]*")
	self := os.Getpid()
	for _, p := range procs {
		pid, err := strconv.Atoi(filepath.Base(p))
		if err != nil || pid == self {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(p, "cmdline"))
		cwd, _ := os.Readlink(filepath.Join(p, "cwd"))
		if strings.Contains(string(cmdline), dir) || strings.HasPrefix(cwd, dir) {
			syscall.Kill(pid, syscall.SIGKILL)
		}
	}
}

func (n *Nomad) stop(kill bool) {
	if n.cmd != nil && n.cmd.Process != nil {
		if kill {
			n.cmd.Process.Kill()
		}
		n.cmd.Process.Signal(os.Interrupt)
		done := n.exited
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			n.cmd.Process.Kill()
			<-done
		}
	}
	n.cmd = nil
}

// Eventually polls cond until it returns true or the deadline passes.
func Eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %s waiting for %s", timeout, what)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// BuildMediajobs builds the mediajobs binary into dir (the runner a Nomad task runs).
func BuildMediajobs(dir string) (string, error) {
	_, file, _, _ := runtime.Caller(0)
	root := filepath.Dir(filepath.Dir(file))
	out := filepath.Join(dir, "mediajobs")
	cmd := exec.CommandContext(context.Background(), "go", "build", "-o", out, "./cmd/mediajobs")
	cmd.Dir = root
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build: %v\n%s", err, b)
	}
	return out, nil
}

func tail(s string, n int) string {
	s = strings.TrimSpace(s)
	if len(s) > n {
		return "…" + s[len(s)-n:]
	}
	return s
}

// dockerRunning reports whether a Docker daemon answers on the default socket.
func dockerRunning() bool {
	_, err := os.Stat("/var/run/docker.sock")
	return err == nil && exec.Command("docker", "info").Run() == nil
}

// DockerHealthy reports whether the agent's docker driver is up.
func (n *Nomad) DockerHealthy() bool {
	nodes, _, err := n.Client.Nodes().List(nil)
	if err != nil || len(nodes) == 0 {
		return false
	}
	d, ok := nodes[0].Drivers["docker"]
	return ok && d.Detected && d.Healthy
}

// LogBuffer is a log sink that goroutines may write to at once.
type LogBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *LogBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *LogBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// CreateJob POSTs body to the gateway at base (POST /api/ffmpeg) with the API key
// and returns the new job's id.
func CreateJob(ctx context.Context, client *http.Client, base, key string, body []byte) (string, error) {
	req, err := http.NewRequestWithContext(ctx, "POST", base+"/api/ffmpeg", bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return "", err
	}
	if resp.StatusCode != 200 {
		return "", fmt.Errorf("POST /api/ffmpeg: HTTP %d %s", resp.StatusCode, raw)
	}
	var out struct {
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if err := json.Unmarshal(raw, &out); err != nil || out.Data.ID == "" {
		return "", fmt.Errorf("POST /api/ffmpeg: no id in %s (%v)", raw, err)
	}
	return out.Data.ID, nil
}

// TaskLogs are the stdout and stderr (their first files) of a task of one of
// the agent's allocations, for a failing test to show.
func (n *Nomad) TaskLogs(alloc, task string) string {
	var b strings.Builder
	for _, stream := range []string{"stdout", "stderr"} {
		out, _ := os.ReadFile(filepath.Join(n.dir, "data", "alloc", alloc, "alloc", "logs", task+"."+stream+".0"))
		fmt.Fprintf(&b, "--- %s %s.%s ---\n%s\n", alloc, task, stream, tail(string(out), 4000))
	}
	return b.String()
}

// SecretsFile is the path of a file in a task's secrets directory (a workload
// identity's JWT, say) of one of the agent's allocations.
func (n *Nomad) SecretsFile(alloc, task, name string) string {
	return filepath.Join(n.dir, "data", "alloc", alloc, task, "secrets", name)
}

// ProcessesWith lists the pids of processes whose command line contains all of
// words, and, when env is not empty, whose environment holds env (NAME=value).
func ProcessesWith(env string, words ...string) []int {
	entries, _ := os.ReadDir("/proc")
	var out []int
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		line, all := string(cmd), true
		for _, w := range words {
			all = all && strings.Contains(line, w)
		}
		if !all {
			continue
		}
		if env != "" {
			b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "environ"))
			if err != nil || !strings.Contains("\x00"+string(b), "\x00"+env+"\x00") {
				continue
			}
		}
		out = append(out, pid)
	}
	return out
}
