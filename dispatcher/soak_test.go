package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// soakCeiling is the etcd database size the soak must stay under. Without
// compaction, retention and defragmentation the same work grows it far past this
// (the test checks that it writes more than twice as much; etcd's file holds about
// twice what is written).
const soakCeiling = 6 * MiB

// A compressed soak: round after round of jobs that go through their whole life
// (create, dispatch, running, progress reports, finish with outputs, webhook
// outcome), with the janitor on a short retention and etcd compacting and
// defragmenting on short intervals. The database stays under a ceiling.
func TestSoakEtcdStaysSmall(t *testing.T) {
	testenv.Long(t, "a soak of about 25 s")
	s, _ := testenv.EtcdWith(t, store.EmbeddedOptions{CompactionRetention: time.Second})
	d, _ := maintenanceDispatcher(t, s)
	d.Config.Etcd.DefragMinBytes, d.Config.Etcd.DefragFreeRatio = 2*MiB, 0.5
	ctx := context.Background()
	const rounds, perRound, reports = 10, 50, 10
	cmd := strings.Repeat("-i {{in}} -vf scale=640:-2 -c:v libx264 ", 200) // ~8 KiB of commands
	var written int64
	var mu sync.Mutex
	count := func(n int) { mu.Lock(); written += int64(n); mu.Unlock() }
	life := func(r, i int) error {
		now := time.Now().UTC()
		j := &mj.Job{ID: fmt.Sprintf("00000000-0000-4000-8000-%06d%06d", r, i), AccountID: "acct", Status: mj.StatusQueued,
			Machine: "cpu", FFmpegCommands: []string{cmd}, OutputNames: []string{"out.mp4"}, WebhookURL: "http://127.0.0.1:1/hook",
			InputFiles: map[string]string{"in": "http://127.0.0.1:1/in.mp4"}, CreatedAt: now, QueuedAt: now, UpdatedAt: now}
		if err := s.CreateJob(ctx, j); err != nil {
			return err
		}
		steps := []func(*mj.Job){
			func(j *mj.Job) { j.NomadJobID, j.Attempt, j.DispatchedAt = child(j.ID, 1), 1, &now },
			func(j *mj.Job) { j.Status, j.StartedAt = mj.StatusRunning, &now },
		}
		for _, step := range steps {
			if j, _ = s.UpdateJob(ctx, j.ID, func(j *mj.Job) error { step(j); return nil }); j == nil {
				return errors.New("update failed")
			}
			count(len(mustJSON(j)))
		}
		for k := 0; k < reports; k++ {
			pct := float64(k * 10)
			if err := s.PutProgress(ctx, j, 1, &mj.Progress{Percent: &pct, CommandIndex: 1, CommandCount: 1}); err != nil {
				return err
			}
			count(200)
		}
		dur := 10.0
		j, err := s.UpdateJob(ctx, j.ID, func(j *mj.Job) error {
			j.Status, j.FinishedAt = mj.StatusSucceeded, &now
			j.Outputs = []mj.Output{{Name: "out.mp4", Key: "jobs/x/out.mp4", Size: 1000, Probe: &mj.Probe{DurationSeconds: &dur, Format: "mp4",
				Streams: []mj.Stream{{Type: "video", Codec: "h264", Width: 640, Height: 360}}}}}
			return nil
		})
		if err != nil {
			return err
		}
		count(len(mustJSON(j)))
		j, err = s.UpdateJob(ctx, j.ID, func(j *mj.Job) error {
			w := *j.Webhook
			w.Status, w.Attempts = "delivered", 1
			j.Webhook = &w
			return nil
		})
		count(len(mustJSON(j)))
		return err
	}
	var sizes []int64
	for r := 0; r < rounds; r++ {
		var wg sync.WaitGroup
		errs := make(chan error, perRound)
		for i := 0; i < perRound; i++ {
			wg.Add(1)
			go func() { defer wg.Done(); errs <- life(r, i) }()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Fatalf("round %d: %v", r, err)
			}
		}
		// The janitor with a retention that has passed for every finished job.
		if n, err := s.DeleteFinishedJobs(ctx, time.Now().Add(time.Hour), 0); err != nil || n != perRound {
			t.Fatalf("round %d: janitor deleted %d (%v), want %d", r, n, err, perRound)
		}
		rev, _ := s.Revision(ctx)
		testenv.Eventually(t, 30*time.Second, "etcd to compact this round's history", func() bool {
			_, err := s.Client().Get(ctx, "x", clientv3WithRev(rev-1))
			return errors.Is(err, rpctypes.ErrCompacted)
		})
		// The largest the database gets: before this round's defragmentation.
		st, err := s.Client().Status(ctx, s.Client().Endpoints()[0])
		if err != nil {
			t.Fatal(err)
		}
		sizes = append(sizes, st.DbSize)
		d.MaintainEtcd(ctx)
	}
	t.Logf("database size after each round (MiB): %v; %.1f MiB of job records and progress written", mibs(sizes), float64(written)/MiB)
	if written < 2*soakCeiling { // etcd's file takes about twice what is written
		t.Fatalf("the soak wrote only %d bytes: it proves nothing against a ceiling of %d", written, soakCeiling)
	}
	for r, size := range sizes {
		if size > soakCeiling {
			t.Fatalf("round %d: etcd database %d bytes, over the %d ceiling (sizes %v)", r, size, soakCeiling, mibs(sizes))
		}
	}
	if left, _ := s.Count(ctx, s.ProgressPrefix()); left != 0 {
		t.Fatalf("%d progress keys outlived their jobs", left)
	}
}

func mibs(sizes []int64) []string {
	out := make([]string, len(sizes))
	for i, s := range sizes {
		out[i] = fmt.Sprintf("%.1f", float64(s)/MiB)
	}
	return out
}

func clientv3WithRev(rev int64) clientv3.OpOption { return clientv3.WithRev(rev) }
