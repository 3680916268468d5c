package store_test

import (
	"context"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// ExpireOutputs (a pipeline's intermediate outputs, deleted when it ends):
// outputs counted until output_retention are given back at the janitor's next
// release instead; outputs not counted yet never count (their tally goes, and
// a count after counts nothing); again, nothing changes.
func TestExpireOutputs(t *testing.T) {
	s, _ := testenv.Etcd(t)
	ctx := context.Background()
	now := time.Now().UTC()
	finish := func() *mj.Job {
		j := newJob("a", now)
		now = now.Add(time.Millisecond)
		if err := s.CreateJob(ctx, j); err != nil {
			t.Fatal(err)
		}
		nj, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error {
			fin := time.Now().UTC()
			j.Status, j.FinishedAt, j.TotalOutputBytes = mj.StatusSucceeded, &fin, 300
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		return nj
	}
	held := func() int64 {
		t.Helper()
		_, u, _, err := s.AccountLimits(ctx, "a", store.Limits{})
		if err != nil {
			t.Fatal(err)
		}
		return u.StorageBytes
	}
	none := func(string) error { return nil }
	retention := store.Held{Bytes: 300, Expires: now.Add(7 * 24 * time.Hour)}

	counted, uncounted := finish(), finish()
	if ok, err := s.CountOutputs(ctx, counted, retention); err != nil || !ok {
		t.Fatalf("count: %v %v", ok, err)
	}
	if held() != 300 {
		t.Fatalf("held %d, want 300", held())
	}
	at := time.Now()
	for i := range 2 {
		for _, j := range []*mj.Job{counted, uncounted} {
			if err := s.ExpireOutputs(ctx, j, at); err != nil {
				t.Fatalf("expire %d: %v", i, err)
			}
		}
	}
	if ids, _ := s.Tallies(ctx, "", 10); len(ids) != 0 {
		t.Fatalf("tallies left: %v", ids)
	}
	// The uncounted job's count, after: nothing.
	if ok, err := s.CountOutputs(ctx, uncounted, retention); err != nil || ok {
		t.Fatalf("a count after the expiry counted: %v %v", ok, err)
	}
	if held() != 300 {
		t.Fatalf("held %d before the release, want 300", held())
	}
	if n, err := s.ReleaseExpired(ctx, at.Add(time.Second), none); err != nil || n != 2 {
		t.Fatalf("release: %d %v; want both records", n, err)
	}
	if held() != 0 {
		t.Fatalf("held %d after the release, want 0", held())
	}
}
