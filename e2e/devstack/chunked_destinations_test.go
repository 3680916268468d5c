package devstack

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/mediajobs/mediajobs/e2e"
)

// A chunked job with an output destination (a loopback receiver standing for
// the user's bucket, behind a presigned-looking URL) and keep_outputs false:
// the receiver gets the stitched, verified file, once; the job's view reports
// the delivery (where, HTTP status, sha256 of the bytes sent, not kept) as a
// single job's does, links no service copy, and quotes no signature; its
// webhook says the same.
func TestChunkedOutputDestination(t *testing.T) {
	e2e.NeedStack(t)
	t.Parallel()
	const sig = "X-Amz-Signature=5ec2e7515ec2e7515ec2e751"
	var mu sync.Mutex
	got := map[string][][]byte{} // path → bodies PUT there
	user := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodPut || !strings.Contains(r.URL.RawQuery, sig) {
			http.Error(w, "<Error><Code>AccessDenied</Code></Error>", http.StatusForbidden)
			return
		}
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		mu.Lock()
		got[r.URL.Path] = append(got[r.URL.Path], b)
		mu.Unlock()
	}))
	defer user.Close()

	src := chunkedSource(t, "160x120")
	r := e2e.Call(t, "POST", "/api/ffmpeg", e2e.Stack.APIKey, map[string]any{
		"input_files": map[string]string{"src": src}, "output_files": []string{"out.mp4"},
		"ffmpeg_commands": []string{"-i {{src}} -c:v libx264 -preset veryfast -crf 30 -c:a aac -b:a 64k -movflags +faststart {{out.mp4}}"},
		"timeout_seconds": 600, "webhook_url": e2e.HookURL,
		"output_destinations": map[string]string{"out.mp4": user.URL + "/bucket/chunked/out.mp4?X-Amz-Credential=AKIAEXAMPLE&" + sig},
		"keep_outputs":        false,
		"parallel":            map[string]any{"chunk_seconds": 2, "max_workers": 2}})
	if r.Status != 200 {
		t.Fatalf("create: HTTP %d %s", r.Status, r.Body)
	}
	d := r.Data(t)
	if p, _ := d["parallel"].(map[string]any); p == nil || p["mode"] != "chunked" {
		t.Fatalf("create: %v", d)
	}
	id := d["id"].(string)
	j := waitChunked(t, id)
	if j["status"] != "succeeded" {
		t.Fatalf("chunked job %v: %v (%v)", j["status"], j["error_message"], j["parallel"])
	}
	if v, _ := j["parallel"].(map[string]any)["verification"].(map[string]any); v == nil || v["pass"] != true {
		t.Fatalf("verification %v", j["parallel"])
	}

	// The user's bucket holds the stitched file, sent once.
	mu.Lock()
	bodies := got["/bucket/chunked/out.mp4"]
	mu.Unlock()
	if len(bodies) != 1 {
		t.Fatalf("the destination got %d uploads (%d paths)", len(bodies), len(got))
	}
	sum := sha256.Sum256(bodies[0])
	local := filepath.Join(t.TempDir(), "out.mp4")
	if err := os.WriteFile(local, bodies[0], 0o644); err != nil {
		t.Fatal(err)
	}
	if n := frames(t, local); n != 150 {
		t.Fatalf("the delivered file has %d frames, the source 150", n)
	}

	// J's view reports the delivery, as a single job's, and keeps no copy.
	check := func(what string, job map[string]any) {
		t.Helper()
		out, _ := job["outputs"].(map[string]any)["out.mp4"].(map[string]any)
		dst, _ := out["destination"].(map[string]any)
		if dst == nil || dst["status"] != "uploaded" || dst["http_status"] != 200.0 || dst["kept"] != false ||
			dst["sha256"] != hex.EncodeToString(sum[:]) || dst["url"] != user.URL+"/bucket/chunked/out.mp4" || out["size_bytes"] != float64(len(bodies[0])) {
			t.Fatalf("%s: outputs %v; the destination got %d bytes (sha256 %x)", what, job["outputs"], len(bodies[0]), sum)
		}
		if of, _ := job["output_files"].(map[string]any); len(of) != 0 {
			t.Fatalf("%s: output_files %v: keep_outputs false keeps no service copy", what, of)
		}
		if raw, _ := json.Marshal(job); strings.Contains(string(raw), "5ec2e751") {
			t.Fatalf("%s holds the signature: %s", what, raw)
		}
	}
	check("the view", j)
	check("the webhook", oneHook(t, id, "job.succeeded").Job)
	// Only the stitch delivered: the parent's destinations are gone with its end.
	if dests, err := e2e.Stack.Backends.Store.Destinations(t.Context(), id); err != nil || dests != nil {
		t.Fatalf("the ended job's destinations are still stored: %v, %v", dests, err)
	}
}
