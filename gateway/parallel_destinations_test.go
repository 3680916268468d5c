package gateway

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// A chunked job takes output_destinations and keep_outputs as any job does,
// through the same checks (an output it does not declare, a host the guard
// refuses); its URLs stay under its own key, and only its stitch's runner gets
// them, for the stitched output alone (with no service link when keep_outputs
// is false): no other step's job does.
func TestParallelDestinations(t *testing.T) {
	h := newHarness(t)
	h.gw.Config.Server.MaxBodyBytes = 1 << 20
	ctx := context.Background()
	withDests := func(dests map[string]string) map[string]any {
		b := chunkable()
		b["output_destinations"] = dests
		b["keep_outputs"] = false
		return b
	}
	for field, dests := range map[string]map[string]string{
		"output_destinations.other.mp4": {"other.mp4": presigned},
		"output_destinations.out.mp4":   {"out.mp4": "https://internal.example/b/out.mp4?X-Amz-Signature=5ec2e7515ec2e7515ec2e751"},
	} {
		status, body, _ := h.do("POST", "/api/ffmpeg", "alice", withDests(dests))
		if d, _ := body["details"].(map[string]any); status != 400 || d[field] == nil {
			t.Fatalf("%v: HTTP %d %v; want 400 naming %s", dests, status, body, field)
		}
	}
	if n := h.total("alice"); n != 0 {
		t.Fatalf("%d jobs stored by refused creates", n)
	}

	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", withDests(map[string]string{"out.mp4": presigned}))
	data, _ := body["data"].(map[string]any)
	p, _ := data["parallel"].(map[string]any)
	if status != 200 || p["mode"] != "chunked" {
		t.Fatalf("create: %d %v", status, body)
	}
	if raw, _ := json.Marshal(body); strings.Contains(string(raw), "5ec2e751") {
		t.Fatalf("the view holds the signature: %s", raw)
	}
	id, pid := data["id"].(string), p["pipeline_id"].(string)
	if d, err := h.store.Destinations(ctx, id); err != nil || d == nil || d.URLs["out.mp4"] != presigned || d.KeepOutputs {
		t.Fatalf("the chunked job's destinations: %+v, %v", d, err)
	}
	parent, err := h.store.Job(ctx, id)
	if err != nil || !parent.HasDestinations {
		t.Fatalf("parent %+v, %v", parent, err)
	}
	pl, err := h.store.Pipeline(ctx, pid)
	if err != nil {
		t.Fatal(err)
	}
	plan, err := h.store.Job(ctx, pl.Steps[0].Jobs[0])
	if err != nil || plan.HasDestinations {
		t.Fatalf("plan job %+v, %v", plan, err)
	}

	// The plan succeeded: the leader extends the pipeline (as the dispatcher does).
	plan.Status = mj.StatusSucceeded
	for _, n := range []string{mj.ChunkPlanFile, mj.ChunkListFile, mj.ChunkFileName(0), mj.ChunkFileName(1)} {
		plan.Outputs = append(plan.Outputs, mj.Output{Name: n, Key: "k/" + n})
	}
	list := &mj.ChunkList{Chunks: []json.RawMessage{[]byte(`{"start":0,"end":2}`), []byte(`{"start":2,"end":3}`)}}
	steps, jobs, err := mj.ExtendChunked(pl, parent, plan, list, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := h.store.ExtendPipeline(ctx, pid, steps, jobs, h.gw.limitDefaults()); err != nil {
		t.Fatal(err)
	}
	if _, err := h.store.MaterialisePipeline(ctx, pid, time.Now()); err != nil {
		t.Fatal(err)
	}
	stitchID, encodeID := mj.ChunkedJobID(pid, mj.ChunkStepStitch, 0), mj.ChunkedJobID(pid, mj.ChunkStepEncode, 0)
	if d, err := h.store.Destinations(ctx, stitchID); err != nil || d != nil {
		t.Fatalf("the stitch has destinations of its own: %+v, %v", d, err)
	}

	// An encode's runner gets no destination (nor needs an identity for it).
	status, body = askUploads(h, encodeID, `{"files":["result.json","outputs/`+mj.ChunkFileName(0)+`"],"destinations":true}`, dispatchedAs(t, h, encodeID, otherAlloc))
	if data, _ := body["data"].(map[string]any); status != 200 || data["destinations"] != nil {
		t.Fatalf("an encode's upload links: %d %v", status, body)
	}
	// The stitch's runner gets the parent's, for the output alone.
	tok := dispatchedAs(t, h, stitchID, testAlloc)
	status, body = askUploads(h, stitchID, `{"files":["result.json","outputs/out.mp4","outputs/`+mj.ChunkVerification+`"],"destinations":true}`, tok)
	if status != 200 {
		t.Fatalf("the stitch's upload links: %d %v", status, body)
	}
	data = body["data"].(map[string]any)
	urls, dests := data["urls"].(map[string]any), data["destinations"].(map[string]any)
	if urls["result.json"] == nil || urls["outputs/"+mj.ChunkVerification] == nil || urls["outputs/out.mp4"] != nil ||
		len(dests) != 1 || dests["outputs/out.mp4"] != presigned {
		t.Fatalf("the stitch's links %v, destinations %v: want out.mp4 to its destination alone (keep_outputs false)", urls, dests)
	}
}
