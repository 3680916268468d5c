package devstack

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// A production-shaped pair, `mediajobs gateway` with server.metrics_listen and
// `mediajobs dispatcher` with dispatcher.listen, runs one real job with a webhook:
// both listeners answer, the public port no longer serves /metrics, and the series
// docs/operations.md lists exist and moved.
func TestMetricsAfterAJob(t *testing.T) {
	e2e.NeedStack(t)
	_, e := testenv.Etcd(t)
	prefix := fmt.Sprintf("/m%d/", time.Now().UnixNano())
	s := store.New(e.Client, prefix)
	dir := t.TempDir()
	api, metricsAddr, dispAddr := e2e.FreeAddr(), e2e.FreeAddr(), e2e.FreeAddr()
	cfgFile := filepath.Join(dir, "mediajobs.hcl")
	e2e.WriteFile(t, cfgFile, fmt.Sprintf(`
server {
  listen         = %q
  metrics_listen = %q
  signing_secret = "metrics-test-signing-secret-0123"
  allow_loopback = true
  rate_limit     = 0
}
etcd {
  embedded  = false
  endpoints = [%q]
  prefix    = %q
}
nomad {
  address = %q
}
storage {
  path = %q
}
dispatcher {
  listen          = %q
  reconcile_every = "2s"
}
pool "cpu" {
  # The shared e2e.Agent's mediajobs-cpu job: the main stack's resources, or the
  # tests after this one would run with this one's.
  runner_command = %q
}
`, api, metricsAddr, e.Endpoint(), prefix, e2e.Agent.Addr, filepath.Join(dir, "blobs"), dispAddr, e2e.RunnerBin))
	ctx := context.Background()
	acct, err := s.CreateAccount(ctx, "metrics")
	if err != nil {
		t.Fatal(err)
	}
	key := mj.NewAPIKeySecret()
	if _, err := s.AddAPIKey(ctx, acct.ID, "k", key); err != nil {
		t.Fatal(err)
	}
	startProcess(t, "gateway", cfgFile)
	startProcess(t, "dispatcher", cfgFile)
	apiURL, gwMetrics, disp := "http://"+api, "http://"+metricsAddr+"/metrics", "http://"+dispAddr
	testenv.Eventually(t, 30*time.Second, "the gateway to be ready", func() bool { return e2e.Status(apiURL+"/readyz") == 200 })
	testenv.Eventually(t, 30*time.Second, "the dispatcher to be ready", func() bool { return e2e.Status(disp+"/readyz") == 200 })
	if c := e2e.Status(disp + "/healthz"); c != 200 {
		t.Fatalf("dispatcher /healthz: %d", c)
	}
	if r := e2e.Call(t, "GET", apiURL+"/metrics", "", nil); r.Status == 200 || strings.Contains(string(r.Body), "mediajobs_") {
		t.Fatalf("the public port serves /metrics although metrics_listen is set: %d", r.Status)
	}
	if c := e2e.Status(disp + "/readyz"); c != 200 {
		t.Fatalf("dispatcher /readyz: %d", c)
	}
	gw0, d0 := scrape(t, gwMetrics), scrape(t, disp+"/metrics")

	// One job, created as a long poll, with a webhook.
	r := e2e.Call(t, "POST", apiURL+"/api/ffmpeg?wait=true", key, map[string]any{
		"input_files":     map[string]string{"in": e2e.ClipURL},
		"output_files":    []string{"o.mp4"},
		"ffmpeg_commands": []string{"-i {{in}} -t 0.5 -c copy {{o.mp4}}"},
		"webhook_url":     e2e.HookURL + "/metrics-e2e",
	})
	if r.Status != 200 {
		t.Fatalf("create: %d %s", r.Status, r.Body)
	}
	id := r.Data(t)["id"].(string)
	testenv.Eventually(t, 90*time.Second, "the job to succeed", func() bool {
		return e2e.Call(t, "GET", apiURL+"/api/jobs/"+id, key, nil).Data(t)["status"] == "succeeded"
	})
	testenv.Eventually(t, 60*time.Second, "the webhook", func() bool { return len(e2e.Hooks.Calls(id)) > 0 })

	var gw1, d1 samples
	// The leader's gauges are counted every 10 s (a count taken while the job
	// was queued stands until the next); deliveries are counted once recorded.
	testenv.Eventually(t, 60*time.Second, "the dispatcher's series, counted after the job", func() bool {
		d1 = scrape(t, disp+"/metrics")
		queued, ok := d1.get("mediajobs_jobs_queued", `pool="cpu"`)
		running, _ := d1.get("mediajobs_jobs_running", `pool="cpu"`)
		oldest, _ := d1.get("mediajobs_oldest_queued_seconds", `pool="cpu"`)
		return ok && queued == 0 && running == 0 && oldest == 0 && d1.sum("mediajobs_webhook_deliveries_total", `outcome="delivered"`) > 0
	})
	gw1 = scrape(t, gwMetrics)

	grew := func(name string, before, after samples, labels ...string) {
		t.Helper()
		if b, a := before.sum(name, labels...), after.sum(name, labels...); a <= b {
			t.Errorf("%s%v did not grow: %v -> %v", name, labels, b, a)
		}
	}
	// The gateway: requests by route and code, the long poll apart, jobs created.
	grew("mediajobs_http_requests_total", gw0, gw1, `route="/api/ffmpeg"`, `status="200"`)
	grew("mediajobs_http_requests_total", gw0, gw1, `route="/api/jobs/:id"`, `status="200"`)
	grew("mediajobs_http_long_poll_duration_seconds_count", gw0, gw1, `route="/api/ffmpeg"`)
	grew("mediajobs_http_request_duration_seconds_count", gw0, gw1, `route="/api/jobs/:id"`)
	grew("mediajobs_jobs_created_total", gw0, gw1, `pool="cpu"`)
	// The dispatcher: the job's end, its times, its dispatch, its webhook.
	grew("mediajobs_jobs_finished_total", d0, d1, `pool="cpu"`, `status="succeeded"`)
	grew("mediajobs_queue_wait_seconds_count", d0, d1, `pool="cpu"`)
	grew("mediajobs_run_seconds_count", d0, d1, `pool="cpu"`)
	grew("mediajobs_nomad_dispatches_total", d0, d1, `pool="cpu"`, `result="ok"`)
	grew("mediajobs_webhook_deliveries_total", d0, d1, `outcome="delivered"`)
	grew("mediajobs_webhook_delivery_seconds_count", d0, d1, `outcome="delivered"`)
	// Usage per pool (docs/usage.md): the job's figures, counted once; no series
	// with an account label unless usage.per_account_metrics is on.
	use := e2e.Call(t, "GET", apiURL+"/api/jobs/"+id, key, nil).Data(t)["usage"].(map[string]any)
	for name, want := range map[string]float64{"jobs": 1, "cpu_seconds": use["cpu_seconds"].(float64), "wall_seconds": use["wall_seconds"].(float64),
		"input_bytes": use["input_bytes"].(float64), "output_bytes": use["output_bytes"].(float64), "gpu_seconds": 0} {
		metric := "mediajobs_usage_" + name + "_total"
		if got := d1.sum(metric, `pool="cpu"`) - d0.sum(metric, `pool="cpu"`); math.Abs(got-want) > 1e-6 {
			t.Errorf("%s{pool=\"cpu\"} grew by %v; the job's usage says %v", metric, got, want)
		}
	}
	if strings.Contains(d1.text, "mediajobs_account_usage_") {
		t.Error("per-account usage series without usage.per_account_metrics")
	}
	for _, c := range []struct {
		name   string
		labels []string
		want   float64 // -1: any value
	}{
		{"mediajobs_dispatcher_leader", nil, 1},
		{"mediajobs_dispatcher_ready", nil, 1},
		{"mediajobs_dispatcher_leadership_changes_total", nil, 1},
		{"mediajobs_jobs_queued", []string{`pool="cpu"`}, 0},
		{"mediajobs_jobs_running", []string{`pool="cpu"`}, 0},
		{"mediajobs_oldest_queued_seconds", []string{`pool="cpu"`}, 0},
		{"mediajobs_outbox_depth", nil, 0},
		{"mediajobs_nomad_event_stream_reconnects_total", nil, -1},
		{"mediajobs_etcd_db_size_bytes", nil, -1},
		{"mediajobs_etcd_quota_backend_bytes", nil, 8 << 30},
		{"mediajobs_build_info", []string{`version="`}, 1},
	} {
		v, ok := d1.get(c.name, c.labels...)
		if !ok || (c.want >= 0 && v != c.want) {
			t.Errorf("dispatcher: %s%v = %v (present %v), want %v", c.name, c.labels, v, ok, c.want)
		}
	}
	if _, ok := gw1.get("mediajobs_build_info"); !ok {
		t.Error("gateway: no mediajobs_build_info")
	}
	// Dispatcher series come from dispatchers only.
	if _, ok := gw1.get("mediajobs_dispatcher_leader"); ok {
		t.Error("a gateway process exports mediajobs_dispatcher_leader")
	}
	if strings.Contains(gw1.text+d1.text, id) {
		t.Error("a job id leaked into a metric label")
	}
}

