package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/testenv"
	"github.com/mediajobs/mediajobs/workload"
	clientv3 "go.etcd.io/etcd/client/v3"
)

// The warm lease endpoints (warm.go, docs/warm.md) on a real etcd, with Nomad's
// identity verifier and allocation reads stubbed. The tests play the
// dispatcher's part with store.OfferWarm, as dispatcher/warm.go does.

// stubVerifier admits the tokens it knows, with their claims.
type stubVerifier map[string]workload.Claims

func (v stubVerifier) Verify(_ context.Context, token string) (*workload.Claims, error) {
	if c, ok := v[token]; ok {
		return &c, nil
	}
	return nil, errors.New("token signature does not verify with signing key \"k1\"")
}

// stubAllocs answers an allocation's statuses: running unless set.
type stubAllocs struct {
	mu     sync.Mutex
	status map[string][2]string
}

func (a *stubAllocs) AllocStatus(_ context.Context, id string) (string, string, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if s, ok := a.status[id]; ok {
		return s[0], s[1], nil
	}
	return "running", "run", nil
}

// waitSignal tells when a renewal's wait for its job has read the job and
// watches it, and whether that wait ended on the job (not on its deadline).
type waitSignal struct {
	*store.Store
	watching chan string // the job id, once per wait
	ended    chan bool   // true: the wait ended with its context alive
}

func (s *waitSignal) WaitJob(ctx context.Context, id string, done func(*mj.Job) bool) (*mj.Job, error) {
	first := true
	j, err := s.Store.WaitJob(ctx, id, func(j *mj.Job) bool {
		d := done(j)
		if first && !d {
			// The first call is the initial read: a write from now on reaches
			// the wait through its watch.
			first = false
			select {
			case s.watching <- id:
			default:
			}
		}
		return d
	})
	select {
	case s.ended <- ctx.Err() == nil:
	default:
	}
	return j, err
}

type warmHarness struct {
	*harness
	s      *store.Store
	sig    *waitSignal
	allocs *stubAllocs
	log    *logBuf
	acct   *mj.Account
	tokens []string
	mu     sync.Mutex
	bodies []string // every answer of a warm call
}

// The runners' allocations, and their tokens (long, like a JWT, so a leak
// cannot be a coincidence).
var (
	allocA, allocB, allocDead = uuid.NewString(), uuid.NewString(), uuid.NewString()
	tokA                      = "eyJ.runner-a." + strings.Repeat("a7", 40)
	tokB                      = "eyJ.runner-b." + strings.Repeat("b7", 40)
	tokDead                   = "eyJ.runner-dead." + strings.Repeat("d7", 40)
	tokOtherJob               = "eyJ.other-job." + strings.Repeat("c7", 40)
	tokOtherNS                = "eyJ.other-ns." + strings.Repeat("e7", 40)
	tokUnknown                = "eyJ.unknown." + strings.Repeat("f7", 40)
)

