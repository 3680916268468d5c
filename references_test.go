package mediajobs

import (
	"strings"
	"testing"
	"time"
)

const refID = "3f2a7c1e-8d4b-4e6f-9a0b-1c2d3e4f5a6b"

func TestParseJobRef(t *testing.T) {
	for _, c := range []struct {
		in         string
		id, output string
		ok         bool
	}{
		{"job:" + refID + "/out.mp4", refID, "out.mp4", true},
		{"job:" + refID + "/hls/index.m3u8", refID, "hls/index.m3u8", true},
		{"job:" + refID, "", "", false},
		{"job:" + refID + "/", "", "", false},
		{"job:not-a-uuid/out.mp4", "", "", false},
		{"job:" + refID + "/../etc/passwd", "", "", false},
		{"job:" + refID + "/a/b/c.mp4", "", "", false},
		{"https://example.com/job:" + refID + "/out.mp4", "", "", false},
	} {
		id, output, ok := ParseJobRef(c.in)
		if id != c.id || output != c.output || ok != c.ok {
			t.Errorf("ParseJobRef(%q) = %q, %q, %v; want %q, %q, %v", c.in, id, output, ok, c.id, c.output, c.ok)
		}
		if strings.HasPrefix(c.in, "job:") != IsJobRef(c.in) {
			t.Errorf("IsJobRef(%q) = %v", c.in, IsJobRef(c.in))
		}
	}
}

func TestResolveRef(t *testing.T) {
	dep := &Job{ID: refID, Status: StatusRunning, OutputNames: []string{"out.mp4"}}
	if _, wait, never := ResolveRef(dep, "out.mp4"); !wait || never != "" {
		t.Fatalf("running job's listed output: wait %v, never %q", wait, never)
	}
	if _, wait, never := ResolveRef(dep, "other.mp4"); wait || !strings.Contains(never, "does not list \"other.mp4\"") {
		t.Fatalf("unlisted output: wait %v, never %q", wait, never)
	}
	pattern := &Job{ID: refID, Status: StatusQueued, OutputNames: []string{"seg%03d.ts"}}
	if _, wait, _ := ResolveRef(pattern, "seg001.ts"); !wait {
		t.Fatal("an output a pattern may make is awaited")
	}
	// A name the pattern cannot make, or the pattern itself, would never
	// exist: refused, not awaited.
	for _, name := range []string{"other.mp4", "seg%03d.ts", "segx.ts"} {
		if _, wait, never := ResolveRef(pattern, name); wait || !strings.Contains(never, "does not list") {
			t.Fatalf("%s of a job that lists seg%%03d.ts: wait %v, never %q", name, wait, never)
		}
	}
	variant := &Job{ID: refID, Status: StatusQueued, OutputNames: []string{"v%v/index.m3u8"}}
	if _, wait, _ := ResolveRef(variant, "v0/index.m3u8"); !wait {
		t.Fatal("a variant's playlist is awaited")
	}
	dep.Status, dep.Outputs = StatusSucceeded, []Output{{Name: "out.mp4", Key: "jobs/x/1/a/outputs/out.mp4"}}
	if key, wait, never := ResolveRef(dep, "out.mp4"); key != "jobs/x/1/a/outputs/out.mp4" || wait || never != "" {
		t.Fatalf("succeeded: %q %v %q", key, wait, never)
	}
	if _, _, never := ResolveRef(dep, "other.mp4"); !strings.Contains(never, "succeeded without an output named \"other.mp4\" (it made: out.mp4)") {
		t.Fatalf("succeeded without it: %q", never)
	}
	dep.Status, dep.ErrorMessage = StatusFailed, "ffmpeg exited with code 1"
	if _, _, never := ResolveRef(dep, "out.mp4"); !strings.Contains(never, "failed") || !strings.Contains(never, "ffmpeg exited with code 1") {
		t.Fatalf("failed: %q", never)
	}
	dep.Status = StatusCancelled
	if _, _, never := ResolveRef(dep, "out.mp4"); !strings.Contains(never, "was cancelled") {
		t.Fatalf("cancelled: %q", never)
	}
}

func TestRelease(t *testing.T) {
	other := "aaaaaaaa-8d4b-4e6f-9a0b-1c2d3e4f5a6b"
	j := &Job{Awaits: []string{refID, other}}
	before := j.Awaits
	j.Release(refID, map[string]string{"a": "k1"}, time.Unix(100, 0))
	if len(j.Awaits) != 1 || j.Awaits[0] != other || j.InputKeys["a"] != "k1" {
		t.Fatalf("after one release: %v %v", j.Awaits, j.InputKeys)
	}
	if before[0] != refID {
		t.Fatal("Release edited the slice it was given (the store shares it with the copy it read)")
	}
	keys := j.InputKeys
	j.Release(other, map[string]string{"b": "k2"}, time.Unix(200, 0))
	if len(keys) != 1 {
		t.Fatal("Release edited the map it was given")
	}
	if j.Awaits != nil || len(j.InputKeys) != 2 {
		t.Fatalf("after both: %v %v", j.Awaits, j.InputKeys)
	}
	if !j.QueuedAt.Equal(time.Unix(200, 0)) {
		t.Fatalf("queued_at %v: not when it could first run", j.QueuedAt)
	}
}
