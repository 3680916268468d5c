package devstack

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/client"
)

// The Go client against the real stack: upload with progress, create, wait with
// every change in order, download, typed validation errors.
func TestClientRunsAJob(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	c, err := client.New(e2e.Stack.URL, e2e.Stack.APIKey)
	if err != nil {
		t.Fatal(err)
	}
	clip := e2e.Call(t, "GET", e2e.ClipURL, "", nil).Body
	var ups []int64
	f, err := c.Upload(ctx, bytes.NewReader(clip), int64(len(clip)), func(done, total int64) {
		if total != int64(len(clip)) {
			t.Errorf("upload progress total %d, want %d", total, len(clip))
		}
		ups = append(ups, done)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(ups) == 0 || ups[len(ups)-1] != int64(len(clip)) {
		t.Fatalf("upload progress %v, want it to end at %d", ups, len(clip))
	}
	j, err := c.Create(ctx, client.CreateRequest{
		InputFiles:     map[string]string{"in": f.DownloadURL},
		OutputFiles:    []string{"out.mp4"},
		FFmpegCommands: []string{"-re -i {{in}} -c:v libx264 -preset ultrafast -c:a copy {{out.mp4}}"},
	})
	if err != nil || j.Status != mj.StatusQueued {
		t.Fatalf("create: %+v, %v", j, err)
	}
	var statuses []mj.Status
	progressSeen := false
	done, err := c.Wait(ctx, j.ID, func(j *client.Job) {
		if n := len(statuses); n == 0 || statuses[n-1] != j.Status {
			statuses = append(statuses, j.Status)
		}
		if j.Progress != nil {
			progressSeen = true
		}
	})
	if err != nil || done.Status != mj.StatusSucceeded {
		t.Fatalf("wait: %+v, %v", done, err)
	}
	rank := map[mj.Status]int{mj.StatusQueued: 0, mj.StatusRunning: 1, mj.StatusSucceeded: 2}
	for i := 1; i < len(statuses); i++ {
		if rank[statuses[i]] <= rank[statuses[i-1]] {
			t.Fatalf("statuses out of order: %v", statuses)
		}
	}
	if statuses[len(statuses)-1] != mj.StatusSucceeded || len(statuses) < 2 {
		t.Fatalf("statuses seen: %v", statuses)
	}
	t.Logf("statuses %v, progress seen %v", statuses, progressSeen)
	var out bytes.Buffer
	var got int64
	n, err := c.Download(ctx, done.OutputFiles["out.mp4"], &out, func(d, _ int64) { got = d })
	if err != nil || n == 0 || int64(out.Len()) != n || got != n || int64(n) != done.Outputs["out.mp4"].SizeBytes {
		t.Fatalf("download: %d bytes (progress %d, size %d), %v", n, got, done.Outputs["out.mp4"].SizeBytes, err)
	}

	// The command's full ffmpeg log, at info level, is kept with the outputs.
	var log bytes.Buffer
	if _, err := c.Download(ctx, done.Logs["1"], &log, nil); err != nil || !bytes.Contains(log.Bytes(), []byte("[info]")) {
		t.Fatalf("log of command 1 (%q): %v\n%.500s", done.Logs["1"], err, log.Bytes())
	}
	// A failed job's log has ffmpeg's error; its error_message has the error
	// alone, without the info lines.
	bad, err := c.Create(ctx, client.CreateRequest{
		InputFiles:     map[string]string{"in": f.DownloadURL},
		OutputFiles:    []string{"out.mp4"},
		FFmpegCommands: []string{"-i {{in}} -map 0:s -c copy {{out.mp4}}"},
	})
	if err != nil {
		t.Fatal(err)
	}
	if bad, err = c.Wait(ctx, bad.ID, nil); err != nil || bad.Status != mj.StatusFailed {
		t.Fatalf("a command mapping a missing stream: %+v, %v", bad, err)
	}
	log.Reset()
	if _, err := c.Download(ctx, bad.Logs["1"], &log, nil); err != nil || !bytes.Contains(log.Bytes(), []byte("[fatal] Stream map")) || !bytes.Contains(log.Bytes(), []byte("[info]")) {
		t.Fatalf("log of the failed command: %v\n%.1000s", err, log.Bytes())
	}
	if strings.Contains(bad.ErrorMessage, "[info]") || strings.Contains(bad.ErrorMessage, "[error]") || !strings.Contains(bad.ErrorMessage, "matches no streams") {
		t.Fatalf("error_message of the failed job: %q", bad.ErrorMessage)
	}

	// Validation errors are typed, with the field at fault.
	_, err = c.Create(ctx, client.CreateRequest{OutputFiles: []string{"out.mp4"}, FFmpegCommands: []string{"-i /etc/passwd {{out.mp4}}"}})
	var e *client.Error
	if !client.IsCode(err, "validationError") || !asError(err, &e) || e.StatusCode != 400 || len(e.Details) == 0 {
		t.Fatalf("bad command: %v (%+v)", err, e)
	}
	if _, err := c.Get(ctx, "no-such-job"); !client.IsCode(err, "notFound") {
		t.Fatalf("missing job: %v", err)
	}
}

func asError(err error, e **client.Error) bool {
	v, ok := err.(*client.Error)
	*e = v
	return ok
}

// A create whose answer is lost (the connection drops after the gateway stored
// the job) is retried with the same Idempotency-Key: the job exists once.
func TestClientRetriedCreateMakesOneJob(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	var creates atomic.Int32
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		req, _ := http.NewRequest(r.Method, e2e.Stack.URL+r.URL.RequestURI(), bytes.NewReader(body))
		req.Header = r.Header.Clone()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer resp.Body.Close()
		if r.Method == "POST" && r.URL.Path == "/api/ffmpeg" && creates.Add(1) == 1 {
			// Stored; the answer never arrives.
			conn, _, _ := w.(http.Hijacker).Hijack()
			conn.Close()
			return
		}
		for k, v := range resp.Header {
			w.Header()[k] = v
		}
		w.WriteHeader(resp.StatusCode)
		io.Copy(w, resp.Body)
	}))
	defer proxy.Close()
	c, err := client.New(proxy.URL, e2e.Stack.APIKey, client.WithRetries(3, 100*time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	tag := time.Now().Format(time.RFC3339Nano)
	j, err := c.Create(ctx, client.CreateRequest{
		OutputFiles: []string{"out.mp4"}, FFmpegCommands: []string{"-f lavfi -i testsrc=duration=1 {{out.mp4}}"},
		Metadata: map[string]string{"idem": tag},
	})
	if err != nil || creates.Load() != 2 {
		t.Fatalf("create through a dropped connection: %+v, %v (%d creates sent)", j, err, creates.Load())
	}
	page, err := c.List(ctx, client.ListOptions{Limit: 100})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	for _, lj := range page.Jobs {
		if lj.Metadata["idem"] == tag {
			n++
			if lj.ID != j.ID {
				t.Errorf("a second job %s beside %s", lj.ID, j.ID)
			}
		}
	}
	if n != 1 {
		t.Fatalf("%d jobs with the tag, want 1", n)
	}
}
