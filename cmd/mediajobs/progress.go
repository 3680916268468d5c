package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"sync"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
	"github.com/vbauerster/mpb/v8"
	"github.com/vbauerster/mpb/v8/decor"
	"golang.org/x/term"
)

// progressUI shows what a client command is doing: live bars (vbauerster/mpb) on a
// terminal, plain lines anywhere else, so that a pipe or a log file gets no
// carriage returns or escape codes.
type progressUI struct {
	w    io.Writer
	p    *mpb.Progress // nil: plain lines
	mu   sync.Mutex
	bars []*mpb.Bar
}

func newProgress(w io.Writer) *progressUI {
	ui := &progressUI{w: w}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		ui.p = mpb.New(mpb.WithOutput(w), mpb.WithWidth(40), mpb.WithRefreshRate(150*time.Millisecond))
	}
	return ui
}

// line prints a line (above the bars on a terminal).
func (ui *progressUI) line(format string, args ...any) {
	s := fmt.Sprintf(format, args...) + "\n"
	if ui.p != nil {
		ui.p.Write([]byte(s))
		return
	}
	io.WriteString(ui.w, s)
}

// close ends the bars (any left running are dropped) and waits for the last frame.
func (ui *progressUI) close() {
	if ui.p == nil {
		return
	}
	ui.mu.Lock()
	for _, b := range ui.bars {
		if !b.Completed() {
			b.Abort(false)
		}
	}
	ui.mu.Unlock()
	ui.p.Wait()
	ui.p = nil
}

func (ui *progressUI) add(b *mpb.Bar) *mpb.Bar {
	ui.mu.Lock()
	ui.bars = append(ui.bars, b)
	ui.mu.Unlock()
	return b
}

// ask asks a yes/no question on the terminal; without one the answer is yes.
func (ui *progressUI) ask(q string) bool {
	if !term.IsTerminal(int(os.Stdin.Fd())) {
		ui.line("interrupted: %s yes (no terminal to ask)", strings.TrimSpace(q))
		return true
	}
	if ui.p != nil {
		ui.p.Write([]byte(q + "\n"))
	} else {
		io.WriteString(ui.w, q)
	}
	a := strings.ToLower(readLine(os.Stdin))
	return a == "y" || a == "yes"
}

// byteBar follows an upload or a download.
type byteBar struct {
	ui    *progressUI
	name  string
	bar   *mpb.Bar
	total int64
	last  time.Time
	start time.Time
}

func (ui *progressUI) bytes(name string, total int64) *byteBar {
	b := &byteBar{ui: ui, name: name, total: total, start: time.Now()}
	if ui.p != nil {
		b.bar = ui.add(ui.p.AddBar(total,
			mpb.PrependDecorators(decor.Name(name, decor.WCSyncSpaceR), decor.Counters(decor.SizeB1024(0), "% .1f / % .1f")),
			mpb.AppendDecorators(decor.Percentage(decor.WCSyncSpace), decor.Name(" "), decor.AverageSpeed(decor.SizeB1024(0), "% .1f"))))
	} else if total >= 0 {
		ui.line("%s: %s", name, size(total))
	}
	return b
}

func (b *byteBar) set(done, total int64) {
	if b.bar != nil {
		if total > 0 && total != b.total {
			b.total = total
			b.bar.SetTotal(total, false)
		}
		b.bar.SetCurrent(done)
		return
	}
	if b.total < 0 && total >= 0 {
		b.total = total // a download learns its size
	}
	if time.Since(b.last) >= 2*time.Second && done < b.total {
		b.last = time.Now()
		b.ui.line("%s: %s of %s", b.name, size(done), size(b.total))
	}
}

func (b *byteBar) done(err error) {
	if b.bar != nil {
		if err != nil {
			b.bar.Abort(false)
		} else {
			b.bar.SetTotal(-1, true)
		}
		return
	}
	if err == nil {
		b.ui.line("%s: done (%s in %s)", b.name, size(b.total), time.Since(b.start).Round(100*time.Millisecond))
	}
}

// stageBar follows a job: queued (and why), then ffmpeg's percent with fps,
// speed and ETA.
type stageBar struct {
	ui       *progressUI
	id       string
	bar      *mpb.Bar
	mu       sync.Mutex
	msg      string
	lastLine string
	lastAt   time.Time
	paused   bool
	chunks   string // a chunked job's progress across its chunks, as last read
}

func (ui *progressUI) stage(id string) *stageBar {
	s := &stageBar{ui: ui, id: id, msg: "waiting"}
	if ui.p != nil {
		s.bar = ui.add(ui.p.AddBar(100,
			mpb.PrependDecorators(decor.Name("job "+short(id), decor.WCSyncSpaceR)),
			mpb.AppendDecorators(decor.Percentage(decor.WCSyncSpace), decor.Any(func(decor.Statistics) string {
				s.mu.Lock()
				defer s.mu.Unlock()
				return " " + s.msg
			}))))
	}
	return s
}

