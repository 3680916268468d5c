package mcp

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
)

// run_pipeline over HTTP (a gateway on real etcd, no workers): a local path
// is refused naming the step and input, a dry run shows every job with its
// placeholders filled in, a run with wait_seconds 0 returns the pipeline
// queued, get_pipeline reads it and cancel_pipeline cancels every job.
func TestRunPipelineOverHTTP(t *testing.T) {
	g := startMCPGateway(t)
	key := g.key(t, "mcp-pipelines")
	endpoint := startMCP(t, Options{}, g.url)
	s := mcpConnect(t, newFromAddr("127.0.0.3", key), endpoint)

	tools, err := s.ListTools(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	described := false
	for _, tool := range tools.Tools {
		if tool.Name == "run_pipeline" {
			described = strings.Contains(tool.Description, `"for_each"`) && strings.Contains(tool.Description, "step:rung[*]/")
		}
	}
	if !described {
		t.Fatal("run_pipeline is not listed with an example ladder in its description")
	}

	steps := map[string]any{
		"gen": map[string]any{
			"output_files":    []string{"p${item.n}.wav"},
			"ffmpeg_commands": []string{"-f lavfi -i sine=duration=0.${item.n} {{p${item.n}.wav}}"},
			"for_each":        []map[string]string{{"n": "1"}, {"n": "2"}},
		},
		"join": map[string]any{
			"input_files":     map[string]string{"p": "step:gen[*]/p${item.n}.wav"},
			"output_files":    []string{"all.wav"},
			"ffmpeg_commands": []string{"${each:p:-i {{p}}} -filter_complex concat=n=${count:p}:v=0:a=1 {{all.wav}}"},
		},
	}
	if text, isErr := callTool(t, s, "run_pipeline", map[string]any{"steps": map[string]any{
		"a": map[string]any{"input_files": map[string]string{"v": "/tmp/in.mp4"}, "output_files": []string{"o.wav"}, "ffmpeg_commands": []string{"-i {{v}} {{o.wav}}"}},
	}}); !isErr || !strings.Contains(text, "steps.a.input_files.v") || !strings.Contains(text, "reads no local files") {
		t.Fatalf("a local path over HTTP: %v %s", isErr, text)
	}

	text, isErr := callTool(t, s, "run_pipeline", map[string]any{"steps": steps, "dry_run": true})
	if isErr || !strings.Contains(text, "-i {{p_0}} -i {{p_1}} -filter_complex concat=n=2") || !strings.Contains(text, "sine=duration=0.2") {
		t.Fatalf("dry run: %v %s", isErr, text)
	}

	text, isErr = callTool(t, s, "run_pipeline", map[string]any{"steps": steps, "wait_seconds": 0})
	var out struct {
		Pipeline struct {
			ID     string `json:"id"`
			Status string `json:"status"`
			Steps  []struct {
				Name string `json:"name"`
				Jobs []struct {
					Status string `json:"status"`
				} `json:"jobs"`
			} `json:"steps"`
		} `json:"pipeline"`
	}
	if isErr || json.Unmarshal([]byte(text), &out) != nil || out.Pipeline.Status != "queued" || len(out.Pipeline.Steps) != 2 ||
		out.Pipeline.Steps[0].Name != "gen" || len(out.Pipeline.Steps[0].Jobs) != 2 {
		t.Fatalf("run_pipeline: %v %s", isErr, text)
	}
	id := out.Pipeline.ID
	if text, isErr = callTool(t, s, "get_pipeline", map[string]any{"id": id}); isErr || !strings.Contains(text, `"id":"`+id+`"`) {
		t.Fatalf("get_pipeline: %v %s", isErr, text)
	}
	if text, isErr = callTool(t, s, "cancel_pipeline", map[string]any{"id": id}); isErr || strings.Count(text, `"status":"cancelled"`) < 3 {
		t.Fatalf("cancel_pipeline: %v %s", isErr, text)
	}
	if text, isErr = callTool(t, s, "get_pipeline", map[string]any{"id": "nope"}); !isErr || !strings.Contains(text, "notFound") {
		t.Fatalf("get_pipeline of an unknown id: %v %s", isErr, text)
	}
}
