package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/mediajobs/mediajobs/testenv"
)

// Proc is one process of the cluster: it can be killed (SIGKILL, as a crash) and
// started again with the same command, environment and files.
type Proc struct {
	Name string
	Bin  string
	Args []string
	Env  []string // added to this process's environment
	// Dir holds the process's files and its log (Dir/NAME.log, appended to).
	Dir string
	// Tree: Kill also kills what the process started (a Nomad client's tasks)
	// and every process working in Dir, as a machine that died would lose them.
	Tree bool

	mu     sync.Mutex
	cmd    *exec.Cmd
	exited chan struct{}
}

// Start starts the process; it fails if it is running.
func (p *Proc) Start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd != nil {
		return fmt.Errorf("%s is running", p.Name)
	}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return err
	}
	logf, err := os.OpenFile(p.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return err
	}
	defer logf.Close() // the child has its own descriptor
	cmd := exec.Command(p.Bin, p.Args...)
	cmd.Env = append(cleanEnv(), p.Env...)
	cmd.Stdout, cmd.Stderr = logf, logf
	// A harness that dies (a test binary killed by -timeout) takes the cluster along.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("%s: %w", p.Name, err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	p.cmd, p.exited = cmd, exited
	return nil
}

// Running reports whether the process was started and has not exited.
func (p *Proc) Running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case <-p.exited:
		return false
	default:
		return true
	}
}

// Exited is closed when the running process exits (nil when none was started).
func (p *Proc) Exited() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.exited
}

// Pid is the running process's id, or 0.
func (p *Proc) Pid() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	return p.cmd.Process.Pid
}

// Kill SIGKILLs the process (and, with Tree, what it started) and waits for it.
func (p *Proc) Kill() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return
	}
	var below []int
	if p.Tree {
		below = testenv.Descendants(p.cmd.Process.Pid)
	}
	p.cmd.Process.Kill()
	<-p.exited
	for _, pid := range below {
		syscall.Kill(pid, syscall.SIGKILL)
	}
	if p.Tree {
		testenv.KillUnder(p.Dir)
	}
	p.cmd = nil
}

// Stop asks the process to exit (SIGTERM) and kills it after grace.
func (p *Proc) Stop(grace time.Duration) {
	p.mu.Lock()
	cmd, exited := p.cmd, p.exited
	p.mu.Unlock()
	if cmd == nil {
		return
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
		p.mu.Lock()
		p.cmd = nil
		p.mu.Unlock()
		if p.Tree {
			testenv.KillUnder(p.Dir)
		}
	case <-time.After(grace):
		p.Kill()
	}
}

// LogPath is where the process's output goes.
func (p *Proc) LogPath() string { return filepath.Join(p.Dir, p.Name+".log") }

// LogTail is the end of the process's log, for failure messages.
func (p *Proc) LogTail(n int) string {
	b, _ := os.ReadFile(p.LogPath())
	s := strings.TrimSpace(string(b))
	if len(s) > n {
		s = "…" + s[len(s)-n:]
	}
	return s
}

// cleanEnv is this process's environment without what would point the cluster's
// processes elsewhere: a developer's NOMAD_* (address, token, namespace), and
// MinIO's and mediajobs' own settings.
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "NOMAD_") || strings.HasPrefix(kv, "MINIO_") || strings.HasPrefix(kv, "MEDIAJOBS_") {
			continue
		}
		env = append(env, kv)
	}
	return env
}
