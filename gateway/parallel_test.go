package gateway

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// A command chunked encoding can split: one input, one output, x264.
func chunkable() map[string]any {
	m := valid()
	m["ffmpeg_commands"] = []string{"-i {{video}} -c:v libx264 -crf 28 -c:a aac {{out.mp4}}"}
	m["parallel"] = map[string]any{"chunk_seconds": 2, "max_workers": 2}
	return m
}

func withParallel(cmd string, parallel map[string]any) map[string]any {
	m := chunkable()
	if cmd != "" {
		m["ffmpeg_commands"] = []string{cmd}
	}
	m["parallel"] = parallel
	return m
}

// A command that cannot be split is refused with a 400 whose details'
// "parallel" names what prevents it, as a create and as a dry run alike, and
// nothing is stored; bad values are refused by name.
func TestParallelRefusal(t *testing.T) {
	h := newHarness(t)
	h.used("alice")
	before := h.etcdRevision()
	for name, tc := range map[string]struct {
		req  map[string]any
		want string
	}{
		"a fade with times":  {withParallel("-i {{video}} -vf fade=t=in:st=0:d=1 -c:v libx264 {{out.mp4}}", map[string]any{}), "fade"},
		"-t on the output":   {withParallel("-i {{video}} -c:v libx264 -t 5 {{out.mp4}}", map[string]any{}), "-t 5"},
		"two-pass":           {withParallel("-i {{video}} -c:v libx264 -pass 1 {{out.mp4}}", map[string]any{}), "two-pass"},
		"a segmenting muxer": {withParallel("-i {{video}} -c:v libx264 -f segment {{out.mp4}}", map[string]any{}), "segment"},
		"no video encoder":   {withParallel("-i {{video}} {{out.mp4}}", map[string]any{}), "names no video encoder"},
		"two commands": {func() map[string]any {
			m := chunkable()
			m["ffmpeg_commands"] = []string{"-i {{video}} -c:v libx264 {{out.mp4}}", "-i {{video}} -c:v libx264 {{out.mp4}}"}
			return m
		}(), "exactly one command"},
	} {
		for _, target := range []string{"/api/ffmpeg", "/api/ffmpeg?dry_run=true"} {
			status, body, _ := h.do("POST", target, "alice", tc.req)
			details, _ := body["details"].(map[string]any)
			why, _ := details["parallel"].(string)
			if status != 400 || body["errorCode"] != "validationError" || !strings.Contains(why, tc.want) {
				t.Errorf("%s (%s): %d %v; want 400 with details.parallel naming %q", name, target, status, body, tc.want)
			}
		}
	}
	for field, p := range map[string]map[string]any{
		"parallel.chunk_seconds": {"chunk_seconds": 0},
		"parallel.max_workers":   {"max_workers": 0},
	} {
		status, body, _ := h.do("POST", "/api/ffmpeg", "alice", withParallel("", p))
		if details, _ := body["details"].(map[string]any); status != 400 || details[field] == nil {
			t.Errorf("%v: %d %v; want 400 naming %s", p, status, body, field)
		}
	}
	if after := h.etcdRevision(); after != before || h.total("alice") != 0 {
		t.Fatalf("refusals wrote to etcd: revision %d -> %d, %d jobs", before, after, h.total("alice"))
	}
}

// With fallback, a command that cannot be split runs as one ordinary job,
// queued as any, and its view says so and why.
func TestParallelFallback(t *testing.T) {
	h := newHarness(t)
	req := withParallel("-i {{video}} -vf fade=t=in:st=0:d=1 -c:v libx264 {{out.mp4}}", map[string]any{"fallback": true})
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req)
	data, _ := body["data"].(map[string]any)
	p, _ := data["parallel"].(map[string]any)
	if status != 200 || p["mode"] != "single" || !strings.Contains(p["reason"].(string), "fade") || p["pipeline_id"] != nil {
		t.Fatalf("fallback create: %d %v", status, body)
	}
	j, err := h.store.Job(context.Background(), data["id"].(string))
	if err != nil || j.ChunkedParent() || j.Chunk != nil {
		t.Fatalf("stored %+v, %v", j, err)
	}
	if q := h.keys2("queue/"); len(q) != 1 {
		t.Fatalf("queue keys %v: the fallback job is queued as any", q)
	}
}

