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
	"io/fs"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/google/uuid"
	"github.com/hashicorp/go-retryablehttp"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/command"
	"github.com/mediajobs/mediajobs/netguard"
	"github.com/mediajobs/mediajobs/sandbox"
	"golang.org/x/sys/unix"
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
	usage        *mj.Usage // where meter adds, while Exec runs (usage.go)
	// Sandbox, when set, runs ffmpeg and ffprobe inside it (raw_exec pools). Nil
	// runs them directly: on docker pools the container is the sandbox.
	Sandbox *sandbox.Bwrap
	// MaxProcs caps the processes and threads of a sandboxed job; 0 is
	// sandbox.MaxProcs.
	MaxProcs int
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
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.ManifestURL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := (&Runner{}).client(nil).Do(req)
	if err != nil {
		return nil, fmt.Errorf("fetch manifest: %w", err)
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

// Fetch checks the commands and downloads the inputs into inputs/. It needs the
// network; a failure is recorded in the state, not returned.
func (r *Runner) Fetch(ctx context.Context, m *mj.Manifest) *State {
	r.defaults(m)
	st := &State{}
	if m.TimeoutSeconds > 0 {
		st.Deadline = time.Now().Add(time.Duration(m.TimeoutSeconds) * time.Second)
	}
	st.Job = ExecManifest(m)
	ctx, cancel := r.deadline(ctx, st)
	defer cancel()
	if err := r.fetch(ctx, m, st); err != nil {
		st.fail(err)
		fmt.Fprintf(r.Log, "job failed: %s\n", err)
	}
	return st
}

func (r *Runner) fetch(ctx context.Context, m *mj.Manifest, st *State) error {
	for _, d := range []string{"inputs", "outputs"} {
		if err := os.MkdirAll(filepath.Join(r.WorkDir, d), 0o750); err != nil {
			return fmt.Errorf("prepare working directory: %w", err)
		}
	}
	if _, err := r.commands(m); err != nil {
		return err
	}
	// Inputs are user URLs: they may not reach private or link-local addresses.
	// The service's own signed files (a temporary file's download_url) come from
	// where the outputs go, whatever its address.
	guard, err := netguard.NewPolicy(m.AllowLoopback, m.AllowCIDRs, m.AllowHosts)
	if err != nil {
		return fmt.Errorf("manifest: %w", err)
	}
	inputs, own := r.client(guard.Transport()), r.ownClient()
	files := serviceFiles(m.UploadURL)
	names := make([]string, 0, len(m.InputFiles))
	for name := range m.InputFiles {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		client := inputs
		if isOwnFile(files, m.InputFiles[name]) {
			client = own
		}
		budget, why := inputBudget(m, st.InputBytes)
		n, err := fetch(ctx, client, m.InputFiles[name], filepath.Join(r.WorkDir, "inputs", name), budget, why)
		if err != nil {
			if ctx.Err() != nil {
				return interrupted(ctx, m, st, fmt.Sprintf("while fetching input %q", name))
			}
			return fmt.Errorf("input %q could not be fetched from %s: %v", name, redact(m.InputFiles[name]), err)
		}
		st.InputBytes += n
		fmt.Fprintf(r.Log, "fetched input %q: %d bytes\n", name, n)
	}
	return nil
}

// prepare is command.Prepare; the escape tests swap it to prove the sandbox
// holds for commands the checker would refuse.
var prepare = command.Prepare

// commands splits and checks every command again (the gateway did already):
// nothing the runner executes escapes these rules.
func (r *Runner) commands(m *mj.Manifest) ([][]string, error) {
	// Worker: options and filters the gateway's table does not know (it deferred
	// them) are checked against this worker's own ffmpeg, read once per process.
	spec := command.Spec{Inputs: map[string]bool{}, Outputs: map[string]bool{}, AllowGPU: r.AllowGPU, Worker: command.WorkerOptions(r.FFmpeg)}
	for name := range m.InputFiles {
		spec.Inputs[name] = true
	}
	for _, name := range m.OutputNames {
		spec.Outputs[name] = true
	}
	argvs := make([][]string, len(m.FFmpegCommands))
	for i, c := range m.FFmpegCommands {
		argv, err := prepare(c, spec)
		if err != nil {
			return nil, fmt.Errorf("command %d: %v", i+1, err)
		}
		argvs[i] = argv
	}
	return argvs, nil
}

// Exec runs the commands, collects and probes the outputs. It needs no network:
// on docker pools it runs without any. Progress goes to ProgressFile when set
// (a sidecar posts it), else straight to the manifest's progress URL.
func (r *Runner) Exec(ctx context.Context, m *mj.Manifest, st *State) {
	r.defaults(m)
	defer func() { st.Done = true }()
	r.usage = &st.Usage
	defer func() { r.usage = nil }()
	if st.Failed {
		return
	}
	ctx, cancel := r.deadline(ctx, st)
	defer cancel()
	release, err := r.capProcesses()
	if err != nil { // the node's fault, not the job's
		st.WorkerFault = err.Error()
		fmt.Fprintf(r.Log, "worker fault, the job is not run here: %s\n", err)
		return
	}
	defer release()
	if err := r.exec(ctx, m, st); err != nil {
		st.fail(err)
		fmt.Fprintf(r.Log, "job failed: %s\n", err)
	}
}

func (r *Runner) exec(ctx context.Context, m *mj.Manifest, st *State) error {
	argvs, err := r.commands(m)
	if err != nil {
		return err
	}
	for i, argv := range argvs {
		fmt.Fprintf(r.Log, "running command %d of %d: ffmpeg %s\n", i+1, len(argvs), strings.Join(argv, " "))
		rep := &reporter{url: m.ProgressURL, file: r.ProgressFile, client: r.client(nil), index: i + 1, count: len(argvs), now: time.Now,
			duration: r.expectedDuration(ctx, argv)}
		// A log that cannot be kept fails nothing: the job runs without it.
		var logw io.Writer = io.Discard
		lf, err := createLog(r.WorkDir, i+1)
		if err != nil {
			fmt.Fprintf(r.Log, "command %d: cannot keep its log: %v\n", i+1, err)
		} else {
			logw = lf
		}
		err = r.ffmpeg(ctx, argv, rep, m.DiskBytes, logw)
		if lf != nil {
			if cerr := lf.Close(); cerr != nil {
				fmt.Fprintf(r.Log, "command %d: log: %v\n", i+1, cerr)
			}
			st.Analysis = mj.BoundAnalysis(append(st.Analysis, readAnalysis(r.WorkDir, i+1)...))
		}
		if serr := sweep(r.WorkDir); serr != nil {
			return fmt.Errorf("command %d of %d: %w", i+1, len(argvs), serr)
		}
		if err != nil {
			if errors.Is(err, errDiskFull) {
				return fmt.Errorf("command %d of %d: %w", i+1, len(argvs), err)
			}
			if ctx.Err() != nil {
				return interrupted(ctx, m, st, fmt.Sprintf("while running command %d of %d", i+1, len(argvs)))
			}
			return fmt.Errorf("command %d of %d failed: %v", i+1, len(argvs), err)
		}
	}
	files, err := collectOutputs(r.WorkDir, m.OutputNames)
	if err != nil {
		return err
	}
	if max := m.MaxOutputFiles; max > 0 && len(files) > max {
		return fmt.Errorf("the commands produced %d output files, more than the limit of %d", len(files), max)
	}
	for _, f := range files {
		info, err := os.Lstat(filepath.Join(r.WorkDir, "outputs", f))
		if err != nil {
			return fmt.Errorf("read output %s: %w", f, err)
		}
		// Probed here, without network: a playlist output may name URLs.
		pr, err := r.probe(ctx, "outputs/"+f)
		if err != nil {
			fmt.Fprintf(r.Log, "ffprobe %s: %v (reported without metadata)\n", f, err)
		}
		st.Outputs = append(st.Outputs, mj.Output{Name: f, Size: info.Size(), Probe: pr})
	}
	return nil
}

// Upload sends the outputs and the result. It needs the network (to the gateway).
func (r *Runner) Upload(ctx context.Context, m *mj.Manifest, st *State) (*mj.Result, error) {
	r.defaults(m)
	if st.WorkerFault != "" {
		return nil, fmt.Errorf("%s; no result is reported, so the job is retried", st.WorkerFault)
	}
	if st.Stopped {
		return nil, ErrStopped
	}
	client := r.client(nil)
	uctx, cancel := r.deadline(ctx, st)
	defer cancel()
	// Past the deadline, what is left (links, logs, the result) ends within
	// ReportSeconds: the dispatcher's backstop looks for the result then.
	ctx, rcancel := reportContext(ctx, m, st)
	defer rcancel()
	alloc := allocPrefix()
	if !st.Failed && !st.Done {
		// The exec task ended without saving its state: killed outright (most
		// often the pool's memory limit), or it never started.
		st.fail(fmt.Errorf("the commands did not run to the end: the worker was killed (for example for going over the pool's memory limit) or could not start"))
	}
	if !st.Failed {
		if err := mj.CheckOutputs(st.Outputs, m.OutputNames, m.MaxOutputFiles); err != nil {
			st.fail(err) // the state was written where ffmpeg could write too
		}
	}
	var root *os.Root
	if !st.Failed {
		// Through an os.Root: no link ffmpeg made leads the upload out of the job.
		var err error
		if root, err = os.OpenRoot(r.WorkDir); err != nil {
			st.fail(fmt.Errorf("read outputs: %w", err))
		} else {
			defer root.Close()
		}
	}
	// Asked for with ctx, not the job's deadline: the result goes up even after a
	// timeout, to say so.
	logs := r.presentLogs(m)
	dest, dests, err := r.uploadLinks(ctx, r.patient(), m, st, logs, alloc)
	var refused *linksRefused
	if err != nil && !st.Failed && errors.As(err, &refused) {
		// The outputs cannot go up (a name the gateway refuses, a limit of its):
		// the job fails, and says why, if the result alone can still be reported.
		// A gateway that stayed unreachable is no refusal: nothing is reported, and
		// the dispatcher runs the attempt again.
		fmt.Fprintf(r.Log, "upload links: %v\n", err)
		st.fail(fmt.Errorf("could not upload the outputs: %w", err))
		dest, dests, err = r.uploadLinks(ctx, r.patient(), m, st, logs, alloc)
	}
	if err != nil {
		return nil, fmt.Errorf("report result: %w", err)
	}
	if !st.Failed {
		for i := range st.Outputs {
			o := &st.Outputs[i]
			fh, err := openOutput(root, o.Name)
			if err == nil {
				// The size sent is the file's, not the one the state claims.
				if fi, serr := fh.Stat(); serr != nil || !fi.Mode().IsRegular() {
					fh.Close()
					err = fmt.Errorf("not a regular file")
				} else {
					o.Size = fi.Size()
				}
			}
			if err == nil {
				err = r.deliver(uctx, m, client, fh, o, dest, dests)
				fh.Close()
			}
			if err != nil {
				if uctx.Err() != nil {
					err = timeoutError(m, "while uploading outputs")
				} else {
					err = fmt.Errorf("upload output %s: %w", o.Name, err)
				}
				st.fail(err)
				break
			}
			fmt.Fprintf(r.Log, "uploaded output %s: %d bytes\n", o.Name, o.Size)
		}
	}
	// The logs go up whatever happened (a failed job's most of all); one that
	// cannot is left out of the result, which still goes up.
	var sent []mj.LogFile
	lctx, lcancel := logContext(ctx) // past a timeout too: it says why
	defer lcancel()
	for _, l := range logs {
		if err := r.uploadLog(lctx, client, dest(logPath(l.Command)), l); err != nil {
			fmt.Fprintf(r.Log, "upload log of command %d: %v\n", l.Command, err)
			continue
		}
		sent = append(sent, l)
	}
	res := &mj.Result{JobID: m.JobID, Attempt: m.Attempt, AllocID: strings.TrimSuffix(alloc, "/"), Succeeded: !st.Failed, ErrorMessage: st.Error, InputBytes: st.InputBytes, Logs: sent,
		Analysis: mj.BoundAnalysis(st.Analysis), Usage: resultUsage(st, nil)}
	if !st.Failed {
		res.Outputs = st.Outputs
		res.Usage = resultUsage(st, st.Outputs)
		fmt.Fprintf(r.Log, "job succeeded: %d output file(s)\n", len(res.Outputs))
	}
	// The result goes up even past the deadline: it says the job timed out.
	if err := put(ctx, client, dest("result.json"), strings.NewReader(mustJSON(res)), -1); err != nil {
		return res, fmt.Errorf("report result: %w", err)
	}
	return res, nil
}

// reportContext bounds ctx to the job's deadline plus the manifest's
// ReportSeconds (30 when unset); a job without a timeout is not bounded.
func reportContext(ctx context.Context, m *mj.Manifest, st *State) (context.Context, context.CancelFunc) {
	if st.Deadline.IsZero() {
		return context.WithCancel(ctx)
	}
	window := time.Duration(m.ReportSeconds) * time.Second
	if window <= 0 {
		window = 30 * time.Second
	}
	return context.WithDeadline(ctx, st.Deadline.Add(window))
}

// logContext is the logs' share of ctx: two minutes at most, and only the first
// half of what is left before ctx's deadline, so the result still goes up after.
func logContext(ctx context.Context) (context.Context, context.CancelFunc) {
	limit := 2 * time.Minute
	if dl, ok := ctx.Deadline(); ok {
		limit = min(limit, time.Until(dl)/2)
	}
	return context.WithTimeout(ctx, limit)
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

// errDiskFull: the job's directory outgrew the pool's disk.
var errDiskFull = errors.New("the job's files (inputs, intermediate files and outputs) grew past the pool's disk limit; ffmpeg was stopped (use a pool with more disk, or produce smaller files)")

// ffprobe is the ffprobe binary to run.
func (r *Runner) ffprobe() string {
	if r.FFprobe == "" {
		return "ffprobe"
	}
	return r.FFprobe
}

// command is bin with args, run in the job's directory with a clean environment:
// inside the sandbox when the runner has one.
func (r *Runner) command(ctx context.Context, bin string, args ...string) (*exec.Cmd, error) {
	if r.Sandbox != nil {
		return r.Sandbox.Command(ctx, r.WorkDir, bin, args, sandbox.Env(gpuEnv()...))
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = r.WorkDir
	cmd.Env = ffmpegEnv(r.WorkDir)
	return cmd, nil
}

// ffmpeg runs one command in the working directory; on failure the error carries
// the exit code and the tail of ffmpeg's stderr.
// ffmpeg's -progress goes to file descriptor 3, a pipe of our own, so it can never
// mix with an output a command writes to stdout. With diskLimit > 0, ffmpeg is
// stopped once the job's directory holds more than that many bytes.
func (r *Runner) ffmpeg(ctx context.Context, argv []string, rep *reporter, diskLimit int64, log io.Writer) error {
	bin := r.FFmpeg
	if bin == "" {
		bin = "ffmpeg"
	}
	ctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	args := append(command.RunnerArgs(), argv...)
	cmd, err := r.command(ctx, bin, args...)
	if err != nil {
		return err
	}
	tail := &tailBuffer{max: 4096}
	errs := &errorLines{dst: tail}
	defer errs.Flush()
	cmd.Stdout = io.Discard
	cmd.Stderr = io.MultiWriter(errs, r.Log, log)
	cmd.WaitDelay = 5 * time.Second
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	cmd.ExtraFiles = []*os.File{pw}
	done := make(chan struct{})
	go func() { defer close(done); rep.read(ctx, pr) }()
	start := time.Now()
	err = cmd.Start()
	pw.Close() // ffmpeg holds the write end now
	if err == nil {
		if diskLimit > 0 {
			go watchDisk(ctx, r.WorkDir, diskLimit, cancel)
		}
		err = cmd.Wait()
		r.meter(cmd, start)
	}
	<-done
	pr.Close()
	if err == nil {
		return nil
	}
	if errors.Is(context.Cause(ctx), errDiskFull) {
		return errDiskFull
	}
	var exit *exec.ExitError
	if errors.As(err, &exit) {
		errs.Flush()
		msg := redactURLs(strings.TrimSpace(tail.String()))
		if r.Sandbox != nil {
			if why := sandbox.SetupError(msg); why != "" {
				return fmt.Errorf("the sandbox for ffmpeg could not start on this worker (bubblewrap: %s); the node's operator must fix it", strings.TrimPrefix(why, "bwrap: "))
			}
		}
		if msg == "" {
			msg = "ffmpeg printed no error"
		}
		if sig, ok := killedBy(exit, r.Sandbox != nil); ok && ctx.Err() == nil {
			// Not our doing: the kernel's OOM killer, most likely.
			return fmt.Errorf("ffmpeg was killed by signal %s, most likely for going over the pool's memory limit (use a machine with more memory, or lower the resolution or the number of threads): %s",
				unix.SignalName(sig), lastLines(msg, 4))
		}
		if hint := concatURLHint(r.WorkDir, argv); hint != "" {
			return fmt.Errorf("ffmpeg exited with code %d: %s; %s", exit.ExitCode(), hint, lastLines(msg, 4))
		}
		return fmt.Errorf("ffmpeg exited with code %d: %s", exit.ExitCode(), lastLines(msg, 8))
	}
	return fmt.Errorf("could not start ffmpeg: %v", err)
}

// killedBy tells whether ffmpeg died of a signal: directly, or inside bubblewrap,
// which exits with 128 + the signal of the command it ran.
func killedBy(exit *exec.ExitError, sandboxed bool) (syscall.Signal, bool) {
	ws, ok := exit.Sys().(syscall.WaitStatus)
	if !ok {
		return 0, false
	}
	if ws.Signaled() {
		return ws.Signal(), true
	}
	if c := ws.ExitStatus(); sandboxed && c > 128 && c < 128+65 {
		return syscall.Signal(c - 128), true
	}
	return 0, false
}

// watchDisk cancels ctx with errDiskFull once dir holds more than limit bytes.
// Nomad reserves a pool's ephemeral disk but does not enforce it.
func watchDisk(ctx context.Context, dir string, limit int64, cancel context.CancelCauseFunc) {
	t := time.NewTicker(diskEvery)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if dirSize(dir) > limit {
			cancel(errDiskFull)
			return
		}
	}
}

// diskEvery is how often a running job's directory is measured.
const diskEvery = 500 * time.Millisecond

// dirSize is the bytes allocated to the files under dir (sparse files count what
// they occupy, not their length).
func dirSize(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		if info, err := d.Info(); err == nil {
			if st, ok := info.Sys().(*syscall.Stat_t); ok {
				n += st.Blocks * 512
			} else {
				n += info.Size()
			}
		}
		return nil
	})
	return n
}

