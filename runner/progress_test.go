package runner

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func TestParseDuration(t *testing.T) {
	for in, want := range map[string]float64{"12.5": 12.5, "01:02": 62, "1:00:01.5": 3601.5, "x": 0, "-3": 0} {
		if got := parseDuration(in); got != want {
			t.Errorf("parseDuration(%q) = %v, want %v", in, got, want)
		}
	}
	if d := (&Runner{WorkDir: t.TempDir()}).expectedDuration(context.Background(), []string{"-f", "lavfi", "-i", "testsrc", "-t", "00:00:20", "o.mp4"}); d != 20 {
		t.Errorf("-t after -i: %v", d)
	}
	if d := (&Runner{WorkDir: t.TempDir()}).expectedDuration(context.Background(), []string{"-t", "5", "-i", "x:y", "o.mp4"}); d != 0 {
		t.Errorf("-t before -i (an input option) taken as the output length: %v", d)
	}
}

func TestReporterComputesPercentAndETA(t *testing.T) {
	now := time.Unix(100, 0)
	p := &reporter{index: 2, count: 3, duration: 20, now: func() time.Time { return now }}
	pr := p.progress(map[string]string{"out_time_us": "5000000", "fps": "25.0", "speed": "2.5x", "progress": "continue"})
	if *pr.Percent != 25 || *pr.ETASeconds != 6 || pr.FPS != 25 || pr.Speed != 2.5 || pr.CommandIndex != 2 || pr.CommandCount != 3 || pr.OutTimeSeconds != 5 {
		t.Fatalf("progress %+v (percent %v eta %v)", pr, *pr.Percent, *pr.ETASeconds)
	}
	if end := p.progress(map[string]string{"out_time_us": "19900000", "progress": "end"}); *end.Percent != 100 {
		t.Fatalf("end percent %v", *end.Percent)
	}
	unknown := (&reporter{now: p.now}).progress(map[string]string{"out_time_us": "1000000", "progress": "continue"})
	if unknown.Percent != nil || unknown.ETASeconds != nil {
		t.Fatalf("percent without a known duration: %+v", unknown)
	}
	// Reports are rate-limited: with the clock standing still, five blocks post
	// once, and the final "end" block posts regardless.
	var posts atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { posts.Add(1) }))
	defer srv.Close()
	p2 := &reporter{url: srv.URL, client: srv.Client(), duration: 10, now: func() time.Time { return now }}
	p2.read(context.Background(), strings.NewReader(strings.Repeat("out_time_us=1000000\nprogress=continue\n", 5)))
	if posts.Load() != 1 {
		t.Fatalf("%d posts for 5 blocks within %s, want 1", posts.Load(), progressEvery)
	}
	p2.read(context.Background(), strings.NewReader("out_time_us=9000000\nprogress=end\n"))
	if posts.Load() != 2 {
		t.Fatalf("the end block was not posted (%d posts)", posts.Load())
	}
}
