package devstack

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	"github.com/creack/pty"
	"github.com/mediajobs/mediajobs/testenv"
)

// cli runs the binary's commands in-process, as a shell would, against the e2e.Stack.
func cli(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	t.Setenv("MEDIAJOBS_URL", e2e.Stack.URL)
	t.Setenv("MEDIAJOBS_API_KEY", e2e.Stack.APIKey)
	code = e2e.Run(ctx, args, &out, &errb)
	return code, out.String(), errb.String()
}

// `mediajobs run` with a local file: uploads it, runs the command, downloads the
// output; plain lines when not on a terminal; -json; a failed job exits 1 with
// ffmpeg's error; `jobs` and `upload` work on the same e2e.Stack.
func TestCLIRun(t *testing.T) {
	e2e.NeedStack(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mp4")
	e2e.WriteFile(t, in, string(e2e.Call(t, "GET", e2e.ClipURL, "", nil).Body))
	outDir := filepath.Join(dir, "out")
	code, stdout, stderr := cli(t, "run", "-i", "video="+in, "-o", "small.mp4", "-d", outDir, "--",
		"-i", "inputs/video", "-vf", "scale=160:-2", "-metadata", "title=a title with spaces", "outputs/small.mp4")
	if code != 0 {
		t.Fatalf("run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	fi, err := os.Stat(filepath.Join(outDir, "small.mp4"))
	if err != nil || fi.Size() == 0 {
		t.Fatalf("output not saved: %v\n%s", err, stdout)
	}
	if strings.ContainsAny(stdout, "\r\x1b") {
		t.Fatalf("bar garbage in piped output: %q", stdout)
	}
	for _, want := range []string{"upload video", "created", "succeeded", "saved " + filepath.Join(outDir, "small.mp4")} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("run output lacks %q:\n%s", want, stdout)
		}
	}
	probe, _ := exec.Command(e2e.Ffprobe, "-v", "error", "-show_entries", "format_tags=title:stream=width", "-of", "default=nw=1", filepath.Join(outDir, "small.mp4")).Output()
	if !strings.Contains(string(probe), "width=160") || !strings.Contains(string(probe), "a title with spaces") {
		t.Fatalf("the arguments did not reach ffmpeg as given: %s", probe)
	}

	// -json: the final job on stdout, progress on stderr.
	code, stdout, stderr = cli(t, "run", "-json", "-i", "video="+in, "-o", "a.wav", "-d", outDir, "--", "-i", "{{video}}", "-vn", "{{a.wav}}")
	var job map[string]any
	if code != 0 || json.Unmarshal([]byte(stdout), &job) != nil || job["status"] != "succeeded" {
		t.Fatalf("run -json: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	id := job["id"].(string)

	// A failing command: exit 1, ffmpeg's error, and its full log through `jobs logs`.
	code, stdout, stderr = cli(t, "run", "-i", "video="+in, "-o", "x.mp4", "-d", outDir, "--", "-i", "inputs/video", "-map", "0:s", "outputs/x.mp4")
	if code != 1 || !strings.Contains(stderr, "matches no streams") {
		t.Fatalf("failing run: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	failed := strings.Fields(stderr[strings.Index(stderr, "job ")+4:])[0]
	if code, stdout, _ = cli(t, "jobs", "logs", failed); code != 0 || !strings.Contains(stdout, "[info]") || !strings.Contains(stdout, "matches no streams") {
		t.Fatalf("jobs logs %s: exit %d\n%s", failed, code, stdout)
	}
	// Usage errors exit 2.
	if code, _, stderr = cli(t, "run", "-o", "x.mp4"); code != 2 || !strings.Contains(stderr, "after --") {
		t.Fatalf("run without ffmpeg arguments: exit %d %s", code, stderr)
	}

	if code, stdout, _ = cli(t, "jobs", "list", "-limit", "5"); code != 0 || !strings.Contains(stdout, id) || !strings.HasPrefix(stdout, "ID") {
		t.Fatalf("jobs list: exit %d\n%s", code, stdout)
	}
	if code, stdout, _ = cli(t, "jobs", "get", id); code != 0 || !strings.Contains(stdout, `"status": "succeeded"`) {
		t.Fatalf("jobs get: exit %d\n%s", code, stdout)
	}
	if code, stdout, _ = cli(t, "jobs", "wait", id); code != 0 || !strings.Contains(stdout, "succeeded") {
		t.Fatalf("jobs wait: exit %d\n%s", code, stdout)
	}
	if code, stdout, stderr = cli(t, "upload", in); code != 0 || !strings.HasPrefix(stdout, "http") || strings.Count(stdout, "\n") != 1 {
		t.Fatalf("upload: exit %d\n%s\n%s", code, stdout, stderr)
	}
}

// On a terminal, `mediajobs run` draws bars that advance (mpb redraws them in
// place); checked in a pseudo-terminal with the real binary.
func TestCLIRunOnATerminal(t *testing.T) {
	e2e.NeedStack(t)
	dir := t.TempDir()
	in := filepath.Join(dir, "in.mp4")
	e2e.WriteFile(t, in, string(e2e.Call(t, "GET", e2e.ClipURL, "", nil).Body))
	cmd := exec.Command(e2e.RunnerBin, "run", "-i", "video="+in, "-o", "out.mp4", "-d", dir, "--", "-re", "-i", "inputs/video", "-c", "copy", "outputs/out.mp4")
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
	case <-time.After(2 * time.Minute):
		cmd.Process.Kill()
		t.Fatalf("run on a terminal did not end:\n%q", screen.String())
	}
	tty.Close()
	<-copied
	out := screen.String()
	if err != nil {
		t.Fatalf("run on a terminal: %v\n%q", err, out)
	}
	// Redrawn in place (cursor movements), the upload and the job each at 100%.
	if !strings.Contains(out, "\x1b[") || strings.Count(out, "upload video") < 2 || !strings.Contains(out, "100 %") || !strings.Contains(out, "succeeded") {
		t.Fatalf("terminal output has no advancing bars:\n%q", out)
	}
	if fi, err := os.Stat(filepath.Join(dir, "out.mp4")); err != nil || fi.Size() == 0 {
		t.Fatalf("output not saved: %v", err)
	}
}

// Ctrl-C during `mediajobs run` without a terminal to ask on cancels the job and
// exits 130.
func TestCLIRunInterrupted(t *testing.T) {
	e2e.NeedStack(t)
	dir := t.TempDir()
	cmd := exec.Command(e2e.RunnerBin, "run", "-o", "out.mp4", "-d", dir, "--", "-re", "-f", "lavfi", "-i", "testsrc=duration=60", "outputs/out.mp4")
	cmd.Env = append(os.Environ(), "MEDIAJOBS_URL="+e2e.Stack.URL, "MEDIAJOBS_API_KEY="+e2e.Stack.APIKey)
	out := &testenv.LogBuffer{} // written by exec's copier as the test reads it
	cmd.Stdout, cmd.Stderr = out, out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer cmd.Process.Kill()
	var id string
	deadline := time.Now().Add(time.Minute)
	for id == "" {
		if time.Now().After(deadline) {
			t.Fatalf("no job created:\n%s", out.String())
		}
		if i := strings.Index(out.String(), " created"); i > 0 {
			f := strings.Fields(out.String()[:i])
			id = f[len(f)-1]
		}
		time.Sleep(50 * time.Millisecond)
	}
	cmd.Process.Signal(os.Interrupt)
	err := cmd.Wait()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 130 {
		t.Fatalf("interrupted run: %v\n%s", err, out.String())
	}
	if j := e2e.Call(t, "GET", e2e.Stack.URL+"/api/jobs/"+id, e2e.Stack.APIKey, nil).Data(t); j["status"] != "cancelled" {
		t.Fatalf("job after Ctrl-C: %v\n%s", j["status"], out.String())
	}
}
