package jobspecs

import (
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/mediajobs/mediajobs/config"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/")

func TestRenderGolden(t *testing.T) {
	cases := map[string]*config.Pool{
		"cpu": {Name: "cpu", Driver: "raw_exec", Datacenters: []string{"*"}, NodePool: "default", CPU: 1000, Memory: 1024},
		"nvidia": {Name: "nvidia", Driver: "raw_exec", Datacenters: []string{"dc1", "dc2"}, NodePool: "gpu",
			CPU: 2000, Memory: 4096, GPUs: 2, RunnerCommand: `/opt/media "jobs"/${x}`},
	}
	for name, pool := range cases {
		r, err := Render(pool, "/usr/local/bin/mediajobs")
		if err != nil {
			t.Fatal(err)
		}
		if r.JobID != "mediajobs-"+name {
			t.Errorf("JobID = %q", r.JobID)
		}
		golden := filepath.Join("testdata", name+".vars.hcl")
		if *update {
			if err := os.WriteFile(golden, []byte(r.Variables), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(golden)
		if err != nil {
			t.Fatal(err)
		}
		if r.Variables != string(want) {
			t.Errorf("%s variables:\n%s\nwant (go test -update to refresh):\n%s", name, r.Variables, want)
		}
	}
	if _, err := Render(&config.Pool{Name: "x", Driver: "podman"}, ""); err == nil {
		t.Error("unknown driver rendered")
	}
}
