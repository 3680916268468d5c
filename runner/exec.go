package runner

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/command"
	"github.com/mediajobs/mediajobs/sandbox"
	"golang.org/x/sync/errgroup"
	"golang.org/x/sys/unix"
)

// Exec runs the commands, collects and probes the outputs. It needs no network:
// on docker pools it runs without any. Progress goes to ProgressFile when set
// (a sidecar posts it), else straight to the manifest's progress URL.
func (r *Runner) Exec(ctx context.Context, m *mj.Manifest, st *State) {
	r.defaults(m)
	defer func() { st.Done = true }()
	r.usage = &st.Usage
	defer func() { r.usage = nil }()
	if st.Failed || st.WorkerFault != "" {
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
		if errors.Is(err, sandbox.ErrNoGPUNodes) { // the node's fault too: retried elsewhere
			st.WorkerFault = err.Error()
			fmt.Fprintf(r.Log, "worker fault, the job is not run here: %s\n", err)
			return
		}
		st.fail(err)
		fmt.Fprintf(r.Log, "job failed: %s\n", err)
	}
}

func (r *Runner) exec(ctx context.Context, m *mj.Manifest, st *State) error {
	var argvs [][]string
	var after func(context.Context) error
	if m.Chunk != nil { // a phase of a chunked job (chunked.go)
		ph, err := r.chunkPhase(ctx, m)
		if err != nil {
			if ctx.Err() != nil {
				return interrupted(ctx, m, st, "while planning the chunked phase")
			}
			return err
		}
		argvs, after = ph.argvs, ph.after
	} else {
		var err error
		if argvs, err = r.commands(m); err != nil {
			return err
		}
	}
	var sb *jobSandbox
	if r.OneSandbox && r.Sandbox != nil && len(argvs) >= oneSandboxFrom {
		var noDriver *driverError
		var err error
		sb, err = r.startJobSandbox(ctx, m.DiskBytes)
		switch {
		case err == nil:
			fmt.Fprintf(r.Log, "running the job's %d commands in one sandbox\n", len(argvs))
			defer sb.close(r)
		case ctx.Err() != nil:
			return interrupted(ctx, m, st, fmt.Sprintf("while running command 1 of %d", len(argvs)))
		case errors.Is(err, errDiskFull):
			return fmt.Errorf("command 1 of %d: %w", len(argvs), err)
		case errors.As(err, &noDriver): // a sandbox per command does as well, only slower
			fmt.Fprintf(r.Log, "the job's commands run in a sandbox each: %v\n", err)
			sb = nil
		default:
			return fmt.Errorf("command 1 of %d failed: %w", len(argvs), err)
		}
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
		if sb != nil {
			err = r.ffmpegIn(ctx, sb, argv, rep, logw)
		} else {
			err = r.ffmpeg(ctx, argv, rep, m.DiskBytes, logw)
		}
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
			return fmt.Errorf("command %d of %d failed: %w", i+1, len(argvs), err)
		}
	}
	if sb != nil {
		sb.close(r) // nothing of the job runs while its outputs are read
	}
	if after != nil {
		if err := after(ctx); err != nil {
			if ctx.Err() != nil {
				return interrupted(ctx, m, st, "after the commands")
			}
			if a, ok := verifyAnalysis(err); ok { // the report, in the job's view
				st.Analysis = mj.BoundAnalysis(append(st.Analysis, a))
			}
			return err
		}
		if err := sweep(r.WorkDir); err != nil {
			return err
		}
	}
	files, err := collectOutputs(r.WorkDir, m.OutputNames)
	if err != nil {
		return err
	}
	if max := m.MaxOutputFiles; max > 0 && len(files) > max {
		return fmt.Errorf("the commands produced %d output files, more than the limit of %d", len(files), max)
	}
	outs := make([]mj.Output, len(files))
	probeErrs := make([]error, len(files))
	for i, f := range files {
		info, err := os.Lstat(filepath.Join(r.WorkDir, "outputs", f))
		if err != nil {
			return fmt.Errorf("read output %s: %w", f, err)
		}
		outs[i] = mj.Output{Name: f, Size: info.Size()}
	}
	// Probed here, without network (a playlist output may name URLs), a few
	// at once: an HLS ladder's segments each need an ffprobe process, which
	// spends most of its time loading libraries.
	var probes errgroup.Group
	probes.SetLimit(probeParallel())
	for i := range outs {
		probes.Go(func() error {
			outs[i].Probe, probeErrs[i] = r.probe(ctx, "outputs/"+outs[i].Name)
			return nil
		})
	}
	probes.Wait()
	for i, err := range probeErrs {
		if err != nil {
			fmt.Fprintf(r.Log, "ffprobe %s: %v (reported without metadata)\n", outs[i].Name, err)
		}
	}
	st.Outputs = append(st.Outputs, outs...)
	return nil
}

