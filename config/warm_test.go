package config

import (
	"strings"
	"testing"
	"time"
)

// An empty warm block takes its defaults, the runners' resources from the pool.
func TestWarmDefaults(t *testing.T) {
	c, err := Parse([]byte("pool \"cpu\" {\n  cpu    = 500\n  memory = 512\n  disk   = 300\n  warm {}\n}\npool \"plain\" {}\n"), "w.hcl")
	if err != nil {
		t.Fatal(err)
	}
	w := c.Pool("cpu").Warm
	if w == nil || w.Count != 2 || w.Min != 0 || w.Max != 10 || w.MaxJobSeconds != 120 || w.CPU != 500 || w.Memory != 512 || w.Disk != 300 || w.LeaseTTL != "10s" || w.LeaseTTLD != 10*time.Second || w.SpillAfterD != 30*time.Second {
		t.Fatalf("warm defaults: %+v", w)
	}
	if c.Pool("plain").Warm != nil {
		t.Fatal("a pool without a warm block got one")
	}
	// max follows a larger count; what is written is kept.
	c, err = Parse([]byte("pool \"cpu\" {\n  warm {\n    count = 12\n    cpu = 200\n    memory = 128\n    disk = 60\n    lease_ttl = \"30s\"\n    max_job_seconds = 600\n  }\n}\n"), "w.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Pool("cpu").Warm; w.Count != 12 || w.Max != 12 || w.CPU != 200 || w.Memory != 128 || w.Disk != 60 || w.LeaseTTLD != 30*time.Second || w.MaxJobSeconds != 600 {
		t.Fatalf("warm: %+v", w)
	}
	// count = 0 written is kept: the runners start scaled to zero.
	c, err = Parse([]byte("pool \"cpu\" {\n  warm {\n    count = 0\n  }\n}\n"), "w.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if w := c.Pool("cpu").Warm; w.Count != 0 || w.Max != 10 {
		t.Fatalf("warm count 0: %+v", w)
	}
	// A GPU pool may keep warm runners.
	c, err = Parse([]byte("pool \"nvidia\" {\n  gpu {}\n  warm {\n    count = 1\n  }\n}\n"), "w.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if p := c.Pool("nvidia"); p.Warm.Count != 1 || p.GPUs() != 1 {
		t.Fatalf("GPU warm pool: %+v", p)
	}
	// A pool built in code gets the same defaults from Finish.
	cfg := Default()
	cfg.Pools = []*Pool{{Name: "cpu", Memory: 256, Warm: &Warm{}}}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	if w := cfg.Pool("cpu").Warm; w.Count != 2 || w.Max != 10 || w.CPU != 1000 || w.Memory != 256 || w.Disk != 2048 || w.LeaseTTLD != 10*time.Second {
		t.Fatalf("warm built in code: %+v", w)
	}
}

