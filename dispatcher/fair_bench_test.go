package dispatcher

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
)

// Fair-share dispatch at scale (docs/scheduling.md, docs/benchmarks.md), on real
// embedded etcd and the Nomad double:
//
//   - BenchmarkDispatcherFairPass: one dispatch pass of 256 jobs (the default
//     max_in_flight, what a pass hands an idle pool at most) from a queue of
//     1,000 accounts × 10 jobs, the fair way (the whole queue's keys, the active
//     set, the accounts' schedules, the choice, the dispatches) beside today's
//     first-in-first-out pass over the same queue (its first 256 keys, then the
//     same dispatches).
//   - BenchmarkDispatcherFairPassAtScale: the choice of one pass of 256 from a
//     queue of 1 account × 100,000 jobs and of 1,000 accounts × 1,000 (keys
//     only, written in batches: the pass chooses, nothing is dispatched): the
//     queue bytes read from etcd and the seconds per pass, beside the pass of
//     earlier versions, which read the whole queue, over the same queue. The
//     queue index's one read of the queue, at the dispatcher's start, is
//     reported apart (index-load-s).
//   - BenchmarkDispatcherFairness: 10 backlogged accounts on a pool of 20 slots
//     whose jobs end at random; Jain's fairness index of their started jobs, and
//     a quiet account's wait for its one job: the jobs of others dispatched
//     after its create and before it, and the ones that took a slot meanwhile.
//
// Run alone: go test -run '^$' -bench DispatcherFair -benchtime=1x ./dispatcher/

func BenchmarkDispatcherFairPass(b *testing.B) {
	const accounts, perAccount, pass = 1000, 10, 256
	e := newFairEnv(b, &config.Pool{DispatchLookahead: pass, MaxInFlight: -1})
	ctx := context.Background()
	var fifoS, fairS float64
	var fifoN, fairN int
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		left, _, _ := e.s.JobIDs(ctx, e.s.PoolQueuePrefix("cpu"), 0)
		if len(left) < 2*pass {
			var list []string
			for k := range perAccount {
				for a := range accounts {
					_ = k
					list = append(list, fmt.Sprintf("acct-%04d", a))
				}
			}
			e.queueFor(list)
		}
		e.place()
		b.StartTimer()

		// Today's pass: the cap's worth of the queue's first keys, then dispatch.
		start := time.Now()
		if _, err := e.s.Count(ctx, e.s.PoolActivePrefix("cpu")); err != nil {
			b.Fatal(err)
		}
		ids, _, err := e.s.JobIDs(ctx, e.s.PoolQueuePrefix("cpu"), pass)
		if err != nil {
			b.Fatal(err)
		}
		if e.d.sched.dispatchIDs(ctx, e.pool, ids) {
			b.Fatal("FIFO pass failed")
		}
		fifoS += time.Since(start).Seconds()
		fifoN += len(ids)

		b.StopTimer()
		e.place() // placed: the fair pass's window is open again
		before := len(e.n.dispatched())
		b.StartTimer()

		start = time.Now()
		if e.d.sched.dispatchPool(ctx, e.pool) {
			b.Fatal("fair pass failed")
		}
		fairS += time.Since(start).Seconds()
		fairN += len(e.n.dispatched()) - before
	}
	n := float64(b.N)
	if fairN != fifoN {
		b.Fatalf("the passes dispatched %d (fair) and %d (FIFO) jobs", fairN, fifoN)
	}
	b.ReportMetric(accounts*perAccount, "queued")
	b.ReportMetric(float64(fairN)/n, "dispatched/pass")
	b.ReportMetric(fairS/n, "fair-s")
	b.ReportMetric(fifoS/n, "fifo-s")
	b.ReportMetric(fairS/fifoS, "fair/fifo")
}

