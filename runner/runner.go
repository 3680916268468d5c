// Package runner is what runs inside a Nomad task: it fetches a job's inputs into
// inputs/, runs each command with ffmpeg in the job's working directory (no shell),
// uploads outputs/ and reports a Result, all through the signed URLs of its manifest.
package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/hashicorp/go-retryablehttp"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/netguard"
	"github.com/mediajobs/mediajobs/sandbox"
)

// Runner runs one manifest.
type Runner struct {
	FFmpeg   string       // ffmpeg binary; "ffmpeg" from PATH when empty
	FFprobe  string       // ffprobe binary; "ffprobe" from PATH when empty
	WorkDir  string       // the job's working directory; created
	HTTP     *http.Client // for inputs and uploads; a retrying client when nil
	Log      io.Writer    // progress lines for the Nomad task log
	AllowGPU bool         // set from the manifest
	// ProgressFile, when set, receives progress reports instead of the progress URL
	// (docker pools: ffmpeg has no network; a sidecar posts the file).
	ProgressFile string
	usage        *mj.Usage  // where meter adds, while Exec runs (usage.go)
	usageMu      sync.Mutex // meter runs from the output probes at once
	// Sandbox, when set, runs ffmpeg and ffprobe inside it (raw_exec pools). Nil
	// runs them directly: on docker pools the container is the sandbox.
	Sandbox *sandbox.Bwrap
	// OneSandbox runs all of a job's commands in one sandbox, not one each
	// (jobsandbox.go): a warm runner's jobs. Only with Sandbox.
	OneSandbox bool
	// MaxProcs caps the processes and threads of a sandboxed job; 0 is
	// sandbox.MaxProcs.
	MaxProcs int
	// RunID, when set, names this run's upload prefix (jobs/<id>/<attempt>/<RunID>/): a
	// warm runner's lease id (a UUID). Empty: the Nomad allocation's id (NOMAD_ALLOC_ID).
	RunID string
	// TicketFile, when set (a docker pool's fetch and upload tasks), is where
	// fetch leaves the output destinations' ticket for upload (ticket.go): outside
	// the job's directory, and no key without the dispatch payload.
	TicketFile string
	// waitDelay bounds how long a command's output is read after it ended
	// (exec.Cmd.WaitDelay); 0 is 5 s (tests shorten it).
	waitDelay time.Duration
}

func (r *Runner) commandWaitDelay() time.Duration {
	if r.waitDelay > 0 {
		return r.waitDelay
	}
	return 5 * time.Second
}

// LoadManifest reads the dispatch payload at path; when the manifest was too big for
// Nomad's payload it fetches it from the signed URL the payload holds instead.
func LoadManifest(ctx context.Context, path string) (*mj.Manifest, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read manifest: %w", err)
	}
	var m mj.Manifest
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("decode manifest %s: %w", path, err)
	}
	if m.ManifestURL == "" {
		return &m, nil
	}
	// The link is signed: no error names it whole (a warm runner's errors
	// become the job's message).
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.ManifestURL, nil)
	if err != nil {
		return nil, mj.RedactError(fmt.Errorf("fetch manifest: %w", err), m.ManifestURL)
	}
	resp, err := (&Runner{}).client(nil).Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch manifest %s: %w", mj.ShownURL(m.ManifestURL), mj.RedactError(unwrapURLError(err), m.ManifestURL))
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fetch manifest: HTTP %s", resp.Status)
	}
	m = mj.Manifest{}
	return &m, json.NewDecoder(resp.Body).Decode(&m)
}

// Run executes all of m in this process and uploads its result: the raw_exec path.
// It returns the result it reported, and an error only when the result itself could
// not be uploaded.
func (r *Runner) Run(ctx context.Context, m *mj.Manifest) (*mj.Result, error) {
	st := r.Fetch(ctx, m)
	r.Exec(ctx, m, st)
	return r.Upload(ctx, m, st)
}

// State is what the phases of a job hand each other through the working directory
// (docker pools run them as separate tasks sharing the allocation directory).
type State struct {
	Deadline   time.Time   `json:"deadline"` // zero: no timeout
	Failed     bool        `json:"failed"`
	Error      string      `json:"error,omitempty"`
	InputBytes int64       `json:"input_bytes"`
	Outputs    []mj.Output `json:"outputs,omitempty"`
	// Analysis: the JSON blocks analysis filters printed (readAnalysis).
	Analysis []mj.Analysis `json:"analysis,omitempty"`
	Done     bool          `json:"done"` // the commands ran (or the job failed before)
	// Usage is what the commands (and the probes) consumed (usage.go).
	Usage mj.Usage `json:"usage"`
	// Stopped: the worker was told to stop (Nomad stopped the task: a drain, a
	// node shutdown, a cancel) before the job ended. No result is reported, so the
	// dispatcher treats it as a lost worker and retries it.
	Stopped bool `json:"stopped,omitempty"`
	// WorkerFault: this worker cannot run jobs (it could not cap their processes):
	// reported like Stopped, so the job is retried, elsewhere if Nomad can.
	WorkerFault string `json:"worker_fault,omitempty"`
	// Job is the manifest without its signed links (ExecManifest): all the exec
	// phase of a docker pool gets, so that nothing ffmpeg can read holds a secret.
	Job *mj.Manifest `json:"job,omitempty"`
}

