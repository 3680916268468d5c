package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/creack/pty"
	"github.com/mediajobs/mediajobs/e2e"
	"github.com/mediajobs/mediajobs/testenv"
)

// Pipelines (docs/pipelines.md) on the shared stack: steps are real jobs on
// real Nomad, with real ffmpeg.

// createPipeline posts a pipeline document and returns its view.
func createPipeline(t *testing.T, doc map[string]any) map[string]any {
	t.Helper()
	r := e2e.Call(t, "POST", "/api/pipelines", e2e.Stack.APIKey, doc)
	if r.Status != 200 {
		t.Fatalf("create pipeline: HTTP %d %s", r.Status, r.Body)
	}
	return r.Data(t)
}

func getPipeline(t *testing.T, id string) map[string]any {
	t.Helper()
	return e2e.Call(t, "GET", "/api/pipelines/"+id, e2e.Stack.APIKey, nil).Data(t)
}

// waitPipeline polls the pipeline until it has ended and its webhook, when it
// has one, is no longer pending.
func waitPipeline(t *testing.T, id string) map[string]any {
	t.Helper()
	return e2e.WaitPipeline(t, "", e2e.Stack.APIKey, id, 4*time.Minute)
}

// oneHook waits for the one delivery of webhook id (a job's or a pipeline's)
// and returns it; its delivery is recorded as delivered first, so none other
// is due.
func oneHook(t *testing.T, id, event string) e2e.HookCall {
	t.Helper()
	var calls []e2e.HookCall
	testenv.Eventually(t, time.Minute, "the webhook of "+id, func() bool {
		calls = e2e.Hooks.Calls(id)
		return len(calls) > 0
	})
	if len(calls) != 1 {
		t.Fatalf("%d webhooks of %s, want exactly one", len(calls), id)
	}
	if got := calls[0].Header.Get("X-Mediajobs-Event"); got != event {
		t.Fatalf("webhook of %s: event %q, want %q", id, got, event)
	}
	return calls[0]
}

// The worked example of docs/pipelines.md, small (e2e.LadderPipeline): one
// source, two renditions fanned out, an HLS master playlist over both fanned
// in, a thumbnail strip beside. Every rendition is probed, the master
// playlist is opened by ffprobe through its signed link, each job knows its
// pipeline, and one pipeline webhook arrives (e2e.CheckLadder). The same on
// docker: TestPipelineLadderOnDocker (e2e/cluster).
func TestPipelineLadderEndToEnd(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	p := createPipeline(t, e2e.LadderPipeline(e2e.ClipURL, "", e2e.HookURL+"/pipeline-ladder"))
	id := p["id"].(string)
	if p["status"] != "queued" && p["status"] != "running" {
		t.Fatalf("created pipeline: %v", p["status"])
	}
	if hls := e2e.PipelineStep(t, p, "hls"); fmt.Sprint(hls["needs"]) != "[rung]" {
		t.Fatalf("hls needs %v", hls["needs"])
	}
	e2e.CheckLadder(t, e2e.Stack.URL, e2e.Stack.APIKey, waitPipeline(t, id))
}