// newWarmHarness is a gateway with a warm pool "cpu" (lease_ttl 6s) and a
// plain pool "plain". Its request timeout makes a poll wait 3 s, not 15.
func newWarmHarness(t *testing.T) *warmHarness {
	s, _ := testenv.Etcd(t)
	cfg := config.Default()
	cfg.Server.PublicURL = "http://127.0.0.1:1"
	cfg.Server.MaxBodyBytes = 4096
	cfg.Server.RequestTimeout = "6s" // a poll waits request_timeout - 3s
	cfg.Pools = []*config.Pool{{Name: "cpu", Warm: &config.Warm{Count: 2, MaxJobSeconds: 60, LeaseTTL: "6s"}}, {Name: "plain"}}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	cfg.Server.RateLimit, cfg.Server.AuthFailureRate = 0, 0
	blobs, _ := blob.NewLocal(t.TempDir())
	sig := &waitSignal{Store: s, watching: make(chan string, 1), ended: make(chan bool, 1)}
	allocs := &stubAllocs{status: map[string][2]string{allocDead: {"complete", "stop"}}}
	verifier := stubVerifier{
		tokA:        {Namespace: "default", JobID: "mediajobs-cpu-warm", AllocationID: allocA, Task: "runner"},
		tokB:        {JobID: "mediajobs-cpu-warm", AllocationID: allocB, Task: "runner"},
		tokDead:     {JobID: "mediajobs-cpu-warm", AllocationID: allocDead, Task: "runner"},
		tokOtherJob: {JobID: "mediajobs-cpu", AllocationID: uuid.NewString(), Task: "runner"},
		tokOtherNS:  {Namespace: "other", JobID: "mediajobs-cpu-warm", AllocationID: uuid.NewString(), Task: "runner"},
	}
	buf := &logBuf{}
	g := &Gateway{Config: cfg, Store: sig, Blobs: blobs, Signer: blob.Signer{Secret: []byte("0123456789abcdef"), Base: cfg.Server.PublicURL},
		Resolver: fakeDNS{}, Warm: &WarmAuth{Verifier: verifier, Allocs: allocs},
		Log: slog.New(slog.NewJSONHandler(buf, &slog.HandlerOptions{Level: slog.LevelDebug}))}
	h := &harness{t: t, app: g.App(), gw: g, store: s, keys: map[string]string{}}
	a, err := s.EnsureAccount(context.Background(), "alice", "alice")
	if err != nil {
		t.Fatal(err)
	}
	secret := mj.NewAPIKeySecret()
	if _, err := s.AddAPIKey(context.Background(), a.ID, "k", secret); err != nil {
		t.Fatal(err)
	}
	h.keys["alice"] = secret
	return &warmHarness{harness: h, s: s, sig: sig, allocs: allocs, log: buf, acct: a,
		tokens: []string{tokA, tokB, tokDead, tokOtherJob, tokOtherNS, tokUnknown}}
}

// call POSTs body (JSON, or a string as it is) to path with authorization auth
// ("" for none) and returns the status and the answer.
func (w *warmHarness) call(path, auth string, body any) (int, []byte) {
	w.t.Helper()
	raw, ok := body.(string)
	if !ok {
		b, _ := json.Marshal(body)
		raw = string(b)
	}
	req := httptest.NewRequest("POST", path, strings.NewReader(raw))
	req.Header.Set("Content-Type", "application/json")
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := w.app.Test(req, 20000)
	if err != nil {
		w.t.Fatal(err)
	}
	ans, _ := io.ReadAll(resp.Body)
	w.mu.Lock()
	w.bodies = append(w.bodies, string(ans))
	w.mu.Unlock()
	return resp.StatusCode, ans
}

// refused asserts an answer is status with errorCode code.
func refused(t *testing.T, what string, status int, ans []byte, wantStatus int, code string) {
	t.Helper()
	var m map[string]any
	json.Unmarshal(ans, &m)
	if status != wantStatus || m["errorCode"] != code {
		t.Errorf("%s: HTTP %d %s, want %d %s", what, status, ans, wantStatus, code)
	}
}

// noTokenLeaked asserts no answer and no log line holds a token.
func (w *warmHarness) noTokenLeaked() {
	w.t.Helper()
	w.mu.Lock()
	answers := strings.Join(w.bodies, "\n")
	w.mu.Unlock()
	logs := w.log.String()
	for _, tok := range w.tokens {
		// The part after the prefix: a token cut short would still be a leak.
		secret := tok[strings.LastIndex(tok, ".")+1:]
		if strings.Contains(answers, secret) {
			w.t.Errorf("an answer holds a runner's token:\n%s", answers)
		}
		if strings.Contains(logs, secret) {
			w.t.Errorf("the log holds a runner's token:\n%s", logs)
		}
	}
}

