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
	// The example reads its signing secret from the environment: unset, the gateway
	// and dispatcher would refuse to start, and so does the check.
	t.Setenv("MEDIAJOBS_SIGNING_SECRET", "")
	if code := run(context.Background(), []string{"config", "check", "../../deploy/mediajobs.hcl"}, &out, &out); code == 0 || !strings.Contains(out.String(), "mediajobs.hcl:15,3: Missing signing_secret") {
		t.Fatalf("example config without a secret: exit %d\n%s", code, out.String())
	}
	out.Reset()
	if code := run(context.Background(), []string{"config", "check", "-for", "dev", "../../deploy/mediajobs.hcl"}, &out, &out); code != 0 {
		t.Fatalf("example config for dev (which makes its own secret): exit %d\n%s", code, out.String())
	}
	t.Setenv("MEDIAJOBS_SIGNING_SECRET", "0123456789abcdef0123456789abcdef")
	out.Reset()
	if code := run(context.Background(), []string{"config", "check", "../../deploy/mediajobs.hcl"}, &out, &out); code != 0 || !strings.Contains(out.String(), "pool nvidia") {
		t.Fatalf("example config: exit %d\n%s", code, out.String())
	}
	// The gateway refuses to start for the same reason, with the same words.
	t.Setenv("MEDIAJOBS_SIGNING_SECRET", "")
	out.Reset()
	if code := run(context.Background(), []string{"gateway", "-config", "../../deploy/mediajobs.hcl"}, &out, &out); code == 0 || !strings.Contains(out.String(), "mediajobs.hcl:15,3: Missing signing_secret") {
		t.Fatalf("gateway without a secret: exit %d\n%s", code, out.String())
	}
	bad := filepath.Join(t.TempDir(), "bad.hcl")
	os.WriteFile(bad, []byte("pool \"cpu\" {\n  driver = \"docker\"\n  image  = \"w:1\"\n  memory = 8\n}\n"), 0o600)
	out.Reset()
	if code := run(context.Background(), []string{"config", "check", bad}, &out, &out); code == 0 || !strings.Contains(out.String(), "bad.hcl:4,3: Invalid memory") || !strings.Contains(out.String(), "4 |   memory = 8") {
		t.Fatalf("broken pool: exit %d\n%s", code, out.String())
	}
	// A warm block on a docker pool is refused where it is written, naming the pool.
	os.WriteFile(bad, []byte("pool \"cpu\" {\n  driver = \"docker\"\n  image  = \"w:1\"\n  warm {\n    count = 2\n  }\n}\n"), 0o600)
	out.Reset()
	if code := run(context.Background(), []string{"config", "check", "-for", "dev", bad}, &out, &out); code == 0 || !strings.Contains(out.String(), "bad.hcl:4,3: Invalid warm block") || !strings.Contains(out.String(), `pool "cpu": warm pools run on raw_exec`) {
		t.Fatalf("docker warm pool: exit %d\n%s", code, out.String())
	}
}
