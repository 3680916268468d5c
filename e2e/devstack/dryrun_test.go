package devstack

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/e2e"
)

// `mediajobs run --dry-run` checks a job on the running stack without uploading
// or storing anything: a good job prints the command as the worker runs it; a
// refused one exits 1 with the service's error.
func TestCLIDryRun(t *testing.T) {
	e2e.NeedStack(t)
	in := filepath.Join(t.TempDir(), "in.mp4")
	e2e.WriteFile(t, in, "not uploaded")
	count := func() float64 {
		return e2e.Call(t, "GET", "/api/jobs?limit=1", e2e.Stack.APIKey, nil).JSON(t)["pagingParams"].(map[string]any)["total"].(float64)
	}
	before := count()

	code, stdout, stderr := cli(t, "run", "--dry-run", "-i", "video="+in, "-o", "small.mp4", "--",
		"-i", "inputs/video", "-vf", "scale=160:-2", "-metadata", "title=two words", "outputs/small.mp4")
	if code != 0 {
		t.Fatalf("dry run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	for _, want := range []string{"would be accepted: machine cpu (Nomad job mediajobs-cpu, raw_exec driver",
		"command 1: ffmpeg -hide_banner -nostdin -y", "-i inputs/video -vf scale=160:-2 -metadata 'title=two words' outputs/small.mp4"} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("dry run output lacks %q:\n%s", want, stdout)
		}
	}

	code, stdout, stderr = cli(t, "run", "--dry-run", "-o", "small.mp4", "--", "-i", "/etc/passwd", "outputs/small.mp4")
	if code != 1 || !strings.Contains(stdout+stderr, "/etc/passwd") {
		t.Fatalf("refused dry run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if after := count(); after != before {
		t.Fatalf("dry runs stored jobs: %v -> %v", before, after)
	}
}
