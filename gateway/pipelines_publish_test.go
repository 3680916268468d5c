package gateway

import (
	"context"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// A step with "publish": false (docs/pipelines.md#intermediate-outputs): its
// jobs are marked intermediate, the views give its outputs no links (the job's
// outputs say intermediate), and a job outside the pipeline cannot take them.
func TestPipelineIntermediateStepHasNoLinks(t *testing.T) {
	h := pipelineHarness(t)
	ctx := context.Background()
	a := step(map[string]string{"v": "https://media.example/a.mp4"}, []string{"out.mp4"}, "-i {{v}} -c:v libx264 {{out.mp4}}")
	a["publish"] = false
	status, body, _ := h.do("POST", "/api/pipelines", "alice", map[string]any{"steps": map[string]any{
		"a": a,
		"b": step(map[string]string{"v": "step:a/out.mp4"}, []string{"t.png"}, "-i {{v}} -frames:v 1 {{t.png}}"),
	}})
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	view := body["data"].(map[string]any)
	steps := view["steps"].([]any)
	sa, sb := steps[0].(map[string]any), steps[1].(map[string]any)
	if sa["name"] != "a" || sa["publish"] != false || sb["publish"] != true {
		t.Fatalf("steps' publish: a %v, b %v", sa["publish"], sb["publish"])
	}
	ja := sa["jobs"].([]any)[0].(map[string]any)["id"].(string)
	jb := sb["jobs"].([]any)[0].(map[string]any)["id"].(string)
	if j, err := h.store.Job(ctx, ja); err != nil || !j.IntermediateOutputs() {
		t.Fatalf("a's job: %+v %v", j, err)
	}
	if j, err := h.store.Job(ctx, jb); err != nil || j.IntermediateOutputs() {
		t.Fatalf("b's job is intermediate: %+v %v", j.Pipeline, err)
	}

	// a succeeds: no link in its job's view, nor in the pipeline's.
	now := time.Now()
	for id, name := range map[string]string{ja: "out.mp4", jb: "t.png"} {
		if _, err := h.store.UpdateJob(ctx, id, func(j *mj.Job) error {
			j.Awaits = nil
			j.Outputs = []mj.Output{{Name: name, Key: mj.RunScope(id, 1) + "alloc/outputs/" + name, Size: 3}}
			j.TotalOutputBytes = 3
			j.Succeed(now, "")
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		h.gw.jobs.drop(id)
	}
	_, body, _ = h.do("GET", "/api/jobs/"+ja, "alice", nil)
	job := body["data"].(map[string]any)
	out, _ := job["outputs"].(map[string]any)["out.mp4"].(map[string]any)
	if len(job["output_files"].(map[string]any)) != 0 || out == nil || out["intermediate"] != true || out["size_bytes"] != float64(3) {
		t.Fatalf("intermediate job's view: output_files %v, outputs %v", job["output_files"], job["outputs"])
	}
	if pl := job["pipeline"].(map[string]any); pl["intermediate"] != true {
		t.Fatalf("job's pipeline: %v", pl)
	}
	_, body, _ = h.do("GET", "/api/jobs/"+jb, "alice", nil)
	if links := body["data"].(map[string]any)["output_files"].(map[string]any); links["t.png"] == nil {
		t.Fatalf("the published step's job has no link: %v", links)
	}
	_, body, _ = h.do("GET", "/api/pipelines/"+view["id"].(string), "alice", nil)
	steps = body["data"].(map[string]any)["steps"].([]any)
	linksOf := func(s any) map[string]any {
		return s.(map[string]any)["jobs"].([]any)[0].(map[string]any)["output_files"].(map[string]any)
	}
	if len(linksOf(steps[0])) != 0 || linksOf(steps[1])["t.png"] == nil {
		t.Fatalf("pipeline view's links: a %v, b %v", linksOf(steps[0]), linksOf(steps[1]))
	}

	// A job of its own, or another pipeline, cannot take a's output.
	status, body, _ = h.do("POST", "/api/ffmpeg", "alice", map[string]any{
		"input_files": map[string]string{"v": "job:" + ja + "/out.mp4"}, "output_files": []string{"x.png"}, "ffmpeg_commands": []string{"-i {{v}} {{x.png}}"},
	})
	if got, _ := body["details"].(map[string]any)["input_files.v"].(string); status != 400 || !strings.Contains(got, "intermediate") || !strings.Contains(got, "publish") {
		t.Fatalf("a job taking an intermediate output: %d %v", status, body)
	}
	status, body, _ = h.do("POST", "/api/pipelines", "alice", map[string]any{"steps": map[string]any{
		"x": step(map[string]string{"v": "job:" + ja + "/out.mp4"}, []string{"x.png"}, "-i {{v}} {{x.png}}"),
	}})
	if got, _ := body["details"].(map[string]any)["steps.x.input_files.v"].(string); status != 400 || !strings.Contains(got, "intermediate") {
		t.Fatalf("another pipeline taking an intermediate output: %d %v", status, body)
	}
}

// What a step may not say is refused whole, naming the step and field, and
// saying what to do instead: "publish": false that no step reads (its outputs
// would be lost), output_destinations, keep_outputs.
func TestPipelinePublishAndDestinationsRefused(t *testing.T) {
	h := pipelineHarness(t)
	src := map[string]string{"v": "https://media.example/a.mp4"}
	unread := step(src, []string{"out.mp4"}, "-i {{v}} {{out.mp4}}")
	unread["publish"] = false
	dest := step(src, []string{"out.mp4"}, "-i {{v}} {{out.mp4}}")
	dest["output_destinations"] = map[string]string{"out.mp4": "https://bucket.example/out.mp4?sig=x"}
	keep := step(src, []string{"out.mp4"}, "-i {{v}} {{out.mp4}}")
	keep["keep_outputs"] = false
	jobs0, pipes0 := h.counts("alice")
	for _, c := range []struct {
		name        string
		steps       map[string]any
		field, want string
	}{
		{"unread intermediate", map[string]any{"lost": unread, "b": step(src, []string{"t.png"}, "-i {{v}} {{t.png}}")},
			"steps.lost.publish", `step lost has "publish": false, but no step takes its outputs`},
		{"output_destinations", map[string]any{"a": dest}, "steps.a.output_destinations", "send one on with a job of its own"},
		{"keep_outputs", map[string]any{"a": keep}, "steps.a.keep_outputs", `"publish": false`},
	} {
		for _, target := range []string{"/api/pipelines", "/api/pipelines?dry_run=true"} {
			status, body, _ := h.do("POST", target, "alice", map[string]any{"steps": c.steps})
			got, _ := body["details"].(map[string]any)[c.field].(string)
			if status != 400 || !strings.Contains(got, c.want) {
				t.Errorf("%s (%s): %d %v; want 400 with %s saying %q", c.name, target, status, body, c.field, c.want)
			}
		}
	}
	if jobs, pipes := h.counts("alice"); jobs != jobs0 || pipes != pipes0 {
		t.Fatalf("refused pipelines stored %v jobs and %v pipelines", jobs-jobs0, pipes-pipes0)
	}
}