// ffmpegEnv is all ffmpeg gets of the environment when it runs without the
// bubblewrap sandbox (docker pools).
func ffmpegEnv(workDir string) []string {
	return append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + workDir}, gpuEnv()...)
}

// gpuEnv passes on the allocation's GPUs. On a GPU pool Nomad names them in
// NVIDIA_VISIBLE_DEVICES; the NVIDIA container runtime applies it on docker pools,
// but on raw_exec only CUDA_VISIBLE_DEVICES keeps ffmpeg off the other jobs' GPUs.
func gpuEnv() []string {
	var env []string
	if v := os.Getenv("NVIDIA_VISIBLE_DEVICES"); v != "" {
		env = append(env, "NVIDIA_VISIBLE_DEVICES="+v)
		if v != "all" && v != "none" && v != "void" {
			env = append(env, "CUDA_VISIBLE_DEVICES="+v)
		}
	}
	return env
}

// collectOutputs lists the files produced for each declared name: the file itself,
// or every file matching a sequence pattern such as seg_%03d.ts or a ladder's
// stream_%v/playlist.m3u8, as its name relative to outputs/. Only regular files
// count, in outputs/ or one directory below it (mj.MaxOutputDirs), never through
// a link: a link, a FIFO or a deeper directory is not an output.
// outputs/ is read through an os.Root of the job's directory: a compromised
// ffmpeg could have made outputs/ a link to a host directory.
func collectOutputs(work string, names []string) ([]string, error) {
	root, err := os.OpenRoot(work)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if fi, err := root.Lstat("outputs"); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("the job's outputs/ directory is gone or not a directory")
	}
	entries, err := readDir(root, "outputs")
	if err != nil {
		return nil, err
	}
	var found []string
	for _, e := range entries {
		switch {
		case e.Type().IsRegular():
			found = append(found, e.Name())
		case e.Type().IsDir() && mj.MaxOutputDirs > 0:
			// Lstat again: readDir's type is the entry's, and a directory it
			// names must still be one (not a link put in its place).
			if fi, err := root.Lstat("outputs/" + e.Name()); err != nil || !fi.IsDir() {
				continue
			}
			sub, err := readDir(root, "outputs/"+e.Name())
			if err != nil {
				return nil, err
			}
			for _, f := range sub {
				if f.Type().IsRegular() {
					found = append(found, e.Name()+"/"+f.Name())
				}
			}
		}
	}
	var files []string
	seen := map[string]bool{}
	for _, name := range names {
		re := mj.OutputPattern(name)
		n := 0
		for _, f := range found {
			if re.MatchString(f) {
				if !seen[f] { // two overlapping patterns name it once
					files = append(files, f)
					seen[f] = true
				}
				n++
			}
		}
		if n == 0 {
			return nil, fmt.Errorf("the commands finished but produced no outputs/%s; check that a command writes it", name)
		}
	}
	return files, nil
}

