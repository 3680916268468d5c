package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// fakePipelines is an API that runs one pipeline of two steps, "enc" (two
// items that both write out.mp4) and "thumb": it takes temporary files, keeps
// the document it is sent and answers running, then how it ends.
type fakePipelines struct {
	srv     *httptest.Server
	mu      sync.Mutex
	uploads map[string]string // upload id -> bytes
	sent    map[string]any
	gets    int
	fail    bool
}

func newFakePipelines(t *testing.T) *fakePipelines {
	f := &fakePipelines{uploads: map[string]string{}}
	f.srv = httptest.NewServer(http.HandlerFunc(f.serve))
	t.Cleanup(f.srv.Close)
	return f
}

func (f *fakePipelines) view(status string) map[string]any {
	job := func(id, st string, outs ...string) map[string]any {
		links := map[string]string{}
		if st == "succeeded" {
			for _, o := range outs {
				links[o] = f.srv.URL + "/files/out/" + id + "/" + o
			}
		}
		return map[string]any{"id": id, "status": st, "output_files": links}
	}
	enc, thumb, thumbJob := "running", "queued", "queued"
	switch status {
	case "succeeded":
		enc, thumb, thumbJob = "succeeded", "succeeded", "succeeded"
	case "failed":
		enc, thumb, thumbJob = "succeeded", "failed", "failed"
	}
	encJob := enc
	tj := job("t0", thumbJob, "thumb.png", "hls/index.m3u8")
	if thumbJob == "failed" {
		tj["error_message"] = "input_files.v: job e0 failed"
	}
	return map[string]any{"id": "p1", "status": status, "error_message": map[bool]string{true: "step thumb failed: boom"}[status == "failed"],
		"steps": []any{
			map[string]any{"name": "enc", "status": enc, "needs": []string{}, "jobs": []any{job("e0", encJob, "out.mp4"), job("e1", encJob, "out.mp4")}},
			map[string]any{"name": "thumb", "status": thumb, "needs": []string{"enc"}, "jobs": []any{tj}},
		}}
}

func (f *fakePipelines) serve(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	defer f.mu.Unlock()
	w.Header().Set("Content-Type", "application/json")
	path := r.URL.Path
	switch {
	case r.Method == "POST" && path == "/api/tmp-file":
		n := fmt.Sprint(len(f.uploads))
		f.uploads[n] = ""
		json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"upload_url": f.srv.URL + "/files/up/" + n, "download_url": f.srv.URL + "/files/dl/" + n}})
	case r.Method == "PUT" && strings.HasPrefix(path, "/files/up/"):
		b, _ := io.ReadAll(r.Body)
		f.uploads[strings.TrimPrefix(path, "/files/up/")] = string(b)
		w.Write([]byte(`{"data":{}}`))
	case r.Method == "POST" && path == "/api/pipelines" && r.URL.Query().Get("dry_run") == "true":
		var doc map[string]any
		json.NewDecoder(r.Body).Decode(&doc)
		src := doc["steps"].(map[string]any)["enc"].(map[string]any)["input_files"].(map[string]any)["src"]
		v := f.view("queued")
		json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"dry_run": true, "pipeline": v, "jobs": map[string]any{
			"enc": []any{
				map[string]any{"input_files": map[string]any{"src": src}, "ffmpeg_commands": []string{"-i {{src}} -vf scale=-2:90 {{out.mp4}}"}},
				map[string]any{"input_files": map[string]any{"src": src}, "ffmpeg_commands": []string{"-i {{src}} -vf scale=-2:120 {{out.mp4}}"}},
			},
			"thumb": []any{map[string]any{"input_files": map[string]any{"v": "step:enc[0]/out.mp4"}, "ffmpeg_commands": []string{"-i {{v}} -frames:v 1 {{thumb.png}}"}}},
		}}})
	case r.Method == "POST" && path == "/api/pipelines":
		json.NewDecoder(r.Body).Decode(&f.sent)
		json.NewEncoder(w).Encode(map[string]any{"data": f.view("queued")})
	case r.Method == "GET" && path == "/api/pipelines/p1":
		f.gets++
		status := "running"
		if f.gets > 2 {
			status = map[bool]string{true: "failed", false: "succeeded"}[f.fail]
		}
		json.NewEncoder(w).Encode(map[string]any{"data": f.view(status)})
	case r.Method == "GET" && strings.HasPrefix(path, "/files/out/"):
		w.Write([]byte("bytes of " + strings.TrimPrefix(path, "/files/out/")))
	default:
		w.WriteHeader(404)
		w.Write([]byte(`{"errorCode":"notFound","message":"no such route"}`))
	}
}

