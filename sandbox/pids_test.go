package sandbox

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// TestPidsCapsACommand: a command started in a job's pids cgroup, and all it
// starts, stay under the cap; the cgroup is gone after Close.
func TestPidsCapsACommand(t *testing.T) {
	const max = 20
	p, err := NewPids(max)
	if err != nil {
		t.Fatalf("NewPids: %v", err)
	}
	t.Cleanup(func() { p.Close() }) // after a failure too; a second Close is no error
	dir := t.TempDir()
	// Each shell starts the next and waits for it: count is how many were alive at once.
	script := filepath.Join(dir, "chain")
	os.WriteFile(script, []byte("#!/bin/sh\nread n < count; n=$((n+1)); echo $n > count\n[ $n -lt 100 ] && \"$0\"\nexit 0\n"), 0o755)
	os.WriteFile(filepath.Join(dir, "count"), []byte("0\n"), 0o644)
	cmd := exec.Command(script)
	cmd.Dir = dir
	p.wrap(cmd)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("run: %v %s", err, out)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "count"))
	if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); n == 0 || n > max {
		t.Fatalf("%s processes alive at once under a cap of %d", strings.TrimSpace(string(b)), max)
	}
	if p.Refused() == 0 {
		t.Fatal("the cgroup counted no refused process")
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(p.Dir()); !os.IsNotExist(err) {
		t.Fatalf("the cgroup %s is left: %v", p.Dir(), err)
	}
}
