// Command report reads `go test -bench` output of ./bench on stdin, echoes it, and
// prints a markdown table of each subject beside its baseline from the same run,
// with the ratio against its target. Throughputs are medians over the rounds; the
// ratio is the median of the per-round ratios (the i-th subject result over the
// i-th baseline result), so a round disturbed by other load on the machine counts
// once. Rounds pair best when each round runs all benchmarks back to back:
//
//	for i in 1 2 3; do go test -run '^$' -bench . -count=1 ./bench/; done | go run ./bench/report
//
// It exits 1 when the benchmark output says FAIL or a benchmark is missing, and,
// with -strict, when a ratio misses its target.
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

// Pairs are the comparisons of the issue: create vs raw etcd, GET vs bare fiber.
var Pairs = []Pair{
	{"create job", "CreateJob", "CreateRawEtcd", 0.5},
	{"get job", "GetJob", "GetBareFiber", 0.4},
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

// Table writes the markdown table and reports whether every pair was found and
// whether every target was met.
func Table(w io.Writer, res Result) (complete, met bool) {
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

func main() {
	strict := flag.Bool("strict", false, "exit 1 when a ratio misses its target")
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
