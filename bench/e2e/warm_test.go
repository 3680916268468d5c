package e2e

import (
	"context"
	"flag"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/gateway"
	"github.com/mediajobs/mediajobs/workload"
)

// Warm pools (docs/benchmarks.md, "Warm pools"): the same trivial job on a pool
// whose short jobs go to long-lived runners, beside raw Nomad dispatches and the
// per-job pool in the same run.

// warmRunners is 2 by default: one per core of the 2-core machine the figures in
// docs/benchmarks.md come from. A runner takes one job at a time and the job is
// mostly CPU (ffmpeg and ffprobe starting up), so a third runner would only queue
// for a core behind the other two and the gateway, dispatcher, etcd and Nomad.
var warmRunners = flag.Int("e2e.warm", 2, "BenchmarkWarmLatency, BenchmarkWarmBurst: runners of the warm pool")

const (
	// warmPool is the warm pool: the same resources as the cpu pool for the jobs
	// it dispatches, runners of poolCPU MHz and 256 MiB (a runner's own process
	// beside ffmpeg's) taking jobs of up to 60 s.
	warmPool    = "short"
	warmGroup   = "warm" // the task group of jobspecs/warm.nomad.hcl
	warmMaxJobS = 60
)

// warmBody is createBody on the warm pool, with a timeout it takes.
var warmBody = []byte(`{"machine":"` + warmPool + `","timeout_seconds":30,"output_files":["o.wav"],"ffmpeg_commands":["-f lavfi -i sine=duration=0.1 {{o.wav}}"]}`)

func warmPoolConfig(runnerBin string) *config.Pool {
	return &config.Pool{Name: warmPool, RunnerCommand: runnerBin, CPU: poolCPU, Memory: poolMemory, Disk: poolDisk,
		Warm: &config.Warm{Count: max(*warmRunners, 1), MaxJobSeconds: warmMaxJobS, CPU: poolCPU, Memory: 256, Disk: poolDisk}}
}

// warmAuth admits the warm runners as `mediajobs gateway` does (cmd/mediajobs/warm.go):
// their workload identities against the keys the Nomad agent publishes, their
// allocations with its API.
func warmAuth(nomadAddr string) (*gateway.WarmAuth, error) {
	c, err := nomadClient(nomadAddr)
	if err != nil {
		return nil, err
	}
	return &gateway.WarmAuth{
		Verifier: &workload.Verifier{JWKSURL: strings.TrimSuffix(nomadAddr, "/") + "/.well-known/jwks.json", Audience: "mediajobs"},
		Allocs:   nomadAllocs{c.Allocations()},
	}, nil
}

type nomadAllocs struct{ a *api.Allocations }

func (n nomadAllocs) AllocStatus(ctx context.Context, id string) (string, string, error) {
	a, _, err := n.a.Info(id, (&api.QueryOptions{}).WithContext(ctx))
	if err != nil {
		return "", "", err
	}
	return a.ClientStatus, a.DesiredStatus, nil
}

