package gateway

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

type harness struct {
	t     *testing.T
	app   *fiber.App
	gw    *Gateway
	store *store.Store
	keys  map[string]string // account -> secret
}

func newHarness(t *testing.T) *harness {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	cfg.Server.PublicURL = "http://gw.test"
	cfg.Server.MaxBodyBytes = 4096
	cfg.Server.MaxUploadBytes = 1000
	cfg.Server.WaitLimit = "2s"
	cfg.Pools = []*config.Pool{{Name: "cpu"}, {Name: "nvidia", GPU: &config.GPU{}}}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	blobs, _ := blob.NewLocal(t.TempDir())
	g := &Gateway{Config: cfg, Store: s, Blobs: blobs, Signer: blob.Signer{Secret: []byte("0123456789abcdef"), Base: "http://gw.test"},
		Resolver: fakeDNS{},
		// Warnings and errors only: an access line per request would bury them.
		Log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	h := &harness{t: t, app: g.App(), gw: g, store: s, keys: map[string]string{}}
	cfg.Server.RateLimit = 0 // TestRateLimit turns it on
	// app.Test's requests all come from one address; the tests of failed
	// authentication (authlimit_test.go) turn the limit on.
	cfg.Server.AuthFailureRate = 0
	for _, acct := range []string{"alice", "bob"} {
		a, _ := s.EnsureAccount(context.Background(), acct, acct)
		secret := mj.NewAPIKeySecret()
		s.AddAPIKey(context.Background(), a.ID, "k", secret)
		h.keys[acct] = secret
	}
	return h
}

func (h *harness) do(method, target, acct string, body any, hdr ...string) (int, map[string]any, http.Header) {
	h.t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		j, _ := json.Marshal(b)
		rd = bytes.NewReader(j)
	}
	req := httptest.NewRequest(method, target, rd)
	if acct != "" {
		req.Header.Set("Authorization", "Bearer "+h.keys[acct])
	}
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := h.app.Test(req, 10000)
	if err != nil {
		h.t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	var m map[string]any
	json.Unmarshal(raw, &m)
	return resp.StatusCode, m, resp.Header
}

// serve runs the app on a loopback port for tests that need a real connection.
func (h *harness) serve() string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		h.t.Fatal(err)
	}
	go h.app.Listener(ln)
	h.t.Cleanup(func() { h.app.Shutdown() })
	return "http://" + ln.Addr().String()
}

func (h *harness) total(acct string) int {
	p, err := h.store.ListJobs(context.Background(), acct, store.ListOptions{Limit: 1})
	if err != nil {
		h.t.Fatal(err)
	}
	return p.Total
}

func valid() map[string]any {
	return map[string]any{
		"input_files":     map[string]string{"video": "https://media.example/a.mp4"},
		"output_files":    []string{"out.mp4"},
		"ffmpeg_commands": []string{"-i {{video}} {{out.mp4}}"},
	}
}

func with(k string, v any) map[string]any {
	m := valid()
	if v == nil {
		delete(m, k)
	} else {
		m[k] = v
	}
	return m
}

