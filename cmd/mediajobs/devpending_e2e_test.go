package main

import (
	"context"
	"io"
	"log/slog"
	"net"
	"path/filepath"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
)

// TestDevComesUpBeforeNomad: on a fresh machine `make run` starts `mediajobs dev`
// while Nomad is still being built (MEDIAJOBS_NOMAD_PENDING, deploy/scripts/run-dev.sh):
// the API answers at once and takes a job, which waits in the queue and runs once
// the agent is up. Without the pending mode dev refuses to start without Nomad.
func TestDevComesUpBeforeNomad(t *testing.T) {
	needStack(t)
	agent, err := testenv.StartNomad(nomadBinary())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	agent.Stop() // its ports are known; nothing answers on them until Start

	tmp := t.TempDir()
	cfg := config.Default()
	cfg.Server.AllowLoopback = true
	cfg.Server.RateLimit = 0
	cfg.Etcd.DataDir = filepath.Join(tmp, "etcd")
	cfg.Etcd.ListenClient = "127.0.0.1:0"
	cfg.Etcd.ListenPeer = freeAddr()
	cfg.Storage.Path = filepath.Join(tmp, "blobs")
	cfg.Nomad.Address = agent.Addr
	cfg.Pools = []*config.Pool{{Name: "cpu"}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Server.Listen = ln.Addr().String()
	cfg.Server.PublicURL = "http://" + ln.Addr().String()
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}

	ctx, cancel := context.WithCancel(context.Background())
	ready, done := make(chan *devStack, 1), make(chan error, 1)
	go func() {
		opts := devOptions{DataDir: tmp, APIKey: "mj_pending_test_key_0123456789", RunnerCommand: runnerBin,
			Listener: ln, NomadPending: filepath.Join(tmp, "nomad-build.log")}
		done <- startDev(ctx, cfg, opts, slog.New(slog.NewTextHandler(io.Discard, nil)), func(s *devStack) { ready <- s })
	}()
	t.Cleanup(func() { cancel(); <-done })
	var s *devStack
	select {
	case s = <-ready:
	case err := <-done:
		t.Fatalf("mediajobs dev did not come up without Nomad: %v", err)
	case <-time.After(60 * time.Second):
		t.Fatal("mediajobs dev did not come up within 60 s")
	}

	body := map[string]any{"output_files": []string{"out.mp4"},
		"ffmpeg_commands": []string{"-f lavfi -i testsrc=duration=1:size=64x64 -c:v libx264 {{out.mp4}}"}}
	r := call(t, "POST", s.URL+"/api/ffmpeg", s.APIKey, body)
	if r.Status/100 != 2 {
		t.Fatalf("create while Nomad is down: HTTP %d %s", r.Status, r.Body)
	}
	id, _ := r.data(t)["id"].(string)
	if st := call(t, "GET", s.URL+"/api/jobs/"+id, s.APIKey, nil).data(t)["status"]; st != "queued" {
		t.Fatalf("a job created before Nomad is up is %v, want queued", st)
	}

	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	var job map[string]any
	testenv.Eventually(t, 120*time.Second, "the queued job to run once Nomad is up", func() bool {
		job = call(t, "GET", s.URL+"/api/jobs/"+id, s.APIKey, nil).data(t)
		st := job["status"]
		return st == "succeeded" || st == "failed" || st == "cancelled"
	})
	if job["status"] != "succeeded" {
		t.Fatalf("job ended %v: %v", job["status"], job["error_message"])
	}
}
