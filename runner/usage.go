package runner

import (
	"os/exec"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// meter adds what cmd's process consumed, started at start, to the usage of the
// job being executed (docs/usage.md): its wall time and its CPU time, user plus
// system. The rusage of a waited process includes the descendants it reaped:
// under bubblewrap, ffmpeg runs as the sandbox's PID 1 and bwrap reaps it
// (sandbox.Args), so its CPU time is in bwrap's.
func (r *Runner) meter(cmd *exec.Cmd, start time.Time) {
	if r.usage == nil || cmd.ProcessState == nil {
		return
	}
	ps := cmd.ProcessState
	r.usageMu.Lock()
	defer r.usageMu.Unlock()
	r.usage.WallSeconds += time.Since(start).Seconds()
	r.usage.CPUSeconds += (ps.UserTime() + ps.SystemTime()).Seconds()
}

// resultUsage is the usage an attempt reports: its processes' times, the inputs
// it fetched and, when it succeeded, the outputs it stored.
func resultUsage(st *State, outputs []mj.Output) *mj.Usage {
	u := st.Usage
	u.InputBytes, u.OutputBytes = st.InputBytes, 0
	for _, o := range outputs {
		u.OutputBytes += o.Size
	}
	u = u.Bounded()
	return &u
}
