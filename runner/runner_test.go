package runner

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

// uploads is a loopback server that serves inputs under /in/ and takes PUTs under /up/.
type uploads struct {
	mu    sync.Mutex
	files map[string][]byte
}

func newServer(t *testing.T, inputs map[string][]byte) (*httptest.Server, *uploads) {
	u := &uploads{files: map[string][]byte{}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.Method == "GET" && strings.HasPrefix(r.URL.Path, "/in/"):
			b, ok := inputs[strings.TrimPrefix(r.URL.Path, "/in/")]
			if !ok {
				http.NotFound(w, r)
				return
			}
			w.Write(b)
		case r.Method == "POST" && r.URL.Path == "/links": // the gateway's /upload-urls/
			var req struct {
				Alloc string   `json:"alloc"`
				Files []string `json:"files"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			urls := map[string]string{}
			for _, f := range req.Files {
				urls[f] = "http://" + r.Host + "/up/linked/" + f + "?sig=ok"
			}
			json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"urls": urls}})
		case r.Method == "PUT" && strings.HasPrefix(r.URL.Path, "/up/") && r.URL.Query().Get("sig") == "ok":
			b, _ := io.ReadAll(r.Body)
			u.mu.Lock()
			u.files[strings.TrimPrefix(r.URL.Path, "/up/")] = b
			u.mu.Unlock()
		default:
			http.Error(w, "forbidden", http.StatusForbidden)
		}
	}))
	t.Cleanup(srv.Close)
	return srv, u
}

func clip(t *testing.T) []byte {
	ff := testenv.Binary(t, "ffmpeg")
	p := filepath.Join(t.TempDir(), "clip.mp4")
	out, err := exec.Command(ff, "-v", "error", "-f", "lavfi", "-i", "testsrc=duration=1:size=160x120:rate=10", "-c:v", "libx264", "-preset", "ultrafast", p).CombinedOutput()
	if err != nil {
		t.Fatalf("make clip: %v %s", err, out)
	}
	b, _ := os.ReadFile(p)
	return b
}

func run(t *testing.T, srv *httptest.Server, m mj.Manifest) *mj.Result {
	t.Helper()
	m.JobID, m.Attempt = "job-1", 1
	m.UploadURL = srv.URL + "/up/%7Bpath%7D?sig=ok"
	r := &Runner{WorkDir: t.TempDir(), Log: io.Discard, FFmpeg: testenv.Binary(t, "ffmpeg")}
	res, err := r.Run(context.Background(), &m)
	if err != nil {
		t.Fatalf("Run: %v", err)
	}
	return res
}

func TestRunSequenceOutputsAndResult(t *testing.T) {
	data := clip(t)
	srv, up := newServer(t, map[string][]byte{"clip.mp4": data})
	res := run(t, srv, mj.Manifest{
		InputFiles:     map[string]string{"clip": srv.URL + "/in/clip.mp4"},
		OutputNames:    []string{"frame_%02d.png", "copy.mp4"},
		FFmpegCommands: []string{"-i {{clip}} -vf fps=2 outputs/frame_%02d.png", "ffmpeg -i inputs/clip -c copy {{copy.mp4}}"},
		AllowLoopback:  true,
	})
	if !res.Succeeded {
		t.Fatalf("failed: %s", res.ErrorMessage)
	}
	var names []string
	for _, o := range res.Outputs {
		names = append(names, o.Name)
		if int64(len(up.files["outputs/"+o.Name])) != o.Size || o.Size == 0 {
			t.Errorf("%s: reported %d bytes, uploaded %d", o.Name, o.Size, len(up.files["outputs/"+o.Name]))
		}
	}
	sort.Strings(names)
	if len(names) < 3 || names[0] != "copy.mp4" || names[1] != "frame_01.png" || names[2] != "frame_02.png" {
		t.Fatalf("outputs %v", names)
	}
	if res.InputBytes != int64(len(data)) {
		t.Fatalf("input bytes %d, want %d", res.InputBytes, len(data))
	}
	var reported mj.Result
	if err := json.Unmarshal(up.files["result.json"], &reported); err != nil || !reported.Succeeded || len(reported.Outputs) != len(res.Outputs) {
		t.Fatalf("uploaded result %s (%v)", up.files["result.json"], err)
	}
}

func TestRunFailures(t *testing.T) {
	data := clip(t)
	// A concat list naming a URL (port 1 of loopback: nothing listens there).
	list := []byte("ffconcat version 1.0\nfile 'http://user:pw@127.0.0.1:1/a.mp4?sig=secret'\n")
	srv, up := newServer(t, map[string][]byte{"clip.mp4": data, "list.txt": list})
	in := map[string]string{"clip": srv.URL + "/in/clip.mp4"}
	cases := []struct {
		name string
		m    mj.Manifest
		want []string
	}{
		{"ffmpeg error", mj.Manifest{InputFiles: in, OutputNames: []string{"o.mp4"}, AllowLoopback: true,
			FFmpegCommands: []string{"-i {{clip}} -t 1 ok.mp4", "-i ok.mp4 -c:v nope_codec {{o.mp4}}"}},
			[]string{"command 2 of 2 failed", "exited with code 1", "nope_codec"}},
		{"missing output", mj.Manifest{InputFiles: in, OutputNames: []string{"o.mp4"}, AllowLoopback: true,
			FFmpegCommands: []string{"-i {{clip}} -t 1 elsewhere.mp4"}},
			[]string{"produced no outputs/o.mp4"}},
		{"timeout", mj.Manifest{InputFiles: in, OutputNames: []string{"o.mp4"}, AllowLoopback: true, TimeoutSeconds: 1,
			FFmpegCommands: []string{"-re -stream_loop -1 -i {{clip}} {{o.mp4}}"}},
			[]string{"timed out after 1s", "command 1 of 1"}},
		{"input 404", mj.Manifest{InputFiles: map[string]string{"gone": srv.URL + "/in/nope.mp4"}, OutputNames: []string{"o.mp4"}, AllowLoopback: true,
			FFmpegCommands: []string{"-i {{gone}} {{o.mp4}}"}},
			[]string{`input "gone"`, "404"}},
		{"loopback input refused", mj.Manifest{InputFiles: in, OutputNames: []string{"o.mp4"},
			FFmpegCommands: []string{"-i {{clip}} {{o.mp4}}"}},
			[]string{`input "clip"`, "loopback"}},
		{"concat list naming a URL", mj.Manifest{InputFiles: map[string]string{"list.txt": srv.URL + "/in/list.txt"}, OutputNames: []string{"o.mp4"}, AllowLoopback: true,
			FFmpegCommands: []string{"-f concat -safe 0 -i inputs/list.txt -c copy {{o.mp4}}"}},
			[]string{"command 1 of 1 failed", "the concat list inputs/list.txt names http://127.0.0.1:1/a.mp4, a URL", "put each file in input_files and name it in the list as file '<name>'"}},
		{"invalid command", mj.Manifest{OutputNames: []string{"o.mp4"}, FFmpegCommands: []string{"-i /etc/passwd {{o.mp4}}"}},
			[]string{"command 1", "absolute paths"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			res := run(t, srv, c.m)
			if res.Succeeded {
				t.Fatal("succeeded")
			}
			for _, w := range c.want {
				if !strings.Contains(res.ErrorMessage, w) {
					t.Errorf("error_message %q lacks %q", res.ErrorMessage, w)
				}
			}
			if len(res.Outputs) != 0 {
				t.Errorf("failed run reports outputs %v", res.Outputs)
			}
			if strings.Contains(res.ErrorMessage, "secret") || strings.Contains(res.ErrorMessage, "user:pw") {
				t.Errorf("error_message shows a URL's secret: %q", res.ErrorMessage)
			}
			var reported mj.Result
			json.Unmarshal(up.files["result.json"], &reported)
			if reported.ErrorMessage != res.ErrorMessage {
				t.Errorf("uploaded result says %q", reported.ErrorMessage)
			}
		})
	}
}

func TestLoadManifestFollowsManifestURL(t *testing.T) {
	full := mj.Manifest{JobID: "big", FFmpegCommands: []string{strings.Repeat("x", 20000)}}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { json.NewEncoder(w).Encode(full) }))
	defer srv.Close()
	p := filepath.Join(t.TempDir(), "manifest.json")
	b, _ := json.Marshal(mj.Manifest{ManifestURL: srv.URL + "/m"})
	os.WriteFile(p, b, 0o600)
	m, err := LoadManifest(context.Background(), p)
	if err != nil || m.JobID != "big" || len(m.FFmpegCommands[0]) != 20000 {
		t.Fatalf("LoadManifest = %+v, %v", m, err)
	}
}

// The service's own signed files (a temporary file's download_url) are fetched
// from where the outputs go, even where loopback or private addresses are refused
// for other inputs.
func TestFetchOwnFilesFromTheService(t *testing.T) {
	svc := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Write([]byte("bytes of " + r.URL.Path))
	}))
	defer svc.Close()
	m := mj.Manifest{
		InputFiles:     map[string]string{"v": svc.URL + "/files/tmp/acct/abc?m=GET&sig=s"},
		OutputNames:    []string{"o.wav"},
		FFmpegCommands: []string{"-i {{v}} {{o.wav}}"},
		UploadURL:      svc.URL + "/files/jobs/j/a1/%7Bpath%7D?m=PUT&sig=s",
	}
	r := &Runner{WorkDir: t.TempDir()}
	if st := r.Fetch(context.Background(), &m); st.Failed {
		t.Fatalf("own file: %s", st.Error)
	}
	if b, _ := os.ReadFile(filepath.Join(r.WorkDir, "inputs", "v")); string(b) != "bytes of /files/tmp/acct/abc" {
		t.Fatalf("fetched %q", b)
	}
	m.InputFiles["v"] = svc.URL + "/elsewhere"
	if st := (&Runner{WorkDir: t.TempDir()}).Fetch(context.Background(), &m); !st.Failed || !strings.Contains(st.Error, "loopback") {
		t.Fatalf("another URL on the same loopback host: failed=%v %q, want refused", st.Failed, st.Error)
	}
}

// signalWriter closes ch at the first write that contains what.
type signalWriter struct {
	what string
	ch   chan struct{}
	once sync.Once
}

func (w *signalWriter) Write(p []byte) (int, error) {
	if strings.Contains(string(p), w.what) {
		w.once.Do(func() { close(w.ch) })
	}
	return len(p), nil
}

// A worker stopped from outside (Nomad's SIGTERM on a drain) reports no result,
// so the dispatcher retries the job; a timeout is a result.
func TestStoppedWorkerReportsNothing(t *testing.T) {
	srv, up := newServer(t, nil)
	m := mj.Manifest{JobID: "job-1", Attempt: 1, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok", TimeoutSeconds: 600,
		OutputNames: []string{"o.wav"}, FFmpegCommands: []string{"-re -f lavfi -i sine=duration=60 {{o.wav}}"}}
	started := &signalWriter{what: "running command 1", ch: make(chan struct{})}
	ctx, stop := context.WithCancel(context.Background())
	go func() { <-started.ch; stop() }()
	r := &Runner{WorkDir: t.TempDir(), Log: started, FFmpeg: testenv.Binary(t, "ffmpeg")}
	res, err := r.Run(ctx, &m)
	if !errors.Is(err, ErrStopped) || res != nil {
		t.Fatalf("stopped run: %v, %v; want ErrStopped and no result", res, err)
	}
	if _, ok := up.files["result.json"]; ok {
		t.Fatal("a stopped worker uploaded a result")
	}
}

// ffmpeg killed by a signal nobody in the runner sent: the message says what most
// likely happened instead of "exit code -1".
func TestKilledFFmpegNamesTheMemoryLimit(t *testing.T) {
	srv, _ := newServer(t, nil)
	fake := filepath.Join(t.TempDir(), "ffmpeg")
	os.WriteFile(fake, []byte("#!/bin/sh\necho 'allocating' >&2\nkill -9 $$\n"), 0o755)
	m := mj.Manifest{OutputNames: []string{"o.wav"}, FFmpegCommands: []string{"-f lavfi -i sine=duration=1 {{o.wav}}"}}
	m.JobID, m.Attempt, m.UploadURL = "job-1", 1, srv.URL+"/up/%7Bpath%7D?sig=ok"
	res, err := (&Runner{WorkDir: t.TempDir(), Log: io.Discard, FFmpeg: fake}).Run(context.Background(), &m)
	if err != nil || res.Succeeded || !strings.Contains(res.ErrorMessage, "killed by signal SIGKILL") || !strings.Contains(res.ErrorMessage, "memory limit") {
		t.Fatalf("result %+v, %v", res, err)
	}
}

// An input larger than the worker's free disk fails before it is written.
func TestInputLargerThanTheDisk(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "4611686018427387904") // 4 EiB
		w.WriteHeader(200)
	}))
	defer srv.Close()
	m := mj.Manifest{InputFiles: map[string]string{"big": srv.URL + "/big"}, AllowLoopback: true,
		OutputNames: []string{"o.wav"}, FFmpegCommands: []string{"-i {{big}} {{o.wav}}"}}
	st := (&Runner{WorkDir: t.TempDir()}).Fetch(context.Background(), &m)
	if !st.Failed || !strings.Contains(st.Error, `input "big"`) || !strings.Contains(st.Error, "bytes free on the worker") {
		t.Fatalf("state %+v", st)
	}
}

func TestFFmpegEnvKeepsGPUsApart(t *testing.T) {
	t.Setenv("NVIDIA_VISIBLE_DEVICES", "GPU-1b2c")
	t.Setenv("SECRET", "not for ffmpeg")
	env := strings.Join(ffmpegEnv("/w"), " ")
	if env != "PATH=/usr/local/bin:/usr/bin:/bin HOME=/w NVIDIA_VISIBLE_DEVICES=GPU-1b2c CUDA_VISIBLE_DEVICES=GPU-1b2c" {
		t.Fatalf("env %q", env)
	}
	t.Setenv("NVIDIA_VISIBLE_DEVICES", "all")
	if env := strings.Join(ffmpegEnv("/w"), " "); strings.Contains(env, "CUDA_VISIBLE_DEVICES") {
		t.Fatalf("env %q", env)
	}
}

// Under Nomad each allocation uploads under its own directory of the attempt and
// names itself in the result: a replacement Nomad starts for a lost allocation
// never overwrites the original's files.
func TestUploadsUnderTheAllocation(t *testing.T) {
	alloc := "0b8e7f5e-3c1a-4d2b-9f00-1234567890ab"
	t.Setenv("NOMAD_ALLOC_ID", alloc)
	srv, up := newServer(t, nil)
	res := run(t, srv, mj.Manifest{OutputNames: []string{"a.wav"},
		FFmpegCommands: []string{"-f lavfi -i sine=duration=0.2 {{a.wav}}"}})
	if !res.Succeeded || res.AllocID != alloc {
		t.Fatalf("result %+v", res)
	}
	var reported mj.Result
	if err := json.Unmarshal(up.files[alloc+"/result.json"], &reported); err != nil || reported.AllocID != alloc {
		t.Fatalf("result under the allocation: %s (%v); files %v", up.files[alloc+"/result.json"], err, len(up.files))
	}
	if len(up.files[alloc+"/outputs/a.wav"]) == 0 || up.files["result.json"] != nil || up.files["outputs/a.wav"] != nil {
		t.Fatal("outputs not under the allocation's directory")
	}
	t.Setenv("NOMAD_ALLOC_ID", "../../elsewhere") // not an allocation id: ignored
	if allocPrefix() != "" {
		t.Fatal("a non-UUID allocation id was used in a path")
	}
}

// With an uploads_url the runner asks for one link per file it found and uploads
// there (S3: the bucket's presigned PUTs); a job that timed out still reports.
func TestUploadsThroughAskedLinks(t *testing.T) {
	srv, up := newServer(t, nil)
	m := mj.Manifest{OutputNames: []string{"a.wav"}, FFmpegCommands: []string{"-f lavfi -i sine=duration=0.2 {{a.wav}}"},
		UploadsURL: srv.URL + "/links"}
	if res := run(t, srv, m); !res.Succeeded {
		t.Fatalf("failed: %s", res.ErrorMessage)
	}
	if len(up.files["linked/outputs/a.wav"]) == 0 || up.files["linked/result.json"] == nil || up.files["outputs/a.wav"] != nil {
		t.Fatalf("uploads did not follow the asked links: %d files", len(up.files))
	}
	m = mj.Manifest{OutputNames: []string{"b.wav"}, FFmpegCommands: []string{"-re -f lavfi -i sine=duration=30 {{b.wav}}"},
		UploadsURL: srv.URL + "/links", TimeoutSeconds: 1}
	if res := run(t, srv, m); res.Succeeded || !strings.Contains(res.ErrorMessage, "timed out") {
		t.Fatalf("timed-out job: %+v", res)
	}
	var reported mj.Result
	if err := json.Unmarshal(up.files["linked/result.json"], &reported); err != nil || !strings.Contains(reported.ErrorMessage, "timed out") {
		t.Fatalf("the timeout was not reported through the asked link: %s", up.files["linked/result.json"])
	}
}

// A gateway older than the dispatcher has no /upload-urls/ route: the runner
// uploads with the manifest's template; a gateway that refuses the outputs' names
// still gets a result that says why.
func TestUploadLinksFallbacks(t *testing.T) {
	srv, up := newServer(t, nil)
	old := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(404)
		io.WriteString(w, `{"errorCode":"notFound","message":"no such route"}`)
	}))
	defer old.Close()
	m := mj.Manifest{OutputNames: []string{"a.wav"}, FFmpegCommands: []string{"-f lavfi -i sine=duration=0.2 {{a.wav}}"},
		UploadsURL: old.URL + "/upload-urls/x"}
	if res := run(t, srv, m); !res.Succeeded || len(up.files["outputs/a.wav"]) == 0 {
		t.Fatalf("template fallback: %+v, %d files", res, len(up.files))
	}
	refusing := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct{ Files []string }
		json.NewDecoder(r.Body).Decode(&req)
		urls := map[string]string{}
		for _, f := range req.Files {
			if strings.HasPrefix(f, "outputs/") {
				w.WriteHeader(400)
				io.WriteString(w, `{"errorCode":"validationError","message":"outputs/a.wav is not a declared output"}`)
				return
			}
			urls[f] = srv.URL + "/up/refused/" + f + "?sig=ok"
		}
		json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"urls": urls}})
	}))
	defer refusing.Close()
	m.UploadsURL = refusing.URL
	res := run(t, srv, m)
	var reported mj.Result
	if err := json.Unmarshal(up.files["refused/result.json"], &reported); err != nil || res.Succeeded || reported.Succeeded ||
		!strings.Contains(reported.ErrorMessage, "not a declared output") || len(reported.Logs) != 1 || len(up.files["refused/logs/1.log"]) == 0 {
		t.Fatalf("refused outputs: %+v; reported %s", res, up.files["refused/result.json"])
	}
}

// A gateway that is down when the job ends (restarting, or gone from behind the
// load balancer) for longer than a few quick retries: the runner keeps asking for
// its upload links, and the job succeeds once one answers.
func TestUploadLinksOutlastAGatewayRestart(t *testing.T) {
	defer func(w time.Duration) { patientWait = w }(patientWait)
	patientWait = 20 * time.Millisecond
	srv, up := newServer(t, nil)
	var asked atomic.Int32
	restarting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/links" && asked.Add(1) <= 6 { // more than the 3 retries of every other call
			http.Error(w, "gateway restarting", http.StatusBadGateway)
			return
		}
		srv.Config.Handler.ServeHTTP(w, r)
	}))
	defer restarting.Close()
	m := mj.Manifest{OutputNames: []string{"a.wav"}, FFmpegCommands: []string{"-f lavfi -i sine=duration=0.2 {{a.wav}}"},
		UploadsURL: restarting.URL + "/links"}
	if res := run(t, srv, m); !res.Succeeded || len(up.files["linked/outputs/a.wav"]) == 0 {
		t.Fatalf("after the gateway came back: %+v, %d files", res, len(up.files))
	}
	if n := asked.Load(); n != 7 {
		t.Fatalf("upload links asked %d times, want 7 (6 refused, then answered)", n)
	}
}

// A gateway that stays unreachable past the retries is no refusal: the runner
// reports nothing (the dispatcher runs the attempt again), even if the gateway
// answers right after, rather than a failure of a job that did not fail.
func TestUploadLinksUnreachableReportsNothing(t *testing.T) {
	defer func(w time.Duration) { patientWait = w }(patientWait)
	patientWait = time.Millisecond
	srv, up := newServer(t, nil)
	var asked atomic.Int32
	down := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if asked.Add(1) <= 11 { // every try of the first request
			http.Error(w, "bad gateway", http.StatusBadGateway)
			return
		}
		srv.Config.Handler.ServeHTTP(w, r)
	}))
	defer down.Close()
	m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"a.wav"}, FFmpegCommands: []string{"-f lavfi -i sine=duration=0.2 {{a.wav}}"},
		UploadsURL: down.URL + "/links", UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok"}
	r := &Runner{WorkDir: t.TempDir(), Log: io.Discard, FFmpeg: testenv.Binary(t, "ffmpeg")}
	res, err := r.Run(context.Background(), &m)
	if err == nil || res != nil {
		t.Fatalf("Run with the gateway down: %+v, %v; want an error and no result", res, err)
	}
	if len(up.files) != 0 {
		t.Fatalf("uploaded %d files with no links", len(up.files))
	}
}

// failingStore is srv behind a front that answers the first times PUTs of
// outputs with status and msg (times < 0: every one), as the service's object
// store would while restarting or down; it counts the PUTs of outputs.
func failingStore(t *testing.T, srv *httptest.Server, status int, msg string, times int32) (*httptest.Server, *atomic.Int32) {
	var puts atomic.Int32
	store := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == "PUT" && strings.Contains(r.URL.Path, "/outputs/") {
			if n := puts.Add(1); times < 0 || n <= times {
				http.Error(w, msg, status)
				return
			}
		}
		srv.Config.Handler.ServeHTTP(w, r)
	}))
	t.Cleanup(store.Close)
	return store, &puts
}

// The service's object store down when the outputs go up (restarting, as MinIO
// killed and started again) for longer than a few quick retries: the runner
// keeps trying, and the job succeeds once the store answers.
func TestOutputUploadsOutlastAStoreRestart(t *testing.T) {
	defer func(w time.Duration) { patientWait = w }(patientWait)
	patientWait = 20 * time.Millisecond
	srv, up := newServer(t, nil)
	store, puts := failingStore(t, srv, http.StatusServiceUnavailable, "store restarting", 6) // past the 3 retries of a quick call
	m := mj.Manifest{OutputNames: []string{"a.wav"}, FFmpegCommands: []string{"-f lavfi -i sine=duration=0.2 {{a.wav}}"}}
	if res := run(t, store, m); !res.Succeeded || len(up.files["linked/outputs/a.wav"]) == 0 && len(up.files["outputs/a.wav"]) == 0 {
		t.Fatalf("after the store came back: %+v, files %v", res, keys(up.files))
	}
	if n := puts.Load(); n != 7 {
		t.Fatalf("the output was put %d times, want 7 (6 refused, then taken)", n)
	}
}

// A store that stays down past the retries fails no job: the runner reports
// nothing, so the dispatcher runs the attempt again, instead of a failed job
// whose commands succeeded.
func TestOutputUploadsToADownStoreReportNothing(t *testing.T) {
	defer func(w time.Duration) { patientWait = w }(patientWait)
	patientWait = time.Millisecond
	srv, up := newServer(t, nil)
	store, _ := failingStore(t, srv, http.StatusBadGateway, "store down", -1)
	m := mj.Manifest{JobID: "job-1", Attempt: 1, OutputNames: []string{"a.wav"}, FFmpegCommands: []string{"-f lavfi -i sine=duration=0.2 {{a.wav}}"},
		UploadURL: store.URL + "/up/%7Bpath%7D?sig=ok"}
	r := &Runner{WorkDir: t.TempDir(), Log: io.Discard, FFmpeg: testenv.Binary(t, "ffmpeg")}
	res, err := r.Run(context.Background(), &m)
	if err == nil || res != nil || !strings.Contains(err.Error(), "the job is retried") {
		t.Fatalf("Run with the store down: %+v, %v; want an error and no result", res, err)
	}
	for name := range up.files {
		if strings.HasSuffix(name, "result.json") {
			t.Fatalf("a result was reported: %s", up.files[name])
		}
	}
}

// The store refusing the file itself (413: over max_upload_bytes) fails the
// job with that answer, as before: running it again would change nothing.
func TestOutputUploadRefusedByTheStoreFailsTheJob(t *testing.T) {
	defer func(w time.Duration) { patientWait = w }(patientWait)
	patientWait = time.Millisecond
	srv, _ := newServer(t, nil)
	store, _ := failingStore(t, srv, http.StatusRequestEntityTooLarge, "the upload exceeds max_upload_bytes", -1)
	res := run(t, store, mj.Manifest{OutputNames: []string{"a.wav"}, FFmpegCommands: []string{"-f lavfi -i sine=duration=0.2 {{a.wav}}"}})
	if res.Succeeded || !strings.Contains(res.ErrorMessage, "413") || !strings.Contains(res.ErrorMessage, "max_upload_bytes") {
		t.Fatalf("an output the store refused: %+v", res)
	}
}

func keys(m map[string][]byte) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

// A process left holding ffmpeg's progress pipe (one the sandbox's kill did
// not reach, as when a warm job is stopped while bwrap sets up) no longer
// holds the runner: the command is over when ffmpeg is. Without the sandbox
// here, so that the process does outlive the command.
func TestLeftoverHoldingTheProgressPipeHoldsNothing(t *testing.T) {
	ff := testenv.Binary(t, "ffmpeg")
	bypassChecker(t)
	marker := fmt.Sprintf("mjleftover%d", time.Now().UnixNano())
	killProcsWith(t, marker)
	srv, _ := newServer(t, map[string][]byte{"a.sh": []byte("sh -c 'sleep 600' " + marker + " &\necho done > outputs/o.txt\n")})
	m := mj.Manifest{JobID: "job-1", Attempt: 1, InputFiles: map[string]string{"a.sh": srv.URL + "/in/a.sh"}, OutputNames: []string{"o.txt"},
		FFmpegCommands: []string{"-mjsh inputs/a.sh"}, AllowLoopback: true, UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok"}
	r := &Runner{WorkDir: t.TempDir(), Log: io.Discard, FFmpeg: compromisedFFmpeg(t, ff)}
	ended := make(chan error, 1)
	go func() { _, err := r.Run(context.Background(), &m); ended <- err }()
	select {
	case err := <-ended:
		if err != nil {
			t.Fatalf("Run: %v", err)
		}
	case <-time.After(2 * time.Minute): // the leftover sleeps 600 s
		t.Fatal("the runner still waits on a process holding ffmpeg's progress pipe")
	}
	if len(procsWith(marker)) == 0 {
		t.Fatal("the leftover process did not outlive the command: the test proves nothing")
	}
}
