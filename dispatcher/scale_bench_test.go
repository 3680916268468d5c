package dispatcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/testenv"
)

// The dispatcher at scale (docs/benchmarks.md, "One leader at scale"): a real
// embedded etcd holding benchJobs active jobs, the Nomad double of
// nomaddouble_test.go over loopback HTTP (through Nomad's own API client), and
// each measure taken the new way and the old way (legacy_test.go) in the same
// process, on the same etcd and double.
//
//   - BenchmarkDispatcherReconcile: one reconcile pass over benchJobs running jobs
//     whose children run, plus benchChurn jobs the stream missed something of
//     (running, ended with a result, vanished), fresh for each pass.
//   - BenchmarkDispatcherEvents: benchJobs dispatched jobs' events (pending,
//     running, running again, complete with a result: four each) through the
//     event stream, applied; the old way on a second set of benchJobs jobs.
//
// Run alone: go test -run '^$' -bench Dispatcher -benchtime=1x ./dispatcher/

const (
	benchJobs  = 10000
	benchChurn = 100
)

// benchEnv is the etcd, double and dispatcher of one benchmark.
type benchEnv struct {
	b     *testing.B
	n     *nomadDouble
	d     *Dispatcher
	blobs *fakeBlobs
	next  atomic.Int64 // job numbers
}

