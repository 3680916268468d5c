package gateway

import (
	"context"
	"reflect"
	"strings"
	"testing"
)

// "quality" must be true or false: another JSON type is a 400 naming
// parallel.quality, and nothing is stored (so are the other fields' types).
func TestParallelQualityRefusesOtherTypes(t *testing.T) {
	h := newHarness(t)
	h.used("alice")
	before := h.etcdRevision()
	for _, v := range []any{"yes", 1, map[string]any{}} {
		for _, target := range []string{"/api/ffmpeg", "/api/ffmpeg?dry_run=true"} {
			status, body, _ := h.do("POST", target, "alice", withParallel("", map[string]any{"quality": v}))
			details, _ := body["details"].(map[string]any)
			msg, _ := body["message"].(string)
			if status != 400 || body["errorCode"] != "validationError" || details["parallel.quality"] == nil || !strings.Contains(msg, "true or false") {
				t.Errorf("quality %v (%s): %d %v; want 400 naming parallel.quality", v, target, status, body)
			}
		}
	}
	// The other fields' types are named as JSON names them too.
	for field, want := range map[string]string{"fallback": "true or false", "chunk_seconds": "a number", "max_workers": "an integer"} {
		status, body, _ := h.do("POST", "/api/ffmpeg", "alice", withParallel("", map[string]any{field: "x"}))
		details, _ := body["details"].(map[string]any)
		msg, _ := body["message"].(string)
		if status != 400 || details["parallel."+field] == nil || !strings.Contains(msg, "must be "+want) {
			t.Errorf("%s \"x\": %d %v; want 400 saying it must be %s", field, status, body, want)
		}
	}
	if after := h.etcdRevision(); after != before || h.total("alice") != 0 {
		t.Fatalf("refusals wrote to etcd: revision %d -> %d, %d jobs", before, after, h.total("alice"))
	}
}

// With "quality": true the dry run says so and lists the reference step
// before the stitch; the created parent carries it (its record and its
// view); without it, neither.
func TestParallelQuality(t *testing.T) {
	h := newHarness(t)
	req := withParallel("", map[string]any{"chunk_seconds": 2, "quality": true})
	status, body, _ := h.do("POST", "/api/ffmpeg?dry_run=true", "alice", req)
	p, _ := body["data"].(map[string]any)["parallel"].(map[string]any)
	if status != 200 || p["quality"] != true {
		t.Fatalf("dry run: %d %v", status, body)
	}
	var steps []string
	for _, s := range p["steps"].([]any) {
		steps = append(steps, s.(map[string]any)["name"].(string))
	}
	if !reflect.DeepEqual(steps, []string{"plan", "encode", "audio", "reference", "stitch"}) {
		t.Fatalf("dry run steps %v", steps)
	}

	status, body, _ = h.do("POST", "/api/ffmpeg", "alice", req)
	data, _ := body["data"].(map[string]any)
	if p, _ := data["parallel"].(map[string]any); status != 200 || p["quality"] != true {
		t.Fatalf("create: %d %v", status, body)
	}
	j, err := h.store.Job(context.Background(), data["id"].(string))
	if err != nil || !j.ChunkedParent() || !j.Parallel.Quality {
		t.Fatalf("stored %+v, %v", j, err)
	}

	status, body, _ = h.do("POST", "/api/ffmpeg?dry_run=true", "alice", chunkable())
	p, _ = body["data"].(map[string]any)["parallel"].(map[string]any)
	if _, ok := p["quality"]; status != 200 || ok || len(p["steps"].([]any)) != 4 {
		t.Fatalf("dry run without quality: %d %v", status, body)
	}
}
