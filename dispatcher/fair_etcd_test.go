package dispatcher

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// fairEnv is real etcd, the dispatching Nomad double and a dispatcher that is
// not running: tests and benchmarks run its passes themselves.
type fairEnv struct {
	t    testing.TB
	n    *dispatchingDouble
	d    *Dispatcher
	s    *store.Store
	pool *config.Pool
	next int
	base time.Time
}

func newFairEnv(t testing.TB, pool *config.Pool) *fairEnv {
	n := newDispatchingDouble(newNomadDouble(t))
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	pool.Name, pool.MaxAttempts = "cpu", 3
	cfg.Pools = []*config.Pool{pool}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	c := n.client()
	d := &Dispatcher{Config: cfg, Store: s, Jobs: c.Jobs(), Allocs: c.Allocations(), Events: c.EventStream(),
		Blobs: &fakeBlobs{data: map[string][]byte{}}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.defaults()
	return &fairEnv{t: t, n: n, d: d, s: s, pool: cfg.Pools[0], base: time.Now().UTC().Add(-time.Hour)}
}

// queue stores count queued jobs of account, each queued after every job queued
// before it (32 creates at a time), and returns their ids in that order.
func (e *fairEnv) queue(account string, count int) []string {
	accounts := make([]string, count)
	for i := range accounts {
		accounts[i] = account
	}
	return e.queueFor(accounts)
}

// queueFor stores one queued job for each account listed, in that order.
func (e *fairEnv) queueFor(accounts []string) []string {
	count := len(accounts)
	ids := make([]string, count)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 32)
	errs := make(chan error, count)
	for i := range ids {
		e.next++
		ids[i] = uuidN(e.next)
		at := e.base.Add(time.Duration(e.next) * time.Millisecond)
		j := &mj.Job{ID: ids[i], AccountID: accounts[i], Machine: "cpu", Status: mj.StatusQueued, CreatedAt: at, QueuedAt: at, TimeoutSeconds: 600,
			FFmpegCommands: []string{"-i {{in}} -c:v libx264 {{out.mp4}}"}, OutputNames: []string{"out.mp4"}}
		sem <- struct{}{}
		wg.Add(1)
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := e.s.CreateJob(context.Background(), j); err != nil {
				errs <- err
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		e.t.Fatal(err)
	}
	return ids
}

// place gives every pending child an allocation that runs, as Nomad does when a
// node takes it; it returns how many.
func (e *fairEnv) place() int {
	n := e.n.nomadDouble
	n.mu.Lock()
	var pending []string
	for id, c := range n.children {
		if len(c.allocs) == 0 && !c.stop {
			pending = append(pending, id)
		}
	}
	n.mu.Unlock()
	now := time.Now()
	for k, id := range pending {
		e.n.setChild(id, &api.AllocationListStub{ID: allocID(int64(k)), ClientStatus: "running", CreateTime: now.UnixNano(),
			ModifyTime: now.UnixNano(), TaskStates: runnerState(now)})
	}
	return len(pending)
}

// owners maps the dispatched children, in order, to their jobs' accounts.
func (e *fairEnv) owners(accountOf map[string]string) []string {
	var out []string
	for _, c := range e.n.dispatched() {
		id, _, ok := mj.ParseChildID(c)
		if !ok {
			e.t.Fatalf("child %q names no job", c)
		}
		out = append(out, accountOf[id])
	}
	return out
}

func (e *fairEnv) keys(prefix string) []string {
	resp, err := e.s.Client().Get(context.Background(), prefix, clientv3.WithPrefix(), clientv3.WithKeysOnly())
	if err != nil {
		e.t.Fatal(err)
	}
	var out []string
	for _, kv := range resp.Kvs {
		out = append(out, string(kv.Key))
	}
	return out
}

// Through etcd and the double: an account that queued a backlog first gets no
// more than its share once a second account queues; what Nomad has not placed
// bounds what is handed to it (the window).
func TestFairPassOrderAndWindow(t *testing.T) {
	e := newFairEnv(t, &config.Pool{DispatchLookahead: 2})
	ctx := context.Background()
	accountOf := map[string]string{}
	for _, id := range e.queue("a", 30) {
		accountOf[id] = "a"
	}
	for _, id := range e.queue("b", 3) {
		accountOf[id] = "b"
	}
	if failed := e.d.sched.dispatchPool(ctx, e.pool); failed {
		t.Fatal("pass failed")
	}
	if got := len(e.n.dispatched()); got != 2 {
		t.Fatalf("an idle pool with dispatch_lookahead 2 got %d children", got)
	}
	// Both wait for a node: the window is full, the next pass hands Nomad nothing.
	e.d.sched.dispatchPool(ctx, e.pool)
	if got := len(e.n.dispatched()); got != 2 {
		t.Fatalf("%d children dispatched while 2 wait for a node", got)
	}
	for range 4 {
		if e.place() == 0 {
			t.Fatal("nothing to place")
		}
		e.d.sched.dispatchPool(ctx, e.pool)
	}
	// Each pass hands Nomad its window's jobs concurrently, so the order holds
	// from one pass to the next: per pass of two, b's 3 jobs in the first three.
	owners := e.owners(accountOf)
	if len(owners) != 10 {
		t.Fatalf("dispatched %v, want 10: 2, then 2 for each 2 placed", owners)
	}
	for pass := 0; pass < 5; pass++ {
		got := map[string]int{}
		for _, a := range owners[2*pass : 2*pass+2] {
			got[a]++
		}
		want := map[string]int{"a": 1, "b": 1}
		if pass >= 3 {
			want = map[string]int{"a": 2}
		}
		if fmt.Sprint(got) != fmt.Sprint(want) {
			t.Fatalf("pass %d dispatched to %v, want %v (all: %v)", pass+1, got, want, owners)
		}
	}
	// The jobs record their children; the queue holds the rest, none twice.
	if n := len(e.keys(e.s.PoolQueuePrefix("cpu"))); n != 33-10 {
		t.Fatalf("%d queue keys left, want 23", n)
	}
	if n := len(e.keys(e.s.AccountActivePrefix("cpu", "b"))); n != 3 {
		t.Fatalf("account b holds %d slots, want 3", n)
	}
}

// Children mediajobs has given up on stay "pending" in Nomad for as long as a
// delayed evaluation holds them (a lost node's, for its disconnect block's hour):
// they must not close the window. Pending is what etcd's active set holds beyond
// what Nomad runs.
func TestStalePendingChildrenDoNotCloseTheWindow(t *testing.T) {
	e := newFairEnv(t, &config.Pool{DispatchLookahead: 2})
	for i := range 4 {
		e.n.setChild(fmt.Sprintf("mediajobs-cpu/dispatch-lost-%d", i)) // no allocation: pending
	}
	e.queue("a", 5)
	if failed := e.d.sched.dispatchPool(context.Background(), e.pool); failed {
		t.Fatal("pass failed")
	}
	if got := len(e.n.dispatched()); got != 2 {
		t.Fatalf("with 4 stale pending children, an idle pool with dispatch_lookahead 2 got %d children, want 2", got)
	}
}

// Jobs queued by the version before fair-share dispatch, under the old key
// layout (queue/<pool>/<queued_at>_<id>, active/<pool>/<id>), are still
// dispatched after an upgrade, and their old keys go with their next transition.
func TestLegacyQueueKeysAreDispatched(t *testing.T) {
	e := newFairEnv(t, &config.Pool{})
	ctx := context.Background()
	// As the old version wrote them: the key without the account.
	ids := e.queue("acct", 3)
	for _, key := range e.keys(e.s.PoolQueuePrefix("cpu")) {
		at, _ := store.QueuedAtFromKey(key)
		legacy := fmt.Sprintf("%s%019d_%s", e.s.PoolQueuePrefix("cpu"), at.UnixNano(), store.IDFromKey(key))
		if _, err := e.s.Client().Txn(ctx).Then(clientv3.OpDelete(key), clientv3.OpPut(legacy, store.IDFromKey(key))).Commit(); err != nil {
			t.Fatal(err)
		}
	}
	// One of them was cancelled by the old version's gateway... no: by a client
	// after the upgrade, before any dispatcher moved its key.
	if _, err := e.s.UpdateJob(ctx, ids[2], func(j *mj.Job) error {
		now := time.Now().UTC()
		j.Status, j.FinishedAt = mj.StatusCancelled, &now
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if left := e.keys(e.s.PoolQueuePrefix("cpu")); len(left) != 2 {
		t.Fatalf("the cancel left the old key behind: %v", left)
	}
	testenv.Eventually(t, 10*time.Second, "the old keys' jobs to be dispatched", func() bool {
		e.d.sched.dispatchPool(ctx, e.pool)
		for _, id := range ids[:2] {
			if j, err := e.s.Job(ctx, id); err != nil || j.NomadJobID == "" {
				return false
			}
		}
		return true
	})
	if left := e.keys(e.s.PoolQueuePrefix("cpu")); len(left) != 0 {
		t.Fatalf("queue keys left after dispatch: %v", left)
	}
	if j, _ := e.s.Job(ctx, ids[2]); j.NomadJobID != "" {
		t.Fatal("the cancelled job was dispatched")
	}

	// An old active key (no account) goes when the job finishes.
	active := e.keys(e.s.PoolActivePrefix("cpu"))
	if len(active) != 2 {
		t.Fatalf("active keys %v", active)
	}
	j, _ := e.s.Job(ctx, ids[0])
	if _, err := e.s.Client().Txn(ctx).Then(clientv3.OpDelete(e.s.AccountActivePrefix("cpu", "acct")+ids[0]),
		clientv3.OpPut(e.s.PoolActivePrefix("cpu")+ids[0], j.NomadJobID)).Commit(); err != nil {
		t.Fatal(err)
	}
	if _, err := e.s.UpdateJob(ctx, ids[0], func(j *mj.Job) error {
		now := time.Now().UTC()
		j.Status, j.FinishedAt = mj.StatusCancelled, &now
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if left := e.keys(e.s.PoolActivePrefix("cpu")); len(left) != 1 || store.IDFromKey(left[0]) != ids[1] {
		t.Fatalf("active keys after the old one's job finished: %v", left)
	}
}

// Weights and limits stored in etcd decide the pass; a job over its account's
// limit is accepted and waits, and its standing says why.
func TestFairPassWeightsAndLimits(t *testing.T) {
	e := newFairEnv(t, &config.Pool{DispatchLookahead: 6})
	ctx := context.Background()
	two := 2
	if err := e.s.SetAccountSchedule(ctx, "heavy", store.Schedule{Weight: 2}); err != nil {
		t.Fatal(err)
	}
	if err := e.s.SetAccountSchedule(ctx, "capped", store.Schedule{MaxRunningPerPool: &two}); err != nil {
		t.Fatal(err)
	}
	accountOf := map[string]string{}
	for _, a := range []string{"heavy", "light", "capped"} {
		for _, id := range e.queue(a, 6) {
			accountOf[id] = a
		}
	}
	e.d.sched.dispatchPool(ctx, e.pool)
	counts := map[string]int{}
	for _, a := range e.owners(accountOf) {
		counts[a]++
	}
	// Chosen one at a time by least share (ties: the oldest next job; heavy
	// queued first): heavy, light, capped, heavy, heavy, light.
	if counts["capped"] != 1 || counts["heavy"] != 3 || counts["light"] != 2 {
		t.Fatalf("first pass %v, want heavy 3, light 2, capped 1", counts)
	}
	e.place()
	e.d.sched.dispatchPool(ctx, e.pool) // the window: max(6, 6/8) - 0 pending
	counts = map[string]int{}
	for _, a := range e.owners(accountOf) {
		counts[a]++
	}
	if counts["capped"] != 2 || counts["heavy"] != 6 || counts["light"] != 4 {
		t.Fatalf("after the second pass %v, want capped 2 (its limit), heavy 6, light 4", counts)
	}
	// The capped account's jobs left wait, and say so when read.
	for id, a := range accountOf {
		if a != "capped" {
			continue
		}
		j, _ := e.s.Job(ctx, id)
		if j.NomadJobID != "" {
			continue
		}
		st, err := e.s.QueueStanding(ctx, j)
		if err != nil {
			t.Fatal(err)
		}
		if st.InFlight != 2 || st.Schedule == nil || *st.Schedule.MaxRunningPerPool != 2 || st.Ahead > 3 {
			t.Fatalf("standing of a capped job: %+v", st)
		}
	}
}
