package dispatcher

import (
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// accountTotal is the account's metered usage over the days around now.
func (r *pipelineRig) accountTotal(account string) store.UsageTotals {
	r.t.Helper()
	now := time.Now().UTC()
	rep, err := r.s.AccountUsage(r.ctx, account, now.AddDate(0, 0, -1).Format(store.DayLayout), now.AddDate(0, 0, 1).Format(store.DayLayout))
	if err != nil {
		r.t.Fatal(err)
	}
	return rep.Total
}

// A chunked job's record carries, from its end, its jobs' usage summed (so
// that its list entry, webhook and events show what GET shows), while the
// account is metered for its jobs alone: the sum is never counted again,
// not at the parent's end nor at a later resync.
func TestChunkedParentUsageIsItsJobsSumMeteredOnce(t *testing.T) {
	b := &blobMap{m: map[string][]byte{}}
	r := newPipelineRig(t, func(p *pipelines) { p.read = b.read })
	parent, p := r.newChunkedJob()
	planID := p.Steps[0].Jobs[0]

	var want mj.Usage
	used := func(i int) mj.Usage {
		u := mj.Usage{WallSeconds: 1.001 * float64(i+1), CPUSeconds: 2.017 * float64(i+1), InputBytes: int64(100 * (i + 1)), OutputBytes: int64(7 * (i + 1))}
		want = want.Add(u)
		return u
	}
	// The plan's usage, set while it runs: its terminal write (succeedPlan)
	// meters it.
	r.end(planID, func(j *mj.Job) {
		now := time.Now()
		u := used(0)
		j.StartedAt, j.Usage = &now, &u
		j.Run("")
	})
	r.succeedPlan(b, planID, 2)
	testenv.Eventually(t, time.Minute, "extended", func() bool { pl := r.pipeline(p.ID); return len(pl.Steps) == 4 && len(pl.Plan) == 0 })
	pl := r.pipeline(p.ID)
	enc, audio, stitch := pl.Steps[1].Jobs, pl.Steps[2].Jobs[0], pl.Steps[3].Jobs[0]
	n := 1
	out := func(j *mj.Job) {
		j.Outputs = chunkOutputs(j, "k/"+j.ID+"/"+j.OutputNames[0])
		now := time.Now()
		u := used(n)
		n++
		j.StartedAt, j.Usage = &now, &u
		j.Succeed(now, "")
	}
	r.end(enc[0], out)
	testenv.Eventually(t, time.Minute, "encode 1 released", func() bool { return len(r.job(enc[1]).Awaits) == 0 })
	r.end(enc[1], out)
	r.end(audio, out)
	testenv.Eventually(t, time.Minute, "the stitch released", func() bool { return len(r.job(stitch).Awaits) == 0 })
	b.put("k/"+stitch+"/verification.json", []byte(`{"pass":true}`))
	r.end(stitch, func(j *mj.Job) {
		out(j)
		j.Outputs = append(j.Outputs, mj.Output{Name: mj.ChunkVerification, Key: "k/" + stitch + "/verification.json"})
	})
	testenv.Eventually(t, time.Minute, "the parent succeeded", func() bool { return r.job(parent.ID).Status == mj.StatusSucceeded })

	want = want.Bounded()
	j := r.job(parent.ID)
	if j.Usage != nil || j.Parallel.Usage == nil || *j.Parallel.Usage != want {
		t.Fatalf("parent's usage %v, summary %v: want none and %v", j.Usage, j.Parallel.Usage, want)
	}
	// The one view the list, the webhook and the events render.
	if v := mj.View(j, func(k string) string { return k }); v.Usage == nil || *v.Usage != want {
		t.Fatalf("the parent's view's usage %v, want %v", v.Usage, want)
	}
	check := func(when string) {
		t.Helper()
		got := r.accountTotal(parent.AccountID)
		if got.Jobs != 5 || got.WallSeconds != want.WallSeconds || got.CPUSeconds != want.CPUSeconds ||
			got.InputBytes != want.InputBytes || got.OutputBytes != want.OutputBytes {
			t.Fatalf("%s: the account's metered usage %+v, want its 5 jobs' alone %+v", when, got, want)
		}
	}
	check("at the parent's end")
	// A resync that ends the parent again (its follow key left) writes and
	// meters nothing.
	rev := j.Revision
	r.svc.finishParent(r.ctx, p.ID)
	if j := r.job(parent.ID); j.Revision != rev {
		t.Fatalf("a second end wrote the parent: revision %d -> %d", rev, j.Revision)
	}
	check("after a resync")
}

// A parent cancelled by its client ends before its jobs do: when its
// pipeline ends, its record gets the jobs' usage (what cancelling them
// metered), still unmetered itself.
func TestChunkedCancelledParentGetsItsJobsUsage(t *testing.T) {
	b := &blobMap{m: map[string][]byte{}}
	r := newPipelineRig(t, func(p *pipelines) { p.read = b.read })
	parent, p := r.newChunkedJob()
	planID := p.Steps[0].Jobs[0]
	r.end(planID, func(j *mj.Job) { started := time.Now().Add(-3 * time.Second); j.StartedAt = &started; j.Run("") })
	testenv.Eventually(t, time.Minute, "the parent runs", func() bool { return r.job(parent.ID).Status == mj.StatusRunning })
	r.end(parent.ID, func(j *mj.Job) { j.Cancel(time.Now(), "cancelled by the client") })
	testenv.Eventually(t, time.Minute, "the pipeline cancelled", func() bool { return r.pipeline(p.ID).Status == mj.StatusCancelled })
	plan := r.job(planID)
	if plan.Status != mj.StatusCancelled || plan.Usage == nil || plan.Usage.WallSeconds < 3 {
		t.Fatalf("the plan job: %s, usage %v", plan.Status, plan.Usage)
	}
	testenv.Eventually(t, time.Minute, "the parent's usage recorded", func() bool { return r.job(parent.ID).Parallel.Usage != nil })
	j := r.job(parent.ID)
	if j.Status != mj.StatusCancelled || j.Usage != nil || *j.Parallel.Usage != *plan.Usage {
		t.Fatalf("parent %s, usage %v, summary %v: want the plan's %v", j.Status, j.Usage, j.Parallel.Usage, *plan.Usage)
	}
	if got := r.accountTotal(parent.AccountID); got.Jobs != 1 || got.WallSeconds != plan.Usage.WallSeconds {
		t.Fatalf("the account's metered usage %+v, want the plan job's alone %v", got, *plan.Usage)
	}
}
