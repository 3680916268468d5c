package devstack

import (
	"reflect"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/mediajobs/mediajobs/testenv"
)

func TestJobInputsOutputsStyleSucceeds(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{
		"input_files":     map[string]string{"video": e2e.ClipURL},
		"output_files":    []string{"small.mp4"},
		"ffmpeg_commands": []string{"-i inputs/video -t 2 -vf scale=160:-2 -c:v libx264 -preset ultrafast -c:a aac outputs/small.mp4"},
	})
	if r.Status != 200 {
		t.Fatalf("create: HTTP %d %s", r.Status, r.Body)
	}
	job := r.Data(t)
	if job["status"] != "queued" && job["status"] != "running" && job["status"] != "succeeded" {
		t.Fatalf("new job status %v", job["status"])
	}
	job = e2e.WaitTerminal(t, job["id"].(string))
	if job["status"] != "succeeded" {
		t.Fatalf("job %v: %v", job["status"], job["error_message"])
	}
	outs := job["output_files"].(map[string]any)
	if len(outs) != 1 {
		t.Fatalf("output_files = %v", outs)
	}
	p := e2e.Download(t, outs["small.mp4"].(string))
	info := e2e.Probe(t, p)
	streams := info["streams"].([]any)
	v := streams[0].(map[string]any)
	if v["codec_name"] != "h264" || v["width"].(float64) != 160 {
		t.Fatalf("output video stream = %v", v)
	}
	meta := job["outputs"].(map[string]any)["small.mp4"].(map[string]any)
	size := meta["size_bytes"].(float64)
	if fi := info["format"].(map[string]any)["size"].(string); fi != strconv.FormatInt(int64(size), 10) {
		t.Fatalf("reported size %v, file size %v", size, fi)
	}
	// The job's metadata is what ffprobe says of the downloaded file.
	format := info["format"].(map[string]any)
	dur, _ := strconv.ParseFloat(format["duration"].(string), 64)
	ms := meta["streams"].([]any)
	if meta["format"] != format["format_name"] || meta["duration_seconds"].(float64) != dur || len(ms) != len(streams) {
		t.Fatalf("metadata %v, ffprobe format %v with %d streams", meta, format, len(streams))
	}
	for i, st := range ms {
		got, want := st.(map[string]any), streams[i].(map[string]any)
		if got["type"] != want["codec_type"] || got["codec"] != want["codec_name"] {
			t.Fatalf("stream %d: %v, ffprobe %v", i, got, want)
		}
	}
	if ms[0].(map[string]any)["width"].(float64) != 160 || ms[1].(map[string]any)["sample_rate"].(float64) <= 0 {
		t.Fatalf("streams %v", ms)
	}
	if job["total_input_bytes"].(float64) <= 0 || job["total_output_bytes"].(float64) != size {
		t.Fatalf("byte totals: in %v out %v", job["total_input_bytes"], job["total_output_bytes"])
	}
	for _, f := range []string{"started_at", "finished_at"} {
		if _, err := time.Parse(time.RFC3339, job[f].(string)); err != nil {
			t.Errorf("%s = %v", f, job[f])
		}
	}
}

func TestJobPlaceholderStyleWithChainedCommands(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	// Command 1 writes an intermediate file (not declared), command 2 and 3 read it.
	r := e2e.Call(t, "POST", "/api/ffmpeg?wait=true", e2e.Stack.APIKey, map[string]any{
		"input_files":  map[string]string{"clip": e2e.ClipURL},
		"output_files": []string{"thumb.png", "audio.m4a"},
		"ffmpeg_commands": []string{
			"ffmpeg -i {{clip}} -t 1 -c copy middle.mp4",
			"-i middle.mp4 -frames:v 1 -vf 'scale=64:-1' <<thumb.png>>",
			`-i "middle.mp4" -vn -c:a copy {{audio.m4a}}`,
		},
	})
	job := r.Data(t)
	if job["status"] != "succeeded" {
		t.Fatalf("status %v: %v", job["status"], job["error_message"])
	}
	outs := job["output_files"].(map[string]any)
	var names []string
	for n := range outs {
		names = append(names, n)
	}
	sort.Strings(names)
	if !reflect.DeepEqual(names, []string{"audio.m4a", "thumb.png"}) {
		t.Fatalf("output_files = %v: only the declared outputs may come back", names)
	}
	png := e2e.Probe(t, e2e.Download(t, outs["thumb.png"].(string)))["streams"].([]any)[0].(map[string]any)
	if png["codec_name"] != "png" || png["width"].(float64) != 64 {
		t.Fatalf("thumbnail = %v", png)
	}
	aud := e2e.Probe(t, e2e.Download(t, outs["audio.m4a"].(string)))["streams"].([]any)[0].(map[string]any)
	if aud["codec_type"] != "audio" || aud["codec_name"] != "aac" {
		t.Fatalf("audio = %v", aud)
	}
}

func TestCommandFfmpegRejectsFails(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{
		"input_files":     map[string]string{"clip": e2e.ClipURL},
		"output_files":    []string{"out.mp4"},
		"ffmpeg_commands": []string{"-i {{clip}} -t 1 -c copy ok.mp4", "-i ok.mp4 -c:v no_such_encoder {{out.mp4}}"},
		"webhook_url":     e2e.HookURL + "/failed",
	})
	job := e2e.WaitTerminal(t, r.Data(t)["id"].(string))
	msg, _ := job["error_message"].(string)
	if job["status"] != "failed" || !strings.Contains(msg, "command 2 of 2") || !strings.Contains(msg, "no_such_encoder") || !strings.Contains(msg, "exit") {
		t.Fatalf("status %v, error_message %q: want the command, exit code and ffmpeg's message", job["status"], msg)
	}
	if outs := job["output_files"].(map[string]any); len(outs) != 0 {
		t.Fatalf("failed job has output_files %v", outs)
	}
	assertWebhook(t, job)
}

