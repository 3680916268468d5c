// Package driver is the inside of a job's one sandbox (docs/warm.md#containment):
// the runner's own binary, run by bwrap as the sandbox's PID 1 with Arg. It
// reads the commands' argv lists from a pipe, one at a time, runs each without
// a shell, relays its stderr and -progress stream, kills and reaps whatever the
// command left running, and only then reports how it ended. Between two
// commands nothing of the job runs, as between two sandboxes.
//
// The runner (runner/jobsandbox.go) speaks to it through two pipes, fds 3 and 4:
//
//	3, runner → driver: one argv list per command (WriteArgv); its end ends
//	   the job
//	4, driver → runner: frames of a kind byte, a 4-byte big-endian length and
//	   the data: Hello first, then per command its stderr and progress data,
//	   and last its exit status (Status)
//
// It is a package of its own, importing little of the standard library (no
// os/exec, no encoding/json), so that its init runs before most of the
// binary's (Go initializes packages in import-path order once their imports
// are), which the driver does not need: the start of the mediajobs binary is
// most of the driver's cost.
package driver

import (
	"bufio"
	"encoding/binary"
	"errors"
	"io"
	"os"
	"os/signal"
	"sync"
	"syscall"
)

const (
	Arg           = "__mediajobs_sandbox_driver"
	Hello         = "mediajobs sandbox driver 1"
	FrameHello    = 'H'
	FrameStderr   = 'E'
	FrameProgress = 'P'
	FrameExit     = 'X'
	MaxFrame      = 64 << 10
)

// In the sandbox, nothing of the binary runs but this and the inits Go runs
// before it (standard library packages and a few small ones).
func init() {
	if len(os.Args) == 2 && os.Args[1] == Arg && os.Getpid() == 1 {
		os.Exit(Main())
	}
}

// Status is how a command ended: its exit code, or the signal that killed it,
// or why it could not start.
type Status struct {
	Code   int
	Signal int
	Start  string
}

// encode is s as an exit frame's data: code and signal as 4-byte big-endian
// integers, then Start.
func (s Status) encode() []byte {
	b := binary.BigEndian.AppendUint32(nil, uint32(int32(s.Code)))
	b = binary.BigEndian.AppendUint32(b, uint32(int32(s.Signal)))
	return append(b, s.Start...)
}

// DecodeStatus reads an exit frame's data.
func DecodeStatus(b []byte) (Status, error) {
	if len(b) < 8 {
		return Status{}, errors.New("the sandbox's driver sent a short exit status")
	}
	return Status{Code: int(int32(binary.BigEndian.Uint32(b))), Signal: int(int32(binary.BigEndian.Uint32(b[4:]))), Start: string(b[8:])}, nil
}

// WriteArgv sends one command: the count of its arguments, then each as its
// length and bytes, lengths as 4-byte big-endian integers.
func WriteArgv(w io.Writer, argv []string) error {
	b := binary.BigEndian.AppendUint32(nil, uint32(len(argv)))
	for _, a := range argv {
		b = binary.BigEndian.AppendUint32(b, uint32(len(a)))
		b = append(b, a...)
	}
	_, err := w.Write(b)
	return err
}

// maxArgv bounds what readArgv takes: far more than a job's command can be.
const maxArgv = 64 << 20

func readArgv(r *bufio.Reader) ([]string, error) {
	var n [4]byte
	if _, err := io.ReadFull(r, n[:]); err != nil {
		return nil, err
	}
	count := binary.BigEndian.Uint32(n[:])
	if count > maxArgv/4 {
		return nil, errors.New("command too long")
	}
	argv := make([]string, count)
	total := 0
	for i := range argv {
		if _, err := io.ReadFull(r, n[:]); err != nil {
			return nil, err
		}
		l := int(binary.BigEndian.Uint32(n[:]))
		if total += l; total > maxArgv {
			return nil, errors.New("command too long")
		}
		b := make([]byte, l)
		if _, err := io.ReadFull(r, b); err != nil {
			return nil, err
		}
		argv[i] = string(b)
	}
	return argv, nil
}