// newJob stores a queued job of the warm pool.
func (w *warmHarness) newJob() string {
	w.t.Helper()
	now := time.Now().UTC()
	id := uuid.NewString()
	j := &mj.Job{ID: id, AccountID: w.acct.ID, Machine: "cpu", Status: mj.StatusQueued, CreatedAt: now, QueuedAt: now, TimeoutSeconds: 30,
		InputFiles: map[string]string{"in": "http://127.0.0.1:1/a.mp4"}, FFmpegCommands: []string{"-i {{in}} {{out.mp4}}"}, OutputNames: []string{"out.mp4"}}
	if err := w.s.CreateJob(context.Background(), j); err != nil {
		w.t.Fatal(err)
	}
	return id
}

type pollAnswer struct {
	status int
	body   []byte
}

// poll starts a poll as tok in the background.
func (w *warmHarness) poll(tok string) <-chan pollAnswer {
	ch := make(chan pollAnswer, 1)
	go func() {
		status, body := w.call("/warm/poll", "Bearer "+tok, map[string]any{"pool": "cpu"})
		ch <- pollAnswer{status, body}
	}()
	return ch
}

// idleOf waits for alloc's runner to wait for work (its idle key, at a
// revision after rev) and returns it; ok false when the poll answered first.
func (w *warmHarness) idleOf(alloc string, after int64, polled <-chan pollAnswer) (store.WarmIdle, pollAnswer, bool) {
	w.t.Helper()
	deadline := time.Now().Add(20 * time.Second)
	for time.Now().Before(deadline) {
		idle, err := w.s.WarmIdleRunners(context.Background(), "cpu")
		if err != nil {
			w.t.Fatal(err)
		}
		for _, i := range idle {
			if i.Alloc == alloc && i.Rev > after {
				return i, pollAnswer{}, true
			}
		}
		select {
		case a := <-polled:
			return store.WarmIdle{}, a, false
		case <-time.After(10 * time.Millisecond):
		}
	}
	w.t.Fatalf("runner %s never waited for work", alloc)
	return store.WarmIdle{}, pollAnswer{}, false
}

// offer hands job id to the waiting runner idle as the dispatcher does: the job
// becomes running on a new run under the runner's lease.
func (w *warmHarness) offer(idle store.WarmIdle, id string) (*store.WarmRun, error) {
	run := &store.WarmRun{Run: uuid.NewString(), JobID: id, Pool: "cpu", Alloc: idle.Alloc, Lease: idle.Lease,
		Manifest: json.RawMessage(`{"job_id":"` + id + `","attempt":1}`)}
	_, err := w.s.OfferWarm(context.Background(), id, idle, run, func(j *mj.Job) error {
		now := time.Now().UTC()
		j.NomadJobID, j.Attempt, j.Status = mj.WarmChild(run.Run), 1, mj.StatusRunning
		j.StartedAt, j.AttemptStartedAt, j.DispatchedAt = &now, &now, &now
		j.Worker = &mj.Worker{Path: mj.WorkerWarm, NomadJobID: "mediajobs-cpu-warm", AllocationID: idle.Alloc}
		return nil
	})
	return run, err
}

// leased polls as tok (runner alloc) until it is handed job id, and returns
// the lease the poll answered.
func (w *warmHarness) leased(tok, alloc, id string) WarmLease {
	w.t.Helper()
	rev, _ := w.s.Revision(context.Background())
	for range 5 {
		polled := w.poll(tok)
		idle, ans, ok := w.idleOf(alloc, rev, polled)
		if ok {
			if _, err := w.offer(idle, id); store.IsWarmGone(err) {
				ans = <-polled // the wait ended before the offer: poll again
			} else if err != nil {
				w.t.Fatal(err)
			} else {
				ans = <-polled
				var l WarmLease
				if ans.status != 200 || json.Unmarshal(ans.body, &l) != nil {
					w.t.Fatalf("a poll while a job was offered: HTTP %d %s", ans.status, ans.body)
				}
				return l
			}
		}
		if ans.status != 204 {
			w.t.Fatalf("poll: HTTP %d %s", ans.status, ans.body)
		}
		rev, _ = w.s.Revision(context.Background())
	}
	w.t.Fatalf("never handed job %s to runner %s", id, alloc)
	return WarmLease{}
}