// `mediajobs dev` serves the dispatcher's listener beside the API (whose /metrics
// stays on the public port without metrics_listen).
func TestDevServesDispatcherListener(t *testing.T) {
	e2e.NeedStack(t)
	disp := "http://" + e2e.Stack.Backends.Config.Dispatcher.Listen
	testenv.Eventually(t, 30*time.Second, "the dev dispatcher to be ready", func() bool { return e2e.Status(disp+"/readyz") == 200 })
	if c := e2e.Status(disp + "/healthz"); c != 200 {
		t.Fatalf("/healthz: %d", c)
	}
	m := scrape(t, disp+"/metrics")
	if v, ok := m.get("mediajobs_dispatcher_leader"); !ok || v != 1 {
		t.Fatalf("mediajobs_dispatcher_leader = %v (%v)", v, ok)
	}
	if _, ok := m.get("mediajobs_dispatcher_ready"); !ok {
		t.Fatal("no mediajobs_dispatcher_ready")
	}
	if r := e2e.Call(t, "GET", "/metrics", "", nil); r.Status != 200 || !strings.Contains(string(r.Body), "mediajobs_build_info") {
		t.Fatalf("public /metrics: %d", r.Status)
	}
}

// startProcess runs `mediajobs <command> -config cfgFile` until the test ends
// (SIGTERM, then SIGKILL); its log is shown when the test fails.
func startProcess(t *testing.T, command, cfgFile string) {
	t.Helper()
	cmd := exec.Command(e2e.RunnerBin, command, "-config", cfgFile)
	buf := &testenv.LogBuffer{}
	cmd.Stdout, cmd.Stderr = buf, buf
	cmd.Env = os.Environ()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(20 * time.Second):
			cmd.Process.Kill()
			<-done
		}
		if t.Failed() {
			t.Logf("--- %s log ---\n%s", command, e2e.Tail(buf.String(), 6000))
		}
	})
}

