package runner

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// Past the job's deadline the runner's remaining work (logs, the result) ends
// within the manifest's ReportSeconds, and the result still goes up: a log upload
// that hangs does not hold the result past the dispatcher's timeout backstop.
func TestReportAfterTheDeadlineIsBounded(t *testing.T) {
	var mu sync.Mutex
	got := map[string][]byte{}
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		path := strings.TrimPrefix(r.URL.Path, "/up/")
		b, _ := io.ReadAll(r.Body)
		if strings.HasPrefix(path, "logs/") {
			select { // a log upload that hangs
			case <-r.Context().Done():
			case <-release:
			}
			return
		}
		mu.Lock()
		got[path] = b
		mu.Unlock()
	}))
	defer srv.Close()
	defer close(release)
	dir := t.TempDir()
	if err := os.MkdirAll(filepath.Join(dir, "logs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, logPath(1)), []byte("ffmpeg said things\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	m := &mj.Manifest{JobID: "job-1", Attempt: 1, FFmpegCommands: []string{"-version"}, TimeoutSeconds: 1, ReportSeconds: 2,
		UploadURL: srv.URL + "/up/%7Bpath%7D?sig=ok"}
	st := &State{Deadline: time.Now().Add(-time.Second), Done: true}
	st.fail(timeoutError(m, "while running command 1 of 1"))
	r := &Runner{WorkDir: dir, Log: io.Discard}
	done := make(chan error, 1)
	go func() { _, err := r.Upload(context.Background(), m, st); done <- err }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Upload: %v", err)
		}
	case <-time.After(time.Minute): // generous: unbounded, the log alone waits two minutes
		t.Fatal("the runner's work past its deadline was not bounded by report_seconds")
	}
	mu.Lock()
	defer mu.Unlock()
	var res mj.Result
	if err := json.Unmarshal(got["result.json"], &res); err != nil || res.Succeeded || !strings.Contains(res.ErrorMessage, "timed out") || len(res.Logs) != 0 {
		t.Fatalf("result: %s (%v)", got["result.json"], err)
	}
}
