package dispatcher

import (
	"context"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/mediajobs/mediajobs/webhook"
)

// nomadRig is a real Nomad dev agent, etcd, and a runner that only sleeps, so a
// child stays running until something stops it.
type nomadRig struct {
	t      *testing.T
	agent  *testenv.Nomad
	store  *store.Store
	cfg    *config.Config
	blobs  *blob.Bucket
	runner string
	log    testenv.LogBuffer
}

func newNomadRig(t *testing.T, pools ...*config.Pool) *nomadRig {
	t.Helper()
	agent, err := testenv.StartNomad(testenv.NomadBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	for _, p := range pools {
		p.CPU, p.Memory, p.Disk = 100, 64, 50
	}
	cfg.Pools = pools
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	blobs, err := blob.NewLocal(filepath.Join(dir, "blobs"))
	if err != nil {
		t.Fatal(err)
	}
	runner := filepath.Join(dir, "runner.sh")
	if err := os.WriteFile(runner, []byte("#!/bin/sh\nexec sleep 600\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return &nomadRig{t: t, agent: agent, store: s, cfg: cfg, blobs: blobs, runner: runner}
}

// start runs a dispatcher until the returned function stops it (and waits for it).
func (r *nomadRig) start(name string) (stop func()) {
	d := &Dispatcher{
		Config: r.cfg, Store: r.store, Jobs: r.agent.Client.Jobs(), Allocs: r.agent.Client.Allocations(), Events: r.agent.Client.EventStream(),
		Blobs: r.blobs, Signer: blob.Signer{Secret: []byte("test"), Base: "http://127.0.0.1:1"},
		Webhook: &webhook.Sender{}, RunnerCommand: r.runner, Name: name,
		Log:            slog.New(slog.NewTextHandler(&r.log, &slog.HandlerOptions{Level: slog.LevelDebug})).With("dispatcher", name),
		ReconcileEvery: 2 * time.Second, LeaderTTL: 2 * time.Second,
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); d.Run(ctx) }()
	testenv.Eventually(r.t, 30*time.Second, name+" to lead", d.Leading)
	var once sync.Once
	stop = func() { once.Do(func() { cancel(); <-done }) }
	r.t.Cleanup(stop)
	return stop
}

func (r *nomadRig) create(id, machine string) {
	r.t.Helper()
	now := time.Now().UTC()
	j := &mj.Job{ID: id, AccountID: "acct", Status: mj.StatusQueued, Machine: machine, TimeoutSeconds: 600,
		FFmpegCommands: []string{"-version"}, CreatedAt: now, QueuedAt: now}
	if err := r.store.CreateJob(context.Background(), j); err != nil {
		r.t.Fatal(err)
	}
}

func (r *nomadRig) job(id string) *mj.Job {
	r.t.Helper()
	j, err := r.store.Job(context.Background(), id)
	if err != nil {
		r.t.Fatal(err)
	}
	return j
}

// A job cancelled while no dispatcher led never shows its active key's delete to
// the cancel loop; the reconcile of the next leader stops its child anyway.
func TestCancelledWhileNoLeaderStopsChild(t *testing.T) {
	r := newNomadRig(t, &config.Pool{Name: "cpu", MaxAttempts: 1})
	stop := r.start("d1")
	id := "00000000-0000-4000-8000-0000000000b1"
	r.create(id, "cpu")
	testenv.Eventually(t, 60*time.Second, "the job to run", func() bool { return r.job(id).Status == mj.StatusRunning })
	child := r.job(id).NomadJobID
	stop()

	now := time.Now().UTC()
	if _, err := r.store.UpdateJob(context.Background(), id, func(j *mj.Job) error {
		j.Status, j.FinishedAt, j.StatusDetail = mj.StatusCancelled, &now, "cancelled by the client"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	nj, _, err := r.agent.Client.Jobs().Info(child, nil)
	if err != nil || nj.Stop == nil || *nj.Stop || *nj.Status == "dead" {
		t.Fatalf("precondition: the child should still run with no dispatcher: %+v %v", nj, err)
	}

	r.start("d2")
	testenv.Eventually(t, 60*time.Second, "the cancelled job's child to be stopped", func() bool {
		nj, _, err := r.agent.Client.Jobs().Info(child, nil)
		return err == nil && nj.Stop != nil && *nj.Stop
	})
	testenv.Eventually(t, 60*time.Second, "its allocation to stop", func() bool {
		allocs, _, err := r.agent.Client.Jobs().Allocations(child, true, nil)
		if err != nil || len(allocs) == 0 {
			return false
		}
		for _, a := range allocs {
			if a.ClientStatus == api.AllocClientStatusRunning || a.ClientStatus == api.AllocClientStatusPending {
				return false
			}
		}
		return true
	})
	if _, _, err := r.agent.Client.Jobs().Info(child, nil); err != nil {
		t.Fatalf("the child was purged, not stopped: %v", err)
	}
	if j := r.job(id); j.Status != mj.StatusCancelled {
		t.Fatalf("job %s", j.Status)
	}
}

// A pool Nomad refuses (its node pool does not exist) holds up neither the other
// pools nor itself once Nomad would take it.
func TestRefusedPoolDoesNotBlockTheOthers(t *testing.T) {
	r := newNomadRig(t, &config.Pool{Name: "cpu", MaxAttempts: 1}, &config.Pool{Name: "bad", NodePool: "nope", MaxAttempts: 1})
	r.start("d")
	good, bad := "00000000-0000-4000-8000-0000000000c1", "00000000-0000-4000-8000-0000000000c2"
	r.create(bad, "bad")
	r.create(good, "cpu")
	testenv.Eventually(t, 60*time.Second, "the good pool's job to run", func() bool { return r.job(good).Status == mj.StatusRunning })
	if j := r.job(bad); j.Status != mj.StatusQueued || j.NomadJobID != "" {
		t.Fatalf("the refused pool's job: %s %q", j.Status, j.NomadJobID)
	}
	logs := r.log.String()
	var line string
	for _, l := range strings.Split(logs, "\n") {
		if strings.Contains(l, "register pool failed") && strings.Contains(l, "pool=bad") {
			line = l
			break
		}
	}
	if line == "" || !strings.Contains(line, "nope") {
		t.Fatalf("no failure naming the pool and Nomad's reason:\n%s", logs)
	}
	t.Logf("logged: %s", line)

	// Once the node pool exists, the retry registers the pool and its job is dispatched.
	if _, err := r.agent.Client.NodePools().Register(&api.NodePool{Name: "nope"}, nil); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 90*time.Second, "the refused pool's job to be dispatched", func() bool { return r.job(bad).NomadJobID != "" })
	if !strings.Contains(r.log.String(), `msg="registered pool" dispatcher=d pool=bad`) {
		t.Fatalf("no registration logged:\n%s", r.log.String())
	}
}
