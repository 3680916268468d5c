package metrics_test

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

const observability = "../deploy/observability"

// The alert rules are valid (promtool check rules, as `make test` requires), and
// the trickier ones fire when they should (promtool test rules alerts_test.yml).
func TestAlertRules(t *testing.T) {
	promtool := testenv.Binary(t, "promtool")
	for _, args := range [][]string{{"check", "rules", "alerts.yml"}, {"test", "rules", "alerts_test.yml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = observability
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
}

// Every mediajobs_ series the alerts and the dashboard name is one this code
// exports, and the dashboard is a Grafana dashboard.
func TestObservabilityNamesExist(t *testing.T) {
	declared := map[string]bool{}
	decl := regexp.MustCompile(`Name:\s+"(mediajobs_[a-z_]+)"`)
	for _, src := range []string{"metrics.go", "../dispatcher/observe.go"} {
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		for _, m := range decl.FindAllStringSubmatch(string(b), -1) {
			declared[m[1]] = true
		}
	}
	if len(declared) < 25 {
		t.Fatalf("found only %d declared series: %v", len(declared), declared)
	}
	use := regexp.MustCompile(`mediajobs_[a-z_]+`)
	for _, f := range []string{"alerts.yml", "grafana-dashboard.json"} {
		b, err := os.ReadFile(filepath.Join(observability, f))
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, name := range use.FindAllString(string(b), -1) {
			base := name
			for _, suffix := range []string{"_bucket", "_sum", "_count"} {
				if s, ok := strings.CutSuffix(name, suffix); ok && declared[s] {
					base = s
				}
			}
			if !declared[base] {
				t.Errorf("%s names %s, which no collector declares", f, name)
			}
			n++
		}
		if n < 10 {
			t.Errorf("%s names only %d series", f, n)
		}
	}
	var dash struct {
		Title  string `json:"title"`
		Panels []struct {
			Type    string `json:"type"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, _ := os.ReadFile(filepath.Join(observability, "grafana-dashboard.json"))
	if err := json.Unmarshal(b, &dash); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	exprs := 0
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			if tg.Expr == "" {
				t.Errorf("a %s panel has an empty query", p.Type)
			}
			exprs++
		}
	}
	if dash.Title == "" || exprs < 20 {
		t.Fatalf("dashboard %q has %d queries", dash.Title, exprs)
	}
}

// Finished counts the job and observes its queue wait and run time, only for a
// job that started.
func TestFinished(t *testing.T) {
	pool := "finished-test"
	queued := time.Now().Add(-time.Minute)
	started, done := queued.Add(20*time.Second), queued.Add(50*time.Second)
	metrics.Finished(&mj.Job{Machine: pool, Status: mj.StatusSucceeded, QueuedAt: queued, StartedAt: &started, FinishedAt: &done})
	metrics.Finished(&mj.Job{Machine: pool, Status: mj.StatusCancelled, QueuedAt: queued, FinishedAt: &done})
	if v := testutil.ToFloat64(metrics.JobsFinished.WithLabelValues(pool, "succeeded")); v != 1 {
		t.Errorf("succeeded = %v", v)
	}
	if v := testutil.ToFloat64(metrics.JobsFinished.WithLabelValues(pool, "cancelled")); v != 1 {
		t.Errorf("cancelled = %v", v)
	}
	for name, want := range map[string]float64{"mediajobs_queue_wait_seconds": 20, "mediajobs_run_seconds": 30} {
		count, sum := histogram(t, name, pool)
		if count != 1 || sum != want {
			t.Errorf("%s{pool=%q}: count %d sum %v, want 1 and %v (the cancelled job never started)", name, pool, count, sum, want)
		}
	}
}

// histogram is the sample count and sum of a histogram's series for pool.
func histogram(t *testing.T, name, pool string) (uint64, float64) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "pool" && l.GetValue() == pool {
					return m.GetHistogram().GetSampleCount(), m.GetHistogram().GetSampleSum()
				}
			}
		}
	}
	return 0, 0
}
