package devstack

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	mj "github.com/mediajobs/mediajobs"
	mjmcp "github.com/mediajobs/mediajobs/mcp"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// mcpSession starts `mediajobs mcp` over stdio against the stack, as an MCP client
// configuration would, and connects the SDK's own client to it.
func mcpSession(t *testing.T) *mcp.ClientSession {
	t.Helper()
	cmd := exec.Command(e2e.RunnerBin, "mcp")
	cmd.Env = append(os.Environ(), "MEDIAJOBS_URL="+e2e.Stack.URL, "MEDIAJOBS_API_KEY="+e2e.Stack.APIKey)
	cmd.Stderr = os.Stderr
	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Minute)
	t.Cleanup(cancel)
	s, err := mcp.NewClient(&mcp.Implementation{Name: "mediajobs-test", Version: "1"}, nil).Connect(ctx, &mcp.CommandTransport{Command: cmd}, nil)
	if err != nil {
		t.Fatalf("connect to mediajobs mcp: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// callTool calls a tool and returns its text and whether it is a tool error.
func callTool(t *testing.T, s *mcp.ClientSession, name string, args map[string]any) (string, bool) {
	t.Helper()
	res, err := s.CallTool(context.Background(), &mcp.CallToolParams{Name: name, Arguments: args})
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	var b strings.Builder
	for _, c := range res.Content {
		if tc, ok := c.(*mcp.TextContent); ok {
			b.WriteString(tc.Text)
		}
	}
	return b.String(), res.IsError
}

// An e2e.Agent runs a job through `mediajobs mcp` from a local file to a downloaded
// output; checks a refused command without running it and gets the checker's
// message; reads the job's ffmpeg log; probes the local file.
func TestMCPRunsAJobFromALocalFile(t *testing.T) {
	e2e.NeedStack(t)
	s := mcpSession(t)
	tools, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	names := map[string]bool{}
	for _, tool := range tools.Tools {
		names[tool.Name] = true
		if tool.Description == "" || tool.InputSchema == nil {
			t.Errorf("tool %s has no description or input schema", tool.Name)
		}
	}
	for _, want := range []string{"run_job", "check_job", "get_job", "list_jobs", "wait_job", "cancel_job", "job_logs", "probe_media", "run_pipeline", "get_pipeline", "cancel_pipeline"} {
		if !names[want] {
			t.Errorf("no tool %s; have %v", want, names)
		}
	}

	dir := t.TempDir()
	in := filepath.Join(dir, "in.mp4")
	e2e.WriteFile(t, in, string(e2e.Call(t, "GET", e2e.ClipURL, "", nil).Body))
	out := filepath.Join(dir, "out")

	text, isErr := callTool(t, s, "check_job", map[string]any{
		"input_files": map[string]string{"video": in}, "output_files": []string{"small.mp4"},
		"ffmpeg_commands": []string{"-i {{video}} -i /etc/passwd {{small.mp4}}"}})
	if !isErr || !strings.Contains(text, "ffmpeg_commands[0]") || !strings.Contains(text, "/etc/passwd") {
		t.Fatalf("check_job of a refused command: error=%v %s", isErr, text)
	}

	text, isErr = callTool(t, s, "run_job", map[string]any{
		"input_files": map[string]string{"video": in}, "output_files": []string{"small.mp4"},
		"ffmpeg_commands": []string{"-i {{video}} -vf scale=160:-2 {{small.mp4}}"}, "download_dir": out})
	if isErr {
		t.Fatalf("run_job: %s", text)
	}
	var run struct {
		Job struct {
			ID     string `json:"id"`
			Status string `json:"status"`
		} `json:"job"`
		Downloaded map[string]string `json:"downloaded"`
	}
	if err := json.Unmarshal([]byte(text), &run); err != nil || run.Job.Status != "succeeded" {
		t.Fatalf("run_job answered %v: %s", err, text)
	}
	if p := run.Downloaded["small.mp4"]; p != filepath.Join(out, "small.mp4") {
		t.Fatalf("downloaded: %v", run.Downloaded)
	}
	width, _ := exec.Command(e2e.Ffprobe, "-v", "error", "-select_streams", "v:0", "-show_entries", "stream=width", "-of", "csv=p=0", filepath.Join(out, "small.mp4")).Output()
	if strings.TrimSpace(string(width)) != "160" {
		t.Fatalf("the downloaded output is %q wide, want 160", width)
	}

	text, isErr = callTool(t, s, "job_logs", map[string]any{"id": run.Job.ID})
	if isErr || !strings.Contains(text, "Input #0") || !strings.Contains(text, "Stream mapping") {
		t.Fatalf("job_logs: error=%v %.2000s", isErr, text)
	}

	text, isErr = callTool(t, s, "probe_media", map[string]any{"file": in})
	var info mjmcp.MediaInfo
	if isErr || json.Unmarshal([]byte(text), &info) != nil {
		t.Fatalf("probe_media: error=%v %s", isErr, text)
	}
	if !strings.Contains(info.Format, "mp4") || info.Duration != "00:00:03.00" || len(info.Streams) != 2 ||
		!strings.Contains(info.Streams[0], "Video: h264") || !strings.Contains(info.Streams[1], "Audio: aac") {
		t.Fatalf("probe_media: %+v", info)
	}

	text, isErr = callTool(t, s, "get_job", map[string]any{"id": "00000000-0000-0000-0000-000000000000"})
	if !isErr || !strings.Contains(text, "notFound") {
		t.Fatalf("get_job of no job: error=%v %s", isErr, text)
	}
}

// Over streamable HTTP (`mediajobs mcp -http`) each session uses the request's
// bearer key, a request without one is refused, and tools take URLs only.
func TestMCPOverHTTP(t *testing.T) {
	e2e.NeedStack(t)
	addr := e2e.FreeAddr()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		done <- e2e.Run(ctx, []string{"mcp", "-http", addr, "-url", e2e.Stack.URL}, io.Discard, os.Stderr)
	}()
	t.Cleanup(func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("mediajobs mcp -http exited %d", code)
		}
	})
	endpoint := "http://" + addr + "/mcp"
	testenv.Eventually(t, 30*time.Second, "the MCP listener", func() bool {
		resp, err := http.Post(endpoint, "application/json", strings.NewReader("{}"))
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusUnauthorized
	})

	// A session is bound to the key that opened it: another account's valid key
	// cannot use its id; an invalid key is refused outright.
	acct, err := e2e.Stack.Backends.Store.EnsureAccount(context.Background(), "mcp-other", "mcp-other")
	if err != nil {
		t.Fatal(err)
	}
	other := mj.NewAPIKeySecret()
	if _, err := e2e.Stack.Backends.Store.AddAPIKey(context.Background(), acct.ID, "k", other); err != nil {
		t.Fatal(err)
	}
	rpc := func(key, session, body string) (int, string) {
		req, _ := http.NewRequest("POST", endpoint, strings.NewReader(body))
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("Content-Type", "application/json")
		req.Header.Set("Accept", "application/json, text/event-stream")
		if session != "" {
			req.Header.Set("Mcp-Session-Id", session)
			req.Header.Set("Mcp-Protocol-Version", "2025-06-18")
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		return resp.StatusCode, resp.Header.Get("Mcp-Session-Id")
	}
	initBody := `{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"t","version":"1"}}}`
	if code, _ := rpc("mj_not_a_key_at_all_0000000000", "", initBody); code != http.StatusUnauthorized {
		t.Fatalf("initialize with an invalid key: HTTP %d, want 401", code)
	}
	code, session := rpc(e2e.Stack.APIKey, "", initBody)
	if code != 200 || session == "" {
		t.Fatalf("initialize: HTTP %d, session %q", code, session)
	}
	if code, _ := rpc(other, session, `{"jsonrpc":"2.0","id":2,"method":"tools/list"}`); code == 200 || code == 202 {
		t.Fatalf("another account's key used the session: HTTP %d", code)
	}

	hc := &http.Client{Transport: bearerTransport{e2e.Stack.APIKey}}
	s, err := mcp.NewClient(&mcp.Implementation{Name: "mediajobs-test", Version: "1"}, nil).
		Connect(context.Background(), &mcp.StreamableClientTransport{Endpoint: endpoint, HTTPClient: hc}, nil)
	if err != nil {
		t.Fatalf("connect over HTTP: %v", err)
	}
	defer s.Close()
	text, isErr := callTool(t, s, "list_jobs", map[string]any{"limit": 1})
	if isErr || !strings.Contains(text, `"total"`) {
		t.Fatalf("list_jobs over HTTP: error=%v %s", isErr, text)
	}
	text, isErr = callTool(t, s, "check_job", map[string]any{"input_files": map[string]string{"video": "/etc/passwd"},
		"output_files": []string{"o.mp4"}, "ffmpeg_commands": []string{"-i {{video}} {{o.mp4}}"}})
	if !isErr || !strings.Contains(text, "not an http(s) URL") {
		t.Fatalf("a local path over HTTP: error=%v %s", isErr, text)
	}
	text, isErr = callTool(t, s, "check_job", map[string]any{"input_files": map[string]string{"video": e2e.ClipURL},
		"output_files": []string{"o.mp4"}, "ffmpeg_commands": []string{"-i {{video}} {{o.mp4}}"}})
	if isErr || !strings.Contains(text, `"nomad_job":"mediajobs-cpu"`) {
		t.Fatalf("check_job over HTTP: error=%v %s", isErr, text)
	}
}