// A failing middle step: the step that takes its output fails, naming it; a
// branch that does not need it succeeds; the pipeline fails naming the step.
func TestPipelineFailingStepFailsItsDependentsOnly(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	p := createPipeline(t, map[string]any{"steps": map[string]any{
		"src": map[string]any{
			"output_files":    []string{"a.mp4"},
			"ffmpeg_commands": []string{"-f lavfi -i testsrc=duration=1:size=64x48:rate=10 -c:v libx264 -preset ultrafast {{a.mp4}}"},
		},
		"bad": map[string]any{
			"input_files":     map[string]string{"v": "step:src/a.mp4"},
			"output_files":    []string{"x.mp4"},
			"ffmpeg_commands": []string{"-i {{v}} -map 0:9 {{x.mp4}}"},
		},
		"after": map[string]any{
			"input_files":     map[string]string{"x": "step:bad/x.mp4"},
			"output_files":    []string{"y.png"},
			"ffmpeg_commands": []string{"-i {{x}} -frames:v 1 {{y.png}}"},
		},
		"side": map[string]any{
			"input_files":     map[string]string{"v": "step:src/a.mp4"},
			"output_files":    []string{"side.png"},
			"ffmpeg_commands": []string{"-i {{v}} -frames:v 1 {{side.png}}"},
		},
	}})
	id := p["id"].(string)
	p = waitPipeline(t, id)
	if msg, _ := p["error_message"].(string); p["status"] != "failed" || !strings.Contains(msg, "step bad failed") {
		t.Fatalf("pipeline %v: %q", p["status"], p["error_message"])
	}
	bad := e2e.StepJobs(e2e.PipelineStep(t, p, "bad"))[0]
	if bad["status"] != "failed" || !strings.Contains(bad["error_message"].(string), "matches no streams") {
		t.Fatalf("bad: %v %q", bad["status"], bad["error_message"])
	}
	after := e2e.PipelineStep(t, p, "after")
	afterJob := e2e.StepJobs(after)[0]
	if msg, _ := afterJob["error_message"].(string); after["status"] != "failed" || afterJob["status"] != "failed" ||
		!strings.Contains(msg, "input_files.x") || !strings.Contains(msg, "job "+bad["id"].(string)+" (step bad) failed") || !strings.Contains(msg, "matches no streams") {
		t.Fatalf("after: step %v, job %v %q; want failed naming bad's job %s", after["status"], afterJob["status"], afterJob["error_message"], bad["id"])
	}
	if afterJob["started_at"] != nil {
		t.Fatalf("after ran: started at %v", afterJob["started_at"])
	}
	side := e2e.StepJobs(e2e.PipelineStep(t, p, "side"))[0]
	png, ok := side["output_files"].(map[string]any)["side.png"].(string)
	if side["status"] != "succeeded" || !ok {
		t.Fatalf("side: %v %q %v", side["status"], side["error_message"], side["output_files"])
	}
	if w := e2e.Probe(t, e2e.Download(t, png))["streams"].([]any)[0].(map[string]any)["width"]; w != float64(64) {
		t.Fatalf("side.png width %v", w)
	}
	if src := e2e.PipelineStep(t, p, "src"); src["status"] != "succeeded" {
		t.Fatalf("src: %v", src["status"])
	}
}

// runnerRuns says whether a process of Nomad job nomadJobID still runs
// (found by the NOMAD_JOB_ID Nomad puts in its tasks' environment).
func runnerRuns(nomadJobID string) bool {
	procs, _ := filepath.Glob("/proc/[0-9]*/environ")
	for _, f := range procs {
		if env, err := os.ReadFile(f); err == nil && bytes.Contains(env, []byte("NOMAD_JOB_ID="+nomadJobID+"\x00")) {
			return true
		}
	}
	return false
}

