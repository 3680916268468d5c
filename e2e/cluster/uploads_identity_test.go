package cluster

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// TestDispatchPayloadIsNoKeyToDestinations: whoever can read a running child's
// dispatch payload from Nomad (its read-job ACL, or anyone on a cluster without
// ACLs) finds the attempt's upload-links URL there, but posting to it without
// the child's own Nomad workload identity gets no destination (the runner's
// jobspec identity does: TestOutputDestinations, on both drivers). On a docker
// pool the upload task has no identity: the fetch task got a ticket for it with
// its own, which the payload's reader cannot get, and which ffmpeg's container
// (no payload, no identity) cannot use.
func TestDispatchPayloadIsNoKeyToDestinations(t *testing.T) {
	e2e.NeedStack(t)
	for _, driver := range []string{"raw_exec", "docker"} {
		t.Run(driver, func(t *testing.T) {
			extra, machine := "", ""
			if driver == "docker" {
				needDocker(t)
				extra, machine = dockerPool(""), "docker"
			}
			c := e2e.NewCluster(t, e2e.Agent, extra)
			c.StartDispatcher("d")
			const sig = "5ec2e7515ec2e7515ec2e751"
			// A job that runs long enough to be read while it runs (-re: real time).
			body := map[string]any{
				"output_files":        []string{"o.mp4"},
				"ffmpeg_commands":     []string{"-re -f lavfi -i testsrc=size=64x48:rate=5:duration=120 -c:v mpeg4 outputs/o.mp4"},
				"output_destinations": map[string]string{"o.mp4": "http://127.0.0.1:9/bucket/o.mp4?X-Amz-Signature=" + sig},
			}
			if machine != "" {
				body["machine"] = machine
			}
			id := c.Create(body)
			t.Cleanup(func() { c.Cancel(id) })
			c.WaitStatus(id, 120*time.Second, "running")
			child := c.Stored(id).NomadJobID
			job, _, err := c.Nomad.Client.Jobs().Info(child, nil)
			if err != nil {
				t.Fatalf("nomad job %s: %v", child, err)
			}
			var m mj.Manifest
			if err := json.Unmarshal(job.Payload, &m); err != nil || m.UploadsURL == "" {
				t.Fatalf("the payload holds no upload-links URL (%v): %s", err, job.Payload)
			}
			ask := func(alloc, ticket string) map[string]any {
				return map[string]any{"alloc": alloc, "files": []string{"result.json", "outputs/o.mp4"}, "destinations": true, "ticket": ticket}
			}
			r := e2e.Call(t, "POST", m.UploadsURL, "", ask("", ""))
			if r.Status != 401 || strings.Contains(string(r.Body), sig) || !strings.Contains(string(r.Body), "workload identity") {
				t.Fatalf("the payload's upload-links URL without the allocation's identity: %d %s", r.Status, r.Body)
			}
			// Asked for no output with a destination (a failed job's result), it still
			// answers: links the payload's holder could already use, nothing more.
			if r := e2e.Call(t, "POST", m.UploadsURL, "", map[string]any{"files": []string{"result.json"}, "destinations": true}); r.Status != 200 || strings.Contains(string(r.Body), sig) {
				t.Fatalf("the upload links alone: %d %s", r.Status, r.Body)
			}
			if driver != "docker" {
				return
			}
			allocs, _, err := c.Nomad.Client.Jobs().Allocations(child, false, nil)
			if err != nil || len(allocs) != 1 {
				t.Fatalf("allocations of %s: %v %v", child, allocs, err)
			}
			allocID := allocs[0].ID
			// Nor does the payload get the ticket, for this allocation or any.
			if r := e2e.Call(t, "POST", m.UploadsURL, "", map[string]any{"alloc": allocID, "files": []string{}, "destinations": true, "issue_ticket": true}); r.Status != 401 || strings.Contains(string(r.Body), "ticket\":") {
				t.Fatalf("a ticket for the payload's reader: %d %s", r.Status, r.Body)
			}
			// The fetch task got one with its identity, and left it beside the
			// job's directory for the upload task (poststop: no identity).
			alloc, _, err := c.Nomad.Client.Allocations().Info(allocID, nil)
			if err != nil {
				t.Fatal(err)
			}
			rc, err := c.Nomad.Client.AllocFS().Cat(alloc, "alloc/.mediajobs-destinations-ticket", nil)
			if err != nil {
				t.Fatalf("the fetch task left no ticket: %v", err)
			}
			ticket, _ := io.ReadAll(rc)
			rc.Close()
			if len(ticket) < 20 {
				t.Fatalf("the ticket: %q", ticket)
			}
			// It is this allocation's, and cannot be forged.
			forged := []byte(string(ticket))
			forged[0] ^= 1
			for _, c := range []struct{ alloc, ticket string }{
				{"9c8d7e6f-5a4b-4c3d-8e2f-1a0b9c8d7e6f", string(ticket)},
				{allocID, string(forged)},
			} {
				if r := e2e.Call(t, "POST", m.UploadsURL, "", ask(c.alloc, c.ticket)); r.Status != 403 || strings.Contains(string(r.Body), sig) {
					t.Fatalf("ticket %q for allocation %s: %d %s", c.ticket, c.alloc, r.Status, r.Body)
				}
			}
			// ffmpeg's container has neither the payload nor an identity: it
			// mounts the shared /alloc and its own task's directories, none of
			// the other tasks' (the payload is in fetch's, progress's and
			// upload's local/, fetch's identity in its secrets/).
			ctr := "runner-" + allocID
			var out []byte
			testenv.Eventually(t, 60*time.Second, "ffmpeg's container to run", func() bool {
				out, err = exec.Command("docker", "inspect", "-f", "{{json .Mounts}}\n{{json .Config.Env}}", ctr).Output()
				return err == nil
			})
			lines := strings.SplitN(string(out), "\n", 2)
			var mounts []struct{ Source, Destination string }
			if err := json.Unmarshal([]byte(lines[0]), &mounts); err != nil || len(mounts) == 0 {
				t.Fatalf("mounts of %s: %v %s", ctr, err, out)
			}
			dests := map[string]bool{}
			for _, mt := range mounts {
				dests[mt.Destination] = true
				for _, task := range []string{"fetch", "progress", "upload"} {
					if strings.Contains(mt.Source, "/"+allocID+"/"+task) {
						t.Errorf("ffmpeg's container mounts %s's %s at %s", task, mt.Source, mt.Destination)
					}
				}
			}
			if !dests["/alloc"] || !dests["/secrets"] {
				t.Fatalf("mounts of ffmpeg's container: %+v", mounts)
			}
			if strings.Contains(lines[1], "eyJ") || strings.Contains(lines[1], "NOMAD_TOKEN") || strings.Contains(lines[1], string(ticket)) {
				t.Fatalf("ffmpeg's environment holds a token: %s", lines[1])
			}
			files, _, err := c.Nomad.Client.AllocFS().List(alloc, "runner/local", nil)
			if err != nil {
				t.Fatal(err)
			}
			for _, f := range files {
				if f.Name == "manifest.json" {
					t.Fatal("ffmpeg's task has the dispatch payload")
				}
			}
			// Its own secrets/ holds no identity (Nomad's API does not list a
			// secrets/ directory: read it on the node).
			for _, mt := range mounts {
				if mt.Destination != "/secrets" {
					continue
				}
				entries, err := os.ReadDir(mt.Source)
				if err != nil {
					t.Fatalf("ffmpeg's secrets/ (%s): %v", mt.Source, err)
				}
				for _, e := range entries {
					if strings.HasSuffix(e.Name(), ".jwt") {
						t.Fatalf("ffmpeg's secrets/ holds %s", e.Name())
					}
				}
			}
		})
	}
}

