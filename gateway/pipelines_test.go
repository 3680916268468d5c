package gateway

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
)

// pipelineHarness is newHarness with room for pipeline bodies.
func pipelineHarness(t *testing.T) *harness {
	h := newHarness(t)
	h.gw.Config.Server.MaxBodyBytes = 1 << 20
	return h
}

func step(inputs map[string]string, outputs []string, cmds ...string) map[string]any {
	return map[string]any{"input_files": inputs, "output_files": outputs, "ffmpeg_commands": cmds}
}

// counts: the account's jobs and pipelines.
func (h *harness) counts(acct string) (jobs, pipelines float64) {
	h.t.Helper()
	_, body, _ := h.do("GET", "/api/jobs", acct, nil)
	jobs = body["pagingParams"].(map[string]any)["total"].(float64)
	_, body, _ = h.do("GET", "/api/pipelines", acct, nil)
	pipelines = body["pagingParams"].(map[string]any)["total"].(float64)
	return jobs, pipelines
}

// A pipeline that could never run is refused whole with 400, each problem
// named by step and field, and nothing is stored: no job, no pipeline.
func TestPipelineRefusedGraphsStoreNothing(t *testing.T) {
	h := pipelineHarness(t)
	src := map[string]string{"v": "https://media.example/a.mp4"}
	// Another account's job, to reference.
	status, body, _ := h.do("POST", "/api/ffmpeg", "bob", valid())
	if status != 200 {
		t.Fatalf("bob's job: %d %v", status, body)
	}
	bobs := body["data"].(map[string]any)["id"].(string)
	jobs0, pipes0 := h.counts("alice")

	cases := []struct {
		name  string
		steps map[string]any
		field string
		want  string
	}{
		{"unknown step", map[string]any{
			"a": step(src, []string{"out.mp4"}, "-i {{v}} {{out.mp4}}"),
			"b": step(map[string]string{"v": "step:nope/out.mp4"}, []string{"t.png"}, "-i {{v}} {{t.png}}"),
		}, "steps.b.input_files.v", `no step "nope"`},
		{"undeclared output", map[string]any{
			"a": step(src, []string{"out.mp4"}, "-i {{v}} {{out.mp4}}"),
			"b": step(map[string]string{"v": "step:a/other.mp4"}, []string{"t.png"}, "-i {{v}} {{t.png}}"),
		}, "steps.b.input_files.v", `step a does not list "other.mp4"`},
		{"cycle", map[string]any{
			"a": step(map[string]string{"v": "step:b/t.png"}, []string{"out.mp4"}, "-i {{v}} {{out.mp4}}"),
			"b": step(map[string]string{"v": "step:a/out.mp4"}, []string{"t.png"}, "-i {{v}} {{t.png}}"),
		}, "steps.a.input_files", "form a cycle"},
		{"own output", map[string]any{
			"a": step(map[string]string{"v": "step:a/out.mp4"}, []string{"out.mp4"}, "-i {{v}} {{out.mp4}}"),
		}, "steps.a.input_files.v", "its own output"},
		{"another account's job", map[string]any{
			"a": step(map[string]string{"v": "job:" + bobs + "/out.mp4"}, []string{"out.mp4"}, "-i {{v}} {{out.mp4}}"),
		}, "steps.a.input_files.v", "no job " + bobs + " in this account"},
		{"bad command", map[string]any{
			"a": step(src, []string{"out.mp4"}, "-i {{v}} {{out.mp4}}"),
			"b": step(map[string]string{"v": "step:a/out.mp4"}, []string{"t.png"}, "-i {{v}} -f lavfi {{t.png}} {{missing}}"),
		}, "steps.b.ffmpeg_commands[0]", "missing"},
		{"fanned-out step named once", map[string]any{
			"a": map[string]any{"input_files": src, "output_files": []string{"out.mp4"}, "ffmpeg_commands": []string{"-i {{v}} -s ${item.size} {{out.mp4}}"},
				"for_each": []map[string]string{{"size": "1x1"}, {"size": "2x2"}}},
			"b": step(map[string]string{"v": "step:a/out.mp4"}, []string{"t.png"}, "-i {{v}} {{t.png}}"),
		}, "steps.b.input_files.v", "step:a[*]/out.mp4"},
		{"unknown item key", map[string]any{
			"a": map[string]any{"input_files": src, "output_files": []string{"out.mp4"}, "ffmpeg_commands": []string{"-i {{v}} -s ${item.height} {{out.mp4}}"},
				"for_each": []map[string]string{{"size": "1x1"}}},
		}, "steps.a.ffmpeg_commands[0]", `no key "height"`},
		{"placeholder without for_each", map[string]any{
			"a": step(src, []string{"out.mp4"}, "-i {{v}} -s ${item.size} {{out.mp4}}"),
		}, "steps.a.ffmpeg_commands[0]", "has no for_each"},
		{"parallel in a step", map[string]any{
			"a": map[string]any{"input_files": src, "output_files": []string{"out.mp4"}, "ffmpeg_commands": []string{"-i {{v}} -c:v libx264 {{out.mp4}}"},
				"parallel": map[string]any{"chunk_seconds": 2}},
		}, "steps.a.parallel", "for single jobs"},
	}
	for _, c := range cases {
		status, body, _ := h.do("POST", "/api/pipelines", "alice", map[string]any{"steps": c.steps})
		details, _ := body["details"].(map[string]any)
		got, _ := details[c.field].(string)
		if status != 400 || !strings.Contains(got, c.want) {
			t.Errorf("%s: %d %v; want 400 with %s saying %q", c.name, status, body, c.field, c.want)
		}
		// A dry run refuses the same.
		if status, _, _ := h.do("POST", "/api/pipelines?dry_run=true", "alice", map[string]any{"steps": c.steps}); status != 400 {
			t.Errorf("%s: dry run answered %d", c.name, status)
		}
	}
	if jobs, pipes := h.counts("alice"); jobs != jobs0 || pipes != pipes0 {
		t.Fatalf("refused pipelines stored %v jobs and %v pipelines", jobs-jobs0, pipes-pipes0)
	}
	// Limits of the config: too many steps.
	h.gw.Config.Pipelines.MaxSteps = 1
	status, body, _ = h.do("POST", "/api/pipelines", "alice", map[string]any{"steps": cases[0].steps})
	if status != 400 || !strings.Contains(body["message"].(string), "pipelines.max_steps") {
		t.Fatalf("over max_steps: %d %v", status, body)
	}
}