// probeParallel is how many outputs are probed at once: one per CPU, at most 4.
func probeParallel() int { return min(runtime.NumCPU(), 4) }

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
		cmd, err := r.Sandbox.Command(ctx, r.WorkDir, bin, args, sandbox.Env(gpuEnv()...))
		if err == nil {
			cmd.Stdin = noInput()
		}
		return cmd, err
	}
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Dir = r.WorkDir
	cmd.Env = ffmpegEnv(r.WorkDir)
	return cmd, nil
}

// noInput is a sandboxed command's stdin: an empty pipe, not the host's
// /dev/null. The sandbox's user owns, on the host, the inodes the runner owns
// (docs/containment.md): through a host file it inherits it could chmod it.
func noInput() io.Reader { return strings.NewReader("") }

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
	cmd.WaitDelay = r.commandWaitDelay()
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
		if errors.Is(err, exec.ErrWaitDelay) && cmd.ProcessState.Success() {
			// ffmpeg exited 0 and its outputs are whole; only the copy of its
			// stderr was cut short, stalled on a log that a loaded node's
			// log shipper drained slowly (r.Log is Nomad's task log, so the
			// note goes to the command's own log).
			fmt.Fprintf(log, "\nffmpeg's log was cut short: its copy stalled for %s after ffmpeg ended\n", cmd.WaitDelay)
			err = nil
		}
		r.meter(cmd, start)
	}
	released(cmd)
	// The progress pipe ends when its last writer goes: ffmpeg, normally with
	// the sandbox. A process left outside bwrap's reach (the sandbox killed as
	// it was being set up, when the job is stopped just then) may hold it for
	// ever: once the command is over, it is read for WaitDelay at most, and not
	// at all when the job was stopped. What is left runs in the job's pids
	// cgroup, which is emptied when the job ends.
	wait := time.After(cmd.WaitDelay)
	if ctx.Err() != nil {
		wait = time.After(0)
	}
	select {
	case <-done:
	case <-wait:
		pr.Close()
		<-done
	}
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
		sig, _ := killedBy(exit, r.Sandbox != nil)
		return r.commandFailed(ctx, argv, exit.ExitCode(), sig, tail.String(), r.Sandbox != nil)
	}
	return fmt.Errorf("could not start ffmpeg: %v", err)
}

// commandFailed is the error of a command that exited with code, or was killed
// by sig (0: it was not); tail is the end of its stderr. setup: the stderr is
// bwrap's too, and may say the sandbox could not start.
func (r *Runner) commandFailed(ctx context.Context, argv []string, code int, sig syscall.Signal, tail string, setup bool) error {
	msg := mj.RedactURLs(strings.TrimSpace(tail))
	if setup {
		if why := sandbox.SetupError(msg); why != "" {
			return sandboxSetupError(why)
		}
	}
	if msg == "" {
		msg = "ffmpeg printed no error"
	}
	if sig != 0 && ctx.Err() == nil {
		// Not our doing: the kernel's OOM killer, most likely.
		return fmt.Errorf("ffmpeg was killed by signal %s, most likely for going over the pool's memory limit (use a machine with more memory, or lower the resolution or the number of threads): %s",
			unix.SignalName(sig), lastLines(msg, 4))
	}
	if hint := concatURLHint(r.WorkDir, argv); hint != "" {
		return fmt.Errorf("ffmpeg exited with code %d: %s; %s", code, hint, lastLines(msg, 4))
	}
	return fmt.Errorf("ffmpeg exited with code %d: %s", code, lastLines(msg, 8))
}

// sandboxSetupError: bwrap could not set the sandbox up (why is its complaint).
func sandboxSetupError(why string) error {
	return fmt.Errorf("the sandbox for ffmpeg could not start on this worker (bubblewrap: %s); the node's operator must fix it", strings.TrimPrefix(why, "bwrap: "))
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
