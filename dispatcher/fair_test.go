package dispatcher

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
)

// queueOf makes an account's queue of n jobs named <account><k>, queued one
// second apart from start.
func queueOf(account string, n int, start time.Time) []store.QueueEntry {
	q := make([]store.QueueEntry, n)
	for k := range q {
		q[k] = store.QueueEntry{Account: account, ID: fmt.Sprintf("%s%d", account, k+1), QueuedAt: start.Add(time.Duration(k) * time.Second)}
	}
	return q
}

func order(es []store.QueueEntry) string {
	ids := make([]string, len(es))
	for i, e := range es {
		ids[i] = e.ID
	}
	return strings.Join(ids, " ")
}

// The choice function alone: accounts, weights, jobs in flight and limits in, the
// order of dispatch out (docs/scheduling.md).
func TestFairOrder(t *testing.T) {
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	type acct struct {
		name             string
		jobs             int
		queuedAt         time.Time
		inFlight, weight int
		limit            int
	}
	for _, tc := range []struct {
		name     string
		accounts []acct
		n        int
		want     string
	}{
		{"one account is first in first out", []acct{{name: "a", jobs: 3, queuedAt: t0}}, 5, "a1 a2 a3"},
		{"a backlog does not hold up a newcomer", []acct{{name: "a", jobs: 60, queuedAt: t0}, {name: "b", jobs: 3, queuedAt: t0.Add(time.Hour)}}, 6,
			"a1 b1 a2 b2 a3 b3"},
		{"the account holding fewer slots goes first", []acct{{name: "a", jobs: 4, queuedAt: t0, inFlight: 3}, {name: "b", jobs: 4, queuedAt: t0.Add(time.Hour)}}, 5,
			"b1 b2 b3 a1 b4"},
		{"weights 2:1", []acct{{name: "a", jobs: 9, queuedAt: t0, weight: 2}, {name: "b", jobs: 9, queuedAt: t0}}, 9,
			"a1 b1 a2 b2 a3 a4 b3 a5 a6"},
		{"weights against slots held", []acct{{name: "a", jobs: 5, queuedAt: t0, weight: 3, inFlight: 3}, {name: "b", jobs: 5, queuedAt: t0, inFlight: 1}}, 4,
			"a1 b1 a2 a3"},
		{"a limit holds an account's jobs in the queue", []acct{{name: "a", jobs: 5, queuedAt: t0, limit: 2, inFlight: 1}, {name: "b", jobs: 2, queuedAt: t0.Add(time.Hour)}}, 5,
			"b1 a1 b2"},
		{"an account at its limit waits, the others go", []acct{{name: "a", jobs: 5, queuedAt: t0, limit: 2, inFlight: 2}, {name: "b", jobs: 1, queuedAt: t0.Add(time.Hour), inFlight: 7}}, 3,
			"b1"},
		{"equal shares: older next job first, then the account id", []acct{{name: "c", jobs: 1, queuedAt: t0}, {name: "b", jobs: 1, queuedAt: t0.Add(time.Second)}, {name: "a", jobs: 1, queuedAt: t0.Add(time.Second)}}, 3,
			"c1 a1 b1"},
		{"nothing to choose", nil, 3, ""},
		{"a zero window chooses nothing", []acct{{name: "a", jobs: 2, queuedAt: t0}}, 0, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			accounts := map[string]*fairAccount{}
			for _, a := range tc.accounts {
				accounts[a.name] = &fairAccount{Queue: queueOf(a.name, a.jobs, a.queuedAt), InFlight: a.inFlight, Weight: a.weight, Limit: a.limit}
			}
			(&scheduler{}).poolPasses("cpu", accounts) // a new leader's passes
			before := fmt.Sprint(accounts)
			if got := order(fairOrder(accounts, tc.n, nil)); got != tc.want {
				t.Fatalf("order %q, want %q", got, tc.want)
			}
			if fmt.Sprint(accounts) != before {
				t.Fatal("fairOrder changed its input")
			}
		})
	}
}

// Over many choices, two backlogged accounts of weights 2 and 1 whose jobs take
// the same time start jobs 2:1, whether or not the slots they share divide by 3
// (choosing by InFlight/Weight alone settles at 3:2 on 5 slots and 3:1 on 4).
func TestFairOrderShares(t *testing.T) {
	for _, slots := range []int{6, 4, 5, 3} {
		t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
		accounts := map[string]*fairAccount{
			"a": {Queue: queueOf("a", 1000, t0), Weight: 2},
			"b": {Queue: queueOf("b", 1000, t0.Add(time.Second)), Weight: 1},
		}
		passes := map[string]float64{}
		// Each round one job of the oldest running ends, one is chosen.
		var running []string
		started := map[string]int{}
		for round := 0; round < 600; round++ {
			if len(running) == slots {
				done := running[0]
				running = running[1:]
				accounts[done].InFlight--
			}
			for id, a := range accounts {
				a.Pass = passes[id]
			}
			next := fairOrder(accounts, 1, passes)
			if len(next) != 1 {
				t.Fatal("nothing chosen from two backlogs")
			}
			e := next[0]
			a := accounts[e.Account]
			a.Queue, a.InFlight = a.Queue[1:], a.InFlight+1
			running = append(running, e.Account)
			started[e.Account]++
		}
		if ratio := float64(started["a"]) / float64(started["b"]); ratio < 1.9 || ratio > 2.1 {
			t.Errorf("%d slots: started %v: ratio %.2f, want 2 ± 0.1", slots, started, ratio)
		}
	}
}

