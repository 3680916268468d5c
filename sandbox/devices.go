package sandbox

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// gpuDevices are the NVIDIA device nodes a GPU sandbox gets, a glob (a
// variable so that tests can point it at nodes of their own).
var gpuDevices = "/dev/nvidia*"

// copyBases are where a GPU sandbox's copies of the device nodes are made: the
// first that is writable and allows device nodes (a nodev mount would make
// the copies unopenable). The temporary directory (a Nomad task's own, or
// /tmp) is tried first; /dev holds the host's own nodes, so it allows them.
var copyBases = func() []string { return []string{os.TempDir(), "/dev"} }

// Device is a device node bound at Path inside the sandbox from Host.
type Device struct {
	Host, Path string
}

// copyPrefix names the directories of the copies.
const copyPrefix = "mediajobs-dev-"

// gpuNodes makes the sandbox's /dev/nvidia* nodes.
//
// The sandbox's user maps to the runner's, root on a raw_exec node, which owns
// the host's nodes: through a bind of the host's node it could chmod or chown
// it, for every user of the host. A read-only bind would stop that, but bwrap
// remounts read-only with nodev, and the GPUs must open. So each node the
// runner owns is copied (mknod: same device, same mode, owned by the runner)
// into a directory of this sandbox's own, and the copy is bound: a chmod
// inside changes the copy only. A node the runner does not own is bound as it
// is: without capabilities the sandbox's user cannot chmod it. dir is the
// copies' directory ("" when none were made), removed by Layout.Release.
func gpuNodes() (devs []Device, dir string, err error) {
	nodes, _ := filepath.Glob(gpuDevices)
	sort.Strings(nodes)
	euid := uint32(os.Geteuid())
	for _, p := range nodes {
		fi, err := os.Stat(p)
		if err != nil || fi.Mode()&os.ModeCharDevice == 0 {
			continue // /dev/nvidia-caps, a directory
		}
		d := Device{Host: p, Path: "/dev/" + filepath.Base(p)}
		st := fi.Sys().(*syscall.Stat_t)
		if st.Uid != euid {
			devs = append(devs, d)
			continue
		}
		if dir == "" {
			if dir, err = copyDir(); err != nil {
				return nil, "", err
			}
		}
		d.Host = filepath.Join(dir, filepath.Base(p))
		perm := uint32(fi.Mode().Perm())
		if err := syscall.Mknod(d.Host, syscall.S_IFCHR|perm, int(st.Rdev)); err != nil {
			os.RemoveAll(dir)
			return nil, "", fmt.Errorf("could not make the sandbox's copy of %s: %v", p, err)
		}
		if err := os.Chmod(d.Host, fi.Mode().Perm()); err != nil { // past the umask
			os.RemoveAll(dir)
			return nil, "", err
		}
		devs = append(devs, d)
	}
	return devs, dir, nil
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
		dir, err := os.MkdirTemp(base, copyPrefix)
		if err != nil {
			why = append(why, err.Error())
			continue
		}
		return dir, nil
	}
	return "", fmt.Errorf("no directory for the sandbox's GPU device nodes: %s", strings.Join(why, "; "))
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
