package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// warmControl is a double of the service's side of a warm runner: these tests
// are of the sandbox per job, not of the service. /warm/poll hands out a queue
// of leases in order, /warm/renew holds each call a moment and answers
// {"stop":false} (stop once the test stops the run), /warm/done records the
// outcomes.
type warmControl struct {
	srv    *httptest.Server
	token  string
	leases chan lease

	mu       sync.Mutex
	next     int64
	outcomes map[string][]string      // run -> the outcomes done reported
	whys     map[string][]string      // run -> the why of each outcome
	stops    map[string]chan struct{} // run -> closed once renew must say stop
	ended    map[string]bool          // run -> Ran was called
	changed  chan struct{}            // closed and replaced when ended changes
	// failDone: so many /warm/done calls are answered 503 (a gateway
	// restarting, etcd away) before one is taken; doneTries counts them all,
	// renewedAfterDone the renewals after a run's first done call.
	failDone         int
	doneTries        map[string]int
	renewedAfterDone map[string]int
}

func newWarmControl(t *testing.T) *warmControl {
	c := &warmControl{token: "warm-test-token", leases: make(chan lease, 64), outcomes: map[string][]string{},
		stops: map[string]chan struct{}{}, ended: map[string]bool{}, changed: make(chan struct{}),
		doneTries: map[string]int{}, renewedAfterDone: map[string]int{}, whys: map[string][]string{}}
	c.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPost || r.Header.Get("Authorization") != "Bearer "+c.token {
			http.Error(w, "no workload identity", http.StatusUnauthorized)
			return
		}
		var req struct {
			Run     string `json:"run"`
			Outcome string `json:"outcome"`
			Why     string `json:"why"`
		}
		json.NewDecoder(r.Body).Decode(&req)
		switch r.URL.Path {
		case "/warm/poll":
			select {
			case l := <-c.leases:
				json.NewEncoder(w).Encode(l)
			case <-r.Context().Done():
			case <-time.After(500 * time.Millisecond): // a long poll that found nothing
				w.WriteHeader(http.StatusNoContent)
			}
		case "/warm/renew":
			c.mu.Lock()
			stop := c.stops[req.Run]
			if c.doneTries[req.Run] > 0 {
				c.renewedAfterDone[req.Run]++
			}
			c.mu.Unlock()
			if stop == nil {
				http.Error(w, "not leased", http.StatusConflict)
				return
			}
			select {
			case <-stop:
				json.NewEncoder(w).Encode(map[string]any{"stop": true, "why": "the test cancelled the job"})
			case <-r.Context().Done():
			case <-time.After(200 * time.Millisecond): // the service holds a renewal a moment
				json.NewEncoder(w).Encode(map[string]any{"stop": false})
			}
		case "/warm/done":
			c.mu.Lock()
			defer c.mu.Unlock()
			if c.doneTries[req.Run]++; c.doneTries[req.Run] <= c.failDone {
				http.Error(w, "etcd is away", http.StatusServiceUnavailable)
				return
			}
			c.outcomes[req.Run] = append(c.outcomes[req.Run], req.Outcome)
			c.whys[req.Run] = append(c.whys[req.Run], req.Why)
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(c.srv.Close)
	return c
}

// submit queues m as the next lease and returns its run.
func (c *warmControl) submit(m mj.Manifest) string {
	b, err := json.Marshal(m)
	if err != nil {
		panic(err)
	}
	run := uuid.NewString()
	c.mu.Lock()
	c.next++
	id := c.next
	c.stops[run] = make(chan struct{})
	c.mu.Unlock()
	c.leases <- lease{Run: run, Lease: id, TTLSeconds: 30, JobID: m.JobID, Attempt: m.Attempt, Manifest: b}
	return run
}

// stop makes renew answer {"stop":true} for run.
func (c *warmControl) stop(run string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	close(c.stops[run])
}

func (c *warmControl) ran(run string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.ended[run] = true
	close(c.changed)
	c.changed = make(chan struct{})
}

// waitRan waits until the warm runner has ended run (reported, removed its
// directory) and returns the outcomes it reported. why, when set, says what
// may hold the run when it does not end.
func (c *warmControl) waitRan(t *testing.T, run string, why ...func() string) []string {
	t.Helper()
	deadline := time.After(3 * time.Minute)
	for {
		c.mu.Lock()
		ended, changed, outcomes := c.ended[run], c.changed, c.outcomes[run]
		c.mu.Unlock()
		if ended {
			return outcomes
		}
		select {
		case <-changed:
		case <-deadline:
			var more []string
			for _, f := range why {
				more = append(more, f())
			}
			t.Fatalf("the warm runner did not end run %s within 3m %s", run, strings.Join(more, "; "))
		}
	}
}

// lockedTail keeps the end of the warm runner's log, written from its goroutines.
type lockedTail struct {
	mu sync.Mutex
	b  tailBuffer
}

func (l *lockedTail) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

// startWarm serves c with a warm runner running ffmpeg (real bwrap, ffprobe)
// until the test ends.
func startWarm(t *testing.T, c *warmControl, ffmpeg string) *Warm {
	return startWarmWith(t, c, ffmpeg, testenv.Binary(t, "bwrap"))
}

// startWarmWith is startWarm with bwrap as the bubblewrap binary.
func startWarmWith(t *testing.T, c *warmControl, ffmpeg, bwrap string) *Warm {
	tok := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tok, []byte(c.token+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	log := &lockedTail{b: tailBuffer{max: 64 << 10}}
	w := &Warm{Control: c.srv.URL, Pool: "warm-test", TokenFile: tok, WorkRoot: t.TempDir(), FFmpeg: ffmpeg,
		FFprobe: testenv.Binary(t, "ffprobe"), Bwrap: bwrap, Log: log, Ran: c.ran}
	ctx, cancel := context.WithCancel(context.Background())
	served := make(chan error, 1)
	go func() { served <- w.Serve(ctx) }()
	t.Cleanup(func() {
		cancel()
		select {
		case err := <-served:
			if err != nil {
				t.Errorf("Serve: %v", err)
			}
		case <-time.After(time.Minute):
			t.Errorf("Serve did not return within 1m of its context's end")
		}
		if t.Failed() {
			log.mu.Lock()
			t.Logf("the warm runner's log (its end):\n%s", log.b.String())
			log.mu.Unlock()
		}
	})
	return w
}

// compromisedFFmpeg is an ffmpeg that runs code of the job's choosing, as one
// exploited by a crafted file would: with "-mjsh FILE" among its arguments it
// runs FILE with sh in the sandbox; otherwise it is the real ffmpeg at ff,
// which must be under /usr to be seen in the sandbox.
func compromisedFFmpeg(t *testing.T, ff string) string {
	real, err := filepath.EvalSymlinks(ff)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(real, "/usr/") {
		t.Fatalf("ffmpeg is at %s: the sandbox shows only /usr, so a wrapper cannot run it there", real)
	}
	return fakeBinary(t, "ffmpeg", `prev=
for a in "$@"; do
	[ "$prev" = -mjsh ] && exec /bin/sh "$a"
	prev=$a
done
exec `+real+` "$@"
`)
}

// procsWith lists the host's processes whose command line holds s, as
// "pid N: command line".
func procsWith(s string) []string {
	ents, _ := os.ReadDir("/proc")
	var found []string
	for _, e := range ents {
		if e.Name()[0] < '0' || e.Name()[0] > '9' {
			continue
		}
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err == nil && bytes.Contains(b, []byte(s)) {
			found = append(found, fmt.Sprintf("pid %s: %s", e.Name(), strings.TrimSpace(strings.ReplaceAll(string(b), "\x00", " "))))
		}
	}
	return found
}

// killProcsWith kills, when the test ends, the processes whose command line
// holds s: what a failed containment check left running. Registered after
// startWarm, it runs first, and frees a runner waiting on them.
func killProcsWith(t *testing.T, s string) {
	t.Cleanup(func() {
		for _, p := range procsWith(s) {
			var pid int
			if _, err := fmt.Sscanf(p, "pid %d:", &pid); err == nil {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
}

// uploaded returns the upload whose path ends in suffix.
func (u *uploads) uploaded(suffix string) ([]byte, bool) {
	u.mu.Lock()
	defer u.mu.Unlock()
	for name, b := range u.files {
		if strings.HasSuffix(name, suffix) {
			return b, true
		}
	}
	return nil, false
}

// TestWarmSandboxHoldsForEachJob runs the escape suite's attacks (escape_test.go,
// where each is shown to get out without the sandbox) as successive jobs of one
// warm runner, the checker bypassed: each runs in its own sandbox and gets
// nothing out. The attack that plants a link in the job does it with an earlier
// command of a compromised ffmpeg, as the job runs whole here.
func TestWarmSandboxHoldsForEachJob(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	bypassChecker(t)
	c := newWarmControl(t)
	w := startWarm(t, c, compromisedFFmpeg(t, ff))

	job := func(t *testing.T, e *escapeEnv, inputs map[string][]byte, cmds, outputs []string) *uploads {
		srv, up := newServer(t, inputs)
		m := mj.Manifest{JobID: "job-" + uuid.NewString()[:8], Attempt: 1, InputFiles: map[string]string{}, OutputNames: outputs,
			FFmpegCommands: cmds, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", AllowLoopback: true, TimeoutSeconds: 60}
		for n := range inputs {
			m.InputFiles[n] = srv.URL + "/in/" + n
		}
		run := c.submit(m)
		// The job ran in the sandbox (a worker fault, or a job never run, is no
		// "reported") and its result went up.
		if got := c.waitRan(t, run); len(got) != 1 || got[0] != "reported" {
			t.Fatalf("outcomes reported: %q, want [reported]", got)
		}
		if _, ok := up.uploaded("/result.json"); !ok {
			t.Fatal("no result.json uploaded")
		}
		work := filepath.Join(w.WorkRoot, run)
		if _, err := os.Lstat(work); !os.IsNotExist(err) {
			t.Errorf("the job's directory %s is left after it (%v)", work, err)
		}
		if how := e.leaked(t, work, up); how != "" {
			t.Fatalf("escaped the sandbox of a warm runner's job: %s", how)
		}
		return up
	}
	for _, a := range bypassAttacks() {
		t.Run(a.name, func(t *testing.T) {
			e := newEscapeEnv(t)
			inputs := map[string][]byte{}
			if a.inputs != nil {
				for n, content := range a.inputs(e) {
					inputs[n] = []byte(content)
				}
			}
			job(t, e, inputs, []string{a.command(e)}, a.outputs)
		})
	}
	for _, a := range openedAttacks() {
		t.Run(a.name, func(t *testing.T) {
			e := newEscapeEnv(t)
			inputs, cmd := a.job(t, e)
			cmds := []string{cmd}
			if a.plant != nil {
				if a.plantSh == nil {
					t.Fatal("the attack plants from the host only: give it a plantSh")
				}
				inputs["plant.sh"] = []byte(a.plantSh(e) + " && echo planted >&2\n")
				cmds = []string{"-mjsh inputs/plant.sh", cmd}
			}
			up := job(t, e, inputs, cmds, []string{"out.raw"})
			if a.plant != nil {
				if log, _ := up.uploaded("/logs/1.log"); !bytes.Contains(log, []byte("planted")) {
					t.Fatalf("the first command planted nothing (its log: %q): the attack proves nothing", log)
				}
			}
		})
	}
}

// jobA is what a compromised ffmpeg of job A leaves for the next job of the
// same warm runner: processes that outlive its command (@M@, its marker, in
// each one's command line; they ignore the usual signals), a file wherever it
// can write (it reports which writes succeeded), a FIFO with a writer blocked
// on it, and a unix socket with a listener. It holds on until the host, having
// seen its processes, creates /job/go. The processes fork with setsid -f
// and perl scripts (written when the sandbox's /dev/null did not open, which
// dash's "cmd &" and perl -e need), their output going to $E. They close ffmpeg's progress pipe (fd 3), which the
// runner reads to its end: one that outlived A would show here, not hold A.
const jobA = `M=@M@
R=/job/outputs/a-report.txt
E="/job/$M.err"
: > "$R"
loop='trap "" HUP INT TERM; while :; do sleep 1; done'
setsid -f sh -c "$loop" "$M-setsid" <&- 3>&- >>"$E" 2>&1
setsid -f nohup sh -c "$loop" "$M-nohup" <&- 3>&- >>"$E" 2>&1
echo 'fork and exit; fork and exit; exec @ARGV' > /job/daemon.pl
perl /job/daemon.pl sh -c "$loop" "$M-daemon" <&- 3>&- >>"$E" 2>&1
for d in /job /job/inputs /job/outputs /job/logs "$HOME" "$TMPDIR" "$PWD" /tmp /var/tmp /dev/shm /dev/mqueue /dev /run /run/lock \
	/var /root /home / /etc /usr /usr/local /usr/bin /sys/fs/cgroup /proc /opt /mnt @OUTSIDE@; do
	if mkdir -p "$d" 2>>"$E" && echo "$M" > "$d/$M.file" 2>>"$E"; then echo "wrote $d" >> "$R"; else echo "refused $d" >> "$R"; fi
done
mkfifo "/job/$M.fifo" && echo fifo >> "$R"
setsid -f sh -c 'echo x > "$0"' "/job/$M.fifo" <&- 3>&- >>"$E" 2>&1
echo 'fork and exit; socket(S, PF_UNIX, SOCK_STREAM, 0) or die; bind(S, pack_sockaddr_un($ARGV[0])) or die; listen(S, 1); sleep 600' > /job/listen.pl
perl -MSocket /job/listen.pl "/job/$M.sock" <&- 3>&- >>"$E" 2>&1
i=0
while [ ! -S "/job/$M.sock" ] && [ $i -lt 200 ]; do sleep 0.1; i=$((i+1)); done
[ -S "/job/$M.sock" ] && echo socket >> "$R"
while [ ! -e /job/go ]; do sleep 0.1; done
echo done >> "$R"
`

// bControl is what job B plants in its own directory and must find: proof that
// its search sees what is there.
const bControl = "mjwarmBcontrol"

// jobB looks, from the next job's sandbox, for anything of A's: a name or a
// content holding A's marker (written in two halves, so that B's own files
// never hold it), any FIFO or socket, and A's directory on the host. It
// reports each finding (in its environment too), then "search done". Its control (bControl, a file and
// a FIFO) is among the findings.
const jobB = `P="@M1@""@M2@"
Q="mjwarmB""control"
R=/job/outputs/b-report.txt
E=/job/search.err
echo "$Q" > "/job/$Q.file"
mkfifo "/job/$Q.fifo"
names=$(find / \( -path /proc -o -path /sys \) -prune -o \( -name "*$P*" -o -name "*$Q*" \) -print 2>>"$E")
content=$(grep -roF -D skip --exclude-dir=proc --exclude-dir=sys --exclude-dir=dev --exclude-dir=usr -e "$P" -e "$Q" / 2>>"$E" | sort -u)
special=$(find / \( -path /proc -o -path /sys -o -path /usr \) -prune -o \( -type p -o -type s \) -print 2>>"$E")
envs=$(env | grep -F -e "$P")
{
	for f in $names; do echo "name: $f"; done
	for f in $content; do echo "content: $f"; done
	for f in $special; do echo "FIFO or socket: $f"; done
	for f in $envs; do echo "environment: $f"; done
	for d in @ADIR@ @OUTSIDE@; do [ -e "$d" ] && echo "visible: $d"; done
	echo "search done"
} > "$R"
`

// TestWarmJobsLeaveNothingToTheNext: job A, hostile (a compromised ffmpeg, the
// checker bypassed), leaves processes, files, a FIFO and a socket behind on a
// warm runner; after it, none of its processes lives on the host, its
// directory is gone, and job B of another account, as hostile, finds nothing of
// A's from its own sandbox.
func TestWarmJobsLeaveNothingToTheNext(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	perl := testenv.Binary(t, "perl") // A's unix socket
	if real, _ := filepath.EvalSymlinks(perl); !strings.HasPrefix(real, "/usr/") {
		t.Fatalf("perl is at %s: the sandbox shows only /usr", real)
	}
	bypassChecker(t)
	c := newWarmControl(t)
	w := startWarm(t, c, compromisedFFmpeg(t, ff))
	outside := t.TempDir() // a host directory A tries too
	marker := fmt.Sprintf("mjwarmA%d", time.Now().UnixNano())
	killProcsWith(t, marker)

	// Job A.
	srvA, upA := newServer(t, map[string][]byte{"a.sh": []byte(strings.NewReplacer("@M@", marker, "@OUTSIDE@", outside).Replace(jobA))})
	runA := c.submit(mj.Manifest{JobID: "job-a", Attempt: 1, InputFiles: map[string]string{"a.sh": srvA.URL + "/in/a.sh"}, OutputNames: []string{"a-report.txt"},
		FFmpegCommands: []string{"-mjsh inputs/a.sh"}, UploadURL: srvA.URL + "/up/%7Bpath%7D?sig=ok", AllowLoopback: true, TimeoutSeconds: 120})
	dirA := filepath.Join(w.WorkRoot, runA)
	// Control: the host sees A's processes while A runs (the setsid, nohup and
	// double-forked loops, the FIFO's writer, the socket's listener).
	testenv.Eventually(t, time.Minute, "job A's five processes on the host", func() bool { return len(procsWith(marker)) >= 5 })
	if err := os.WriteFile(filepath.Join(dirA, "go"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	aLeft := func() string { return fmt.Sprintf("(job A's processes on the host: %q)", procsWith(marker)) }
	if got := c.waitRan(t, runA, aLeft); len(got) != 1 || got[0] != "reported" {
		t.Fatalf("job A: outcomes %q, want [reported]", got)
	}
	report, ok := upA.uploaded("/a-report.txt")
	if !ok || !bytes.HasSuffix(report, []byte("done\n")) {
		t.Fatalf("job A did not run to its end: report %q", report)
	}
	var wrote, refused []string
	for _, line := range strings.Split(strings.TrimSpace(string(report)), "\n") {
		if d, ok := strings.CutPrefix(line, "wrote "); ok {
			wrote = append(wrote, d)
			if d != "/job" && !strings.HasPrefix(d, "/job/") {
				t.Errorf("job A wrote outside its directory, in %s", d)
			}
		} else if d, ok := strings.CutPrefix(line, "refused "); ok {
			refused = append(refused, d)
		}
	}
	t.Logf("job A could write in %v; was refused in %v", wrote, refused)
	for _, want := range []string{"wrote /job/outputs", "fifo", "socket"} {
		if !bytes.Contains(report, []byte(want+"\n")) {
			t.Errorf("job A could not make its %q: the check of it proves nothing (report %q)", want, report)
		}
	}

	// After A, on the host: none of its processes, nothing of its directory,
	// nothing of its in the shared places.
	if left := procsWith(marker); len(left) > 0 {
		t.Errorf("job A's processes outlived it: %s", strings.Join(left, "; "))
	}
	if _, err := os.Lstat(dirA); !os.IsNotExist(err) {
		t.Errorf("job A's directory %s is left after it (%v)", dirA, err)
	}
	hostTraces := func() []string {
		var found []string
		filepath.WalkDir(w.WorkRoot, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if strings.Contains(d.Name(), marker) {
				found = append(found, p)
			} else if d.Type().IsRegular() {
				if b, _ := os.ReadFile(p); bytes.Contains(b, []byte(marker)) {
					found = append(found, p+" (its content)")
				}
			}
			return nil
		})
		for _, dir := range []string{os.TempDir(), "/tmp", "/var/tmp", "/dev/shm", outside} {
			ents, _ := os.ReadDir(dir)
			for _, e := range ents {
				if strings.Contains(e.Name(), marker) {
					found = append(found, filepath.Join(dir, e.Name()))
				}
			}
		}
		return found
	}
	if found := hostTraces(); len(found) > 0 {
		t.Errorf("job A left on the host: %s", strings.Join(found, ", "))
	}

	// Job B, of another account, looks for A from its own sandbox.
	script := strings.NewReplacer("@M1@", marker[:len(marker)/2], "@M2@", marker[len(marker)/2:], "@ADIR@", dirA, "@OUTSIDE@", outside).Replace(jobB)
	if strings.Contains(script, marker) {
		t.Fatal("job B's script holds A's marker: it would find itself")
	}
	srvB, upB := newServer(t, map[string][]byte{"b.sh": []byte(script)})
	runB := c.submit(mj.Manifest{JobID: "job-b-other-account", Attempt: 1, InputFiles: map[string]string{"b.sh": srvB.URL + "/in/b.sh"}, OutputNames: []string{"b-report.txt"},
		FFmpegCommands: []string{"-mjsh inputs/b.sh"}, UploadURL: srvB.URL + "/up/%7Bpath%7D?sig=ok", AllowLoopback: true, TimeoutSeconds: 120})
	if got := c.waitRan(t, runB, aLeft); len(got) != 1 || got[0] != "reported" {
		t.Fatalf("job B: outcomes %q, want [reported]", got)
	}
	report, ok = upB.uploaded("/b-report.txt")
	if !ok || !bytes.HasSuffix(report, []byte("search done\n")) {
		t.Fatalf("job B did not finish its search: report %q", report)
	}
	var control []string
	for _, line := range strings.Split(strings.TrimSpace(string(report)), "\n") {
		switch {
		case strings.Contains(line, bControl):
			control = append(control, line)
		case line != "search done":
			t.Errorf("job B found %s", line)
		}
	}
	for _, want := range []string{"name: /job/" + bControl + ".file", "content: /job/" + bControl + ".file:", "FIFO or socket: /job/" + bControl + ".fifo"} {
		if !slices.ContainsFunc(control, func(l string) bool { return strings.HasPrefix(l, want) }) {
			t.Errorf("job B's search missed its own %q (it found %q): it proves nothing", want, control)
		}
	}
	upB.mu.Lock()
	for name, b := range upB.files {
		if bytes.Contains(b, []byte(marker)) {
			t.Errorf("job B's upload %s holds A's marker", name)
		}
	}
	upB.mu.Unlock()
	if left := procsWith(marker); len(left) > 0 {
		t.Errorf("job A's processes live on after job B: %s", strings.Join(left, "; "))
	}
	if _, err := os.Lstat(filepath.Join(w.WorkRoot, runB)); !os.IsNotExist(err) {
		t.Errorf("job B's directory is left after it (%v)", err)
	}
	if found := hostTraces(); len(found) > 0 {
		t.Errorf("after job B, the host holds of A's: %s", strings.Join(found, ", "))
	}
}

// TestWarmStopEndsTheJobsFFmpeg: when renew says stop while the job's ffmpeg
// runs, that ffmpeg (and its sandbox) is gone from the host shortly after, and
// the run is not reported as done with a result.
func TestWarmStopEndsTheJobsFFmpeg(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	c := newWarmControl(t)
	w := startWarm(t, c, ff)
	marker := fmt.Sprintf("mjwarmstop%d", time.Now().UnixNano())
	killProcsWith(t, marker)
	srv, up := newServer(t, nil)
	run := c.submit(mj.Manifest{JobID: "job-stop", Attempt: 1, OutputNames: []string{marker + ".nut"}, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", TimeoutSeconds: 600,
		FFmpegCommands: []string{"-re -f lavfi -i testsrc=size=64x64:rate=10 -t 300 -c:v rawvideo -f nut outputs/" + marker + ".nut"}})
	var ffmpeg string
	testenv.Eventually(t, time.Minute, "the job's ffmpeg running on the host", func() bool {
		for _, p := range procsWith(marker) {
			_, cmdline, _ := strings.Cut(p, ": ")
			if argv0, _, _ := strings.Cut(cmdline, " "); filepath.Base(argv0) == "ffmpeg" {
				ffmpeg = p
				return true
			}
		}
		return false
	})
	c.stop(run)
	deadline := time.Now().Add(30 * time.Second)
	for left := procsWith(marker); len(left) > 0; left = procsWith(marker) {
		if time.Now().After(deadline) {
			t.Fatalf("30s after the stop, the job's processes live on (its ffmpeg was %s): %s", ffmpeg, strings.Join(left, "; "))
		}
		time.Sleep(50 * time.Millisecond)
	}
	got := c.waitRan(t, run)
	for _, o := range got {
		if o != "stopped" {
			t.Errorf("a stopped run was reported %q; want nothing, or stopped", o)
		}
	}
	if _, ok := up.uploaded("/result.json"); ok {
		t.Error("a stopped run uploaded a result")
	}
	if _, err := os.Lstat(filepath.Join(w.WorkRoot, run)); !os.IsNotExist(err) {
		t.Errorf("the stopped job's directory is left after it (%v)", err)
	}
}

// TestWarmDoneRetriedWhileTheLeaseHolds: /warm/done fails for a while after the
// result is up (a gateway restarting behind the load balancer, etcd away). The
// runner keeps renewing the lease meanwhile and tries done until it is taken:
// the run is reported once, never left to lapse into a rerun. Once the lease
// is gone (renew answers 409), it stops trying: the service reads the result.
func TestWarmDoneRetriedWhileTheLeaseHolds(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	c := newWarmControl(t)
	c.failDone = 6 // more than the 5 tries the runner once gave up after
	startWarm(t, c, ff)
	srv, up := newServer(t, nil)
	job := func(id string) string {
		return c.submit(mj.Manifest{JobID: id, Attempt: 1, OutputNames: []string{"o.nut"}, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", TimeoutSeconds: 60,
			FFmpegCommands: []string{"-f lavfi -i testsrc=size=32x32:rate=5 -t 1 -c:v rawvideo -f nut outputs/o.nut"}})
	}
	run := job("job-done-late")
	got := c.waitRan(t, run)
	c.mu.Lock()
	tries, renewed := c.doneTries[run], c.renewedAfterDone[run]
	c.mu.Unlock()
	if len(got) != 1 || got[0] != "reported" || tries != c.failDone+1 {
		t.Fatalf("done taken %q after %d tries; want [reported] once, after %d", got, tries, c.failDone+1)
	}
	if renewed == 0 {
		t.Fatal("the runner stopped renewing its lease before done was taken: the lease could lapse with the result up")
	}
	if _, ok := up.uploaded("/result.json"); !ok {
		t.Fatal("no result.json uploaded")
	}

	// Done never taken, and then the lease goes: the runner stops trying and
	// moves on.
	c.mu.Lock()
	c.failDone = 1 << 30
	c.mu.Unlock()
	run = job("job-done-never")
	testenv.Eventually(t, 3*time.Minute, "a done call of the second run", func() bool {
		c.mu.Lock()
		defer c.mu.Unlock()
		return c.doneTries[run] > 0
	})
	c.mu.Lock()
	delete(c.stops, run) // renew answers 409: the lease is gone
	c.mu.Unlock()
	if got := c.waitRan(t, run); len(got) != 0 {
		t.Fatalf("done taken %q for a run whose lease is gone", got)
	}
}

// A manifest too large for the lease is fetched from its signed link; when that
// fails, the fault the runner reports (the job's message) names no signature.
func TestWarmManifestFaultNamesNoSignature(t *testing.T) {
	testenv.Binary(t, "bwrap")
	c := newWarmControl(t)
	startWarm(t, c, testenv.Binary(t, "ffmpeg"))
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // its address refuses connections
	b, _ := json.Marshal(mj.Manifest{JobID: "job-big", Attempt: 1, ManifestURL: gone.URL + "/manifest.json?exp=1&sig=s3cr3tsignature"})
	run := uuid.NewString()
	c.mu.Lock()
	c.stops[run] = make(chan struct{})
	c.mu.Unlock()
	c.leases <- lease{Run: run, Lease: 1, TTLSeconds: 30, JobID: "job-big", Attempt: 1, Manifest: b}
	got := c.waitRan(t, run)
	c.mu.Lock()
	whys := c.whys[run]
	c.mu.Unlock()
	if len(got) != 1 || got[0] != "fault" || len(whys) != 1 || !strings.Contains(whys[0], "manifest") {
		t.Fatalf("a manifest that could not be fetched: outcomes %q why %q; want one fault", got, whys)
	}
	if strings.Contains(whys[0], "sig=") || strings.Contains(whys[0], "s3cr3t") {
		t.Fatalf("the fault names the manifest's signed link: %q", whys[0])
	}
}

// TestWarmTokenOutOfReach: the warm runner's Nomad identity token (its
// TokenFile, on the host) is a canary. Jobs with the checker bypassed name its
// absolute host path the ways ffmpeg opens files from inside a job (a -safe 0
// concat list, an HLS playlist with its extension checks off, /proc/self/root,
// the file: protocol, a plain -i): none of its bytes reaches an output, a log
// or the result.
func TestWarmTokenOutOfReach(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	bypassChecker(t)
	c := newWarmControl(t)
	w := startWarm(t, c, ff)
	path := w.TokenFile
	secret := strings.TrimSpace(c.token)
	if secret == "" {
		t.Fatal("no token to look for")
	}
	copyOut := " -map 0 -c copy -f data outputs/out.raw"
	for _, a := range []struct {
		name   string
		inputs map[string][]byte
		cmd    string
	}{
		{"concat list -safe 0", map[string][]byte{"l.txt": []byte("ffconcat version 1.0\nfile '" + path + "'\n")}, "-f concat -safe 0 -i inputs/l.txt" + copyOut},
		{"HLS playlist", map[string][]byte{"p.m3u8": []byte("#EXTM3U\n#EXT-X-TARGETDURATION:1\n#EXTINF:1,\n" + path + "\n#EXT-X-ENDLIST\n")},
			"-allowed_extensions ALL -allowed_segment_extensions ALL -extension_picky 0 -i inputs/p.m3u8" + copyOut},
		{"/proc/self/root", nil, "-f data -i /proc/self/root" + path + copyOut},
		{"file: protocol", nil, "-f data -i file:" + path + copyOut},
		{"absolute path", nil, "-f data -i " + path + copyOut},
	} {
		t.Run(a.name, func(t *testing.T) {
			srv, up := newServer(t, a.inputs)
			m := mj.Manifest{JobID: "job-" + uuid.NewString()[:8], Attempt: 1, InputFiles: map[string]string{}, OutputNames: []string{"out.raw"},
				FFmpegCommands: []string{a.cmd}, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", AllowLoopback: true, TimeoutSeconds: 60}
			for n := range a.inputs {
				m.InputFiles[n] = srv.URL + "/in/" + n
			}
			run := c.submit(m)
			if got := c.waitRan(t, run); len(got) != 1 || got[0] != "reported" {
				t.Fatalf("outcomes reported: %q, want [reported]", got)
			}
			res, ok := up.uploaded("/result.json")
			if !ok {
				t.Fatal("no result.json uploaded")
			}
			up.mu.Lock()
			defer up.mu.Unlock()
			for name, b := range up.files {
				if bytes.Contains(b, []byte(secret)) {
					t.Fatalf("the runner's identity token is in %s", name)
				}
			}
			t.Logf("result: %.300s", res)
		})
	}
	// The control: the same copy of a file the job has does carry its bytes,
	// so the attacks above would have shown the token had they reached it.
	srv, up := newServer(t, map[string][]byte{"t": []byte(secret)})
	run := c.submit(mj.Manifest{JobID: "job-control", Attempt: 1, InputFiles: map[string]string{"t": srv.URL + "/in/t"}, OutputNames: []string{"out.raw"},
		FFmpegCommands: []string{"-f data -i inputs/t" + copyOut}, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", AllowLoopback: true, TimeoutSeconds: 60})
	c.waitRan(t, run)
	if out, _ := up.uploaded("/outputs/out.raw"); !bytes.Contains(out, []byte(secret)) {
		t.Fatalf("the control copy does not carry its input's bytes (%d bytes): the check above proves nothing", len(out))
	}
}
