package metrics

import (
	"slices"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

// A metered job adds its usage to its pool's series, and to its account's only
// once per-account series are turned on; a job without usage adds nothing.
func TestUsageSeries(t *testing.T) {
	j := &mj.Job{ID: "j", AccountID: "acct-1", Machine: "usage-test", Status: mj.StatusSucceeded,
		Usage: &mj.Usage{WallSeconds: 2, CPUSeconds: 1.5, GPUSeconds: 4, InputBytes: 10, OutputBytes: 20}}
	Finished(j)
	Finished(&mj.Job{AccountID: "acct-1", Machine: "usage-test", Status: mj.StatusCancelled})
	got := []float64{testutil.ToFloat64(UsageJobs.WithLabelValues("usage-test")), testutil.ToFloat64(UsageCPUSeconds.WithLabelValues("usage-test")),
		testutil.ToFloat64(UsageWallSeconds.WithLabelValues("usage-test")), testutil.ToFloat64(UsageGPUSeconds.WithLabelValues("usage-test")),
		testutil.ToFloat64(UsageInputBytes.WithLabelValues("usage-test")), testutil.ToFloat64(UsageOutputBytes.WithLabelValues("usage-test"))}
	if want := []float64{1, 1.5, 2, 4, 10, 20}; !slices.Equal(got, want) {
		t.Fatalf("pool series %v; want %v", got, want)
	}
	if accountUsage.Load() != nil {
		t.Fatal("per-account series exist without usage.per_account_metrics")
	}
	EnableAccountUsage()
	EnableAccountUsage() // once
	Finished(j)
	a := accountUsage.Load()
	if n, cpu := testutil.ToFloat64(a.jobs.WithLabelValues("usage-test", "acct-1")), testutil.ToFloat64(a.cpu.WithLabelValues("usage-test", "acct-1")); n != 1 || cpu != 1.5 {
		t.Fatalf("account series: %v jobs, %v CPU seconds; want 1 and 1.5", n, cpu)
	}
}