// scaleWarm sets the warm pool's runners to n (nomad job scale) and waits until
// n allocations run, none other is pending or stopping, and n runners wait for
// work: nothing measured waits for a runner to start or pays for one stopping.
func (e *env) scaleWarm(ctx context.Context, n int) error {
	id := mj.WarmJobID(warmPool)
	deadline := time.Now().Add(3 * time.Minute)
	for {
		// Nomad refuses to scale a service job while its last deployment (the
		// registration's, the last scaling's) waits for its allocations to be healthy.
		_, _, err := e.rawJobs.Scale(id, warmGroup, &n, "bench/e2e", false, nil, nil)
		if err == nil {
			break
		}
		if !strings.Contains(err.Error(), "active deployment") || time.Now().After(deadline) {
			return fmt.Errorf("scale %s to %d: %w", id, n, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	for {
		running, others, err := e.warmAllocs(id)
		idle, ierr := e.st.WarmIdleRunners(ctx, warmPool)
		if err == nil && ierr == nil && running == n && others == 0 && len(idle) == n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s: %d runners running, %d starting or stopping, %d waiting for work (%v, %v) 3 min after scaling to %d",
				id, running, others, len(idle), err, ierr, n)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// warmAllocs counts the warm job's allocations that run and are meant to, and
// those still pending or running that are not (starting, or stopping).
func (e *env) warmAllocs(id string) (running, others int, err error) {
	stubs, _, err := e.rawJobs.Allocations(id, false, nil)
	if err != nil {
		return 0, 0, err
	}
	for _, a := range stubs {
		switch {
		case a.ClientStatus == api.AllocClientStatusRunning && a.DesiredStatus == api.AllocDesiredStatusRun:
			running++
		case a.ClientStatus == api.AllocClientStatusPending || a.ClientStatus == api.AllocClientStatusRunning:
			others++
		}
	}
	return running, others, nil
}

// waitWarmIdle waits until all n runners wait for work.
func (e *env) waitWarmIdle(ctx context.Context, n int) error {
	deadline := time.Now().Add(time.Minute)
	for {
		idle, err := e.st.WarmIdleRunners(ctx, warmPool)
		if err == nil && len(idle) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%d of the warm pool's %d runners wait for work a minute on (%v)", len(idle), n, err)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// warmSample is one trivial job on the warm pool, timed as mediajobsSample
// times one (POST, then an etcd watch on the job until it is terminal), with the
// path that ran it (job.worker.path: "warm" or "dispatch").
func (e *env) warmSample(ctx context.Context) (sample, string, error) {
	return e.bodySample(ctx, warmBody)
}

// bodySample is warmSample for a job body of its own.
func (e *env) bodySample(ctx context.Context, body []byte) (sample, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	start := time.Now()
	id, err := e.create(ctx, body)
	if err != nil {
		return sample{}, "", err
	}
	j, err := e.st.WaitJob(ctx, id, func(j *mj.Job) bool { return j.Status.Terminal() })
	end := time.Now()
	if err != nil {
		return sample{}, "", err
	}
	path := ""
	if j.Worker != nil {
		path = j.Worker.Path
	}
	if j.Status != mj.StatusSucceeded {
		return sample{}, path, fmt.Errorf("warm pool job %s is %s, not succeeded (worker path %q): %s%s", id, j.Status, path, j.ErrorMessage, j.StatusDetail)
	}
	return sample{start: start, end: end, child: j.NomadJobID}, path, nil
}

// warmUp scales the warm pool up for one benchmark, runs one untimed job on it
// (a runner's first job reads the binaries from disk), and scales it down when
// the benchmark ends.
func warmUp(b *testing.B, e *env) {
	b.Helper()
	if *warmRunners < 1 {
		b.Fatalf("-e2e.warm=%d: a warm pool benchmark needs at least one runner", *warmRunners)
	}
	ctx := context.Background()
	b.Cleanup(func() {
		if err := e.scaleWarm(ctx, 0); err != nil {
			b.Error(err)
		}
	})
	if err := e.scaleWarm(ctx, *warmRunners); err != nil {
		b.Fatal(err)
	}
	if _, path, err := e.warmSample(ctx); err != nil || path != mj.WorkerWarm {
		b.Fatalf("warm-up job on the warm pool: worker path %q, err %v", path, err)
	}
}

// BenchmarkWarmLatency runs one trivial job at a time on the warm pool (its
// runners all waiting for work before each), interleaved with the same work
// dispatched to raw Nomad, *samples* of each per iteration, and reports each
// kind's median and 95th percentile in seconds. A job that did not run on a warm
// runner (worker.path "dispatch": none was waiting) fails the benchmark rather
// than count a dispatch as a warm figure.
func BenchmarkWarmLatency(b *testing.B) {
	warms, raws, _ := warmRounds(b, warmBody, nil)
	b.ReportMetric(quantile(warms, 0.5).Seconds(), "warm-p50-s")
	b.ReportMetric(quantile(warms, 0.95).Seconds(), "warm-p95-s")
	b.ReportMetric(quantile(raws, 0.5).Seconds(), "nomad-p50-s")
	b.ReportMetric(quantile(raws, 0.95).Seconds(), "nomad-p95-s")
}

// warmRounds times *samples* rounds per iteration of: body on the warm pool
// (every runner waiting first, untimed; a job not run warm fails), one raw
// Nomad dispatch, and, with execArgs, ffmpeg alone on them.
func warmRounds(b *testing.B, body []byte, execArgs []string) (warms, raws, execs []time.Duration) {
	e := getEnv(b)
	ctx := context.Background()
	warmUp(b, e)
	b.ResetTimer()
	for range b.N {
		for range *samples {
			b.StopTimer()
			if err := e.waitWarmIdle(ctx, *warmRunners); err != nil {
				b.Fatal(err)
			}
			b.StartTimer()
			s, path, err := e.bodySample(ctx, body)
			if err != nil {
				b.Fatal(err)
			}
			if path != mj.WorkerWarm {
				b.Fatalf("job on the warm pool ran on worker path %q (%s), not %q", path, s.child, mj.WorkerWarm)
			}
			warms = append(warms, s.took())
			if s, err = e.rawSample(ctx); err != nil {
				b.Fatal(err)
			}
			raws = append(raws, s.took())
			if execArgs != nil {
				d, err := e.execArgs(ctx, execArgs)
				if err != nil {
					b.Fatal(err)
				}
				execs = append(execs, d)
			}
		}
	}
	b.StopTimer()
	return warms, raws, execs
}

// trivialBody is issue 32's trivial job as Very Good FFmpeg's docs send it:
// no timeout_seconds, one PNG. trivialArgs is the same command for ffmpeg alone.
var (
	trivialBody = []byte(`{"machine":"` + warmPool + `","output_files":["o.png"],"ffmpeg_commands":["-f lavfi -i color=c=black:s=16x16:d=0.1 -frames:v 1 {{o.png}}"]}`)
	trivialArgs = []string{"-f", "lavfi", "-i", "color=c=black:s=16x16:d=0.1", "-frames:v", "1", "o.png"}
)

// BenchmarkTrivialLatency is BenchmarkWarmLatency for the trivial job without
// a timeout (it runs warm when a runner is idle, docs/warm.md), beside raw
// Nomad's dispatch and the same command run by ffmpeg alone, each in turn.
// Reports the medians and 95th percentiles, and the median's ratios to both.
func BenchmarkTrivialLatency(b *testing.B) {
	mjs, raws, execs := warmRounds(b, trivialBody, trivialArgs)
	p50, raw, ex := quantile(mjs, 0.5), quantile(raws, 0.5), quantile(execs, 0.5)
	b.ReportMetric(p50.Seconds(), "mj-p50-s")
	b.ReportMetric(quantile(mjs, 0.95).Seconds(), "mj-p95-s")
	b.ReportMetric(raw.Seconds(), "nomad-p50-s")
	b.ReportMetric(ex.Seconds(), "exec-p50-s")
	b.ReportMetric(p50.Seconds()/raw.Seconds(), "x-nomad")
	b.ReportMetric(p50.Seconds()/ex.Seconds(), "x-exec")
}

// BenchmarkWarmBurst creates *batch* trivial jobs at once on the warm pool and
// waits for all of them; then, with the warm runners scaled to none (the node as
// BenchmarkThroughput has it), *batch* jobs at once on the per-job cpu pool, and
// *batch* raw Nomad dispatches at once. Each reports completed jobs per second
// (first request to last completion) and the CPU time the whole machine (Nomad,
// mediajobs, runners, tasks) spent per job, as BenchmarkThroughput does. The
// dispatcher hands a warm pool's jobs to its waiting runners and dispatches what
// they cannot take at once to Nomad as usual, so warm-share-% says how many of
// the burst ran warm; none at all fails the benchmark.
func BenchmarkWarmBurst(b *testing.B) {
	e := getEnv(b)
	ctx := context.Background()
	var warmRate, warmCPU, warmSelf, share, mjRate, mjCPU, mjSelf, rawRate, rawCPU []float64
	b.ResetTimer()
	for i := range b.N {
		b.StopTimer()
		if i == 0 {
			warmUp(b, e)
		} else if err := e.scaleWarm(ctx, *warmRunners); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		var warm atomic.Int64
		r, cpu, self, err := burst(ctx, *batch, func(ctx context.Context) (time.Duration, error) {
			s, path, err := e.warmSample(ctx)
			if path == mj.WorkerWarm {
				warm.Add(1)
			}
			return s.took(), err
		})
		if err != nil {
			b.Fatal("warm pool: ", err)
		}
		if warm.Load() == 0 {
			b.Fatalf("warm pool: none of the %d jobs ran on a warm runner", *batch)
		}
		warmRate, warmCPU, warmSelf = append(warmRate, r), append(warmCPU, cpu), append(warmSelf, self)
		share = append(share, 100*float64(warm.Load())/float64(*batch))

		b.StopTimer()
		if err := e.scaleWarm(ctx, 0); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
		if r, cpu, self, err = burst(ctx, *batch, e.mediajobsJob); err != nil {
			b.Fatal("per-job pool: ", err)
		}
		mjRate, mjCPU, mjSelf = append(mjRate, r), append(mjCPU, cpu), append(mjSelf, self)
		if r, cpu, _, err = burst(ctx, *batch, e.rawJob); err != nil {
			b.Fatal("raw nomad: ", err)
		}
		rawRate, rawCPU = append(rawRate, r), append(rawCPU, cpu)
	}
	b.StopTimer()
	b.ReportMetric(float64(*batch), "jobs")
	b.ReportMetric(mean(warmRate), "warm-jobs/s")
	b.ReportMetric(mean(warmCPU), "warm-cpu-ms/job")
	b.ReportMetric(mean(warmSelf), "warm-self-cpu-ms/job")
	b.ReportMetric(mean(share), "warm-share-%")
	b.ReportMetric(mean(mjRate), "mj-jobs/s")
	b.ReportMetric(mean(mjCPU), "mj-cpu-ms/job")
	b.ReportMetric(mean(mjSelf), "mj-self-cpu-ms/job")
	b.ReportMetric(mean(rawRate), "nomad-jobs/s")
	b.ReportMetric(mean(rawCPU), "nomad-cpu-ms/job")
}
