package gateway

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// presigned looks like an S3 presigned PUT: its signature must appear nowhere
// but in the destinations' own key.
const presigned = "https://media.example/bucket/out.mp4?X-Amz-Credential=AKIAEXAMPLE%2F20260101&X-Amz-Signature=5ec2e7515ec2e7515ec2e751"

func TestCreateDestinationsValidation(t *testing.T) {
	h := newHarness(t)
	h.gw.Config.Server.MaxBodyBytes = 1 << 20
	withDest := func(outputs []string, dests map[string]string) map[string]any {
		b := with("output_files", outputs)
		b["ffmpeg_commands"] = []string{"-i {{video}} outputs/" + outputs[0]}
		b["output_destinations"] = dests
		return b
	}
	many := map[string]string{}
	var manyOuts []string
	for i := 0; i <= mj.MaxDestinations; i++ {
		n := fmt.Sprintf("o%d.mp4", i)
		manyOuts, many[n] = append(manyOuts, n), presigned
	}
	big := presigned + "&x=" + strings.Repeat("y", mj.MaxURLBytes-len(presigned)-3)
	bigOuts, bigDests := []string{}, map[string]string{}
	for i := 0; i < mj.MaxDestinationsBytes/mj.MaxURLBytes+1; i++ {
		n := fmt.Sprintf("o%d.mp4", i)
		bigOuts, bigDests[n] = append(bigOuts, n), big
	}
	cases := []struct {
		name  string
		body  any
		field string
	}{
		{"a counter output", withDest([]string{"frame_%04d.png"}, map[string]string{"frame_%04d.png": presigned}), "output_destinations.frame_%04d.png"},
		{"a variant output", withDest([]string{"stream_%v/index.m3u8"}, map[string]string{"stream_%v/index.m3u8": presigned}), "output_destinations.stream_%v/index.m3u8"},
		{"an undeclared output", withDest([]string{"out.mp4"}, map[string]string{"other.mp4": presigned}), "output_destinations.other.mp4"},
		{"not http", withDest([]string{"out.mp4"}, map[string]string{"out.mp4": "ftp://media.example/out.mp4?X-Amz-Signature=5ec2e7515ec2e7515ec2e751"}), "output_destinations.out.mp4"},
		{"relative", withDest([]string{"out.mp4"}, map[string]string{"out.mp4": "/bucket/out.mp4?X-Amz-Signature=5ec2e7515ec2e7515ec2e751"}), "output_destinations.out.mp4"},
		{"a private host", withDest([]string{"out.mp4"}, map[string]string{"out.mp4": "https://internal.example/b/out.mp4?X-Amz-Signature=5ec2e7515ec2e7515ec2e751"}), "output_destinations.out.mp4"},
		{"link-local", withDest([]string{"out.mp4"}, map[string]string{"out.mp4": "http://169.254.169.254/b/out.mp4?X-Amz-Signature=5ec2e7515ec2e7515ec2e751"}), "output_destinations.out.mp4"},
		{"too long", withDest([]string{"out.mp4"}, map[string]string{"out.mp4": presigned + strings.Repeat("y", mj.MaxURLBytes)}), "output_destinations.out.mp4"},
		{"too many", withDest(manyOuts, many), "output_destinations"},
		{"too much in all", withDest(bigOuts, bigDests), "output_destinations"},
		{"not an object", with("output_destinations", "https://media.example/x"), "output_destinations"},
		{"keep_outputs not a boolean", with("keep_outputs", "no"), "keep_outputs"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body, _ := h.do("POST", "/api/ffmpeg", "alice", c.body)
			if status != 400 || body["errorCode"] != "validationError" {
				t.Fatalf("HTTP %d %v", status, body)
			}
			if d, _ := body["details"].(map[string]any); d[c.field] == nil {
				t.Fatalf("details %v lack %q", body["details"], c.field)
			}
			if raw, _ := json.Marshal(body); strings.Contains(string(raw), "5ec2e751") {
				t.Fatalf("the refusal quotes the signature: %s", raw)
			}
		})
	}
	if n := h.total("alice"); n != 0 {
		t.Fatalf("%d jobs stored by rejected requests", n)
	}
}