// readDir lists a directory of root, sorted by name.
func readDir(root *os.Root, dir string) ([]os.DirEntry, error) {
	d, err := root.Open(dir)
	if err != nil {
		return nil, err
	}
	defer d.Close()
	entries, err := d.ReadDir(-1)
	sort.Slice(entries, func(a, b int) bool { return entries[a].Name() < entries[b].Name() })
	return entries, err
}

// openOutput opens outputs/<name> of root for upload: never through a link, the
// file or its directory (a name has at most one), and a regular file only (the
// caller checks that on the open file).
func openOutput(root *os.Root, name string) (*os.File, error) {
	if dir, _, ok := strings.Cut(name, "/"); ok {
		if fi, err := root.Lstat("outputs/" + dir); err != nil || !fi.IsDir() {
			return nil, fmt.Errorf("outputs/%s is not a directory", dir)
		}
	}
	return root.OpenFile("outputs/"+name, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
}

// fetch downloads url to path, refusing more than budget bytes (the pool's disk
// left to the job; -1 for no cap) or more than the worker has free.
func fetch(ctx context.Context, client *http.Client, url, path string, budget int64, budgetWhy string) (int64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return 0, err
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, scrub(unwrapURLError(err), url)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 == 3 { // only the service's own files stop at one
		return 0, fmt.Errorf("HTTP %s: a redirect that is not followed (the service's own files are fetched without redirects; other URLs' redirects need a Location)", resp.Status)
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("HTTP %s", resp.Status)
	}
	// Nomad reserves ephemeral disk for scheduling but does not enforce it: a
	// large input must fail here, not fill the node's disk.
	limit, why := budget, budgetWhy
	if free := freeBytes(filepath.Dir(path)); free >= 0 && (limit < 0 || free-diskReserve < limit) {
		limit, why = max(free-diskReserve, 0), fmt.Sprintf("the %d bytes free on the worker", max(free-diskReserve, 0))
	}
	if limit >= 0 && resp.ContentLength > limit {
		return 0, fmt.Errorf("it is %d bytes, more than %s", resp.ContentLength, why)
	}
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		return 0, err
	}
	body := io.Reader(resp.Body)
	if limit >= 0 {
		body = io.LimitReader(resp.Body, limit+1)
	}
	n, err := io.Copy(f, body)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil && limit >= 0 && n > limit {
		os.Remove(path)
		return n, fmt.Errorf("it is more than %s", why)
	}
	return n, err
}

