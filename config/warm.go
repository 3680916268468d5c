package config

import (
	"fmt"
	"time"

	"github.com/hashicorp/hcl/v2"
)

// defaults fills what pool p's warm block leaves unset, after p's own defaults.
// A 0 written in the file is kept (and checked); unset, or in a Config built in
// code, it is the default.
func (w *Warm) defaults(p *Pool) {
	if w.Count == 0 && w.CountRange.Filename == "" {
		w.Count = DefaultWarmCount
	}
	if w.Max == 0 && w.MaxRange.Filename == "" {
		w.Max = max(w.Count, DefaultWarmMax)
	}
	if w.MaxJobSeconds == 0 && w.MaxJobRange.Filename == "" {
		w.MaxJobSeconds = DefaultWarmMaxJobSeconds
	}
	if w.CPU == 0 && w.CPURange.Filename == "" {
		w.CPU = p.CPU
	}
	if w.Memory == 0 && w.MemoryRange.Filename == "" {
		w.Memory = p.Memory
	}
	if w.Disk == 0 && w.DiskRange.Filename == "" {
		w.Disk = p.Disk
	}
	if w.LeaseTTL == "" && w.LeaseTTLRange.Filename == "" {
		w.LeaseTTL = DefaultWarmLeaseTTL
	}
	if w.SpillAfter == "" && w.SpillRange.Filename == "" {
		w.SpillAfter = DefaultWarmSpillAfter
	}
	if w.Reserve == nil {
		r := DefaultWarmReserve
		w.Reserve = &r
	}
}

// TakesLong reports whether the block's runners may take jobs longer than
// max_job_seconds: each has at least the resources a job of the pool gets as
// its own Nomad child, so a job runs no worse on one.
func (w *Warm) TakesLong(p *Pool) bool {
	return w.Memory >= p.Memory && w.Disk >= p.Disk
}

// check reports what is wrong with pool p's warm block, p checked first, and
// parses its durations.
func (w *Warm) check(p *Pool, ck *checker) {
	at := func(rng hcl.Range) hcl.Range { // the block itself for a value not written
		if rng.Filename == "" {
			return w.DefRange
		}
		return rng
	}
	switch {
	case p.Driver == "docker":
		ck.bad(w.DefRange, "Invalid warm block", fmt.Sprintf("pool %q: warm pools run on raw_exec with bubblewrap: a docker pool's runner cannot lease work while ffmpeg has no network in the same container; remove the warm block or use driver = \"raw_exec\".", p.Name))
	case p.Driver == "raw_exec" && p.Sandbox == "none":
		ck.bad(w.DefRange, "Invalid warm block", fmt.Sprintf("pool %q: a warm runner takes the jobs of every account one after another; with sandbox = \"none\" they would share it unsandboxed. Remove the warm block or use sandbox = \"bwrap\".", p.Name))
	}
	if w.Count < 0 {
		ck.bad(at(w.CountRange), "Invalid warm count", fmt.Sprintf("pool %q: warm count = %d; use how many runners to start with, 0 or more (default %d).", p.Name, w.Count, DefaultWarmCount))
	}
	if w.Min < 0 {
		ck.bad(at(w.MinRange), "Invalid warm min", fmt.Sprintf("pool %q: warm min = %d; use the fewest runners Nomad's scaling may leave, 0 or more (default 0).", p.Name, w.Min))
	}
	if w.Max < w.Min {
		ck.bad(at(w.MaxRange), "Invalid warm max", fmt.Sprintf("pool %q: warm max = %d is below min = %d.", p.Name, w.Max, w.Min))
	} else if w.Count >= 0 && (w.Count < w.Min || w.Count > w.Max) {
		ck.bad(at(w.CountRange), "Invalid warm count", fmt.Sprintf("pool %q: warm count = %d is outside min = %d and max = %d (Nomad refuses a count outside its scaling block).", p.Name, w.Count, w.Min, w.Max))
	}
	if w.MaxJobSeconds <= 0 {
		ck.bad(at(w.MaxJobRange), "Invalid max_job_seconds", fmt.Sprintf("pool %q: warm max_job_seconds = %d; use the longest timeout_seconds a job may have to run on a warm runner, above 0 (default %d).", p.Name, w.MaxJobSeconds, DefaultWarmMaxJobSeconds))
	} else if p.MaxTimeoutD > 0 && time.Duration(w.MaxJobSeconds)*time.Second > p.MaxTimeoutD {
		ck.bad(at(w.MaxJobRange), "Invalid max_job_seconds", fmt.Sprintf("pool %q: warm max_job_seconds = %d is above the pool's max_timeout %s: no job could ask for that long.", p.Name, w.MaxJobSeconds, p.MaxTimeout))
	}
	if w.CPU < 100 {
		ck.bad(at(w.CPURange), "Invalid warm cpu", fmt.Sprintf("pool %q: warm cpu = %d MHz is below Nomad's minimum of 100.", p.Name, w.CPU))
	}
	if w.Memory < 64 {
		ck.bad(at(w.MemoryRange), "Invalid warm memory", fmt.Sprintf("pool %q: warm memory = %d MiB is too small for ffmpeg; use at least 64.", p.Name, w.Memory))
	}
	if w.Disk < 50 {
		ck.bad(at(w.DiskRange), "Invalid warm disk", fmt.Sprintf("pool %q: warm disk = %d MB is too small; each job's inputs and outputs are kept there (at least 50).", p.Name, w.Disk))
	}
	if w.Reserve != nil && *w.Reserve < 0 {
		ck.bad(at(w.ReserveRange), "Invalid warm reserve", fmt.Sprintf("pool %q: warm reserve = %d; use how many runners to keep for jobs that fit max_job_seconds, 0 or more (default %d).", p.Name, *w.Reserve, DefaultWarmReserve))
	}
	w.SpillAfterD = ck.dur(w.SpillAfter, at(w.SpillRange), "spill_after")
	if w.SpillAfterD < 0 || w.SpillAfterD > time.Hour {
		ck.bad(at(w.SpillRange), "Invalid spill_after", fmt.Sprintf("pool %q: warm spill_after = %q must be between \"0s\" (a job that fits goes to Nomad at once when no runner waits) and \"1h\"; default %q.", p.Name, w.SpillAfter, DefaultWarmSpillAfter))
	}
	w.LeaseTTLD = ck.dur(w.LeaseTTL, at(w.LeaseTTLRange), "lease_ttl")
	if w.LeaseTTLD > 0 && (w.LeaseTTLD < MinWarmLeaseTTL || w.LeaseTTLD > MaxWarmLeaseTTL) {
		ck.bad(at(w.LeaseTTLRange), "Invalid lease_ttl", fmt.Sprintf("pool %q: warm lease_ttl = %q must be between \"6s\" (three renewal periods of 2s: shorter, a slow renewal or a brief pause of a runner or the network would hand its job to another) and \"5m\" (a job whose runner died waits this long to run again); default %q.", p.Name, w.LeaseTTL, DefaultWarmLeaseTTL))
	}
}
