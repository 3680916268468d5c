package gateway

import (
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/command"
	"github.com/mediajobs/mediajobs/config"
)

// FuzzCreateRequest feeds arbitrary bodies through decoding and validation: nothing
// panics, and whatever is accepted satisfies every rule the runner relies on.
// Seed corpus: testdata/fuzz/FuzzCreateRequest.
func FuzzCreateRequest(f *testing.F) {
	cfg := config.Default()
	cfg.Pools = []*config.Pool{{Name: "cpu"}, {Name: "nvidia", GPU: &config.GPU{}}}
	if err := cfg.Finish(); err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodeCreate(body)
		if err != nil {
			return
		}
		j, err := newJob(req, cfg, "acct", time.Unix(0, 0))
		if err != nil {
			return
		}
		pool := cfg.Pool(j.Machine)
		if pool == nil || j.TimeoutSeconds < 1 || j.TimeoutSeconds > int(pool.MaxTimeoutD/time.Second) {
			t.Fatalf("accepted machine %q timeout %d", j.Machine, j.TimeoutSeconds)
		}
		// Zero outputs is an analysis job's (docs/api.md).
		if len(j.FFmpegCommands) == 0 || len(j.FFmpegCommands) > cfg.Server.MaxCommands {
			t.Fatalf("accepted %d outputs, %d commands", len(j.OutputNames), len(j.FFmpegCommands))
		}
		spec := command.Spec{Inputs: map[string]bool{}, Outputs: map[string]bool{}, AllowGPU: pool.GPUs() > 0}
		for name, u := range j.InputFiles {
			if !command.ValidName(name) || !(strings.HasPrefix(u, "http://") || strings.HasPrefix(u, "https://")) {
				t.Fatalf("accepted input %q -> %q", name, u)
			}
			spec.Inputs[name] = true
		}
		for _, name := range j.OutputNames {
			if !command.ValidOutputName(name) || spec.Outputs[name] {
				t.Fatalf("accepted output %q", name)
			}
			spec.Outputs[name] = true
		}
		for _, c := range j.FFmpegCommands {
			if _, err := command.Prepare(c, spec); err != nil {
				t.Fatalf("accepted a command the runner refuses: %q: %v", c, err)
			}
		}
	})
}