func (f *fakePipelines) run(args ...string) (int, string, string) {
	var out, errb bytes.Buffer
	args = append(args, "-url", f.srv.URL, "-api-key", "k")
	code := run(context.Background(), args, &out, &errb)
	return code, out.String(), errb.String()
}

// `pipeline run FILE` uploads each local file once (a relative path from
// FILE's directory), sends the document with their links, follows the steps
// in plain lines off a terminal and saves the outputs by step, by item where
// items write the same name.
func TestPipelineRunUploadsFollowsAndDownloads(t *testing.T) {
	f := newFakePipelines(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "in.mp4"), []byte("the source"), 0o644)
	doc := filepath.Join(dir, "p.json")
	os.WriteFile(doc, []byte(`{"steps": {
	  "enc": {"input_files": {"src": "in.mp4"}, "output_files": ["out.mp4"], "ffmpeg_commands": ["-i {{src}} -vf scale=-2:${item.h} {{out.mp4}}"],
	          "for_each": [{"h": "90"}, {"h": "120"}]},
	  "thumb": {"input_files": {"v": "step:enc[0]/out.mp4", "again": "`+filepath.Join(dir, "in.mp4")+`", "u": "https://example.com/a.mp4"},
	            "output_files": ["thumb.png", "hls/index.m3u8"], "ffmpeg_commands": ["-i {{v}} -frames:v 1 {{thumb.png}}"]}
	}, "fail_fast": true}`), 0o644)
	out := filepath.Join(t.TempDir(), "out")
	code, stdout, stderr := f.run("pipeline", "run", doc, "-d", out)
	if code != 0 {
		t.Fatalf("pipeline run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if len(f.uploads) != 1 || f.uploads["0"] != "the source" {
		t.Fatalf("uploads %v: want in.mp4 once", f.uploads)
	}
	steps := f.sent["steps"].(map[string]any)
	enc, thumb := steps["enc"].(map[string]any), steps["thumb"].(map[string]any)
	link := f.srv.URL + "/files/dl/0"
	if in := enc["input_files"].(map[string]any); in["src"] != link {
		t.Fatalf("enc's inputs sent as %v", in)
	}
	if in := thumb["input_files"].(map[string]any); in["again"] != link || in["v"] != "step:enc[0]/out.mp4" || in["u"] != "https://example.com/a.mp4" {
		t.Fatalf("thumb's inputs sent as %v", in)
	}
	if f.sent["fail_fast"] != true || len(enc["for_each"].([]any)) != 2 {
		t.Fatalf("document sent as %v", f.sent)
	}
	for _, want := range []string{"pipeline p1 created: 2 steps, 3 jobs", "step enc running", "step thumb succeeded", "saved " + filepath.Join(out, "thumb", "hls", "index.m3u8")} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("output lacks %q:\n%s", want, stdout)
		}
	}
	if strings.ContainsAny(stdout, "\r\x1b") {
		t.Fatalf("bar garbage in piped output: %q", stdout)
	}
	for p, want := range map[string]string{
		"enc/0/out.mp4":        "bytes of e0/out.mp4",
		"enc/1/out.mp4":        "bytes of e1/out.mp4",
		"thumb/thumb.png":      "bytes of t0/thumb.png",
		"thumb/hls/index.m3u8": "bytes of t0/hls/index.m3u8",
	} {
		if b, err := os.ReadFile(filepath.Join(out, filepath.FromSlash(p))); err != nil || string(b) != want {
			t.Errorf("%s: %q, %v; want %q", p, b, err, want)
		}
	}

	// -step saves only that step's outputs.
	f.gets = 0
	only := filepath.Join(t.TempDir(), "only")
	if code, stdout, stderr = f.run("pipeline", "run", doc, "-d", only, "-step", "thumb"); code != 0 {
		t.Fatalf("pipeline run -step: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if _, err := os.Stat(filepath.Join(only, "enc")); err == nil {
		t.Fatal("-step thumb saved enc's outputs")
	}
	if _, err := os.Stat(filepath.Join(only, "thumb", "thumb.png")); err != nil {
		t.Fatal(err)
	}
}

// A pipeline that fails exits 1 with the first failed step's error, and
// prints the failed step's error as it ends; -json prints the pipeline.
func TestPipelineRunFails(t *testing.T) {
	f := newFakePipelines(t)
	f.fail = true
	doc := filepath.Join(t.TempDir(), "p.json")
	os.WriteFile(doc, []byte(`{"steps": {"enc": {"output_files": ["out.mp4"], "ffmpeg_commands": ["-f lavfi -i testsrc -t 1 {{out.mp4}}"]}}}`), 0o644)
	code, stdout, stderr := f.run("pipeline", "run", "-json", doc)
	if code != 1 || !strings.Contains(stderr, "pipeline p1 failed: step thumb failed: boom") || !strings.Contains(stderr, "step thumb failed: input_files.v: job e0 failed") {
		t.Fatalf("failing pipeline: exit %d\nstdout %s\nstderr %s", code, stdout, stderr)
	}
	var p map[string]any
	if json.Unmarshal([]byte(stdout), &p) != nil || p["status"] != "failed" {
		t.Fatalf("-json printed %s", stdout)
	}
}