// samples is one scrape in Prometheus' text format.
type samples struct {
	text  string
	lines []sample
}

type sample struct {
	name, labels string
	value        float64
}

func scrape(t *testing.T, url string) samples {
	t.Helper()
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	b, _ := io.ReadAll(resp.Body)
	out := samples{text: string(b)}
	sc := bufio.NewScanner(strings.NewReader(out.text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		sp := strings.LastIndexByte(line, ' ')
		v, err := strconv.ParseFloat(line[sp+1:], 64)
		if sp < 0 || err != nil {
			continue
		}
		name, labels := line[:sp], ""
		if i := strings.IndexByte(name, '{'); i >= 0 {
			name, labels = line[:i], line[i:sp]
		}
		out.lines = append(out.lines, sample{name, labels, v})
	}
	return out
}

// get is the value of the first series of name with every label (k="v") given.
func (s samples) get(name string, labels ...string) (float64, bool) {
	for _, l := range s.lines {
		if l.name == name && hasAll(l.labels, labels) {
			return l.value, true
		}
	}
	return 0, false
}

// sum adds the series of name with every label given.
func (s samples) sum(name string, labels ...string) float64 {
	n := 0.0
	for _, l := range s.lines {
		if l.name == name && hasAll(l.labels, labels) {
			n += l.value
		}
	}
	return n
}

func hasAll(labels string, want []string) bool {
	for _, w := range want {
		if !strings.Contains(labels, w) {
			return false
		}
	}
	return true
}
