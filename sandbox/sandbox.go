// Package sandbox runs ffmpeg and ffprobe under bubblewrap (bwrap) on raw_exec
// workers, so that a user's command can reach nothing but its own job: fresh
// mount, PID, IPC, UTS, cgroup, user and network namespaces (an empty network
// namespace: not even the host's loopback), uid and gid 65534, no capabilities,
// read-only binds of only what ffmpeg needs to start, and the job's directory as
// the only writable path. docs/threat-model.md says what it defends against.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
)

// Dir is where the job's directory appears inside the sandbox: the working
// directory, HOME and TMPDIR of the commands run there.
const Dir = "/job"

// UID and GID are the unprivileged user and group the commands run as.
const (
	UID = 65534
	GID = 65534
)

// ErrMissing means bwrap is not installed on this worker.
var ErrMissing = errors.New(`this worker runs ffmpeg in a bubblewrap sandbox (the pool's sandbox = "bwrap"), but bwrap is not installed on the node: install it (Debian/Ubuntu: apt-get install bubblewrap), or, only on a machine that runs trusted commands, set sandbox = "none" on the pool`)

// Bwrap runs commands inside a bubblewrap sandbox.
type Bwrap struct {
	Path string // the bwrap binary; "bwrap" from PATH when empty
	// GPU binds the NVIDIA device nodes (copies of the host's, devices.go)
	// and a private /proc (the CUDA driver reads /proc/driver/nvidia): GPU
	// pools only.
	GPU bool
	// Pids, when set, is the cgroup every command starts in: it caps the
	// processes and threads of the job (NewPids).
	Pids *Pids
}

// Layout is what of the host a sandbox shows, read-only.
type Layout struct {
	Binds    []string          // bound read-only at the same path
	Symlinks map[string]string // path -> target, e.g. /lib -> usr/lib on merged-/usr hosts
	Devices  []Device          // /dev/null, /dev/zero, /dev/urandom (cpuNodes)
	GPU      []Device          // the GPUs' nodes (gpuNodes)

	copies string // the directory of the copies in Devices and GPU, removed by Release
	err    error  // the GPUs' nodes could not be made
	devErr error  // Devices are the host's, read-only: no copy could be made
}

// Err says why the GPU device nodes could not be made: the sandbox has none.
func (l Layout) Err() error { return l.err }

// DevicesErr says why /dev/null, /dev/zero and /dev/urandom are the host's
// nodes bound read-only, which do not open (no copy could be made), or nil.
func (l Layout) DevicesErr() error { return l.devErr }

// Release removes the sandbox's copies of the device nodes. Once bwrap has
// bound them they are no longer needed: it is called once the command has
// exited (Release, the package's function), at the latest when its context
// ends.
func (l Layout) Release() error {
	if l.copies == "" {
		return nil
	}
	return os.RemoveAll(l.copies)
}

// startPaths are what a dynamically linked ffmpeg needs to start (binaries and
// libraries under /usr, the loader cache, /etc/alternatives for BLAS and friends)
// and fontconfig's configuration, for drawtext and subtitles without a fontfile.
// Nothing else of /etc, nor /home, /root, /tmp, /var, /proc, /sys or Nomad's
// directories, is visible.
var startPaths = []string{"/usr", "/etc/ld.so.cache", "/etc/alternatives", "/etc/fonts"}

// topLinks are the merged-/usr links a Debian or Fedora root holds; on an older
// layout they are directories and are bound instead.
var topLinks = []string{"/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32"}

