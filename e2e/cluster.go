package e2e

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
	"github.com/mediajobs/mediajobs/server"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// Cluster is a production-shaped deployment for dispatcher tests: an in-process
// gateway, a real etcd (embedded here, reached over the network by the others),
// and `mediajobs dispatcher` processes that a test can start, kill -9 and restart,
// all against a real Nomad agent.
type Cluster struct {
	T       *testing.T
	Config  *config.Config
	Secret  string
	Store   *store.Store
	CfgFile string // the config `mediajobs dispatcher` processes read
	APIURL  string
	Key     string // an API key of the account "tests"
	Nomad   *testenv.Nomad
	// Inputs counts GETs of InURL?job=<tag> (the clip): one per attempt that ran.
	Inputs *FetchCounter
	InURL  string
}

// FetchCounter serves the clip and counts its fetches by their job query.
type FetchCounter struct {
	mu   sync.Mutex
	n    map[string]int
	clip []byte
}

func (f *FetchCounter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	f.n[r.URL.Query().Get("job")]++
	f.mu.Unlock()
	w.Write(f.clip)
}

// Count is how often the clip was fetched for tag.
func (f *FetchCounter) Count(tag string) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.n[tag]
}

// NewCluster starts a cluster's etcd and gateway on nomad; extraHCL is added to
// its config (pools, limits). Its dispatchers start with StartDispatcher.
func NewCluster(t *testing.T, nomad *testenv.Nomad, extraHCL string) *Cluster {
	return NewClusterStorage(t, nomad, "", extraHCL)
}

// NewClusterStorage is NewCluster with its files at storageURL (a bucket) rather
// than in a directory of the test's.
func NewClusterStorage(t *testing.T, nomad *testenv.Nomad, storageURL, extraHCL string) *Cluster {
	NeedStack(t)
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
`, apiURL, secret, e.Endpoint(), prefix, nomad.Addr, filepath.Join(dir, "blobs"), storageURL, RunnerBin, extraHCL)
	os.WriteFile(cfgFile, []byte(hcl), 0o600)
	cfg, err := config.Load(cfgFile)
	if err != nil {
		t.Fatal(err)
	}
	blobs, err := server.OpenBlobs(cfg)
	if err != nil {
		t.Fatal(err)
	}
	g := &gateway.Gateway{Config: cfg, Store: s, Blobs: blobs, Signer: blob.Signer{Secret: []byte(secret), Base: apiURL},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	if g.Warm, err = server.WarmAuth(cfg); err != nil {
		t.Fatal(err)
	}
	if g.Uploaders, _, err = server.UploaderAuth(cfg); err != nil {
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

	clip := Call(t, "GET", ClipURL, "", nil).Body
	fc := &FetchCounter{n: map[string]int{}, clip: clip}
	in := httptest.NewServer(fc)
	t.Cleanup(in.Close)
	return &Cluster{T: t, Store: s, CfgFile: cfgFile, APIURL: apiURL, Key: key, Nomad: nomad, Inputs: fc, InURL: in.URL + "/clip.mp4",
		Config: cfg, Secret: secret}
}

// DispatcherProc is a `mediajobs dispatcher` process.
type DispatcherProc struct {
	cmd  *exec.Cmd
	Log  *testenv.LogBuffer // its stdout and stderr
	done chan struct{}
}

// StartDispatcher starts a `mediajobs dispatcher` process of the cluster, killed
// when the test ends (its log shown if the test failed).
func (c *Cluster) StartDispatcher(name string) *DispatcherProc {
	c.T.Helper()
	cmd := exec.Command(RunnerBin, "dispatcher", "-config", c.CfgFile)
	buf := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	if err := cmd.Start(); err != nil {
		c.T.Fatal(err)
	}
	p := &DispatcherProc{cmd: cmd, Log: buf, done: make(chan struct{})}
	go func() { cmd.Wait(); close(p.done) }()
	c.T.Cleanup(func() {
		p.Kill()
		if c.T.Failed() {
			c.T.Logf("--- dispatcher %s log ---\n%s", name, Tail(buf.String(), 6000))
		}
	})
	return p
}

// Kill sends SIGKILL and waits for the process to end.
func (p *DispatcherProc) Kill() {
	p.cmd.Process.Signal(syscall.SIGKILL)
	<-p.done
}

// Leading says whether its log says it leads.
func (p *DispatcherProc) Leading() bool {
	return strings.Contains(p.Log.String(), "dispatcher leading")
}

// Create creates a job and returns its id.
func (c *Cluster) Create(body map[string]any) string {
	c.T.Helper()
	r := Call(c.T, "POST", c.APIURL+"/api/ffmpeg", c.Key, body)
	if r.Status != 200 {
		c.T.Fatalf("create: %d %s", r.Status, r.Body)
	}
	return r.Data(c.T)["id"].(string)
}

// Job is the API's view of a job.
func (c *Cluster) Job(id string) map[string]any {
	c.T.Helper()
	return Call(c.T, "GET", c.APIURL+"/api/jobs/"+id, c.Key, nil).Data(c.T)
}

// Cancel cancels a job and returns the HTTP status.
func (c *Cluster) Cancel(id string) int {
	return Call(c.T, "POST", c.APIURL+"/api/jobs/"+id+"/cancel", c.Key, nil).Status
}

// WaitStatus polls a job until its status is one of want.
func (c *Cluster) WaitStatus(id string, timeout time.Duration, want ...string) map[string]any {
	c.T.Helper()
	var j map[string]any
	testenv.Eventually(c.T, timeout, fmt.Sprintf("job %s to be %v", id, want), func() bool {
		j = c.Job(id)
		for _, w := range want {
			if j["status"] == w {
				return true
			}
		}
		return false
	})
	return j
}

// Stored reads the job record itself (for dispatch bookkeeping).
func (c *Cluster) Stored(id string) *mj.Job {
	j, err := c.Store.Job(context.Background(), id)
	if err != nil {
		c.T.Fatal(err)
	}
	return j
}

// JobBody is a create request running cmd on the clip (fetched as tag, see
// Inputs), its webhook to HookURL.
func (c *Cluster) JobBody(tag, cmd string, outputs ...string) map[string]any {
	if len(outputs) == 0 {
		outputs = []string{"o.mp4"}
	}
	return map[string]any{
		"input_files":     map[string]string{"in": c.InURL + "?job=" + tag},
		"output_files":    outputs,
		"ffmpeg_commands": []string{cmd},
		"webhook_url":     HookURL + "/" + tag,
	}
}

// KillRunner SIGKILLs the runner process of a job's current Nomad child, found by
// the NOMAD_JOB_ID Nomad puts in its environment.
func KillRunner(t *testing.T, nomadJobID string) bool {
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

// ReadFile is a file's content; the test fails if it cannot be read.
func ReadFile(t *testing.T, p string) string {
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// WriteFile writes a file; the test fails if it cannot.
func WriteFile(t *testing.T, p, s string) {
	if err := os.WriteFile(p, []byte(s), 0o600); err != nil {
		t.Fatal(err)
	}
}
