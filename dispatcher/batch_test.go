package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/testenv"
)

func TestGroupBatchesWhileBusyAndRoutesOutcomes(t *testing.T) {
	release := make(chan struct{})
	var mu sync.Mutex
	var groups [][]string
	g := &group[string, string]{
		key: func(s string) string { return s[:1] }, // "a1" and "a2" share a key
		max: 3,
		run: func(_ context.Context, ins []string) ([]string, []error) {
			mu.Lock()
			first := len(groups) == 0
			groups = append(groups, append([]string(nil), ins...))
			mu.Unlock()
			if first {
				<-release // hold the first group in flight while the rest queue up
			}
			outs, errs := make([]string, len(ins)), make([]error, len(ins))
			for i, in := range ins {
				outs[i] = "out-" + in
				if in == "c1" {
					errs[i] = errors.New("c1 failed")
				}
			}
			return outs, errs
		},
	}
	type result struct{ out, err string }
	var wg sync.WaitGroup
	got := map[string]result{}
	do := func(in string) {
		defer wg.Done()
		out, err := g.Do(context.Background(), in)
		mu.Lock()
		defer mu.Unlock()
		got[in] = result{out, fmt.Sprint(err)}
	}
	wg.Add(1)
	go do("z1")
	testenv.Eventually(t, 10*time.Second, "the first group", func() bool { mu.Lock(); defer mu.Unlock(); return len(groups) == 1 })
	// Queued one at a time, in this order: the grouping below depends on the
	// queue's order, which concurrent calls would leave to the scheduler.
	ins := []string{"a1", "a2", "b1", "c1", "d1"}
	for i, in := range ins {
		wg.Add(1)
		go do(in)
		testenv.Eventually(t, 10*time.Second, in+" queued", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) == i+1 })
	}
	cancelled, cancel := context.WithCancel(context.Background())
	var cancelledErr error
	wg.Add(1)
	go func() { defer wg.Done(); _, cancelledErr = g.Do(cancelled, "e1") }()
	testenv.Eventually(t, 10*time.Second, "the calls queued", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return len(g.queue) == len(ins)+1 })
	cancel()
	close(release)
	wg.Wait()
	if !errors.Is(cancelledErr, context.Canceled) {
		t.Fatalf("a caller whose context ended while queued: %v", cancelledErr)
	}

	for _, in := range append(ins, "z1") {
		want := result{"out-" + in, "<nil>"}
		if in == "c1" {
			want.err = "c1 failed"
		}
		if got[in] != want {
			t.Errorf("%s: got %+v, want %+v", in, got[in], want)
		}
	}
	// z1 alone; then the queue in groups of at most 3 with one call per key.
	if len(groups) != 3 || len(groups[1]) != 3 || len(groups[2]) != 2 {
		t.Fatalf("groups = %v, want [z1] then 3 and 2 calls", groups)
	}
	for _, grp := range groups {
		seen := map[string]bool{}
		for _, in := range grp {
			if seen[in[:1]] {
				t.Fatalf("group %v has two calls with key %q", grp, in[:1])
			}
			seen[in[:1]] = true
		}
	}
	// With the queue empty the loop ends, and the next call starts a new one.
	testenv.Eventually(t, 10*time.Second, "the loop to end", func() bool { g.mu.Lock(); defer g.mu.Unlock(); return !g.running })
	if out, err := g.Do(context.Background(), "f1"); out != "out-f1" || err != nil {
		t.Fatalf("a call after the loop ended: %q, %v", out, err)
	}
}
