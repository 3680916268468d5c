package main

import (
	"strings"
	"testing"
)

const sample = `goos: linux
goarch: amd64
pkg: github.com/mediajobs/mediajobs/bench
cpu: AMD EPYC
BenchmarkCreateJob-2       	    6415	    183276 ns/op	      5000 ops/s	   71297 B/op	     794 allocs/op
BenchmarkCreateJob-2       	    6415	    183276 ns/op	      6000 ops/s	   71297 B/op	     794 allocs/op
BenchmarkCreateJob-2       	    6415	    183276 ns/op	      9000 ops/s	   71297 B/op	     794 allocs/op
BenchmarkCreateRawEtcd-2   	   10000	    103436 ns/op	      8000 ops/s	   51738 B/op	     538 allocs/op
BenchmarkGetJob-2          	    4318	    243577 ns/op	      4000 ops/s	   30612 B/op	     344 allocs/op
BenchmarkGetBareFiber-2    	   60061	     19984 ns/op	     20000 ops/s	    6547 B/op	      63 allocs/op
PASS
ok  	github.com/mediajobs/mediajobs/bench	12.691s
`

func TestParseAndTable(t *testing.T) {
	res, failed, err := Parse(strings.NewReader(sample), nil)
	if err != nil || failed {
		t.Fatal(err, failed)
	}
	if got := res["CreateJob"]["ops/s"]; len(got) != 3 || Median(got) != 6000 {
		t.Fatalf("CreateJob ops/s = %v", got)
	}
	if got := res["GetBareFiber"]["ns/op"]; len(got) != 1 || got[0] != 19984 {
		t.Fatalf("GetBareFiber ns/op = %v", got)
	}
	var out strings.Builder
	complete, met := Table(&out, res)
	if !complete || met {
		t.Fatalf("complete=%v met=%v\n%s", complete, met, out.String())
	}
	for _, want := range []string{"| CreateJob | 6000 (5000–9000, n=3) | CreateRawEtcd | 8000 | 0.75 | ≥ 0.70 | met |", "| 0.20 | ≥ 0.90 | **missed** |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
}

func TestFailAndMissing(t *testing.T) {
	res, failed, _ := Parse(strings.NewReader("BenchmarkGetJob-2 \t--- FAIL: BenchmarkGetJob-2\nFAIL\n"), nil)
	if !failed {
		t.Fatal("FAIL not seen")
	}
	if complete, _ := Table(&strings.Builder{}, res); complete {
		t.Fatal("empty result reported complete")
	}
}

func TestRatioPairsRounds(t *testing.T) {
	// Round 2 ran under load: both halves of the pair are low, the ratio is not.
	r, spread := Ratio([]float64{50, 20, 52}, []float64{100, 45, 100})
	if r != 0.5 || spread != " (0.44–0.52)" {
		t.Fatalf("Ratio = %v%q", r, spread)
	}
	if r, _ := Ratio([]float64{1, 2, 3}, []float64{4}); r != 0.5 {
		t.Fatalf("unpaired Ratio = %v", r)
	}
}

const e2eSample = `pkg: github.com/mediajobs/mediajobs/bench/e2e
BenchmarkLatency-2      	       1	60000000000 ns/op	        0.0100 added-p50-s	 0.07 exec-p50-s	 0.1 exec-p95-s	 0.76 mj-p50-s	 0.9 mj-p95-s	 0.75 nomad-p50-s	 0.8 nomad-p95-s
BenchmarkThroughput-2   	       1	75000000000 ns/op	 469 mj-cpu-ms/job	 4.0 mj-jobs/s	 22 mj-self-cpu-ms/job	 278 nomad-cpu-ms/job	 8.0 nomad-jobs/s
BenchmarkWebhooks-2     	       1	 2900000000 ns/op	 900 deliveries/s	 36000 http/s	 60 outbox-p50-ms	 520 p50-ms	 850 p95-ms	 9000 send/s	 4.6 seq-p50-ms	 10 seq-p95-ms	 4000 transitions/s
PASS
`

func TestE2ETable(t *testing.T) {
	res, failed, err := Parse(strings.NewReader(e2eSample), nil)
	if err != nil || failed {
		t.Fatal(err, failed)
	}
	var out strings.Builder
	complete, met := Table(&out, res)
	if !complete || met {
		t.Fatalf("complete=%v met=%v\n%s", complete, met, out.String())
	}
	if strings.Contains(out.String(), "CreateJob") {
		t.Errorf("gateway table printed without gateway results:\n%s", out.String())
	}
	for _, want := range []string{
		"| added +0.010 s | ≤ 0.30 s | met |",
		"| 0.50 × | ≥ 0.80 × | **missed** |",
		"| p50 520 ms | ≤ 200 ms | **missed** |",
		"| p50 4.6 ms | ≤ 200 ms | met |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	// Both suites in one input: both tables; one e2e benchmark missing: incomplete.
	both := sample + strings.Replace(e2eSample, "BenchmarkWebhooks", "BenchmarkOther", 1)
	res, _, _ = Parse(strings.NewReader(both), nil)
	out.Reset()
	if complete, _ := Table(&out, res); complete {
		t.Fatalf("missing Webhooks reported complete:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "CreateJob") || !strings.Contains(out.String(), "missing (BenchmarkWebhooks)") {
		t.Errorf("tables:\n%s", out.String())
	}
}

const etcdCostSample = `BenchmarkEtcdCost/short-2         	       1	10551577777 ns/op	      7922 B	       198.0 active-B	         2.000 active-ev	         6.000 dels	       175.0 dispatcher-B	         5.000 dispatcher-ev	       108.0 done-B	         1.000 done-ev	         0 foreign-revs	       113.0 idx-B	         1.000 idx-ev	      6190 jobs-B	         6.000 jobs-ev	      8672 old-B	      1043 old-progress-B	         0 other-B	         0 other-ev	       117.0 outbox-B	         2.000 outbox-ev	       293.0 progress-B	         2.000 progress-ev	         1.000 progress-stored	        20.00 puts	       190.0 queue-B	         2.000 queue-ev	      1043 record-B	        12.00 revs	         2.474 s	       538.0 sidx-B	         5.000 sidx-ev
BenchmarkEtcdCost/60s-2           	       1	68518884740 ns/op	     11701 B	       198.0 active-B	         2.000 active-ev	         6.000 dels	       210.0 dispatcher-B	         6.000 dispatcher-ev	       108.0 done-B	         1.000 done-ev	         0 foreign-revs	       113.0 idx-B	         1.000 idx-ev	      6181 jobs-B	         6.000 jobs-ev	     24551 old-B	     16896 old-progress-B	         0 other-B	         0 other-ev	       117.0 outbox-B	         2.000 outbox-ev	      4046 progress-B	        17.00 progress-ev	        16.00 progress-stored	        36.00 puts	       190.0 queue-B	         2.000 queue-ev	      1056 record-B	        28.00 revs	        60.46 s	       538.0 sidx-B	         5.000 sidx-ev
`

func TestEtcdCostTable(t *testing.T) {
	res, failed, err := Parse(strings.NewReader(etcdCostSample), nil)
	if err != nil || failed {
		t.Fatal(err, failed)
	}
	var out strings.Builder
	if complete, _ := Table(&out, res); !complete {
		t.Fatalf("incomplete:\n%s", out.String())
	}
	if strings.Contains(out.String(), "CreateJob") || strings.Contains(out.String(), "latency") {
		t.Errorf("other suites' tables printed:\n%s", out.String())
	}
	for _, want := range []string{
		"| 60 s job with progress (-re) | 60.5 | 28 | 11701 | 36 + 6 | 6181 (6) | 4046 (17) | 113 (1) | 538 (5) | 190 (2) | 198 (2) | 117 (2) | 108 (1) | 210 (6) | – |",
		"| 60 s job with progress (-re), old design (estimate) | 60.5 | 28 | 24551 | – | 23077 (22) | – |",
		"progress reports stored: 16, each rewriting the job's key and record (its last before the end, the report in it: 1056 B) = 16896 B on jobs/",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	// With the end-to-end suite: both tables; one job missing: incomplete.
	res, _, _ = Parse(strings.NewReader(e2eSample+strings.Split(etcdCostSample, "\n")[0]), nil)
	out.Reset()
	if complete, _ := Table(&out, res); complete {
		t.Fatalf("missing EtcdCost/60s reported complete:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "latency") || !strings.Contains(out.String(), "missing (BenchmarkEtcdCost/60s)") {
		t.Errorf("tables:\n%s", out.String())
	}
}

const transferSample = `pkg: github.com/mediajobs/mediajobs/bench
BenchmarkTransfer-2   	       2	2252953411 ns/op	       300.0 gw-file-cpu-ms/GB	         0.6000 gw-s3-cpu-ms/GB	       633.3 mjfile-cpu-ms/GB	      2764 mjfile-down-MB/s	 400001487 mjfile-gw-B	      2162 mjfile-up-MB/s	       327.0 mjs3-cpu-ms/GB	      1600 mjs3-down-MB/s	      1186 mjs3-gw-B	      1475 mjs3-minio-cpu-ms/GB	       450.0 mjs3-up-MB/s	       599.5 sdk-cpu-ms/GB	      2000 sdk-down-MB/s	      1775 sdk-minio-cpu-ms/GB	       300.0 sdk-up-MB/s	       321.5 sdku-cpu-ms/GB	      1742 sdku-down-MB/s	      1538 sdku-minio-cpu-ms/GB	       500.0 sdku-up-MB/s
BenchmarkTransfer-2   	       2	2252953411 ns/op	       200.0 gw-file-cpu-ms/GB	         0.4000 gw-s3-cpu-ms/GB	       633.3 mjfile-cpu-ms/GB	      2764 mjfile-down-MB/s	 400001487 mjfile-gw-B	      2162 mjfile-up-MB/s	       327.0 mjs3-cpu-ms/GB	      1600 mjs3-down-MB/s	      1186 mjs3-gw-B	      1475 mjs3-minio-cpu-ms/GB	       450.0 mjs3-up-MB/s	       599.5 sdk-cpu-ms/GB	      1600 sdk-down-MB/s	      1775 sdk-minio-cpu-ms/GB	       500.0 sdk-up-MB/s	       321.5 sdku-cpu-ms/GB	      1742 sdku-down-MB/s	      1538 sdku-minio-cpu-ms/GB	       500.0 sdku-up-MB/s
BenchmarkTransfer-2   	       2	2252953411 ns/op	       300.0 gw-file-cpu-ms/GB	         0.3000 gw-s3-cpu-ms/GB	       633.3 mjfile-cpu-ms/GB	      2764 mjfile-down-MB/s	 400001487 mjfile-gw-B	      2162 mjfile-up-MB/s	       327.0 mjs3-cpu-ms/GB	      1600 mjs3-down-MB/s	      1186 mjs3-gw-B	      1475 mjs3-minio-cpu-ms/GB	       450.0 mjs3-up-MB/s	       599.5 sdk-cpu-ms/GB	      1600 sdk-down-MB/s	      1775 sdk-minio-cpu-ms/GB	       600.0 sdk-up-MB/s	       321.5 sdku-cpu-ms/GB	      1742 sdku-down-MB/s	      1538 sdku-minio-cpu-ms/GB	       500.0 sdku-up-MB/s
PASS
`

func TestTransferTable(t *testing.T) {
	res, failed, err := Parse(strings.NewReader(transferSample), nil)
	if err != nil || failed {
		t.Fatal(err, failed)
	}
	var out strings.Builder
	complete, met := Table(&out, res)
	// Upload per round: 450/300, 450/500, 450/600: median 0.90, met; download:
	// 1600/2000, 1600/1600, 1600/1600: median 1.00.
	if !complete || !met {
		t.Fatalf("complete=%v met=%v\n%s", complete, met, out.String())
	}
	if strings.Contains(out.String(), "CreateJob") || strings.Contains(out.String(), "latency") {
		t.Errorf("other suites' tables printed:\n%s", out.String())
	}
	for _, want := range []string{
		"| upload (PUT) | 450 (450–450) | 500 (300–600) | 0.90 × (0.75–1.50) | ≥ 0.90 × | met | 500 (500–500) (mediajobs: 0.90 ×) | 2162 (2162–2162) |",
		"| download (GET) | 1600 (1600–1600) | 1600 (1600–2000) | 1.00 × (0.80–1.00) | ≥ 0.90 × | met |",
		"| the gateway's CPU (ms/GB) | 0.40 (0.30–0.60) (0.20 % of file mode, 0.10–0.20 %) | – | 300 (200–300) | ≤ 1 % of file mode | met |",
		"| bytes through the gateway per 200 MB up and down | 1186 (1186–1186) | – | 400001487 (400001487–400001487) | < 65536 | met |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	// A slow upload misses the target; without the CPU figures the table is incomplete.
	slow := strings.ReplaceAll(transferSample, "450.0 mjs3-up-MB/s", "250.0 mjs3-up-MB/s")
	res, _, _ = Parse(strings.NewReader(slow), nil)
	out.Reset()
	if _, met := Table(&out, res); met {
		t.Fatalf("slow upload reported met:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "| ≥ 0.90 × | **missed** |") {
		t.Errorf("table:\n%s", out.String())
	}
	partial := strings.ReplaceAll(transferSample, "gw-s3-cpu-ms/GB", "other")
	res, _, _ = Parse(strings.NewReader(partial), nil)
	out.Reset()
	if complete, _ := Table(&out, res); complete {
		t.Fatalf("missing gw-s3-cpu-ms/GB reported complete:\n%s", out.String())
	}

	// With the gateway suite: both tables, the gateway's first.
	res, _, _ = Parse(strings.NewReader(sample+transferSample), nil)
	out.Reset()
	Table(&out, res)
	if g, tr := strings.Index(out.String(), "CreateJob"), strings.Index(out.String(), "upload (PUT)"); g < 0 || tr < g {
		t.Errorf("tables:\n%s", out.String())
	}
}

const scaleSample = `pkg: github.com/mediajobs/mediajobs/dispatcher
BenchmarkDispatcherReconcile-2   	       1	10907879770 ns/op	     10000 jobs	       152.0 new-nomad-calls	         0.7258 new-s	     20201 old-nomad-calls	        10.16 old-s
BenchmarkDispatcherEvents-2      	       1	41548091194 ns/op	     40000 events	      8778 new-events/s	      1528 old-events/s
BenchmarkDispatcherReconcile-2   	       1	10907879770 ns/op	     10000 jobs	       152.0 new-nomad-calls	         0.8 new-s	     20201 old-nomad-calls	        8 old-s
BenchmarkDispatcherEvents-2      	       1	41548091194 ns/op	     40000 events	      4000 new-events/s	      1000 old-events/s
PASS
`

func TestScaleTable(t *testing.T) {
	res, failed, err := Parse(strings.NewReader(scaleSample), nil)
	if err != nil || failed {
		t.Fatal(err, failed)
	}
	var out strings.Builder
	complete, met := Table(&out, res)
	if !complete || !met {
		t.Fatalf("complete=%v met=%v\n%s", complete, met, out.String())
	}
	for _, want := range []string{
		"| reconcile pass, 10000 active jobs (s) | 0.76 (0.73–0.80) | 9.08 (8.00–10.16); Nomad requests 152 (152–152) vs 20201 (20201–20201) | 12.0 × (10.00–14.00) | ≤ 2 s | met |",
		"| Nomad events applied (events/s, 40000 events) | 6389 (4000–8778) | 1264 (1000–1528) | 4.9 × (4.00–5.74) | ≥ 5000/s | met |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "CreateJob") {
		t.Errorf("the gateway table printed without its results:\n%s", out.String())
	}
}

func TestScaleTableMissing(t *testing.T) {
	res, _, _ := Parse(strings.NewReader("BenchmarkDispatcherEvents-2 \t 1\t 1 ns/op\t 40000 events\t 4000 new-events/s\t 1000 old-events/s\n"), nil)
	var out strings.Builder
	complete, met := Table(&out, res)
	if complete || met || !strings.Contains(out.String(), "missing (BenchmarkDispatcherReconcile)") || !strings.Contains(out.String(), "**missed**") {
		t.Fatalf("complete=%v met=%v\n%s", complete, met, out.String())
	}
}

const warmSample = `pkg: github.com/mediajobs/mediajobs/bench/e2e
BenchmarkWarmLatency-2   	       1	48894229430 ns/op	         1.05 nomad-p50-s	         1.06 nomad-p95-s	         0.25 warm-p50-s	         0.31 warm-p95-s
BenchmarkWarmBurst-2     	       1	106360414310 ns/op	       200.0 jobs	       380 mj-cpu-ms/job	         5.0 mj-jobs/s	        27.12 mj-self-cpu-ms/job	       200 nomad-cpu-ms/job	         8.0 nomad-jobs/s	       150 warm-cpu-ms/job	        18.0 warm-jobs/s	        31.57 warm-self-cpu-ms/job	       100 warm-share-%
BenchmarkWarmLatency-2   	       1	48894229430 ns/op	         1.05 nomad-p50-s	         1.06 nomad-p95-s	         0.35 warm-p50-s	         0.41 warm-p95-s
BenchmarkWarmBurst-2     	       1	106360414310 ns/op	       200.0 jobs	       380 mj-cpu-ms/job	         5.0 mj-jobs/s	        27.12 mj-self-cpu-ms/job	       200 nomad-cpu-ms/job	        10.0 nomad-jobs/s	       250 warm-cpu-ms/job	        15.0 warm-jobs/s	        31.57 warm-self-cpu-ms/job	        90 warm-share-%
BenchmarkWarmLatency-2   	       1	48894229430 ns/op	         1.05 nomad-p50-s	         1.06 nomad-p95-s	         0.20 warm-p50-s	         0.30 warm-p95-s
BenchmarkWarmBurst-2     	       1	106360414310 ns/op	       200.0 jobs	       380 mj-cpu-ms/job	         5.0 mj-jobs/s	        27.12 mj-self-cpu-ms/job	       200 nomad-cpu-ms/job	         9.0 nomad-jobs/s	       190 warm-cpu-ms/job	        20.0 warm-jobs/s	        31.57 warm-self-cpu-ms/job	        95 warm-share-%
PASS
`

func TestWarmTable(t *testing.T) {
	res, failed, err := Parse(strings.NewReader(warmSample), nil)
	if err != nil || failed {
		t.Fatal(err, failed)
	}
	var out strings.Builder
	complete, met := Table(&out, res)
	// Latency: median of 0.25, 0.35, 0.20 = 0.25 s, met. Burst per round: 18/8,
	// 15/10, 20/9: median 2.22 ×, met; CPU 150/200, 250/200, 190/200: median 0.95 ×.
	if !complete || !met {
		t.Fatalf("complete=%v met=%v\n%s", complete, met, out.String())
	}
	if strings.Contains(out.String(), "CreateJob") || strings.Contains(out.String(), "throughput, jobs created at once") {
		t.Errorf("other suites' tables printed:\n%s", out.String())
	}
	for _, want := range []string{
		"| latency, one job at a time, POST → succeeded (s) | median 0.250 (0.200–0.350), p95 0.310 (0.300–0.410) | – | median 1.050 (1.050–1.050), p95 1.060 (1.060–1.060) | median 0.250 s; 0.24 × raw Nomad (0.19–0.33) | ≤ 0.30 s | met |",
		"| burst, 200 jobs created at once (jobs/s) | 18.00 (15.00–20.00); 95 (90–100) % ran warm, the rest were dispatched | 5.00 (5.00–5.00) | 9.00 (8.00–10.00) | 2.22 × raw Nomad (1.50–2.25) | ≥ 2.00 × | met |",
		"| burst: CPU of the whole machine per job (ms/job) | 190 (150–250) | 380 (380–380) | 200 (200–200) | 0.95 × raw Nomad (0.75–1.25) | ≤ 1.00 × | met |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	// A slow warm latency and a dearer burst miss their targets.
	slow := strings.NewReplacer("0.25 warm-p50-s", "0.45 warm-p50-s", "0.20 warm-p50-s", "0.40 warm-p50-s", "150 warm-cpu-ms/job", "450 warm-cpu-ms/job",
		"190 warm-cpu-ms/job", "390 warm-cpu-ms/job").Replace(warmSample)
	res, _, _ = Parse(strings.NewReader(slow), nil)
	out.Reset()
	if _, met := Table(&out, res); met {
		t.Fatalf("slow warm pool reported met:\n%s", out.String())
	}
	for _, want := range []string{"| ≤ 0.30 s | **missed** |", "| 2.22 × raw Nomad (1.50–2.25) | ≥ 2.00 × | met |", "| ≤ 1.00 × | **missed** |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	// With the rest of the end-to-end suite: both tables; the burst missing: incomplete.
	res, _, _ = Parse(strings.NewReader(e2eSample+strings.Split(warmSample, "\n")[1]), nil)
	out.Reset()
	if complete, _ := Table(&out, res); complete {
		t.Fatalf("missing WarmBurst reported complete:\n%s", out.String())
	}
	if !strings.Contains(out.String(), "throughput, jobs created at once") || !strings.Contains(out.String(), "missing (BenchmarkWarmBurst)") {
		t.Errorf("tables:\n%s", out.String())
	}
}

const fairSample = `pkg: github.com/mediajobs/mediajobs/dispatcher
BenchmarkDispatcherFairPass-2   	       1	 265984009 ns/op	       256.0 dispatched/pass	         0.2000 fair-s	         1.000 fair/fifo	         0.2000 fifo-s	     10000 queued
BenchmarkDispatcherFairness-2   	       1	2768377665 ns/op	         0.990 jain-index	         2.000 quiet-wait-dispatches	         1.000 quiet-wait-slots
BenchmarkDispatcherFairPass-2   	       1	 265984009 ns/op	       256.0 dispatched/pass	         0.2500 fair-s	         1.250 fair/fifo	         0.2000 fifo-s	     10000 queued
BenchmarkDispatcherFairness-2   	       1	2768377665 ns/op	         1.000 jain-index	         1.000 quiet-wait-dispatches	         0.000 quiet-wait-slots
BenchmarkDispatcherFairPass-2   	       1	 265984009 ns/op	       256.0 dispatched/pass	         0.2600 fair-s	         1.300 fair/fifo	         0.2000 fifo-s	     10000 queued
BenchmarkDispatcherFairness-2   	       1	2768377665 ns/op	         0.980 jain-index	         2.000 quiet-wait-dispatches	         1.000 quiet-wait-slots
PASS
`

func TestFairTable(t *testing.T) {
	res, failed, err := Parse(strings.NewReader(fairSample), nil)
	if err != nil || failed {
		t.Fatal(err, failed)
	}
	var out strings.Builder
	complete, met := Table(&out, res)
	if !complete || !met {
		t.Fatalf("complete=%v met=%v\n%s", complete, met, out.String())
	}
	if strings.Contains(out.String(), "CreateJob") || strings.Contains(out.String(), "reconcile pass") {
		t.Errorf("other suites' tables printed:\n%s", out.String())
	}
	for _, want := range []string{
		"| a dispatch pass, 10000 queued jobs, 256 dispatched (s) | fair share: 0.250 (0.200–0.260) | first in first out over the same queue: 0.200 (0.200–0.200) | 1.25 × (1.00–1.30) | ≤ 1.5 × | met |",
		"| Jain's index of the backlogged accounts' started jobs | 0.990 (0.980–1.000) | – | 0.990 | ≥ 0.95 | met |",
		"| 1 (0–1) slots (others dispatched after its create, before it: 2 (1–2)) | – | 1 slots | ≤ 1 | met |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	// A dearer pass, an unfair share and a longer wait miss their targets.
	slow := strings.NewReplacer("1.250 fair/fifo", "1.600 fair/fifo", "1.300 fair/fifo", "1.700 fair/fifo",
		"0.990 jain-index", "0.900 jain-index", "1.000 jain-index", "0.800 jain-index",
		"0.000 quiet-wait-slots", "3.000 quiet-wait-slots", "1.000 quiet-wait-slots", "2.000 quiet-wait-slots").Replace(fairSample)
	res, _, _ = Parse(strings.NewReader(slow), nil)
	out.Reset()
	if complete, met := Table(&out, res); !complete || met {
		t.Fatalf("complete=%v met=%v\n%s", complete, met, out.String())
	}
	for _, want := range []string{"| 1.60 × (1.00–1.70) | ≤ 1.5 × | **missed** |", "| 0.900 | ≥ 0.95 | **missed** |", "| 2 slots | ≤ 1 | **missed** |"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}

	// With the scale benchmarks, as make bench's -bench Dispatcher runs them: both
	// tables, the scale one first; the fairness benchmark missing: incomplete.
	res, _, _ = Parse(strings.NewReader(scaleSample+strings.Split(fairSample, "\n")[1]), nil)
	out.Reset()
	if complete, _ := Table(&out, res); complete {
		t.Fatalf("missing DispatcherFairness reported complete:\n%s", out.String())
	}
	s, f := strings.Index(out.String(), "reconcile pass"), strings.Index(out.String(), "a dispatch pass, 10000 queued jobs")
	if s < 0 || f < s || !strings.Contains(out.String(), "missing (BenchmarkDispatcherFairness)") || strings.Contains(out.String(), "CreateJob") {
		t.Errorf("tables:\n%s", out.String())
	}
}

const soakSample = `pkg: github.com/mediajobs/mediajobs/bench/e2e
BenchmarkSoak-2   	       1	900000000000 ns/op	       0.5000 cache-heap-MB-first	       2.000 cache-heap-MB-last	         0 cancelled-queued	        10.00 cancelled-running	        30.00 cancelled	       3.000 disp-goroutines-first	       4.000 disp-goroutines-last	       2.000 disp-heap-MB-first	       2.500 disp-heap-MB-last	        60.00 dispatched	         0 errors	       150.0 etcd-goroutines-first	       151.0 etcd-goroutines-last	        20.00 etcd-heap-MB-first	        30.00 etcd-heap-MB-last	        20.00 failed	         1.000 flat-checked	        12.00 gw-goroutines-first	        20.00 gw-goroutines-last	       4.000 gw-heap-MB-first	       5.000 gw-heap-MB-last	       120.0 jobs	         1.000 jobs/s	         0 left-running	      15.00 min	       300.0 proc-goroutines-first	       310.0 proc-goroutines-last	        40.00 proc-heap-MB-first	        50.00 proc-heap-MB-last	        60.00 samples	        70.00 succeeded	        60.00 warm	       120.0 webhook-faults	       120.0 webhooks	         0 wrong-status
PASS
`

func TestSoakTable(t *testing.T) {
	res, failed, err := Parse(strings.NewReader(soakSample), nil)
	if err != nil || failed {
		t.Fatal(err, failed)
	}
	var out strings.Builder
	complete, met := Table(&out, res)
	// 120 webhook faults: missed; the rest is met, and no other suite's table.
	if !complete || met {
		t.Fatalf("complete=%v met=%v\n%s", complete, met, out.String())
	}
	for _, want := range []string{
		"| jobs, two accounts, 15 min | 120 jobs (1.00/s): 70 succeeded, 20 failed, 30 cancelled (0 before they started, 10 running); 60 ran warm, 60 dispatched; 0 client errors, 0 with another status | every job terminal with its expected status | met |",
		"| webhooks | 120 received; 120 faults",
		"| exactly once per job | **missed** |",
		"| gateway goroutines, median of the first → last third | 12 → 20 | ≤ +50 | met |",
		"| dispatcher heap (MB in use at the last GC, by allocating stack), median of the first → last third | 2.00 → 2.50 (1.25 ×) | ≤ 1.5 × | met |",
		"| the gateway's job cache (up to 50,000 jobs or 256 MiB, by design) | heap 0.50 → 2.00 MB | – (reported) | – |",
		"| embedded etcd | goroutines 150 → 151; heap 20.0 → 30.0 MB |",
		"goroutines 300 → 310; live heap 40.0 → 50.0 MB",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "CreateJob") {
		t.Errorf("the gateway table printed:\n%s", out.String())
	}
	// A heap that doubled misses its bound; in a run too short to check it, it is reported only.
	grown := strings.Replace(soakSample, "5.000 gw-heap-MB-last", "9.000 gw-heap-MB-last", 1)
	res, _, _ = Parse(strings.NewReader(grown), nil)
	out.Reset()
	Table(&out, res)
	if !strings.Contains(out.String(), "| 4.00 → 9.00 (2.25 ×) | ≤ 1.5 × | **missed** |") {
		t.Errorf("table:\n%s", out.String())
	}
	res, _, _ = Parse(strings.NewReader(strings.Replace(grown, "1.000 flat-checked", "0 flat-checked", 1)), nil)
	out.Reset()
	Table(&out, res)
	if !strings.Contains(out.String(), "| 4.00 → 9.00 (2.25 ×) | ≤ 1.5 × | – (run under 12 min: reported only) |") {
		t.Errorf("table:\n%s", out.String())
	}
}

const pipelineSample = `pkg: github.com/mediajobs/mediajobs/bench
BenchmarkCreatePipelineSerial-2       	      63	  65957459 ns/op	     34645 cpu-µs/op	       100.0 jobs/op	        15.00 ops/s	 8219051 B/op	   60000 allocs/op
BenchmarkCreatePipelineJobsSerial-2   	       9	 298270953 ns/op	    130553 cpu-µs/op	       100.0 jobs/op	         3.000 ops/s	12120121 B/op	  120000 allocs/op
pkg: github.com/mediajobs/mediajobs/bench/e2e
BenchmarkPipelineEdges-2       	       1	21293886610 ns/op	        -0.007 added-per-edge-s	        10.68 jobs-sum-s	        10.61 pipeline-s	         0.99 ratio	        10.00 steps
BenchmarkPipelineEdgesWarm-2   	       1	6169727520 ns/op	        0.2 added-per-edge-s	         3.0 jobs-sum-s	         4.8 pipeline-s	         1.6 ratio	        10.00 steps	       100.0 warm-share-%	 0.021 release-p50-s
BenchmarkPipelineLadder-2      	       1	25448394374 ns/op	         9.278 critical-s	        16.42 jobs-sum-s	         9.024 pipeline-s	         0.97 ratio	 1.5 end-s	 5.0 fanout-s	 2.0 hls-span-alone-s	 2.5 hls-span-s	 0.016 release-p50-s	 1.0 rung-span-alone-s
PASS
`

func TestPipelineTable(t *testing.T) {
	res, failed, err := Parse(strings.NewReader(pipelineSample), nil)
	if err != nil || failed {
		t.Fatal(err, failed)
	}
	var out strings.Builder
	complete, met := Table(&out, res)
	// The warm chain misses both of its targets; the rows of the 64-client
	// create, absent from the input, are left out.
	if !complete || met {
		t.Fatalf("complete=%v met=%v\n%s", complete, met, out.String())
	}
	for _, want := range []string{
		"| create a 100-step pipeline, one client (per 100 jobs) | 15.00 ops/s, 60000 allocs/op | 100 POST /api/ffmpeg in turn: 3.00 ops/s, 120000 allocs/op | 5.00 × the ops/s; 0.50 × the allocs | – | – |",
		"| chain of 10 steps, per-job pool (s) | POST → succeeded 10.61 | the same jobs one by one, summed: 10.68 | 0.99 ×; -0.007 s/edge | – | – |",
		"| 1.60 ×; +0.200 s/edge | ≤ 1.10 ×, ≤ 0.10 s/edge | **missed** |",
		"| chain of 10 steps, warm pool (s) | POST → succeeded 4.80; a step's end → the next one queued: 0.021 s |",
		"| 0.97 × | ≤ 1.25 × | met |",
		"| POST → succeeded 9.02: create → last rendition's end 5.00 (slowest rendition alone, queued → finished: 1.00), → playlist queued 0.016, playlist queued → finished 2.50 (alone 2.00), → pipeline's end 1.500 |",
	} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("table lacks %q:\n%s", want, out.String())
		}
	}
	if strings.Contains(out.String(), "64 clients") || strings.Contains(out.String(), "CreateJob") {
		t.Errorf("a row or table without results printed:\n%s", out.String())
	}
	// Half a pair is a missing result.
	res, _, _ = Parse(strings.NewReader(strings.Replace(pipelineSample, "BenchmarkCreatePipelineJobsSerial", "BenchmarkOther", 1)), nil)
	out.Reset()
	if complete, _ := Table(&out, res); complete || !strings.Contains(out.String(), "missing (BenchmarkCreatePipelineSerial, BenchmarkCreatePipelineJobsSerial)") {
		t.Errorf("complete=%v\n%s", complete, out.String())
	}
}
