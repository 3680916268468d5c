package jobspecs

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/mediajobs/mediajobs/config"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

// testPools are the pools the golden files and the Nomad tests render.
func testPools() map[string]*config.Pool {
	return map[string]*config.Pool{
		"cpu": {Name: "cpu", Driver: "raw_exec", Datacenters: []string{"*"}, NodePool: "default", CPU: 500, Memory: 256, Disk: 300},
		"nvidia": {Name: "nvidia", Driver: "raw_exec", Datacenters: []string{"dc1", "dc2"}, NodePool: "default",
			CPU: 500, Memory: 256, Disk: 300, GPU: &config.GPU{Count: 2, Vendor: "nvidia", MinMemoryMB: 8000, Model: "RTX|A[0-9]+"},
			RunnerCommand: `/opt/media "jobs"/${x}`,
			Constraints:   []*config.Constraint{{Attribute: "${attr.kernel.name}", Operator: "=", Value: "linux"}}},
		"docker": {Name: "docker", Driver: "docker", Image: "mediajobs-worker:local", Datacenters: []string{"*"}, NodePool: "default", CPU: 500, Memory: 256, Disk: 300},
		"docker-gpu": {Name: "docker-gpu", Driver: "docker", Image: "mediajobs-worker:nvidia", Datacenters: []string{"*"}, NodePool: "default",
			CPU: 500, Memory: 256, Disk: 300, GPU: &config.GPU{Count: 1, Vendor: "nvidia"}},
	}
}

func TestRenderGolden(t *testing.T) {
	for name, pool := range testPools() {
		r, err := Render(pool, "/usr/local/bin/mediajobs")
		if err != nil {
			t.Fatal(err)
		}
		if r.JobID != "mediajobs-"+name {
			t.Errorf("JobID = %q", r.JobID)
		}
		matchGolden(t, filepath.Join("testdata", name+".vars.hcl"), r.Variables)
	}
	if _, err := Render(&config.Pool{Name: "x", Driver: "podman"}, ""); err == nil {
		t.Error("unknown driver rendered")
	}
}

// matchGolden compares got with the golden file (go test -update rewrites it).
func matchGolden(t *testing.T, golden, got string) {
	t.Helper()
	if *update {
		if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(golden)
	if err != nil {
		t.Fatal(err)
	}
	if got != string(want) {
		t.Errorf("%s:\n%s\nwant (go test -update to refresh):\n%s", golden, got, want)
	}
}