func TestUnfetchableInputNamesTheInput(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	r := e2e.Call(t, "POST", "/api/ffmpeg?wait=true", e2e.Stack.APIKey, map[string]any{
		"input_files":     map[string]string{"clip": e2e.ClipURL, "gone": strings.Replace(e2e.ClipURL, "clip.mp4", "missing.mp4", 1)},
		"output_files":    []string{"out.mp4"},
		"ffmpeg_commands": []string{"-i {{gone}} {{out.mp4}}"},
	})
	job := r.Data(t)
	if msg := job["error_message"].(string); job["status"] != "failed" || !strings.Contains(msg, `input "gone"`) || !strings.Contains(msg, "404") {
		t.Fatalf("status %v, error_message %q", job["status"], msg)
	}
}

func TestWebhookOnSuccess(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{
		"input_files":     map[string]string{"clip": e2e.ClipURL},
		"output_files":    []string{"frame.jpg"},
		"ffmpeg_commands": []string{"-i {{clip}} -frames:v 1 {{frame.jpg}}"},
		"webhook_url":     e2e.HookURL + "/ok",
		"metadata":        map[string]string{"order": "42"},
	})
	job := e2e.WaitTerminal(t, r.Data(t)["id"].(string))
	if job["status"] != "succeeded" {
		t.Fatalf("status %v: %v", job["status"], job["error_message"])
	}
	assertWebhook(t, job)
}

// assertWebhook waits for the webhook of a terminal job and checks it carries the
// same document as GET /api/jobs/{id}.
func assertWebhook(t *testing.T, job map[string]any) {
	t.Helper()
	id := job["id"].(string)
	testenv.Eventually(t, 30*time.Second, "the webhook of "+id, func() bool { return len(e2e.Hooks.Calls(id)) > 0 })
	c := e2e.Hooks.Calls(id)[0]
	if ct := c.Header.Get("Content-Type"); ct != "application/json" {
		t.Errorf("webhook Content-Type %q", ct)
	}
	if c.Header.Get("X-Mediajobs-Event") != "job."+job["status"].(string) || c.Header.Get("X-Mediajobs-Delivery") == "" {
		t.Errorf("webhook headers %v", c.Header)
	}
	for k, v := range job {
		switch k {
		case "output_files", "logs", "updated_at", "webhook":
			continue // links re-signed per read (their expiry counts from then); delivery state changes after delivery
		}
		if !reflect.DeepEqual(c.Job[k], v) {
			t.Errorf("webhook %s = %v, GET says %v", k, c.Job[k], v)
		}
	}
	if len(c.Job) != len(job) {
		t.Errorf("webhook has %d fields, GET has %d", len(c.Job), len(job))
	}
	if got, want := len(c.Job["output_files"].(map[string]any)), len(job["output_files"].(map[string]any)); got != want {
		t.Errorf("webhook lists %d outputs, GET %d", got, want)
	}
	if logs, _ := job["logs"].(map[string]any); logs != nil {
		got, _ := c.Job["logs"].(map[string]any)
		for k, v := range logs {
			g, _ := got[k].(string)
			if base, _, _ := strings.Cut(v.(string), "?"); !strings.HasPrefix(g, base+"?") {
				t.Errorf("webhook log %s = %q, GET says %q", k, g, v)
			}
		}
		if len(got) != len(logs) {
			t.Errorf("webhook lists %d logs, GET %d", len(got), len(logs))
		}
	}
	// Delivery is recorded on the job.
	testenv.Eventually(t, 30*time.Second, "webhook state on the job", func() bool {
		w, _ := e2e.Call(t, "GET", "/api/jobs/"+id, e2e.Stack.APIKey, nil).Data(t)["webhook"].(map[string]any)
		return w != nil && w["status"] == "delivered" && w["attempts"].(float64) == 1
	})
}

func TestAuthAndNotFound(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	for name, key := range map[string]string{"no key": "", "wrong key": "mj_not_a_real_key"} {
		r := e2e.Call(t, "GET", "/api/jobs", key, nil)
		if r.Status != 401 || r.JSON(t)["errorCode"] != "badApiKey" || r.JSON(t)["message"] == "" {
			t.Errorf("%s: HTTP %d %s", name, r.Status, r.Body)
		}
	}
	r := e2e.Call(t, "GET", "/api/jobs", "", nil, "Authorization", "Basic "+e2e.Stack.APIKey)
	if r.Status != 401 {
		t.Errorf("Basic auth accepted: %d", r.Status)
	}
	r = e2e.Call(t, "GET", "/api/jobs/00000000-0000-0000-0000-000000000000", e2e.Stack.APIKey, nil)
	if r.Status != 404 || r.JSON(t)["errorCode"] != "notFound" {
		t.Errorf("unknown id: HTTP %d %s", r.Status, r.Body)
	}
	r = e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{"output_files": []string{"a.mp4"}, "ffmpeg_commands": []string{"-i /etc/passwd {{a.mp4}}"}})
	if r.Status != 400 || r.JSON(t)["errorCode"] != "validationError" || r.JSON(t)["details"] == nil {
		t.Errorf("bad command: HTTP %d %s", r.Status, r.Body)
	}
	for _, p := range []string{"/healthz", "/readyz"} {
		if r := e2e.Call(t, "GET", p, "", nil); r.Status != 200 {
			t.Errorf("%s: HTTP %d %s", p, r.Status, r.Body)
		}
	}
}
