package runner

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
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
