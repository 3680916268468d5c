package gateway

import (
	"context"
	"testing"

	mj "github.com/mediajobs/mediajobs"
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
