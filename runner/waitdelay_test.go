package runner

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/testenv"
)

// stallingLog is a task log whose reader stalls: the first write blocks for
// stall, as a write to Nomad's log fifo does while a loaded node's log
// shipper is starved.
type stallingLog struct {
	once  sync.Once
	stall time.Duration
}

func (l *stallingLog) Write(p []byte) (int, error) {
	l.once.Do(func() { time.Sleep(l.stall) }) // the stall modelled, not a wait for a condition
	return len(p), nil
}

// A command that ffmpeg ended with 0 succeeds even when the copy of its
// stderr stalls past WaitDelay (Wait answers exec.ErrWaitDelay then): a job
// failed with "could not start ffmpeg: exec: WaitDelay expired before I/O
// complete" on a CI machine beside two CPU hogs.
func TestCommandSucceedsWhenItsLogStalls(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "outputs"), 0o755); err != nil {
		t.Fatal(err)
	}
	// ffmpeg's first stderr line stalls the copy for 3 s, while ffmpeg ends
	// in a fraction of that: the copy outlives ffmpeg by more than waitDelay.
	r := &Runner{FFmpeg: ff, WorkDir: dir, Log: &stallingLog{stall: 3 * time.Second}, waitDelay: 100 * time.Millisecond}
	err := r.ffmpeg(context.Background(), []string{"-f", "lavfi", "-i", "color=c=red:s=16x16:d=0.2", "-frames:v", "1", "outputs/o.png"}, &reporter{now: time.Now}, 0, io.Discard)
	if err != nil {
		t.Fatalf("ffmpeg exited 0, the command failed: %v", err)
	}
	if fi, err := os.Stat(filepath.Join(dir, "outputs", "o.png")); err != nil || fi.Size() == 0 {
		t.Fatalf("output: %v", err)
	}
}