// HostLayout reads what the host has of the paths above, plus the binaries
// (absolute paths) when they live outside /usr, and makes the sandbox's copies
// of the device nodes (devices.go), the GPUs' too with gpu: Release removes
// them.
func HostLayout(gpu bool, binaries ...string) Layout {
	l := Layout{Symlinks: map[string]string{}}
	for _, p := range topLinks {
		fi, err := os.Lstat(p)
		switch {
		case err != nil:
		case fi.Mode()&os.ModeSymlink != 0:
			if t, err := os.Readlink(p); err == nil {
				l.Symlinks[p] = t
			}
		case fi.IsDir():
			l.Binds = append(l.Binds, p)
		}
	}
	for _, p := range startPaths {
		if _, err := os.Stat(p); err == nil {
			l.Binds = append(l.Binds, p)
		}
	}
	for _, b := range binaries {
		if !covered(b, l.Binds) {
			l.Binds = append(l.Binds, b)
		}
	}
	var c copies
	l.Devices, l.devErr = cpuNodes(&c)
	if l.devErr != nil && warned.CompareAndSwap(false, true) {
		// Paths and errno only. The job runs on, with devices that do not open.
		warn(fmt.Sprintf("sandbox: /dev/null, /dev/zero and /dev/urandom are bound read-only and will not open in the sandbox: %v", l.devErr))
	}
	if gpu {
		l.GPU, l.err = gpuNodes(&c)
	}
	l.copies = c.dir
	if l.err != nil {
		l.Release() // the command is refused: nothing will release them
		l.copies = ""
	}
	return l
}

func covered(p string, dirs []string) bool {
	for _, d := range dirs {
		if p == d || strings.HasPrefix(p, d+"/") {
			return true
		}
	}
	return false
}

// Args is bwrap's command line (without bwrap itself) that runs argv in a
// sandbox showing l, with the host directory dir as Dir. Pure, for tests.
func Args(l Layout, dir string, gpu bool, argv []string) []string {
	return args(l, dir, gpu, false, argv)
}

// ReadOnlyArgs is Args with Dir bound read-only: for ffprobe, which writes nothing.
func ReadOnlyArgs(l Layout, dir string, gpu bool, argv []string) []string {
	return args(l, dir, gpu, true, argv)
}

func args(l Layout, dir string, gpu, readOnly bool, argv []string) []string {
	a := []string{
		// Every namespace; the user namespace maps the caller to 65534, with no
		// capabilities and no way to make another user namespace.
		"--unshare-all", "--unshare-user", "--uid", fmt.Sprint(UID), "--gid", fmt.Sprint(GID),
		"--disable-userns", "--cap-drop", "ALL",
		// No TIOCSTI on a terminal; killed with the runner.
		"--new-session", "--die-with-parent",
		// The command is the namespace's PID 1, with no reaper of bwrap's between:
		// bwrap waits for it, so its CPU time is in the rusage of bwrap the runner
		// reads (docs/usage.md). bwrap's reaper would let it go unreaped.
		"--as-pid-1",
		"--hostname", "mediajobs",
	}
	for _, b := range l.Binds {
		a = append(a, "--ro-bind", b, b)
	}
	links := make([]string, 0, len(l.Symlinks))
	for p := range l.Symlinks {
		links = append(links, p)
	}
	sort.Strings(links)
	for _, p := range links {
		a = append(a, "--symlink", l.Symlinks[p], p)
	}
	for _, devs := range [][]Device{l.Devices, l.GPU} {
		for _, d := range devs {
			// Writable and not nodev, so that they open: a copy made for this
			// sandbox, so that a chmod inside reaches no node of the host's, or
			// a node the runner does not own, which the sandbox's user cannot
			// chmod. A node of the host's that the runner owns is read-only,
			// which bwrap makes nodev: it does not open (docs/threat-model.md).
			a = append(a, "--dev-bind", d.Host, d.Path)
			if d.ReadOnly {
				a = append(a, "--remount-ro", d.Path)
			}
		}
	}
	if gpu {
		a = append(a, "--proc", "/proc")
	}
	// The sandbox's own root (a tmpfs the disk cap does not see) stays read-only.
	bind := "--bind"
	if readOnly {
		bind = "--ro-bind"
	}
	a = append(a, bind, dir, Dir, "--remount-ro", "/", "--chdir", Dir, "--")
	return append(a, argv...)
}

