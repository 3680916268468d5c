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
BenchmarkCreateRawEtcd-2   	   10000	    103436 ns/op	     10000 ops/s	   51738 B/op	     538 allocs/op
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
	for _, want := range []string{"| CreateJob | 6000 (5000–9000, n=3) | CreateRawEtcd | 10000 | 0.60 | ≥ 0.50 | met |", "| 0.20 | ≥ 0.40 | **missed** |"} {
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