// A cancel mid-pipeline: a running step is stopped (its Nomad job stopped
// and its processes gone), the steps waiting for it and the fanned-out ones
// end cancelled, each job ends once (one webhook each), and the pipeline ends
// cancelled with one webhook; a second cancel is a conflict.
func TestPipelineCancelMidway(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	long := "-re -f lavfi -i testsrc=duration=60:size=64x48:rate=10 -c:v libx264 -preset ultrafast {{long${index}.mp4}}"
	p := createPipeline(t, map[string]any{
		"steps": map[string]any{
			"long": map[string]any{
				"output_files":    []string{"long.mp4"},
				"ffmpeg_commands": []string{strings.ReplaceAll(long, "${index}", "")},
				"webhook_url":     e2e.HookURL + "/pipeline-cancel",
			},
			"wide": map[string]any{
				"output_files":    []string{"long${index}.mp4"},
				"ffmpeg_commands": []string{long},
				"for_each":        []map[string]string{{"k": "a"}, {"k": "b"}},
				"webhook_url":     e2e.HookURL + "/pipeline-cancel",
			},
			"after": map[string]any{
				"input_files":     map[string]string{"v": "step:long/long.mp4"},
				"output_files":    []string{"t.png"},
				"ffmpeg_commands": []string{"-i {{v}} -frames:v 1 {{t.png}}"},
				"webhook_url":     e2e.HookURL + "/pipeline-cancel",
			},
		},
		"webhook_url": e2e.HookURL + "/pipeline-cancel",
	})
	id := p["id"].(string)
	var jobIDs []string
	for _, s := range p["steps"].([]any) {
		for _, j := range e2e.StepJobs(s.(map[string]any)) {
			jobIDs = append(jobIDs, j["id"].(string))
		}
	}
	if len(jobIDs) != 4 {
		t.Fatalf("%d jobs, want 4", len(jobIDs))
	}
	testenv.Eventually(t, 2*time.Minute, "step long to run", func() bool {
		return e2e.StepJobs(e2e.PipelineStep(t, getPipeline(t, id), "long"))[0]["status"] == "running"
	})
	longID := e2e.StepJobs(e2e.PipelineStep(t, p, "long"))[0]["id"].(string)
	stored, err := e2e.Stack.Backends.Store.Job(context.Background(), longID)
	if err != nil || stored.NomadJobID == "" {
		t.Fatalf("the running job's record: %+v, %v", stored, err)
	}
	// Its processes are seen running (so that their absence below says something).
	testenv.Eventually(t, 30*time.Second, "the running job's processes", func() bool { return runnerRuns(stored.NomadJobID) })

	r := e2e.Call(t, "POST", "/api/pipelines/"+id+"/cancel", e2e.Stack.APIKey, nil)
	if r.Status != 200 {
		t.Fatalf("cancel: HTTP %d %s", r.Status, r.Body)
	}
	for _, s := range r.Data(t)["steps"].([]any) {
		for _, j := range e2e.StepJobs(s.(map[string]any)) {
			if j["status"] != "cancelled" {
				t.Fatalf("after the cancel, job %v of step %v is %v", j["id"], s.(map[string]any)["name"], j["status"])
			}
		}
	}
	p = waitPipeline(t, id)
	if p["status"] != "cancelled" {
		t.Fatalf("pipeline %v: %q", p["status"], p["error_message"])
	}

	// Nothing still runs: the running job's Nomad job is stopped and its
	// processes are gone.
	testenv.Eventually(t, 30*time.Second, "the Nomad job to stop", func() bool {
		j, _, err := e2e.Agent.Client.Jobs().Info(stored.NomadJobID, nil)
		return err == nil && j.Stop != nil && *j.Stop
	})
	testenv.Eventually(t, 30*time.Second, "the stopped job's processes to end", func() bool { return !runnerRuns(stored.NomadJobID) })
	for _, jid := range jobIDs {
		job := e2e.Call(t, "GET", "/api/jobs/"+jid, e2e.Stack.APIKey, nil).Data(t)
		if job["status"] != "cancelled" {
			t.Fatalf("job %s (%v) is %v", jid, job["pipeline"], job["status"])
		}
		if s, err := e2e.Stack.Backends.Store.Job(context.Background(), jid); err == nil && s.NomadJobID != "" && s.NomadJobID != stored.NomadJobID {
			nj := s.NomadJobID
			testenv.Eventually(t, 30*time.Second, "job "+jid+"'s processes to end", func() bool { return !runnerRuns(nj) })
		}
	}

	// Each job ended once: one webhook each, job.cancelled. Then the
	// pipeline's, once.
	for _, jid := range jobIDs {
		testenv.Eventually(t, time.Minute, "job "+jid+"'s webhook to be delivered", func() bool {
			w, _ := e2e.Call(t, "GET", "/api/jobs/"+jid, e2e.Stack.APIKey, nil).Data(t)["webhook"].(map[string]any)
			return w != nil && w["status"] == "delivered"
		})
		oneHook(t, jid, "job.cancelled")
	}
	if hook := oneHook(t, id, "pipeline.cancelled"); hook.Job["status"] != "cancelled" {
		t.Fatalf("pipeline webhook body %v", hook.Job)
	}
	if r := e2e.Call(t, "POST", "/api/pipelines/"+id+"/cancel", e2e.Stack.APIKey, nil); r.Status != 409 {
		t.Fatalf("second cancel: HTTP %d %s", r.Status, r.Body)
	}
}