// leaseTTL is what etcd says of a lease: -1 when it is gone.
func (w *warmHarness) leaseTTL(id int64) int64 {
	w.t.Helper()
	r, err := w.s.Client().TimeToLive(context.Background(), clientv3.LeaseID(id))
	if err != nil {
		w.t.Fatal(err)
	}
	return r.TTL
}

// Every way a call is refused, before anything is written: no runner waits
// after any of them.
func TestWarmCallsRefused(t *testing.T) {
	w := newWarmHarness(t)
	body := map[string]any{"pool": "cpu"}
	for _, path := range []string{"/warm/poll", "/warm/renew", "/warm/done"} {
		status, ans := w.call(path, "", body)
		refused(t, path+" without Authorization", status, ans, 401, mj.EBadAPIKey)
		status, ans = w.call(path, "Basic "+tokA, body)
		refused(t, path+" with a Basic Authorization", status, ans, 401, mj.EBadAPIKey)
		status, ans = w.call(path, "Bearer ", body)
		refused(t, path+" with an empty token", status, ans, 401, mj.EBadAPIKey)
		status, ans = w.call(path, tokA, body)
		refused(t, path+" with a token without Bearer", status, ans, 401, mj.EBadAPIKey)
		status, ans = w.call(path, "Bearer "+tokUnknown, body)
		refused(t, path+" with a token the verifier refuses", status, ans, 401, mj.EBadAPIKey)
		status, ans = w.call(path, "Bearer "+tokOtherJob, body)
		refused(t, path+" with the token of another Nomad job", status, ans, 403, mj.EForbidden)
		status, ans = w.call(path, "Bearer "+tokOtherNS, body)
		refused(t, path+" with the token of another namespace", status, ans, 403, mj.EForbidden)
		// Only a poll needs the pool to be warm now (a run handed out before its
		// warm block was removed still renews and reports), and the identity
		// must be that pool's warm job's.
		code, status404 := mj.ENotFound, 404
		if path != "/warm/poll" {
			code, status404 = mj.EForbidden, 403
		}
		status, ans = w.call(path, "Bearer "+tokA, map[string]any{"pool": "plain"})
		refused(t, path+" for a pool without a warm block", status, ans, status404, code)
		status, ans = w.call(path, "Bearer "+tokA, map[string]any{"pool": "nope"})
		refused(t, path+" for no such pool", status, ans, status404, code)
		status, ans = w.call(path, "Bearer "+tokA, `{"pool": "cpu"`)
		refused(t, path+" with a body that is not JSON", status, ans, 400, mj.EValidation)
		status, ans = w.call(path, "Bearer "+tokA, `["cpu"]`)
		refused(t, path+" with a body that is not an object", status, ans, 400, mj.EValidation)
	}
	// A token outlives its allocation: a poll of one that is not running is refused.
	status, ans := w.call("/warm/poll", "Bearer "+tokDead, body)
	refused(t, "poll of a complete allocation", status, ans, 403, mj.EForbidden)
	w.allocs.mu.Lock()
	w.allocs.status[allocDead] = [2]string{"running", "stop"}
	w.allocs.mu.Unlock()
	status, ans = w.call("/warm/poll", "Bearer "+tokDead, body)
	refused(t, "poll of an allocation Nomad is stopping", status, ans, 403, mj.EForbidden)
	// A done with an outcome it does not know.
	status, ans = w.call("/warm/done", "Bearer "+tokA, map[string]any{"pool": "cpu", "run": uuid.NewString(), "outcome": "maybe"})
	refused(t, "done with an unknown outcome", status, ans, 400, mj.EValidation)
	// No verifier: no runner is admitted.
	w.gw.Warm = nil
	status, ans = w.call("/warm/poll", "Bearer "+tokA, body)
	refused(t, "poll with no verifier configured", status, ans, 503, mj.EUnavailable)

	idle, err := w.s.WarmIdleRunners(context.Background(), "cpu")
	if err != nil || len(idle) != 0 {
		t.Fatalf("a refused poll left a runner waiting: %v %v", idle, err)
	}
	if resp, err := w.s.Client().Leases(context.Background()); err != nil || len(resp.Leases) != 0 {
		t.Fatalf("a refused call left leases: %v %v", resp, err)
	}
	w.noTokenLeaked()
}

