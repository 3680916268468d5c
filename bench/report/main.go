// Command report reads `go test -bench` output of ./bench and ./bench/e2e on stdin,
// echoes it, and prints a markdown table per suite found in it:
//
//   - gateway (./bench): each subject beside its baseline from the same run, with
//     the ratio against its target. Throughputs are medians over the rounds; the
//     ratio is the median of the per-round ratios (the i-th subject result over the
//     i-th baseline result), so a round disturbed by other load on the machine
//     counts once.
//   - end to end (./bench/e2e): latency added over raw Nomad, throughput against
//     raw Nomad, webhook delivery rate and latency; each figure is the median over
//     the rounds (per-round ratios for the throughput), with its target.
//   - transfers (BenchmarkTransfer in ./bench): a 200 MB file up and down through
//     mediajobs' URLs in S3 mode (MinIO's presigned URLs) beside the same transfer
//     with MinIO's own client (the AWS SDK), the ratio against its target, file
//     mode (streamed by the gateway) for contrast; then CPU per GB transferred,
//     the gateway's own in both modes, with the S3 mode's target (near zero), and
//     the bytes that passed through the gateway.
//   - one leader at scale (BenchmarkDispatcherReconcile and BenchmarkDispatcherEvents
//     in ./dispatcher): a reconcile pass over 10,000 active jobs and events applied
//     per second, each the new way beside the old way in the same process, with
//     their targets (≤ 2 s, ≥ 5,000 events/s).
//   - fair share between accounts (BenchmarkDispatcherFairPass and
//     BenchmarkDispatcherFairness in ./dispatcher): a fair dispatch pass beside the
//     first-in-first-out pass over the same queue (target ≤ 1.5 ×), Jain's index of
//     backlogged accounts' started jobs (≥ 0.95), and the slots others' jobs took
//     while a quiet account's one job waited (≤ 1).
//   - warm pools (BenchmarkWarmLatency and BenchmarkWarmBurst in ./bench/e2e): a
//     trivial job's latency on a warm pool beside raw Nomad's (target: median
//     ≤ 0.3 s), and a burst of jobs created at once on the warm pool beside the
//     same burst on the per-job pool and as raw Nomad dispatches: jobs/s (target
//     ≥ 2 × raw Nomad) and CPU per job (target ≤ raw Nomad's), with the share of
//     the burst that ran on warm runners.
//   - pipelines (BenchmarkCreatePipeline* in ./bench, BenchmarkPipeline* in
//     ./bench/e2e): a 100-step pipeline's create beside its 100 jobs created
//     in turn; a 10-step chain's time beside its jobs' own summed (target
//     ≤ 1.1 ×, ≤ 0.1 s per edge on warm runners); the worked ladder beside its
//     critical path (≤ 1.25 ×).
//   - etcd cost of one job (BenchmarkEtcdCost in ./bench/e2e): revisions and bytes
//     from create to delivered webhook, per kind of key, for a short job and a 60 s
//     one with progress, and the old design's estimate for a job that stored
//     progress reports (no target).
//   - the soak (BenchmarkSoak in ./bench/e2e, `make soak`): jobs by outcome and
//     path, webhooks received exactly once, nothing left running, and the
//     gateway's and dispatcher's goroutines and heap, the first third's median
//     beside the last's, with their bounds.
//
// Rounds pair best when each round runs all benchmarks back to back:
//
//	for i in 1 2 3; do go test -run '^$' -bench . -count=1 ./bench/; done | go run ./bench/report
//
// A suite with no result in the input is left out (so either can be reported
// alone). It exits 1 when the benchmark output says FAIL, when nothing was found,
// or when a suite lacks one of its benchmarks, and, with -strict, when a target is
// missed.
package main

import (
	"bufio"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strconv"
	"strings"
)

// Pair is a subject measured against a baseline with a target ratio.
type Pair struct {
	What     string
	Subject  string
	Baseline string
	Target   float64
}

// Pairs are the comparisons of the issue: create vs raw etcd, GET vs bare fiber
// (targets of issue 32).
var Pairs = []Pair{
	{"create job", "CreateJob", "CreateRawEtcd", 0.7},
	{"get job", "GetJob", "GetBareFiber", 0.9},
}

// Result holds each benchmark's values of one unit, one per run, by name without
// the "Benchmark" prefix and the -GOMAXPROCS suffix.
type Result map[string]map[string][]float64

// Parse reads benchmark output. failed reports a FAIL line.
func Parse(r io.Reader, echo io.Writer) (res Result, failed bool, err error) {
	res = Result{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if echo != nil {
			fmt.Fprintln(echo, line)
		}
		if strings.HasPrefix(line, "FAIL") || strings.HasPrefix(line, "--- FAIL") || strings.Contains(line, "--- FAIL") {
			failed = true
		}
		f := strings.Fields(line)
		if len(f) < 4 || !strings.HasPrefix(f[0], "Benchmark") {
			continue
		}
		if _, err := strconv.Atoi(f[1]); err != nil {
			continue // a benchmark's name printed before its result, or a log line
		}
		name := strings.TrimPrefix(f[0], "Benchmark")
		if i := strings.LastIndexByte(name, '-'); i > 0 {
			if _, err := strconv.Atoi(name[i+1:]); err == nil {
				name = name[:i]
			}
		}
		for i := 2; i+1 < len(f); i += 2 {
			v, err := strconv.ParseFloat(f[i], 64)
			if err != nil {
				continue
			}
			if res[name] == nil {
				res[name] = map[string][]float64{}
			}
			res[name][f[i+1]] = append(res[name][f[i+1]], v)
		}
	}
	return res, failed, sc.Err()
}

