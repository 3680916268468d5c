package testenv_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/mediajobs/mediajobs/testenv"
)

// tierProbe names what TestTierProbe needs, when this binary runs it for
// TestTiers; unset, the probe does nothing.
const tierProbe = "MEDIAJOBS_TIER_PROBE"

func TestTierProbe(t *testing.T) {
	switch os.Getenv(tierProbe) {
	case "":
		return
	case "bwrap", "ffmpeg":
		testenv.Binary(t, os.Getenv(tierProbe))
	case "nomad":
		testenv.NomadBinary(t)
	case "minio":
		testenv.MinIOBinary(t)
	case "long":
		testenv.Long(t, "a slow test")
	}
	t.Log("PROBE RAN")
}

// TestTiers: under -short a long-tier need skips the test even when installed;
// a missing short-tier one fails it only with CI set and outside -short.
func TestTiers(t *testing.T) {
	if os.Getenv(tierProbe) != "" {
		return
	}
	bin := t.TempDir() // PATH: a bwrap and nothing else
	if err := os.WriteFile(filepath.Join(bin, "bwrap"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	fake := filepath.Join(bin, "bwrap")
	for _, c := range []struct {
		need  string
		short bool
		ci    bool
		want  string // ran, skip or fail
	}{
		{"bwrap", false, true, "ran"},
		{"bwrap", true, false, "skip"},
		{"bwrap", true, true, "skip"},
		{"nomad", true, true, "skip"}, // NOMAD_BIN is set: not even looked up
		{"minio", true, true, "skip"},
		{"nomad", false, true, "ran"},
		{"long", false, true, "ran"},
		{"long", true, true, "skip"},
		{"ffmpeg", false, false, "skip"}, // missing
		{"ffmpeg", false, true, "fail"},
		{"ffmpeg", true, true, "skip"}, // the short tier needs Go alone
	} {
		args := []string{"-test.run=^TestTierProbe$", "-test.v", "-test.count=1"}
		if c.short {
			args = append(args, "-test.short")
		}
		cmd := exec.Command(os.Args[0], args...)
		cmd.Env = append(os.Environ(), tierProbe+"="+c.need, "PATH="+bin, "NOMAD_BIN="+fake, "MINIO_BIN="+fake, "CI=")
		if c.ci {
			cmd.Env = append(cmd.Env, "CI=true")
		}
		out, err := cmd.CombinedOutput()
		got := "ran"
		switch {
		case err != nil:
			got = "fail"
		case strings.Contains(string(out), "--- SKIP"):
			got = "skip"
		case !strings.Contains(string(out), "PROBE RAN"):
			got = "nothing"
		}
		if got != c.want {
			t.Errorf("%s short=%v CI=%v: %s, want %s\n%s", c.need, c.short, c.ci, got, c.want, out)
		}
	}
}