// ExecManifest is m without anything secret: no upload, progress or manifest
// link, and input names without their URLs. It is all running the commands needs.
func ExecManifest(m *mj.Manifest) *mj.Manifest {
	c := *m
	c.UploadURL, c.ProgressURL, c.ManifestURL, c.UploadsURL = "", "", "", ""
	c.InputFiles = make(map[string]string, len(m.InputFiles))
	for name := range m.InputFiles {
		c.InputFiles[name] = ""
	}
	return &c
}

// ErrStopped is Upload's answer for a stopped job: nothing was reported.
var ErrStopped = errors.New("the worker was stopped before the job ended; no result is reported, so the job is retried")

const stateFile = ".mediajobs-state.json"

func (st *State) fail(err error) {
	if !st.Failed {
		st.Failed, st.Error, st.Outputs = true, err.Error(), nil
	}
}

// SaveState writes st for the next phase.
func (r *Runner) SaveState(st *State) error {
	return os.WriteFile(filepath.Join(r.WorkDir, stateFile), []byte(mustJSON(st)), 0o640)
}

// LoadState reads what the previous phase left; a missing state is a failure.
func (r *Runner) LoadState() *State {
	b, err := os.ReadFile(filepath.Join(r.WorkDir, stateFile))
	var st State
	if err == nil {
		err = json.Unmarshal(b, &st)
	}
	if err != nil {
		st.fail(fmt.Errorf("the worker lost its state between phases: %v", err))
	}
	return &st
}

func (r *Runner) deadline(ctx context.Context, st *State) (context.Context, context.CancelFunc) {
	if st.Deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	return context.WithDeadline(ctx, st.Deadline)
}

func (r *Runner) defaults(m *mj.Manifest) {
	if r.Log == nil {
		r.Log = io.Discard
	}
	r.AllowGPU = m.AllowGPU
	if r.Sandbox != nil {
		r.Sandbox.GPU = m.AllowGPU
	}
}

// interrupted explains why ctx ended: the job's deadline (a final failure), or a
// stop from outside (recorded in st: the result is withheld and the job retried).
func interrupted(ctx context.Context, m *mj.Manifest, st *State, where string) error {
	if errors.Is(ctx.Err(), context.DeadlineExceeded) {
		return timeoutError(m, where)
	}
	st.Stopped = true
	return fmt.Errorf("the worker was stopped %s", where)
}

func timeoutError(m *mj.Manifest, where string) error {
	return fmt.Errorf("job timed out after %ds (timeout_seconds) %s; ffmpeg was stopped", m.TimeoutSeconds, where)
}

// unwrapURLError drops net/http's `Get "<url>":` wrapper; the caller names the URL.
func unwrapURLError(err error) error {
	var ue *url.Error
	if errors.As(err, &ue) {
		return ue.Err
	}
	return err
}

func lastLines(s string, n int) string {
	lines := strings.Split(s, "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	max int
	b   []byte
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.b = append(t.b, p...)
	if len(t.b) > t.max {
		t.b = t.b[len(t.b)-t.max:]
	}
	return len(p), nil
}

func (t *tailBuffer) String() string { return string(t.b) }

// serviceTransport is one connection pool for every call to the service (the
// gateway, its storage) in this process: a warm runner makes them for each
// job, and a pool per call would leave idle connections open at the gateway
// until they time out.
var serviceTransport = sync.OnceValue(func() *http.Transport {
	return http.DefaultTransport.(*http.Transport).Clone()
})

// retryUnlessRefused is retryablehttp's default policy, except that a dial
// the address policy refused (netguard.ErrRefused) is not tried again: it would
// be refused again, and the job would only wait longer for its error.
func retryUnlessRefused(ctx context.Context, resp *http.Response, err error) (bool, error) {
	if errors.Is(err, netguard.ErrRefused) {
		return false, err
	}
	return retryablehttp.DefaultRetryPolicy(ctx, resp, err)
}

// patientWait is the first wait of patient's retries (doubling, at most 15 s).
var patientWait = time.Second

// patient is the client for the gateway call a finished job's result depends on
// (its upload links): a gateway restarting, or going away from behind the load
// balancer at public_url, must not fail work that is done, so it retries
// connection errors and 5xx answers for about two minutes.
func (r *Runner) patient() *http.Client {
	if r.HTTP != nil {
		return r.HTTP
	}
	rc := retryablehttp.NewClient()
	rc.HTTPClient = &http.Client{Transport: serviceTransport()}
	rc.RetryMax = 10
	rc.RetryWaitMin, rc.RetryWaitMax = patientWait, 15*patientWait
	rc.Logger = nil
	return rc.StandardClient()
}

func (r *Runner) client(t *http.Transport) *http.Client {
	if r.HTTP != nil && t == nil {
		return r.HTTP
	}
	rc := retryablehttp.NewClient()
	if t == nil {
		t = serviceTransport()
	}
	rc.HTTPClient = &http.Client{Transport: t}
	rc.CheckRetry = retryUnlessRefused
	rc.RetryMax = 3
	rc.RetryWaitMin, rc.RetryWaitMax = 500*time.Millisecond, 5*time.Second
	rc.Logger = nil
	return rc.StandardClient()
}