func TestCreateValidation(t *testing.T) {
	h := newHarness(t)
	cases := []struct {
		name  string
		body  any
		field string // a key of details ("" when the error has none)
	}{
		{"two output directories", with("output_files", []string{"a/b/out.mp4"}), "output_files[0]"},
		{"absolute output", with("output_files", []string{"/out.mp4"}), "output_files[0]"},
		{"output dir dotdot", with("output_files", []string{"../stream_%v/x.ts"}), "output_files[0]"},
		{"counter in output dir", with("output_files", []string{"s_%03d/x.ts"}), "output_files[0]"},
		{"missing outputs", with("output_files", nil), "output_files"},
		{"duplicate output", with("output_files", []string{"out.mp4", "out.mp4"}), "output_files[1]"},
		{"bad output name", with("output_files", []string{"../out.mp4"}), "output_files[0]"},
		{"two counters", with("output_files", []string{"a_%d_%d.png"}), "output_files[0]"},
		{"bad input name", with("input_files", map[string]string{"-x": "https://a/b"}), "input_files.-x"},
		{"ftp input", with("input_files", map[string]string{"video": "ftp://a/b"}), "input_files.video"},
		{"relative input url", with("input_files", map[string]string{"video": "/etc/passwd"}), "input_files.video"},
		{"no commands", with("ffmpeg_commands", []string{}), "ffmpeg_commands"},
		{"21 commands", with("ffmpeg_commands", make([]string, 21)), "ffmpeg_commands"},
		{"unknown placeholder", with("ffmpeg_commands", []string{"-i {{nope}} {{out.mp4}}"}), "ffmpeg_commands[0]"},
		{"undeclared output", with("ffmpeg_commands", []string{"-i {{video}} outputs/x.mp4"}), "ffmpeg_commands[0]"},
		{"absolute path", with("ffmpeg_commands", []string{"-i /etc/passwd {{out.mp4}}"}), "ffmpeg_commands[0]"},
		{"dotdot", with("ffmpeg_commands", []string{"-i ../../x {{out.mp4}}"}), "ffmpeg_commands[0]"},
		{"concat protocol outside the job", with("ffmpeg_commands", []string{"-i concat:/etc/passwd|a {{out.mp4}}"}), "ffmpeg_commands[0]"},
		{"protocol prefix", with("ffmpeg_commands", []string{"-i pipe:0 {{out.mp4}}"}), "ffmpeg_commands[0]"},
		{"url in command", with("ffmpeg_commands", []string{"-i https://x/y {{out.mp4}}"}), "ffmpeg_commands[0]"},
		{"unbalanced quote", with("ffmpeg_commands", []string{"-i '{{video}} {{out.mp4}}"}), "ffmpeg_commands[0]"},
		{"nvenc on cpu", with("ffmpeg_commands", []string{"-i {{video}} -c:v h264_nvenc {{out.mp4}}"}), "ffmpeg_commands[0]"},
		{"unknown machine", with("machine", "tpu"), "machine"},
		{"timeout too big", with("timeout_seconds", 999999), "timeout_seconds"},
		{"timeout zero", with("timeout_seconds", 0), "timeout_seconds"},
		{"webhook scheme", with("webhook_url", "file:///etc/passwd"), "webhook_url"},
		// Named only to prove they are refused: nothing is sent to them.
		{"webhook link-local", with("webhook_url", "http://169.254.169.254/latest"), "webhook_url"},
		{"webhook private via dns", with("webhook_url", "https://internal.example/hook"), "webhook_url"},
		{"webhook loopback", with("webhook_url", "http://127.0.0.1:9/hook"), "webhook_url"},
		{"webhook localhost", with("webhook_url", "http://localhost:9/hook"), "webhook_url"},
		{"input private", with("input_files", map[string]string{"video": "http://192.168.1.10/a.mp4"}), "input_files.video"},
		{"metadata too big", with("metadata", map[string]string{"k": strings.Repeat("x", 5000)}), ""},
		{"wrong type", with("output_files", "out.mp4"), "output_files"},
		{"wrong type int", with("timeout_seconds", "10"), "timeout_seconds"},
		{"malformed json", `{"output_files": [`, ""},
		{"empty body", "", ""},
		{"array body", `[1]`, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, _ := h.do("POST", "/api/ffmpeg", "alice", c.body)
			if status != 400 && status != 413 {
				t.Fatalf("HTTP %d %v", status, body)
			}
			if body["errorCode"] != "validationError" && body["errorCode"] != "payloadTooLarge" || body["message"] == "" {
				t.Fatalf("body %v", body)
			}
			if c.field != "" {
				if d, _ := body["details"].(map[string]any); d[c.field] == nil {
					t.Fatalf("details %v lack %q", body["details"], c.field)
				}
			}
		})
	}
	if n := h.total("alice"); n != 0 {
		t.Fatalf("%d jobs stored by rejected requests", n)
	}
	// GPU codecs are fine on a GPU pool, and the shorthand and a leading ffmpeg work.
	ok := with("ffmpeg_commands", nil)
	ok["ffmpeg_command"] = "ffmpeg -i {{video}} -c:v h264_nvenc {{out.mp4}}"
	ok["machine"] = "nvidia"
	if status, body, _ := h.do("POST", "/api/ffmpeg", "alice", ok); status != 200 {
		t.Fatalf("valid GPU job: HTTP %d %v", status, body)
	}
	// No output files (an analysis), and outputs in one directory level with %v.
	analysis := with("output_files", []string{})
	analysis["ffmpeg_commands"] = []string{"-i {{video}} -af loudnorm=print_format=json -f null -"}
	ladder := with("output_files", []string{"stream_%v/playlist.m3u8", "stream_%v/data%03d.ts", "hls/index.m3u8"})
	ladder["ffmpeg_commands"] = []string{"-i {{video}} -f hls outputs/hls/index.m3u8"}
	for name, req := range map[string]map[string]any{"analysis": analysis, "ladder": ladder} {
		status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req)
		if status != 200 {
			t.Fatalf("valid %s job: HTTP %d %v", name, status, body)
		}
		if _, ok := body["data"].(map[string]any)["analysis"].([]any); !ok {
			t.Fatalf("%s job: analysis is not a list: %v", name, body["data"])
		}
	}
}

