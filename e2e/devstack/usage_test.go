package devstack

import (
	"context"
	"math"
	"runtime"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/e2e"

	mj "github.com/mediajobs/mediajobs"
)

// usageAccount is a new account of the stack with a key: its usage is its own.
func usageAccount(t *testing.T, name string) string {
	t.Helper()
	ctx := context.Background()
	acct, err := e2e.Stack.Backends.Store.CreateAccount(ctx, name+"-"+time.Now().Format("150405.000000"))
	if err != nil {
		t.Fatal(err)
	}
	key := mj.NewAPIKeySecret()
	if _, err := e2e.Stack.Backends.Store.AddAPIKey(ctx, acct.ID, "k", key); err != nil {
		t.Fatal(err)
	}
	return key
}

func num(t *testing.T, m map[string]any, field string) float64 {
	t.Helper()
	v, ok := m[field].(float64)
	if !ok {
		t.Fatalf("%s is not a number in %v", field, m)
	}
	return v
}

// Real jobs on raw_exec, their ffmpeg in bubblewrap, are metered: each job shows
// the CPU time of its processes (an encode's, not lost in the sandbox; no more
// than its wall time on every core) and its bytes, and GET /api/usage adds up to
// the jobs' figures. Bad ranges are refused.
func TestUsageOfRealJobs(t *testing.T) {
	t.Parallel()
	e2e.NeedStack(t)
	key := usageAccount(t, "usage")
	specs := []map[string]any{
		{ // CPU-heavy: an encode
			"output_files":    []string{"enc.mp4"},
			"ffmpeg_commands": []string{"-f lavfi -i testsrc=duration=20:size=160x120:rate=25 -c:v libx264 -preset slower -threads 1 outputs/enc.mp4"},
		},
		{ // bytes in and out
			"input_files":     map[string]string{"in": e2e.ClipURL},
			"output_files":    []string{"copy.mp4"},
			"ffmpeg_commands": []string{"-i inputs/in -c copy outputs/copy.mp4"},
		},
	}
	var want [4]float64 // cpu, wall, input and output bytes of the jobs
	for n, spec := range specs {
		r := e2e.Call(t, "POST", "/api/ffmpeg?wait=true", key, spec)
		if r.Status != 200 {
			t.Fatalf("create: %d %s", r.Status, r.Body)
		}
		j := r.Data(t)
		id := j["id"].(string)
		for end := time.Now().Add(150 * time.Second); j["status"] != "succeeded" && time.Now().Before(end); time.Sleep(200 * time.Millisecond) {
			j = e2e.Call(t, "GET", "/api/jobs/"+id, key, nil).Data(t)
			if j["status"] == "failed" || j["status"] == "cancelled" {
				break
			}
		}
		if j["status"] != "succeeded" {
			t.Fatalf("job %s: %v %q %q", id, j["status"], j["status_detail"], j["error_message"])
		}
		u, ok := j["usage"].(map[string]any)
		if !ok {
			t.Fatalf("job %s has no usage: %v", id, j["usage"])
		}
		cpu, wall := num(t, u, "cpu_seconds"), num(t, u, "wall_seconds")
		if cpu <= 0 || wall <= 0 || cpu > wall*float64(runtime.NumCPU())+0.01 || num(t, u, "gpu_seconds") != 0 {
			t.Fatalf("job %s usage %v: CPU must be within (0, wall × %d cores]", id, u, runtime.NumCPU())
		}
		// 500 frames through x264's slower preset: far more than the
		// milliseconds bwrap itself takes.
		if n == 0 && cpu < 0.3 {
			t.Fatalf("the encode took %.3f s of CPU: its ffmpeg's time was lost in the sandbox", cpu)
		}
		if num(t, u, "input_bytes") != num(t, j, "total_input_bytes") || num(t, u, "output_bytes") != num(t, j, "total_output_bytes") || num(t, u, "output_bytes") <= 0 {
			t.Fatalf("job %s usage %v; total_input_bytes %v, total_output_bytes %v", id, u, j["total_input_bytes"], j["total_output_bytes"])
		}
		for k, f := range []string{"cpu_seconds", "wall_seconds", "input_bytes", "output_bytes"} {
			want[k] += num(t, u, f)
		}
	}
	if want[2] <= 0 {
		t.Fatal("no input bytes fetched")
	}

	// The account's usage: today, the cpu pool, both jobs.
	d := e2e.Call(t, "GET", "/api/usage", key, nil).Data(t)
	total := d["total"].(map[string]any)
	days := d["days"].([]any)
	today := time.Now().UTC().Format("2006-01-02")
	if d["to"] != today || len(days) != 1 || days[0].(map[string]any)["date"] != today || days[0].(map[string]any)["pool"] != "cpu" || num(t, total, "jobs") != 2 {
		t.Fatalf("usage %v; want the 2 jobs today on cpu", d)
	}
	for k, f := range []string{"cpu_seconds", "wall_seconds", "input_bytes", "output_bytes"} {
		if got := num(t, total, f); math.Abs(got-want[k]) > 0.0015 || got != num(t, days[0].(map[string]any), f) {
			t.Fatalf("usage total %s = %v; the jobs' sum is %v (%v)", f, got, want[k], d)
		}
	}
	// Days before the jobs hold nothing.
	if e := e2e.Call(t, "GET", "/api/usage?from=2020-01-01&to=2020-12-31", key, nil).Data(t); num(t, e["total"].(map[string]any), "jobs") != 0 || len(e["days"].([]any)) != 0 {
		t.Fatalf("2020: %v", e)
	}
	for q, field := range map[string]string{"?from=2026-13-01": "from", "?to=yesterday": "to", "?from=2025-02-01&to=2025-01-01": "from", "?from=2020-01-01&to=2025-01-01": "from"} {
		r := e2e.Call(t, "GET", "/api/usage"+q, key, nil)
		e := r.JSON(t)
		if det, _ := e["details"].(map[string]any); r.Status != 400 || e["errorCode"] != "validationError" || e["message"] == "" || det[field] == nil {
			t.Fatalf("GET /api/usage%s: %d %s; want 400 validationError naming %s", q, r.Status, r.Body, field)
		}
	}
	if r := e2e.Call(t, "GET", "/api/usage", "", nil); r.Status != 401 {
		t.Fatalf("without a key: %d", r.Status)
	}
}