// TestWarmRunnerGetsItsDestinations: a warm runner presents its own workload
// identity (the warm job's, of the allocation the job was handed to) and
// delivers the output to its destination.
func TestWarmRunnerGetsItsDestinations(t *testing.T) {
	e2e.NeedStack(t)
	var mu sync.Mutex
	got := map[string]int{}
	dest := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, _ := io.ReadAll(r.Body)
		mu.Lock()
		got[r.Method+" "+r.URL.Path] = len(b)
		mu.Unlock()
	}))
	t.Cleanup(dest.Close)
	c := e2e.NewCluster(t, e2e.Agent, fmt.Sprintf(`
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
}`, e2e.RunnerBin))
	c.StartDispatcher("d")
	testenv.Eventually(t, 120*time.Second, "the warm runner to wait for work", func() bool {
		idle, err := c.Store.WarmIdleRunners(context.Background(), "dwarm")
		return err == nil && len(idle) == 1
	})
	body := c.JobBody("dwarm", "-i inputs/in -t 1 -vf scale=160:-2 -c:v libx264 -preset ultrafast -an outputs/o.mp4")
	body["machine"], body["timeout_seconds"] = "dwarm", 30
	body["output_destinations"] = map[string]string{"o.mp4": dest.URL + "/bucket/o.mp4?X-Amz-Signature=5ec2e7515ec2e751"}
	id := c.Create(body)
	j := c.WaitStatus(id, 90*time.Second, "succeeded", "failed", "cancelled")
	if w, _ := j["worker"].(map[string]any); j["status"] != "succeeded" || w["path"] != "warm" {
		t.Fatalf("job %v on %v: %v", j["status"], j["worker"], j["error_message"])
	}
	mu.Lock()
	defer mu.Unlock()
	if got["PUT /bucket/o.mp4"] == 0 {
		t.Fatalf("the destination received %v", got)
	}
}