// pipelineCLI runs the mediajobs binary against the stack (without t.Setenv,
// so that the test runs in parallel).
func pipelineCLI(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, e2e.RunnerBin, args...)
	cmd.Env = append(os.Environ(), "MEDIAJOBS_URL="+e2e.Stack.URL, "MEDIAJOBS_API_KEY="+e2e.Stack.APIKey)
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	if cmd.ProcessState == nil {
		t.Fatalf("%v: %v", args, err)
	}
	return cmd.ProcessState.ExitCode(), out.String(), errb.String()
}

// `mediajobs pipeline run FILE` with a local file: the file is uploaded, the
// steps are followed in plain lines, the outputs are saved by step; get, list
// and cancel work on the same pipeline.
func TestPipelineCLIRunWithALocalFile(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	dir := t.TempDir()
	e2e.WriteFile(t, filepath.Join(dir, "in.mp4"), string(e2e.Call(t, "GET", e2e.ClipURL, "", nil).Body))
	doc := filepath.Join(dir, "pipeline.json")
	e2e.WriteFile(t, doc, `{"steps": {
  "small": {"input_files": {"src": "in.mp4"}, "output_files": ["small.mp4"],
            "ffmpeg_commands": ["-i {{src}} -t 1 -vf scale=64:-2 -c:v libx264 -preset ultrafast -an {{small.mp4}}"]},
  "thumb": {"input_files": {"v": "step:small/small.mp4"}, "output_files": ["thumb.png"],
            "ffmpeg_commands": ["-i {{v}} -frames:v 1 -vf scale=32:-2 {{thumb.png}}"]}
}}`)
	out := filepath.Join(dir, "out")
	code, stdout, stderr := pipelineCLI(t, "pipeline", "run", doc, "-d", out)
	if code != 0 {
		t.Fatalf("pipeline run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"upload in.mp4", "step small succeeded", "step thumb succeeded", "saved " + filepath.Join(out, "thumb", "thumb.png")} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.ContainsAny(stdout, "\r\x1b") {
		t.Fatalf("bar garbage in piped output: %q", stdout)
	}
	if w := e2e.Probe(t, filepath.Join(out, "small", "small.mp4"))["streams"].([]any)[0].(map[string]any)["width"]; w != float64(64) {
		t.Fatalf("small.mp4 width %v", w)
	}
	if w := e2e.Probe(t, filepath.Join(out, "thumb", "thumb.png"))["streams"].([]any)[0].(map[string]any)["width"]; w != float64(32) {
		t.Fatalf("thumb.png width %v", w)
	}
	m := regexp.MustCompile(`pipeline (\S+) created`).FindStringSubmatch(stdout)
	if m == nil {
		t.Fatalf("no pipeline id in:\n%s", stdout)
	}
	id := m[1]
	// The source went up as a temporary file: the step's input is its link.
	small := e2e.Call(t, "GET", "/api/jobs/"+e2e.StepJobs(e2e.PipelineStep(t, getPipeline(t, id), "small"))[0]["id"].(string), e2e.Stack.APIKey, nil).Data(t)
	if src, _ := small["input_files"].(map[string]any)["src"].(string); !strings.HasPrefix(src, e2e.Stack.URL+"/files/") {
		t.Fatalf("small's input src is %q, not the uploaded file", src)
	}

	if code, stdout, _ = pipelineCLI(t, "pipeline", "get", id); code != 0 || !strings.Contains(stdout, `"status": "succeeded"`) {
		t.Fatalf("pipeline get: exit %d\n%s", code, stdout)
	}
	if code, stdout, _ = pipelineCLI(t, "pipeline", "list", "-limit", "100"); code != 0 || !regexp.MustCompile(id+`\s+succeeded`).MatchString(stdout) {
		t.Fatalf("pipeline list: exit %d\n%s", code, stdout)
	}
	if code, _, stderr = pipelineCLI(t, "pipeline", "cancel", id); code != 1 || !strings.Contains(stderr, "already succeeded") {
		t.Fatalf("pipeline cancel of an ended pipeline: exit %d\n%s", code, stderr)
	}
}

// On a terminal, `mediajobs pipeline run` draws a bar per step once it runs,
// redrawn in place, each at 100 % when its step succeeded; checked in a
// pseudo-terminal with the real binary.
func TestPipelineCLIOnATerminal(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	dir := t.TempDir()
	doc := filepath.Join(dir, "pipeline.json")
	e2e.WriteFile(t, doc, `{"steps": {
  "first": {"input_files": {"src": "`+e2e.ClipURL+`"}, "output_files": ["a.mp4"], "ffmpeg_commands": ["-re -i {{src}} -t 2 -c copy {{a.mp4}}"]},
  "second": {"input_files": {"v": "step:first/a.mp4"}, "output_files": ["b.mp4"], "ffmpeg_commands": ["-re -i {{v}} -c copy {{b.mp4}}"]}
}}`)
	cmd := exec.Command(e2e.RunnerBin, "pipeline", "run", doc, "-d", dir)
	cmd.Env = append(os.Environ(), "MEDIAJOBS_URL="+e2e.Stack.URL, "MEDIAJOBS_API_KEY="+e2e.Stack.APIKey)
	tty, err := pty.StartWithSize(cmd, &pty.Winsize{Rows: 24, Cols: 120})
	if err != nil {
		t.Fatal(err)
	}
	defer tty.Close()
	var screen bytes.Buffer
	copied := make(chan struct{})
	go func() { io.Copy(&screen, tty); close(copied) }()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err = <-done:
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("pipeline run on a terminal did not end:\n%q", screen.String())
	}
	tty.Close()
	<-copied
	out := screen.String()
	if err != nil {
		t.Fatalf("pipeline run on a terminal: %v\n%q", err, out)
	}
	if !strings.Contains(out, "\x1b[") || strings.Count(out, "step first") < 2 || strings.Count(out, "step second") < 2 || !strings.Contains(out, "100 %") || !strings.Contains(out, "succeeded") {
		t.Fatalf("terminal output has no advancing bar per step:\n%q", out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "second", "b.mp4")); err != nil || fi.Size() == 0 {
		t.Fatalf("output not saved: %v", err)
	}
}

