package config

import (
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
)

// The settings that size a job default to mediajobs' defaults and are refused at
// load outside 1..their ceiling, saying why, with file:line.
func TestJobBoundSettings(t *testing.T) {
	c, err := Parse([]byte(""), "empty.hcl")
	if err != nil {
		t.Fatal(err)
	}
	s := c.Server
	if s.MaxCommandBytes != 65536 || s.MaxInputs != 50 || s.MaxOutputs != 50 || s.MaxOutputFiles != 1000 || s.MaxCommands != 20 {
		t.Fatalf("defaults: %+v", s)
	}
	// Built in code: unset is the default.
	code := Default()
	code.Server = &Server{Listen: "127.0.0.1:1", WaitLimit: "1s", RequestTimeout: "1s", TmpFileTTL: "1h", UploadTimeout: "1h"}
	if err := code.Finish(); err != nil || code.Server.MaxCommandBytes != mj.DefaultMaxCommandBytes || code.Server.MaxInputs != mj.DefaultMaxInputs {
		t.Fatalf("code-built: %v %+v", err, code.Server)
	}
	ok := "server {\n  max_command_bytes = 98304\n  max_inputs = 50\n  max_outputs = 100\n  max_output_files = 1000\n  max_commands = 1000\n}\n"
	if _, err := Parse([]byte(ok), "ok.hcl"); err != nil {
		t.Fatalf("the ceilings: %v", err)
	}
	for _, bad := range []string{"max_command_bytes = 98305", "max_command_bytes = 0", "max_inputs = 51", "max_inputs = -1", "max_outputs = 101", "max_output_files = 1001", "max_output_files = 0", "max_commands = 1001"} {
		_, err := Parse([]byte("server {\n  "+bad+"\n}\n"), "bad.hcl")
		key := strings.Fields(bad)[0]
		if err == nil || !strings.Contains(err.Error(), "bad.hcl:2,3: Invalid "+key) || !strings.Contains(err.Error(), "etcd") {
			t.Errorf("%s: %v", bad, err)
		}
	}
}