func short(id string) string {
	if len(id) > 8 {
		return id[:8]
	}
	return id
}

// describe is one line of where a job stands.
func describe(j *client.Job) (string, float64) {
	switch {
	case j.Status == mj.StatusQueued:
		return "queued: " + firstOf(j.StatusDetail, "waiting for a worker"), 0
	case j.Status == mj.StatusRunning && j.Progress != nil:
		p := j.Progress
		s := fmt.Sprintf("running command %d/%d", p.CommandIndex, p.CommandCount)
		pct := 0.0
		if p.Percent != nil {
			pct = *p.Percent
			s += fmt.Sprintf(" %.0f%%", pct)
		}
		s += fmt.Sprintf(", %.0f fps, %.2fx", p.FPS, p.Speed)
		if p.ETASeconds != nil {
			s += fmt.Sprintf(", ETA %s", (time.Duration(*p.ETASeconds) * time.Second).String())
		}
		return s, pct
	case j.Status == mj.StatusRunning:
		return "running", 0
	}
	return string(j.Status), 100
}

func (s *stageBar) update(j *client.Job) {
	msg, pct := describe(j)
	s.mu.Lock()
	// A chunked job's events carry its chunks; the last line seen is kept
	// for an update that comes without them.
	if c := chunksLine(j); c != "" {
		s.chunks = c
	}
	if s.chunks != "" && !j.Status.Terminal() {
		msg += ", " + s.chunks
	}
	s.mu.Unlock()
	if s.bar != nil {
		s.mu.Lock()
		s.msg = msg
		s.mu.Unlock()
		if pct > 0 {
			s.bar.SetCurrent(int64(pct))
		}
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.paused || msg == s.lastLine {
		return
	}
	// A new status or detail at once; progress at most every 2 s.
	if j.Status != mj.StatusRunning || j.Progress == nil || time.Since(s.lastAt) >= 2*time.Second || !strings.HasPrefix(s.lastLine, "running") {
		s.ui.line("job %s %s", s.id, msg)
		s.lastLine, s.lastAt = msg, time.Now()
	}
}

func (s *stageBar) pause()  { s.mu.Lock(); s.paused = true; s.mu.Unlock() }
func (s *stageBar) resume() { s.mu.Lock(); s.paused = false; s.mu.Unlock() }

func (s *stageBar) finish(j *client.Job) {
	if s.bar != nil {
		if j != nil && j.Status == mj.StatusSucceeded {
			s.mu.Lock()
			s.msg = "succeeded"
			s.mu.Unlock()
			s.bar.SetTotal(-1, true)
		} else {
			s.bar.Abort(false)
		}
	}
	if j != nil {
		line := fmt.Sprintf("job %s %s", s.id, j.Status)
		if c := chunksLine(j); c != "" {
			line += " (" + c + ")"
		}
		if j.Status == mj.StatusFailed {
			line += ": " + j.ErrorMessage
		}
		s.ui.line("%s", line)
	}
}

// chunksLine is a chunked job's progress across its chunks and its
// verification's verdict ("chunks 3/8 done, 2 running"; docs/chunked.md);
// "" for another job, or one read without its steps and report.
func chunksLine(j *client.Job) string {
	if j == nil || j.Parallel == nil || j.Parallel.Mode != mj.ParallelChunked {
		return ""
	}
	var parts []string
	for _, st := range j.Parallel.Steps {
		if st.Name != "encode" {
			continue
		}
		done, running := 0, 0
		for _, c := range st.Jobs {
			switch c.Status {
			case mj.StatusSucceeded:
				done++
			case mj.StatusRunning:
				running++
			}
		}
		line := fmt.Sprintf("chunks %d/%d done", done, len(st.Jobs))
		if running > 0 {
			line += fmt.Sprintf(", %d running", running)
		}
		parts = append(parts, line)
	}
	if len(j.Parallel.Verification) > 0 {
		var r struct {
			Pass bool `json:"pass"`
		}
		if json.Unmarshal(j.Parallel.Verification, &r) == nil {
			parts = append(parts, map[bool]string{true: "verification passed", false: "verification failed"}[r.Pass])
		}
	}
	return strings.Join(parts, "; ")
}

func size(n int64) string {
	switch {
	case n < 0:
		return "? B"
	case n < 1<<10:
		return fmt.Sprintf("%d B", n)
	case n < 1<<20:
		return fmt.Sprintf("%.1f KiB", float64(n)/(1<<10))
	case n < 1<<30:
		return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20))
	}
	return fmt.Sprintf("%.2f GiB", float64(n)/(1<<30))
}