// The README's walkthrough pipeline, run as a reader would paste it (bash,
// curl, python3) against the stack, with JOB a job that made small.mp4 as the
// walkthrough's does: the pipeline succeeds and its master playlist holds
// both renditions.
func TestPipelineREADMEWalkthrough(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	for _, tool := range []string{"bash", "curl", "python3", "sed"} {
		if _, err := exec.LookPath(tool); err != nil {
			testenv.Missing(t, tool)
		}
	}
	readme := e2e.ReadFile(t, filepath.Join("..", "..", "README.md"))
	at := strings.Index(readme, "cat > ladder.json")
	start := strings.LastIndex(readme[:max(at, 0)], "```sh\n")
	end := strings.Index(readme[max(at, 0):], "\n```\n")
	if at < 0 || start < 0 || end < 0 {
		t.Fatal("the README has no walkthrough pipeline (cat > ladder.json in a sh block)")
	}
	script := readme[start+len("```sh\n") : at+end+1]

	job := e2e.Call(t, "POST", "/api/ffmpeg?wait=true", e2e.Stack.APIKey, map[string]any{
		"input_files":     map[string]string{"clip": e2e.ClipURL},
		"output_files":    []string{"small.mp4"},
		"ffmpeg_commands": []string{"-i {{clip}} -vf scale=320:-2 -c:v libx264 -preset ultrafast -c:a aac {{small.mp4}}"},
	}).Data(t)
	if job["status"] != "succeeded" {
		t.Fatalf("the walkthrough's job: %v %v", job["status"], job["error_message"])
	}
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", script)
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), "KEY="+e2e.Stack.APIKey, "API="+e2e.Stack.URL+"/api", "JOB="+job["id"].(string))
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("the README's pipeline: %v\n%s\n%s", err, out, e2e.ExitStderr(err))
	}
	var got struct {
		Data struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	if json.Unmarshal(out, &got) != nil || got.Data.ID == "" {
		t.Fatalf("the README's pipeline printed %s", out)
	}
	p := waitPipeline(t, got.Data.ID)
	if p["status"] != "succeeded" {
		t.Fatalf("pipeline %v: %v\n%s", p["status"], p["error_message"], mustJSONString(p["steps"]))
	}
	master := e2e.StepJobs(e2e.PipelineStep(t, p, "hls"))[0]["output_files"].(map[string]any)["master.m3u8"].(string)
	probe, err := exec.Command(e2e.Ffprobe, "-v", "error", "-show_entries", "stream=height", "-of", "csv=p=0", master).Output()
	if err != nil || !strings.Contains(string(probe), "90") || !strings.Contains(string(probe), "180") {
		t.Fatalf("ffprobe of the master playlist: %v %q", err, probe)
	}
	if _, ok := e2e.StepJobs(e2e.PipelineStep(t, p, "thumbs"))[0]["output_files"].(map[string]any)["strip.jpg"]; !ok {
		t.Fatal("no thumbnail strip")
	}
}

