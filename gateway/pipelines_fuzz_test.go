package gateway

import (
	"slices"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/command"
	"github.com/mediajobs/mediajobs/config"
)

// FuzzPipelinePlan feeds arbitrary pipeline documents through decoding and
// planning: nothing panics, and whatever is accepted is a graph the service
// can run: jobs within the limits, unique ids, every reference to a job of the
// pipeline naming an output that job writes, no cycle, and every command one
// the runner takes.
func FuzzPipelinePlan(f *testing.F) {
	cfg := config.Default()
	cfg.Pools = []*config.Pool{{Name: "cpu"}}
	cfg.Pipelines.MaxSteps, cfg.Pipelines.MaxFanOut, cfg.Pipelines.MaxJobs = 6, 4, 12
	if err := cfg.Finish(); err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		`{"steps":{"a":{"input_files":{"s":"https://example.com/a.mp4"},"output_files":["o.mp4"],"ffmpeg_commands":["-i {{s}} {{o.mp4}}"]}}}`,
		`{"steps":{"a":{"input_files":{"s":"https://example.com/a.mp4"},"output_files":["r${item.h}.mp4"],"ffmpeg_commands":["-i {{s}} -vf scale=-2:${item.h} {{r${item.h}.mp4}}"],"for_each":[{"h":"360"},{"h":"720"}]},
		  "b":{"input_files":{"r":"step:a[*]/r${item.h}.mp4"},"output_files":["all.mp4"],"ffmpeg_commands":["${each:r:-i {{r}}} -filter_complex concat=n=${count:r} {{all.mp4}}"]}}}`,
		`{"steps":{"a":{"input_files":{"x":"step:b/o.png"},"output_files":["o.png"],"ffmpeg_commands":["-i {{x}} {{o.png}}"]},"b":{"input_files":{"x":"step:a/o.png"},"output_files":["o.png"],"ffmpeg_commands":["-i {{x}} {{o.png}}"]}}}`,
		`{"steps":{"a":{"input_files":{"s":"https://example.com/a.mp4"},"output_files":["seg_%03d.ts"],"ffmpeg_commands":["-i {{s}} {{seg_%03d.ts}}"]},
		  "b":{"input_files":{"p":"step:a/seg_001.ts"},"output_files":["o.png"],"ffmpeg_commands":["-i {{p}} {{o.png}}"]}}}`,
		`{"steps":{"a":{"input_files":{},"output_files":["o.png"],"ffmpeg_commands":["-f lavfi -i color=s=16x16 -frames:v 1 {{o.png}}"],"publish":false},
		  "b":{"input_files":{"p":"step:a/o.png"},"output_files":["t${index}.png"],"ffmpeg_commands":["-i {{p}} {{t${index}.png}}"],"for_each":[{},{}]}}}`,
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		req, err := decodePipeline(body)
		if err != nil {
			return
		}
		plan, err := planPipeline(req, cfg, "acct", time.Unix(0, 0))
		if err != nil {
			if mj.ErrorCode(err) != mj.EValidation {
				t.Fatalf("refused with %v, not a validation error: %v", mj.ErrorCode(err), err)
			}
			return
		}
		p := plan.p
		if len(p.Steps) == 0 || len(p.Steps) > cfg.Pipelines.MaxSteps || len(p.Plan) > cfg.Pipelines.MaxJobs {
			t.Fatalf("accepted %d steps, %d jobs", len(p.Steps), len(p.Plan))
		}
		jobs := map[string]*mj.Job{}
		for _, j := range p.Plan {
			if jobs[j.ID] != nil || j.Pipeline == nil || j.Pipeline.ID != p.ID || p.StepOf(j.ID) != j.Pipeline.Step {
				t.Fatalf("job %s: duplicate, or not placed in its step: %+v", j.ID, j.Pipeline)
			}
			jobs[j.ID] = j
		}
		if got := len(p.JobIDs()); got != len(jobs) {
			t.Fatalf("steps list %d jobs, the plan has %d", got, len(jobs))
		}
		// Every reference inside the pipeline names a declared output; the
		// graph orders (each pass runs every job whose producers ran).
		needs := map[string][]string{}
		for _, j := range p.Plan {
			spec := command.Spec{Inputs: map[string]bool{}, Outputs: map[string]bool{}}
			for name, u := range j.InputFiles {
				spec.Inputs[name] = true
				if !mj.IsJobRef(u) {
					if !strings.HasPrefix(u, "http://") && !strings.HasPrefix(u, "https://") {
						t.Fatalf("job %s input %s = %q", j.ID, name, u)
					}
					continue
				}
				dep, out, _ := strings.Cut(strings.TrimPrefix(u, "job:"), "/")
				producer := jobs[dep]
				if producer == nil {
					t.Fatalf("job %s input %s = %q names no job of the pipeline", j.ID, name, u)
				}
				makes := func(n string) bool { return !strings.Contains(out, "%") && mj.OutputPattern(n).MatchString(out) }
				if !slices.ContainsFunc(producer.OutputNames, makes) {
					t.Fatalf("job %s input %s = %q: %s writes %v", j.ID, name, u, dep, producer.OutputNames)
				}
				needs[j.ID] = append(needs[j.ID], dep)
			}
			for _, name := range j.OutputNames {
				spec.Outputs[name] = true
			}
			for _, c := range j.FFmpegCommands {
				if _, err := command.Prepare(c, spec); err != nil {
					t.Fatalf("job %s: accepted a command the runner refuses: %q: %v", j.ID, c, err)
				}
			}
		}
		ran := map[string]bool{}
		for progress := true; progress; {
			progress = false
			for id := range jobs {
				ready := !ran[id]
				for _, dep := range needs[id] {
					ready = ready && ran[dep]
				}
				if ready {
					ran[id], progress = true, true
				}
			}
		}
		if len(ran) != len(jobs) {
			t.Fatalf("accepted a graph whose jobs cannot all start: %d of %d", len(ran), len(jobs))
		}
	})
}