// frameWriter writes frames; the driver's goroutines share it.
type frameWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (f *frameWriter) write(kind byte, b []byte) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	buf := make([]byte, 5, 5+len(b))
	buf[0] = kind
	binary.BigEndian.PutUint32(buf[1:], uint32(len(b)))
	_, err := f.w.Write(append(buf, b...))
	return err
}

// ReadFrame reads one frame. The driver runs beside the job's commands:
// nothing it sends is trusted further than a bounded frame.
func ReadFrame(r *bufio.Reader) (byte, []byte, error) {
	var h [5]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return 0, nil, err
	}
	n := binary.BigEndian.Uint32(h[1:])
	if n > MaxFrame {
		return 0, nil, errors.New("the sandbox's driver sent a frame larger than its bound")
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return h[0], b, err
}

// Main runs inside the sandbox, as its PID 1, until fd 3 ends.
func Main() int {
	// Not dumpable: the job's commands (the same user) can neither ptrace it
	// nor read its memory. Every signal they send it is caught and dropped
	// (SIGABRT, SIGSEGV... sent with kill would otherwise end it, and the
	// job's outcome with it); a caught signal, unlike an ignored one, is not
	// inherited by the commands. Its own faults still end it.
	syscall.RawSyscall6(syscall.SYS_PRCTL, syscall.PR_SET_DUMPABLE, 0, 0, 0, 0, 0)
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	go func() {
		for range sigs {
		}
	}()
	syscall.CloseOnExec(3) // the commands get neither pipe
	syscall.CloseOnExec(4)
	ctl, out := os.NewFile(3, "control"), &frameWriter{w: os.NewFile(4, "events")}
	if out.write(FrameHello, []byte(Hello)) != nil {
		return 1
	}
	in := bufio.NewReader(ctl)
	for {
		argv, err := readArgv(in)
		if err != nil {
			break // the job is over (or the runner gone)
		}
		if out.write(FrameExit, run(argv, out).encode()) != nil {
			break
		}
	}
	reapAll()
	return 0
}

// run runs one command; when it returns, no process of the command is left
// and all it wrote to its stderr and progress pipes has been relayed.
func run(argv []string, out *frameWriter) Status {
	if len(argv) == 0 {
		return Status{Code: -1, Start: "no command"}
	}
	er, ew, err := os.Pipe()
	if err != nil {
		return Status{Code: -1, Start: err.Error()}
	}
	pr, pw, err := os.Pipe()
	if err != nil {
		er.Close()
		ew.Close()
		return Status{Code: -1, Start: err.Error()}
	}
	var relays sync.WaitGroup
	relay := func(kind byte, r *os.File) {
		defer relays.Done()
		defer r.Close()
		buf := make([]byte, 32<<10)
		for {
			n, err := r.Read(buf)
			if n > 0 {
				out.write(kind, buf[:n]) // the runner gone: read on, so that nothing blocks
			}
			if err != nil {
				return
			}
		}
	}
	relays.Add(2)
	go relay(FrameStderr, er)
	go relay(FrameProgress, pr)
	// The commands get bwrap's stdin and stdout, the runner's pipes (never a
	// device of the host's). -progress pipe:3 is pw. The
	// environment is bwrap's, which the runner set; argv[0] is an absolute
	// path: no lookup, no shell.
	pid, err := syscall.ForkExec(argv[0], argv, &syscall.ProcAttr{Env: os.Environ(), Files: []uintptr{0, 1, ew.Fd(), pw.Fd()}})
	ew.Close()
	pw.Close()
	var st Status
	if err != nil {
		st = Status{Code: -1, Start: err.Error()}
	} else {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if err != syscall.EINTR {
				break
			}
		}
		if ws.Signaled() {
			st = Status{Code: -1, Signal: int(ws.Signal())}
		} else {
			st.Code = ws.ExitStatus()
		}
	}
	reapAll() // what the command left: its pipes close with it
	relays.Wait()
	return st
}

// reapAll kills every other process of the sandbox and reaps them, until the
// driver has no child left: as its PID 1, kill(-1) reaches every process of
// the sandbox, and every one is its descendant, reparented to it at the end.
// Killing again after each reap catches a process forked meanwhile.
func reapAll() {
	for {
		syscall.Kill(-1, syscall.SIGKILL)
		if _, err := syscall.Wait4(-1, nil, 0, nil); err == syscall.ECHILD {
			return
		}
	}
}
