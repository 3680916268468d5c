package runner

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/command"
	"github.com/mediajobs/mediajobs/runner/driver"
	"github.com/mediajobs/mediajobs/sandbox"
)

// One sandbox per job (OneSandbox: a warm runner's jobs; docs/warm.md#containment):
// one bwrap runs all of a job's commands, one after the other, through the
// driver (package driver) as its PID 1: this binary again.

// oneSandboxFrom is how many commands a job has for OneSandbox to start the
// driver: a job of one command gets one sandbox anyway, without it
// (docs/warm.md#containment: the driver's start costs about what a sandbox
// does).
var oneSandboxFrom = 2

// runnerBinary is the binary the driver runs from: this one (tests change it).
var runnerBinary = os.Executable

// driverStartTimeout bounds the driver's start: the job's own timeout may be
// an hour.
const driverStartTimeout = 30 * time.Second

var errDriverLate = fmt.Errorf("it did not answer within %s", driverStartTimeout)

// driverError: the driver did not start (the runner's binary was replaced
// under it, say); a sandbox per command does the job instead.
type driverError struct{ why string }

func (e *driverError) Error() string {
	return "the runner's sandbox driver did not start: " + e.why
}

// jobSandbox is the host's side of one job's sandbox.
type jobSandbox struct {
	ffmpeg string // its absolute path, bound in the sandbox
	cmd    *exec.Cmd
	ctx    context.Context // ends the sandbox: the job's, or the disk watch's errDiskFull
	cancel context.CancelCauseFunc
	ctl    *os.File // fd 3's write end
	evf    *os.File // fd 4's read end
	ev     *bufio.Reader
	stderr *tailBuffer   // bwrap's and the driver's own (not the commands'); read once exited is closed
	exited chan struct{} // bwrap was waited for
	ended  chan struct{} // close began
	once   sync.Once
	wall   time.Duration // the sandbox's start and its commands, for usage
}

// realBinary is bin's absolute path, links resolved: what the sandbox binds.
func realBinary(bin string) (string, error) {
	abs, err := exec.LookPath(bin)
	if err != nil {
		return "", err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return "", err
	}
	return filepath.Abs(abs)
}

