// Package e2e measures mediajobs end to end against baselines taken in the same
// run (see docs/benchmarks.md, "End to end", and `make bench`):
//
//   - BenchmarkLatency: one short job at a time, POST /api/ffmpeg → `succeeded`,
//     interleaved with the same ffmpeg command dispatched straight to Nomad as a
//     raw_exec job (dispatch → allocation complete) and run directly with os/exec.
//   - BenchmarkThroughput: 200 such jobs created at once, completed per second,
//     beside 200 raw Nomad dispatches at once.
//   - BenchmarkWebhooks: 1,000 jobs with a webhook made terminal at once: webhook
//     deliveries per second and the time from the terminal transition to receipt;
//     then 1,000 more made terminal one after another, as the dispatcher's event
//     loop finishes jobs.
//   - BenchmarkEtcdCost (etcdcost_test.go): the etcd revisions and bytes one job
//     with a webhook costs from create to delivered webhook, per kind of key, for a
//     short job and one that runs 60 s reporting progress.
//   - BenchmarkWarmLatency, BenchmarkWarmBurst (warm_test.go): the same job on a
//     warm pool's long-lived runners, one at a time beside raw Nomad, and 200 at
//     once beside the per-job pool and raw Nomad.
//
// Everything is real and on loopback: a Nomad dev agent (testenv.StartNomad) whose
// raw_exec tasks run the real `mediajobs runner` and ffmpeg, embedded etcd, the
// gateway and a leading dispatcher in this process. The environment starts on the
// first benchmark only, so `go test ./...` (which runs no benchmarks) stays fast
// and needs none of it. Each benchmark's one iteration is a whole measurement
// (run them with -benchtime=1x); the sizes are flags:
//
//	go test -run '^$' -bench . -benchtime=1x ./bench/e2e/ -e2e.samples=50 -e2e.batch=100 -e2e.hookconc=64 -e2e.warm=2
package e2e

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/testenv"
)

var (
	samples  = flag.Int("e2e.samples", 30, "BenchmarkLatency: timed jobs of each kind per iteration")
	batch    = flag.Int("e2e.batch", 200, "BenchmarkThroughput: jobs created at once")
	hooks    = flag.Int("e2e.hooks", 1000, "BenchmarkWebhooks: jobs made terminal in each phase")
	paceGap  = flag.Duration("e2e.pace", 0, "BenchmarkWebhooks: gap between sequential transitions")
	writers  = flag.Int("e2e.writers", 64, "BenchmarkWebhooks: goroutines making the burst's jobs terminal")
	hookConc = flag.Int("e2e.hookconc", 0, "webhooks.concurrency of the dispatcher (0: the config default)")
	envOnce  sync.Once
	envVal   *env
	envErr   error
	envMu    sync.Mutex // guards envVal against the signal handler
	closeEnv = func() {
		envMu.Lock()
		defer envMu.Unlock()
		if envVal != nil {
			envVal.close()
			envVal = nil
		}
	}
)

func TestMain(m *testing.M) {
	flag.Parse()
	// Ctrl-C or a kill must not leave the Nomad agent (and its tasks) behind.
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, os.Interrupt, syscall.SIGTERM)
	go func() {
		s := <-sig
		closeEnv()
		fmt.Fprintf(os.Stderr, "bench/e2e: %v: stopped the environment\n", s)
		os.Exit(2)
	}()
	code := m.Run()
	closeEnv()
	os.Exit(code)
}

func getEnv(b *testing.B) *env {
	b.Helper()
	ffmpeg := testenv.Binary(b, "ffmpeg")
	testenv.Binary(b, "ffprobe")
	nomadBin := testenv.NomadBinary(b)
	envOnce.Do(func() {
		e, err := startEnv(nomadBin, ffmpeg)
		envMu.Lock()
		envVal, envErr = e, err
		envMu.Unlock()
	})
	if envErr != nil {
		b.Fatal(envErr)
	}
	return envVal
}

// BenchmarkLatency runs one job at a time, each kind in turn (mediajobs, raw
// Nomad, os/exec), *samples* of each per iteration, and reports each kind's median
// and 95th percentile in seconds, mediajobs' median minus raw Nomad's, and for the
// two Nomad kinds the medians of three phases (see env.phases): until the task
// started, the task itself, and from the task's end until the client saw it.
func BenchmarkLatency(b *testing.B) {
	e := getEnv(b)
	ctx := context.Background()
	var mjs, raws, execs []time.Duration
	var mjPh, rawPh [3][]time.Duration
	b.ResetTimer()
	for range b.N {
		for range *samples {
			for _, k := range []struct {
				run func(context.Context) (sample, error)
				to  *[]time.Duration
				ph  *[3][]time.Duration
			}{{e.mediajobsSample, &mjs, &mjPh}, {e.rawSample, &raws, &rawPh}} {
				s, err := k.run(ctx)
				if err != nil {
					b.Fatal(err)
				}
				*k.to = append(*k.to, s.took())
				b.StopTimer() // the Nomad lookup is not part of the sample
				ph, err := e.phases(s)
				if err != nil {
					b.Fatal(err)
				}
				for i := range ph {
					k.ph[i] = append(k.ph[i], ph[i])
				}
				b.StartTimer()
			}
			d, err := e.execJob(ctx)
			if err != nil {
				b.Fatal(err)
			}
			execs = append(execs, d)
		}
	}
	b.StopTimer()
	b.ReportMetric(quantile(mjs, 0.5).Seconds(), "mj-p50-s")
	b.ReportMetric(quantile(mjs, 0.95).Seconds(), "mj-p95-s")
	b.ReportMetric(quantile(raws, 0.5).Seconds(), "nomad-p50-s")
	b.ReportMetric(quantile(raws, 0.95).Seconds(), "nomad-p95-s")
	b.ReportMetric(quantile(execs, 0.5).Seconds(), "exec-p50-s")
	b.ReportMetric(quantile(execs, 0.95).Seconds(), "exec-p95-s")
	b.ReportMetric((quantile(mjs, 0.5) - quantile(raws, 0.5)).Seconds(), "added-p50-s")
	for i, name := range []string{"start", "task", "after"} {
		b.ReportMetric(quantile(mjPh[i], 0.5).Seconds(), "mj-"+name+"-s")
		b.ReportMetric(quantile(rawPh[i], 0.5).Seconds(), "nomad-"+name+"-s")
	}
}