// A document the command cannot send is refused before anything is sent,
// naming the problem.
func TestPipelineRunRefusesBadDocuments(t *testing.T) {
	f := newFakePipelines(t)
	dir := t.TempDir()
	for _, c := range []struct{ doc, want string }{
		{`{"steps": {"a": {"output_files": ["o.mp4"], "ffmpeg_comands": ["x"]}}}`, `unknown field "ffmpeg_comands"`},
		{`{"steps": {}}`, "no steps"},
		{`{"steps": {"a": {"input_files": {"v": "missing.mp4"}, "output_files": ["o.mp4"], "ffmpeg_commands": ["-i {{v}} {{o.mp4}}"]}}}`, "steps.a.input_files.v: stat " + filepath.Join(dir, "missing.mp4")},
		{`{"steps": {"a": {"input_files": {"v": "part${index}.mp4"}, "output_files": ["o.mp4"], "ffmpeg_commands": ["-i {{v}} {{o.mp4}}"], "for_each": [{"k": "1"}]}}}`, "cannot take placeholders"},
	} {
		doc := filepath.Join(dir, "p.json")
		os.WriteFile(doc, []byte(c.doc), 0o644)
		code, stdout, stderr := f.run("pipeline", "run", doc)
		if code == 0 || !strings.Contains(stderr, c.want) {
			t.Errorf("%s: exit %d, %s%s; want %q", c.doc, code, stdout, stderr, c.want)
		}
	}
	if f.sent != nil || len(f.uploads) != 0 {
		t.Fatalf("a refused document reached the service: %v %v", f.sent, f.uploads)
	}
	os.WriteFile(filepath.Join(dir, "p.json"), []byte(`{"steps": {"a": {"output_files": ["o.mp4"], "ffmpeg_commands": ["-f lavfi -i testsrc -t 1 {{o.mp4}}"]}}}`), 0o644)
	if code, _, stderr := f.run("pipeline", "run", "-step", "nope", filepath.Join(dir, "p.json")); code != 2 || !strings.Contains(stderr, "no such step") {
		t.Fatalf("-step of an unknown step: exit %d %s", code, stderr)
	}
}

// --dry-run uploads nothing (a local file stands in by name) and prints every
// job the service says the pipeline would make, step by step.
func TestPipelineRunDryRun(t *testing.T) {
	f := newFakePipelines(t)
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "in.mp4"), []byte("the source"), 0o644)
	doc := filepath.Join(dir, "p.json")
	os.WriteFile(doc, []byte(`{"steps": {
	  "enc": {"input_files": {"src": "in.mp4"}, "output_files": ["out.mp4"], "ffmpeg_commands": ["-i {{src}} -vf scale=-2:${item.h} {{out.mp4}}"], "for_each": [{"h": "90"}, {"h": "120"}]},
	  "thumb": {"input_files": {"v": "step:enc[0]/out.mp4"}, "output_files": ["thumb.png"], "ffmpeg_commands": ["-i {{v}} -frames:v 1 {{thumb.png}}"]}}}`), 0o644)
	code, stdout, stderr := f.run("pipeline", "run", "--dry-run", doc)
	if code != 0 {
		t.Fatalf("--dry-run: exit %d\n%s\n%s", code, stdout, stderr)
	}
	if len(f.uploads) != 0 || f.sent != nil {
		t.Fatalf("a dry run uploaded %v or created %v", f.uploads, f.sent)
	}
	for _, want := range []string{
		"the pipeline would be accepted: 2 steps, 3 jobs",
		"step enc:\n  [0] input src: " + f.srv.URL + "/files/dry-run/in.mp4\n  [0] ffmpeg -i {{src}} -vf scale=-2:90 {{out.mp4}}\n",
		"  [1] ffmpeg -i {{src}} -vf scale=-2:120 {{out.mp4}}",
		"step thumb (after enc):\n  input v: step:enc[0]/out.mp4\n  ffmpeg -i {{v}} -frames:v 1 {{thumb.png}}\n",
	} {
		if !strings.Contains(stdout, want) {
			t.Fatalf("--dry-run output lacks %q:\n%s", want, stdout)
		}
	}
}