func TestBodyTooLarge(t *testing.T) {
	h := newHarness(t)
	big := with("metadata", map[string]string{"k": strings.Repeat("x", 5000)})
	status, body, _ := h.do("POST", "/api/jobs", "alice", big)
	if status != 413 || body["errorCode"] != "payloadTooLarge" {
		t.Fatalf("HTTP %d %v", status, body)
	}
}

func TestCreateGetListIsolation(t *testing.T) {
	h := newHarness(t)
	status, body, _ := h.do("POST", "/api/jobs", "alice", with("metadata", map[string]string{"order": "7"}), "Content-Type", "text/plain")
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	job := body["data"].(map[string]any)
	for k, want := range map[string]any{"status": "queued", "machine": "cpu", "timeout_seconds": float64(3600), "error_message": "", "started_at": nil, "finished_at": nil, "webhook_url": nil} {
		if job[k] != want {
			t.Errorf("%s = %v, want %v", k, job[k], want)
		}
	}
	if job["metadata"].(map[string]any)["order"] != "7" || len(job["output_files"].(map[string]any)) != 0 {
		t.Errorf("job %v", job)
	}
	id := job["id"].(string)
	if status, _, _ := h.do("GET", "/api/jobs/"+id, "alice", nil); status != 200 {
		t.Fatalf("owner GET: %d", status)
	}
	if status, body, _ := h.do("GET", "/api/jobs/"+id, "bob", nil); status != 404 || body["errorCode"] != "notFound" {
		t.Fatalf("other account GET: %d %v", status, body)
	}
	if status, _, _ := h.do("POST", "/api/jobs/"+id+"/cancel", "bob", nil); status != 404 {
		t.Fatalf("other account cancel: %d", status)
	}
	_, list, _ := h.do("GET", "/api/jobs", "bob", nil)
	if len(list["data"].([]any)) != 0 || list["pagingParams"].(map[string]any)["total"] != float64(0) {
		t.Fatalf("bob's list %v", list)
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "offset=-1"} {
		if status, body, _ := h.do("GET", "/api/jobs?"+q, "alice", nil); status != 400 || body["errorCode"] != "validationError" {
			t.Errorf("?%s: %d %v", q, status, body)
		}
	}
}

func TestCancelAndWait(t *testing.T) {
	h := newHarness(t)
	_, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid())
	id := body["data"].(map[string]any)["id"].(string)
	status, body, _ := h.do("POST", "/api/jobs/"+id+"/cancel", "alice", nil, "Content-Type", "application/json")
	if status != 200 || body["data"].(map[string]any)["status"] != "cancelled" || body["data"].(map[string]any)["finished_at"] == nil {
		t.Fatalf("cancel: %d %v", status, body)
	}
	if status, body, _ := h.do("POST", "/api/jobs/"+id+"/cancel", "alice", nil); status != 409 || body["errorCode"] != "conflict" {
		t.Fatalf("second cancel: %d %v", status, body)
	}
	j, _ := h.store.Job(context.Background(), id)
	if j.Status != mj.StatusCancelled {
		t.Fatalf("stored status %s", j.Status)
	}
	ids, _, _ := h.store.JobIDs(context.Background(), h.store.QueuePrefix(), 0)
	if len(ids) != 0 {
		t.Fatalf("cancelled job still queued: %v", ids)
	}

	// wait=true returns as soon as the job is terminal...
	done := make(chan map[string]any)
	go func() {
		_, body, _ := h.do("POST", "/api/ffmpeg?wait=true", "alice", valid())
		done <- body
	}()
	var waiting string
	testenv.Eventually(t, 5*time.Second, "the job to be stored", func() bool {
		ids, _, _ := h.store.JobIDs(context.Background(), h.store.QueuePrefix(), 0)
		if len(ids) == 1 {
			waiting = ids[0]
		}
		return waiting != ""
	})
	h.store.UpdateJob(context.Background(), waiting, func(j *mj.Job) error { j.Status = mj.StatusFailed; j.ErrorMessage = "x"; return nil })
	if got := (<-done)["data"].(map[string]any); got["id"] != waiting || got["status"] != "failed" {
		t.Fatalf("wait returned %v", got)
	}
	// ...and after wait_limit with the job as it stands.
	_, body, _ = h.do("POST", "/api/ffmpeg?wait=true", "alice", valid())
	if body["data"].(map[string]any)["status"] != "queued" {
		t.Fatalf("wait past the limit: %v", body)
	}
}

