package gateway

import (
	"context"
	"sync/atomic"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

func TestStandingDetail(t *testing.T) {
	for _, tc := range []struct {
		ahead, inFlight, limit int
		stored, want           string
	}{
		{12, 0, 0, "", "waiting: 12 of your jobs are ahead in pool cpu"},
		{101, 0, 0, "", "waiting: more than 100 of your jobs are ahead in pool cpu"},
		{1, 3, 4, "", "waiting: 1 of your jobs is ahead in pool cpu"},
		{0, 0, 0, "", "waiting: your next job in pool cpu; dispatched when the pool has room and it is your account's turn"},
		{3, 4, 4, "", "waiting: 3 of your jobs are ahead in pool cpu; account limit 4 running reached (4 running)"},
		{2, 0, 0, "attempt 2 of 3: retrying because the node was lost", "waiting: 2 of your jobs are ahead in pool cpu; attempt 2 of 3: retrying because the node was lost"},
	} {
		if got := standingDetail("cpu", tc.ahead, tc.inFlight, tc.limit, tc.stored); got != tc.want {
			t.Errorf("standingDetail(%d, %d, %d, %q) = %q, want %q", tc.ahead, tc.inFlight, tc.limit, tc.stored, got, tc.want)
		}
	}
}

// A queued job's status_detail says where it stands in its account's part of
// the queue, counted when it is read; its stored record is not rewritten.
func TestQueuedJobStanding(t *testing.T) {
	h := newHarness(t)
	var ids []string
	for range 3 {
		_, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid())
		ids = append(ids, body["data"].(map[string]any)["id"].(string))
	}
	h.do("POST", "/api/ffmpeg", "bob", valid()) // another account's job is not "yours"
	rev := func(id string) int64 {
		j, err := h.store.Job(context.Background(), id)
		if err != nil {
			t.Fatal(err)
		}
		return j.Revision
	}
	before := rev(ids[2])
	for i, want := range []string{
		"waiting: your next job in pool cpu; dispatched when the pool has room and it is your account's turn",
		"waiting: 1 of your jobs is ahead in pool cpu",
		"waiting: 2 of your jobs are ahead in pool cpu",
	} {
		status, body, _ := h.do("GET", "/api/jobs/"+ids[i], "alice", nil)
		if got := body["data"].(map[string]any)["status_detail"]; status != 200 || got != want {
			t.Fatalf("job %d: %d status_detail %q, want %q", i, status, got, want)
		}
	}
	if rev(ids[2]) != before {
		t.Fatal("reading the standing wrote the job")
	}
	// The account's limit, when reached, is named.
	h.gw.Config.Limits.MaxRunningPerAccount = 1
	if _, err := h.store.UpdateJob(context.Background(), ids[0], func(j *mj.Job) error {
		j.NomadJobID = "mediajobs-cpu/dispatch-x"
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	_, body, _ := h.do("GET", "/api/jobs/"+ids[2], "alice", nil)
	if got, want := body["data"].(map[string]any)["status_detail"], "waiting: 1 of your jobs is ahead in pool cpu; account limit 1 running reached (1 running)"; got != want {
		t.Fatalf("status_detail %q, want %q", got, want)
	}
}

// headCounter counts the store's reads of queue heads.
type headCounter struct {
	Store
	reads   atomic.Int64
	applied atomic.Int64 // revision of the last job change the watch applied
}

// WatchJobs notes the last change the job watch has applied.
func (c *headCounter) WatchJobs(ctx context.Context, from int64, fn func(ch *store.JobChange)) error {
	return c.Store.WatchJobs(ctx, from, func(ch *store.JobChange) {
		fn(ch)
		c.applied.Store(ch.Revision)
	})
}

func (c *headCounter) QueueHead(ctx context.Context, pool, account string) (*store.QueueHead, error) {
	c.reads.Add(1)
	return c.Store.QueueHead(ctx, pool, account)
}

// While the job watch runs, polling a queued job reads its queue's head from
// etcd once: the gateway keeps it until a job of the account in the pool
// changes (the watch drops it), or standingTTL has passed (the account's
// settings are not watched).
func TestQueuedJobStandingCached(t *testing.T) {
	h := newHarness(t)
	heads := &headCounter{Store: h.gw.Store}
	h.gw.Store = heads
	// The gateway's clock stands still but for what the test adds: a loaded
	// machine's slow reads must not age the kept head past standingTTL.
	var clock atomic.Int64 // nanoseconds added to the start
	start := time.Now()
	h.gw.Now = func() time.Time { return start.Add(time.Duration(clock.Load())) }
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go h.gw.Watch(ctx)
	testenv.Eventually(t, 5*time.Second, "the job watch", h.gw.jobs.live.Load)

	var ids []string
	for range 3 {
		clock.Add(int64(time.Millisecond)) // queued one after the other
		_, body, _ := h.do("POST", "/api/ffmpeg", "alice", valid())
		ids = append(ids, body["data"].(map[string]any)["id"].(string))
	}
	detail := func(id string) string {
		_, body, _ := h.do("GET", "/api/jobs/"+id, "alice", nil)
		return body["data"].(map[string]any)["status_detail"].(string)
	}
	// The creates' own watch events drop the head too: wait for them to pass.
	last, err := h.store.Job(context.Background(), ids[2])
	if err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 30*time.Second, "the creates' watch events", func() bool {
		return heads.applied.Load() >= last.Revision
	})
	detail(ids[2]) // reads the head once, and keeps it
	before := heads.reads.Load()
	for range 5 {
		if got := detail(ids[2]); got != "waiting: 2 of your jobs are ahead in pool cpu" {
			t.Fatalf("status_detail %q", got)
		}
		if got := detail(ids[1]); got != "waiting: 1 of your jobs is ahead in pool cpu" {
			t.Fatalf("status_detail %q", got)
		}
	}
	if n := heads.reads.Load() - before; n != 0 {
		t.Fatalf("10 reads of queued jobs read the queue's head %d times; want none (kept)", n)
	}
	// Another process ends the first job: the watch drops the head, and the
	// next read counts again.
	if _, err := h.store.UpdateJob(context.Background(), ids[0], func(j *mj.Job) error { j.Status = mj.StatusCancelled; return nil }); err != nil {
		t.Fatal(err)
	}
	testenv.Eventually(t, 5*time.Second, "the standing to follow the change", func() bool {
		return detail(ids[2]) == "waiting: 1 of your jobs is ahead in pool cpu"
	})
	// Past standingTTL the head is read again, changes or not.
	before = heads.reads.Load()
	detail(ids[2])
	if heads.reads.Load() != before {
		t.Fatal("a kept head was read again within standingTTL")
	}
	clock.Add(int64(standingTTL + time.Millisecond))
	detail(ids[2])
	if heads.reads.Load() != before+1 {
		t.Fatalf("%d reads of the head past standingTTL; want 1", heads.reads.Load()-before)
	}
}
