package devstack

import (
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/e2e"
)

// TestHostileCommandsAreRefusedAtCreate: the attacks, as a user sends
// them to `make run`, get a 400 naming what is refused, and no job is stored.
// (That the sandbox holds when such a command gets through anyway is proven in
// runner/escape_test.go.)
func TestHostileCommandsAreRefusedAtCreate(t *testing.T) {
	e2e.NeedStack(t)
	before := e2e.Call(t, "GET", "/api/jobs?limit=1", e2e.Stack.APIKey, nil).JSON(t)["pagingParams"].(map[string]any)["total"]
	for cmd, want := range map[string]string{
		// What the sandbox contains runs (concat lists with -safe 0, playlists with
		// their extension checks off, -enable_drefs, sendcmd f=: docs/threat-model.md);
		// what it cannot contain or what cannot work in it is refused.
		"-f lavfi -i testsrc=d=1 -fpre {{pl}} -f segment {{out.raw}}":       "-fpre",
		"-f lavfi -i testsrc=d=1 -progress pipe:1 {{out.raw}}":              "-progress",
		"-f lavfi -i testsrc=d=1 -vf frei0r=distort0r {{out.raw}}":          "frei0r",
		"-protocol_whitelist file,http,tcp -i {{pl}} -c copy {{out.raw}}":   "-protocol_whitelist",
		"-f lavfi -i testsrc=d=1 -filter_complex_script {{pl}} {{out.raw}}": "-filter_complex_script",
		"-f lavfi -i testsrc=d=1 -vf zmq -f null -":                         "zmq",
		"-f v4l2 -i {{pl}} {{out.raw}}":                                     "v4l2",
		"-i {{pl}} -vstats_file /tmp/x {{out.raw}}":                         "/tmp/x",
	} {
		r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{
			"input_files": map[string]string{"pl": e2e.ClipURL}, "output_files": []string{"out.raw"}, "ffmpeg_commands": []string{cmd}})
		if r.Status != 400 || r.JSON(t)["errorCode"] != "validationError" || !strings.Contains(string(r.Body), want) {
			t.Errorf("%q: HTTP %d %s, want a 400 naming %s", cmd, r.Status, r.Body, want)
		}
	}
	if after := e2e.Call(t, "GET", "/api/jobs?limit=1", e2e.Stack.APIKey, nil).JSON(t)["pagingParams"].(map[string]any)["total"]; after != before {
		t.Errorf("refused requests stored jobs: %v before, %v after", before, after)
	}
}
