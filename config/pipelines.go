package config

import (
	"fmt"

	"github.com/hashicorp/hcl/v2"
)

// Pipelines bounds what one pipeline may hold (docs/pipelines.md): its steps
// as written, the items of one step's for_each, and the jobs they make in all.
// Every job of a pipeline is planned in its record before any is stored, so
// these also bound that record.
type Pipelines struct {
	MaxSteps  int `hcl:"max_steps,optional"`
	MaxFanOut int `hcl:"max_fan_out,optional"`
	MaxJobs   int `hcl:"max_jobs,optional"`

	StepsRange  hcl.Range `hcl:"max_steps,attr_range"`
	FanOutRange hcl.Range `hcl:"max_fan_out,attr_range"`
	JobsRange   hcl.Range `hcl:"max_jobs,attr_range"`
}

// Default bounds of a pipeline.
const (
	DefaultPipelineMaxSteps  = 50
	DefaultPipelineMaxFanOut = 50
	DefaultPipelineMaxJobs   = 200
	// MaxPipelineJobs is the most max_jobs may say: the plan of a pipeline is
	// one etcd value, within etcd's request size.
	MaxPipelineJobs = 1000
)

// defaults fills what the file leaves unset (0).
func (p *Pipelines) defaults() {
	if p.MaxSteps == 0 && p.StepsRange.Filename == "" {
		p.MaxSteps = DefaultPipelineMaxSteps
	}
	if p.MaxFanOut == 0 && p.FanOutRange.Filename == "" {
		p.MaxFanOut = DefaultPipelineMaxFanOut
	}
	if p.MaxJobs == 0 && p.JobsRange.Filename == "" {
		p.MaxJobs = DefaultPipelineMaxJobs
	}
}

// check reports what is wrong with the pipelines block.
func (p *Pipelines) check(ck *checker) {
	if p.MaxSteps < 1 {
		ck.bad(p.StepsRange, "Invalid max_steps", fmt.Sprintf("max_steps = %d: a pipeline needs at least 1 step (default %d).", p.MaxSteps, DefaultPipelineMaxSteps))
	}
	if p.MaxFanOut < 1 {
		ck.bad(p.FanOutRange, "Invalid max_fan_out", fmt.Sprintf("max_fan_out = %d: a step's for_each may hold at least 1 item (default %d).", p.MaxFanOut, DefaultPipelineMaxFanOut))
	}
	if p.MaxJobs < 1 || p.MaxJobs > MaxPipelineJobs {
		ck.bad(p.JobsRange, "Invalid max_jobs", fmt.Sprintf("max_jobs = %d must be between 1 and %d (default %d): a pipeline's jobs are planned in one etcd record.", p.MaxJobs, MaxPipelineJobs, DefaultPipelineMaxJobs))
	}
}
