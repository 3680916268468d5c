package runner

import (
	"context"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/sandbox"
	"github.com/mediajobs/mediajobs/testenv"
)

// fakeBinary writes an executable shell script: what a compromised ffmpeg or
// ffprobe could run, inside the real sandbox.
func fakeBinary(t *testing.T, name, script string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSandboxLeavesNoSetuidFileOrFIFO: the sandbox's user is the runner's
// (root here), so a compromised ffmpeg can make a setuid-root file, a setgid
// directory or a FIFO in the job's directory. After the command, none is left
// on the host.
func TestSandboxLeavesNoSetuidFileOrFIFO(t *testing.T) {
	testenv.Binary(t, "bwrap")
	ff := fakeBinary(t, "ffmpeg", `cp /bin/sh outputs/sh && chmod 6755 outputs/sh &&
mkdir outputs/d && chmod 3777 outputs/d && mkfifo inputs/fifo && echo ok > planted
`)
	srv, _ := newServer(t, nil)
	m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"sh"}, FFmpegCommands: []string{"-f lavfi -i sine=d=0.1 outputs/sh"},
		UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", TimeoutSeconds: 60}
	work := t.TempDir()
	if _, err := (&Runner{WorkDir: work, Log: io.Discard, FFmpeg: ff, Sandbox: &sandbox.Bwrap{}}).Run(context.Background(), &m); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(work, "planted")); err != nil {
		t.Fatalf("the fake ffmpeg did not plant its files in the sandbox: %v", err)
	}
	filepath.WalkDir(work, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			t.Fatal(err)
		}
		info, _ := d.Info()
		if info.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky) != 0 {
			t.Errorf("%s kept special mode bits: %v", p, info.Mode())
		}
		if info.Mode()&(fs.ModeNamedPipe|fs.ModeDevice|fs.ModeSocket) != 0 {
			t.Errorf("%s is left on the host: %v", p, info.Mode())
		}
		return nil
	})
}

// TestProbeCannotWriteTheJob: ffprobe sees the job's directory read-only.
func TestProbeCannotWriteTheJob(t *testing.T) {
	testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	probe := fakeBinary(t, "ffprobe", "echo x > /job/probe-wrote; echo x > /job/outputs/out.wav; echo '{}'\n")
	srv, up := newServer(t, nil)
	m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"out.wav"}, FFmpegCommands: []string{"-f lavfi -i sine=d=0.1 outputs/out.wav"},
		UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", TimeoutSeconds: 60}
	work := t.TempDir()
	res, err := (&Runner{WorkDir: work, Log: io.Discard, FFprobe: probe, Sandbox: &sandbox.Bwrap{}}).Run(context.Background(), &m)
	if err != nil || !res.Succeeded {
		t.Fatalf("job: %v %+v", err, res)
	}
	if _, err := os.Stat(filepath.Join(work, "probe-wrote")); err == nil {
		t.Fatal("ffprobe wrote into the job's directory")
	}
	up.mu.Lock()
	defer up.mu.Unlock()
	for name, b := range up.files {
		if strings.HasSuffix(name, "out.wav") && len(b) < 100 {
			t.Fatalf("ffprobe overwrote the output (%d bytes uploaded)", len(b))
		}
	}
}

// TestSandboxCapsProcesses: a fork bomb in the sandbox (a compromised ffmpeg)
// and a thread bomb (ffmpeg's own -filter_threads, the checker bypassed) stop
// at the job's cap.
func TestSandboxCapsProcesses(t *testing.T) {
	testenv.Binary(t, "ffmpeg")
	testenv.Binary(t, "bwrap")
	const max = 40
	t.Run("fork bomb", func(t *testing.T) {
		// Each process starts the next and waits for it: count is how many
		// were alive at once.
		ff := fakeBinary(t, "ffmpeg", `[ -f count ] || echo 0 > count
read n < count; n=$((n+1)); echo $n > count
[ $n -lt 300 ] && "$0"
exit 0
`)
		srv, _ := newServer(t, nil)
		m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"x"}, FFmpegCommands: []string{"-f lavfi -i sine=d=0.1 outputs/x"},
			UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", TimeoutSeconds: 60}
		work := t.TempDir()
		if _, err := (&Runner{WorkDir: work, Log: io.Discard, FFmpeg: ff, Sandbox: &sandbox.Bwrap{}, MaxProcs: max}).Run(context.Background(), &m); err != nil {
			t.Fatal(err)
		}
		b, err := os.ReadFile(filepath.Join(work, "count"))
		if err != nil {
			t.Fatalf("the fork bomb did not start: %v", err)
		}
		if n, _ := strconv.Atoi(strings.TrimSpace(string(b))); n == 0 || n > max {
			t.Fatalf("the job started %s processes; the cap is %d", strings.TrimSpace(string(b)), max)
		}
	})
	t.Run("ffmpeg threads", func(t *testing.T) {
		bypassChecker(t)
		srv, _ := newServer(t, nil)
		m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"x.nut"}, TimeoutSeconds: 60, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok",
			FFmpegCommands: []string{"-f lavfi -i testsrc=d=1:size=320x240 -filter_threads 300 -vf scale=160:120 -f nut outputs/x.nut"}}
		// ffmpeg runs on with the threads it got: the cap shows in the log.
		for _, capped := range []bool{false, true} {
			var log strings.Builder
			r := &Runner{WorkDir: t.TempDir(), Log: &log, Sandbox: &sandbox.Bwrap{}}
			if capped {
				r.MaxProcs = max
			}
			if _, err := r.Run(context.Background(), &m); err != nil {
				t.Fatal(err)
			}
			hit := strings.Contains(log.String(), "reached its cap")
			if !capped && hit {
				t.Fatalf("control: 300 filter threads reached the default cap: %s", lastLines(log.String(), 3))
			}
			if capped && !hit {
				t.Fatalf("ffmpeg started 300 filter threads under a cap of %d: %s", max, lastLines(log.String(), 3))
			}
		}
	})
}

