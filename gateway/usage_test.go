package gateway

import (
	"context"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
)

// GET /api/usage's range: the last 30 days by default, dates as given, and every
// bad range refused naming the field.
func TestUsageRange(t *testing.T) {
	now := time.Date(2026, 3, 10, 23, 59, 0, 0, time.FixedZone("x", -5*3600)) // 2026-03-11 in UTC
	for _, c := range []struct{ from, to, wantFrom, wantTo string }{
		{"", "", "2026-02-10", "2026-03-11"},
		{"", "2026-01-31", "2026-01-02", "2026-01-31"},
		{"2026-03-01", "", "2026-03-01", "2026-03-11"},
		{"2025-03-11", "2026-03-11", "2025-03-11", "2026-03-11"}, // 366 days
	} {
		f, to, err := usageRange(c.from, c.to, now)
		if err != nil || f != c.wantFrom || to != c.wantTo {
			t.Errorf("usageRange(%q, %q) = %s, %s, %v; want %s, %s", c.from, c.to, f, to, err, c.wantFrom, c.wantTo)
		}
	}
	for _, c := range []struct{ from, to, field string }{
		{"2026-3-01", "", "from"},
		{"", "2026-02-30", "to"},
		{"2026-03-02", "2026-03-01", "from"},
		{"2025-03-10", "2026-03-11", "from"}, // 367 days
		{"today", "2026-03-11", "from"},
	} {
		_, _, err := usageRange(c.from, c.to, now)
		e, ok := err.(*mj.Error)
		if !ok || e.Code != mj.EValidation || e.Details[c.field] == "" {
			t.Errorf("usageRange(%q, %q) = %v; want validationError naming %s", c.from, c.to, err, c.field)
		}
	}
}

// A job cancelled while it runs counts the wall time its attempt held the
// worker (and, on a GPU pool, that as GPU time), on the job and in the account's
// totals; one cancelled before it started counts nothing.
func TestCancelledJobIsMetered(t *testing.T) {
	h := newHarness(t)
	ctx := context.Background()
	now := time.Date(2026, 3, 10, 12, 0, 0, 0, time.UTC)
	h.gw.Now = func() time.Time { return now }
	create := func(machine string) string {
		spec := valid()
		spec["machine"] = machine
		status, body, _ := h.do("POST", "/api/ffmpeg", "alice", spec)
		if status != 200 {
			t.Fatalf("create: %d %v", status, body)
		}
		return body["data"].(map[string]any)["id"].(string)
	}
	queued, cpu, gpu := create("cpu"), create("cpu"), create("nvidia")
	for id, ran := range map[string]time.Duration{cpu: 90 * time.Second, gpu: 30 * time.Second} {
		started := now.Add(-ran)
		if _, err := h.store.UpdateJob(ctx, id, func(j *mj.Job) error {
			j.Status, j.StartedAt, j.Attempt, j.NomadJobID = mj.StatusRunning, &started, 1, "mediajobs-x/dispatch-"+id
			return nil
		}); err != nil {
			t.Fatal(err)
		}
	}
	usage := map[string]any{}
	for _, id := range []string{queued, cpu, gpu} {
		status, body, _ := h.do("POST", "/api/jobs/"+id+"/cancel", "alice", nil)
		if status != 200 {
			t.Fatalf("cancel: %d %v", status, body)
		}
		usage[id] = body["data"].(map[string]any)["usage"]
	}
	if usage[queued] != nil {
		t.Fatalf("a job cancelled before it started: usage %v", usage[queued])
	}
	for id, want := range map[string][2]float64{cpu: {90, 0}, gpu: {30, 30}} {
		u, _ := usage[id].(map[string]any)
		if u == nil || u["wall_seconds"] != want[0] || u["gpu_seconds"] != want[1] || u["cpu_seconds"] != float64(0) {
			t.Fatalf("cancelled after it ran: usage %v; want wall %v, gpu %v", usage[id], want[0], want[1])
		}
	}
	status, body, _ := h.do("GET", "/api/usage?from=2026-03-10&to=2026-03-10", "alice", nil)
	total, _ := body["data"].(map[string]any)["total"].(map[string]any)
	if status != 200 || total == nil || total["jobs"] != float64(2) || total["wall_seconds"] != float64(120) || total["gpu_seconds"] != float64(30) {
		t.Fatalf("GET /api/usage: %d %v", status, body)
	}
}
