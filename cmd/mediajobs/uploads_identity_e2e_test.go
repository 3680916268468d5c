package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// TestDispatchPayloadIsNoKeyToDestinations: whoever can read a running child's
// dispatch payload from Nomad (its read-job ACL, or anyone on a cluster without
// ACLs) finds the attempt's upload-links URL there, but posting to it without
// the child's own Nomad workload identity gets no destination (the runner's
// jobspec identity does: TestOutputDestinations, on both drivers).
func TestDispatchPayloadIsNoKeyToDestinations(t *testing.T) {
	needStack(t)
	c := newCluster(t, agent, "")
	c.startDispatcher("d")
	const sig = "5ec2e7515ec2e7515ec2e751"
	// A job that runs long enough to be read while it runs (-re: real time).
	id := c.create(map[string]any{
		"output_files":        []string{"o.mp4"},
		"ffmpeg_commands":     []string{"-re -f lavfi -i testsrc=size=64x48:rate=5:duration=120 -c:v mpeg4 outputs/o.mp4"},
		"output_destinations": map[string]string{"o.mp4": "http://127.0.0.1:9/bucket/o.mp4?X-Amz-Signature=" + sig},
	})
	t.Cleanup(func() { c.cancel(id) })
	c.waitStatus(id, 120*time.Second, "running")
	child := c.stored(id).NomadJobID
	job, _, err := c.nomad.Client.Jobs().Info(child, nil)
	if err != nil {
		t.Fatalf("nomad job %s: %v", child, err)
	}
	var m mj.Manifest
	if err := json.Unmarshal(job.Payload, &m); err != nil || m.UploadsURL == "" {
		t.Fatalf("the payload holds no upload-links URL (%v): %s", err, job.Payload)
	}
	body := map[string]any{"files": []string{"result.json", "outputs/o.mp4"}, "destinations": true}
	r := call(t, "POST", m.UploadsURL, "", body)
	if r.Status != 401 || strings.Contains(string(r.Body), sig) || !strings.Contains(string(r.Body), "workload identity") {
		t.Fatalf("the payload's upload-links URL without the allocation's identity: %d %s", r.Status, r.Body)
	}
	// Asked for no output with a destination (a failed job's result), it still
	// answers: links the payload's holder could already use, nothing more.
	if r := call(t, "POST", m.UploadsURL, "", map[string]any{"files": []string{"result.json"}, "destinations": true}); r.Status != 200 || strings.Contains(string(r.Body), sig) {
		t.Fatalf("the upload links alone: %d %s", r.Status, r.Body)
	}
}

// TestWarmRunnerGetsItsDestinations: a warm runner presents its own workload
// identity (the warm job's, of the allocation the job was handed to) and
// delivers the output to its destination.
func TestWarmRunnerGetsItsDestinations(t *testing.T) {
	needStack(t)
	var mu sync.Mutex
	got := map[string]int{}
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.Method+" "+r.URL.Path] = len(b)
		mu.Unlock()
	}))
	t.Cleanup(dest.Close)
	c := newCluster(t, agent, fmt.Sprintf(`
pool "dwarm" {
  runner_command = %q
  cpu            = 100
  memory         = 128
  warm {
    count           = 1
    max_job_seconds = 60
    cpu             = 100
    memory          = 256
  }
}`, runnerBin))
	c.startDispatcher("d")
	testenv.Eventually(t, 120*time.Second, "the warm runner to wait for work", func() bool {
		idle, err := c.store.WarmIdleRunners(context.Background(), "dwarm")
		return err == nil && len(idle) == 1
	})
	body := c.jobBody("dwarm", "-i inputs/in -t 1 -vf scale=160:-2 -c:v libx264 -preset ultrafast -an outputs/o.mp4")
	body["machine"], body["timeout_seconds"] = "dwarm", 30
	body["output_destinations"] = map[string]string{"o.mp4": dest.URL + "/bucket/o.mp4?X-Amz-Signature=5ec2e7515ec2e751"}
	id := c.create(body)
	j := c.waitStatus(id, 90*time.Second, "succeeded", "failed", "cancelled")
	if w, _ := j["worker"].(map[string]any); j["status"] != "succeeded" || w["path"] != "warm" {
		t.Fatalf("job %v on %v: %v", j["status"], j["worker"], j["error_message"])
	}
	mu.Lock()
	defer mu.Unlock()
	if got["PUT /bucket/o.mp4"] == 0 {
		t.Fatalf("the destination received %v", got)
	}
}