// TestOwnFilesArePinned: the service's own files skip the SSRF guard (the
// gateway here is on loopback, which inputs may not reach), but only at exactly
// its scheme, host, port and /files/ path, and never through a redirect.
func TestOwnFilesArePinned(t *testing.T) {
	var hits atomic.Int32
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/files/tmp/redirect" {
			http.Redirect(w, r, "/internal/secret", http.StatusFound)
			return
		}
		if !strings.HasPrefix(r.URL.Path, "/files/") {
			hits.Add(1)
		}
		w.Write([]byte("bytes of " + r.URL.Path))
	}))
	defer svc.Close()
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Write([]byte("other"))
	}))
	defer other.Close()
	_, otherPort, _ := net.SplitHostPort(strings.TrimPrefix(other.URL, "http://"))
	fetch := func(u string) *State {
		m := mj.Manifest{InputFiles: map[string]string{"v": u}, OutputNames: []string{"o.wav"}, FFmpegCommands: []string{"-i {{v}} {{o.wav}}"},
			UploadURL: svc.URL + "/files/jobs/j/a1/%7Bpath%7D?m=PUT&sig=s"}
		return (&Runner{WorkDir: t.TempDir(), Log: io.Discard}).Fetch(context.Background(), &m)
	}
	if st := fetch(svc.URL + "/files/tmp/acct/abc?sig=s"); st.Failed {
		t.Fatalf("own file on loopback: %s", st.Error)
	}
	if st := fetch(svc.URL + "/files/tmp/redirect?sig=s"); !st.Failed || !strings.Contains(st.Error, "redirect") {
		t.Fatalf("a redirect from an own file: failed=%v %q, want refused", st.Failed, st.Error)
	}
	for _, u := range []string{
		svc.URL + "/files/../internal/secret",
		svc.URL + "/files/%2e%2e/internal/secret",
		svc.URL + "/files//../internal/secret",
		"http://127.0.0.1:" + otherPort + "/files/tmp/acct/abc",
		strings.Replace(svc.URL, "http://", "http://user@", 1) + "/files/tmp/acct/abc",
	} {
		if st := fetch(u); !st.Failed || !strings.Contains(st.Error, "loopback") {
			t.Errorf("%s: failed=%v %q, want the SSRF guard's refusal", u, st.Failed, st.Error)
		}
	}
	if n := hits.Load(); n > 0 {
		t.Fatalf("%d request(s) reached a path or port outside the service's /files/", n)
	}
}

// A worker that cannot run jobs (here: it could not cap their processes) reports
// no result, so the dispatcher retries the job, elsewhere if Nomad can; the job
// is not failed for the node's fault.
func TestWorkerFaultReportsNothing(t *testing.T) {
	srv, up := newServer(t, nil)
	m := mj.Manifest{JobID: "job-1", Attempt: 1, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", TimeoutSeconds: 60,
		OutputNames: []string{"o.wav"}, FFmpegCommands: []string{"-f lavfi -i sine=duration=1 {{o.wav}}"}}
	r := &Runner{WorkDir: t.TempDir(), Log: io.Discard, FFmpeg: testenv.Binary(t, "ffmpeg")}
	st := r.Fetch(context.Background(), &m)
	st.WorkerFault = "the worker could not cap the job's processes"
	res, err := r.Upload(context.Background(), &m, st)
	if err == nil || res != nil || !strings.Contains(err.Error(), "retried") {
		t.Fatalf("upload after a worker fault: %v, %v; want an error and no result", res, err)
	}
	if _, ok := up.files["result.json"]; ok {
		t.Fatal("a faulty worker uploaded a result")
	}
}