func newBenchEnv(b *testing.B) *benchEnv {
	n := newNomadDouble(b)
	s, _ := testenv.Etcd(b)
	cfg := config.Default()
	cfg.Pools = []*config.Pool{{Name: "cpu", MaxAttempts: 3, MaxInFlight: -1}}
	if err := cfg.Finish(); err != nil {
		b.Fatal(err)
	}
	c := n.client()
	blobs := &fakeBlobs{data: map[string][]byte{}}
	d := &Dispatcher{Config: cfg, Store: s, Jobs: c.Jobs(), Allocs: c.Allocations(), Events: c.EventStream(), Blobs: blobs,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.defaults()
	return &benchEnv{b: b, n: n, d: d, blobs: blobs}
}

// runnerState is a running runner task as Nomad reports it.
func runnerState(started time.Time) map[string]*api.TaskState {
	return map[string]*api.TaskState{"runner": {State: "running", StartedAt: started, Events: []*api.TaskEvent{
		{Type: "Received", DisplayMessage: "Task received by client", Time: started.UnixNano()},
		{Type: "Task Setup", DisplayMessage: "Building Task Directory", Time: started.UnixNano()},
		{Type: "Started", DisplayMessage: "Task started by client", Time: started.UnixNano()},
	}}}
}

func exitedState(started, ended time.Time) map[string]*api.TaskState {
	ts := runnerState(started)
	r := ts["runner"]
	r.State, r.FinishedAt = "dead", ended
	r.Events = append(r.Events, &api.TaskEvent{Type: api.TaskTerminated, DisplayMessage: "Exit Code: 0", ExitCode: 0, Time: ended.UnixNano()})
	return ts
}

func allocID(n int64) string { return fmt.Sprintf("11111111-2222-4333-8444-%012d", n) }

// create stores count jobs made by mk (given each a fresh id), 32 at a time.
func (e *benchEnv) create(count int, mk func(id string, n int64) *mj.Job) []string {
	ids := make([]string, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	now := time.Now().UTC()
	for i := range ids {
		n := e.next.Add(1)
		ids[i] = uuidN(int(n))
		j := mk(ids[i], n)
		j.ID, j.AccountID, j.Machine, j.CreatedAt, j.QueuedAt, j.TimeoutSeconds = ids[i], "acct", "cpu", now, now, 3600
		j.FFmpegCommands = []string{"-i {{in}} -c:v libx264 -preset veryfast -crf 23 {{out.mp4}}"}
		j.OutputNames = []string{"out.mp4"}
		if j.Attempt == 0 {
			j.Attempt = 1
		}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := e.d.Store.(interface {
				CreateJob(context.Context, *mj.Job) error
			}).CreateJob(context.Background(), j); err != nil {
				e.b.Error(err)
			}
		}()
	}
	wg.Wait()
	if e.b.Failed() {
		e.b.FailNow()
	}
	return ids
}

// running makes count running jobs whose children run.
func (e *benchEnv) running(count int) {
	started := time.Now().UTC().Add(-time.Minute)
	e.create(count, func(id string, n int64) *mj.Job {
		e.n.setChild(child(id, 1), &api.AllocationListStub{ID: allocID(n), ClientStatus: "running", CreateTime: started.UnixNano(),
			ModifyTime: started.UnixNano(), TaskStates: runnerState(started)})
		return &mj.Job{Status: mj.StatusRunning, NomadJobID: child(id, 1), StartedAt: &started, AttemptStartedAt: &started}
	})
}

// churn makes benchChurn jobs the stream missed something of: half started
// running, a quarter ended with a result, a quarter vanished with none.
func (e *benchEnv) churn() {
	now := time.Now().UTC()
	i := 0
	e.create(benchChurn, func(id string, n int64) *mj.Job {
		i++
		dispatched := now.Add(-2 * time.Minute)
		j := &mj.Job{Status: mj.StatusQueued, NomadJobID: child(id, 1), DispatchedAt: &dispatched}
		switch {
		case i%2 == 0:
			e.n.setChild(child(id, 1), &api.AllocationListStub{ID: allocID(n), ClientStatus: "running", CreateTime: now.UnixNano(),
				ModifyTime: now.UnixNano(), TaskStates: runnerState(now)})
		case i%4 == 1:
			e.n.setChild(child(id, 1), &api.AllocationListStub{ID: allocID(n), ClientStatus: "complete", CreateTime: now.UnixNano(),
				ModifyTime: now.UnixNano(), TaskStates: exitedState(now.Add(-time.Minute), now)})
			e.blobs.mu.Lock()
			e.blobs.data[mj.RunScope(id, 1)+allocID(n)+"/result.json"] = mustJSON(mj.Result{JobID: id, Attempt: 1, Succeeded: true,
				Outputs: []mj.Output{{Name: "out.mp4", Size: 1 << 20}}})
			e.blobs.mu.Unlock()
		default: // vanished: the double never knew it
		}
		return j
	})
}

func totalCalls(c map[string]int) float64 {
	n := 0
	for _, v := range c {
		n += v
	}
	return float64(n)
}

func BenchmarkDispatcherReconcile(b *testing.B) {
	e := newBenchEnv(b)
	e.running(benchJobs)
	ctx := context.Background()
	e.d.recon.reconcile(ctx) // warm etcd's and the double's caches alike for both
	var oldS, newS, oldCalls, newCalls float64
	b.ResetTimer()
	for range b.N {
		e.churn()
		e.n.callCount()
		e.d.settle.ungrouped = true
		start := time.Now()
		e.d.reconcileSequential(ctx)
		oldS += time.Since(start).Seconds()
		oldCalls += totalCalls(e.n.callCount())

		e.churn()
		e.d.settle.ungrouped = false
		start = time.Now()
		e.d.recon.reconcile(ctx)
		newS += time.Since(start).Seconds()
		newCalls += totalCalls(e.n.callCount())
	}
	n := float64(b.N)
	b.ReportMetric(float64(benchJobs), "jobs")
	b.ReportMetric(newS/n, "new-s")
	b.ReportMetric(oldS/n, "old-s")
	b.ReportMetric(newCalls/n, "new-nomad-calls")
	b.ReportMetric(oldCalls/n, "old-nomad-calls")
}

// eventSet makes benchJobs dispatched jobs and their events, in batches of 64 as a
// busy Nomad sends them (one per raft index), from index on. It returns the
// batches and the number of events.
func (e *benchEnv) eventSet(index uint64) ([]doubleBatch, int) {
	now := time.Now().UTC()
	type jobAlloc struct {
		id string
		n  int64
	}
	var jobs []jobAlloc
	e.create(benchJobs, func(id string, n int64) *mj.Job {
		jobs = append(jobs, jobAlloc{id, n})
		e.n.setChild(child(id, 1))
		e.blobs.mu.Lock()
		e.blobs.data[mj.RunScope(id, 1)+allocID(n)+"/result.json"] = mustJSON(mj.Result{JobID: id, Attempt: 1, Succeeded: true,
			Outputs: []mj.Output{{Name: "out.mp4", Size: 1 << 20}}})
		e.blobs.mu.Unlock()
		return &mj.Job{Status: mj.StatusQueued, NomadJobID: child(id, 1), DispatchedAt: &now}
	})
	var batches []doubleBatch
	var evs []api.Event
	count := 0
	for step := range 4 {
		for _, j := range jobs {
			a := &api.Allocation{ID: allocID(j.n), EvalID: allocID(j.n), Name: child(j.id, 1) + ".ffmpeg[0]", Namespace: "default",
				NodeID: "22222222-3333-4444-8555-666666666666", NodeName: "client-1", JobID: child(j.id, 1), TaskGroup: "ffmpeg",
				DesiredStatus: "run", ClientStatus: "pending", CreateTime: now.UnixNano(), ModifyTime: now.UnixNano()}
			switch step {
			case 1, 2: // running, then a task event on the running allocation
				a.ClientStatus, a.TaskStates = "running", runnerState(now)
			case 3:
				a.ClientStatus, a.TaskStates = "complete", exitedState(now, now)
			}
			index++
			evs = append(evs, allocEvent(index, a))
			count++
			if len(evs) == 64 {
				batches = append(batches, doubleBatch{Index: index, Events: evs})
				evs = nil
			}
		}
	}
	if len(evs) > 0 {
		batches = append(batches, doubleBatch{Index: index, Events: evs})
	}
	return batches, count
}

var benchTopics = map[api.Topic][]string{api.TopicAllocation: {"*"}, api.TopicEvaluation: {"*"}}

func BenchmarkDispatcherEvents(b *testing.B) {
	e := newBenchEnv(b)
	var oldRate, newRate float64
	var events int
	index := uint64(1)
	b.ResetTimer()
	for range b.N {
		// The old way: one goroutine applies each event as the stream delivers it.
		batches, n := e.eventSet(index)
		events = n
		last := batches[len(batches)-1].Index
		e.n.publish(batches...)
		ctx, cancel := context.WithCancel(context.Background())
		start := time.Now()
		stream, err := e.d.Events.Stream(ctx, benchTopics, index, e.d.nomad.queryOpts)
		if err != nil {
			b.Fatal(err)
		}
		e.d.settle.ungrouped = true
		e.d.eventsSequential(ctx, stream, func(i uint64) {
			if i == last {
				cancel()
			}
		})
		oldRate += float64(n) / time.Since(start).Seconds()
		cancel()
		index = last + 1

		// The new way: partitioned workers and the watermark, as eventLoop runs them.
		batches, n = e.eventSet(index)
		last = batches[len(batches)-1].Index
		e.n.publish(batches...)
		ctx, cancel = context.WithCancel(context.Background())
		start = time.Now()
		stream, err = e.d.Events.Stream(ctx, benchTopics, index, e.d.nomad.queryOpts)
		if err != nil {
			b.Fatal(err)
		}
		e.d.settle.ungrouped = false
		work := newPartitions(eventWorkers, eventQueue)
		mark := newWatermark(index - 1)
		backoff := time.Second
		done := make(chan struct{})
		go func() { defer close(done); e.d.track.follow(ctx, stream, work, mark, &backoff) }()
		for mark.get() < last {
			time.Sleep(time.Millisecond) // polling the clock is the measurement here
		}
		newRate += float64(n) / time.Since(start).Seconds()
		cancel()
		<-done
		work.close()
		index = last + 1
	}
	k := float64(b.N)
	b.ReportMetric(float64(events), "events")
	b.ReportMetric(newRate/k, "new-events/s")
	b.ReportMetric(oldRate/k, "old-events/s")
}
