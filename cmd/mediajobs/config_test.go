package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestConfigCheck(t *testing.T) {
	var out bytes.Buffer
	if code := run(context.Background(), []string{"config", "check", "../../deploy/mediajobs.hcl"}, &out, &out); code != 0 || !strings.Contains(out.String(), "pool nvidia") {
		t.Fatalf("example config: exit %d\n%s", code, out.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.hcl")
	os.WriteFile(bad, []byte("pool \"cpu\" {\n  driver = \"docker\"\n  image  = \"w:1\"\n  memory = 8\n}\n"), 0o600)
	out.Reset()
	if code := run(context.Background(), []string{"config", "check", bad}, &out, &out); code == 0 || !strings.Contains(out.String(), "bad.hcl:4,3: Invalid memory") || !strings.Contains(out.String(), "4 |   memory = 8") {
		t.Fatalf("broken pool: exit %d\n%s", code, out.String())
	}
}
