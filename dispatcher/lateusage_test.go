package dispatcher

import (
	"context"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// cancelAt cancels job id at now as the gateway does (gateway/jobs.go): the
// cancel's own write meters the wall time its attempt held the worker.
func cancelAt(t *testing.T, s Store, id string, now time.Time) *mj.Job {
	t.Helper()
	j, err := s.UpdateJob(context.Background(), id, func(j *mj.Job) error {
		j.Status, j.FinishedAt, j.StatusDetail = mj.StatusCancelled, &now, "cancelled by the client"
		j.Usage = mj.CancelledUsage(j, now, 0)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if j.Usage == nil || j.Usage.WallSeconds <= 0 || j.Usage.CPUSeconds != 0 {
		t.Fatalf("usage the cancel metered: %+v", j.Usage)
	}
	return j
}

// dayTotals is the account's usage on the day j finished.
func dayTotals(t *testing.T, s Store, j *mj.Job) store.UsageTotals {
	t.Helper()
	day := j.FinishedAt.UTC().Format(store.DayLayout)
	r, err := s.(interface {
		AccountUsage(ctx context.Context, account, from, to string) (store.UsageReport, error)
	}).AccountUsage(context.Background(), j.AccountID, day, day)
	if err != nil {
		t.Fatal(err)
	}
	return r.Total
}

// A job cancelled while it runs (a destination can cancel it before it answers
// the upload) is billed what its runner reports afterwards: the job stays
// cancelled, its usage is the larger of the cancel's and the report's, figure
// by figure, and the account's day counts the job once, with that usage, however
// often the result is applied. Nomad path.
func TestCancelledJobIsBilledItsLateReport(t *testing.T) {
	id, a1 := uuidN(3401), "11111111-2222-4333-8444-5555555555f1"
	blobs := &fakeBlobs{data: map[string][]byte{}}
	d, ctx := fixDispatcher(t, 1, &fakeJobs{children: map[string][]*api.AllocationListStub{}}, blobs)
	started := time.Now().UTC().Add(-time.Hour)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, StartedAt: &started, AttemptStartedAt: &started,
		TimeoutSeconds: 600, OutputNames: []string{"out.mp4"}})
	j := cancelAt(t, d.Store, id, started.Add(time.Minute))
	if got := dayTotals(t, d.Store, j); got != (store.UsageTotals{Jobs: 1, WallSeconds: 60}) {
		t.Fatalf("day after the cancel: %+v", got)
	}
	blobs.data[mj.RunScope(id, 1)+a1+"/result.json"] = mustJSON(mj.Result{JobID: id, Attempt: 1, AllocID: a1, Succeeded: true, InputBytes: 700,
		Outputs: []mj.Output{{Name: "out.mp4", Size: 300}}, Usage: &mj.Usage{WallSeconds: 20, CPUSeconds: 240}})
	cpuBefore, jobsBefore := testutil.ToFloat64(metrics.UsageCPUSeconds.WithLabelValues(j.Machine)), testutil.ToFloat64(metrics.UsageJobs.WithLabelValues(j.Machine))
	for range 3 { // the event, then replays of it
		d.settle.apply(ctx, allocState{ID: a1, NomadJobID: child(id, 1), ClientStatus: api.AllocClientStatusComplete})
	}
	d.recon.reconcile(ctx)
	// The usage metrics count what the report added, once, and no second job.
	if cpu, jobs := testutil.ToFloat64(metrics.UsageCPUSeconds.WithLabelValues(j.Machine))-cpuBefore, testutil.ToFloat64(metrics.UsageJobs.WithLabelValues(j.Machine))-jobsBefore; cpu != 240 || jobs != 0 {
		t.Fatalf("usage metrics after the late report: %v CPU seconds and %v jobs; want 240 and 0", cpu, jobs)
	}
	j, _ = d.Store.Job(ctx, id)
	want := mj.Usage{WallSeconds: 60, CPUSeconds: 240, InputBytes: 700, OutputBytes: 300}
	if j.Status != mj.StatusCancelled || j.Usage == nil || *j.Usage != want || len(j.Outputs) != 0 {
		t.Fatalf("job %s usage %+v outputs %v; want cancelled with %+v", j.Status, j.Usage, j.Outputs, want)
	}
	if got, want := dayTotals(t, d.Store, j), (store.UsageTotals{Jobs: 1, WallSeconds: 60, CPUSeconds: 240, InputBytes: 700, OutputBytes: 300}); got != want {
		t.Fatalf("day totals %+v; want %+v", got, want)
	}
}

// The same on the warm path: a run's done key applied after its job was
// cancelled.
func TestCancelledWarmJobIsBilledItsLateReport(t *testing.T) {
	e := newWarmEnv(t)
	entry := e.job(30, time.Now().UTC())
	run := e.handed(entry)
	j := cancelAt(t, e.s, entry.ID, e.get(entry.ID).AttemptStart().Add(10*time.Second))
	e.put("jobs/"+entry.ID+"/1/"+run.Run+"/result.json", mj.Result{JobID: entry.ID, Attempt: 1, Succeeded: true, InputBytes: 7,
		Outputs: []mj.Output{{Name: "out.mp4", Size: 5}}, Usage: &mj.Usage{WallSeconds: 3, CPUSeconds: 40}})
	wd := e.finish(run, "reported")
	for range 2 { // applied, then a replay (the watch and a sweep both saw it)
		e.d.warm.applyWarmDone(e.ctx, e.s, wd)
	}
	j = e.get(entry.ID)
	want := mj.Usage{WallSeconds: 10, CPUSeconds: 40, InputBytes: 7, OutputBytes: 5}
	if j.Status != mj.StatusCancelled || j.Usage == nil || *j.Usage != want {
		t.Fatalf("job %s usage %+v; want cancelled with %+v", j.Status, j.Usage, want)
	}
	if got, want := dayTotals(t, e.s, j), (store.UsageTotals{Jobs: 1, WallSeconds: 10, CPUSeconds: 40, InputBytes: 7, OutputBytes: 5}); got != want {
		t.Fatalf("day totals %+v; want %+v", got, want)
	}
	if e.doneKey(run.Run) {
		t.Fatal("the done key outlived its application")
	}
}

// A reported allocation's first sighting (kept for resultGrace, should its
// result be late) goes once its result is read: the map holds the results
// still awaited, not the last twenty minutes of completions.
func TestReadResultForgetsItsSighting(t *testing.T) {
	id, a1 := uuidN(3402), "11111111-2222-4333-8444-5555555555f2"
	blobs := &fakeBlobs{data: map[string][]byte{}}
	d, ctx := fixDispatcher(t, 1, &fakeJobs{children: map[string][]*api.AllocationListStub{}}, blobs)
	started := time.Now().UTC().Add(-time.Minute)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusRunning, NomadJobID: child(id, 1), Attempt: 1, StartedAt: &started, AttemptStartedAt: &started,
		TimeoutSeconds: 600, OutputNames: []string{"out.mp4"}})
	reported := allocState{ID: a1, NomadJobID: child(id, 1), ClientStatus: api.AllocClientStatusComplete, Reported: true, ReportedAt: time.Now().UTC()}
	d.settle.apply(ctx, reported) // no result yet: late, its sighting kept
	d.settle.seen.mu.Lock()
	_, kept := d.settle.seen.at["reported/"+a1]
	d.settle.seen.mu.Unlock()
	if !kept {
		t.Fatal("a reported allocation without its result has no sighting: the test proves nothing")
	}
	blobs.data[mj.RunScope(id, 1)+a1+"/result.json"] = mustJSON(mj.Result{JobID: id, Attempt: 1, AllocID: a1, Succeeded: true, Outputs: []mj.Output{{Name: "out.mp4", Size: 3}}})
	d.settle.apply(ctx, reported)
	if j, _ := d.Store.Job(ctx, id); j.Status != mj.StatusSucceeded {
		t.Fatalf("job %s after its result: %s", id, j.Status)
	}
	d.settle.seen.mu.Lock()
	defer d.settle.seen.mu.Unlock()
	if _, kept := d.settle.seen.at["reported/"+a1]; kept {
		t.Fatal("the sighting of an allocation whose result was read is kept")
	}
}