// Median of vs (0 when empty).
func Median(vs []float64) float64 {
	if len(vs) == 0 {
		return 0
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// Table writes the table of each suite present in res and reports whether every
// benchmark of those suites was found (and at least one suite was), and whether
// every target was met.
func Table(w io.Writer, res Result) (complete, met bool) {
	gw, e2e := false, false
	for _, p := range Pairs {
		gw = gw || res[p.Subject] != nil || res[p.Baseline] != nil
	}
	for _, n := range E2EBenchmarks {
		e2e = e2e || res[n] != nil
	}
	cost := false
	for _, j := range EtcdCostJobs {
		cost = cost || res["EtcdCost/"+j.Name] != nil
	}
	warm := false
	for _, n := range WarmBenchmarks {
		warm = warm || res[n] != nil
	}
	tr := res["Transfer"] != nil
	scale := false
	for _, n := range ScaleBenchmarks {
		scale = scale || res[n] != nil
	}
	fair := false
	for _, n := range FairBenchmarks {
		fair = fair || res[n] != nil
	}
	soak := res["Soak"] != nil
	pipe := false
	for _, n := range PipelineBenchmarks {
		pipe = pipe || res[n] != nil
	}
	complete, met = true, true
	printed := false
	sep := func() {
		if printed {
			fmt.Fprintln(w)
		}
		printed = true
	}
	if gw || !e2e && !warm && !cost && !tr && !scale && !fair && !soak && !pipe {
		sep()
		complete, met = GatewayTable(w, res)
	}
	if tr {
		sep()
		c, m := TransferTable(w, res)
		complete, met = complete && c, met && m
	}
	if scale {
		sep()
		c, m := ScaleTable(w, res)
		complete, met = complete && c, met && m
	}
	if fair {
		sep()
		c, m := FairTable(w, res)
		complete, met = complete && c, met && m
	}
	if e2e {
		sep()
		c, m := E2ETable(w, res)
		complete, met = complete && c, met && m
	}
	if warm {
		sep()
		c, m := WarmTable(w, res)
		complete, met = complete && c, met && m
	}
	if pipe {
		sep()
		c, m := PipelineTable(w, res)
		complete, met = complete && c, met && m
	}
	if cost {
		sep()
		complete = EtcdCostTable(w, res) && complete
	}
	if soak {
		sep()
		c, m := SoakTable(w, res)
		complete, met = complete && c, met && m
	}
	return complete, met
}

// The transfer targets: mediajobs' URLs in S3 mode move a file at least 0.9 × as
// fast as MinIO's own client, and the gateway's CPU per transferred GB is near
// zero: at most 1 % of what streaming the same bytes costs it in file mode, with
// none of the file's bytes through it (less than TransferGatewayBytes per round
// trip: the tmp-file request and its answer).
const (
	TargetTransferRatio    = 0.9
	TargetGatewayCPUShare  = 0.01
	TransferGatewayBytes   = 64 << 10
	transferSubject        = "mjs3"
	transferBaseline       = "sdk"
	transferBaselineNoHash = "sdku"
	transferFileMode       = "mjfile"
)

// rows tracks what a table writer found: every row's figures present
// (complete), and every target met.
type rows struct {
	w             io.Writer
	cols          int // the table's columns
	complete, met bool
}

func newRows(w io.Writer, cols int) *rows { return &rows{w: w, cols: cols, complete: true, met: true} }

// verdict is a row's result column.
func (t *rows) verdict(ok bool) string {
	if ok {
		return "met"
	}
	t.met = false
	return "**missed**"
}

// missing writes the row of a measure whose benchmark reported nothing.
func (t *rows) missing(what, bench string) {
	t.complete, t.met = false, false
	fmt.Fprintf(t.w, "| %s |%s missing (Benchmark%s) |\n", what, strings.Repeat(" – |", t.cols-2), bench)
}

// TransferTable writes BenchmarkTransfer's tables: throughput against the
// target, then CPU per GB and the bytes through the gateway.
func TransferTable(w io.Writer, res Result) (complete, met bool) {
	complete, met = true, true
	r := res["Transfer"]
	verdict := func(ok bool) string {
		if ok {
			return "met"
		}
		met = false
		return "**missed**"
	}
	fmt.Fprintln(w, "| transfer, 200 MB (MB/s) | mediajobs, S3 mode (MinIO's presigned URLs) | MinIO's own client (AWS SDK v2) | ratio | target | result | SDK, unsigned payload | mediajobs, file mode (gateway-streamed) |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---|---:|---:|")
	for _, dir := range []struct{ what, unit string }{{"upload (PUT)", "up-MB/s"}, {"download (GET)", "down-MB/s"}} {
		s, b := r[transferSubject+"-"+dir.unit], r[transferBaseline+"-"+dir.unit]
		if len(s) == 0 || len(b) == 0 {
			complete, met = false, false
			fmt.Fprintf(w, "| %s | – | – | – | ≥ %.2f × | missing (BenchmarkTransfer %s) |  |  |\n", dir.what, TargetTransferRatio, dir.unit)
			continue
		}
		ratio, rs := Ratio(s, b)
		nohash := "–"
		if u := r[transferBaselineNoHash+"-"+dir.unit]; len(u) > 0 {
			ru, _ := Ratio(s, u)
			nohash = fmt.Sprintf("%s (mediajobs: %.2f ×)", fmtVals(u, 0), ru)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %.2f ×%s | ≥ %.2f × | %s | %s | %s |\n", dir.what, fmtVals(s, 0), fmtVals(b, 0),
			ratio, rs, TargetTransferRatio, verdict(ratio >= TargetTransferRatio), nohash, fmtVals(r[transferFileMode+"-"+dir.unit], 0))
	}

	fmt.Fprintln(w)
	fmt.Fprintln(w, "| per GB transferred (up + down) | mediajobs, S3 mode | MinIO's own client (SDK; unsigned payload) | mediajobs, file mode | target | result |")
	fmt.Fprintln(w, "|---|---:|---:|---:|---:|---|")
	fmt.Fprintf(w, "| this process's CPU: client and gateway (ms/GB) | %s | %s; %s | %s | – | – |\n",
		fmtVals(r[transferSubject+"-cpu-ms/GB"], 0), fmtVals(r[transferBaseline+"-cpu-ms/GB"], 0),
		fmtVals(r[transferBaselineNoHash+"-cpu-ms/GB"], 0), fmtVals(r[transferFileMode+"-cpu-ms/GB"], 0))
	if g, f := r["gw-s3-cpu-ms/GB"], r["gw-file-cpu-ms/GB"]; len(g) > 0 && len(f) > 0 {
		share, _ := Ratio(g, f)
		fmt.Fprintf(w, "| the gateway's CPU (ms/GB) | %s (%.2f %% of file mode%s) | – | %s | ≤ %.0f %% of file mode | %s |\n",
			fmtVals(g, 2), 100*share, pctSpread(g, f), fmtVals(f, 0), 100*TargetGatewayCPUShare, verdict(share <= TargetGatewayCPUShare))
	} else {
		complete, met = false, false
		fmt.Fprintln(w, "| the gateway's CPU (ms/GB) | – | – | – | – | missing (BenchmarkTransfer gw-s3-cpu-ms/GB, gw-file-cpu-ms/GB) |")
	}
	if has(r, transferSubject+"-minio-cpu-ms/GB") {
		fmt.Fprintf(w, "| MinIO's CPU (ms/GB) | %s | %s; %s | – | – | – |\n", fmtVals(r[transferSubject+"-minio-cpu-ms/GB"], 0),
			fmtVals(r[transferBaseline+"-minio-cpu-ms/GB"], 0), fmtVals(r[transferBaselineNoHash+"-minio-cpu-ms/GB"], 0))
	}
	if b := r[transferSubject+"-gw-B"]; len(b) > 0 {
		fmt.Fprintf(w, "| bytes through the gateway per 200 MB up and down | %s | – | %s | < %d | %s |\n", fmtVals(b, 0),
			fmtVals(r[transferFileMode+"-gw-B"], 0), TransferGatewayBytes, verdict(Median(b) < TransferGatewayBytes))
	} else {
		complete, met = false, false
		fmt.Fprintln(w, "| bytes through the gateway | – | – | – | – | missing (BenchmarkTransfer mjs3-gw-B) |")
	}
	return complete, met
}

// pctSpread is ", min–max %" of the per-round ratios s[i]/b[i] in percent, when
// there are several rounds to pair; "" otherwise.
func pctSpread(s, b []float64) string {
	if len(s) != len(b) || len(s) < 2 {
		return ""
	}
	rs := make([]float64, len(s))
	for i := range s {
		rs[i] = 100 * s[i] / b[i]
	}
	sort.Float64s(rs)
	return fmt.Sprintf(", %.2f–%.2f %%", rs[0], rs[len(rs)-1])
}

// GatewayTable writes the gateway suite's table (subject beside baseline).
func GatewayTable(w io.Writer, res Result) (complete, met bool) {
	complete, met = true, true
	fmt.Fprintln(w, "| benchmark | subject ops/s | baseline | baseline ops/s | ratio | target | result |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---|")
	for _, p := range Pairs {
		s, b := res[p.Subject]["ops/s"], res[p.Baseline]["ops/s"]
		if len(s) == 0 || len(b) == 0 {
			complete, met = false, false
			fmt.Fprintf(w, "| %s | %s | %s | %s | – | ≥ %.2f | missing |\n", p.Subject, fmtOps(s), p.Baseline, fmtOps(b), p.Target)
			continue
		}
		ratio, spread := Ratio(s, b)
		verdict := "met"
		if ratio < p.Target {
			verdict, met = "**missed**", false
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %.2f%s | ≥ %.2f | %s |\n", p.Subject, fmtOps(s), p.Baseline, fmtOps(b), ratio, spread, p.Target, verdict)
	}
	return complete, met
}

// Ratio is the median of the per-round ratios s[i]/b[i], with their range when
// there are several; the ratio of the medians when the counts differ.
func Ratio(s, b []float64) (float64, string) {
	if len(s) != len(b) {
		return Median(s) / Median(b), ""
	}
	rs := make([]float64, len(s))
	for i := range s {
		rs[i] = s[i] / b[i]
	}
	if len(rs) == 1 {
		return rs[0], ""
	}
	sort.Float64s(rs)
	return Median(rs), fmt.Sprintf(" (%.2f–%.2f)", rs[0], rs[len(rs)-1])
}

// fmtOps is the median and, over several runs, the range.
func fmtOps(vs []float64) string {
	switch len(vs) {
	case 0:
		return "–"
	case 1:
		return fmt.Sprintf("%.0f", vs[0])
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	return fmt.Sprintf("%.0f (%.0f–%.0f, n=%d)", Median(s), s[0], s[len(s)-1], len(s))
}

// ScaleBenchmarks are the dispatcher's benchmarks at scale (./dispatcher).
var ScaleBenchmarks = []string{"DispatcherReconcile", "DispatcherEvents"}

// The scale targets: a reconcile pass over 10,000 active jobs within 2 s, and at
// least 5,000 Nomad events applied per second.
const (
	TargetReconcileS  = 2
	TargetEventsPerS  = 5000
	scaleReconcileFor = 10000
)

// ScaleTable writes the dispatcher-at-scale table: each measure the new way, the
// old way from the same process, the speed-up (median of the per-round ratios) and
// the target.
func ScaleTable(w io.Writer, res Result) (complete, met bool) {
	tb := newRows(w, 6)
	fmt.Fprintln(w, "| dispatcher, one leader | new | old (same run) | speed-up | target | result |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---|")
	if r := res["DispatcherReconcile"]; has(r, "new-s", "old-s") {
		ratio, rs := Ratio(r["old-s"], r["new-s"])
		calls := ""
		if has(r, "new-nomad-calls", "old-nomad-calls") {
			calls = fmt.Sprintf("; Nomad requests %s vs %s", fmtVals(r["new-nomad-calls"], 0), fmtVals(r["old-nomad-calls"], 0))
		}
		newS := Median(r["new-s"])
		fmt.Fprintf(w, "| reconcile pass, %.0f active jobs (s) | %s | %s%s | %.1f ×%s | ≤ %d s | %s |\n", Median(r["jobs"]),
			fmtVals(r["new-s"], 2), fmtVals(r["old-s"], 2), calls, ratio, rs, TargetReconcileS,
			tb.verdict(newS <= TargetReconcileS && Median(r["jobs"]) >= scaleReconcileFor))
	} else {
		tb.missing("reconcile pass", "DispatcherReconcile")
	}
	if r := res["DispatcherEvents"]; has(r, "new-events/s", "old-events/s") {
		ratio, rs := Ratio(r["new-events/s"], r["old-events/s"])
		rate := Median(r["new-events/s"])
		fmt.Fprintf(w, "| Nomad events applied (events/s, %.0f events) | %s | %s | %.1f ×%s | ≥ %d/s | %s |\n", Median(r["events"]),
			fmtVals(r["new-events/s"], 0), fmtVals(r["old-events/s"], 0), ratio, rs, TargetEventsPerS, tb.verdict(rate >= TargetEventsPerS))
	} else {
		tb.missing("Nomad events applied", "DispatcherEvents")
	}
	return tb.complete, tb.met
}

// FairBenchmarks are the dispatcher's fair-share benchmarks (./dispatcher,
// fair_bench_test.go); make bench's -bench Dispatcher runs them with the scale ones.
var FairBenchmarks = []string{"DispatcherFairPass", "DispatcherFairness"}

// The fair-share targets (docs/scheduling.md): a fair pass costs at most 1.5 × the
// first-in-first-out pass over the same queue, backlogged accounts get their share
// (Jain's index ≥ 0.95), and a quiet account's job waits for at most one slot
// taken by others' jobs.
const (
	TargetFairPassRatio = 1.5
	TargetJainIndex     = 0.95
	TargetQuietSlots    = 1
)

// FairTable writes the fair-share table: the fair pass beside the FIFO pass of the
// same run (the ratio the median of the per-round ones), Jain's index, and a quiet
// account's wait, each figure the median over the rounds.
func FairTable(w io.Writer, res Result) (complete, met bool) {
	tb := newRows(w, 6)
	fmt.Fprintln(w, "| fair share between accounts | mediajobs | baseline (same run) | figure | target | result |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---|")
	if r := res["DispatcherFairPass"]; has(r, "fair-s", "fifo-s") {
		ratio, rs := Ratio(r["fair-s"], r["fifo-s"])
		if has(r, "fair/fifo") { // the benchmark's own ratio: its total times over b.N passes
			ratio, rs = Median(r["fair/fifo"]), spread(r["fair/fifo"], 2)
		}
		fmt.Fprintf(w, "| a dispatch pass, %.0f queued jobs, %.0f dispatched (s) | fair share: %s | first in first out over the same queue: %s | %.2f ×%s | ≤ %.1f × | %s |\n",
			Median(r["queued"]), Median(r["dispatched/pass"]), fmtVals(r["fair-s"], 3), fmtVals(r["fifo-s"], 3),
			ratio, rs, TargetFairPassRatio, tb.verdict(ratio <= TargetFairPassRatio))
	} else {
		tb.missing("a dispatch pass, fair share beside FIFO", "DispatcherFairPass")
	}
	r := res["DispatcherFairness"]
	if has(r, "jain-index") {
		jain := Median(r["jain-index"])
		fmt.Fprintf(w, "| Jain's index of the backlogged accounts' started jobs | %s | – | %.3f | ≥ %.2f | %s |\n",
			fmtVals(r["jain-index"], 3), jain, TargetJainIndex, tb.verdict(jain >= TargetJainIndex))
	} else {
		tb.missing("Jain's index of the backlogged accounts' started jobs", "DispatcherFairness")
	}
	if has(r, "quiet-wait-slots") {
		// The dispatches are context: others' jobs handed to Nomad after the quiet
		// job's create and before it; the slots are what it waited for.
		slots := Median(r["quiet-wait-slots"])
		fmt.Fprintf(w, "| a quiet account's one job: others' jobs that took a slot between its create and its start | %s slots (others dispatched after its create, before it: %s) | – | %g slots | ≤ %d | %s |\n",
			fmtVals(r["quiet-wait-slots"], 0), fmtVals(r["quiet-wait-dispatches"], 0), slots, TargetQuietSlots, tb.verdict(slots <= TargetQuietSlots))
	} else {
		tb.missing("a quiet account's one job", "DispatcherFairness")
	}
	return tb.complete, tb.met
}

// E2EBenchmarks are the benchmarks of ./bench/e2e.
var E2EBenchmarks = []string{"Latency", "Throughput", "Webhooks"}

// The end-to-end targets: mediajobs may add at most 0.3 s to raw Nomad's median
// latency, complete at least 0.8 × raw Nomad's jobs per second, and deliver a
// webhook within 200 ms (median) of the job's terminal transition.
const (
	TargetAddedS    = 0.3
	TargetRatio     = 0.8
	TargetWebhookMS = 200
)

// E2ETable writes the end-to-end table.
func E2ETable(w io.Writer, res Result) (complete, met bool) {
	tb := newRows(w, 6)
	fmt.Fprintln(w, "| measure | mediajobs | baseline (same run) | figure | target | result |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---|")

	if l := res["Latency"]; has(l, "mj-p50-s", "nomad-p50-s", "added-p50-s") {
		added := Median(l["added-p50-s"])
		fmt.Fprintf(w, "| latency, one job at a time (s) | median %s, p95 %s | raw Nomad: median %s, p95 %s; ffmpeg alone: median %s | added %+.3f s%s | ≤ %.2f s | %s |\n",
			fmtVals(l["mj-p50-s"], 3), fmtVals(l["mj-p95-s"], 3), fmtVals(l["nomad-p50-s"], 3), fmtVals(l["nomad-p95-s"], 3),
			fmtVals(l["exec-p50-s"], 3), added, spread(l["added-p50-s"], 3), TargetAddedS, tb.verdict(added <= TargetAddedS))
	} else {
		tb.missing("latency", "Latency")
	}
	if t := res["Throughput"]; has(t, "mj-jobs/s", "nomad-jobs/s") {
		ratio, rs := Ratio(t["mj-jobs/s"], t["nomad-jobs/s"])
		cpu := ""
		if has(t, "mj-cpu-ms/job", "nomad-cpu-ms/job") {
			cpu = fmt.Sprintf("; CPU %s vs %s ms/job", fmtVals(t["mj-cpu-ms/job"], 0), fmtVals(t["nomad-cpu-ms/job"], 0))
		}
		fmt.Fprintf(w, "| throughput, jobs created at once (jobs/s) | %s | raw Nomad: %s%s | %.2f ×%s | ≥ %.2f × | %s |\n",
			fmtVals(t["mj-jobs/s"], 2), fmtVals(t["nomad-jobs/s"], 2), cpu, ratio, rs, TargetRatio, tb.verdict(ratio >= TargetRatio))
	} else {
		tb.missing("throughput", "Throughput")
	}
	if h := res["Webhooks"]; has(h, "deliveries/s", "p50-ms", "seq-p50-ms") {
		base := "–"
		if has(h, "send/s", "http/s") {
			base = fmt.Sprintf("webhook.Sender.Send alone: %s/s; plain net/http: %s/s", fmtVals(h["send/s"], 0), fmtVals(h["http/s"], 0))
		}
		p50 := Median(h["p50-ms"])
		fmt.Fprintf(w, "| webhooks, burst (all terminal at once) | %s deliveries/s; transition → receipt p50 %s ms, p95 %s ms | %s | p50 %.0f ms | ≤ %d ms | %s |\n",
			fmtVals(h["deliveries/s"], 0), fmtVals(h["p50-ms"], 0), fmtVals(h["p95-ms"], 0), base, p50, TargetWebhookMS, tb.verdict(p50 <= TargetWebhookMS))
		seq := Median(h["seq-p50-ms"])
		fmt.Fprintf(w, "| webhooks, sequential (one transition after another) | transition → receipt p50 %s ms, p95 %s ms | – | p50 %.1f ms | ≤ %d ms | %s |\n",
			fmtVals(h["seq-p50-ms"], 1), fmtVals(h["seq-p95-ms"], 1), seq, TargetWebhookMS, tb.verdict(seq <= TargetWebhookMS))
	} else {
		tb.missing("webhooks", "Webhooks")
	}
	return tb.complete, tb.met
}

// PipelineBenchmarks are issue 33's: creating a 100-step pipeline beside
// creating its jobs one by one (./bench, pipelines_test.go), from one client
// and from many; on Nomad (./bench/e2e, pipelines_test.go) a chain's edges on
// the per-job and the warm pool, and the worked ladder against its critical
// path. ./bench and ./bench/e2e may be reported alone: a row whose benchmarks
// are all absent is left out.
var PipelineBenchmarks = []string{"CreatePipelineSerial", "CreatePipelineJobsSerial", "CreatePipeline", "CreatePipelineJobs",
	"PipelineEdges", "PipelineEdgesWarm", "PipelineLadder"}

// The pipeline targets (issue 33): a chain of steps on warm runners takes at
// most 1.1 × its jobs' own POST → succeeded summed, and at most 0.1 s more per
// edge; the ladder at most 1.25 × its critical path. Creating a pipeline has
// no target.
const (
	TargetEdgeRatio   = 1.1
	TargetEdgeAddedS  = 0.1
	TargetLadderRatio = 1.25
)

// PipelineTable writes the pipelines table.
func PipelineTable(w io.Writer, res Result) (complete, met bool) {
	tb := newRows(w, 6)
	fmt.Fprintln(w, "| pipelines | measured | baseline (same run) | ratio | target | result |")
	fmt.Fprintln(w, "|---|---|---|---:|---:|---|")
	for _, c := range []struct{ what, subject, baseline string }{
		{"create a 100-step pipeline, one client", "CreatePipelineSerial", "CreatePipelineJobsSerial"},
		{"create a 100-step pipeline, 64 clients", "CreatePipeline", "CreatePipelineJobs"},
	} {
		s, b := res[c.subject], res[c.baseline]
		if s == nil && b == nil {
			continue
		}
		if !has(s, "ops/s", "allocs/op") || !has(b, "ops/s", "allocs/op") {
			tb.missing(c.what, c.subject+", Benchmark"+c.baseline)
			continue
		}
		ratio, rs := Ratio(s["ops/s"], b["ops/s"])
		allocs, as := Ratio(s["allocs/op"], b["allocs/op"])
		fmt.Fprintf(w, "| %s (per 100 jobs) | %s ops/s, %s allocs/op | 100 POST /api/ffmpeg in turn: %s ops/s, %s allocs/op | %.2f × the ops/s%s; %.2f × the allocs%s | – | – |\n",
			c.what, fmtVals(s["ops/s"], 2), fmtVals(s["allocs/op"], 0), fmtVals(b["ops/s"], 2), fmtVals(b["allocs/op"], 0), ratio, rs, allocs, as)
	}
	for _, c := range []struct{ what, bench string }{
		{"chain of 10 steps, per-job pool (s)", "PipelineEdges"},
		{"chain of 10 steps, warm pool (s)", "PipelineEdgesWarm"},
	} {
		r := res[c.bench]
		if r == nil {
			continue
		}
		if !has(r, "pipeline-s", "jobs-sum-s", "ratio", "added-per-edge-s") {
			tb.missing(c.what, c.bench)
			continue
		}
		ratio, added := Median(r["ratio"]), Median(r["added-per-edge-s"])
		target, verdict := "–", "–"
		if c.bench == "PipelineEdgesWarm" {
			target = fmt.Sprintf("≤ %.2f ×, ≤ %.2f s/edge", TargetEdgeRatio, TargetEdgeAddedS)
			verdict = tb.verdict(ratio <= TargetEdgeRatio && added <= TargetEdgeAddedS)
		}
		fmt.Fprintf(w, "| %s | POST → succeeded %s%s | the same jobs one by one, summed: %s | %.2f ×%s; %+.3f s/edge | %s | %s |\n",
			c.what, fmtVals(r["pipeline-s"], 2), releaseNote(r, "a step's end → the next one queued")+spanNote(r), fmtVals(r["jobs-sum-s"], 2),
			ratio, spread(r["ratio"], 2), added, target, verdict)
	}
	if r := res["PipelineLadder"]; r != nil {
		if has(r, "pipeline-s", "critical-s", "ratio") {
			ratio := Median(r["ratio"])
			fmt.Fprintf(w, "| the worked ladder, small (s) | POST → succeeded %s%s | critical path (slowest rendition + playlist, alone): %s; all its jobs in turn: %s | %.2f ×%s | ≤ %.2f × | %s |\n",
				fmtVals(r["pipeline-s"], 2), ladderNote(r), fmtVals(r["critical-s"], 2), fmtVals(r["jobs-sum-s"], 2), ratio, spread(r["ratio"], 2),
				TargetLadderRatio, tb.verdict(ratio <= TargetLadderRatio))
		} else {
			tb.missing("the worked ladder", "PipelineLadder")
		}
	}
	return tb.complete, tb.met
}

// releaseNote is "; <what>: <median release lag> s" when r reports one.
func releaseNote(r map[string][]float64, what string) string {
	if !has(r, "release-p50-s") {
		return ""
	}
	return fmt.Sprintf("; %s: %s s", what, fmtVals(r["release-p50-s"], 3))
}

// spanNote is each job's span (queued → finished) in the chain's pipeline and
// alone, when r reports them.
func spanNote(r map[string][]float64) string {
	if !has(r, "pipe-span-p50-s", "jobs-span-p50-s") {
		return ""
	}
	return fmt.Sprintf("; a job queued → finished: %s s (alone %s s)", fmtVals(r["pipe-span-p50-s"], 3), fmtVals(r["jobs-span-p50-s"], 3))
}

// ladderNote is where the ladder's time went, when r reports it.
func ladderNote(r map[string][]float64) string {
	if !has(r, "fanout-s", "rung-span-alone-s", "release-p50-s", "hls-span-s", "hls-span-alone-s", "end-s") {
		return releaseNote(r, "the last rendition's end → the playlist queued")
	}
	return fmt.Sprintf(": create → last rendition's end %s (slowest rendition alone, queued → finished: %s), → playlist queued %s, playlist queued → finished %s (alone %s), → pipeline's end %s",
		fmtVals(r["fanout-s"], 2), fmtVals(r["rung-span-alone-s"], 2), fmtVals(r["release-p50-s"], 3),
		fmtVals(r["hls-span-s"], 2), fmtVals(r["hls-span-alone-s"], 2), fmtVals(r["end-s"], 3))
}

// WarmBenchmarks are the warm-pool benchmarks of ./bench/e2e (warm_test.go).
var WarmBenchmarks = []string{"WarmLatency", "WarmBurst"}

// The warm-pool targets: a trivial job on a warm pool succeeds within 0.3 s of
// its POST (median), and a burst on the warm pool completes at least 2 × the jobs
// per second of raw Nomad dispatches at no more CPU per job.
const (
	TargetWarmP50S     = 0.3
	TargetWarmRatio    = 2
	TargetWarmCPURatio = 1
)

// WarmTable writes the warm-pool table: the warm pool beside the per-job pool and
// raw Nomad of the same run, each figure the median over the rounds and each
// ratio the median of the per-round ratios.
func WarmTable(w io.Writer, res Result) (complete, met bool) {
	tb := newRows(w, 7)
	fmt.Fprintln(w, "| warm pools | warm pool | per-job pool (same run) | raw Nomad (same run) | figure | target | result |")
	fmt.Fprintln(w, "|---|---|---|---|---:|---:|---|")
	if l := res["WarmLatency"]; has(l, "warm-p50-s", "nomad-p50-s") {
		p50 := Median(l["warm-p50-s"])
		ratio, rs := Ratio(l["warm-p50-s"], l["nomad-p50-s"])
		fmt.Fprintf(w, "| latency, one job at a time, POST → succeeded (s) | median %s, p95 %s | – | median %s, p95 %s | median %.3f s; %.2f × raw Nomad%s | ≤ %.2f s | %s |\n",
			fmtVals(l["warm-p50-s"], 3), fmtVals(l["warm-p95-s"], 3), fmtVals(l["nomad-p50-s"], 3), fmtVals(l["nomad-p95-s"], 3),
			p50, ratio, rs, TargetWarmP50S, tb.verdict(p50 <= TargetWarmP50S))
	} else {
		tb.missing("latency, one job at a time", "WarmLatency")
	}
	if t := res["WarmBurst"]; has(t, "warm-jobs/s", "nomad-jobs/s", "warm-cpu-ms/job", "nomad-cpu-ms/job") {
		jobs := "jobs"
		if n := Median(t["jobs"]); n > 0 {
			jobs = fmt.Sprintf("%.0f jobs", n)
		}
		share := ""
		if has(t, "warm-share-%") {
			share = fmt.Sprintf("; %s %% ran warm, the rest were dispatched", fmtVals(t["warm-share-%"], 0))
		}
		ratio, rs := Ratio(t["warm-jobs/s"], t["nomad-jobs/s"])
		fmt.Fprintf(w, "| burst, %s created at once (jobs/s) | %s%s | %s | %s | %.2f × raw Nomad%s | ≥ %.2f × | %s |\n", jobs,
			fmtVals(t["warm-jobs/s"], 2), share, fmtVals(t["mj-jobs/s"], 2), fmtVals(t["nomad-jobs/s"], 2),
			ratio, rs, float64(TargetWarmRatio), tb.verdict(ratio >= TargetWarmRatio))
		cpu, cs := Ratio(t["warm-cpu-ms/job"], t["nomad-cpu-ms/job"])
		fmt.Fprintf(w, "| burst: CPU of the whole machine per job (ms/job) | %s | %s | %s | %.2f × raw Nomad%s | ≤ %.2f × | %s |\n",
			fmtVals(t["warm-cpu-ms/job"], 0), fmtVals(t["mj-cpu-ms/job"], 0), fmtVals(t["nomad-cpu-ms/job"], 0),
			cpu, cs, float64(TargetWarmCPURatio), tb.verdict(cpu <= TargetWarmCPURatio))
	} else {
		tb.missing("burst, jobs created at once", "WarmBurst")
	}
	return tb.complete, tb.met
}

// The soak's bounds (BenchmarkSoak in ./bench/e2e, soak_test.go): the last third's
// median of the gateway's and the dispatcher's goroutines at most
// SoakGoroutineSlack above the first third's (less its first 3 minutes), and
// of their heap at most SoakHeapRatio × the first third's; checked from 12
// minutes of load on.
const (
	SoakGoroutineSlack = 50
	SoakHeapRatio      = 1.5
)

// SoakTable writes the soak's table: what ran, whether every job ended as its
// kind says, every webhook arrived once and nothing was left running, and the
// gateway's and dispatcher's goroutines and heap in the first and last thirds.
func SoakTable(w io.Writer, res Result) (complete, met bool) {
	tb := newRows(w, 4)
	r := res["Soak"]
	fmt.Fprintln(w, "| soak | figure | target | result |")
	fmt.Fprintln(w, "|---|---|---|---|")
	if !has(r, "jobs", "wrong-status", "webhook-faults", "left-running", "gw-goroutines-first", "gw-heap-MB-first") {
		tb.missing("soak", "Soak")
		return tb.complete, tb.met
	}
	v := func(unit string) float64 { return Median(r[unit]) }
	fmt.Fprintf(w, "| jobs, two accounts, %.0f min | %.0f jobs (%.2f/s): %.0f succeeded, %.0f failed, %.0f cancelled (%.0f before they started, %.0f running); %.0f ran warm, %.0f dispatched; %.0f client errors, %.0f with another status | every job terminal with its expected status | %s |\n",
		v("min"), v("jobs"), v("jobs/s"), v("succeeded"), v("failed"), v("cancelled"), v("cancelled-queued"), v("cancelled-running"),
		v("warm"), v("dispatched"), v("errors"), v("wrong-status"), tb.verdict(v("errors") == 0 && v("wrong-status") == 0))
	fmt.Fprintf(w, "| webhooks | %.0f received; %.0f faults (missing, repeated, another delivery id or event, left in the outbox) | exactly once per job | %s |\n",
		v("webhooks"), v("webhook-faults"), tb.verdict(v("webhook-faults") == 0))
	fmt.Fprintf(w, "| after the load | %s | no Nomad child pending or running, every warm runner waiting for work | %s |\n",
		map[bool]string{true: "quiet", false: "**work left running**"}[v("left-running") == 0], tb.verdict(v("left-running") == 0))
	// The bounds hold from 12 minutes of load on (soak_test.go, soakEnforceFrom);
	// a shorter run's figures are reported only.
	checked := v("flat-checked") == 1
	verdict := func(ok bool) string {
		if !checked {
			return "– (run under 12 min: reported only)"
		}
		return tb.verdict(ok)
	}
	for _, c := range []struct{ what, unit string }{{"gateway", "gw"}, {"dispatcher", "disp"}} {
		g0, g1 := v(c.unit+"-goroutines-first"), v(c.unit+"-goroutines-last")
		fmt.Fprintf(w, "| %s goroutines, median of the first → last third | %.0f → %.0f | ≤ +%d | %s |\n",
			c.what, g0, g1, SoakGoroutineSlack, verdict(g1 <= g0+SoakGoroutineSlack))
		h0, h1 := v(c.unit+"-heap-MB-first"), v(c.unit+"-heap-MB-last")
		fmt.Fprintf(w, "| %s heap (MB in use at the last GC, by allocating stack), median of the first → last third | %.2f → %.2f (%.2f ×) | ≤ %.1f × | %s |\n",
			c.what, h0, h1, h1/h0, SoakHeapRatio, verdict(h0 > 0 && h1 <= SoakHeapRatio*h0))
	}
	fmt.Fprintf(w, "| the gateway's job cache (up to 50,000 jobs or 256 MiB, by design) | heap %.2f → %.2f MB | – (reported) | – |\n",
		v("cache-heap-MB-first"), v("cache-heap-MB-last"))
	fmt.Fprintf(w, "| embedded etcd | goroutines %.0f → %.0f; heap %.1f → %.1f MB | – (reported) | – |\n",
		v("etcd-goroutines-first"), v("etcd-goroutines-last"), v("etcd-heap-MB-first"), v("etcd-heap-MB-last"))
	fmt.Fprintf(w, "| the whole process (gateway, dispatcher, embedded etcd, the load's clients) | goroutines %.0f → %.0f; live heap %.1f → %.1f MB | – (reported) | – |\n",
		v("proc-goroutines-first"), v("proc-goroutines-last"), v("proc-heap-MB-first"), v("proc-heap-MB-last"))
	return tb.complete, tb.met
}

// EtcdCostJobs are BenchmarkEtcdCost's sub-benchmarks (EtcdCost/<Name>).
var EtcdCostJobs = []struct{ Name, What string }{
	{"short", "short job (1 s testsrc → x264)"},
	{"60s", "60 s job with progress (-re)"},
}

// KeyKinds are the kinds of key BenchmarkEtcdCost reports apart (<kind>-B, <kind>-ev).
var KeyKinds = []string{"jobs", "progress", "idx", "sidx", "queue", "active", "outbox", "done", "dispatcher", "other"}

// EtcdCostTable writes what one job cost etcd: revisions, bytes and writes, in all
// and per kind of key ("bytes (writes)", medians over the rounds), and for a job
// that stored progress reports the old design's estimate beside it. It reports
// whether every job was found.
func EtcdCostTable(w io.Writer, res Result) (complete bool) {
	complete = true
	fmt.Fprint(w, "| job | create → delivered (s) | revisions | bytes | puts + deletes |")
	sep := "|---|---:|---:|---:|---:|"
	for _, k := range KeyKinds {
		fmt.Fprintf(w, " %s/ |", k)
		sep += "---:|"
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, sep)
	var olds, notes []string
	for _, j := range EtcdCostJobs {
		r := res["EtcdCost/"+j.Name]
		if !has(r, "revs", "B", "puts", "dels") {
			complete = false
			fmt.Fprintf(w, "| %s | missing (BenchmarkEtcdCost/%s) |\n", j.What, j.Name)
			continue
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s + %s |", j.What, fmtVals(r["s"], 1), fmtVals(r["revs"], 0), fmtVals(r["B"], 0),
			fmtVals(r["puts"], 0), fmtVals(r["dels"], 0))
		for _, k := range KeyKinds {
			fmt.Fprintf(w, " %s |", kindCell(Median(r[k+"-B"]), Median(r[k+"-ev"])))
		}
		fmt.Fprintln(w)
		if n := Median(r["progress-stored"]); n > 0 && has(r, "record-B", "old-B", "old-progress-B") {
			olds = append(olds, fmt.Sprintf("| %s, old design (estimate) | %s | %s | %s | – |", j.What, fmtVals(r["s"], 1),
				fmtVals(r["revs"], 0), fmtVals(r["old-B"], 0)))
			for _, k := range KeyKinds {
				switch k {
				case "jobs":
					olds[len(olds)-1] += " " + kindCell(Median(r["jobs-B"])+Median(r["old-progress-B"]), Median(r["jobs-ev"])+n) + " |"
				case "progress":
					olds[len(olds)-1] += " – |"
				default:
					olds[len(olds)-1] += " " + kindCell(Median(r[k+"-B"]), Median(r[k+"-ev"])) + " |"
				}
			}
			notes = append(notes, fmt.Sprintf("Old design, %s: progress reports stored: %.0f, each rewriting the job's key and record (its last before the end, the report in it: %.0f B) = %.0f B on jobs/, against %.0f B on progress/: %.0f B in all, %.1f × the measured; the same revisions.",
				j.What, n, Median(r["record-B"]), Median(r["old-progress-B"]), Median(r["progress-B"]), Median(r["old-B"]), Median(r["old-B"])/Median(r["B"])))
		}
	}
	for _, l := range olds {
		fmt.Fprintln(w, l)
	}
	for _, l := range notes {
		fmt.Fprintln(w)
		fmt.Fprintln(w, l)
	}
	return complete
}

// kindCell is "bytes (writes)", or "–" for none.
func kindCell(bytes, n float64) string {
	if n == 0 {
		return "–"
	}
	return fmt.Sprintf("%.0f (%.0f)", bytes, n)
}

func has(m map[string][]float64, units ...string) bool {
	for _, u := range units {
		if len(m[u]) == 0 {
			return false
		}
	}
	return true
}

// fmtVals is the median with prec decimals and, over several rounds, the range.
func fmtVals(vs []float64, prec int) string {
	if len(vs) == 0 {
		return "–"
	}
	return strconv.FormatFloat(Median(vs), 'f', prec, 64) + spread(vs, prec)
}

// spread is " (min–max)" over several rounds, "" for one.
func spread(vs []float64, prec int) string {
	if len(vs) < 2 {
		return ""
	}
	s := append([]float64(nil), vs...)
	sort.Float64s(s)
	sep := "–"
	if s[0] < 0 {
		sep = " to " // "-0.07–-0.06" reads badly
	}
	return " (" + strconv.FormatFloat(s[0], 'f', prec, 64) + sep + strconv.FormatFloat(s[len(s)-1], 'f', prec, 64) + ")"
}

func main() {
	strict := flag.Bool("strict", false, "exit 1 when a target is missed")
	quiet := flag.Bool("q", false, "do not echo the benchmark output")
	flag.Parse()
	var echo io.Writer = os.Stdout
	if *quiet {
		echo = nil
	}
	res, failed, err := Parse(os.Stdin, echo)
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
	fmt.Println()
	complete, met := Table(os.Stdout, res)
	switch {
	case failed:
		fmt.Fprintln(os.Stderr, "report: the benchmarks failed (FAIL in the output)")
		os.Exit(1)
	case !complete:
		fmt.Fprintln(os.Stderr, "report: a benchmark result is missing")
		os.Exit(1)
	case *strict && !met:
		fmt.Fprintln(os.Stderr, "report: a target was missed")
		os.Exit(1)
	}
}
