package mediajobs

import (
	"strings"
	"testing"
	"time"
)

// The outputs of a step with "publish": false have no link, in the job's
// view (where outputs says intermediate) and the pipeline's; a job outside the
// pipeline is refused them, naming the pipeline.
func TestIntermediateOutputsHaveNoLinks(t *testing.T) {
	now := time.Now()
	sign := func(key string) string { return "https://signed/" + key }
	mk := func(id string, inter bool) *Job {
		j := &Job{ID: id, Pipeline: &PipelineRef{ID: "p1", Step: id, Intermediate: inter},
			Outputs: []Output{{Name: "out.mp4", Key: "jobs/" + id + "/1/a/outputs/out.mp4", Size: 3}}, TotalOutputBytes: 3}
		j.Succeed(now, "")
		return j
	}
	a, b := mk("a", true), mk("b", false)
	v := View(a, sign)
	if len(v.OutputFiles) != 0 || !v.Outputs["out.mp4"].Intermediate || v.Outputs["out.mp4"].SizeBytes != 3 {
		t.Fatalf("intermediate job's view: %v %+v", v.OutputFiles, v.Outputs)
	}
	if v := View(b, sign); v.OutputFiles["out.mp4"] == "" || v.Outputs["out.mp4"].Intermediate {
		t.Fatalf("published job's view: %v %+v", v.OutputFiles, v.Outputs)
	}
	p := &Pipeline{ID: "p1", Steps: []PipelineStep{{Name: "a", Jobs: []string{"a"}, Intermediate: true}, {Name: "b", Jobs: []string{"b"}, Needs: []string{"a"}}}}
	pv := ViewPipeline(p, map[string]*Job{"a": a, "b": b}, sign)
	if pv.Steps[0].Publish || len(pv.Steps[0].Jobs[0].OutputFiles) != 0 {
		t.Fatalf("intermediate step's view: publish %v, links %v", pv.Steps[0].Publish, pv.Steps[0].Jobs[0].OutputFiles)
	}
	if !pv.Steps[1].Publish || pv.Steps[1].Jobs[0].OutputFiles["out.mp4"] == "" {
		t.Fatalf("published step's view: publish %v, links %v", pv.Steps[1].Publish, pv.Steps[1].Jobs[0].OutputFiles)
	}
	if msg := IntermediateRef(a, "out.mp4"); !strings.Contains(msg, "intermediate") || !strings.Contains(msg, "pipeline p1") {
		t.Fatalf("IntermediateRef: %q", msg)
	}
	if msg := IntermediateRef(b, "out.mp4"); msg != "" {
		t.Fatalf("IntermediateRef of a published output: %q", msg)
	}
}