func BenchmarkDispatcherFairPassAtScale(b *testing.B) {
	const pass = 256
	for _, size := range []struct{ accounts, perAccount int }{{1, 100000}, {1000, 1000}} {
		b.Run(fmt.Sprintf("%dx%d", size.accounts, size.perAccount), func(b *testing.B) {
			e := newFairEnv(b, &config.Pool{DispatchLookahead: pass, MaxInFlight: -1})
			seedQueue(b, e.s, size.accounts, size.perAccount)
			reads := countReads(e.s)
			ctx := context.Background()
			start := time.Now()
			syncIndex(b, e.d)
			load := time.Since(start).Seconds()
			var newS, oldS float64
			var newB, oldB int64
			b.ResetTimer()
			for range b.N {
				reads.reset()
				start := time.Now()
				chosen, _, _, failed := e.d.sched.fairPass(ctx, e.pool, 0, 0, true)
				newS += time.Since(start).Seconds()
				newB += reads.bytes.Load()
				if failed || len(chosen) != pass {
					b.Fatalf("pass: failed %v, chose %d", failed, len(chosen))
				}
				reads.reset()
				start = time.Now()
				if old := e.wholeQueuePass(ctx, pass); len(old) != pass {
					b.Fatalf("the whole-queue pass chose %d", len(old))
				}
				oldS += time.Since(start).Seconds()
				oldB += reads.bytes.Load()
			}
			n := float64(b.N)
			b.ReportMetric(float64(size.accounts*size.perAccount), "queued")
			b.ReportMetric(float64(newB)/n, "read-B/pass")
			b.ReportMetric(float64(oldB)/n, "old-read-B/pass")
			b.ReportMetric(newS/n, "pass-s")
			b.ReportMetric(oldS/n, "old-pass-s")
			b.ReportMetric(load, "index-load-s")
		})
	}
}

// wholeQueuePass is the choice of a pass of earlier versions: the whole pool
// queue's keys in one read, the active set, the schedules, then fairOrder.
func (e *fairEnv) wholeQueuePass(ctx context.Context, n int) []store.QueueEntry {
	entries, _, err := e.s.PoolQueue(ctx, "cpu")
	if err != nil {
		e.t.Fatal(err)
	}
	inFlight, _, err := e.s.PoolInFlight(ctx, "cpu")
	if err != nil {
		e.t.Fatal(err)
	}
	scheds, err := e.s.AccountSchedules(ctx)
	if err != nil {
		e.t.Fatal(err)
	}
	accounts := map[string]*fairAccount{}
	for _, q := range entries {
		a := accounts[q.Account]
		if a == nil {
			a = &fairAccount{InFlight: inFlight[q.Account], Weight: max(scheds[q.Account].Weight, 1)}
			if l := scheds[q.Account].MaxRunningPerPool; l != nil {
				a.Limit = *l
			}
			accounts[q.Account] = a
		}
		a.Queue = append(a.Queue, q)
	}
	return fairOrder(accounts, n, nil)
}

func BenchmarkDispatcherFairness(b *testing.B) {
	const accounts, backlog, slots, starts = 10, 120, 20, 600
	var jain, waitD, waitS float64
	for range b.N {
		r := fairnessRun(b, accounts, backlog, slots, starts)
		jain += r.jain
		waitD += float64(r.quietDispatches)
		waitS += float64(r.quietStarts)
	}
	n := float64(b.N)
	b.ReportMetric(jain/n, "jain-index")
	b.ReportMetric(waitD/n, "quiet-wait-dispatches")
	b.ReportMetric(waitS/n, "quiet-wait-slots")
}

type fairnessResult struct {
	jain float64
	// quietDispatches: jobs of others dispatched after the quiet account's
	// create and before its job; quietStarts: jobs of others that took a slot
	// in between (those already waiting in Nomad: at most the window).
	quietDispatches, quietStarts int
}