// startJobSandbox starts the job's sandbox and waits for its driver. With
// diskLimit > 0 the sandbox is stopped once the job's directory holds more.
func (r *Runner) startJobSandbox(ctx context.Context, diskLimit int64) (*jobSandbox, error) {
	bwrap := r.Sandbox.Path
	if bwrap == "" {
		bwrap = "bwrap"
	}
	bwrap, err := exec.LookPath(bwrap)
	if err != nil {
		return nil, sandbox.ErrMissing
	}
	ff := r.FFmpeg
	if ff == "" {
		ff = "ffmpeg"
	}
	ffAbs, err := realBinary(ff)
	if err != nil {
		return nil, fmt.Errorf("%s is not installed on this worker: %v", ff, err)
	}
	self, err := runnerBinary()
	if err == nil {
		self, err = realBinary(self)
	}
	if err != nil {
		return nil, &driverError{err.Error()}
	}
	hostDir, err := filepath.Abs(r.WorkDir)
	if err != nil {
		return nil, err
	}
	gpu := r.Sandbox.GPU
	// The same sandbox as a command's (sandbox.Args), showing the runner's
	// binary too, read-only at its path, when it is outside /usr.
	// Its device nodes are per-sandbox copies (sandbox.HostLayout), removed
	// once bwrap has exited, or was not started; the sandbox's context's end
	// is a backstop.
	l := sandbox.HostLayout(gpu, self, ffAbs)
	if err := l.Err(); err != nil {
		return nil, err
	}
	args := sandbox.Args(l, hostDir, gpu, []string{self, driver.Arg})
	sctx, cancel := context.WithCancelCause(ctx)
	context.AfterFunc(sctx, func() { l.Release() })
	cmd := exec.CommandContext(sctx, bwrap, args...)
	if p := r.Sandbox.Pids; p != nil {
		// As sandbox.Bwrap does for a command: a shell moves itself into the
		// job's pids cgroup, then becomes bwrap; no user string reaches it.
		cmd.Args = append([]string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(p.Dir(), "cgroup.procs"), cmd.Path}, cmd.Args[1:]...)
		cmd.Path = "/bin/sh"
	}
	ctlR, ctlW, err := os.Pipe()
	if err != nil {
		cancel(nil)
		return nil, err
	}
	evR, evW, err := os.Pipe()
	if err != nil {
		cancel(nil)
		ctlR.Close()
		ctlW.Close()
		return nil, err
	}
	sb := &jobSandbox{ffmpeg: ffAbs, cmd: cmd, ctx: sctx, cancel: cancel, ctl: ctlW, evf: evR, ev: bufio.NewReaderSize(evR, 64<<10),
		stderr: &tailBuffer{max: 4096}, exited: make(chan struct{}), ended: make(chan struct{})}
	cmd.Env = sandbox.Env(gpuEnv()...) // bwrap hands its environment to the driver, which hands it on
	cmd.Dir = hostDir
	cmd.ExtraFiles = []*os.File{ctlR, evW}
	// Pipes, not the host's /dev/null (noInput): the driver hands them on.
	cmd.Stdin, cmd.Stdout = noInput(), io.Discard
	cmd.Stderr = sb.stderr // to the task log once bwrap is over (close)
	cmd.WaitDelay = 5 * time.Second
	start := time.Now()
	err = cmd.Start()
	ctlR.Close() // the driver holds them now
	evW.Close()
	if err != nil {
		l.Release()
		cancel(nil)
		ctlW.Close()
		evR.Close()
		return nil, fmt.Errorf("could not start bubblewrap: %v", err)
	}
	go func() { cmd.Wait(); l.Release(); close(sb.exited) }()
	go sb.unblock()
	if diskLimit > 0 {
		go watchDisk(sctx, hostDir, diskLimit, cancel)
	}
	late := time.AfterFunc(driverStartTimeout, func() { cancel(errDriverLate) })
	kind, hello, err := driver.ReadFrame(sb.ev)
	if !late.Stop() && err == nil {
		err = errDriverLate // the timer fired as the hello came: the sandbox is being cancelled
	}
	sb.wall = time.Since(start)
	if err == nil && (kind != driver.FrameHello || string(hello) != driver.Hello) {
		err = fmt.Errorf("it answered %q", hello)
	}
	if err != nil {
		sb.close(r)
		switch {
		case errors.Is(context.Cause(sctx), errDiskFull):
			return nil, errDiskFull
		case ctx.Err() != nil:
			return nil, ctx.Err()
		case errors.Is(context.Cause(sctx), errDriverLate):
			err = errDriverLate
		}
		msg := strings.TrimSpace(sb.stderr.String())
		if why := sandbox.SetupError(msg); why != "" {
			return nil, sandboxSetupError(why)
		}
		return nil, &driverError{fmt.Sprintf("%v: %s", err, lastLines(msg, 4))}
	}
	return sb, nil
}

// unblock closes the host's ends of the pipes once the sandbox is stopped, so
// that no read or write waits on them. After bwrap's normal end they are
// closed WaitDelay later at most: a process out of bwrap's reach (the driver
// killed as the sandbox was set up) may hold them; the job's pids cgroup
// ends it with the job.
func (sb *jobSandbox) unblock() {
	select {
	case <-sb.ctx.Done():
	case <-sb.ended:
		return
	case <-sb.exited:
		t := time.NewTimer(sb.cmd.WaitDelay)
		defer t.Stop()
		select {
		case <-sb.ctx.Done():
		case <-sb.ended:
			return
		case <-t.C:
		}
	}
	sb.ctl.Close()
	sb.evf.Close()
}

