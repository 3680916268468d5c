package metrics

import (
	"sync/atomic"

	mj "github.com/mediajobs/mediajobs"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

// Usage metering per pool (docs/usage.md): what the jobs whose result the
// dispatcher applied consumed. Labels are pools only, so the series are bounded
// by the configuration; the per-account series exist only when an operator turns
// usage.per_account_metrics on (one series per account and pool).
var (
	usagePool = []string{"pool"}

	UsageJobs        = usageCounter("jobs", "Jobs whose result was applied (the ones metered), by pool.", usagePool)
	UsageWallSeconds = usageCounter("wall_seconds", "Wall time of the metered jobs' ffmpeg and ffprobe processes, by pool.", usagePool)
	UsageCPUSeconds  = usageCounter("cpu_seconds", "CPU time (user + system) of the metered jobs' ffmpeg and ffprobe processes, by pool.", usagePool)
	UsageGPUSeconds  = usageCounter("gpu_seconds", "GPU time of the metered jobs (wall time times the pool's GPUs per job), by pool.", usagePool)
	UsageInputBytes  = usageCounter("input_bytes", "Input bytes the metered jobs fetched, by pool.", usagePool)
	UsageOutputBytes = usageCounter("output_bytes", "Output bytes the metered jobs stored, by pool.", usagePool)

	accountUsage atomic.Pointer[accountCounters]
)

func usageCounter(name, help string, labels []string) *prometheus.CounterVec {
	return promauto.NewCounterVec(prometheus.CounterOpts{Name: "mediajobs_usage_" + name + "_total", Help: help}, labels)
}

// accountCounters are the per-account series (usage.per_account_metrics).
type accountCounters struct{ jobs, wall, cpu, gpu, in, out *prometheus.CounterVec }

// EnableAccountUsage registers the per-account usage series
// (mediajobs_account_usage_*_total{pool,account}); once per process.
func EnableAccountUsage() {
	if accountUsage.Load() != nil {
		return
	}
	labels := []string{"pool", "account"}
	c := func(name, help string) *prometheus.CounterVec {
		v := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "mediajobs_account_usage_" + name + "_total", Help: help}, labels)
		if err := prometheus.Register(v); err != nil {
			if are, ok := err.(prometheus.AlreadyRegisteredError); ok {
				return are.ExistingCollector.(*prometheus.CounterVec)
			}
			panic(err)
		}
		return v
	}
	accountUsage.CompareAndSwap(nil, &accountCounters{
		jobs: c("jobs", "Metered jobs, by pool and account."),
		wall: c("wall_seconds", "Wall time of metered jobs' processes, by pool and account."),
		cpu:  c("cpu_seconds", "CPU time of metered jobs' processes, by pool and account."),
		gpu:  c("gpu_seconds", "GPU time of metered jobs, by pool and account."),
		in:   c("input_bytes", "Input bytes of metered jobs, by pool and account."),
		out:  c("output_bytes", "Output bytes of metered jobs, by pool and account."),
	})
}

// metered counts a job that ended with its result's usage.
func metered(j *mj.Job) {
	if j.Usage != nil {
		addUsage(j, *j.Usage, 1)
	}
}

// LateUsage adds what a report that came after a job ended (a cancelled job's
// runner's, docs/usage.md) added to the job's usage: the job itself was
// counted when it ended.
func LateUsage(j *mj.Job, added mj.Usage) { addUsage(j, added, 0) }

func addUsage(j *mj.Job, u mj.Usage, jobs float64) {
	add := func(jobsC, wall, cpu, gpu, in, out prometheus.Counter) {
		jobsC.Add(jobs)
		wall.Add(u.WallSeconds)
		cpu.Add(u.CPUSeconds)
		gpu.Add(u.GPUSeconds)
		in.Add(float64(u.InputBytes))
		out.Add(float64(u.OutputBytes))
	}
	p := j.Machine
	add(UsageJobs.WithLabelValues(p), UsageWallSeconds.WithLabelValues(p), UsageCPUSeconds.WithLabelValues(p),
		UsageGPUSeconds.WithLabelValues(p), UsageInputBytes.WithLabelValues(p), UsageOutputBytes.WithLabelValues(p))
	if a := accountUsage.Load(); a != nil {
		l := []string{p, j.AccountID}
		add(a.jobs.WithLabelValues(l...), a.wall.WithLabelValues(l...), a.cpu.WithLabelValues(l...),
			a.gpu.WithLabelValues(l...), a.in.WithLabelValues(l...), a.out.WithLabelValues(l...))
	}
}