func TestSignedFiles(t *testing.T) {
	h := newHarness(t)
	_, body, _ := h.do("POST", "/api/tmp-file", "alice", nil)
	d := body["data"].(map[string]any)
	up, _ := url.Parse(d["upload_url"].(string))
	down, _ := url.Parse(d["download_url"].(string))
	if _, err := time.Parse(time.RFC3339, d["expires_at"].(string)); err != nil {
		t.Fatalf("expires_at %v", d["expires_at"])
	}
	if status, _, _ := h.do("PUT", up.RequestURI(), "", "hello", "Content-Type", "video/mp4"); status != 200 {
		t.Fatalf("upload: %d", status)
	}
	req := httptest.NewRequest("GET", down.RequestURI(), nil)
	resp, _ := h.app.Test(req)
	got, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(got) != "hello" {
		t.Fatalf("download: %d %q", resp.StatusCode, got)
	}
	// Over a real connection: the oversized body is refused with 413. The server
	// may answer and close before the body is sent, so the body is written beside
	// the read, and a reset while writing it is no failure.
	base := h.serve()
	for _, size := range []int{2000, 1 << 20} {
		conn, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: gw.test\r\nContent-Length: %d\r\n\r\n", up.RequestURI(), size)
		go conn.Write([]byte(strings.Repeat("x", size)))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("oversized upload (%d bytes): %v", size, err)
		}
		var e map[string]any
		json.NewDecoder(resp.Body).Decode(&e)
		conn.Close()
		if resp.StatusCode != 413 || e["errorCode"] != "payloadTooLarge" {
			t.Fatalf("oversized upload (%d bytes): %d %v", size, resp.StatusCode, e)
		}
	}
	req = httptest.NewRequest("GET", down.RequestURI(), nil)
	resp, _ = h.app.Test(req)
	got, _ = io.ReadAll(resp.Body)
	if string(got) != "hello" {
		t.Fatalf("a refused upload replaced the file: %q", got)
	}
	if status, body, _ := h.do("GET", strings.Replace(down.RequestURI(), "sig=", "sig=x", 1), "", nil); status != 403 || body["errorCode"] != "forbidden" {
		t.Fatalf("tampered download: %d %v", status, body)
	}
	if status, _, _ := h.do("PUT", down.RequestURI(), "", "overwrite"); status != 403 {
		t.Fatalf("download link used to upload: %d", status)
	}
}

func TestRoutingAndErrors(t *testing.T) {
	h := newHarness(t)
	if status, _, _ := h.do("GET", "/api//jobs", "alice", nil); status != 200 {
		t.Fatalf("double slash: %d", status)
	}
	if status, body, _ := h.do("GET", "/api/nothing", "alice", nil); status != 404 || body["errorCode"] != "notFound" {
		t.Fatalf("unknown route: %d %v", status, body)
	}
	if status, body, _ := h.do("GET", "/api/jobs", "", nil, "Authorization", "Bearer "); status != 401 || body["errorCode"] != "badApiKey" {
		t.Fatalf("empty bearer: %d %v", status, body)
	}
	if status, _, _ := h.do("GET", "/readyz", "", nil); status != 200 {
		t.Fatalf("readyz: %d", status)
	}
}

// fakeDNS answers for the test hosts without sending a DNS query.
type fakeDNS struct{}