// A chain a → b stores two jobs, listed with the account's jobs, each naming
// its pipeline and step; b awaits a's output. The pipeline's view lists the
// steps in order with their jobs.
func TestPipelineChainStoresJobsThatAwaitEachOther(t *testing.T) {
	h := pipelineHarness(t)
	ctx := context.Background()
	jobs0, _ := h.counts("alice")
	status, body, _ := h.do("POST", "/api/pipelines", "alice", map[string]any{
		"steps": map[string]any{
			"thumb":     step(map[string]string{"v": "step:transcode/out.mp4"}, []string{"t.png"}, "-i {{v}} -frames:v 1 {{t.png}}"),
			"transcode": step(map[string]string{"v": "https://media.example/a.mp4"}, []string{"out.mp4"}, "-i {{v}} -c:v libx264 {{out.mp4}}"),
		},
		"metadata": map[string]string{"title": "chain"},
	})
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	view := body["data"].(map[string]any)
	steps := view["steps"].([]any)
	if view["status"] != "queued" || len(steps) != 2 || steps[0].(map[string]any)["name"] != "transcode" || steps[1].(map[string]any)["name"] != "thumb" {
		t.Fatalf("view: %v", view)
	}
	jobOf := func(s any) string { return s.(map[string]any)["jobs"].([]any)[0].(map[string]any)["id"].(string) }
	a, b := jobOf(steps[0]), jobOf(steps[1])
	ja, err := h.store.Job(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	jb, err := h.store.Job(ctx, b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ja.Awaits) != 0 || !slices.Equal(jb.Awaits, []string{a}) || jb.InputFiles["v"] != "job:"+a+"/out.mp4" {
		t.Fatalf("a awaits %v; b awaits %v with inputs %v", ja.Awaits, jb.Awaits, jb.InputFiles)
	}
	if jobs, _ := h.counts("alice"); jobs != jobs0+2 {
		t.Fatalf("%v jobs listed, want %v", jobs, jobs0+2)
	}
	status, body, _ = h.do("GET", "/api/jobs/"+b, "alice", nil)
	pl, _ := body["data"].(map[string]any)["pipeline"].(map[string]any)
	if status != 200 || pl["id"] != view["id"] || pl["step"] != "thumb" {
		t.Fatalf("job view's pipeline: %d %v", status, body)
	}
	if !strings.Contains(body["data"].(map[string]any)["status_detail"].(string), "waiting for job "+a) {
		t.Fatalf("b's status_detail: %v", body["data"])
	}
	// Found by id and in the list; not by another account.
	if status, _, _ := h.do("GET", "/api/pipelines/"+view["id"].(string), "alice", nil); status != 200 {
		t.Fatalf("GET: %d", status)
	}
	if status, _, _ := h.do("GET", "/api/pipelines/"+view["id"].(string), "bob", nil); status != 404 {
		t.Fatalf("GET by another account: %d", status)
	}
	_, body, _ = h.do("GET", "/api/pipelines", "alice", nil)
	if list := body["data"].([]any); len(list) != 1 || list[0].(map[string]any)["id"] != view["id"] {
		t.Fatalf("list: %v", body)
	}
	// The record keeps no plan once the jobs are stored.
	p, err := h.store.Pipeline(ctx, view["id"].(string))
	if err != nil || len(p.Plan) != 0 {
		t.Fatalf("stored pipeline: %+v %v", p, err)
	}
}

// Fan-out: a step with for_each makes one job per item, the item's values
// in its commands and output names. Fan-in: step:<s>[*]/<output> is one input
// per item, <input>_<n>, that ${each:…} and ${count:…} spell out in a command.
func TestPipelineFanOutAndFanIn(t *testing.T) {
	h := pipelineHarness(t)
	ctx := context.Background()
	status, body, _ := h.do("POST", "/api/pipelines", "alice", map[string]any{
		"steps": map[string]any{
			"rung": map[string]any{
				"input_files":     map[string]string{"src": "https://media.example/a.mp4"},
				"output_files":    []string{"r${item.height}.mp4"},
				"ffmpeg_commands": []string{"-i {{src}} -vf scale=-2:${item.height} -b:v ${item.bitrate} {{r${item.height}.mp4}}"},
				"for_each":        []map[string]string{{"height": "360", "bitrate": "1M"}, {"height": "720", "bitrate": "3M"}, {"height": "1080", "bitrate": "6M"}},
			},
			"pack": step(map[string]string{"r": "step:rung[*]/r${item.height}.mp4"}, []string{"all.mkv"},
				"${each:r:-i {{r}}} ${each:r:-map ${index}:v} -metadata count=${count:r} -c copy {{all.mkv}}"),
			"thumb": map[string]any{
				"input_files":     map[string]string{"v": "step:rung[${index}]/r${item.height}.mp4"},
				"output_files":    []string{"t.png"},
				"ffmpeg_commands": []string{"-i {{v}} -frames:v 1 {{t.png}}"},
				"for_each":        []map[string]string{{"n": "a"}, {"n": "b"}, {"n": "c"}},
			},
		},
	})
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	p, err := h.store.Pipeline(ctx, body["data"].(map[string]any)["id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	byStep := map[string][]string{}
	for _, s := range p.Steps {
		byStep[s.Name] = s.Jobs
	}
	if len(byStep["rung"]) != 3 || len(byStep["pack"]) != 1 || len(byStep["thumb"]) != 3 || p.Steps[0].Name != "rung" {
		t.Fatalf("steps: %+v", p.Steps)
	}
	rungs, errs := h.store.Jobs(ctx, byStep["rung"])
	for i, j := range rungs {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		h := []string{"360", "720", "1080"}[i]
		if j.OutputNames[0] != "r"+h+".mp4" || !strings.Contains(j.FFmpegCommands[0], "scale=-2:"+h+" ") || j.Pipeline.Item == nil || *j.Pipeline.Item != i {
			t.Fatalf("rung %d: %v %v %+v", i, j.OutputNames, j.FFmpegCommands, j.Pipeline)
		}
	}
	pack, err := h.store.Job(ctx, byStep["pack"][0])
	if err != nil {
		t.Fatal(err)
	}
	wantCmd := "-i {{r_0}} -i {{r_1}} -i {{r_2}} -map 0:v -map 1:v -map 2:v -metadata count=3 -c copy {{all.mkv}}"
	if pack.FFmpegCommands[0] != wantCmd {
		t.Fatalf("fan-in command\n%s\nwant\n%s", pack.FFmpegCommands[0], wantCmd)
	}
	for i, id := range byStep["rung"] {
		want := "job:" + id + "/r" + []string{"360", "720", "1080"}[i] + ".mp4"
		if pack.InputFiles["r_"+string(rune('0'+i))] != want {
			t.Fatalf("fan-in inputs %v; want r_%d = %s", pack.InputFiles, i, want)
		}
	}
	if a := slices.Sorted(slices.Values(pack.Awaits)); !slices.Equal(a, slices.Sorted(slices.Values(byStep["rung"]))) {
		t.Fatalf("fan-in awaits %v, want every rung %v", pack.Awaits, byStep["rung"])
	}
	// Paired by index: thumb[1] takes rung[1]'s output only.
	thumb, err := h.store.Job(ctx, byStep["thumb"][1])
	if err != nil || thumb.InputFiles["v"] != "job:"+byStep["rung"][1]+"/r720.mp4" || !slices.Equal(thumb.Awaits, []string{byStep["rung"][1]}) {
		t.Fatalf("thumb[1]: %+v %v", thumb, err)
	}

	// A dry run shows the jobs as they would be, stores nothing.
	jobs0, pipes0 := h.counts("alice")
	status, body, _ = h.do("POST", "/api/pipelines?dry_run=true", "alice", map[string]any{
		"steps": map[string]any{
			"rung": map[string]any{"input_files": map[string]string{"src": "https://media.example/a.mp4"}, "output_files": []string{"o.mp4"},
				"ffmpeg_commands": []string{"-i {{src}} -b:v ${item.b} {{o.mp4}}"}, "for_each": []map[string]string{{"b": "1M"}, {"b": "2M"}}},
			"pack": step(map[string]string{"r": "step:rung[*]/o.mp4"}, []string{"all.mkv"}, "${each:r:-i {{r}}} -c copy {{all.mkv}}"),
		},
	})
	if status != 200 || body["data"].(map[string]any)["dry_run"] != true {
		t.Fatalf("dry run: %d %v", status, body)
	}
	packView := body["data"].(map[string]any)["jobs"].(map[string]any)["pack"].([]any)[0].(map[string]any)
	if packView["input_files"].(map[string]any)["r_1"] != "step:rung[1]/o.mp4" {
		t.Fatalf("dry run's fan-in inputs: %v", packView["input_files"])
	}
	if jobs, pipes := h.counts("alice"); jobs != jobs0 || pipes != pipes0 {
		t.Fatalf("a dry run stored %v jobs and %v pipelines", jobs-jobs0, pipes-pipes0)
	}
}

// Cancelling a pipeline cancels every job not ended; a second cancel, once
// all ended and recorded, is a conflict. An Idempotency-Key retry returns the
// same pipeline, storing nothing more.
func TestPipelineCancelAndIdempotency(t *testing.T) {
	h := pipelineHarness(t)
	ctx := context.Background()
	doc := map[string]any{"steps": map[string]any{
		"a": step(map[string]string{"v": "https://media.example/a.mp4"}, []string{"out.mp4"}, "-i {{v}} {{out.mp4}}"),
		"b": step(map[string]string{"v": "step:a/out.mp4"}, []string{"t.png"}, "-i {{v}} {{t.png}}"),
		"c": step(map[string]string{"v": "https://media.example/a.mp4"}, []string{"c.png"}, "-i {{v}} {{c.png}}"),
	}}
	status, body, _ := h.do("POST", "/api/pipelines", "alice", doc, "Idempotency-Key", "k1")
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	id := body["data"].(map[string]any)["id"].(string)
	jobs0, _ := h.counts("alice")
	status, body, _ = h.do("POST", "/api/pipelines", "alice", doc, "Idempotency-Key", "k1")
	if status != 200 || body["data"].(map[string]any)["id"] != id {
		t.Fatalf("retry: %d %v", status, body)
	}
	if jobs, _ := h.counts("alice"); jobs != jobs0 {
		t.Fatalf("a retry stored %v more jobs", jobs-jobs0)
	}
	doc["fail_fast"] = true
	if status, _, _ := h.do("POST", "/api/pipelines", "alice", doc, "Idempotency-Key", "k1"); status != 409 {
		t.Fatalf("the key with another document: %d", status)
	}

	// One job already running when the pipeline is cancelled.
	p, _ := h.store.Pipeline(ctx, id)
	running := p.Steps[0].Jobs[0]
	if _, err := h.store.UpdateJob(ctx, running, func(j *mj.Job) error { now := h.gw.Now(); j.StartedAt = &now; j.Run(""); return nil }); err != nil {
		t.Fatal(err)
	}
	if status, _, _ := h.do("POST", "/api/pipelines/"+id+"/cancel", "bob", nil); status != 404 {
		t.Fatalf("cancel by another account: %d", status)
	}
	status, body, _ = h.do("POST", "/api/pipelines/"+id+"/cancel", "alice", nil)
	if status != 200 || body["data"].(map[string]any)["status"] != "cancelled" {
		t.Fatalf("cancel: %d %v", status, body)
	}
	for _, jid := range p.JobIDs() {
		j, err := h.store.Job(ctx, jid)
		if err != nil || j.Status != mj.StatusCancelled {
			t.Fatalf("job %s after the pipeline's cancel: %+v %v", jid, j, err)
		}
	}
}

// failingUpdates is the store with UpdateJob failing for the ids in fail.
type failingUpdates struct {
	Store
	fail map[string]bool
}

func (f failingUpdates) UpdateJob(ctx context.Context, id string, fn func(*mj.Job) error) (*mj.Job, error) {
	if f.fail[id] {
		return nil, errors.New("etcd unavailable")
	}
	return f.Store.UpdateJob(ctx, id, fn)
}

// A pipeline's cancel records the stop first, then cancels its jobs as it
// can: one whose cancel fails is left to the leading dispatcher (which
// carries out a recorded stop), and the cancel still answers.
func TestPipelineCancelIsBestEffortAfterTheStop(t *testing.T) {
	h := pipelineHarness(t)
	ctx := context.Background()
	doc := map[string]any{"steps": map[string]any{
		"a": step(map[string]string{"v": "https://media.example/a.mp4"}, []string{"out.mp4"}, "-i {{v}} {{out.mp4}}"),
		"b": step(map[string]string{"v": "https://media.example/a.mp4"}, []string{"b.png"}, "-i {{v}} {{b.png}}"),
	}}
	status, body, _ := h.do("POST", "/api/pipelines", "alice", doc)
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	id := body["data"].(map[string]any)["id"].(string)
	p, _ := h.store.Pipeline(ctx, id)
	stuck := p.Steps[1].Jobs[0]
	h.gw.Store = failingUpdates{Store: h.gw.Store, fail: map[string]bool{stuck: true}}
	if status, body, _ := h.do("POST", "/api/pipelines/"+id+"/cancel", "alice", nil); status != 200 {
		t.Fatalf("cancel with a job's cancel failing: %d %v", status, body)
	}
	if p, _ := h.store.Pipeline(ctx, id); !p.Cancelled || p.Stop == "" {
		t.Fatalf("the stop was not recorded: %+v", p)
	}
	if j, _ := h.store.Job(ctx, p.Steps[0].Jobs[0]); j.Status != mj.StatusCancelled {
		t.Fatalf("the other job: %s", j.Status)
	}
}
