package runner

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"

	mj "github.com/mediajobs/mediajobs"
)

// A warm runner uploads under its lease's RunID, not the allocation's id (one
// allocation runs many jobs), through the manifest's template and through asked
// links alike; a RunID that is not a UUID never becomes part of a path.
func TestUploadsUnderTheRunID(t *testing.T) {
	const runID = "7d3f2a10-5b6c-4e8d-a9f0-0123456789ab"
	alloc := "0b8e7f5e-3c1a-4d2b-9f00-1234567890ab"
	t.Setenv("NOMAD_ALLOC_ID", alloc)
	srv, up := newServer(t, nil)
	upload := func(t *testing.T, r *Runner, m *mj.Manifest) *mj.Result {
		t.Helper()
		r.WorkDir, r.Log = t.TempDir(), io.Discard
		if err := os.MkdirAll(filepath.Join(r.WorkDir, "outputs"), 0o750); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(r.WorkDir, "outputs", "a.bin"), []byte("output bytes"), 0o640); err != nil {
			t.Fatal(err)
		}
		m.JobID, m.Attempt, m.OutputNames = "job-1", 1, []string{"a.bin"}
		st := &State{Done: true, Outputs: []mj.Output{{Name: "a.bin", Size: 12}}}
		res, err := r.Upload(context.Background(), m, st)
		if err != nil || !res.Succeeded {
			t.Fatalf("Upload: %v, result %+v", err, res)
		}
		return res
	}
	uploaded := func(path string) []byte {
		up.mu.Lock()
		defer up.mu.Unlock()
		return up.files[path]
	}

	t.Run("template", func(t *testing.T) {
		res := upload(t, &Runner{RunID: runID}, &mj.Manifest{UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok"})
		if res.AllocID != runID {
			t.Fatalf("result names %q, want the RunID", res.AllocID)
		}
		if string(uploaded(runID+"/outputs/a.bin")) != "output bytes" || uploaded(runID+"/result.json") == nil {
			t.Fatal("the output and the result are not under the RunID")
		}
		if uploaded(alloc+"/outputs/a.bin") != nil || uploaded("outputs/a.bin") != nil {
			t.Fatal("an upload went outside the RunID's directory")
		}
	})

	t.Run("asked links", func(t *testing.T) {
		var mu sync.Mutex
		var asked string
		links := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			var req struct {
				Alloc string   `json:"alloc"`
				Files []string `json:"files"`
			}
			json.NewDecoder(r.Body).Decode(&req)
			mu.Lock()
			asked = req.Alloc
			mu.Unlock()
			urls := map[string]string{}
			for _, f := range req.Files {
				urls[f] = srv.URL + "/up/" + req.Alloc + "/linked/" + f + "?sig=ok"
			}
			json.NewEncoder(w).Encode(map[string]any{"data": map[string]any{"urls": urls}})
		}))
		defer links.Close()
		upload(t, &Runner{RunID: runID}, &mj.Manifest{UploadsURL: links.URL})
		mu.Lock()
		defer mu.Unlock()
		if asked != runID || string(uploaded(runID+"/linked/outputs/a.bin")) != "output bytes" {
			t.Fatalf("links asked for %q, want the RunID", asked)
		}
	})

	t.Run("not a UUID", func(t *testing.T) {
		res := upload(t, &Runner{RunID: "../../elsewhere"}, &mj.Manifest{UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok"})
		if res.AllocID != alloc || uploaded(alloc+"/outputs/a.bin") == nil {
			t.Fatalf("result names %q: a non-UUID RunID did not fall back to the allocation", res.AllocID)
		}
	})
}