// The MCP tool run_pipeline over stdio: a local file is uploaded once for the
// two steps that name it, the pipeline runs to its end, and download_dir
// saves every output by step (by item where items write the same name).
func TestPipelineMCPRunsALocalFile(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	s := mcpSession(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mp4")
	e2e.WriteFile(t, in, string(e2e.Call(t, "GET", e2e.ClipURL, "", nil).Body))
	out := filepath.Join(dir, "out")
	text, isErr := callTool(t, s, "run_pipeline", map[string]any{
		"steps": map[string]any{
			"scaled": map[string]any{
				"input_files":     map[string]string{"v": in},
				"output_files":    []string{"s.mp4"},
				"ffmpeg_commands": []string{"-i {{v}} -t 1 -vf scale=${item.w}:-2 -c:v libx264 -preset ultrafast -an {{s.mp4}}"},
				"for_each":        []map[string]string{{"w": "32"}, {"w": "48"}},
			},
			"frame": map[string]any{
				"input_files":     map[string]string{"v": in},
				"output_files":    []string{"f.png"},
				"ffmpeg_commands": []string{"-i {{v}} -frames:v 1 -vf scale=16:-2 {{f.png}}"},
			},
		},
		"download_dir": out,
	})
	var got struct {
		Pipeline struct {
			Status string `json:"status"`
			Steps  []struct {
				Name string `json:"name"`
				Jobs []struct {
					ID string `json:"id"`
				} `json:"jobs"`
			} `json:"steps"`
		} `json:"pipeline"`
		Downloaded map[string]string `json:"downloaded"`
	}
	if isErr || json.Unmarshal([]byte(text), &got) != nil || got.Pipeline.Status != "succeeded" {
		t.Fatalf("run_pipeline: error=%v %s", isErr, text)
	}
	for label, want := range map[string]string{"scaled[0]/s.mp4": "32", "scaled[1]/s.mp4": "48", "frame/f.png": "16"} {
		p := got.Downloaded[label]
		if p == "" {
			t.Fatalf("%s not downloaded: %v", label, got.Downloaded)
		}
		w, _ := exec.Command(e2e.Ffprobe, "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width", "-of", "csv=p=0", p).Output()
		if strings.TrimSpace(string(w)) != want {
			t.Fatalf("%s (%s) is %q wide, want %s", label, p, w, want)
		}
	}
	if got.Downloaded["scaled[1]/s.mp4"] != filepath.Join(out, "scaled", "1", "s.mp4") {
		t.Fatalf("downloaded as %v", got.Downloaded)
	}
	// One upload: both steps read the same temporary file.
	var inputs []string
	for _, st := range got.Pipeline.Steps {
		job := e2e.Call(t, "GET", "/api/jobs/"+st.Jobs[0].ID, e2e.Stack.APIKey, nil).Data(t)
		inputs = append(inputs, job["input_files"].(map[string]any)["v"].(string))
	}
	if len(inputs) != 2 || inputs[0] != inputs[1] || !strings.HasPrefix(inputs[0], e2e.Stack.URL+"/files/") {
		t.Fatalf("the steps' inputs %v: want one uploaded file", inputs)
	}
}

// Ctrl-C during `mediajobs pipeline run` without a terminal to ask on cancels
// the pipeline and exits 130.
func TestPipelineCLIRunInterrupted(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	dir := t.TempDir()
	doc := filepath.Join(dir, "pipeline.json")
	e2e.WriteFile(t, doc, `{"steps": {
  "long": {"output_files": ["a.mp4"], "ffmpeg_commands": ["-re -f lavfi -i testsrc=duration=60:size=64x48:rate=10 {{a.mp4}}"]},
  "after": {"input_files": {"v": "step:long/a.mp4"}, "output_files": ["b.png"], "ffmpeg_commands": ["-i {{v}} -frames:v 1 {{b.png}}"]}
}}`)
	cmd := exec.Command(e2e.RunnerBin, "pipeline", "run", doc)
	cmd.Env = append(os.Environ(), "MEDIAJOBS_URL="+e2e.Stack.URL, "MEDIAJOBS_API_KEY="+e2e.Stack.APIKey)
	out := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var id string
	testenv.Eventually(t, time.Minute, "the pipeline to be created", func() bool {
		if m := regexp.MustCompile(`pipeline (\S+) created`).FindStringSubmatch(out.String()); m != nil {
			id = m[1]
		}
		return id != ""
	})
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 || !strings.Contains(out.String(), "pipeline "+id+" cancelled") {
		t.Fatalf("interrupted pipeline run: %v\n%s", err, out.String())
	}
	if p := waitPipeline(t, id); p["status"] != "cancelled" {
		t.Fatalf("pipeline after Ctrl-C: %v\n%s", p["status"], out.String())
	}
}

// A step with "publish": false (docs/pipelines.md#intermediate-outputs): its
// output feeds the step after through storage, has no signed link in the
// pipeline's view nor in its job's (whose outputs say intermediate), cannot
// be taken by a job outside the pipeline, and is deleted from storage when
// the pipeline ends, while the published step's output stays.
func TestPipelineIntermediateOutputIsNotPublishedAndGoesAtTheEnd(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	p := createPipeline(t, map[string]any{"steps": map[string]any{
		"small": map[string]any{
			"input_files":     map[string]string{"src": e2e.ClipURL},
			"output_files":    []string{"small.mp4"},
			"ffmpeg_commands": []string{"-i {{src}} -t 1 -vf scale=48:-2 -c:v libx264 -preset ultrafast -an {{small.mp4}}"},
			"publish":         false,
		},
		"thumb": map[string]any{
			"input_files":     map[string]string{"v": "step:small/small.mp4"},
			"output_files":    []string{"thumb.png"},
			"ffmpeg_commands": []string{"-i {{v}} -frames:v 1 {{thumb.png}}"},
		},
	}})
	id := p["id"].(string)
	if s := e2e.PipelineStep(t, p, "small"); s["publish"] != false || e2e.PipelineStep(t, p, "thumb")["publish"] != true {
		t.Fatalf("steps' publish: small %v, thumb %v", s["publish"], e2e.PipelineStep(t, p, "thumb")["publish"])
	}
	p = waitPipeline(t, id)
	if p["status"] != "succeeded" {
		t.Fatalf("pipeline %v: %v\n%s", p["status"], p["error_message"], mustJSONString(p["steps"]))
	}

	// The step after read it: the thumbnail is small.mp4's 48 px frame.
	thumb := e2e.StepJobs(e2e.PipelineStep(t, p, "thumb"))[0]
	png, ok := thumb["output_files"].(map[string]any)["thumb.png"].(string)
	if !ok {
		t.Fatalf("thumb's outputs %v", thumb["output_files"])
	}
	if w := e2e.Probe(t, e2e.Download(t, png))["streams"].([]any)[0].(map[string]any)["width"]; w != float64(48) {
		t.Fatalf("thumb.png width %v, want 48 (small.mp4's)", w)
	}

	// No link to it anywhere; the job's outputs say what it was.
	small := e2e.StepJobs(e2e.PipelineStep(t, p, "small"))[0]
	smallID := small["id"].(string)
	if links := small["output_files"].(map[string]any); len(links) != 0 {
		t.Fatalf("the pipeline view links the intermediate output: %v", links)
	}
	job := e2e.Call(t, "GET", "/api/jobs/"+smallID, e2e.Stack.APIKey, nil).Data(t)
	out, _ := job["outputs"].(map[string]any)["small.mp4"].(map[string]any)
	if job["status"] != "succeeded" || len(job["output_files"].(map[string]any)) != 0 || out == nil || out["intermediate"] != true {
		t.Fatalf("the intermediate job's view: %v, output_files %v, outputs %v", job["status"], job["output_files"], job["outputs"])
	}
	if ref := job["pipeline"].(map[string]any); ref["id"] != id || ref["intermediate"] != true {
		t.Fatalf("the intermediate job's pipeline: %v", ref)
	}
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{
		"input_files":     map[string]string{"v": "job:" + smallID + "/small.mp4"},
		"output_files":    []string{"x.png"},
		"ffmpeg_commands": []string{"-i {{v}} -frames:v 1 {{x.png}}"},
	})
	if r.Status != 400 || !strings.Contains(string(r.Body), "intermediate") {
		t.Fatalf("a job outside the pipeline taking the intermediate output: HTTP %d %s", r.Status, r.Body)
	}

	// Gone from storage once the pipeline's end is recorded (finished_at: its
	// status shows before, derived from its jobs); the published output stays.
	testenv.Eventually(t, 2*time.Minute, "the pipeline's end to be recorded", func() bool { return getPipeline(t, id)["finished_at"] != nil })
	ctx := context.Background()
	key := func(jobID string) string {
		j, err := e2e.Stack.Backends.Store.Job(ctx, jobID)
		if err != nil || len(j.Outputs) != 1 || j.Outputs[0].Key == "" {
			t.Fatalf("job %s's record: %+v %v", jobID, j, err)
		}
		return j.Outputs[0].Key
	}
	stored := func(k string) bool {
		_, err := e2e.Stack.Backends.Blobs.ReadAll(ctx, k)
		return err == nil
	}
	smallKey, thumbKey := key(smallID), key(thumb["id"].(string))
	if stored(smallKey) || !stored(thumbKey) {
		t.Fatalf("after the end: small.mp4 stored %v (want deleted), thumb.png stored %v (want kept)", stored(smallKey), stored(thumbKey))
	}
}
