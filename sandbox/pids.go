package sandbox

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// MaxProcs is how many processes and threads a raw_exec job may have at once:
// the docker pools' pids_limit. ffmpeg needs a few per core at most.
const MaxProcs = 1024

// Pids is a pids cgroup made for one job below the runner's own cgroup, capping
// the processes and threads of everything the job runs in the sandbox.
// RLIMIT_NPROC would not do: bubblewrap maps the sandbox's user to the runner's
// host uid, root under Nomad's raw_exec, and the kernel never applies
// RLIMIT_NPROC to root (docs/containment.md).
type Pids struct{ dir string }

// NewPids makes a job's pids cgroup allowing max processes and threads, in the
// pids hierarchy of cgroup v1 or in cgroup v2, below the runner's own cgroup
// (a Nomad task's cgroup: its processes stay accounted to the task).
func NewPids(max int) (*Pids, error) {
	parent, v2, err := ownPidsCgroup()
	if err != nil {
		return nil, err
	}
	if v2 {
		// pids is a threaded controller: it may be enabled below a cgroup that
		// holds processes (the runner's).
		if err := enableController(parent, "pids"); err != nil {
			return nil, err
		}
	}
	dir, err := os.MkdirTemp(parent, "mediajobs-job-")
	if err != nil {
		return nil, err
	}
	p := &Pids{dir: dir}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(strconv.Itoa(max)), 0); err != nil {
		p.Close()
		return nil, fmt.Errorf("set pids.max: %w", err)
	}
	return p, nil
}

// Dir is the cgroup's directory.
func (p *Pids) Dir() string { return p.dir }

// wrap makes cmd start in the cgroup: a shell moves itself there, then execs
// what cmd ran, so nothing it starts is ever outside the cgroup.
func (p *Pids) wrap(cmd *exec.Cmd) {
	cmd.Args = append([]string{"/bin/sh", "-c", `echo $$ > "$0" && exec "$@"`, filepath.Join(p.dir, "cgroup.procs"), cmd.Path}, cmd.Args[1:]...)
	cmd.Path = "/bin/sh"
}

// Refused is how many times the cap refused a new process or thread.
func (p *Pids) Refused() int {
	b, _ := os.ReadFile(filepath.Join(p.dir, "pids.events"))
	for _, line := range strings.Split(string(b), "\n") {
		if n, ok := strings.CutPrefix(line, "max "); ok {
			v, _ := strconv.Atoi(strings.TrimSpace(n))
			return v
		}
	}
	return 0
}

// Close kills whatever is left in the cgroup and removes it.
func (p *Pids) Close() error {
	deadline := time.Now().Add(10 * time.Second)
	for {
		err := os.Remove(p.dir)
		if err == nil || errors.Is(err, os.ErrNotExist) {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("remove the job's pids cgroup: %w", err)
		}
		b, _ := os.ReadFile(filepath.Join(p.dir, "cgroup.procs"))
		for _, f := range strings.Fields(string(b)) {
			if pid, err := strconv.Atoi(f); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// ownPidsCgroup is the directory of this process's cgroup holding the pids
// controller: in the v1 pids hierarchy when there is one, else in cgroup v2.
func ownPidsCgroup() (dir string, v2 bool, err error) {
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return "", false, err
	}
	defer f.Close()
	var v1Path, v2Path string
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		parts := strings.SplitN(sc.Text(), ":", 3)
		if len(parts) != 3 {
			continue
		}
		switch {
		case parts[0] == "0" && parts[1] == "":
			v2Path = parts[2]
		case hasWord(parts[1], "pids"):
			v1Path = parts[2]
		}
	}
	if v1Path != "" {
		if root, mount := cgroupMount("cgroup", "pids"); mount != "" {
			return filepath.Join(mount, strings.TrimPrefix(v1Path, root)), false, nil
		}
	}
	if v2Path != "" {
		if root, mount := cgroupMount("cgroup2", ""); mount != "" {
			return filepath.Join(mount, strings.TrimPrefix(v2Path, root)), true, nil
		}
	}
	return "", false, errors.New("no pids cgroup (v1 pids hierarchy or cgroup v2) is mounted")
}

// cgroupMount finds a mount of fstype (holding controller, for v1) in
// /proc/self/mountinfo: the cgroup path it shows as its root, and where it is.
func cgroupMount(fstype, controller string) (root, mount string) {
	b, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return "", ""
	}
	for _, line := range strings.Split(string(b), "\n") {
		pre, post, ok := strings.Cut(line, " - ")
		f, g := strings.Fields(pre), strings.Fields(post)
		if !ok || len(f) < 5 || len(g) < 3 || g[0] != fstype {
			continue
		}
		if controller == "" || hasWord(g[2], controller) {
			return f[3], f[4]
		}
	}
	return "", ""
}

func hasWord(list, w string) bool {
	for _, x := range strings.Split(list, ",") {
		if x == w {
			return true
		}
	}
	return false
}

func enableController(dir, c string) error {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	if err == nil && hasWord(strings.ReplaceAll(strings.TrimSpace(string(b)), " ", ","), c) {
		return nil
	}
	if err := os.WriteFile(filepath.Join(dir, "cgroup.subtree_control"), []byte("+"+c), 0); err != nil {
		return fmt.Errorf("enable the %s controller below %s: %w", c, dir, err)
	}
	return nil
}
