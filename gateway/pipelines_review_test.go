package gateway

import (
	"context"
	"encoding/json"
	"strconv"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// etcdKeys lists every key of the store: a refused create must add none.
func (h *harness) etcdKeys() map[string]bool {
	h.t.Helper()
	resp, err := h.store.Client().Get(context.Background(), "", clientv3.WithFromKey(), clientv3.WithKeysOnly())
	if err != nil {
		h.t.Fatal(err)
	}
	out := map[string]bool{}
	for _, kv := range resp.Kvs {
		out[string(kv.Key)] = true
	}
	return out
}

// storesNothing fails if the store has keys it did not have in before.
func (h *harness) storesNothing(before map[string]bool) {
	h.t.Helper()
	for k := range h.etcdKeys() {
		if !before[k] {
			h.t.Errorf("a refused pipeline stored %s", k)
		}
	}
}

// pipelineRefused posts body (and as a dry run) and wants a 400 whose details
// name field, saying want.
func (h *harness) pipelineRefused(name, body, field, want string) {
	h.t.Helper()
	for _, target := range []string{"/api/pipelines", "/api/pipelines?dry_run=true"} {
		status, resp, _ := h.do("POST", target, "alice", body)
		details, _ := resp["details"].(map[string]any)
		got, _ := details[field].(string)
		msg, _ := resp["message"].(string)
		if status != 400 || resp["errorCode"] != "validationError" || !strings.Contains(got, want) || !strings.HasPrefix(msg, field) {
			h.t.Errorf("%s (%s): %d %v; want 400 with details[%q] saying %q, its message starting %[6]q", name, target, status, resp, field, want)
		}
	}
}

// A value of the wrong JSON type is a 400 naming the step and the field, as
// the document writes them: not the decoder's Go names (createRequest), nor
// "steps" for a field of a step.
func TestPipelineWrongTypesNameStepAndField(t *testing.T) {
	h := pipelineHarness(t)
	before := h.etcdKeys()
	job := func(extra string) string {
		return `{"steps":{"a":{"input_files":{"v":"https://media.example/a.mp4"},"output_files":["o.mp4"],"ffmpeg_commands":["-i {{v}} {{o.mp4}}"]` + extra + `}}}`
	}
	for _, c := range []struct{ name, body, field, want string }{
		{"document an array", `[]`, "request body", "wrong type"},
		{"steps an array", `{"steps":[]}`, "steps", "wrong type"},
		{"step a number", `{"steps":{"a":5}}`, "steps.a", "wrong type"},
		{"timeout a string", job(`,"timeout_seconds":"x"`), "steps.a.timeout_seconds", "wrong type"},
		{"input a number", job(`,"machine":5`), "steps.a.machine", "wrong type"},
		{"for_each of numbers", job(`,"for_each":[{"h":5}]`), "steps.a.for_each", "wrong type"},
		{"for_each nested", job(`,"for_each":[{"h":{"x":"y"}}]`), "steps.a.for_each", "wrong type"},
		{"publish a string", job(`,"publish":"no"`), "steps.a.publish", "wrong type"},
		{"fail_fast a string", `{"steps":{},"fail_fast":"yes"}`, "fail_fast", "wrong type"},
		{"not JSON", `{"steps":`, "request body", "not valid JSON"},
	} {
		h.pipelineRefused(c.name, c.body, c.field, c.want)
	}
	h.storesNothing(before)
}

// A reference to a step's output must name a file the step makes: an entry
// of its output_files, as the step writes it or as one item names it, or a
// file one of its patterns makes. A name no pattern makes, or the pattern
// itself, would never exist: the step taking it would fail once its producer
// succeeded.
func TestPipelineReferencesToPatternsMustMatch(t *testing.T) {
	h := pipelineHarness(t)
	before := h.etcdKeys()
	doc := func(producer, ref string) string {
		return `{"steps":{"a":{"input_files":{"v":"https://media.example/a.mp4"},` + producer + `},` +
			`"b":{"input_files":{"x":"` + ref + `"},"output_files":["t.png"],"ffmpeg_commands":["-i {{x}} {{t.png}}"]}}}`
	}
	segs := `"output_files":["seg_%03d.ts"],"ffmpeg_commands":["-i {{v}} {{seg_%03d.ts}}"]`
	rungs := `"output_files":["r${item.h}.mp4"],"ffmpeg_commands":["-i {{v}} {{r${item.h}.mp4}}"],"for_each":[{"h":"360"},{"h":"720"}]`
	for _, c := range []struct{ name, body, want string }{
		{"a name no pattern makes", doc(segs, "step:a/other.mp4"), `does not list "other.mp4"`},
		{"the pattern itself", doc(segs, "step:a/seg_%03d.ts"), `does not list "seg_%03d.ts"`},
		{"another item's name", doc(rungs, "step:a[0]/r720.mp4"), `item 0 of step a does not list "r720.mp4"`},
		{"one item's name for every item", doc(rungs, "step:a[*]/r360.mp4"), `item 1 of step a does not list "r360.mp4"`},
	} {
		h.pipelineRefused(c.name, c.body, "steps.b.input_files.x", c.want)
	}
	h.storesNothing(before)

	// What a pattern makes is taken; an item's own name by its index.
	for _, ref := range []string{"step:a/seg_001.ts"} {
		if status, body, _ := h.do("POST", "/api/pipelines?dry_run=true", "alice", doc(segs, ref)); status != 200 {
			t.Fatalf("%s: %d %v", ref, status, body)
		}
	}
	status, body, _ := h.do("POST", "/api/pipelines?dry_run=true", "alice", doc(rungs, "step:a[1]/r720.mp4"))
	if status != 200 {
		t.Fatalf("step:a[1]/r720.mp4: %d %v", status, body)
	}
	b := body["data"].(map[string]any)["jobs"].(map[string]any)["b"].([]any)[0].(map[string]any)
	if got := b["input_files"].(map[string]any)["x"]; got != "step:a[1]/r720.mp4" {
		t.Fatalf("b's input: %v", got)
	}
}

// A for_each value is written into a command as it is, whether the step's own
// item or, in ${each:…}, the producing item's: a value holding ${index},
// $${ or a $ that meets a { after it is not read again as a placeholder.
func TestPipelineItemValuesAreNotReadAgain(t *testing.T) {
	h := pipelineHarness(t)
	status, body, _ := h.do("POST", "/api/pipelines?dry_run=true", "alice", map[string]any{"steps": map[string]any{
		"a": map[string]any{"input_files": map[string]string{"v": "https://media.example/a.mp4"}, "output_files": []string{"o.mp4"},
			"ffmpeg_commands": []string{"-i {{v}} -metadata t=${item.t} {{o.mp4}}"},
			"for_each":        []map[string]string{{"t": "${index}"}, {"t": "$${x"}, {"t": "cost$"}}},
		"b": map[string]any{"input_files": map[string]string{"p": "step:a[*]/o.mp4"}, "output_files": []string{"all.mkv"},
			"ffmpeg_commands": []string{"${each:p:-i {{p}} -metadata:s:${index} t=${item.t}{x}} -c copy {{all.mkv}}"},
			"for_each":        []map[string]string{{"n": "1"}}},
	}})
	if status != 200 {
		t.Fatalf("dry run: %d %v", status, body)
	}
	jobs := body["data"].(map[string]any)["jobs"].(map[string]any)
	cmd := func(step string, i int) string {
		return jobs[step].([]any)[i].(map[string]any)["ffmpeg_commands"].([]any)[0].(string)
	}
	if got := cmd("a", 0); got != "-i {{v}} -metadata t=${index} {{o.mp4}}" {
		t.Errorf("a[0]: %s", got)
	}
	want := "-i {{p_0}} -metadata:s:0 t=${index}{x} -i {{p_1}} -metadata:s:1 t=$${x{x} -i {{p_2}} -metadata:s:2 t=cost${x} -c copy {{all.mkv}}"
	if got := cmd("b", 0); got != want {
		t.Errorf("b's fan-in command\n%s\nwant\n%s", got, want)
	}
}

// A dry run refuses what the create refuses: a plan past one etcd value
// (docs/pipelines.md#limits) too, though each job is within its own bounds.
func TestPipelineDryRunRefusesAPlanTooLarge(t *testing.T) {
	h := pipelineHarness(t)
	before := h.etcdKeys()
	items := make([]map[string]string, 50)
	for i := range items {
		items[i] = map[string]string{"n": strconv.Itoa(i)}
	}
	doc := map[string]any{"steps": map[string]any{"a": map[string]any{
		"input_files": map[string]string{"v": "https://media.example/a.mp4"}, "output_files": []string{"o.mp4"},
		"ffmpeg_commands": []string{"-i {{v}} -metadata c=" + strings.Repeat("x", 24000) + "${item.n} {{o.mp4}}"},
		"for_each":        items,
	}}}
	for _, target := range []string{"/api/pipelines?dry_run=true", "/api/pipelines"} {
		status, body, _ := h.do("POST", target, "alice", doc)
		details, _ := body["details"].(map[string]any)
		if got, _ := details["steps"].(string); status != 400 || got != "too large" {
			t.Errorf("%s: %d %v; want 400, steps too large", target, status, body["message"])
		}
	}
	h.storesNothing(before)
}

// A step's webhook_url takes its item's placeholders, as its input URLs do;
// one in a step without for_each is refused, naming the step and field, not
// sent as written.
func TestPipelineStepWebhookPlaceholders(t *testing.T) {
	h := pipelineHarness(t)
	step := func(extra map[string]any) map[string]any {
		s := map[string]any{"input_files": map[string]string{"v": "https://media.example/a.mp4"}, "output_files": []string{"o.mp4"},
			"ffmpeg_commands": []string{"-i {{v}} {{o.mp4}}"}, "webhook_url": "https://hooks.example/done?item=${index}"}
		for k, v := range extra {
			s[k] = v
		}
		return s
	}
	before := h.etcdKeys()
	h.pipelineRefused("no for_each", `{"steps":{"a":`+mustJSON(t, step(nil))+`}}`, "steps.a.webhook_url", "has no for_each")
	h.storesNothing(before)
	status, body, _ := h.do("POST", "/api/pipelines?dry_run=true", "alice", map[string]any{"steps": map[string]any{
		"a": step(map[string]any{"for_each": []map[string]string{{}, {}}})}})
	if status != 200 {
		t.Fatalf("dry run: %d %v", status, body)
	}
	for i, j := range body["data"].(map[string]any)["jobs"].(map[string]any)["a"].([]any) {
		if got := j.(map[string]any)["webhook_url"]; got != "https://hooks.example/done?item="+strconv.Itoa(i) {
			t.Errorf("item %d's webhook_url: %v", i, got)
		}
	}
}

func mustJSON(t *testing.T, v any) string {
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// A pipeline whose every job has ended has ended, its end recorded or not
// yet (the leader records it): a cancel is a 409 and records no stop, which
// would turn a failed pipeline's end into cancelled.
func TestPipelineCancelAfterEveryJobEnded(t *testing.T) {
	h := pipelineHarness(t)
	ctx := context.Background()
	id, p := h.twoIndependentSteps(false)
	for i, jid := range p.JobIDs() {
		if _, err := h.store.UpdateJob(ctx, jid, func(j *mj.Job) error {
			if i == 0 {
				j.Fail(h.gw.Now(), "ffmpeg exited with code 1")
			} else {
				j.Succeed(h.gw.Now(), "")
			}
			return nil
		}); err != nil {
			t.Fatal(err)
		}
		h.gw.jobs.drop(jid)
	}
	if _, body, _ := h.do("GET", "/api/pipelines/"+id, "alice", nil); body["data"].(map[string]any)["status"] != "failed" {
		t.Fatalf("the view: %v", body["data"])
	}
	if status, body, _ := h.do("POST", "/api/pipelines/"+id+"/cancel", "alice", nil); status != 409 {
		t.Fatalf("cancel of a pipeline whose jobs all ended: %d %v", status, body)
	}
	if p, _ := h.store.Pipeline(ctx, id); p.Cancelled || p.Stop != "" {
		t.Fatalf("the cancel recorded a stop: %+v", p)
	}
}

// An item is named by its index as written in the list, from 0: [5] past
// the end, [-1], [+1] or [01] are refused, naming the input.
func TestPipelineItemIndexIsWrittenPlain(t *testing.T) {
	h := pipelineHarness(t)
	before := h.etcdKeys()
	for _, idx := range []string{"5", "-1", "+1", "01", " 1", "x"} {
		body := `{"steps":{"a":{"input_files":{"v":"https://media.example/a.mp4"},"output_files":["o.mp4"],"ffmpeg_commands":["-i {{v}} {{o.mp4}}"],"for_each":[{},{}]},` +
			`"b":{"input_files":{"x":"step:a[` + idx + `]/o.mp4"},"output_files":["t.png"],"ffmpeg_commands":["-i {{x}} {{t.png}}"]}}}`
		h.pipelineRefused("["+idx+"]", body, "steps.b.input_files.x", "step a has items 0 to 1")
	}
	h.storesNothing(before)
}

// A step's inputs and outputs are bounded before its references are checked,
// whose work grows with them: more outputs than server.max_outputs, or more
// inputs than server.max_inputs once step:<step>[*]/… takes every item's, is a
// 400 naming the step's field, and nothing is stored.
func TestPipelineStepBoundsComeFirst(t *testing.T) {
	h := pipelineHarness(t)
	before := h.etcdKeys()
	maxIn, maxOut := h.gw.Config.Server.MaxInputs, h.gw.Config.Server.MaxOutputs
	outs := make([]string, maxOut+1)
	for i := range outs {
		outs[i] = "p" + strconv.Itoa(i) + "_%d.png"
	}
	many, _ := json.Marshal(outs)
	h.pipelineRefused("outputs past max_outputs",
		`{"steps":{"a":{"input_files":{"v":"https://media.example/a.mp4"},"output_files":`+string(many)+`,"ffmpeg_commands":["-i {{v}} {{p0_%d.png}}"]},`+
			`"b":{"input_files":{"x":"step:a/p0_1.png"},"output_files":["o.mp4"],"ffmpeg_commands":["-i {{x}} {{o.mp4}}"]}}}`,
		"steps.a.output_files", "at most "+strconv.Itoa(maxOut)+" (server.max_outputs)")

	items := make([]map[string]string, maxIn/2+1)
	for i := range items {
		items[i] = map[string]string{"h": strconv.Itoa(100 + i)}
	}
	each, _ := json.Marshal(items)
	h.pipelineRefused("inputs past max_inputs once [*] takes every item's",
		`{"steps":{"a":{"for_each":`+string(each)+`,"input_files":{"v":"https://media.example/a.mp4"},"output_files":["r${index}.mp4"],"ffmpeg_commands":["-i {{v}} -vf scale=-2:${item.h} {{r${index}.mp4}}"]},`+
			`"b":{"input_files":{"x":"step:a[*]/r${index}.mp4","y":"step:a[*]/r${index}.mp4"},"output_files":["o.mp4"],"ffmpeg_commands":["-i {{x}} {{o.mp4}}"]}}}`,
		"steps.b.input_files", "at most "+strconv.Itoa(maxIn)+" (server.max_inputs)")
	h.storesNothing(before)
}

// A client's cancel while the leader stops a fail_fast pipeline (its stop
// recorded, its other jobs not cancelled yet) is a 409 naming the stop, and
// leaves the stop as it was: the pipeline ends failed, saying which step.
func TestPipelineCancelWhileStoppingUnderFailFast(t *testing.T) {
	h := pipelineHarness(t)
	ctx := context.Background()
	id, p := h.twoIndependentSteps(true)
	first := p.JobIDs()[0]
	if _, err := h.store.UpdateJob(ctx, first, func(j *mj.Job) error { j.Fail(h.gw.Now(), "ffmpeg exited with code 1"); return nil }); err != nil {
		t.Fatal(err)
	}
	h.gw.jobs.drop(first)
	const why = "step a failed, and the pipeline stops at its first failure (fail_fast)"
	if _, err := h.store.UpdatePipeline(ctx, id, func(p *mj.Pipeline) error { p.Stop = why; return nil }); err != nil {
		t.Fatal(err)
	}
	status, body, _ := h.do("POST", "/api/pipelines/"+id+"/cancel", "alice", nil)
	if msg, _ := body["message"].(string); status != 409 || !strings.Contains(msg, why) {
		t.Fatalf("cancel of a pipeline stopping under fail_fast: %d %v", status, body)
	}
	if p, _ := h.store.Pipeline(ctx, id); p.Cancelled || p.Stop != why {
		t.Fatalf("the cancel rewrote the stop: %+v", p)
	}
}

// twoIndependentSteps creates a pipeline of two steps that take nothing of
// each other, and returns its id and stored record.
func (h *harness) twoIndependentSteps(failFast bool) (string, *mj.Pipeline) {
	h.t.Helper()
	src := map[string]string{"v": "https://media.example/a.mp4"}
	status, body, _ := h.do("POST", "/api/pipelines", "alice", map[string]any{"fail_fast": failFast, "steps": map[string]any{
		"a": step(src, []string{"o.mp4"}, "-i {{v}} {{o.mp4}}"),
		"b": step(src, []string{"t.png"}, "-i {{v}} {{t.png}}"),
	}})
	if status != 200 {
		h.t.Fatalf("create: %d %v", status, body)
	}
	id := body["data"].(map[string]any)["id"].(string)
	p, err := h.store.Pipeline(context.Background(), id)
	if err != nil {
		h.t.Fatal(err)
	}
	return id, p
}
