package config

import "fmt"

// heldLimit is one limit of amounts held per account, nil until defaults.
type heldLimit struct {
	v    **int64
	name string
	def  int64
}

func (l *Limits) held() []heldLimit {
	return []heldLimit{
		{&l.MaxQueuedJobs, "max_queued_jobs", DefaultMaxQueuedJobs},
		{&l.MaxJobBytes, "max_job_bytes", DefaultMaxJobBytes},
		{&l.MaxTimeoutSeconds, "max_timeout_seconds", 0},
		{&l.MaxStorageBytes, "max_storage_bytes", DefaultMaxStorage},
		{&l.MaxEventStreams, "max_event_streams", DefaultMaxStreams},
		{&l.MaxInputBytes, "max_input_bytes", 0},
	}
}

func (l *Limits) defaults() {
	for _, h := range l.held() {
		if *h.v == nil {
			*h.v = &h.def
		}
	}
}

// check reports what is wrong with the limits block.
func (l *Limits) check(ck *checker) {
	if l.MaxRunningPerAccount < 0 {
		ck.bad(l.MaxRunningRange, "Invalid max_running_per_account", fmt.Sprintf("max_running_per_account = %d; use 0 for no limit, or how many jobs of one account may run in a pool at once.", l.MaxRunningPerAccount))
	}
	for _, h := range l.held() {
		if **h.v < 0 {
			ck.bad(l.DefRange, "Invalid "+h.name, fmt.Sprintf("%s = %d; use 0 for no limit.", h.name, **h.v))
		}
	}
}
