package sandbox

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/testenv"
)

// TestCommandsReleaseDeviceCopiesOnExit: commands run one after the other
// under one context that lasts (a chunked job's probes, a job's whole run)
// leave no directory of device copies once each has exited and was released,
// nor a registration on the context; the context's end is only a backstop.
func TestCommandsReleaseDeviceCopiesOnExit(t *testing.T) {
	testenv.Binary(t, "bwrap")
	fakeGPU(t)
	base := t.TempDir()
	copiesIn(t, base)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	b := &Bwrap{GPU: true}
	for i := range 6 {
		mk := b.Command
		if i%2 == 1 {
			mk = b.ReadOnlyCommand
		}
		cmd, err := mk(ctx, t.TempDir(), "bash", []string{"-c", "echo x > /dev/null && echo x > /dev/nvidia0 && echo ran"}, Env())
		if err != nil {
			t.Fatal(err)
		}
		if d := copyDirs(t, base); len(d) != 1 {
			t.Fatalf("command %d: want its directory of copies, have %v", i, d)
		}
		out, err := cmd.CombinedOutput()
		if err != nil || string(out) != "ran\n" {
			t.Fatalf("command %d: %v: %s", i, err, out)
		}
		if err := Release(cmd); err != nil {
			t.Fatal(err)
		}
		if d := copyDirs(t, base); len(d) != 0 {
			t.Fatalf("command %d exited and was released, its context still live: left %v", i, d)
		}
		if err := Release(cmd); err != nil { // again: nothing
			t.Fatal(err)
		}
	}
	heldMu.Lock()
	n := len(held)
	heldMu.Unlock()
	if n != 0 {
		t.Fatalf("%d commands still held after their release", n)
	}

	// A command never released: its context's end removes its copies.
	if _, err := b.Command(ctx, t.TempDir(), "true", nil, Env()); err != nil {
		t.Fatal(err)
	}
	if d := copyDirs(t, base); len(d) != 1 {
		t.Fatalf("want the unreleased command's copies, have %v", d)
	}
	cancel()
	waitGone(t, base)

	if err := Release(exec.Command("true")); err != nil { // not the sandbox's
		t.Fatal(err)
	}
}

// TestRemoveStaleCopies: at a runner's start, the copies' directories in its
// $TMPDIR of a runner that is gone, or a day old, are removed; those of a
// running process (this one, or pid 1) and anything else are kept.
func TestRemoveStaleCopies(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	gone := exec.Command("true")
	if err := gone.Run(); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, age time.Duration) string {
		p := filepath.Join(tmp, name)
		if err := os.Mkdir(p, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(p, "null"), nil, 0o600); err != nil {
			t.Fatal(err)
		}
		at := time.Now().Add(-age)
		if err := os.Chtimes(p, at, at); err != nil {
			t.Fatal(err)
		}
		return p
	}
	dead := mk(fmt.Sprintf("%s%d-123", copyPrefix, gone.Process.Pid), 0)
	old := mk(copyPrefix+"456", 25*time.Hour) // the naming before the pid
	oldLive := mk(copyPrefix+"1-789", 25*time.Hour)
	keep := []string{
		mk(fmt.Sprintf("%s%d-1", copyPrefix, os.Getpid()), 0),
		mk(copyPrefix+"1-2", 0),
		mk(copyPrefix+"789", 0),
		mk("other-dir", 48*time.Hour),
	}
	file := filepath.Join(tmp, copyPrefix+"0-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	keep = append(keep, file)
	removed, err := RemoveStaleCopies()
	if err != nil {
		t.Fatal(err)
	}
	want := []string{dead, old, oldLive}
	sort.Strings(want)
	if got := strings.Join(removed, " "); got != strings.Join(want, " ") {
		t.Errorf("removed %s, want %v", got, want)
	}
	for _, p := range []string{dead, old, oldLive} {
		if _, err := os.Lstat(p); !os.IsNotExist(err) {
			t.Errorf("%s is still there: %v", p, err)
		}
	}
	for _, p := range keep {
		if _, err := os.Lstat(p); err != nil {
			t.Errorf("%s was removed: %v", p, err)
		}
	}
}
