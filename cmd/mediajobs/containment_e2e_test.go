package main

import (
	"strings"
	"testing"
)

// TestHostileCommandsAreRefusedAtCreate: the attacks, as a user sends
// them to `make run`, get a 400 naming what is refused, and no job is stored.
// (That the sandbox holds when such a command gets through anyway is proven in
// runner/escape_test.go.)
func TestHostileCommandsAreRefusedAtCreate(t *testing.T) {
	needStack(t)
	before := call(t, "GET", "/api/jobs?limit=1", stack.APIKey, nil).json(t)["pagingParams"].(map[string]any)["total"]
	for cmd, want := range map[string]string{
		"-allowed_extensions ALL -allowed_segment_extensions ALL -extension_picky 0 -i {{pl}} -c copy -f u8 {{out.raw}}": "-allowed_extensions",
		"-enable_drefs 1 -use_absolute_path 1 -i {{pl}} -c copy {{out.raw}}":                                             "-enable_drefs",
		"-f lavfi -i testsrc=d=1 -fpre {{pl}} -f segment {{out.raw}}":                                                    "-fpre",
		"-f lavfi -i testsrc=d=1 -hls_key_info_file {{pl}} -f hls {{out.raw}}":                                           "-hls_key_info_file",
		"-f lavfi -i testsrc=d=1 -vf 'sendcmd=\nf={{pl}}' {{out.raw}}":                                                   "sendcmd",
		"-f lavfi -i testsrc=d=1 -vf zmq -f null -":                                                                      "zmq",
		"-f lavfi -i testsrc=d=1 -nosuchoption 1 {{out.raw}}":                                                            "-nosuchoption",
		"-f v4l2 -i {{pl}} {{out.raw}}":                                                                                  "v4l2",
		"-i {{pl}} -vstats_file /tmp/x {{out.raw}}":                                                                      "/tmp/x",
	} {
		r := call(t, "POST", "/api/ffmpeg", stack.APIKey, map[string]any{
			"input_files": map[string]string{"pl": clipURL}, "output_files": []string{"out.raw"}, "ffmpeg_commands": []string{cmd}})
		if r.Status != 400 || r.json(t)["errorCode"] != "validationError" || !strings.Contains(string(r.Body), want) {
			t.Errorf("%q: HTTP %d %s, want a 400 naming %s", cmd, r.Status, r.Body, want)
		}
	}
	if after := call(t, "GET", "/api/jobs?limit=1", stack.APIKey, nil).json(t)["pagingParams"].(map[string]any)["total"]; after != before {
		t.Errorf("refused requests stored jobs: %v before, %v after", before, after)
	}
}
