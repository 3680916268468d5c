package config

import (
	"strings"
	"testing"
)

// The pipelines block has defaults; values set are kept, and ones out of
// range are refused naming their line.
func TestPipelinesBlock(t *testing.T) {
	c, err := Parse([]byte(""), "t.hcl")
	if err != nil || c.Pipelines.MaxSteps != DefaultPipelineMaxSteps || c.Pipelines.MaxFanOut != DefaultPipelineMaxFanOut || c.Pipelines.MaxJobs != DefaultPipelineMaxJobs {
		t.Fatalf("defaults: %+v, %v", c.Pipelines, err)
	}
	c, err = Parse([]byte("pipelines {\n  max_steps = 5\n  max_fan_out = 3\n}\n"), "t.hcl")
	if err != nil || c.Pipelines.MaxSteps != 5 || c.Pipelines.MaxFanOut != 3 || c.Pipelines.MaxJobs != DefaultPipelineMaxJobs {
		t.Fatalf("set: %+v, %v", c.Pipelines, err)
	}
	for _, src := range []string{"pipelines {\n  max_steps = 0\n}\n", "pipelines {\n  max_fan_out = -1\n}\n", "pipelines {\n  max_jobs = 100000\n}\n"} {
		if _, err := Parse([]byte(src), "t.hcl"); err == nil || !strings.Contains(err.Error(), "t.hcl:2") {
			t.Errorf("%q: %v", src, err)
		}
	}
	// A Config built in code without the block gets the defaults.
	c = Default()
	c.Pipelines = nil
	if err := c.Finish(); err != nil || c.Pipelines.MaxJobs != DefaultPipelineMaxJobs {
		t.Fatalf("Finish without the block: %+v, %v", c.Pipelines, err)
	}
}