// A dry run of a job that can be split says so, with the steps that will run
// and that the chunks are decided when a worker probes the source.
func TestParallelDryRun(t *testing.T) {
	h := newHarness(t)
	h.used("alice")
	before := h.etcdRevision()
	status, body, _ := h.do("POST", "/api/ffmpeg?dry_run=true", "alice", chunkable())
	data, _ := body["data"].(map[string]any)
	p, _ := data["parallel"].(map[string]any)
	if status != 200 || p["mode"] != "chunked" || p["chunk_seconds"] != 2.0 || p["max_workers"] != 2.0 || !strings.Contains(p["note"].(string), "probes the source") {
		t.Fatalf("dry run: %d %v", status, body)
	}
	var steps []string
	for _, s := range p["steps"].([]any) {
		steps = append(steps, s.(map[string]any)["name"].(string))
	}
	if !reflect.DeepEqual(steps, []string{"plan", "encode", "audio", "stitch"}) {
		t.Fatalf("steps %v", steps)
	}
	status, body, _ = h.do("POST", "/api/ffmpeg?dry_run=true", "alice", withParallel("-i {{video}} -vf fade=t=in:st=0:d=1 -c:v libx264 {{out.mp4}}", map[string]any{"fallback": true}))
	p, _ = body["data"].(map[string]any)["parallel"].(map[string]any)
	if status != 200 || p["mode"] != "single" {
		t.Fatalf("dry run with fallback: %d %v", status, body)
	}
	if after := h.etcdRevision(); after != before {
		t.Fatalf("dry runs wrote to etcd: revision %d -> %d", before, after)
	}
}

// A chunked job is stored as a parent, never queued, with its pipeline (kind
// chunked, owned by it) whose plan step's job is stored at once and queued;
// cancelling the parent cancels the pipeline and its jobs.
func TestParallelCreateAndCancel(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	maxIn := int64(1 << 30)
	h.gw.Config.Limits.MaxInputBytes = &maxIn
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", chunkable())
	data, _ := body["data"].(map[string]any)
	p, _ := data["parallel"].(map[string]any)
	if status != 200 || p["mode"] != "chunked" || p["pipeline_id"] == nil || data["status"] != "queued" {
		t.Fatalf("create: %d %v", status, body)
	}
	id, pid := data["id"].(string), p["pipeline_id"].(string)
	j, err := h.store.Job(ctx, id)
	if err != nil || !j.ChunkedParent() || len(j.Awaits) != 0 {
		t.Fatalf("parent %+v, %v", j, err)
	}
	pl, err := h.store.Pipeline(ctx, pid)
	if err != nil || pl.Kind != mj.PipelineKindChunked || pl.Owner != id || len(pl.Plan) != 0 || len(pl.Steps) != 1 || pl.Steps[0].Name != "plan" {
		t.Fatalf("pipeline %+v, %v", pl, err)
	}
	plan, err := h.store.Job(ctx, pl.Steps[0].Jobs[0])
	if err != nil || plan.Chunk == nil || plan.Chunk.Phase != mj.PhasePlan || plan.Chunk.ChunkSeconds != 2 || plan.InputFiles["video"] != "https://media.example/a.mp4" ||
		!slices.Contains(plan.OutputNames, mj.ChunkSplitPattern) || plan.Pipeline == nil || plan.Pipeline.ID != pid {
		t.Fatalf("plan job %+v, %v", plan, err)
	}
	if plan.MaxInputBytes != j.MaxInputBytes || plan.MaxInputBytes == 0 {
		t.Fatalf("the plan job fetches up to %d bytes, its parent %d: want the account's max_input_bytes", plan.MaxInputBytes, j.MaxInputBytes)
	}
	if q := h.keys2("queue/"); len(q) != 1 || !strings.HasSuffix(q[0], plan.ID) {
		t.Fatalf("queue keys %v: want the plan job's alone (a parent is never queued)", q)
	}
	// Its view lists the plan step.
	status, body, _ = h.do("GET", "/api/jobs/"+id, "alice", nil)
	steps, _ := body["data"].(map[string]any)["parallel"].(map[string]any)["steps"].([]any)
	if status != 200 || len(steps) != 1 || steps[0].(map[string]any)["name"] != "plan" {
		t.Fatalf("view: %d %v", status, body)
	}

	status, body, _ = h.do("POST", "/api/jobs/"+id+"/cancel", "alice", nil)
	if data, _ := body["data"].(map[string]any); status != 200 || data["status"] != "cancelled" || data["usage"] != nil {
		t.Fatalf("cancel: %d %v", status, body)
	}
	pl, _ = h.store.Pipeline(ctx, pid)
	plan, _ = h.store.Job(ctx, plan.ID)
	if !pl.Cancelled || pl.Stop == "" || plan.Status != mj.StatusCancelled {
		t.Fatalf("after the cancel: pipeline %+v, plan job %s", pl, plan.Status)
	}
	if q := h.keys2("queue/"); len(q) != 0 {
		t.Fatalf("queue keys %v after the cancel", q)
	}
}

