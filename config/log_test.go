package config

import (
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestLogBlock(t *testing.T) {
	c, err := Parse([]byte(""), "empty.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Format != "text" || c.Log.LevelV != slog.LevelInfo {
		t.Fatalf("default log %+v", c.Log)
	}
	c, err = Parse([]byte("log {\n  format = \"json\"\n  level = \"warn\"\n}\n"), "x.hcl")
	if err != nil {
		t.Fatal(err)
	}
	if c.Log.Format != "json" || c.Log.LevelV != slog.LevelWarn {
		t.Fatalf("log %+v", c.Log)
	}
	// Only the level: the format keeps its default.
	if c, err = Parse([]byte("log {\n  level = \"debug\"\n}\n"), "x.hcl"); err != nil || c.Log.Format != "text" || c.Log.LevelV != slog.LevelDebug {
		t.Fatalf("log %+v, %v", c.Log, err)
	}
	// A Config built in code gets the defaults.
	d := Default()
	d.Log = nil
	if err := d.Finish(); err != nil || d.Log.Format != "text" || d.Log.LevelV != slog.LevelInfo {
		t.Fatalf("log %+v, %v", d.Log, err)
	}
}

func TestShutdownTimeout(t *testing.T) {
	for _, tc := range []struct {
		src  string
		want time.Duration
	}{
		{"", 30 * time.Second}, // wait_limit 25s
		{"server {\n  wait_limit = \"60s\"\n}\n", 65 * time.Second},       // follows a longer wait_limit
		{"server {\n  shutdown_timeout = \"25s\"\n}\n", 25 * time.Second}, // = wait_limit is enough
		{"server {\n  wait_limit = \"5s\"\n  shutdown_timeout = \"10s\"\n}\n", 10 * time.Second},
	} {
		c, err := Parse([]byte(tc.src), "x.hcl")
		if err != nil || c.Server.ShutdownD != tc.want {
			t.Errorf("Parse(%q): shutdown %v, %v; want %v", tc.src, c.Server.ShutdownD, err, tc.want)
		}
	}
}

func TestLogAndShutdownErrorsPointAtFileAndLine(t *testing.T) {
	for _, tc := range []struct{ src, want string }{
		{"log {\n  format = \"logfmt\"\n}\n", `bad.hcl:2,3: Invalid log format`},
		{"log {\n  format = \"json\"\n  level = \"verbose\"\n}\n", `bad.hcl:3,3: Invalid log level`},
		{"log {\n  colour = true\n}\n", `bad.hcl:2,3: Unsupported argument`},
		{"server {\n  shutdown_timeout = \"10s\"\n}\n", `bad.hcl:2,3: Invalid shutdown_timeout`},
		{"server {\n  shutdown_timeout = \"soon\"\n}\n", `bad.hcl:2,3: Invalid duration`},
	} {
		_, err := Parse([]byte(tc.src), "bad.hcl")
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want %q", tc.src, err, tc.want)
		}
	}
}

// A config error on a line that holds a secret shows the line without it.
func TestConfigErrorHidesSecrets(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "c.hcl")
	os.WriteFile(p, []byte("server {\n  signing_secret = \"tooshort-s3cr3t\"\n}\n"), 0o600)
	_, err := Load(p)
	if err == nil || strings.Contains(err.Error(), "s3cr3t") || !strings.Contains(err.Error(), "signing_secret = <hidden>") {
		t.Fatalf("error: %v", err)
	}
}
