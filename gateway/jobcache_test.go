package gateway

import (
	"context"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/testenv"
)

func TestJobCacheFollowsChangesMadeElsewhere(t *testing.T) {
	h := newHarness(t)
	ctx, cancel := context.WithCancel(context.Background())
	go h.gw.Watch(ctx)
	testenv.Eventually(t, 5*time.Second, "the job watch", h.gw.jobs.live.Load)

	_, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid())
	id := body["data"].(map[string]any)["id"].(string)
	if h.gw.jobs.get(id) == nil {
		t.Fatal("a job created here is not cached")
	}
	// Another process (the dispatcher) moves the job: GET follows, from the cache.
	for _, st := range []mj.Status{mj.StatusRunning, mj.StatusSucceeded} {
		h.store.UpdateJob(context.Background(), id, func(j *mj.Job) error { j.Status = st; return nil })
		testenv.Eventually(t, 5*time.Second, "GET to show "+string(st), func() bool {
			_, body, _ := h.do("GET", "/api/jobs/"+id, "alice", nil)
			return body["data"].(map[string]any)["status"] == string(st)
		})
	}
	if c := h.gw.jobs.get(id); c == nil || c.Status != mj.StatusSucceeded {
		t.Fatalf("cached copy %+v", c)
	}
	// An older copy never replaces a newer one.
	old := *h.gw.jobs.get(id)
	old.Revision, old.Status = 1, mj.StatusQueued
	h.gw.jobs.put(&old, false)
	if h.gw.jobs.get(id).Status != mj.StatusSucceeded {
		t.Fatal("an older revision replaced the cached job")
	}
	// Without its watch the cache is not used: GET reads etcd.
	cancel()
	testenv.Eventually(t, 5*time.Second, "the cache to turn off", func() bool { return !h.gw.jobs.live.Load() })
	h.store.UpdateJob(context.Background(), id, func(j *mj.Job) error { j.Metadata = map[string]string{"k": "v"}; return nil })
	_, body, _ = h.do("GET", "/api/jobs/"+id, "alice", nil)
	if body["data"].(map[string]any)["metadata"].(map[string]any)["k"] != "v" {
		t.Fatal("GET served a stale cached job while the watch was down")
	}
}