// diskReserve is kept free for the outputs' metadata, the state and the logs.
const diskReserve = 64 << 20

// freeBytes is the space left to an unprivileged writer of dir, or -1 if unknown.
func freeBytes(dir string) int64 {
	var fs unix.Statfs_t
	if unix.Statfs(dir, &fs) != nil {
		return -1
	}
	return int64(fs.Bavail) * int64(fs.Bsize)
}

func put(ctx context.Context, client *http.Client, url string, body io.Reader, size int64) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, url, body)
	if err != nil {
		return err
	}
	if size >= 0 {
		req.ContentLength = size
	}
	if rs, ok := body.(io.ReadSeeker); ok {
		req.GetBody = func() (io.ReadCloser, error) {
			_, err := rs.Seek(0, io.SeekStart)
			return io.NopCloser(rs), err
		}
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	resp, err := client.Do(req)
	if err != nil {
		return scrub(unwrapURLError(err), url)
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("HTTP %s: %s", resp.Status, strings.TrimSpace(string(b)))
	}
	return nil
}

// serviceFiles is the service's "<public_url>/files/" prefix, taken from the
// upload URL (the gateway signs it), or "" if it has none.
func serviceFiles(upload string) string {
	i := strings.Index(upload, "/files/")
	if i < 0 || !strings.HasPrefix(upload, "http") {
		return ""
	}
	return upload[:i+len("/files/")]
}