func (fakeDNS) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	switch host {
	case "internal.example":
		return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
	case "media.example", "hooks.example":
		return []netip.Addr{netip.MustParseAddr("93.184.215.14")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// A temporary file's download_url is the service's own signed link: accepted as an
// input whatever public_url resolves to (here nothing; in a company network, a
// private address), while a link with a wrong signature gets the usual check.
func TestOwnDownloadURLIsAnInput(t *testing.T) {
	h := newHarness(t)
	h.gw.Signer.Base = "http://internal.example" // resolves to a private address (fakeDNS)
	_, body, _ := h.do("POST", "/api/tmp-file", "alice", nil)
	down := body["data"].(map[string]any)["download_url"].(string)
	up, _ := url.Parse(body["data"].(map[string]any)["upload_url"].(string))
	if status, _, _ := h.do("PUT", up.RequestURI(), "", "bytes"); status != 200 {
		t.Fatalf("upload: %d", status)
	}
	if status, body, _ := h.do("POST", "/api/ffmpeg", "alice", with("input_files", map[string]string{"video": down})); status != 200 {
		t.Fatalf("own download_url as input: %d %v", status, body)
	}
	forged := strings.Replace(down, "sig=", "sig=x", 1)
	if status, body, _ := h.do("POST", "/api/ffmpeg", "alice", with("input_files", map[string]string{"video": forged})); status != 400 {
		t.Fatalf("forged link as input: %d %v, want 400", status, body)
	}
	other := strings.Replace(down, "http://internal.example/", "http://internal.example:8080/", 1)
	if status, body, _ := h.do("POST", "/api/ffmpeg", "alice", with("input_files", map[string]string{"video": other})); status != 400 {
		t.Fatalf("another host's link as input: %d %v, want 400", status, body)
	}
}

// An upload whose body stops arriving ends at server.upload_timeout with a
// client error, not an unknownError.
func TestSlowUploadTimesOut(t *testing.T) {
	h := newHarness(t)
	h.gw.Config.Server.UploadTimeoutD = time.Second
	h.app = h.gw.App()
	_, body, _ := h.do("POST", "/api/tmp-file", "alice", nil)
	up, _ := url.Parse(body["data"].(map[string]any)["upload_url"].(string))
	conn, err := net.Dial("tcp", strings.TrimPrefix(h.serve(), "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "PUT %s HTTP/1.1\r\nHost: gw.test\r\nContent-Length: 900\r\n\r\n%s", up.RequestURI(), strings.Repeat("x", 100))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatal(err)
	}
	var e map[string]any
	json.NewDecoder(resp.Body).Decode(&e)
	if resp.StatusCode != 400 || e["errorCode"] != "validationError" || !strings.Contains(fmt.Sprint(e["message"]), "upload_timeout") {
		t.Fatalf("stalled upload: %d %v", resp.StatusCode, e)
	}
}

// downKV fails every transaction as etcd does while it elects a leader.
type downKV struct{ clientv3.KV }

func (d downKV) Txn(ctx context.Context) clientv3.Txn { return downTxn{d.KV.Txn(ctx)} }

type downTxn struct{ clientv3.Txn }

func (t downTxn) If(c ...clientv3.Cmp) clientv3.Txn  { return downTxn{t.Txn.If(c...)} }
func (t downTxn) Then(o ...clientv3.Op) clientv3.Txn { return downTxn{t.Txn.Then(o...)} }
func (t downTxn) Else(o ...clientv3.Op) clientv3.Txn { return downTxn{t.Txn.Else(o...)} }
func (t downTxn) Commit() (*clientv3.TxnResponse, error) {
	return nil, rpctypes.ErrLeaderChanged
}

// While etcd has no leader (writes fail after the store's own retries), a create
// is a 503 "unavailable" with Retry-After, not an unknownError 500, and stores
// nothing.
func TestCreateWhileEtcdElectsIs503(t *testing.T) {
	h := newHarness(t)
	cli := h.store.Client()
	real := cli.KV
	cli.KV = downKV{real}
	status, body, hdr := h.do("POST", "/api/ffmpeg", "alice", map[string]any{
		"output_files": []string{"out.mp4"}, "ffmpeg_commands": []string{"-f lavfi -i testsrc=duration=1 {{out.mp4}}"},
	})
	cli.KV = real
	if status != 503 || body["errorCode"] != "unavailable" || hdr.Get("Retry-After") == "" || !strings.Contains(fmt.Sprint(body["message"]), "etcd") {
		t.Fatalf("create while etcd elects: %d %v Retry-After %q", status, body, hdr.Get("Retry-After"))
	}
	if _, list, _ := h.do("GET", "/api/jobs", "alice", nil); len(list["data"].([]any)) != 0 {
		t.Fatalf("jobs after a refused create: %v", list["data"])
	}
}
