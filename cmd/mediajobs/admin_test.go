package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/testenv"
)

// admin runs `mediajobs ARGS -config cfg` in-process: its exit code and stdout,
// with stderr checked to hold no secret.
func admin(t *testing.T, cfg string, args ...string) (int, string) {
	t.Helper()
	var out, errs bytes.Buffer
	code := run(context.Background(), append(args, "-config", cfg), &out, &errs)
	if s := regexp.MustCompile(`mj_[A-Za-z0-9_]{16,}`).FindString(errs.String()); s != "" {
		t.Fatalf("%v: a secret went to stderr: %s", args, errs.String())
	}
	return code, out.String() + errs.String()
}

// TestAdminCommandsWithoutEtcd: nothing listening: a clear error, not a second
// etcd server.
func TestAdminCommandsWithoutEtcd(t *testing.T) {
	dataDir := filepath.Join(t.TempDir(), "etcd")
	cfg := filepath.Join(t.TempDir(), "admin.hcl")
	os.WriteFile(cfg, []byte(fmt.Sprintf("etcd {\n  listen_client = %q\n  data_dir = %q\n  dial_timeout = \"1s\"\n}\n", testenv.FreeAddr(t), dataDir)), 0o600)
	for _, args := range [][]string{{"accounts", "list"}, {"keys", "create", "-account", "acme"}} {
		code, out := admin(t, cfg, args...)
		if code == 0 || !strings.Contains(out, "cannot reach etcd") || !strings.Contains(out, "mediajobs dev") || !strings.Contains(out, "etcd.endpoints") {
			t.Fatalf("%v without etcd: exit %d\n%s", args, code, out)
		}
	}
	if _, err := os.Stat(dataDir); !os.IsNotExist(err) {
		t.Fatal("an admin command started an embedded etcd")
	}
}
