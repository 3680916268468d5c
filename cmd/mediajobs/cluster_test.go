package main

import (
	"bytes"
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
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// cluster is a production-shaped deployment for dispatcher tests: an in-process
// gateway, a real etcd (embedded here, reached over the network by the others),
// and `mediajobs dispatcher` processes that a test can start, kill -9 and restart,
// all against a real Nomad agent.
type cluster struct {
	t       *testing.T
	cfg     *config.Config
	secret  string
	store   *store.Store
	cfgFile string
	apiURL  string
	key     string
	nomad   *testenv.Nomad
	// inputs counts GETs of /clip.mp4?job=<tag>: one per attempt that ran.
	inputs *fetchCounter
	inURL  string
}

type fetchCounter struct {
	mu   sync.Mutex
	n    map[string]int
	clip []byte
}

func (f *fetchCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.n[r.URL.Query().Get("job")]++
	f.mu.Unlock()
	w.Write(f.clip)
}

func (f *fetchCounter) count(tag string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[tag]
}

func newCluster(t *testing.T, nomad *testenv.Nomad, extraHCL string) *cluster {
	return newClusterStorage(t, nomad, "", extraHCL)
}

// newClusterStorage is newCluster with its files at storageURL (a bucket) rather
// than in a directory of the test's.
func newClusterStorage(t *testing.T, nomad *testenv.Nomad, storageURL, extraHCL string) *cluster {
	needStack(t)
	t.Helper()
	_, e := testenv.Etcd(t)
	prefix := fmt.Sprintf("/c%d/", time.Now().UnixNano())
	s := store.New(e.Client, prefix)
	dir := t.TempDir()
	secret := "cluster-test-signing-secret-0123"

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	apiURL := "http://" + ln.Addr().String()
	cfgFile := filepath.Join(dir, "mediajobs.hcl")
	hcl := fmt.Sprintf(`
server {
  public_url     = %q
  signing_secret = %q
  allow_loopback = true
  destination_allow_loopback = true
  rate_limit     = 0
}
etcd {
  embedded  = false
  endpoints = [%q]
  prefix    = %q
}
nomad {
  address = %q
}
storage {
  path = %q
  url  = %q
}
webhooks {
  backoff_base = "300ms"
  backoff_cap  = "2s"
}
dispatcher {
  reconcile_every = "1s"
  leader_ttl      = "2s"
  timeout_grace   = "2s"
}
pool "cpu" {
  runner_command = %q
  cpu            = 100
  memory         = 128
}
%s
`, apiURL, secret, e.Endpoint(), prefix, nomad.Addr, filepath.Join(dir, "blobs"), storageURL, runnerBin, extraHCL)
	os.WriteFile(cfgFile, []byte(hcl), 0o600)
	cfg, err := config.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := openBlobs(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway.Gateway{Config: cfg, Store: s, Blobs: blobs, Signer: blob.Signer{Secret: []byte(secret), Base: apiURL},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if g.Warm, err = warmAuth(cfg); err != nil {
		t.Fatal(err)
	}
	if g.Uploaders, _, err = uploaderAuth(cfg); err != nil {
		t.Fatal(err)
	}
	for _, p := range cfg.Pools {
		if p.Warm != nil { // its runners would poll this test's gateway forever
			t.Cleanup(func() { nomad.Client.Jobs().Deregister(mj.WarmJobID(p.Name), true, nil) })
		}
	}
	app := g.App()
	go app.Listener(ln)
	t.Cleanup(func() { app.Shutdown() })

	ctx := context.Background()
	acct, _ := s.CreateAccount(ctx, "tests")
	key := mj.NewAPIKeySecret()
	s.AddAPIKey(ctx, acct.ID, "k", key)

	clip := call(t, "GET", clipURL, "", nil).Body
	fc := &fetchCounter{n: map[string]int{}, clip: clip}
	in := httptest.NewServer(fc)
	t.Cleanup(in.Close)
	return &cluster{t: t, store: s, cfgFile: cfgFile, apiURL: apiURL, key: key, nomad: nomad, inputs: fc, inURL: in.URL + "/clip.mp4",
		cfg: cfg, secret: secret}
}

// dispatcherProc is a `mediajobs dispatcher` process.
type dispatcherProc struct {
	cmd  *exec.Cmd
	log  *testenv.LogBuffer
	done chan struct{}
}

func (c *cluster) startDispatcher(name string) *dispatcherProc {
	c.t.Helper()
	cmd := exec.Command(runnerBin, "dispatcher", "-config", c.cfgFile)
	buf := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	if err := cmd.Start(); err != nil {
		c.t.Fatal(err)
	}
	p := &dispatcherProc{cmd: cmd, log: buf, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	c.t.Cleanup(func() {
		p.kill()
		if c.t.Failed() {
			c.t.Logf("--- dispatcher %s log ---\n%s", name, tail(buf.String(), 6000))
		}
	})
	return p
}

func (p *dispatcherProc) kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

func (p *dispatcherProc) leading() bool {
	return strings.Contains(p.log.String(), "dispatcher leading")
}

func (c *cluster) create(body map[string]any) string {
	c.t.Helper()
	r := call(c.t, "POST", c.apiURL+"/api/ffmpeg", c.key, body)
	if r.Status != 200 {
		c.t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	return r.data(c.t)["id"].(string)
}

func (c *cluster) job(id string) map[string]any {
	c.t.Helper()
	return call(c.t, "GET", c.apiURL+"/api/jobs/"+id, c.key, nil).data(c.t)
}

func (c *cluster) cancel(id string) int {
	return call(c.t, "POST", c.apiURL+"/api/jobs/"+id+"/cancel", c.key, nil).Status
}

func (c *cluster) waitStatus(id string, timeout time.Duration, want ...string) map[string]any {
	c.t.Helper()
	var j map[string]any
	testenv.Eventually(c.t, timeout, fmt.Sprintf("job %s to be %v", id, want), func() bool {
		j = c.job(id)
		for _, w := range want {
			if j["status"] == w {
				return true
			}
		}
		return false
	})
	return j
}

// stored reads the job record itself (for dispatch bookkeeping).
func (c *cluster) stored(id string) *mj.Job {
	j, err := c.store.Job(context.Background(), id)
	if err != nil {
		c.t.Fatal(err)
	}
	return j
}

func (c *cluster) jobBody(tag, cmd string, outputs ...string) map[string]any {
	if len(outputs) == 0 {
		outputs = []string{"o.mp4"}
	}
	return map[string]any{
		"input_files":     map[string]string{"in": c.inURL + "?job=" + tag},
		"output_files":    outputs,
		"ffmpeg_commands": []string{cmd},
		"webhook_url":     hookURL + "/" + tag,
	}
}

// killRunner SIGKILLs the runner process of a job's current Nomad child, found by
// the NOMAD_JOB_ID Nomad puts in its environment.
func killRunner(t *testing.T, nomadJobID string) bool {
	t.Helper()
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	killed := false
	for _, envFile := range procs {
		env, err := os.ReadFile(envFile)
		if err != nil || !bytes.Contains(env, []byte("NOMAD_JOB_ID="+nomadJobID+"\x00")) {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join(filepath.Dir(envFile), "cmdline"))
		if !bytes.Contains(cmdline, []byte("runner")) {
			continue
		}
		var pid int
		fmt.Sscanf(filepath.Base(filepath.Dir(envFile)), "%d", &pid)
		if syscall.Kill(pid, syscall.SIGKILL) == nil {
			killed = true
		}
	}
	return killed
}

func readFile(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func writeFile(t *testing.T, p, s string) {
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
