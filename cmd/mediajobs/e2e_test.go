package main

import (
	"bytes"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
)

// The end-to-end suite runs one dev stack (embedded etcd, gateway, dispatcher)
// against one real Nomad dev agent, whose raw_exec tasks run the real runner binary
// and the real ffmpeg. Inputs and webhooks are served on loopback.
var (
	stack     *devStack
	clipURL   string
	setupErr  string // why the stack could not start (reported by every test)
	hooks     = &hookRecorder{}
	hookURL   string
	ffprobe   string
	agent     *testenv.Nomad
	runnerBin string // the mediajobs binary Nomad tasks run
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(mainWithStack(m))
}

func mainWithStack(m *testing.M) int {
	if testing.Short() {
		return m.Run() // no stack: needStack skips under -short (make test-short)
	}
	tmp, err := os.MkdirTemp("", "mediajobs-e2e-")
	if err != nil {
		panic(err)
	}
	defer os.RemoveAll(tmp)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()

	missing := func(what string) int {
		setupErr = what
		return m.Run()
	}
	ffmpegBin, err := exec.LookPath("ffmpeg")
	if err != nil {
		return missing("ffmpeg")
	}
	if ffprobe, err = exec.LookPath("ffprobe"); err != nil {
		return missing("ffprobe")
	}
	nomadBin := testenv.FindNomad()
	if nomadBin == "" {
		return missing("nomad (deploy/scripts/install-nomad.sh builds it)")
	}

	// A 3-second test clip with video and audio, served over loopback.
	clip := filepath.Join(tmp, "clip.mp4")
	gen := exec.Command(ffmpegBin, "-v", "error", "-f", "lavfi", "-i", "testsrc=duration=3:size=320x240:rate=25",
		"-f", "lavfi", "-i", "sine=duration=3", "-c:v", "libx264", "-preset", "ultrafast", "-c:a", "aac", "-shortest", clip)
	if out, err := gen.CombinedOutput(); err != nil {
		panic(fmt.Sprintf("generate clip: %v\n%s", err, out))
	}
	files := httptest.NewServer(http.FileServer(http.Dir(tmp)))
	defer files.Close()
	clipURL = files.URL + "/clip.mp4"
	hookSrv := httptest.NewServer(hooks)
	defer hookSrv.Close()
	hookURL = hookSrv.URL

	bin, err := testenv.BuildMediajobs(tmp)
	if err != nil {
		panic(err)
	}
	runnerBin = bin
	agent, err = testenv.StartNomad(nomadBin)
	if err != nil {
		setupErr = "nomad agent: " + err.Error()
		return m.Run()
	}
	defer agent.Close()

	cfg := config.Default()
	cfg.Server.AllowLoopback = true
	cfg.Server.WaitLimit = "60s"
	cfg.Server.RateLimit = 0 // the tests poll fast; gateway tests cover the limit
	cfg.Etcd.DataDir = filepath.Join(tmp, "etcd")
	cfg.Etcd.ListenClient = "127.0.0.1:0"
	cfg.Etcd.ListenPeer = freeAddr()
	cfg.Storage.Path = filepath.Join(tmp, "blobs")
	cfg.Nomad.Address = agent.Addr
	cfg.Dispatcher.Listen = freeAddr() // dev serves the dispatcher's listener too (metrics_e2e_test.go)
	// A warm pool beside the default one (warm_e2e_test.go): small runners, and a
	// short lease so the fault tests see a lapse soon.
	cfg.Pools = []*config.Pool{{Name: "cpu"}, {Name: warmPool, Memory: 256, Warm: &config.Warm{Count: 2, MaxJobSeconds: 60, CPU: 100, Memory: 256, LeaseTTL: "6s"}}}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	cfg.Server.Listen = ln.Addr().String()
	cfg.Server.PublicURL = "http://" + ln.Addr().String()
	if err := cfg.Finish(); err != nil {
		panic(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	ready := make(chan *devStack, 1)
	wg.Add(1)
	go func() {
		defer wg.Done()
		opts := devOptions{DataDir: tmp, APIKey: "mj_e2e_test_key_0123456789", RunnerCommand: bin, Listener: ln}
		if err := startDev(ctx, cfg, opts, log, func(s *devStack) { ready <- s }); err != nil && ctx.Err() == nil {
			setupErr = "mediajobs dev: " + err.Error()
			close(ready)
		}
	}()
	var ok bool
	if stack, ok = <-ready; !ok {
		return m.Run()
	}
	code := m.Run()
	if code != 0 {
		fmt.Fprintf(os.Stderr, "--- nomad agent log (tail) ---\n%s\n", tail(agent.Log(), 4000))
	}
	return code
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func freeAddr() string {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		panic(err)
	}
	defer l.Close()
	return l.Addr().String()
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}

// needStack skips the test under -short (TestMain starts no stack then), and
// fails (CI) or skips it when the stack could not start.
func needStack(t *testing.T) {
	t.Helper()
	testenv.Long(t, "needs the dev stack on Nomad")
	if setupErr != "" {
		testenv.Missing(t, setupErr)
	}
}

// --- HTTP helpers -------------------------------------------------------------

type response struct {
	Status int
	Header http.Header
	Body   []byte
}

func (r response) json(t *testing.T) map[string]any {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body, &m); err != nil {
		t.Fatalf("response is not a JSON object: %v\n%s", err, r.Body)
	}
	return m
}

func (r response) data(t *testing.T) map[string]any {
	t.Helper()
	d, ok := r.json(t)["data"].(map[string]any)
	if !ok {
		t.Fatalf("no data object in %s", r.Body)
	}
	return d
}

func call(t *testing.T, method, path, key string, body any, headers ...string) response {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	case []byte:
		rd = bytes.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	url := path
	if strings.HasPrefix(path, "/") {
		url = stack.URL + path
	}
	req, err := http.NewRequest(method, url, rd)
	if err != nil {
		t.Fatal(err)
	}
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(headers); i += 2 {
		req.Header.Set(headers[i], headers[i+1])
	}
	resp, err := (&http.Client{Timeout: 90 * time.Second}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return response{Status: resp.StatusCode, Header: resp.Header, Body: b}
}

// waitTerminal polls GET /api/jobs/{id} until the job is terminal.
func waitTerminal(t *testing.T, id string) map[string]any {
	t.Helper()
	var job map[string]any
	testenv.Eventually(t, 90*time.Second, "job "+id+" to finish", func() bool {
		job = call(t, "GET", "/api/jobs/"+id, stack.APIKey, nil).data(t)
		s := job["status"]
		return s == "succeeded" || s == "failed" || s == "cancelled"
	})
	return job
}

func probe(t *testing.T, path string) map[string]any {
	t.Helper()
	out, err := exec.Command(ffprobe, "-v", "error", "-show_format", "-show_streams", "-of", "json", path).Output()
	if err != nil {
		t.Fatalf("ffprobe %s: %v", path, err)
	}
	var m map[string]any
	json.Unmarshal(out, &m)
	return m
}

func download(t *testing.T, url string) string {
	t.Helper()
	r := call(t, "GET", url, "", nil) // signed link: no API key
	if r.Status != 200 {
		t.Fatalf("download %s: HTTP %d %s", url, r.Status, r.Body)
	}
	p := filepath.Join(t.TempDir(), "out"+filepath.Ext(strings.SplitN(url, "?", 2)[0]))
	os.WriteFile(p, r.Body, 0o644)
	return p
}

// hookRecorder is a webhook receiver on loopback.
type hookRecorder struct {
	mu   sync.Mutex
	got  []hookCall
	fail map[string]int // job id -> remaining 500 answers
}

type hookCall struct {
	Header http.Header
	Job    map[string]any
}

func (h *hookRecorder) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	body, _ := io.ReadAll(r.Body)
	var job map[string]any
	json.Unmarshal(body, &job)
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got = append(h.got, hookCall{Header: r.Header.Clone(), Job: job})
	if id, _ := job["id"].(string); h.fail[id] > 0 {
		h.fail[id]--
		w.WriteHeader(500)
		return
	}
	w.WriteHeader(204)
}

func (h *hookRecorder) calls(id string) []hookCall {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []hookCall
	for _, c := range h.got {
		if c.Job["id"] == id {
			out = append(out, c)
		}
	}
	return out
}