// A poll no job comes to answers 204 after its wait, and leaves nothing behind:
// no idle key, no lease.
func TestWarmPollWithoutJob(t *testing.T) {
	w := newWarmHarness(t)
	polled := w.poll(tokA)
	if _, ans, ok := w.idleOf(allocA, 0, polled); !ok {
		t.Fatalf("the poll answered before it waited: HTTP %d %s", ans.status, ans.body)
	}
	ans := <-polled
	if ans.status != 204 || len(ans.body) != 0 {
		t.Fatalf("a poll with no job: HTTP %d %s", ans.status, ans.body)
	}
	if idle, err := w.s.WarmIdleRunners(context.Background(), "cpu"); err != nil || len(idle) != 0 {
		t.Fatalf("a poll that ended left its runner waiting: %v %v", idle, err)
	}
	if resp, err := w.s.Client().Leases(context.Background()); err != nil || len(resp.Leases) != 0 {
		t.Fatalf("a poll that ended left its lease: %v %v", resp, err)
	}
	w.noTokenLeaked()
}

// A job offered to a waiting runner is its poll's answer; renewals keep it and
// done ends it, once, only for the run's own runner.
func TestWarmLeaseRenewDone(t *testing.T) {
	w := newWarmHarness(t)
	ctx := context.Background()
	id := w.newJob()
	l := w.leased(tokA, allocA, id)
	if l.JobID != id || l.Attempt != 1 || l.Run == "" || l.Lease == 0 || l.TTLSeconds != 6 || !strings.Contains(string(l.Manifest), id) {
		t.Fatalf("lease %+v", l)
	}
	run, err := w.s.WarmRunOf(ctx, "cpu", allocA)
	if err != nil || run == nil || run.Run != l.Run || run.Lease != l.Lease || run.JobID != id {
		t.Fatalf("run key %+v %v, lease %+v", run, err, l)
	}
	if idle, _ := w.s.WarmIdleRunners(ctx, "cpu"); len(idle) != 0 {
		t.Fatalf("a runner with a job still waits: %v", idle)
	}

	renew := func(tok, run string, lease int64) (int, []byte) {
		return w.call("/warm/renew", "Bearer "+tok, map[string]any{"pool": "cpu", "run": run, "lease": lease})
	}
	status, ans := renew(tokA, uuid.NewString(), l.Lease)
	refused(t, "renew of another run", status, ans, 409, mj.EConflict)
	status, ans = renew(tokA, l.Run, l.Lease+1)
	refused(t, "renew with another lease", status, ans, 409, mj.EConflict)
	status, ans = renew(tokB, l.Run, l.Lease)
	refused(t, "renew by another runner", status, ans, 409, mj.EConflict)
	status, ans = renew(tokA, l.Run, l.Lease)
	var r WarmRenewal
	if status != 200 || json.Unmarshal(ans, &r) != nil || r.Stop {
		t.Fatalf("renew of the run: HTTP %d %s", status, ans)
	}

	done := func(tok, run string, outcome string) (int, []byte) {
		return w.call("/warm/done", "Bearer "+tok, map[string]any{"pool": "cpu", "run": run, "lease": l.Lease, "job_id": id, "attempt": 1, "outcome": outcome})
	}
	status, ans = done(tokA, uuid.NewString(), "reported")
	refused(t, "done of another run", status, ans, 409, mj.EConflict)
	status, ans = done(tokB, l.Run, "reported")
	refused(t, "done by another runner", status, ans, 409, mj.EConflict)
	if d, _ := w.s.WarmDoneOf(ctx, l.Run); d != nil {
		t.Fatalf("a refused done was recorded: %+v", d)
	}
	if status, ans = done(tokA, l.Run, "reported"); status != 204 {
		t.Fatalf("done: HTTP %d %s", status, ans)
	}
	d, err := w.s.WarmDoneOf(ctx, l.Run)
	if err != nil || d == nil || d.JobID != id || d.Attempt != 1 || d.Alloc != allocA || d.Outcome != "reported" {
		t.Fatalf("done key %+v %v", d, err)
	}
	if run, err := w.s.WarmRunOf(ctx, "cpu", allocA); err != nil || run != nil {
		t.Fatalf("the run key outlived done: %+v %v", run, err)
	}
	if ttl := w.leaseTTL(l.Lease); ttl != -1 {
		t.Fatalf("the run's lease outlived done: TTL %d", ttl)
	}
	status, ans = done(tokA, l.Run, "reported")
	refused(t, "a second done", status, ans, 409, mj.EConflict)
	status, ans = renew(tokA, l.Run, l.Lease)
	refused(t, "renew after done", status, ans, 409, mj.EConflict)
	w.noTokenLeaked()
}

