package devstack

import (
	"context"
	"testing"

	"github.com/mediajobs/mediajobs/e2e"
)

// A chunked job that asks for quality (docs/chunked.md#quality) on real
// Nomad: its pipeline runs the reference step (the command over the whole
// source, one job, its output intermediate), the stitch compares both encodes
// against the source, the job succeeds with the report's quality, and the
// reference's file is deleted once the pipeline ended; the job's outputs are
// its declared output alone.
func TestChunkedEndToEndQuality(t *testing.T) {
	e2e.NeedStack(t)
	t.Parallel()
	src := chunkedSource(t, "160x120")
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{
		"input_files": map[string]string{"src": src}, "output_files": []string{"out.mp4"},
		"ffmpeg_commands": []string{"-i {{src}} -c:v libx264 -preset veryfast -crf 30 -c:a aac -b:a 64k {{out.mp4}}"}, "timeout_seconds": 600,
		"parallel": map[string]any{"chunk_seconds": 2, "max_workers": 2, "quality": true}})
	if r.Status != 200 {
		t.Fatalf("create: HTTP %d %s", r.Status, r.Body)
	}
	d := r.Data(t)
	if p, _ := d["parallel"].(map[string]any); p == nil || p["mode"] != "chunked" || p["quality"] != true {
		t.Fatalf("create: %v", d)
	}
	j := waitChunked(t, d["id"].(string))
	if j["status"] != "succeeded" {
		t.Fatalf("chunked job %v: %v (%v)", j["status"], j["error_message"], j["parallel"])
	}
	p := j["parallel"].(map[string]any)
	v, _ := p["verification"].(map[string]any)
	q, _ := v["quality"].(map[string]any)
	if v["pass"] != true || q == nil || q["error"] != nil || q["frames"] != 150.0 || q["vmaf"] == nil || len(q["seams"].([]any)) != 2 {
		t.Fatalf("verification %v", p["verification"])
	}
	for _, side := range []string{"stitched", "single_pass"} {
		s := q[side].(map[string]any)
		if s["frames"] != 150.0 || s["psnr_mean"].(float64) < 20 || s["ssim_mean"].(float64) < 0.5 {
			t.Fatalf("quality %s %v", side, s)
		}
	}
	ref := parallelStep(t, j, "reference")
	if ref["status"] != "succeeded" || ref["publish"] != false {
		t.Fatalf("reference step %v", ref)
	}
	if of := j["output_files"].(map[string]any); len(of) != 1 || of["out.mp4"] == nil {
		t.Fatalf("output_files %v: want the declared out.mp4 alone", of)
	}
	refJob := e2e.StepJobs(ref)[0]["id"].(string)
	if links := getJob(t, refJob)["output_files"].(map[string]any); len(links) != 0 {
		t.Fatalf("the reference's output is linked: %v", links)
	}
	// Deleted before the pipeline's end was recorded, which ended the job.
	ctx := context.Background()
	rj, err := e2e.Stack.Backends.Store.Job(ctx, refJob)
	if err != nil || len(rj.Outputs) != 1 || rj.Outputs[0].Key == "" {
		t.Fatalf("the reference job's record: %+v %v", rj, err)
	}
	if _, err := e2e.Stack.Backends.Blobs.ReadAll(ctx, rj.Outputs[0].Key); err == nil {
		t.Fatal("the reference's encode is still stored after the pipeline ended")
	}
}
