package gateway

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// An input may name another job's output (job:<id>/<output>): a malformed
// reference, a job of another account or none, a job that failed, or an
// output it does not list is refused naming the input, and nothing is stored;
// a job still running is awaited (queued, saying for what); a succeeded one's
// output is used at once, unless it expired.
func TestInputsNamingAnotherJobsOutput(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	create := func(acct string, inputs map[string]string) (int, map[string]any) {
		t.Helper()
		status, body, _ := h.do("POST", "/api/ffmpeg", acct, map[string]any{
			"input_files": inputs, "output_files": []string{"thumb.png"}, "ffmpeg_commands": []string{"-i {{v}} -frames:v 1 {{thumb.png}}"},
		})
		return status, body
	}
	idOf := func(body map[string]any) string { return body["data"].(map[string]any)["id"].(string) }
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid())
	if status != 200 {
		t.Fatalf("create the first job: %d %v", status, body)
	}
	dep := idOf(body)
	stored := func() float64 {
		_, body, _ := h.do("GET", "/api/jobs", "alice", nil)
		return body["pagingParams"].(map[string]any)["total"].(float64)
	}
	before := stored()

	refused := func(acct string, inputs map[string]string, want string) {
		t.Helper()
		status, body := create(acct, inputs)
		details, _ := body["details"].(map[string]any)
		if status != 400 || body["errorCode"] == nil || !strings.Contains(details["input_files.v"].(string), want) {
			t.Fatalf("%v: %d %v; want 400 saying %q", inputs, status, body, want)
		}
	}
	refused("alice", map[string]string{"v": "job:" + dep}, "is not a reference")
	refused("alice", map[string]string{"v": "job:nope/out.mp4"}, "is not a reference")
	refused("alice", map[string]string{"v": "job:" + dep + "/other.mp4"}, `does not list "other.mp4"`)
	refused("alice", map[string]string{"v": "job:3f2a7c1e-8d4b-4e6f-9a0b-1c2d3e4f5a6b/out.mp4"}, "no job 3f2a7c1e-8d4b-4e6f-9a0b-1c2d3e4f5a6b in this account")
	refused("bob", map[string]string{"v": "job:" + dep + "/out.mp4"}, "no job "+dep+" in this account")
	if n := stored(); n != before {
		t.Fatalf("refused creates stored %v jobs", n-before)
	}

	// Running: awaited.
	status, body = create("alice", map[string]string{"v": "job:" + dep + "/out.mp4"})
	if status != 200 {
		t.Fatalf("create awaiting: %d %v", status, body)
	}
	data := body["data"].(map[string]any)
	if data["status"] != "queued" || data["status_detail"] != "waiting for job "+dep+" to make out.mp4 (input v)" {
		t.Fatalf("awaiting job: %v", data)
	}
	if data["input_files"].(map[string]any)["v"] != "job:"+dep+"/out.mp4" {
		t.Fatalf("input_files shown as %v", data["input_files"])
	}
	waiter, err := h.store.Job(ctx, idOf(body))
	if err != nil || len(waiter.Awaits) != 1 || waiter.Awaits[0] != dep {
		t.Fatalf("stored waiter: %+v %v", waiter, err)
	}
	// A dry run resolves as a create does.
	status, body, _ = h.do("POST", "/api/ffmpeg?dry_run=true", "alice", map[string]any{
		"input_files": map[string]string{"v": "job:" + dep + "/nope.mp4"}, "output_files": []string{"thumb.png"}, "ffmpeg_commands": []string{"-i {{v}} {{thumb.png}}"},
	})
	if status != 400 {
		t.Fatalf("dry run with an output the job does not list: %d %v", status, body)
	}

	// Succeeded: the output's key, once stored; expired, refused.
	key := mj.RunScope(dep, 1) + "alloc/outputs/out.mp4"
	now := time.Now()
	if _, err := h.store.UpdateJob(ctx, dep, func(j *mj.Job) error {
		j.Outputs = []mj.Output{{Name: "out.mp4", Key: key, Size: 3}}
		j.Succeed(now, "")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	h.gw.jobs.drop(dep)
	refused("alice", map[string]string{"v": "job:" + dep + "/out.mp4"}, "has expired")
	if _, err := h.gw.Blobs.Put(ctx, key, bytes.NewReader([]byte("abc")), 3); err != nil {
		t.Fatal(err)
	}
	status, body = create("alice", map[string]string{"v": "job:" + dep + "/out.mp4"})
	if status != 200 {
		t.Fatalf("create from a succeeded job: %d %v", status, body)
	}
	j, err := h.store.Job(ctx, idOf(body))
	if err != nil || len(j.Awaits) != 0 || j.InputKeys["v"] != key {
		t.Fatalf("stored: %+v %v", j, err)
	}

	// Failed: refused, saying why.
	status, body, _ = h.do("POST", "/api/ffmpeg", "alice", valid())
	failed := idOf(body)
	h.store.UpdateJob(ctx, failed, func(j *mj.Job) error { j.Fail(now, "ffmpeg exited with code 1"); return nil })
	h.gw.jobs.drop(failed)
	refused("alice", map[string]string{"v": "job:" + failed + "/out.mp4"}, "failed, so its output \"out.mp4\" will not exist: ffmpeg exited with code 1")
}
