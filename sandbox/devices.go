package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync/atomic"
	"syscall"

	"golang.org/x/sys/unix"
)

// gpuDevices are the NVIDIA device nodes a GPU sandbox gets, a glob (a
// variable so that tests can point it at nodes of their own).
var gpuDevices = "/dev/nvidia*"

// devices are the device nodes every sandbox gets, each at /dev/<its name> (a
// variable so that tests can point it at nodes of their own).
var devices = []string{"/dev/null", "/dev/zero", "/dev/urandom"}

// copyBases are where a sandbox's copies of the device nodes are made: the
// first that is writable and allows device nodes (a nodev mount would make
// the copies unopenable). The temporary directory (a Nomad task's own, or
// /tmp) is tried first; /dev holds the host's own nodes, so it allows them.
var copyBases = func() []string { return []string{os.TempDir(), "/dev"} }

// mknod makes the copies (a variable so that a test can refuse it).
var mknod = syscall.Mknod

// warn tells the runner's log (its stderr, the Nomad task's), once per
// process (warned), that the CPU devices do not open: a variable for tests.
var (
	warn   = func(msg string) { fmt.Fprintln(os.Stderr, msg) }
	warned atomic.Bool
)

// Device is a device node bound at Path inside the sandbox from Host:
// writable, so that it opens, or, when ReadOnly, remounted read-only, which
// bwrap makes nodev too: it is there but does not open.
type Device struct {
	Host, Path string
	ReadOnly   bool
}

// copyPrefix names the directories of the copies: copyPrefix, the runner's
// pid, "-" and a random suffix (RemoveStaleCopies).
const copyPrefix = "mediajobs-dev-"

// ErrNoGPUNodes: a GPU sandbox's device nodes could not be made. The causes
// are the node's (no CAP_MKNOD, a full, read-only or nodev temporary
// directory), not the job's.
var ErrNoGPUNodes = errors.New("no GPU device nodes for the sandbox")

// copies are one sandbox's copies of device nodes, in a directory of its own
// (0700) made at the first copy and removed by Layout.Release.
//
// The sandbox's user maps to the runner's, root on a raw_exec node, which owns
// the host's nodes: through a bind of the host's node it could chmod or chown
// it, for every user of the host. A read-only bind would stop that, but bwrap
// remounts read-only with nodev, and the nodes must open. So each node the
// runner owns is copied (mknod: same device, same mode, owned by the runner)
// and the copy is bound: a chmod inside changes the copy only. A node the
// runner does not own (an unprivileged runner's /dev/null) is bound as it is:
// without capabilities the sandbox's user cannot chmod it.
type copies struct {
	dir string // "" until the first copy
	err error  // why there is no directory for them
}

// node is the device for the host's node p, at /dev/<its name>: p itself when
// the runner does not own it, else a copy. ok is false when p is no character
// device (absent, or /dev/nvidia-caps, a directory). err says why the copy
// could not be made (d is then p's).
func (c *copies) node(p string) (d Device, ok bool, err error) {
	fi, err := os.Stat(p)
	if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
		return Device{}, false, nil
	}
	d = Device{Host: p, Path: "/dev/" + filepath.Base(p)}
	st := fi.Sys().(*syscall.Stat_t)
	if st.Uid != uint32(os.Geteuid()) {
		return d, true, nil
	}
	if c.err != nil {
		return d, true, c.err
	}
	if c.dir == "" {
		if c.dir, c.err = copyDir(); c.err != nil {
			return d, true, c.err
		}
	}
	cp := filepath.Join(c.dir, filepath.Base(p))
	perm := fi.Mode().Perm()
	if err := mknod(cp, syscall.S_IFCHR|uint32(perm), int(st.Rdev)); err != nil {
		return d, true, fmt.Errorf("could not make the sandbox's copy of %s: %v", p, err)
	}
	if err := os.Chmod(cp, perm); err != nil { // past the umask
		return d, true, err
	}
	d.Host = cp
	return d, true, nil
}

// cpuNodes are the sandbox's /dev/null, /dev/zero and /dev/urandom (devices),
// writable: copies, or the host's nodes the runner does not own. Where no copy
// can be made they are the host's, read-only (they do not open, but a job that
// needs none still runs), and why says why.
func cpuNodes(c *copies) (devs []Device, why error) {
	for _, p := range devices {
		d, ok, err := c.node(p)
		if !ok {
			continue
		}
		if err != nil {
			d, why = Device{Host: p, Path: d.Path, ReadOnly: true}, err
		}
		devs = append(devs, d)
	}
	return devs, why
}

// gpuNodes are the sandbox's /dev/nvidia* nodes, writable as cpuNodes's; with
// no copy they fail the command, which would not find its GPUs.
func gpuNodes(c *copies) ([]Device, error) {
	nodes, _ := filepath.Glob(gpuDevices)
	sort.Strings(nodes)
	var devs []Device
	for _, p := range nodes {
		d, ok, err := c.node(p)
		if !ok {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("%w: %v", ErrNoGPUNodes, err)
		}
		devs = append(devs, d)
	}
	return devs, nil
}

// copyDir makes a directory, 0700, for one sandbox's copies of the device
// nodes, in the first of copyBases that can hold working ones.
func copyDir() (string, error) {
	var why []string
	for _, base := range copyBases() {
		if err := devCapable(base); err != nil {
			why = append(why, err.Error())
			continue
		}
		dir, err := os.MkdirTemp(base, fmt.Sprintf("%s%d-", copyPrefix, os.Getpid()))
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		return dir, nil
	}
	return "", fmt.Errorf("no directory for the sandbox's device nodes: %s", strings.Join(why, "; "))
}

// devCapable says why device nodes made in dir would not work: its mount is
// nodev or read-only.
func devCapable(dir string) error {
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return err
	}
	switch {
	case s.Flags&unix.ST_NODEV != 0:
		return fmt.Errorf("%s is on a nodev mount", dir)
	case s.Flags&unix.ST_RDONLY != 0:
		return fmt.Errorf("%s is on a read-only mount", dir)
	}
	return nil
}
