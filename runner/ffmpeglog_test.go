package runner

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"golang.org/x/sys/unix"
)

// The error message takes ffmpeg's error lines (and the rest of their message,
// and untagged lines such as the sandbox's), never its info or warning lines.
func TestErrorLinesKeepOnlyErrors(t *testing.T) {
	var got bytes.Buffer
	e := &errorLines{dst: &got}
	for _, chunk := range []string{
		"bwrap: Can't mount proc\n",
		"[info] Input #0, mov, from 'inputs/in':\n[info]   Duration: 00:00:03.00\n  continued info\n",
		"[warning] something odd\n[mp4 @ 0x55d1c0a0] [error] Could not find tag for codec\n",
		"[fatal] Stream map '0:s' matches no streams.\nTo ignore this, add a trailing '?' to the map.\n",
		"[info] tail without newline",
	} {
		e.Write([]byte(chunk))
	}
	e.Flush()
	want := "bwrap: Can't mount proc\n[mp4 @ 0x55d1c0a0] Could not find tag for codec\nStream map '0:s' matches no streams.\nTo ignore this, add a trailing '?' to the map.\n"
	if got.String() != want {
		t.Fatalf("error lines:\n%q\nwant\n%q", got.String(), want)
	}
}

// A log longer than logCap keeps its first and last halves and says what it left out.
func TestLogIsCapped(t *testing.T) {
	dir := t.TempDir()
	l, err := createLog(dir, 3)
	if err != nil {
		t.Fatal(err)
	}
	line := strings.Repeat("x", 99) + "\n"
	total := 0
	for total < 3*logCap {
		l.Write([]byte(line))
		total += len(line)
	}
	l.Write([]byte("THE END\n"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "logs", "3.log"))
	if err != nil {
		t.Fatal(err)
	}
	if len(b) > logCap+200 || !strings.HasSuffix(string(b), "THE END\n") || !strings.Contains(string(b), "bytes of this log were left out") {
		t.Fatalf("capped log: %d bytes, ends %q", len(b), b[len(b)-20:])
	}
	if n, ok := mj.LogIndex(logPath(3)); !ok || n != 3 {
		t.Fatal("logPath does not parse back")
	}
}

// The job's directory is ffmpeg's: a link or a FIFO put where a log goes is never
// written through (the runner writes logs from outside the sandbox), and the job
// runs on without that log.
func TestLogsFollowNoLink(t *testing.T) {
	outside := filepath.Join(t.TempDir(), "host-file")
	if err := os.WriteFile(outside, []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	os.MkdirAll(filepath.Join(dir, "logs"), 0o755)
	if err := os.Symlink(outside, filepath.Join(dir, "logs", "1.log")); err != nil {
		t.Fatal(err)
	}
	if _, err := createLog(dir, 1); err == nil {
		t.Fatal("a log was opened through a link")
	}
	if err := unix.Mkfifo(filepath.Join(dir, "logs", "2.log"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := createLog(dir, 2); err == nil {
		t.Fatal("a log was opened on a FIFO")
	}
	// A link to the logs directory itself leads out of the job: refused too.
	dir2 := t.TempDir()
	if err := os.Symlink(filepath.Dir(outside), filepath.Join(dir2, "logs")); err != nil {
		t.Fatal(err)
	}
	if _, err := createLog(dir2, 1); err == nil {
		t.Fatal("a log was opened through a linked directory")
	}
	if b, _ := os.ReadFile(outside); string(b) != "untouched" {
		t.Fatalf("the file outside the job was written: %q", b)
	}
}
