package devstack

import (
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/e2e"
)

// A job whose input names another job's output (job:<id>/<output>) waits,
// queued and saying for what, until that job succeeds, then runs on a worker
// that fetches the output from storage; a job naming an output of a job that
// fails, fails too, naming it (docs/references.md).
func TestJobReadsAnotherJobsOutput(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	create := func(body map[string]any) map[string]any {
		t.Helper()
		r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, body)
		if r.Status != 200 {
			t.Fatalf("create: HTTP %d %s", r.Status, r.Body)
		}
		return r.Data(t)
	}
	first := create(map[string]any{
		"input_files":     map[string]string{"clip": e2e.ClipURL},
		"output_files":    []string{"short.mp4"},
		"ffmpeg_commands": []string{"-i {{clip}} -t 1 -c:v libx264 -preset ultrafast -an {{short.mp4}}"},
	})
	id := first["id"].(string)
	second := create(map[string]any{
		"input_files":     map[string]string{"video": "job:" + id + "/short.mp4"},
		"output_files":    []string{"thumb.png"},
		"ffmpeg_commands": []string{"-i {{video}} -frames:v 1 -vf scale=32:-2 {{thumb.png}}"},
	})
	if s, _ := second["status_detail"].(string); second["status"] != "queued" || !strings.Contains(s, "waiting for job "+id+" to make short.mp4") {
		// The first job may have ended already (a warm runner is fast): then
		// the second is queued like any job.
		if e2e.Call(t, "GET", "/api/jobs/"+id, e2e.Stack.APIKey, nil).Data(t)["status"] != "succeeded" {
			t.Fatalf("the second job does not say it waits: %v %q", second["status"], s)
		}
	}
	if got := e2e.WaitTerminal(t, id); got["status"] != "succeeded" {
		t.Fatalf("first job %v: %v", got["status"], got["error_message"])
	}
	done := e2e.WaitTerminal(t, second["id"].(string))
	if done["status"] != "succeeded" {
		t.Fatalf("second job %v: %v", done["status"], done["error_message"])
	}
	if in := done["input_files"].(map[string]any)["video"]; in != "job:"+id+"/short.mp4" {
		t.Fatalf("input_files shown as %v", in)
	}
	thumb := e2e.Download(t, done["output_files"].(map[string]any)["thumb.png"].(string))
	streams := e2e.Probe(t, thumb)["streams"].([]any)
	if w := streams[0].(map[string]any)["width"]; w != float64(32) {
		t.Fatalf("thumbnail width %v", w)
	}

	// A job that fails: the one awaiting it fails, naming it.
	bad := create(map[string]any{
		"input_files":     map[string]string{"clip": e2e.ClipURL},
		"output_files":    []string{"x.mp4"},
		"ffmpeg_commands": []string{"-i {{clip}} -map 0:9 {{x.mp4}}"},
	})
	waiter := create(map[string]any{
		"input_files":     map[string]string{"video": "job:" + bad["id"].(string) + "/x.mp4"},
		"output_files":    []string{"y.png"},
		"ffmpeg_commands": []string{"-i {{video}} -frames:v 1 {{y.png}}"},
	})
	got := e2e.WaitTerminal(t, waiter["id"].(string))
	if msg, _ := got["error_message"].(string); got["status"] != "failed" || !strings.Contains(msg, "job "+bad["id"].(string)+" failed") {
		t.Fatalf("the waiting job: %v %q", got["status"], got["error_message"])
	}
}