// A destination is stored under its own key, never in the job record or its
// view, and handed only to the runner of the job's current attempt, with no
// service link for the output when keep_outputs is false.
func TestDestinationsKeptApart(t *testing.T) {
	h := newHarness(t)
	h.gw.Config.Server.MaxBodyBytes = 1 << 20
	ctx := context.Background()
	req := valid()
	req["output_destinations"] = map[string]string{"out.mp4": presigned}
	req["keep_outputs"] = false
	// A dry run checks them and shows none.
	status, body, _ := h.do("POST", "/api/ffmpeg?dry_run=true", "alice", req)
	if raw, _ := json.Marshal(body); status != 200 || strings.Contains(string(raw), "5ec2e751") || h.total("alice") != 0 {
		t.Fatalf("dry run: %d %s", status, raw)
	}
	status, body, _ = h.do("POST", "/api/ffmpeg", "alice", req)
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	if raw, _ := json.Marshal(body); strings.Contains(string(raw), "5ec2e751") {
		t.Fatalf("the job view holds the signature: %s", raw)
	}
	id := body["data"].(map[string]any)["id"].(string)
	resp, err := h.store.Client().Get(ctx, "/test/", clientv3.WithPrefix())
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, kv := range resp.Kvs {
		if !strings.Contains(string(kv.Value), "5ec2e751") {
			continue
		}
		if string(kv.Key) != "/test/destinations/"+id {
			t.Fatalf("the destination is stored under %s", kv.Key)
		}
		found = true
	}
	if !found {
		t.Fatal("the destination was not stored")
	}

	tok := dispatchedAs(t, h, id, testAlloc)
	ask := func(req string) (int, map[string]any) { return askUploads(h, id, req, tok) }
	if status, body := ask(`{"files":["result.json","outputs/out.mp4"]}`); status != 400 || !strings.Contains(fmt.Sprint(body["message"]), "output_destinations") {
		t.Fatalf("a runner that does not deliver to destinations: %d %v", status, body)
	}
	status, body = ask(`{"files":["result.json","outputs/out.mp4"],"destinations":true}`)
	if status != 200 {
		t.Fatalf("upload links: %d %v", status, body)
	}
	data := body["data"].(map[string]any)
	urls, dests := data["urls"].(map[string]any), data["destinations"].(map[string]any)
	if urls["result.json"] == nil || urls["outputs/out.mp4"] != nil || dests["outputs/out.mp4"] != presigned || len(dests) != 1 {
		t.Fatalf("links %v, destinations %v", urls, dests)
	}
}

func TestDestinationsKeepACopyByDefault(t *testing.T) {
	h := newHarness(t)
	h.gw.Config.Server.MaxBodyBytes = 1 << 20
	req := valid()
	req["output_files"] = []string{"out.mp4", "thumb.png"}
	req["ffmpeg_commands"] = []string{"-i {{video}} outputs/out.mp4 -frames:v 1 outputs/thumb.png"}
	req["output_destinations"] = map[string]string{"out.mp4": presigned}
	status, body, _ := h.do("POST", "/api/ffmpeg", "alice", req)
	if status != 200 {
		t.Fatalf("create: %d %v", status, body)
	}
	id := body["data"].(map[string]any)["id"].(string)
	tok := dispatchedAs(t, h, id, testAlloc)
	status, body = askUploads(h, id, `{"files":["result.json","outputs/out.mp4","outputs/thumb.png"],"destinations":true}`, tok)
	if status != 200 {
		t.Fatalf("upload links: %d %v", status, body)
	}
	data := body["data"].(map[string]any)
	urls, dests := data["urls"].(map[string]any), data["destinations"].(map[string]any)
	if len(urls) != 3 || len(dests) != 1 || dests["outputs/out.mp4"] != presigned {
		t.Fatalf("links %v, destinations %v", urls, dests)
	}
}
