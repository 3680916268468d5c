package gateway

import (
	"context"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
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

// The job and progress watches deliver one transaction's changes in either
// order. When the progress key's deletion (the attempt ended) arrives before the
// job's change, the cached running job keeps its progress until that change
// lands: a stream never sees the running job lose its progress (seen beside two
// CPU hogs as a "running" event where "succeeded" was due).
func TestJobCacheKeepsProgressUntilTheJobChangeThatDeletedIt(t *testing.T) {
	c := &jobCache{}
	c.reset(true)
	pct := 42.0
	running := &mj.Job{ID: "j", Status: mj.StatusRunning, Attempt: 1, Revision: 2}
	c.put(running, false)
	c.putProgress("j", &store.ProgressRecord{Attempt: 1, Progress: mj.Progress{Percent: &pct}, Revision: 3}, 3)
	if j := c.get("j"); j.Progress == nil {
		t.Fatal("the report is not merged")
	}
	c.putProgress("j", nil, 4) // deleted by the job's change at revision 4, not seen yet
	if j := c.get("j"); j.Status != mj.StatusRunning || j.Progress == nil || *j.Progress.Percent != 42 {
		t.Fatalf("the running job lost its progress before its change arrived: %+v", j)
	}
	c.put(&mj.Job{ID: "j", Status: mj.StatusSucceeded, Attempt: 1, Revision: 4}, true)
	if j := c.get("j"); j.Status != mj.StatusSucceeded || j.Progress != nil {
		t.Fatalf("after the change: %+v", j)
	}
	c.mu.Lock()
	left := len(c.progress) + len(c.progressGone)
	c.mu.Unlock()
	if left != 0 {
		t.Fatalf("%d progress entries kept after the change", left)
	}

	// In the other order the deletion applies at once, and a retry's report
	// (a later revision) is kept.
	c.put(&mj.Job{ID: "k", Status: mj.StatusRunning, Attempt: 1, Revision: 10}, false)
	c.putProgress("k", &store.ProgressRecord{Attempt: 1, Progress: mj.Progress{Percent: &pct}, Revision: 11}, 11)
	c.put(&mj.Job{ID: "k", Status: mj.StatusRunning, Attempt: 2, Revision: 12}, true)
	c.putProgress("k", nil, 12)
	if j := c.get("k"); j.Progress != nil {
		t.Fatalf("attempt 2 shows attempt 1's progress: %+v", j.Progress)
	}
	c.putProgress("k", nil, 13) // nothing cached to keep: no marker left behind
	c.putProgress("k", &store.ProgressRecord{Attempt: 2, Progress: mj.Progress{Percent: &pct}, Revision: 14}, 14)
	if j := c.get("k"); j.Progress == nil {
		t.Fatal("attempt 2's report is not merged")
	}
}