// BenchmarkThroughput creates *batch* jobs at once through mediajobs and waits for
// all of them, then dispatches *batch* raw Nomad jobs at once and waits for all of
// those, and reports completed jobs per second of each (first request to last
// completion), with the CPU time the whole machine spent per job during each burst
// and, of that, this process's share (gateway, dispatcher, etcd, the clients).
func BenchmarkThroughput(b *testing.B) {
	e := getEnv(b)
	ctx := context.Background()
	var mjRate, rawRate, mjCPU, mjSelf, rawCPU []float64
	b.ResetTimer()
	for range b.N {
		r, cpu, self, err := burst(ctx, *batch, e.mediajobsJob)
		if err != nil {
			b.Fatal("mediajobs: ", err)
		}
		mjRate, mjCPU, mjSelf = append(mjRate, r), append(mjCPU, cpu), append(mjSelf, self)
		if r, cpu, _, err = burst(ctx, *batch, e.rawJob); err != nil {
			b.Fatal("raw nomad: ", err)
		}
		rawRate, rawCPU = append(rawRate, r), append(rawCPU, cpu)
	}
	b.StopTimer()
	b.ReportMetric(mean(mjRate), "mj-jobs/s")
	b.ReportMetric(mean(rawRate), "nomad-jobs/s")
	b.ReportMetric(mean(mjCPU), "mj-cpu-ms/job")
	b.ReportMetric(mean(mjSelf), "mj-self-cpu-ms/job")
	b.ReportMetric(mean(rawCPU), "nomad-cpu-ms/job")
}

// burst starts n jobs at once and returns n over the time from the start to the
// last completion, and the CPU milliseconds per job of the machine and of this
// process meanwhile.
func burst(ctx context.Context, n int, job func(context.Context) (time.Duration, error)) (rate, cpuMS, selfMS float64, err error) {
	var (
		wg      sync.WaitGroup
		mu      sync.Mutex
		longest time.Duration
		first   error
	)
	cpu0, self0 := machineCPU(), selfCPU()
	start := time.Now()
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := job(ctx)
			took := time.Since(start) // from the start of the burst, not of this job
			mu.Lock()
			defer mu.Unlock()
			if err != nil && first == nil {
				first = err
			}
			longest = max(longest, took)
		}()
	}
	wg.Wait()
	cpu1, self1 := machineCPU(), selfCPU()
	if first != nil {
		return 0, 0, 0, first
	}
	return float64(n) / longest.Seconds(), ms(cpu1-cpu0) / float64(n), ms(self1-self0) / float64(n), nil
}

// machineCPU is the CPU time all processes have used (user, nice, system, irq,
// softirq, steal from /proc/stat); 0 where it cannot be read.
func machineCPU() time.Duration {
	b, err := os.ReadFile("/proc/stat")
	if err != nil {
		return 0
	}
	line, _, _ := strings.Cut(string(b), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		return 0
	}
	var ticks int64
	for i, v := range f[1:9] {
		if i == 3 || i == 4 { // idle, iowait
			continue
		}
		n, _ := strconv.ParseInt(v, 10, 64)
		ticks += n
	}
	return time.Duration(ticks) * 10 * time.Millisecond // USER_HZ is 100 on Linux
}

// selfCPU is this process's CPU time (user + system).
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if syscall.Getrusage(syscall.RUSAGE_SELF, &ru) != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// quantile is the q-quantile of ds (nearest rank), 0 when empty.
func quantile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := append([]time.Duration(nil), ds...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	if q == 0.5 && len(s)%2 == 0 {
		return (s[len(s)/2-1] + s[len(s)/2]) / 2
	}
	i := int(q*float64(len(s))+0.999999) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func mean(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	var sum float64
	for _, v := range vs {
		sum += v
	}
	return sum / float64(len(vs))
}

func TestQuantile(t *testing.T) {
	ds := []time.Duration{5, 1, 4, 2, 3}
	if q := quantile(ds, 0.5); q != 3 {
		t.Errorf("median = %v", q)
	}
	if q := quantile(ds, 0.95); q != 5 {
		t.Errorf("p95 = %v", q)
	}
	if q := quantile([]time.Duration{1, 2, 3, 4}, 0.5); q != 2 {
		t.Errorf("even median = %v", q)
	}
	if q := quantile(nil, 0.5); q != 0 {
		t.Errorf("empty = %v", q)
	}
}