// uploadLinks returns where each file of the attempt goes. With m.UploadsURL the
// runner asks the gateway for one link per file it found (the store's own
// presigned PUTs with S3, so no byte passes through a gateway); otherwise the
// manifest's signed template serves every name.
func (r *Runner) uploadLinks(ctx context.Context, client *http.Client, m *mj.Manifest, st *State, logs []mj.LogFile, alloc string) (func(string) string, map[string]string, error) {
	if m.UploadsURL == "" {
		return func(path string) string { return uploadURL(m, alloc+path) }, nil, nil
	}
	files := []string{"result.json"}
	if !st.Failed {
		for _, o := range st.Outputs {
			files = append(files, "outputs/"+o.Name)
		}
	}
	for _, l := range logs {
		files = append(files, logPath(l.Command))
	}
	body := mustJSON(map[string]any{"alloc": strings.TrimSuffix(alloc, "/"), "files": files, "destinations": true})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, m.UploadsURL, strings.NewReader(body))
	if err != nil {
		return nil, nil, err
	}
	req.Header.Set("Content-Type", "application/json")
	resp, err := client.Do(req)
	if err != nil {
		return nil, nil, scrub(unwrapURLError(err), m.UploadsURL)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if resp.StatusCode == http.StatusNotFound && m.UploadURL != "" && strings.Contains(string(b), "no such route") {
		// A gateway older than the dispatcher has no /upload-urls/: the template.
		return func(path string) string { return uploadURL(m, alloc+path) }, nil, nil
	}
	if resp.StatusCode != http.StatusOK {
		err := fmt.Errorf("upload links: HTTP %s: %s", resp.Status, lastLines(string(b), 3))
		if resp.StatusCode >= 400 && resp.StatusCode < 500 {
			return nil, nil, &linksRefused{err}
		}
		return nil, nil, err
	}
	var out struct {
		Data struct {
			URLs map[string]string `json:"urls"`
			// Destinations: "outputs/<name>" → the user's URL (destinations.go).
			Destinations map[string]string `json:"destinations"`
		} `json:"data"`
	}
	if err := json.Unmarshal(b, &out); err != nil {
		return nil, nil, fmt.Errorf("upload links: %w", err)
	}
	for _, f := range files {
		if out.Data.URLs[f] == "" && out.Data.Destinations[f] == "" {
			return nil, nil, &linksRefused{fmt.Errorf("upload links: none for %s", f)}
		}
	}
	return func(path string) string { return out.Data.URLs[path] }, out.Data.Destinations, nil
}

