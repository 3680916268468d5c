package dispatcher

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// Fair share on a real Nomad agent (docs/scheduling.md): a pool of three slots
// (each job asks for a third of the node's memory), jobs whose runner sleeps
// a few seconds and leaves a successful result.
//
//   - Account a queues a backlog. Once Nomad has found no room for a fourth
//     child, the window keeps one of a's jobs waiting in Nomad beyond the three
//     running (4 in flight), not the lookahead's four (7).
//   - Then account b queues 3: b's first job is dispatched before any more of
//     a's (at most one, a pass that was choosing as b's arrived), and starts
//     after at most two of a's dispatched before it: the one waiting in Nomad,
//     and one that pass dispatched (or one placed but not yet started).
//   - Accounts of weights 2 and 1, both backlogged: their started jobs go 2:1.
func TestFairShareOnNomad(t *testing.T) {
	// Made before the rig, so it is removed after the agent (and the runners
	// still writing results into it) has stopped.
	dir := t.TempDir()
	r := newNomadRig(t, &config.Pool{Name: "cpu", MaxAttempts: 1}) // dispatch_lookahead 4
	node := r.agent.Client.Nodes()
	stubs, _, err := node.List(nil)
	if err != nil || len(stubs) != 1 {
		t.Fatalf("nodes %v %v", stubs, err)
	}
	n, _, err := node.Info(stubs[0].ID, nil)
	if err != nil {
		t.Fatal(err)
	}
	free := n.NodeResources.Memory.MemoryMB
	if n.ReservedResources != nil {
		free -= int64(n.ReservedResources.Memory.MemoryMB)
	}
	r.cfg.Pools[0].Memory = int(free / 3) // three fit, a fourth does not
	if r.blobs, err = blob.NewLocal(filepath.Join(dir, "blobs")); err != nil {
		t.Fatal(err)
	}
	runner := filepath.Join(dir, "runner.sh")
	// a's jobs run 3 s, the others 1 s: the pool then spends most of its time
	// with its three of a's running, the state the first part starts from.
	script := fmt.Sprintf(`#!/bin/sh
case "$NOMAD_META_mediajobs_job_id" in
*-0a00*) sleep 3 ;;
*) sleep 1 ;;
esac
dir=%q/jobs/$NOMAD_META_mediajobs_job_id/$NOMAD_META_mediajobs_attempt/$NOMAD_ALLOC_ID
mkdir -p "$dir"
printf '{"job_id":"%%s","attempt":%%s,"alloc_id":"%%s","succeeded":true}' "$NOMAD_META_mediajobs_job_id" "$NOMAD_META_mediajobs_attempt" "$NOMAD_ALLOC_ID" > "$dir/result.json"
`, filepath.Join(dir, "blobs"))
	if err := os.WriteFile(runner, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	r.runner = runner
	r.start("d")
	ctx := context.Background()

	queue := func(account string, count int) []string {
		ids := make([]string, count)
		for i := range ids {
			ids[i] = fmt.Sprintf("00000000-0000-4000-8000-%s%08d", map[string]string{"a": "0a", "b": "0b", "h": "0c", "l": "0d"}[account]+"00", i)
			now := time.Now().UTC()
			j := &mj.Job{ID: ids[i], AccountID: account, Status: mj.StatusQueued, Machine: "cpu", TimeoutSeconds: 600,
				FFmpegCommands: []string{"-version"}, CreatedAt: now, QueuedAt: now}
			if err := r.store.CreateJob(ctx, j); err != nil {
				t.Fatal(err)
			}
		}
		return ids
	}
	jobs := func(ids []string) []*mj.Job {
		js, errs := r.store.Jobs(ctx, ids)
		for _, err := range errs {
			if err != nil {
				t.Fatal(err)
			}
		}
		return js
	}
	count := func(js []*mj.Job, ok func(*mj.Job) bool) int {
		n := 0
		for _, j := range js {
			if ok(j) {
				n++
			}
		}
		return n
	}
	started := func(j *mj.Job) bool { return j.StartedAt != nil }

	a := queue("a", 30)
	// In flight: handed to Nomad, not finished. With three running, the
	// lookahead alone would keep 3 + 4.
	inFlight := func(j *mj.Job) bool { return j.NomadJobID != "" && !j.Status.Terminal() }
	testenv.Eventually(t, 60*time.Second, "a's backlog to fill the pool, one more job waiting in Nomad", func() bool {
		js := jobs(a)
		return count(js, func(j *mj.Job) bool { return j.Status == mj.StatusRunning }) == 3 && count(js, inFlight) == 4
	})
	b := queue("b", 3)
	bCreated := jobs(b)[0].CreatedAt
	testenv.Eventually(t, 60*time.Second, "b's jobs to start", func() bool { return count(jobs(b), started) == 3 })
	b1 := jobs(b)[0]
	ahead := count(jobs(a), func(j *mj.Job) bool {
		return j.DispatchedAt != nil && j.DispatchedAt.After(bCreated) && j.DispatchedAt.Before(*b1.DispatchedAt)
	})
	// Jobs dispatched after b's first, in the same pass, may start a moment
	// before it when several slots free at once: they took other slots.
	startedFirst := count(jobs(a), func(j *mj.Job) bool {
		return j.StartedAt != nil && j.StartedAt.After(bCreated) && j.StartedAt.Before(*b1.StartedAt) && j.DispatchedAt.Before(*b1.DispatchedAt)
	})
	t.Logf("of a's jobs, between b's create and b's first: %d dispatched, %d started", ahead, startedFirst)
	if ahead > 1 || startedFirst > 2 {
		t.Fatalf("%d of a's jobs were dispatched, and %d started, between b's create and b's first job; want at most 1 and 2", ahead, startedFirst)
	}
	if left := count(jobs(a), func(j *mj.Job) bool { return j.Status == mj.StatusQueued && j.NomadJobID == "" }); left < 10 {
		t.Fatalf("b's jobs started only when a's backlog was nearly done (%d left)", left)
	}
	// a's backlog goes (cancelled), b's are done.
	for _, id := range a {
		r.store.UpdateJob(ctx, id, func(j *mj.Job) error {
			if j.Status.Terminal() {
				return errSkip
			}
			now := time.Now().UTC()
			j.Status, j.FinishedAt = mj.StatusCancelled, &now
			return nil
		})
	}
	testenv.Eventually(t, 60*time.Second, "the pool to drain", func() bool {
		js := jobs(append(append([]string{}, a...), b...))
		return count(js, func(j *mj.Job) bool { return !j.Status.Terminal() }) == 0
	})

	// Weights 2:1.
	if err := r.store.SetAccountSchedule(ctx, "h", store.Schedule{Weight: 2}); err != nil {
		t.Fatal(err)
	}
	// The shares are counted over the jobs dispatched from l's first dispatch on:
	// before it, a pass may have seen only h's backlog and given h the free slots.
	h, l := queue("h", 30), queue("l", 30)
	const want = 24
	var lFirst *time.Time
	afterBoth := func(j *mj.Job) bool {
		if lFirst == nil {
			for _, k := range jobs(l) {
				if k.DispatchedAt != nil && (lFirst == nil || k.DispatchedAt.Before(*lFirst)) {
					lFirst = k.DispatchedAt
				}
			}
		}
		return lFirst != nil && j.StartedAt != nil && j.DispatchedAt != nil && !j.DispatchedAt.Before(*lFirst)
	}
	testenv.Eventually(t, 90*time.Second, fmt.Sprintf("%d of the weighted accounts' jobs to start", want), func() bool {
		return count(jobs(append(append([]string{}, h...), l...)), afterBoth) >= want
	})
	var all []*mj.Job
	for _, j := range jobs(append(append([]string{}, h...), l...)) {
		if afterBoth(j) {
			all = append(all, j)
		}
	}
	sort.Slice(all, func(i, k int) bool {
		if all[i].StartedAt == nil || all[k].StartedAt == nil {
			return all[i].StartedAt != nil
		}
		return all[i].StartedAt.Before(*all[k].StartedAt)
	})
	shares := map[string]int{}
	for _, j := range all[:want] {
		shares[j.AccountID]++
	}
	t.Logf("first %d started: %v", want, shares)

	if ratio := float64(shares["h"]) / float64(max(shares["l"], 1)); ratio < 1.5 || ratio > 2.6 {
		t.Fatalf("started %v: h:l = %.2f, want about 2 (1.5 to 2.6)", shares, ratio)
	}
}