// keys2 lists the keys under the store's prefix + rel.
func (h *harness) keys2(rel string) []string {
	h.t.Helper()
	prefix := h.store.QueuePrefix()
	prefix = strings.TrimSuffix(prefix, "queue/") + rel
	resp, err := h.store.Client().Get(context.Background(), prefix, clientv3.WithPrefix())
	if err != nil {
		h.t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// A retried create of a chunked job with the same Idempotency-Key answers
// the job stored the first time: one parent, one pipeline.
func TestParallelCreateIdempotent(t *testing.T) {
	h := newHarness(t)
	s1, b1, _ := h.do("POST", "/api/ffmpeg", "alice", chunkable(), "Idempotency-Key", "chunked-1")
	s2, b2, _ := h.do("POST", "/api/ffmpeg", "alice", chunkable(), "Idempotency-Key", "chunked-1")
	d1, _ := b1["data"].(map[string]any)
	d2, _ := b2["data"].(map[string]any)
	if s1 != 200 || s2 != 200 || d1["id"] != d2["id"] {
		t.Fatalf("creates: %d %v; %d %v", s1, b1, s2, b2)
	}
	if n := h.total("alice"); n != 2 { // the parent and its plan job
		t.Fatalf("%d jobs stored, want the parent and its plan job", n)
	}
	if _, pipelines := h.counts("alice"); pipelines != 1 {
		t.Fatalf("%v pipelines", pipelines)
	}
}

// leaderEnds stands in for a leader that ends a chunked job's pipeline
// cancelled, and the job with it, when the first of its jobs is cancelled.
type leaderEnds struct {
	Store
	child, parent string
	fired         *bool
}

func (l leaderEnds) UpdateJob(ctx context.Context, id string, fn func(*mj.Job) error) (*mj.Job, error) {
	if id == l.child && !*l.fired {
		*l.fired = true
		if _, err := l.Store.UpdateJob(ctx, l.parent, func(j *mj.Job) error {
			if j.Status.Terminal() {
				return errEnded
			}
			j.Cancel(time.Now().UTC(), "its chunked job "+j.ID+" was cancelled by the client")
			return nil
		}); err != nil && err != errEnded {
			return nil, err
		}
	}
	return l.Store.UpdateJob(ctx, id, fn)
}

// A chunked job's cancel answers 200 with the job cancelled even when the
// leader ends its pipeline (and so the job, cancelled) while the cancel
// stops the pipeline's jobs, and a second cancel answers 200 as well: its
// pipeline cancelled it.
func TestParallelCancelRacesTheLeader(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", chunkable())
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	data := body["data"].(map[string]any)
	id, pid := data["id"].(string), data["parallel"].(map[string]any)["pipeline_id"].(string)
	pl, err := h.store.Pipeline(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	fired := false
	h.gw.Store = leaderEnds{Store: h.gw.Store, child: pl.Steps[0].Jobs[0], parent: id, fired: &fired}
	status, body, _ = h.do("POST", "/api/jobs/"+id+"/cancel", "alice", nil)
	if data, _ := body["data"].(map[string]any); status != 200 || data["status"] != "cancelled" || !fired {
		t.Fatalf("cancel racing the leader: %d %v (leader fired: %v)", status, body, fired)
	}
	if plan, _ := h.store.Job(ctx, pl.Steps[0].Jobs[0]); plan.Status != mj.StatusCancelled {
		t.Fatalf("plan job %s after the cancel", plan.Status)
	}
	status, body, _ = h.do("POST", "/api/jobs/"+id+"/cancel", "alice", nil)
	if data, _ := body["data"].(map[string]any); status != 200 || data["status"] != "cancelled" {
		t.Fatalf("second cancel: %d %v", status, body)
	}
}

// "scene_cuts" goes to the plan step's job (its worker measures the scene
// changes: the dry run cannot show the cuts), and shows in the job's view
// and the dry run; a value that is not a boolean is refused.
func TestParallelSceneCuts(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	body := withParallel("", map[string]any{"chunk_seconds": 2, "scene_cuts": true})
	status, resp, _ := h.do("POST", "/api/ffmpeg?dry_run=true", "alice", body)
	p, _ := resp["data"].(map[string]any)["parallel"].(map[string]any)
	if status != 200 || p["scene_cuts"] != true || !strings.Contains(p["steps"].([]any)[0].(map[string]any)["runs"].(string), "scene change") {
		t.Fatalf("dry run: %d %v", status, resp)
	}
	status, resp, _ = h.do("POST", "/api/ffmpeg", "alice", body)
	data, _ := resp["data"].(map[string]any)
	p, _ = data["parallel"].(map[string]any)
	if status != 200 || p["scene_cuts"] != true {
		t.Fatalf("create: %d %v", status, resp)
	}
	pl, err := h.store.Pipeline(ctx, p["pipeline_id"].(string))
	if err != nil {
		t.Fatal(err)
	}
	plan, err := h.store.Job(ctx, pl.Steps[0].Jobs[0])
	if err != nil || plan.Chunk == nil || !plan.Chunk.SceneCuts {
		t.Fatalf("plan job %+v, %v: want scene_cuts", plan.Chunk, err)
	}
	// Without it, none.
	status, resp, _ = h.do("POST", "/api/ffmpeg", "alice", chunkable())
	p, _ = resp["data"].(map[string]any)["parallel"].(map[string]any)
	if status != 200 || p["scene_cuts"] != nil {
		t.Fatalf("create without scene_cuts: %d %v", status, resp)
	}
	status, resp, _ = h.do("POST", "/api/ffmpeg", "alice", withParallel("", map[string]any{"scene_cuts": "yes"}))
	if status != 400 {
		t.Fatalf("scene_cuts \"yes\": %d %v, want 400", status, resp)
	}
}
