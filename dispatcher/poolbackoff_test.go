package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
)

// Nomad's own raft and leadership errors, with or without the "rpc error:"
// prefix (the agent asked is the leader, or forwards to it), are an outage: not
// the job's refusal, which could fail it.
func TestNomadLeadershipErrorsAreAnOutage(t *testing.T) {
	var answer atomic.Value
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, answer.Load().(string), http.StatusInternalServerError)
	}))
	defer srv.Close()
	client, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	// The error a dispatch Nomad answered so returns (see dispatch).
	dispatchErr := func(text string) error {
		answer.Store(text)
		_, _, err := client.Jobs().DispatchOpts(&api.DispatchOptions{JobID: "mediajobs-cpu"}, nil)
		if err == nil {
			t.Fatal("no error")
		}
		return fmt.Errorf("nomad dispatch: %w", err)
	}
	for _, msg := range []string{
		"leadership lost while committing log",
		"node is not the leader",
		"leadership transfer in progress",
		"failed to retrieve jobs for idempotency check",
		"No cluster leader",
	} {
		for _, text := range []string{msg, "rpc error: " + msg, "1 error occurred:\n\t* " + msg} {
			err := dispatchErr(text)
			if refusedByNomad(err) || !nomadTrouble(err) {
				t.Errorf("%q: refused %v, outage %v; want an outage", text, refusedByNomad(err), nomadTrouble(err))
			}
		}
	}
	err = dispatchErr("1 error occurred:\n\t* Dispatch payload exceeds maximum size; 20000 > 16384")
	if !refusedByNomad(err) || nomadTrouble(err) {
		t.Errorf("a refusal of the job: refused %v, outage %v", refusedByNomad(err), nomadTrouble(err))
	}
}

// A job refused in an earlier term is not failed by its first refusal in the
// next: each term counts afresh (newTerm, which Run calls as it starts leading).
func TestRefusalCountsStartAfreshEachTerm(t *testing.T) {
	refused := uuidN(3010)
	d, ctx := dispatcherOnNomad(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Meta map[string]string }
		json.NewDecoder(r.Body).Decode(&body)
		id := body.Meta["mediajobs_job_id"]
		if id == refused {
			http.Error(w, "1 error occurred:\n\t* Dispatch payload exceeds maximum size; 20000 > 16384", http.StatusInternalServerError)
			return
		}
		fmt.Fprintf(w, `{"DispatchedJobID":"mediajobs-cpu/dispatch-%s","EvalID":"e"}`, id)
	})
	pool := d.Config.Pools[0]
	pool.DispatchLookahead, pool.MaxInFlight = 100, 100
	for i := range 3 {
		fixJob(t, d, &mj.Job{ID: uuidN(3010 + i), Status: mj.StatusQueued, Attempt: 1, QueuedAt: time.Now().Add(time.Duration(i) * time.Millisecond)})
	}
	d.sched.dispatchPool(ctx, pool) // refused once; the others are taken after it
	now := time.Now().Add(time.Second)
	d.clock = func() time.Time { return now }
	for range dispatchRefusals - 2 {
		d.sched.dispatchPool(ctx, pool)
	}
	now = now.Add(dispatchRefusalSpan)
	d.sched.newTerm()
	d.sched.dispatchPool(ctx, pool) // the term's first refusal: the 5th over a minute in all
	if j, _ := d.Store.Job(ctx, refused); j.Status != mj.StatusQueued {
		t.Fatalf("failed by its first refusal of a new term: %s %q", j.Status, j.ErrorMessage)
	}
	// Within one term, as many refusals over a minute, while the pool takes
	// another job, fail it.
	now = now.Add(time.Second)
	fixJob(t, d, &mj.Job{ID: uuidN(3013), Status: mj.StatusQueued, Attempt: 1})
	for range dispatchRefusals - 1 {
		d.sched.dispatchPool(ctx, pool)
	}
	now = now.Add(dispatchRefusalSpan)
	d.sched.dispatchPool(ctx, pool)
	if j, _ := d.Store.Job(ctx, refused); j.Status != mj.StatusFailed {
		t.Fatalf("refused %d times over a minute in one term: %s", dispatchRefusals+1, j.Status)
	}
}

