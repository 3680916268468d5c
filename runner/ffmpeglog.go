package runner

import (
	"bytes"
	"context"
	"net/http"

	"fmt"
	mj "github.com/mediajobs/mediajobs"
	"golang.org/x/sys/unix"
	"io"
	"os"
	"path/filepath"
	"regexp"
)

// Each command's full ffmpeg log (stderr at level info, every line tagged with its
// level) is kept in logs/<n>.log in the job's directory and uploaded with the
// result, capped at logCap: the first and the last half of a longer one, with a
// line saying how much was left out between.
const logCap = 1 << 20

// logPath is where command n's log goes (1-based), relative to the job's directory.
func logPath(n int) string { return fmt.Sprintf("logs/%d.log", n) }

// capLog writes the first logCap/2 bytes to its file and keeps the last logCap/2
// in memory, to append at Close.
type capLog struct {
	f       *os.File
	written int64 // to the file
	extra   int64 // past the head
	tail    tailBuffer
	err     error // the first write error
}

// createLog opens command n's log for the runner, which writes it from outside
// the sandbox: the job's directory is ffmpeg's to change, so the path is opened
// through an os.Root (no link leads out of it), never through a final link, never
// blocking on a FIFO, and only as a regular file.
func createLog(workDir string, n int) (*capLog, error) {
	root, err := os.OpenRoot(workDir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	if err := root.MkdirAll(filepath.Dir(logPath(n)), 0o755); err != nil {
		return nil, err
	}
	f, err := root.OpenFile(logPath(n), os.O_CREATE|os.O_TRUNC|os.O_WRONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0o644)
	if err != nil {
		return nil, err
	}
	if fi, err := f.Stat(); err != nil || !fi.Mode().IsRegular() {
		f.Close()
		return nil, fmt.Errorf("%s is not a regular file", logPath(n))
	}
	return &capLog{f: f, tail: tailBuffer{max: logCap / 2}}, nil
}

// Write never fails: a log that cannot be written (a full disk) must not stop
// ffmpeg, whose stderr this is; the first error is kept for Close.
func (l *capLog) Write(p []byte) (int, error) {
	n := len(p)
	if room := logCap/2 - l.written; room > 0 && l.err == nil {
		k := min(int64(len(p)), room)
		if _, err := l.f.Write(p[:k]); err != nil {
			l.err = err
		}
		l.written += k
		p = p[k:]
	}
	if len(p) > 0 {
		l.extra += int64(len(p))
		l.tail.Write(p)
	}
	return n, nil
}

// Close writes what it kept of the end.
func (l *capLog) Close() error {
	if l.err != nil {
		l.f.Close()
		return l.err
	}
	if dropped := l.extra - int64(len(l.tail.b)); dropped > 0 {
		fmt.Fprintf(l.f, "\n[mediajobs] %d bytes of this log were left out here (it keeps its first and last %d KiB)\n", dropped, logCap/2/1024)
	}
	if _, err := l.f.Write(l.tail.b); err != nil {
		l.f.Close()
		return err
	}
	return l.f.Close()
}

// levelTag is ffmpeg's "[level] " tag (-loglevel level+...), after an optional
// "[context @ 0x...] ".
var levelTag = regexp.MustCompile(`^(\[[^\]]*@ 0x[0-9a-f]+\] )?\[(quiet|panic|fatal|error|warning|info|verbose|debug|trace)\] `)

// errorLines passes on, line by line, what an error message is made of: ffmpeg's
// lines of level error and worse (their tag removed) and any untagged line (the
// sandbox's own complaints), but none of the info or warning lines the full log has.
type errorLines struct {
	dst     io.Writer
	partial []byte
	// level of the last tagged line: an untagged one after it is the rest of that
	// message (ffmpeg tags only a message's first line).
	level string
}

func (e *errorLines) Write(p []byte) (int, error) {
	e.partial = append(e.partial, p...)
	for {
		i := bytes.IndexByte(e.partial, '\n')
		if i < 0 {
			break
		}
		e.line(e.partial[:i+1])
		e.partial = e.partial[i+1:]
	}
	if len(e.partial) > 64<<10 { // no newline for long: pass it on as it is
		e.line(e.partial)
		e.partial = nil
	}
	return len(p), nil
}

// Flush passes on a last line without a newline.
func (e *errorLines) Flush() {
	if len(e.partial) > 0 {
		e.line(e.partial)
		e.partial = nil
	}
}

func (e *errorLines) line(l []byte) {
	m := levelTag.FindSubmatchIndex(l)
	if m == nil {
		if isErrorLevel(e.level) || e.level == "" {
			e.dst.Write(l)
		}
		return
	}
	e.level = string(l[m[4]:m[5]])
	if isErrorLevel(e.level) {
		// Keep the context, drop the tag: "[mp4 @ 0x..] Could not ..."
		out := append(append([]byte{}, l[:m[4]-1]...), l[m[1]:]...)
		e.dst.Write(out)
	}
}

// presentLogs lists the commands' logs in the job's directory: regular files no
// larger than a log can be (ffmpeg may have written there too).
func (r *Runner) presentLogs(m *mj.Manifest) []mj.LogFile {
	root, err := os.OpenRoot(r.WorkDir)
	if err != nil {
		return nil
	}
	defer root.Close()
	var logs []mj.LogFile
	for n := 1; n <= len(m.FFmpegCommands); n++ {
		fi, err := root.Lstat(logPath(n))
		if err != nil || !fi.Mode().IsRegular() || fi.Size() > logCap+4096 {
			continue
		}
		logs = append(logs, mj.LogFile{Command: n, Size: fi.Size()})
	}
	return logs
}

// uploadLog sends one log, read without following links.
func (r *Runner) uploadLog(ctx context.Context, client *http.Client, url string, l mj.LogFile) error {
	root, err := os.OpenRoot(r.WorkDir)
	if err != nil {
		return err
	}
	defer root.Close()
	fh, err := root.OpenFile(logPath(l.Command), os.O_RDONLY|unix.O_NOFOLLOW|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer fh.Close()
	return put(ctx, client, url, io.LimitReader(fh, l.Size), l.Size)
}

func isErrorLevel(level string) bool {
	return level == "panic" || level == "fatal" || level == "error"
}