// A newcomer's pass starts at the lowest of the others', not at zero, so it wins
// no run of choices for having been away; only queued accounts are remembered.
func TestPoolPassesNewcomerStartsAtTheFloor(t *testing.T) {
	s := &scheduler{}
	t0 := time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)
	accounts := map[string]*fairAccount{"a": {Queue: queueOf("a", 1, t0)}, "b": {Queue: queueOf("b", 1, t0)}}
	passes := s.poolPasses("cpu", accounts)
	passes["a"], passes["b"] = 40, 30
	accounts = map[string]*fairAccount{"a": {Queue: queueOf("a", 1, t0)}, "b": {Queue: queueOf("b", 1, t0)}, "c": {Queue: queueOf("c", 1, t0)}}
	s.poolPasses("cpu", accounts)
	if accounts["a"].Pass != 40 || accounts["b"].Pass != 30 || accounts["c"].Pass != 30 {
		t.Fatalf("passes a=%v b=%v c=%v, want 40 30 30", accounts["a"].Pass, accounts["b"].Pass, accounts["c"].Pass)
	}
	// A new leader starts from the slots each account holds.
	fresh := map[string]*fairAccount{"a": {Queue: queueOf("a", 1, t0), InFlight: 6, Weight: 2}, "b": {Queue: queueOf("b", 1, t0), InFlight: 1}}
	(&scheduler{}).poolPasses("cpu", fresh)
	if fresh["a"].Pass != 3 || fresh["b"].Pass != 1 {
		t.Fatalf("a new leader's passes a=%v b=%v, want 3 1", fresh["a"].Pass, fresh["b"].Pass)
	}
	s.poolPasses("cpu", map[string]*fairAccount{"c": {Queue: queueOf("c", 1, t0)}})
	if len(s.passes.m["cpu"]) != 1 {
		t.Fatalf("remembered %v, want only the queued account", s.passes.m["cpu"])
	}
}

func TestWindow(t *testing.T) {
	p := &config.Pool{DispatchLookahead: 4}
	unknown := room{}
	full := func(n, extra int) room { return room{Known: true, Room: n, Extra: extra} }
	for _, tc := range []struct {
		pending, running int
		room             room
		want             int
	}{
		{0, 0, unknown, 4},   // an idle pool takes the lookahead
		{4, 0, unknown, 0},   // that many waiting for a node: no more
		{6, 2, unknown, -2},  // more waiting than the window (dispatched before): none
		{1, 3, unknown, 3},   // one waiting: the rest of the lookahead
		{0, 80, unknown, 10}, // a large pool keeps an eighth of its running ones waiting
		{10, 80, unknown, 0},
		// Nomad said the pool is full at its room: one child waits beyond it.
		{1, 3, full(3, 0), 0},     // full, one waiting: none
		{0, 3, full(3, 0), 1},     // its waiting child was placed: one more
		{0, 1, full(3, 0), 3},     // two slots freed: them and one waiting
		{0, 0, full(0, 0), 1},     // no room at all: one waits in Nomad, the rest in etcd
		{4, 0, full(3, 0), 0},     // waiting ones placed before: none
		{2, 128, full(128, 0), 1}, // a large pool keeps one more waiting per 64 of room
		{0, 5, full(5, 4), 5},     // the room grows: more wait
	} {
		if got := window(p, tc.pending, tc.running, tc.room); got != tc.want {
			t.Errorf("window(pending %d, running %d, %+v) = %d, want %d", tc.pending, tc.running, tc.room, got, tc.want)
		}
	}
}

// The room follows what Nomad says: unknown until a waiting child cannot be
// placed, then the most that passes saw running lately; raised, and more let
// wait, by a pass that finds more running; lowered by a failure once the higher
// figures are older than roomWindow; forgotten with the term.
func TestPoolRoom(t *testing.T) {
	var r poolRoom
	t0 := time.Now()
	at := func(s float64) time.Time { return t0.Add(time.Duration(s * float64(time.Second))) }
	r.full("cpu", at(0)) // before any pass (a new term): nothing to go by
	if got := r.observe("cpu", 5, 4, at(0)); got.Known {
		t.Fatalf("known before any placement failure a pass could measure: %+v", got)
	}
	r.observe("cpu", 4, 4, at(1)) // a pass between a slot freeing and Nomad filling it
	r.full("cpu", at(1))
	r.full("cpu", at(1)) // failures in a row, as Nomad evaluates each waiting child again
	if got := r.observe("cpu", 4, 4, at(2)); got != (room{true, 5, 0}) {
		t.Fatalf("after failures with 5, then 4 seen running: %+v", got)
	}
	for i, want := range []room{{true, 6, 1}, {true, 7, 2}, {true, 8, 4}, {true, 9, 4}} {
		if got := r.observe("cpu", want.Room, 4, at(3+float64(i))); got != want {
			t.Fatalf("%d running: %+v, want %+v", want.Room, got, want)
		}
	}
	if got := r.observe("gpu", 1, 4, at(7)); got.Known {
		t.Fatal("another pool's room known")
	}
	r.full("cpu", at(7)) // Nomad has no room again
	if got := r.observe("cpu", 9, 4, at(8)); got != (room{true, 9, 0}) {
		t.Fatalf("after the next failure: %+v", got)
	}
	// Fewer fit now (a node left): once the passes that saw 9 are a window old,
	// a failure sets what they see now.
	for s := 9.0; s < 9+2*roomWindow.Seconds(); s++ {
		r.observe("cpu", 2, 4, at(s))
	}
	r.full("cpu", at(9+2*roomWindow.Seconds()))
	if got := r.observe("cpu", 2, 4, at(10+2*roomWindow.Seconds())); got.Room != 2 {
		t.Fatalf("room %d after a node left", got.Room)
	}
	r.reset()
	if got := r.observe("cpu", 2, 4, at(40)); got.Known {
		t.Fatal("known after reset")
	}
}