// twoPools is a dispatcher (not running) of pools a and b, both registered,
// each dispatching one job a pass (lookahead 1: the Nomad here has no summary),
// on real etcd and nomad, and a clock that moves only when the test moves it.
func twoPools(t *testing.T, nomad http.HandlerFunc) (*Dispatcher, context.Context, *time.Time) {
	srv := httptest.NewServer(nomad)
	t.Cleanup(srv.Close)
	client, err := api.NewClient(&api.Config{Address: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	cfg.Pools = []*config.Pool{{Name: "a", QueueLimit: "10m", MaxAttempts: 1}, {Name: "b", QueueLimit: "10m", MaxAttempts: 1}}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	for _, p := range cfg.Pools {
		p.DispatchLookahead, p.MaxInFlight = 1, 100
	}
	d := &Dispatcher{Config: cfg, Store: s, Jobs: client.Jobs(), Blobs: &fakeBlobs{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
	d.defaults()
	d.nomad.registered = map[string]bool{"a": true, "b": true}
	now := time.Now()
	d.clock = func() time.Time { return now }
	return d, context.Background(), &now
}

// One pool's trouble never slows another, and a refused job slows nobody. Pool
// b's Nomad answers every dispatch with a refusal of the job, or with an outage
// (Nomad's leadership lost); pool a's jobs are dispatched one a pass all along.
// A refusal backs nothing off: b's job is tried again at every pass, and no
// pass asks for an early one (the dispatch loop waits only for a wake-up, or
// idlePass). An outage backs off b alone: b is tried again only once its
// backoff has passed on the clock, twice as long each time, while a's passes go
// on without waiting for it.
func TestOnePoolsTroubleSlowsNoOther(t *testing.T) {
	for name, answer := range map[string]string{
		"refused": "1 error occurred:\n\t* Dispatch payload exceeds maximum size; 20000 > 16384",
		"outage":  "leadership lost while committing log",
	} {
		t.Run(name, func(t *testing.T) {
			var aCalls, bCalls atomic.Int32
			d, ctx, now := twoPools(t, func(w http.ResponseWriter, r *http.Request) {
				var body struct {
					IdPrefixTemplate string
				}
				json.NewDecoder(r.Body).Decode(&body)
				switch r.URL.Path {
				case "/v1/job/mediajobs-a/dispatch":
					n := aCalls.Add(1)
					fmt.Fprintf(w, `{"DispatchedJobID":"mediajobs-a/dispatch-%s-%d-abc","EvalID":"e"}`, body.IdPrefixTemplate, n)
				case "/v1/job/mediajobs-b/dispatch":
					bCalls.Add(1)
					http.Error(w, answer, http.StatusInternalServerError)
				default:
					http.Error(w, "job not found", http.StatusNotFound)
				}
			})
			const n = 4
			var as []string
			for i := range n + 1 {
				id, pool := uuidN(3100+i), "a"
				if i == n {
					pool = "b"
				} else {
					as = append(as, id)
				}
				at := time.Now().UTC().Add(time.Duration(i) * time.Millisecond)
				if err := d.Store.(*store.Store).CreateJob(ctx, &mj.Job{ID: id, AccountID: "acct", Machine: pool, Status: mj.StatusQueued, Attempt: 1,
					CreatedAt: at, QueuedAt: at, TimeoutSeconds: 60}); err != nil {
					t.Fatal(err)
				}
			}
			for pass := 1; pass <= n; pass++ {
				next := d.sched.dispatchPools(ctx)
				if got := aCalls.Load(); got != int32(pass) {
					t.Fatalf("pass %d: pool a dispatched %d jobs, want one a pass", pass, got)
				}
				switch name {
				case "refused":
					if next != idlePass || bCalls.Load() != int32(pass) {
						t.Fatalf("pass %d: next pass due in %s (want %s: nothing to wait out), pool b tried %d times (want each pass)", pass, next, idlePass, bCalls.Load())
					}
				case "outage":
					if next != troubleBackoff || bCalls.Load() != 1 {
						t.Fatalf("pass %d: next pass due in %s (want b's backoff, %s), pool b tried %d times (want once: backed off)", pass, next, troubleBackoff, bCalls.Load())
					}
				}
			}
			for _, id := range as {
				if j, _ := d.Store.Job(ctx, id); j.NomadJobID == "" {
					t.Fatalf("job %s of pool a was not dispatched", id)
				}
			}
			if name == "outage" {
				*now = now.Add(troubleBackoff)
				if next := d.sched.dispatchPools(ctx); bCalls.Load() != 2 || next != 2*troubleBackoff {
					t.Fatalf("after its backoff: pool b tried %d times (want 2), next due in %s (want %s)", bCalls.Load(), next, 2*troubleBackoff)
				}
				d.sched.refusals.mu.Lock()
				counted := len(d.sched.refusals.m)
				d.sched.refusals.mu.Unlock()
				if counted != 0 {
					t.Fatalf("an outage counted as the job's refusal (%d counted)", counted)
				}
			}
			if j, _ := d.Store.Job(ctx, uuidN(3100+n)); j.Status != mj.StatusQueued {
				t.Fatalf("pool b's job: %s %q", j.Status, j.ErrorMessage)
			}
		})
	}
}

// migrateCounter counts the dispatcher's attempts to move legacy queue keys.
type migrateCounter struct {
	*store.Store
	calls atomic.Int32
}

func (m *migrateCounter) MigrateQueueKeys(ctx context.Context, keys []string) (int, error) {
	m.calls.Add(1)
	return m.Store.MigrateQueueKeys(ctx, keys)
}

// A queue key of a version before fair share whose record cannot be decoded
// cannot be moved: the move is tried again only after a backoff, not at every
// pass (each failure woke the loop for another pass at once, which failed
// again: the loop spun), and the pool's other jobs are dispatched meanwhile.
func TestUnmovableLegacyQueueKeyDoesNotSpin(t *testing.T) {
	d, ctx := dispatcherOnNomad(t, func(w http.ResponseWriter, r *http.Request) {
		var body struct{ Meta map[string]string }
		json.NewDecoder(r.Body).Decode(&body)
		fmt.Fprintf(w, `{"DispatchedJobID":"mediajobs-cpu/dispatch-%s","EvalID":"e"}`, body.Meta["mediajobs_job_id"])
	})
	s := d.Store.(*store.Store)
	mc := &migrateCounter{Store: s}
	d.Store = mc
	d.nomad.registered = map[string]bool{"cpu": true}
	now := time.Now()
	d.clock = func() time.Time { return now }
	bad := uuidN(3201)
	legacy := fmt.Sprintf("%s%019d_%s", s.PoolQueuePrefix("cpu"), now.UnixNano(), bad)
	if _, err := s.Client().Put(ctx, legacy, bad); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Client().Put(ctx, strings.TrimSuffix(s.QueuePrefix(), "queue/")+"jobs/"+bad, "{not a job"); err != nil {
		t.Fatal(err)
	}
	passes := 0
	for i := range 3 {
		id := uuidN(3210 + i)
		fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusQueued, Attempt: 1})
		d.sched.dispatchPools(ctx)
		passes++
		if j, _ := d.Store.Job(ctx, id); j.NomadJobID == "" {
			t.Fatalf("pass %d: the pool's job %s was not dispatched", passes, id)
		}
	}
	if got := mc.calls.Load(); got != 1 {
		t.Fatalf("the move was tried %d times in %d passes within its backoff, want once: each failure would ask for the next pass", got, passes)
	}
	now = now.Add(troubleBackoff)
	d.sched.dispatchPools(ctx)
	if got := mc.calls.Load(); got != 2 {
		t.Fatalf("the move was tried %d times after its backoff, want 2", got)
	}
}

// A leader deposed while Nomad dispatched (its record write refused: not the
// leader) stops the child it started, which no job records; the next leader's
// dispatch of the same attempt then starts a child that runs, rather than being
// handed the stopped one for the attempt's idempotency token (which would cost
// the job an attempt).
func TestDeposedLeadersLateDispatchIsStopped(t *testing.T) {
	n := newDispatchingDouble(newNomadDouble(t))
	d, ctx := fixDispatcher(t, 2, n.client().Jobs(), &fakeBlobs{})
	id := uuidN(3301)
	fixJob(t, d, &mj.Job{ID: id, Status: mj.StatusQueued, Attempt: 1, TimeoutSeconds: 60})
	// A term whose election key is no more.
	var deposed Store = d.Store.(*store.Store).FencedBy("/test/election/gone", 1)
	d.term.Store(&deposed)
	if err := d.sched.dispatch(ctx, id); !errors.Is(err, store.ErrNotLeader) {
		t.Fatalf("dispatch by a deposed leader: %v", err)
	}
	d.term.Store(nil) // the next leader's
	first := n.dispatched()
	if len(first) != 1 || !n.stopped(first[0]) {
		t.Fatalf("children %v: want one, stopped", first)
	}
	if j, _ := d.Store.Job(ctx, id); j.NomadJobID != "" || j.Attempt != 1 || j.Status != mj.StatusQueued {
		t.Fatalf("the job after the deposed leader's dispatch: %s attempt %d child %q", j.Status, j.Attempt, j.NomadJobID)
	}
	if err := d.sched.dispatch(ctx, id); err != nil {
		t.Fatal(err)
	}
	j, _ := d.Store.Job(ctx, id)
	all := n.dispatched()
	if len(all) != 2 || j.NomadJobID != all[1] || n.stopped(all[1]) || j.Attempt != 1 {
		t.Fatalf("the new leader's dispatch: job on %q attempt %d, children %v (the first stopped)", j.NomadJobID, j.Attempt, all)
	}
	// A retry of that dispatch (a crash before its record) finds the same child.
	if err := d.Store.(*store.Store).CreateJob(ctx, &mj.Job{ID: uuidN(3302), AccountID: "acct", Machine: "cpu", Status: mj.StatusQueued, Attempt: 1,
		CreatedAt: time.Now().UTC(), QueuedAt: time.Now().UTC(), TimeoutSeconds: 60}); err != nil {
		t.Fatal(err)
	}
	d.term.Store(&deposed)
	_ = d.sched.dispatch(ctx, uuidN(3302)) // stopped: the first token's child
	d.term.Store(nil)
	for range 2 {
		if _, err := d.Store.UpdateJob(ctx, uuidN(3302), func(j *mj.Job) error { j.NomadJobID = ""; return nil }); err != nil {
			t.Fatal(err)
		}
		if err := d.sched.dispatch(ctx, uuidN(3302)); err != nil {
			t.Fatal(err)
		}
	}
	if got := n.dispatched(); len(got) != 4 {
		t.Fatalf("a retried dispatch started another child: %v", got)
	}
}