// allocPrefix is where this allocation's files go within the attempt's upload
// scope: "<alloc id>/". Nomad may run an attempt twice (it replaces an allocation
// whose node was lost, whatever the reschedule policy), and each copy keeps its
// files apart; the dispatcher publishes those of the allocation it applies.
func allocPrefix() string {
	id := os.Getenv("NOMAD_ALLOC_ID")
	if _, err := uuid.Parse(id); err != nil || len(id) != 36 {
		return ""
	}
	return id + "/"
}

func uploadURL(m *mj.Manifest, path string) string {
	return strings.Replace(m.UploadURL, "%7Bpath%7D", path, 1)
}

// redact drops a URL's query, which may hold someone's signature or token.
func redact(u string) string {
	if i := strings.IndexAny(u, "?#"); i >= 0 {
		return u[:i] + "?…"
	}
	return u
}

// scrub removes rawURL's query from err's text: the retrying client names the
// whole URL, signature included, and the message ends up in the job's
// error_message and in the state file ffmpeg's task can read.
func scrub(err error, rawURL string) error {
	if msg := err.Error(); strings.Contains(msg, rawURL) {
		return errors.New(strings.ReplaceAll(msg, rawURL, redact(rawURL)))
	}
	return err
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

// linksRefused is a gateway's answer that it will not give the upload links asked
// for (a name it refuses, a finished attempt), as opposed to no answer at all.
type linksRefused struct{ err error }

func (e *linksRefused) Error() string { return e.err.Error() }
func (e *linksRefused) Unwrap() error { return e.err }

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
	if t != nil {
		rc.HTTPClient = &http.Client{Transport: t}
	}
	rc.RetryMax = 3
	rc.RetryWaitMin, rc.RetryWaitMax = 500*time.Millisecond, 5*time.Second
	rc.Logger = nil
	return rc.StandardClient()
}
