package dispatcher

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
)

// TestRegisterWarmPool on a real Nomad: a warm pool gets its runners' service job
// with warm.count; a count scaled in Nomad survives registering again (a new leader,
// a changed config); removing the warm block, or the pool, stops it; a pool whose
// own name ends in -warm is never taken for runners.
func TestRegisterWarmPool(t *testing.T) {
	r := newNomadRig(t, &config.Pool{Name: "cpu", Warm: &config.Warm{Count: 1}})
	jobs := r.agent.Client.Jobs()
	d := &Dispatcher{Config: r.cfg, Store: r.store, Jobs: jobs, RunnerCommand: r.runner,
		Log: slog.New(slog.NewTextHandler(&r.log, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	// configure replaces the pools as a restarted dispatcher with a new file has them.
	configure := func(pools ...*config.Pool) {
		t.Helper()
		cfg := config.Default()
		for _, p := range pools {
			p.CPU, p.Memory, p.Disk = 100, 64, 50
		}
		cfg.Pools = pools
		if err := cfg.Finish(); err != nil {
			t.Fatal(err)
		}
		d.Config = cfg
		rewire(d) // a restarted dispatcher
	}
	register := func() {
		t.Helper()
		if err := d.RegisterPools(); err != nil {
			t.Fatalf("register: %v\n%s", err, r.log.String())
		}
	}
	info := func(id string) *api.Job {
		t.Helper()
		j, _, err := jobs.Info(id, nil)
		if err != nil {
			t.Fatalf("%s: %v", id, err)
		}
		return j
	}
	stopped := func(j *api.Job) bool { return j.Stop != nil && *j.Stop }

	register()
	w := info("mediajobs-cpu-warm")
	if *w.Type != "service" || w.Meta["mediajobs_role"] != "warm-runner" || w.Meta["mediajobs_pool"] != "cpu" || stopped(w) {
		t.Fatalf("warm job: type %s meta %v stop %v", *w.Type, w.Meta, *w.Stop)
	}
	tg := w.TaskGroups[0]
	if *tg.Count != 1 || *tg.Scaling.Min != 0 || *tg.Scaling.Max != 10 {
		t.Fatalf("warm group: count %d scaling %+v", *tg.Count, tg.Scaling)
	}
	args := strings.TrimSuffix(strings.TrimPrefix(fmt.Sprint(tg.Tasks[0].Config["args"]), "["), "]")
	if want := "runner -warm -pool cpu -control " + d.Config.Server.PublicURL + " -sandbox bwrap"; args != want || tg.Tasks[0].Config["command"] != r.runner {
		t.Fatalf("runner %v %q, want %s %q", tg.Tasks[0].Config["command"], args, r.runner, want)
	}
	if p := info("mediajobs-cpu"); p.ParameterizedJob == nil || stopped(p) {
		t.Fatalf("the pool's parameterized job: %+v", p)
	}

	// Scaled in Nomad (nomad job scale), as an operator or an autoscaler does. Nomad
	// refuses while the first deployment is active, so until it is accepted.
	three := 3
	var scaleErr error
	testenv.Eventually(t, 2*time.Minute, "nomad to accept the scale", func() bool {
		_, _, scaleErr = jobs.Scale("mediajobs-cpu-warm", "warm", &three, "test scales", false, nil, nil)
		return scaleErr == nil || !strings.Contains(scaleErr.Error(), "active deployment")
	})
	if scaleErr != nil {
		t.Fatalf("scale: %v", scaleErr)
	}
	if c := *info("mediajobs-cpu-warm").TaskGroups[0].Count; c != 3 {
		t.Fatalf("scaled count %d", c)
	}
	// Registering again, the same config or a changed one, keeps the scaled count.
	register()
	if c := *info("mediajobs-cpu-warm").TaskGroups[0].Count; c != 3 {
		t.Fatalf("registering again reset the scaled count to %d", c)
	}
	configure(&config.Pool{Name: "cpu", Warm: &config.Warm{Count: 1, Memory: 80}})
	register()
	w = info("mediajobs-cpu-warm")
	if c, m := *w.TaskGroups[0].Count, *w.TaskGroups[0].Tasks[0].Resources.MemoryMB; c != 3 || m != 80 {
		t.Fatalf("a changed config registered count %d memory %d, want 3 and 80", c, m)
	}

	// The warm block removed: the runners stop; the pool stays.
	configure(&config.Pool{Name: "cpu"})
	register()
	if !stopped(info("mediajobs-cpu-warm")) {
		t.Fatal("the warm runners of a pool without a warm block still run")
	}
	if stopped(info("mediajobs-cpu")) {
		t.Fatal("the pool's parameterized job was stopped")
	}
	register() // already stopped: nothing to do
	if n := strings.Count(r.log.String(), "stopped warm runners"); n != 1 {
		t.Fatalf("stopped %d times, want once:\n%s", n, r.log.String())
	}

	// Back, then the pool removed from the config: its runners stop too.
	configure(&config.Pool{Name: "cpu", Warm: &config.Warm{}})
	register()
	if stopped(info("mediajobs-cpu-warm")) {
		t.Fatal("registering the warm block again did not start the runners")
	}
	configure(&config.Pool{Name: "other"})
	register()
	if !stopped(info("mediajobs-cpu-warm")) {
		t.Fatalf("the warm runners of a removed pool still run\n%s", r.log.String())
	}

	// A pool named cpu-warm, once pool cpu's runners are gone: its parameterized job
	// has their ID, and stays.
	if _, _, err := jobs.Deregister("mediajobs-cpu-warm", true, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the purge", func() bool {
		_, _, err := jobs.Info("mediajobs-cpu-warm", nil)
		return isNotFound(err)
	})
	configure(&config.Pool{Name: "cpu-warm"})
	register()
	if p := info("mediajobs-cpu-warm"); p.ParameterizedJob == nil || stopped(p) {
		t.Fatalf("pool cpu-warm's parameterized job: %+v", p)
	}
}
