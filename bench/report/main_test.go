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