type bearerTransport struct{ key string }

func (b bearerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("Authorization", "Bearer "+b.key)
	return http.DefaultTransport.RoundTrip(r)
}

// The reference inspector's CLI (npm) starts `mediajobs mcp` and lists its tools.
func TestMCPInspectorListsTools(t *testing.T) {
	e2e.NeedStack(t)
	node := testenv.Binary(t, "node")
	entry, err := exec.Command("../../deploy/scripts/install-mcp-inspector.sh", "--cached").Output()
	if err != nil {
		testenv.Missing(t, "the MCP inspector CLI (deploy/scripts/install-mcp-inspector.sh)")
	}
	index := strings.TrimSpace(string(entry))
	cmd := exec.Command(node, index, e2e.RunnerBin, "mcp", "--method", "tools/list")
	// It finds its own package.json relative to the working directory.
	cmd.Dir = filepath.Dir(index)
	cmd.Env = append(os.Environ(), "MEDIAJOBS_URL="+e2e.Stack.URL, "MEDIAJOBS_API_KEY="+e2e.Stack.APIKey)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("inspector: %v\n%s", err, out)
	}
	var list struct {
		Tools []struct {
			Name        string          `json:"name"`
			InputSchema json.RawMessage `json:"inputSchema"`
		} `json:"tools"`
	}
	start := strings.IndexByte(string(out), '{')
	if start < 0 || json.Unmarshal(out[start:], &list) != nil {
		t.Fatalf("inspector printed no tool list:\n%s", out)
	}
	got := fmt.Sprint(len(list.Tools))
	for _, tool := range list.Tools {
		got += " " + tool.Name
	}
	if len(list.Tools) != 11 || !strings.Contains(got, "run_job") || !strings.Contains(got, "run_pipeline") {
		t.Fatalf("inspector listed %s", got)
	}
}