// Env is the whole environment of a sandboxed command: nothing of the runner's
// (no Nomad variables, no tokens) beyond the GPUs Nomad assigned.
func Env(extra ...string) []string {
	return append([]string{"PATH=/usr/local/bin:/usr/bin:/bin", "HOME=" + Dir, "TMPDIR=" + Dir, "LC_ALL=C"}, extra...)
}

// Command returns the command that runs bin with args in the sandbox, in the
// job's directory dir (a host path), with env as its whole environment.
func (b *Bwrap) Command(ctx context.Context, dir, bin string, args, env []string) (*exec.Cmd, error) {
	return b.command(ctx, dir, bin, args, env, Args)
}

// ReadOnlyCommand is Command with the job's directory read-only (ffprobe).
func (b *Bwrap) ReadOnlyCommand(ctx context.Context, dir, bin string, args, env []string) (*exec.Cmd, error) {
	return b.command(ctx, dir, bin, args, env, ReadOnlyArgs)
}

func (b *Bwrap) command(ctx context.Context, dir, bin string, args, env []string, mkArgs func(Layout, string, bool, []string) []string) (*exec.Cmd, error) {
	bwrap := b.Path
	if bwrap == "" {
		bwrap = "bwrap"
	}
	bwrap, err := exec.LookPath(bwrap)
	if err != nil {
		return nil, ErrMissing
	}
	abs, err := exec.LookPath(bin)
	if err != nil {
		return nil, fmt.Errorf("%s is not installed on this worker: %v", bin, err)
	}
	// A link to a binary outside /usr: bind and run what it points at.
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return nil, err
	}
	if abs, err = filepath.Abs(abs); err != nil {
		return nil, err
	}
	hostDir, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	argv := append([]string{abs}, args...)
	l := HostLayout(b.GPU, abs)
	if l.err != nil {
		return nil, l.err
	}
	cmd := exec.CommandContext(ctx, bwrap, mkArgs(l, hostDir, b.GPU, argv)...)
	if b.Pids != nil {
		b.Pids.wrap(cmd)
	}
	cmd.Env = env // bwrap hands its own environment to the command
	cmd.Dir = hostDir
	if l.copies != "" {
		heldMu.Lock()
		// The context's end is a backstop only: callers' contexts can be
		// long-lived (a chunked job's probes), or never end (os.Exit).
		held[cmd] = heldCopies{l: l, stop: context.AfterFunc(ctx, func() { Release(cmd) })}
		heldMu.Unlock()
	}
	return cmd, nil
}

// held are the device copies of each command of Command and ReadOnlyCommand
// until Release.
var (
	heldMu sync.Mutex
	held   = map[*exec.Cmd]heldCopies{}
)

type heldCopies struct {
	l    Layout
	stop func() bool // the context backstop's
}

// Release removes the copies of the device nodes that Command or
// ReadOnlyCommand made for cmd's sandbox. Call it once cmd has exited (after
// Wait, Run or Output) or when it will not be started: bwrap has bound them
// by then, and the bind mounts keep them for what still runs. Without it they
// stay until the command's context ends. Calling it again, or for any other
// command, does nothing.
func Release(cmd *exec.Cmd) error {
	heldMu.Lock()
	h, ok := held[cmd]
	delete(held, cmd)
	heldMu.Unlock()
	if !ok {
		return nil
	}
	h.stop()
	return h.l.Release()
}

// SetupError returns bwrap's own complaint when the sandbox could not be set up
// (bwrap prints "bwrap: ..." and exits 1 before running anything), or "".
func SetupError(stderr string) string {
	if !strings.HasPrefix(stderr, "bwrap: ") {
		return ""
	}
	line, _, _ := strings.Cut(stderr, "\n")
	return strings.TrimSpace(line)
}