// fairnessRun runs a pool of slots slots with the default dispatch_lookahead:
// passes run, and Nomad places pending children (oldest first) while a slot is
// free and reports the first it has no room for (a failed placement, as its event
// stream does), until a pass hands Nomad nothing more; then one to three running jobs
// end, at random. Once half of starts jobs have started, a quiet account queues
// one job. It returns Jain's index of the backlogged accounts' started jobs once
// starts have started, and the quiet account's wait.
func fairnessRun(b *testing.B, accounts, backlog, slots, starts int) fairnessResult {
	e := newFairEnv(b, &config.Pool{})
	ctx := context.Background()
	accountOf := map[string]string{}
	var list []string
	for k := 0; k < backlog; k++ {
		for a := range accounts {
			list = append(list, fmt.Sprintf("acct-%02d", a))
		}
	}
	for i, id := range e.queueFor(list) {
		accountOf[id] = list[i]
	}
	rng := rand.New(rand.NewPCG(1, 2))
	var running, startOrder []string // children holding a slot; all that took one, in order
	quietD, quietS := -1, -1
	blocked := map[string]bool{}
	noRoom := map[string]*api.AllocationMetric{"ffmpeg": {NodesEvaluated: 1, NodesExhausted: 1, DimensionExhausted: map[string]int{"memory": 1}}}
	for len(startOrder) < starts {
		for {
			before := len(e.n.dispatched())
			if e.d.sched.dispatchPool(ctx, e.pool) {
				b.Fatal("pass failed")
			}
			for _, c := range e.n.dispatched() {
				if !e.pendingChild(c) {
					continue
				}
				if len(running) < slots {
					e.n.setChild(c, &api.AllocationListStub{ID: allocID(int64(len(startOrder))), ClientStatus: "running", TaskStates: runnerState(time.Now())})
					running, startOrder = append(running, c), append(startOrder, c)
				} else if !blocked[c] {
					// No room: Nomad's evaluation of the child fails for lack of
					// resources, and the event stream says so.
					blocked[c] = true
					e.d.recon.placementFailed(ctx, c, noRoom)
				}
			}
			if len(e.n.dispatched()) == before {
				break
			}
		}
		if quietD < 0 && len(startOrder) >= starts/2 {
			quietD, quietS = len(e.n.dispatched()), len(startOrder)
			accountOf[e.queue("quiet", 1)[0]] = "quiet"
		}
		for k := 1 + rng.IntN(3); k > 0 && len(running) > 0; k-- {
			i := rng.IntN(len(running))
			c := running[i]
			running = append(running[:i], running[i+1:]...)
			e.n.setChild(c, &api.AllocationListStub{ID: "done", ClientStatus: "complete"})
			id, _, _ := mj.ParseChildID(c)
			if _, err := e.s.UpdateJob(ctx, id, func(j *mj.Job) error {
				now := time.Now().UTC()
				j.Status, j.FinishedAt = mj.StatusSucceeded, &now
				return nil
			}); err != nil {
				b.Fatal(err)
			}
		}
	}
	r := fairnessResult{quietDispatches: -1, quietStarts: -1}
	owner := func(c string) string { id, _, _ := mj.ParseChildID(c); return accountOf[id] }
	for i, c := range e.n.dispatched() {
		if owner(c) == "quiet" {
			r.quietDispatches = i - quietD
		}
	}
	started := map[string]int{}
	for i, c := range startOrder {
		if owner(c) == "quiet" {
			r.quietStarts = i - quietS
			continue
		}
		started[owner(c)]++
	}
	if r.quietStarts < 0 {
		b.Fatal("the quiet account's job never started")
	}
	var sum, sq float64
	for a := range accounts {
		x := float64(started[fmt.Sprintf("acct-%02d", a)])
		sum += x
		sq += x * x
	}
	r.jain = sum * sum / (float64(accounts) * sq)
	return r
}

// pendingChild: the child has no allocation yet (it waits for a node).
func (e *fairEnv) pendingChild(c string) bool {
	n := e.n.nomadDouble
	n.mu.Lock()
	defer n.mu.Unlock()
	ch := n.children[c]
	return ch != nil && len(ch.allocs) == 0 && !ch.stop
}