// Every refusal names the pool and points at the setting (or at the warm block).
func TestWarmRefusals(t *testing.T) {
	cases := []struct{ src, want, pool string }{
		{"pool \"d\" {\n  driver = \"docker\"\n  image = \"w:1\"\n  warm {}\n}\n", `w.hcl:4,3: Invalid warm block`, `driver = "raw_exec"`},
		{"pool \"open\" {\n  sandbox = \"none\"\n  warm {\n  }\n}\n", `w.hcl:3,3: Invalid warm block`, `sandbox = "none"`},
		{"pool \"cpu\" {\n  warm {\n    count = -1\n  }\n}\n", `w.hcl:3,5: Invalid warm count`, ""},
		{"pool \"cpu\" {\n  warm {\n    min = -1\n  }\n}\n", `w.hcl:3,5: Invalid warm min`, ""},
		{"pool \"cpu\" {\n  warm {\n    min = 3\n    max = 2\n  }\n}\n", `w.hcl:4,5: Invalid warm max`, "below min = 3"},
		// count outside [min, max], whether min or max or count is the one written.
		{"pool \"cpu\" {\n  warm {\n    min = 3\n  }\n}\n", `w.hcl:2,3: Invalid warm count`, "outside min = 3"},
		{"pool \"cpu\" {\n  warm {\n    count = 5\n    max = 4\n  }\n}\n", `w.hcl:3,5: Invalid warm count`, "max = 4"},
		{"pool \"cpu\" {\n  warm {\n    max = 1\n  }\n}\n", `w.hcl:2,3: Invalid warm count`, "count = 2"},
		{"pool \"cpu\" {\n  warm {\n    max_job_seconds = 0\n  }\n}\n", `w.hcl:3,5: Invalid max_job_seconds`, ""},
		{"pool \"cpu\" {\n  warm {\n    max_job_seconds = -5\n  }\n}\n", `w.hcl:3,5: Invalid max_job_seconds`, ""},
		{"pool \"cpu\" {\n  max_timeout = \"1m\"\n  default_timeout = \"1m\"\n  warm {\n    max_job_seconds = 61\n  }\n}\n", `w.hcl:5,5: Invalid max_job_seconds`, "max_timeout 1m"},
		// The default 120 s is above a short max_timeout too.
		{"pool \"cpu\" {\n  max_timeout = \"1m\"\n  default_timeout = \"1m\"\n  warm {}\n}\n", `w.hcl:4,3: Invalid max_job_seconds`, ""},
		{"pool \"cpu\" {\n  warm {\n    cpu = 50\n  }\n}\n", `w.hcl:3,5: Invalid warm cpu`, ""},
		{"pool \"cpu\" {\n  warm {\n    memory = 10\n  }\n}\n", `w.hcl:3,5: Invalid warm memory`, ""},
		{"pool \"cpu\" {\n  warm {\n    disk = 0\n  }\n}\n", `w.hcl:3,5: Invalid warm disk`, ""},
		{"pool \"cpu\" {\n  warm {\n    lease_ttl = \"1s\"\n  }\n}\n", `w.hcl:3,5: Invalid lease_ttl`, ""},
		// Under three renewal periods: a slow renewal or two would lapse a healthy job.
		{"pool \"cpu\" {\n  warm {\n    lease_ttl = \"5s\"\n  }\n}\n", `w.hcl:3,5: Invalid lease_ttl`, "three renewal periods"},
		{"pool \"cpu\" {\n  warm {\n    lease_ttl = \"6m\"\n  }\n}\n", `w.hcl:3,5: Invalid lease_ttl`, ""},
		{"pool \"cpu\" {\n  warm {\n    lease_ttl = \"soon\"\n  }\n}\n", `w.hcl:3,5: Invalid duration`, "lease_ttl"},
		{"pool \"cpu\" {\n  warm {\n    lease_ttl = \"\"\n  }\n}\n", `w.hcl:3,5: Invalid duration`, "lease_ttl"},
		{"pool \"cpu\" {\n  warm {\n    spill_after = \"2h\"\n  }\n}\n", `w.hcl:3,5: Invalid spill_after`, ""},
		{"pool \"cpu\" {\n  warm {\n    spill_after = \"-1s\"\n  }\n}\n", `w.hcl:3,5: Invalid spill_after`, ""},
		{"pool \"cpu\" {\n  warm {\n    bogus = 1\n  }\n}\n", `w.hcl:3,5: Unsupported argument`, ""},
		{"pool \"cpu\" {\n  warm {}\n  warm {}\n}\n", `w.hcl:3,3: Duplicate warm block`, ""},
		// Pool "cpu"'s warm runners are mediajobs-cpu-warm: no pool may be called cpu-warm.
		{"pool \"cpu\" {\n  warm {}\n}\npool \"cpu-warm\" {}\n", `w.hcl:4,1: Conflicting pool name`, `pool "cpu-warm"`},
	}
	for _, c := range cases {
		_, err := Parse([]byte(c.src), "w.hcl")
		if err == nil || !strings.Contains(err.Error(), c.want) || !strings.Contains(err.Error(), c.pool) {
			t.Errorf("%q:\n got %v\nwant %s (and %q)", c.src, err, c.want, c.pool)
			continue
		}
		if name := c.src[len(`pool "`):strings.Index(c.src, `" {`)]; !strings.Contains(err.Error(), `pool "`+name+`"`) && !strings.Contains(c.want, "Unsupported") && !strings.Contains(c.want, "Duplicate") && !strings.Contains(c.want, "Invalid duration") {
			t.Errorf("%q: %v does not name pool %q", c.src, err, name)
		}
	}
	// The docker refusal says why and what to do.
	_, err := Parse([]byte("pool \"d\" {\n  driver = \"docker\"\n  image = \"w:1\"\n  warm {}\n}\n"), "w.hcl")
	if err == nil || !strings.Contains(err.Error(), "warm pools run on raw_exec with bubblewrap") || !strings.Contains(err.Error(), "remove the warm block") {
		t.Fatalf("docker warm pool: %v", err)
	}
	// Limits that hold are fine: count at min and at max, max_job_seconds at max_timeout.
	for _, ok := range []string{
		"pool \"cpu\" {\n  warm {\n    count = 0\n    min = 0\n    max = 0\n  }\n}\n",
		"pool \"cpu\" {\n  warm {\n    count = 4\n    min = 4\n    max = 4\n  }\n}\n",
		"pool \"cpu\" {\n  max_timeout = \"2m\"\n  default_timeout = \"1m\"\n  warm {\n    max_job_seconds = 120\n    lease_ttl = \"6s\"\n  }\n}\n",
		"pool \"cpu\" {\n  warm {\n    lease_ttl = \"5m\"\n  }\n}\npool \"warm\" {}\n",
	} {
		if _, err := Parse([]byte(ok), "ok.hcl"); err != nil {
			t.Errorf("%q: %v", ok, err)
		}
	}
	// In code, as in a file.
	cfg := Default()
	cfg.Pools = []*Pool{{Name: "d", Driver: "docker", Image: "w:1", Warm: &Warm{}}}
	if err := cfg.Finish(); err == nil || !strings.Contains(err.Error(), `pool "d": warm pools run on raw_exec`) {
		t.Fatalf("docker warm pool built in code: %v", err)
	}
}
