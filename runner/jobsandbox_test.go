package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/runner/driver"
	"github.com/mediajobs/mediajobs/sandbox"
	"github.com/mediajobs/mediajobs/testenv"
)

// countingBwrap is the real bwrap behind a wrapper that logs each run's
// arguments, one line a run; runs lists them.
func countingBwrap(t *testing.T) (bwrap string, runs func() []string) {
	real := testenv.Binary(t, "bwrap")
	log := filepath.Join(t.TempDir(), "bwrap.log")
	bwrap = fakeBinary(t, "bwrap", `echo "$*" >> `+log+`
exec `+real+` "$@"
`)
	return bwrap, func() []string {
		b, _ := os.ReadFile(log)
		return strings.Split(strings.TrimSpace(string(b)), "\n")
	}
}

// sandboxesOf splits bwrap's runs: those of a job's sandbox (its driver) and
// those running ffmpeg itself (a sandbox per command).
func sandboxesOf(runs []string, ffmpeg string) (jobs, commands int) {
	for _, r := range runs {
		switch {
		case strings.Contains(r, " "+driver.Arg):
			jobs++
		case strings.Contains(r, ffmpeg+" "):
			commands++
		}
	}
	return jobs, commands
}

// TestWarmJobRunsInOneSandbox: a warm runner runs the three commands of a job
// in one bwrap sandbox, not one each; each command's log is its own. A job of
// one command runs in one sandbox too, without the driver.
func TestWarmJobRunsInOneSandbox(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	bwrap, runs := countingBwrap(t)
	c := newWarmControl(t)
	startWarmWith(t, c, ff, bwrap)
	srv, up := newServer(t, nil)
	var cmds []string
	for _, color := range []string{"red", "green", "blue"} {
		cmds = append(cmds, "-f lavfi -i color=c="+color+":s=16x16:d=0.1 -frames:v 1 -metadata title="+color+" outputs/"+color+".png")
	}
	run := c.submit(mj.Manifest{JobID: "job-three", Attempt: 1, OutputNames: []string{"red.png", "green.png", "blue.png"},
		FFmpegCommands: cmds, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", TimeoutSeconds: 60})
	if got := c.waitRan(t, run); len(got) != 1 || got[0] != "reported" {
		t.Fatalf("outcomes %q, want [reported]", got)
	}
	var res mj.Result
	if b, _ := up.uploaded("/result.json"); json.Unmarshal(b, &res) != nil || !res.Succeeded || len(res.Outputs) != 3 {
		t.Fatalf("result %+v", res)
	}
	real, _ := filepath.EvalSymlinks(ff)
	if jobs, commands := sandboxesOf(runs(), real); jobs != 1 || commands != 0 {
		t.Fatalf("the job ran in %d job sandbox(es) and %d command sandbox(es), want 1 and 0: bwrap ran %q", jobs, commands, runs())
	}
	for i, color := range []string{"red", "green", "blue"} {
		log, _ := up.uploaded(fmt.Sprintf("/logs/%d.log", i+1))
		for j, other := range []string{"red", "green", "blue"} {
			if has := bytes.Contains(log, []byte("color=c="+other)); has != (i == j) {
				t.Errorf("command %d's log (%s) holds color=c=%s: %v\n%s", i+1, color, other, has, log)
			}
		}
	}
	before := len(runs())
	single := c.submit(mj.Manifest{JobID: "job-one", Attempt: 1, OutputNames: []string{"o.png"}, FFmpegCommands: []string{cmds[0][:strings.LastIndex(cmds[0], " ")] + " outputs/o.png"},
		UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", TimeoutSeconds: 60})
	if got := c.waitRan(t, single); len(got) != 1 || got[0] != "reported" {
		t.Fatalf("outcomes %q, want [reported]", got)
	}
	if jobs, commands := sandboxesOf(runs()[before:], real); jobs != 0 || commands != 1 {
		t.Errorf("the job of one command ran in %d job sandbox(es) and %d command sandbox(es), want 0 and 1: bwrap ran %q", jobs, commands, runs()[before:])
	}
}

// oneShell is command 1 of TestWarmCommandLeavesNothingToTheNextCommand: it
// leaves processes behind (@M@ in their command lines; they ignore the usual
// signals), one of them writing to the command's stderr for ever, and holds on
// until the host, having seen them, creates /job/go1.
const oneShell = `M=@M@
E="/job/$M.err"
loop='trap "" HUP INT TERM; while :; do echo "leftover-$0" >&2; sleep 0.1; done'
setsid -f sh -c "$loop" "$M-setsid" <&- 3>&-
setsid -f nohup sh -c "$loop" "$M-nohup" <&- 3>&- >>"$E" 2>&1
echo 'fork and exit; fork and exit; exec @ARGV' > /job/daemon.pl
perl /job/daemon.pl sh -c "$loop" "$M-daemon" <&- 3>&- >>"$E" 2>&1
while [ ! -e /job/go1 ]; do sleep 0.1; done
echo one-done >&2
`

// TestWarmCommandLeavesNothingToTheNextCommand: in a warm runner's job, whose
// commands share one sandbox, command 1 (a compromised ffmpeg, the checker
// bypassed) leaves processes behind; none lives while command 2 runs, none
// writes into command 2's log, and command 3's failure is its own: its exit
// code and stderr, attributed to it.
func TestWarmCommandLeavesNothingToTheNextCommand(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	perl := testenv.Binary(t, "perl")
	if real, _ := filepath.EvalSymlinks(perl); !strings.HasPrefix(real, "/usr/") {
		t.Fatalf("perl is at %s: the sandbox shows only /usr", real)
	}
	bypassChecker(t)
	bwrap, runs := countingBwrap(t)
	c := newWarmControl(t)
	w := startWarmWith(t, c, compromisedFFmpeg(t, ff), bwrap)
	marker := fmt.Sprintf("mjcmdone%d", time.Now().UnixNano())
	killProcsWith(t, marker)
	srv, up := newServer(t, map[string][]byte{
		"one.sh":   []byte(strings.ReplaceAll(oneShell, "@M@", marker)),
		"two.sh":   []byte("touch /job/two-running\nwhile [ ! -e /job/go2 ]; do sleep 0.1; done\necho two-done >&2\n"),
		"three.sh": []byte("echo boom-three >&2\nexit 3\n"),
	})
	in := map[string]string{}
	for _, n := range []string{"one.sh", "two.sh", "three.sh"} {
		in[n] = srv.URL + "/in/" + n
	}
	run := c.submit(mj.Manifest{JobID: "job-cmds", Attempt: 1, InputFiles: in, OutputNames: []string{"never.txt"}, AllowLoopback: true, TimeoutSeconds: 120,
		FFmpegCommands: []string{"-mjsh inputs/one.sh", "-mjsh inputs/two.sh", "-mjsh inputs/three.sh"}, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok"})
	dir := filepath.Join(w.WorkRoot, run)
	left := func() string { return fmt.Sprintf("(command 1's processes on the host: %q)", procsWith(marker)) }

	// Control: the host sees command 1's three processes while it runs.
	testenv.Eventually(t, time.Minute, "command 1's three processes on the host", func() bool { return len(procsWith(marker)) >= 3 })
	if err := os.WriteFile(filepath.Join(dir, "go1"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, time.Minute, "command 2 running "+left(), func() bool {
		_, err := os.Stat(filepath.Join(dir, "two-running"))
		return err == nil
	})
	if p := procsWith(marker); len(p) > 0 {
		t.Errorf("command 1's processes live on while command 2 runs: %s", strings.Join(p, "; "))
	}
	if err := os.WriteFile(filepath.Join(dir, "go2"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if got := c.waitRan(t, run, left); len(got) != 1 || got[0] != "reported" {
		t.Fatalf("outcomes %q, want [reported]", got)
	}
	var res mj.Result
	if b, _ := up.uploaded("/result.json"); json.Unmarshal(b, &res) != nil || res.Succeeded {
		t.Fatalf("result %+v, want a failure", res)
	}
	for _, want := range []string{"command 3 of 3 failed", "exited with code 3", "boom-three"} {
		if !strings.Contains(res.ErrorMessage, want) {
			t.Errorf("error_message %q lacks %q", res.ErrorMessage, want)
		}
	}
	if strings.Contains(res.ErrorMessage, "leftover") || strings.Contains(res.ErrorMessage, "two-done") {
		t.Errorf("error_message %q holds another command's stderr", res.ErrorMessage)
	}
	log1, _ := up.uploaded("/logs/1.log")
	log2, _ := up.uploaded("/logs/2.log")
	if !bytes.Contains(log1, []byte("leftover-"+marker+"-setsid")) || !bytes.Contains(log1, []byte("one-done")) {
		t.Errorf("command 1's log lacks its leftover's or its own lines (the check proves nothing): %q", log1)
	}
	if !bytes.Contains(log2, []byte("two-done")) || bytes.Contains(log2, []byte("leftover")) {
		t.Errorf("command 2's log: %q, want its own lines only", log2)
	}
	if p := procsWith(marker); len(p) > 0 {
		t.Errorf("command 1's processes outlived the job: %s", strings.Join(p, "; "))
	}
	if jobs, commands := sandboxesOf(runs(), filepath.Base(w.FFmpeg)); jobs != 1 || commands != 0 {
		t.Errorf("the job ran in %d job sandbox(es) and %d command sandbox(es), want 1 and 0: bwrap ran %q", jobs, commands, runs())
	}
}

// TestSandboxedCommandsGetNoHostFile: a sandboxed command's stdin and stdout
// are pipes, in a sandbox per command and in one per job, and ffprobe's stdin
// too: the host's /dev/null, which the sandbox's user owns on the host (root
// here), would let it chmod the node's /dev/null.
func TestSandboxedCommandsGetNoHostFile(t *testing.T) {
	testenv.Binary(t, "bwrap")
	if real, err := filepath.EvalSymlinks("/usr/bin/perl"); err != nil || !strings.HasPrefix(real, "/usr/") {
		t.Fatalf("no perl under /usr (%s, %v)", real, err)
	}
	perlBinary := func(name, script string) string {
		p := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(p, []byte("#!/usr/bin/perl\n"+script), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	ff := perlBinary("ffmpeg", `open(my $o, ">", "outputs/o.txt") or die "$!";
print $o "x";
print STDERR "fd0: ", (-c STDIN ? "a device" : "no device"), "\n";
print STDERR "fd1: ", (-c STDOUT ? "a device" : "no device"), "\n";
`)
	probe := perlBinary("ffprobe", `my $d = (-c STDIN ? "device" : "nodevice");
print "{\"format\":{\"format_name\":\"stdin-$d\"},\"streams\":[]}";
`)
	srv, _ := newServer(t, nil)
	for _, one := range []bool{false, true} {
		m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"o.txt"}, FFmpegCommands: []string{"-f lavfi -i sine=d=0.1 {{o.txt}}", "-f lavfi -i sine=d=0.1 {{o.txt}}"},
			UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok"}
		var log bytes.Buffer
		res, err := (&Runner{WorkDir: t.TempDir(), Log: &log, FFmpeg: ff, FFprobe: probe, Sandbox: &sandbox.Bwrap{}, OneSandbox: one}).Run(context.Background(), &m)
		if err != nil || !res.Succeeded || len(res.Outputs) != 1 || res.Outputs[0].Probe == nil {
			t.Fatalf("one sandbox %v: %+v, %v\n%s", one, res, err, log.String())
		}
		if one != strings.Contains(log.String(), "commands in one sandbox") {
			t.Fatalf("one sandbox %v, but the log says otherwise:\n%s", one, log.String())
		}
		if !strings.Contains(log.String(), "fd0: no device") || !strings.Contains(log.String(), "fd1: no device") {
			t.Errorf("one sandbox %v: ffmpeg's stdin or stdout is a host device:\n%s", one, log.String())
		}
		if f := res.Outputs[0].Probe.Format; f != "stdin-nodevice" {
			t.Errorf("one sandbox %v: ffprobe says %q, want stdin-nodevice", one, f)
		}
	}
}

// ffmpegAddr is what differs between two runs of one failing ffmpeg.
var ffmpegAddr = regexp.MustCompile(`0x[0-9a-f]+`)

// TestOneSandboxFailsAsASandboxPerCommand: a job whose commands share one
// sandbox fails with the error message a sandbox per command gives: which
// command, its exit code or signal, its stderr, the hints, the timeout.
func TestOneSandboxFailsAsASandboxPerCommand(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	data := clip(t)
	list := []byte("ffconcat version 1.0\nfile 'http://127.0.0.1:1/a.mp4'\n")
	srv, _ := newServer(t, map[string][]byte{"clip.mp4": data, "list.txt": list})
	in := map[string]string{"clip": srv.URL + "/in/clip.mp4", "list.txt": srv.URL + "/in/list.txt"}
	cases := []struct {
		name   string
		ffmpeg string
		m      mj.Manifest
		want   string
	}{
		{"command 2 fails", ff, mj.Manifest{FFmpegCommands: []string{"-i {{clip}} -t 1 ok.mp4", "-i ok.mp4 -c:v nope_codec {{o.mp4}}", "-i ok.mp4 {{o.mp4}}"}},
			"command 2 of 3 failed: ffmpeg exited with code 1"},
		{"timeout in command 2", ff, mj.Manifest{TimeoutSeconds: 2, FFmpegCommands: []string{"-i {{clip}} -t 1 ok.mp4", "-re -stream_loop -1 -i ok.mp4 {{o.mp4}}"}},
			"timed out after 2s (timeout_seconds) while running command 2 of 2"},
		{"concat list naming a URL", ff, mj.Manifest{FFmpegCommands: []string{"-i {{clip}} -t 1 ok.mp4", "-f concat -safe 0 -i inputs/list.txt -c copy {{o.mp4}}"}},
			"names http://127.0.0.1:1/a.mp4, a URL"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var msgs [2]string
			for i, one := range []bool{false, true} {
				m := c.m
				m.JobID, m.Attempt, m.InputFiles, m.OutputNames, m.AllowLoopback = "job-1", 1, in, []string{"o.mp4"}, true
				m.UploadURL = srv.URL + "/up/%7Bpath%7D?sig=ok"
				var log bytes.Buffer
				r := &Runner{WorkDir: t.TempDir(), Log: &log, FFmpeg: c.ffmpeg, Sandbox: &sandbox.Bwrap{}, OneSandbox: one}
				res, err := r.Run(context.Background(), &m)
				if err != nil || res.Succeeded {
					t.Fatalf("one sandbox %v: %+v, %v", one, res, err)
				}
				if one != strings.Contains(log.String(), "commands in one sandbox") {
					t.Fatalf("one sandbox %v, but the log says otherwise:\n%s", one, log.String())
				}
				msgs[i] = ffmpegAddr.ReplaceAllString(res.ErrorMessage, "0x")
			}
			if !strings.Contains(msgs[0], c.want) {
				t.Fatalf("a sandbox per command: %q, lacks %q", msgs[0], c.want)
			}
			if msgs[1] != msgs[0] {
				t.Fatalf("one sandbox: %q\na sandbox per command: %q", msgs[1], msgs[0])
			}
		})
	}
}

// TestOneSandboxNamesAKilledCommand: a command killed by a signal (the OOM
// killer's) is named so. (In a sandbox of its own, a command is the PID 1 its
// own kill cannot reach: there only the kernel's does.)
func TestOneSandboxNamesAKilledCommand(t *testing.T) {
	testenv.Binary(t, "bwrap")
	srv, _ := newServer(t, nil)
	killed := fakeBinary(t, "ffmpeg", "echo allocating >&2\nkill -9 $$\n")
	m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"o.wav"}, FFmpegCommands: []string{"-f lavfi -i sine=d=0.1 {{o.wav}}", "-f lavfi -i sine=d=0.1 {{o.wav}}"},
		UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok"}
	var log bytes.Buffer
	res, err := (&Runner{WorkDir: t.TempDir(), Log: &log, FFmpeg: killed, Sandbox: &sandbox.Bwrap{}, OneSandbox: true}).Run(context.Background(), &m)
	if !strings.Contains(log.String(), "commands in one sandbox") {
		t.Fatalf("the job did not run in one sandbox:\n%s", log.String())
	}
	if err != nil || res.Succeeded || !strings.Contains(res.ErrorMessage, "command 1 of 2 failed: ffmpeg was killed by signal SIGKILL, most likely for going over the pool's memory limit") ||
		!strings.Contains(res.ErrorMessage, "allocating") {
		t.Fatalf("result %+v, %v", res, err)
	}
}

// TestOneSandboxDriverOutlivesSignals: a command that signals the driver (its
// sandbox's PID 1) with what would end a Go program cannot end the job's
// sandbox: the command's own exit is reported, and the next command runs.
func TestOneSandboxDriverOutlivesSignals(t *testing.T) {
	testenv.Binary(t, "bwrap")
	srv, _ := newServer(t, nil)
	ff := fakeBinary(t, "ffmpeg", "for s in ABRT SEGV BUS FPE ILL TRAP SYS HUP TERM USR1; do kill -$s 1; done\necho signalled >&2\nexit 3\n")
	m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"o.wav"}, FFmpegCommands: []string{"-f lavfi -i sine=d=0.1 {{o.wav}}", "-f lavfi -i sine=d=0.1 {{o.wav}}"},
		UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok"}
	var log bytes.Buffer
	res, err := (&Runner{WorkDir: t.TempDir(), Log: &log, FFmpeg: ff, Sandbox: &sandbox.Bwrap{}, OneSandbox: true}).Run(context.Background(), &m)
	if !strings.Contains(log.String(), "commands in one sandbox") {
		t.Fatalf("the job did not run in one sandbox:\n%s", log.String())
	}
	if err != nil || res.Succeeded || !strings.Contains(res.ErrorMessage, "command 1 of 2 failed") || !strings.Contains(res.ErrorMessage, "signalled") {
		t.Fatalf("result %+v, %v\n%s", res, err, log.String())
	}
}

// TestOneSandboxFallsBackWithoutItsDriver: when the runner's binary does not
// answer as the driver (replaced under a running runner by another version),
// the job runs with a sandbox per command, and says so in the task log.
func TestOneSandboxFallsBackWithoutItsDriver(t *testing.T) {
	testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	defer func(f func() (string, error)) { runnerBinary = f }(runnerBinary)
	runnerBinary = func() (string, error) { return "/usr/bin/true", nil }
	srv, _ := newServer(t, nil)
	m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"o.png"}, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok",
		FFmpegCommands: []string{"-f lavfi -i color=s=16x16:d=0.1 -frames:v 1 a.png", "-i a.png {{o.png}}"}}
	var log bytes.Buffer
	res, err := (&Runner{WorkDir: t.TempDir(), Log: &log, Sandbox: &sandbox.Bwrap{}, OneSandbox: true}).Run(context.Background(), &m)
	if err != nil || !res.Succeeded {
		t.Fatalf("result %+v, %v\n%s", res, err, log.String())
	}
	if !strings.Contains(log.String(), "the job's commands run in a sandbox each: the runner's sandbox driver did not start") {
		t.Fatalf("the task log does not say the job fell back:\n%s", log.String())
	}
}

// TestMediajobsBinaryIsTheDriver: the mediajobs binary (what warm runners
// run, with all its packages' inits) works as the driver of a job's sandbox.
func TestMediajobsBinaryIsTheDriver(t *testing.T) {
	testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	gobin := testenv.Binary(t, "go")
	bin := filepath.Join(t.TempDir(), "mediajobs")
	build := exec.Command(gobin, "build", "-o", bin, "./cmd/mediajobs")
	build.Dir = ".."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	defer func(f func() (string, error)) { runnerBinary = f }(runnerBinary)
	runnerBinary = func() (string, error) { return bin, nil }
	srv, _ := newServer(t, nil)
	m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"o.png"}, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok",
		FFmpegCommands: []string{"-f lavfi -i color=s=16x16:d=0.1 -frames:v 1 a.png", "-i a.png {{o.png}}"}}
	var log bytes.Buffer
	res, err := (&Runner{WorkDir: t.TempDir(), Log: &log, Sandbox: &sandbox.Bwrap{}, OneSandbox: true}).Run(context.Background(), &m)
	if err != nil || !res.Succeeded || !strings.Contains(log.String(), "commands in one sandbox") {
		t.Fatalf("result %+v, %v\n%s", res, err, log.String())
	}
}

// TestOneSandboxCappedAtThePoolsDisk: the disk watch stops a job's sandbox
// as it stops a command's.
func TestOneSandboxCappedAtThePoolsDisk(t *testing.T) {
	testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	srv, _ := newServer(t, nil)
	m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"o.nut"}, DiskBytes: 4 << 20, TimeoutSeconds: 120,
		FFmpegCommands: []string{"-f lavfi -i sine=d=0.1 a.wav", "-f lavfi -i testsrc=size=320x240:rate=25 -t 600 -c:v rawvideo -f nut {{o.nut}}"},
		UploadURL:      srv.URL + "/up/%7Bpath%7D?sig=ok"}
	var log bytes.Buffer
	res, err := (&Runner{WorkDir: t.TempDir(), Log: &log, Sandbox: &sandbox.Bwrap{}, OneSandbox: true}).Run(context.Background(), &m)
	if err != nil || res.Succeeded || !strings.Contains(res.ErrorMessage, "command 2 of 2: the job's files") {
		t.Fatalf("result %+v, %v", res, err)
	}
	if !strings.Contains(log.String(), "commands in one sandbox") {
		t.Fatalf("the job did not run in one sandbox:\n%s", log.String())
	}
}

// BenchmarkJobSandbox: jobs of 1, 2 and 3 trivial commands, sandboxed as on
// a warm runner (their commands and probes, not their fetch and upload), with
// a sandbox per command and with one for the job, one after the other in each
// iteration so that both see the same load. "ffmpeg" runs the trivial job's
// command, "true" /usr/bin/true as ffmpeg: the sandboxes' own cost.
// go test ./runner -run '^$' -bench JobSandbox -benchtime 40x
func BenchmarkJobSandbox(b *testing.B) {
	ff := testenv.Binary(b, "ffmpeg")
	testenv.Binary(b, "bwrap")
	defer func(n int) { oneSandboxFrom = n }(oneSandboxFrom)
	oneSandboxFrom = 1
	for _, bin := range []string{"ffmpeg", "true"} {
		for n := 1; n <= 3; n++ {
			var cmds, outputs []string
			for i := 1; i <= n; i++ {
				if bin == "ffmpeg" {
					cmds = append(cmds, fmt.Sprintf("-f lavfi -i color=c=black:s=16x16:d=0.1 -frames:v 1 outputs/o%d.png", i))
					outputs = append(outputs, fmt.Sprintf("o%d.png", i))
				} else {
					cmds = append(cmds, fmt.Sprintf("-f lavfi -i color=c=black:s=16x16:d=0.1 -frames:v 1 o%d.png", i))
				}
			}
			ffmpeg := ff
			if bin == "true" {
				ffmpeg = "/usr/bin/true"
			}
			b.Run(fmt.Sprintf("%s/%d", bin, n), func(b *testing.B) {
				var wall, cpu [2]time.Duration
				for b.Loop() {
					for k, one := range []bool{false, true} {
						m := &mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: outputs, FFmpegCommands: cmds, TimeoutSeconds: 60}
						var log bytes.Buffer
						r := &Runner{WorkDir: b.TempDir(), FFmpeg: ffmpeg, Log: &log, Sandbox: &sandbox.Bwrap{}, OneSandbox: one}
						st := r.Fetch(context.Background(), m)
						start, children := time.Now(), rusage(b, syscall.RUSAGE_CHILDREN)
						r.Exec(context.Background(), m, st)
						wall[k] += time.Since(start)
						cpu[k] += rusage(b, syscall.RUSAGE_CHILDREN) - children
						if st.Failed || len(st.Outputs) != len(outputs) {
							b.Fatalf("job: %+v", st)
						}
						if one != strings.Contains(log.String(), "commands in one sandbox") {
							b.Fatalf("one sandbox %v, but the log says otherwise:\n%s", one, log.String())
						}
					}
				}
				ms := func(d time.Duration) float64 { return float64(d) / float64(b.N) / 1e6 }
				b.ReportMetric(ms(wall[0]), "per-command-ms/op")
				b.ReportMetric(ms(wall[1]), "one-sandbox-ms/op")
				b.ReportMetric(ms(cpu[0]), "per-command-cpu-ms/op")
				b.ReportMetric(ms(cpu[1]), "one-sandbox-cpu-ms/op")
			})
		}
	}
}
