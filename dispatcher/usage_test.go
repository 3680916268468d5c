package dispatcher

import (
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A job is metered once, with the attempt whose result ends it: not the attempt
// lost before it (even when its result turns up late), and not again when the
// allocation's event is replayed or reconcile reads the result again.
func TestUsageCountedOnceForTheAppliedAttempt(t *testing.T) {
	id := "00000000-0000-4000-8000-0000000000e1"
	a1, a2 := "11111111-2222-4333-8444-5555555555e1", "11111111-2222-4333-8444-5555555555e2"
	blobs := &fakeBlobs{data: map[string][]byte{}}
	nomad := &fakeJobs{children: map[string][]*api.AllocationListStub{}}
	d, ctx := fixDispatcher(t, 3, nomad, blobs)
	started := time.Now().UTC().Add(-time.Minute)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, StartedAt: &started,
		TimeoutSeconds: 600, OutputNames: []string{"out.mp4"}})

	// Attempt 1's node is lost with no result: the job is retried.
	d.settle.apply(ctx, allocState{ID: a1, NomadJobID: child(id, 1), ClientStatus: api.AllocClientStatusLost})
	j, _ := d.Store.Job(ctx, id)
	if j.Attempt != 2 || j.Status.Terminal() || j.Usage != nil {
		t.Fatalf("after a lost attempt: attempt %d %s usage %+v", j.Attempt, j.Status, j.Usage)
	}
	if _, err := d.Store.UpdateJob(ctx, id, func(j *mj.Job) error { j.NomadJobID = child(id, 2); return nil }); err != nil {
		t.Fatal(err)
	}
	// Both attempts report; attempt 1's worker was not dead after all.
	late := mj.Usage{WallSeconds: 100, CPUSeconds: 100}
	blobs.data[mj.RunScope(id, 1)+a1+"/result.json"] = mustJSON(mj.Result{JobID: id, Attempt: 1, AllocID: a1, Succeeded: true, InputBytes: 1000,
		Outputs: []mj.Output{{Name: "out.mp4", Size: 1}}, Usage: &late})
	u2 := mj.Usage{WallSeconds: 2.5, CPUSeconds: 3.25, InputBytes: 1, OutputBytes: 1}
	blobs.data[mj.RunScope(id, 2)+a2+"/result.json"] = mustJSON(mj.Result{JobID: id, Attempt: 2, AllocID: a2, Succeeded: true, InputBytes: 700,
		Outputs: []mj.Output{{Name: "out.mp4", Size: 300}}, Usage: &u2})

	jobsBefore := testutil.ToFloat64(metrics.UsageJobs.WithLabelValues("cpu"))
	cpuBefore := testutil.ToFloat64(metrics.UsageCPUSeconds.WithLabelValues("cpu"))
	for range 3 { // the event, then replays of it
		d.settle.apply(ctx, allocState{ID: a2, NomadJobID: child(id, 2), ClientStatus: api.AllocClientStatusComplete})
	}
	d.settle.apply(ctx, allocState{ID: a1, NomadJobID: child(id, 1), ClientStatus: api.AllocClientStatusComplete})
	d.recon.reconcile(ctx)

	want := mj.Usage{WallSeconds: 2.5, CPUSeconds: 3.25, InputBytes: 700, OutputBytes: 300}
	j, _ = d.Store.Job(ctx, id)
	if j.Status != mj.StatusSucceeded || j.Usage == nil || *j.Usage != want {
		t.Fatalf("job %s usage %+v; want attempt 2's %+v", j.Status, j.Usage, want)
	}
	day := j.FinishedAt.UTC().Format(store.DayLayout)
	r, err := d.Store.(*store.Store).AccountUsage(ctx, "acct", day, day)
	if err != nil {
		t.Fatal(err)
	}
	wantTotal := store.UsageTotals{Jobs: 1, WallSeconds: 2.5, CPUSeconds: 3.25, InputBytes: 700, OutputBytes: 300}
	if r.Total != wantTotal || len(r.Days) != 1 || r.Days[0].Pool != "cpu" || r.Days[0].UsageTotals != wantTotal {
		t.Fatalf("day totals %+v; want %+v once", r, wantTotal)
	}
	if n, cpu := testutil.ToFloat64(metrics.UsageJobs.WithLabelValues("cpu"))-jobsBefore, testutil.ToFloat64(metrics.UsageCPUSeconds.WithLabelValues("cpu"))-cpuBefore; n != 1 || cpu != 3.25 {
		t.Fatalf("metrics counted %v jobs, %v CPU seconds; want 1 and 3.25", n, cpu)
	}
}

// A GPU pool's jobs are metered GPU time: the processes' wall time times the
// GPUs one job gets.
func TestGPUSecondsAreWallTimesGPUs(t *testing.T) {
	d, _ := fixDispatcher(t, 1, &fakeJobs{}, &fakeBlobs{})
	d.Config.Pools[0].GPU = &config.GPU{Count: 2}
	r := d.settle.metered(&mj.Result{Succeeded: true, InputBytes: 5, Outputs: []mj.Output{{Name: "o", Size: 7}}, Usage: &mj.Usage{WallSeconds: 1.5, CPUSeconds: 0.25, GPUSeconds: 99, OutputBytes: 1}}, &mj.Job{Machine: "cpu"})
	if want := (mj.Usage{WallSeconds: 1.5, CPUSeconds: 0.25, GPUSeconds: 3, InputBytes: 5, OutputBytes: 7}); *r.Usage != want {
		t.Fatalf("usage %+v; want %+v", *r.Usage, want)
	}
	failed := d.settle.metered(&mj.Result{Usage: &mj.Usage{WallSeconds: -1, CPUSeconds: 2, OutputBytes: 7}}, &mj.Job{Machine: "cpu"})
	if want := (mj.Usage{CPUSeconds: 2}); *failed.Usage != want {
		t.Fatalf("failed job's usage %+v; want %+v (no outputs stored, times within bounds)", *failed.Usage, want)
	}
}
