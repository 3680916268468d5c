package cluster

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/mediajobs/mediajobs/testenv"
)

// TestDevComesUpBeforeNomad: on a fresh machine `make run` starts `mediajobs dev`
// while Nomad is still being built (MEDIAJOBS_NOMAD_PENDING, deploy/scripts/run-dev.sh):
// the API answers at once and takes a job, which waits in the queue and runs once
// the agent is up. Without the pending mode dev refuses to start without Nomad.
// A process of its own: its dispatcher's gauges are not the shared stack's.
func TestDevComesUpBeforeNomad(t *testing.T) {
	e2e.NeedStack(t)
	agent, err := testenv.StartNomad(testenv.NomadBinary(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(agent.Close)
	agent.Stop() // its ports are known; nothing answers on them until Start

	dir := t.TempDir()
	api := e2e.FreeAddr()
	cfg := filepath.Join(dir, "dev.hcl")
	e2e.WriteFile(t, cfg, fmt.Sprintf(`
server {
  listen         = %q
  allow_loopback = true
  rate_limit     = 0
}
etcd {
  embedded      = true
  listen_client = %q
  listen_peer   = %q
  data_dir      = %q
}
nomad {
  address = %q
}
storage {
  path = %q
}
pool "cpu" {
  runner_command = %q
}
`, api, e2e.FreeAddr(), e2e.FreeAddr(), filepath.Join(dir, "etcd"), agent.Addr, filepath.Join(dir, "blobs"), e2e.RunnerBin))
	key := "mj_pending_test_key_0123456789"
	cmd := exec.Command(e2e.RunnerBin, "dev", "-config", cfg, "-data", dir)
	out := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.Env = append(os.Environ(), "MEDIAJOBS_DEV_API_KEY="+key, "MEDIAJOBS_DISPATCHER_ADDR=",
		"MEDIAJOBS_HTTP_ADDR=", "MEDIAJOBS_NOMAD_PENDING="+filepath.Join(dir, "nomad-build.log"))
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan struct{})
	go func() { cmd.Wait(); close(exited) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-exited:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("--- mediajobs dev ---\n%s", e2e.Tail(out.String(), 6000))
		}
	})
	base := "http://" + api
	testenv.Eventually(t, 60*time.Second, "mediajobs dev to answer without Nomad", func() bool {
		select {
		case <-exited:
			t.Fatalf("mediajobs dev exited without Nomad:\n%s", out.String())
		default:
		}
		return e2e.Status(base+"/readyz") == 200 && strings.Contains(out.String(), "still being built")
	})

	body := map[string]any{"output_files": []string{"out.mp4"},
		"ffmpeg_commands": []string{"-f lavfi -i testsrc=duration=1:size=64x64 -c:v libx264 {{out.mp4}}"}}
	r := e2e.Call(t, "POST", base+"/api/ffmpeg", key, body)
	if r.Status/100 != 2 {
		t.Fatalf("create while Nomad is down: HTTP %d %s", r.Status, r.Body)
	}
	id, _ := r.Data(t)["id"].(string)
	if st := e2e.Call(t, "GET", base+"/api/jobs/"+id, key, nil).Data(t)["status"]; st != "queued" {
		t.Fatalf("a job created before Nomad is up is %v, want queued", st)
	}

	if err := agent.Start(); err != nil {
		t.Fatal(err)
	}
	var job map[string]any
	testenv.Eventually(t, 120*time.Second, "the queued job to run once Nomad is up", func() bool {
		job = e2e.Call(t, "GET", base+"/api/jobs/"+id, key, nil).Data(t)
		st := job["status"]
		return st == "succeeded" || st == "failed" || st == "cancelled"
	})
	if job["status"] != "succeeded" {
		t.Fatalf("job ended %v: %v", job["status"], job["error_message"])
	}
}