// run runs argv in the sandbox, its stderr to stderr and its progress stream
// to progress. An error: the sandbox ended before the command did.
func (sb *jobSandbox) run(argv []string, stderr, progress io.Writer) (*driver.Status, error) {
	start := time.Now()
	defer func() { sb.wall += time.Since(start) }()
	if err := driver.WriteArgv(sb.ctl, argv); err != nil {
		return nil, err
	}
	for {
		kind, data, err := driver.ReadFrame(sb.ev)
		if err != nil {
			return nil, err
		}
		switch kind {
		case driver.FrameStderr:
			stderr.Write(data)
		case driver.FrameProgress:
			progress.Write(data)
		case driver.FrameExit:
			st, err := driver.DecodeStatus(data)
			if err != nil {
				return nil, err
			}
			return &st, nil
		default:
			return nil, fmt.Errorf("the sandbox's driver sent a frame of kind %q", kind)
		}
	}
}

// close ends the sandbox (the driver reaps what is left and exits, or bwrap
// is killed WaitDelay later) and meters it.
func (sb *jobSandbox) close(r *Runner) {
	sb.once.Do(func() {
		close(sb.ended)
		sb.ctl.Close()
		t := time.NewTimer(sb.cmd.WaitDelay)
		select {
		case <-sb.exited:
		case <-t.C:
			sb.cmd.Process.Kill()
			<-sb.exited
		}
		t.Stop()
		sb.evf.Close()
		sb.cancel(nil)
		if msg := strings.TrimSpace(sb.stderr.String()); msg != "" {
			fmt.Fprintf(r.Log, "the job's sandbox: %s\n", msg)
		}
		if ps := sb.cmd.ProcessState; r.usage != nil && ps != nil {
			// bwrap's rusage holds the driver's, which reaped every process of
			// the job: each command and what it left.
			r.usageMu.Lock()
			r.usage.WallSeconds += sb.wall.Seconds()
			r.usage.CPUSeconds += (ps.UserTime() + ps.SystemTime()).Seconds()
			r.usageMu.Unlock()
		}
	})
}

// ffmpegIn is ffmpeg for a job that runs in one sandbox: the command's stderr
// and progress come through the driver, and its end is the driver's report.
func (r *Runner) ffmpegIn(ctx context.Context, sb *jobSandbox, argv []string, rep *reporter, log io.Writer) error {
	tail := &tailBuffer{max: 4096}
	errs := &errorLines{dst: tail}
	defer errs.Flush()
	pr, pw := io.Pipe()
	done := make(chan struct{})
	go func() {
		defer close(done)
		rep.read(sb.ctx, pr)
		io.Copy(io.Discard, pr) // a reporter that gave up holds nothing
	}()
	full := append(append([]string{sb.ffmpeg}, command.RunnerArgs()...), argv...)
	st, err := sb.run(full, io.MultiWriter(errs, r.Log, log), pw)
	pw.Close()
	<-done
	if err != nil || st.Code != 0 || st.Signal != 0 {
		if errors.Is(context.Cause(sb.ctx), errDiskFull) {
			return errDiskFull
		}
	}
	if err != nil {
		sb.close(r)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		msg := strings.TrimSpace(sb.stderr.String())
		if why := sandbox.SetupError(msg); why != "" {
			return sandboxSetupError(why)
		}
		if msg == "" {
			msg = err.Error()
		}
		return fmt.Errorf("the sandbox ended while ffmpeg ran: %s", lastLines(mj.RedactURLs(msg), 4))
	}
	switch {
	case st.Start != "":
		return fmt.Errorf("could not start ffmpeg: %s", st.Start)
	case st.Code == 0 && st.Signal == 0:
		return nil
	}
	errs.Flush()
	return r.commandFailed(ctx, argv, st.Code, syscall.Signal(st.Signal), tail.String(), false)
}
