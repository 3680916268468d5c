package dispatcher

import (
	"fmt"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/store"
)

// BenchmarkDispatcherWarmDoneApply is how many warm completions (a done key and its
// run's result.json) the leader applies a second, as a new leader's first
// sweep does with a backlog: warmApplyWorkers at once beside one at a time
// (the watch loop before it), on real etcd and a local blob store. Each done
// key costs a blob read and a few etcd round trips; on S3 the read is longer,
// and the workers matter more.
func BenchmarkDispatcherWarmDoneApply(b *testing.B) {
	const n = 200
	for _, workers := range []int{1, 16} {
		b.Run(fmt.Sprintf("workers=%d", workers), func(b *testing.B) {
			defer func(w int) { warmApplyWorkers = w }(warmApplyWorkers)
			warmApplyWorkers = workers
			var applied int
			var took time.Duration
			for range b.N {
				b.StopTimer()
				e := newWarmEnv(b)
				runs := make([]store.WarmRun, n)
				for i := range runs {
					entry := e.job(30, time.Now().UTC())
					runs[i] = e.handed(entry)
					e.put(fmt.Sprintf("jobs/%s/1/%s/result.json", entry.ID, runs[i].Run), mj.Result{JobID: entry.ID, Attempt: 1, Succeeded: true})
					e.finish(runs[i], "reported")
				}
				b.StartTimer()
				t0 := time.Now()
				if e.d.warm.warmSweep(e.ctx, e.s) == 0 {
					b.Fatal("the sweep failed")
				}
				took += time.Since(t0)
				b.StopTimer()
				for _, r := range runs {
					if e.get(r.JobID).Status != mj.StatusSucceeded {
						b.Fatalf("job %s not applied", r.JobID)
					}
				}
				applied += n
			}
			b.ReportMetric(float64(applied)/took.Seconds(), "applies/s")
		})
	}
}