// A cancel reaches a renewal that waits: it answers stop at once, not at the
// end of its wait; so does a job that went on without the run.
func TestWarmRenewStopsOnCancel(t *testing.T) {
	w := newWarmHarness(t)
	id := w.newJob()
	l := w.leased(tokB, allocB, id)
	renewed := make(chan pollAnswer, 1)
	go func() {
		status, ans := w.call("/warm/renew", "Bearer "+tokB, map[string]any{"pool": "cpu", "run": l.Run, "lease": l.Lease})
		renewed <- pollAnswer{status, ans}
	}()
	select {
	case got := <-w.sig.watching:
		if got != id {
			t.Fatalf("the renewal waits on job %s, not %s", got, id)
		}
	case a := <-renewed:
		t.Fatalf("the renewal answered before it waited: HTTP %d %s", a.status, a.body)
	}
	if status, body, _ := w.do("POST", "/api/jobs/"+id+"/cancel", "alice", nil); status != 200 {
		t.Fatalf("cancel: HTTP %d %v", status, body)
	}
	a := <-renewed
	var r WarmRenewal
	if a.status != 200 || json.Unmarshal(a.body, &r) != nil || !r.Stop || !strings.Contains(r.Why, "cancelled") {
		t.Fatalf("renew while the job was cancelled: HTTP %d %s", a.status, a.body)
	}
	if early := <-w.sig.ended; !early {
		t.Fatal("the renewal learned of the cancel only when its wait ended")
	}

	// A job the dispatcher sent on as a new attempt (the run lapsed): stop.
	id2 := w.newJob()
	l2 := w.leased(tokA, allocA, id2)
	if _, err := w.s.UpdateJob(context.Background(), id2, func(j *mj.Job) error {
		j.NomadJobID, j.Attempt, j.Worker = "", 2, nil
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	status, ans := w.call("/warm/renew", "Bearer "+tokA, map[string]any{"pool": "cpu", "run": l2.Run, "lease": l2.Lease})
	var r2 WarmRenewal
	if status != 200 || json.Unmarshal(ans, &r2) != nil || !r2.Stop {
		t.Fatalf("renew of a run the job went on without: HTTP %d %s", status, ans)
	}
	w.noTokenLeaked()
}

// A runner that polls while its allocation holds a run lost that run (its
// process restarted in place): the run's lease is revoked, and the new poll
// gets work.
func TestWarmPollRevokesALostRun(t *testing.T) {
	w := newWarmHarness(t)
	ctx := context.Background()
	id := w.newJob()
	old := w.leased(tokA, allocA, id)
	rev, _ := w.s.Revision(ctx)
	polled := w.poll(tokA)
	idle, ans, ok := w.idleOf(allocA, rev, polled)
	if !ok {
		t.Fatalf("the second poll answered before it waited: HTTP %d %s", ans.status, ans.body)
	}
	if run, err := w.s.WarmRunOf(ctx, "cpu", allocA); err != nil || run != nil {
		t.Fatalf("the lost run's key outlived the new poll: %+v %v", run, err)
	}
	if ttl := w.leaseTTL(old.Lease); ttl != -1 {
		t.Fatalf("the lost run's lease outlived the new poll: TTL %d", ttl)
	}
	if idle.Lease == old.Lease {
		t.Fatal("the new poll waits under the lost run's lease")
	}
	status, body := w.call("/warm/renew", "Bearer "+tokA, map[string]any{"pool": "cpu", "run": old.Run, "lease": old.Lease})
	refused(t, "renew of the lost run", status, body, 409, mj.EConflict)
	// The new poll takes work as any other.
	id2 := w.newJob()
	if _, err := w.offer(idle, id2); err != nil {
		if !store.IsWarmGone(err) {
			t.Fatal(err)
		}
		<-polled
		w.leased(tokA, allocA, id2)
	} else if a := <-polled; a.status != 200 || !strings.Contains(string(a.body), id2) {
		t.Fatalf("the new poll: HTTP %d %s", a.status, a.body)
	}
	w.noTokenLeaked()
}

// A runner's done ends its own run and revokes its own lease only: naming the
// lease of another runner's run ends nothing of that runner's.
func TestWarmDoneRevokesOnlyItsOwnLease(t *testing.T) {
	w := newWarmHarness(t)
	ctx := context.Background()
	idA, idB := w.newJob(), w.newJob()
	la := w.leased(tokA, allocA, idA)
	lb := w.leased(tokB, allocB, idB)
	status, ans := w.call("/warm/done", "Bearer "+tokA, map[string]any{"pool": "cpu", "run": la.Run, "lease": lb.Lease, "job_id": idA, "attempt": 1, "outcome": "reported"})
	refused(t, "done naming another runner's lease", status, ans, 409, mj.EConflict)
	if run, err := w.s.WarmRunOf(ctx, "cpu", allocB); err != nil || run == nil || run.Run != lb.Run {
		t.Fatalf("runner A's done ended runner B's run: %+v %v", run, err)
	}
	if ttl := w.leaseTTL(lb.Lease); ttl <= 0 {
		t.Fatalf("runner A's done revoked runner B's lease: TTL %d", ttl)
	}
	status, ans = w.call("/warm/done", "Bearer "+tokA, map[string]any{"pool": "cpu", "run": la.Run, "lease": la.Lease, "job_id": idA, "attempt": 1, "outcome": "stopped"})
	if status != 204 {
		t.Fatalf("done with its own lease: HTTP %d %s", status, ans)
	}
	if ttl := w.leaseTTL(la.Lease); ttl != -1 {
		t.Fatalf("the run's lease outlived done: TTL %d", ttl)
	}
	w.noTokenLeaked()
}

// A gateway shutting down answers its waiting runners at once (204) rather than
// when their polls' waits end (15 s): its shutdown is not held up by them.
func TestWarmPollEndsAtShutdown(t *testing.T) {
	w := newWarmHarness(t)
	w.gw.Config.Server.RequestTimeoutD = time.Minute // a poll would wait 15 s
	polled := w.poll(tokA)
	if _, ans, ok := w.idleOf(allocA, 0, polled); !ok {
		t.Fatalf("the poll answered before it waited: HTTP %d %s", ans.status, ans.body)
	}
	w.gw.StopStreams() // what the server's shutdown does first
	var ans pollAnswer
	testenv.Eventually(t, 5*time.Second, "the waiting poll to answer at shutdown", func() bool {
		select {
		case ans = <-polled:
			return true
		default:
			return false
		}
	})
	if ans.status != 204 {
		t.Fatalf("a poll ended by shutdown: HTTP %d %s", ans.status, ans.body)
	}
	if idle, err := w.s.WarmIdleRunners(context.Background(), "cpu"); err != nil || len(idle) != 0 {
		t.Fatalf("the runner still waits after shutdown: %v %v", idle, err)
	}
}

// stalledRuns is a store whose reads of warm runs wait for as long as their
// context lets them, as etcd's client does while etcd is away.
type stalledRuns struct{ *waitSignal }

func (s stalledRuns) WarmRunOf(ctx context.Context, _, _ string) (*store.WarmRun, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// With etcd away, a warm call answers 503 within warmEtcdTimeout, whatever the
// request timeout: the runner tries again (perhaps through another gateway)
// while its lease holds, and handlers do not pile up on etcd.
func TestWarmCallsAnswerWhileEtcdIsAway(t *testing.T) {
	w := newWarmHarness(t)
	id := w.newJob()
	l := w.leased(tokA, allocA, id)
	w.gw.Config.Server.RequestTimeoutD = time.Hour // longer than the test waits (20 s)
	w.gw.Store = stalledRuns{w.sig}
	for _, c := range []struct {
		path string
		body map[string]any
	}{
		{"/warm/poll", map[string]any{"pool": "cpu"}},
		{"/warm/renew", map[string]any{"pool": "cpu", "run": l.Run, "lease": l.Lease}},
		{"/warm/done", map[string]any{"pool": "cpu", "run": l.Run, "lease": l.Lease, "job_id": id, "attempt": 1, "outcome": "reported"}},
	} {
		status, ans := w.call(c.path, "Bearer "+tokA, c.body)
		if status != 503 && status != 500 {
			t.Errorf("%s with etcd away: HTTP %d %s; want an error answer", c.path, status, ans)
		}
	}
}

// A renewal holds at most a third of the lease's TTL: a renewal or two may
// fail and the lease still hold.
func TestWarmRenewHoldIsAThirdOfTheTTLAtMost(t *testing.T) {
	for ttl, want := range map[time.Duration]time.Duration{3 * time.Second: time.Second, 6 * time.Second: 2 * time.Second, time.Minute: warmRenewWait} {
		if got := renewHold(ttl); got != want {
			t.Errorf("renewHold(%s) = %s, want %s", ttl, got, want)
		}
	}
}

// A runner that goes away while its poll waits (its allocation stopped, a
// proxy gave up) stops waiting at once, over a real connection: its idle key
// and its lease go, so no job is handed to it.
func TestWarmPollEndsWhenItsRunnerLeaves(t *testing.T) {
	w := newWarmHarness(t)
	w.gw.Config.Server.RequestTimeoutD = time.Hour
	// A lease far longer than the test waits: only a revoke ends it in time.
	w.gw.Config.Pool("cpu").Warm.LeaseTTLD = 10 * time.Minute
	defer func(d time.Duration) { warmPollWait = d }(warmPollWait)
	warmPollWait = 10 * time.Minute // longer than the test waits: only the leaving ends it
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go w.app.Listener(ln)
	t.Cleanup(func() { w.app.ShutdownWithTimeout(5 * time.Second) })
	ctx, leave := context.WithCancel(context.Background())
	defer leave()
	req, _ := http.NewRequestWithContext(ctx, "POST", "http://"+ln.Addr().String()+"/warm/poll", strings.NewReader(`{"pool":"cpu"}`))
	req.Header.Set("Authorization", "Bearer "+tokA)
	req.Header.Set("Content-Type", "application/json")
	answered := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
			err = fmt.Errorf("the poll answered HTTP %d before its runner left", resp.StatusCode)
		}
		answered <- err
	}()
	var idle store.WarmIdle
	testenv.Eventually(t, time.Minute, "the runner to wait for work", func() bool {
		runners, err := w.s.WarmIdleRunners(context.Background(), "cpu")
		if err != nil || len(runners) != 1 {
			return false
		}
		idle = runners[0]
		return true
	})
	leave() // the runner goes: its connection closes
	if err := <-answered; !errors.Is(err, context.Canceled) {
		t.Fatal(err)
	}
	// The idle key goes first (StopWaiting), the lease as the handler returns.
	testenv.Eventually(t, time.Minute, "the idle key and the lease of a runner that left to go", func() bool {
		runners, err := w.s.WarmIdleRunners(context.Background(), "cpu")
		return err == nil && len(runners) == 0 && w.leaseTTL(idle.Lease) == -1
	})
}
