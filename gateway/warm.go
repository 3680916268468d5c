package gateway

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/workload"
)

// Warm runners (docs/warm.md) lease jobs here. A runner proves what it is with
// its Nomad workload identity (a JWT Nomad signs and the runner reads from its
// secrets directory), never with etcd credentials: the identity names its
// allocation, which must be running, and its job, which must be the warm job of
// the pool it asks for. Then:
//
//	POST /warm/poll   wait (up to warmPollWait) for a job; 204 when none came
//	POST /warm/renew  keep the job's lease; says "stop" when the job was
//	                  cancelled or ended without the runner
//	POST /warm/done   the result is uploaded (or the job is given back)
//
// Every lease is an etcd lease: a runner that stops renewing loses its job after
// the pool's lease_ttl, and the dispatcher runs it again (dispatcher/warm.go).

// WarmAuth is what the gateway needs to admit warm runners.
type WarmAuth struct {
	Verifier Verifier
	Allocs   AllocStatus
}

// Verifier checks a workload identity; *workload.Verifier is one.
type Verifier interface {
	Verify(ctx context.Context, token string) (*workload.Claims, error)
}

// AllocStatus reads an allocation's client status and desired status from Nomad.
type AllocStatus interface {
	AllocStatus(ctx context.Context, id string) (client, desired string, err error)
}

// warmStore is what the lease endpoints need of the store; *store.Store has it.
type warmStore interface {
	PutWarmIdle(ctx context.Context, w store.WarmIdle) (int64, error)
	StopWaiting(ctx context.Context, pool, alloc string, rev int64) (*store.WarmRun, error)
	WarmRunOf(ctx context.Context, pool, alloc string) (*store.WarmRun, error)
	FinishWarmRun(ctx context.Context, d store.WarmDone) error
	MarkWarmStarted(ctx context.Context, r *store.WarmRun) error
	GrantWarmLease(ctx context.Context, ttl time.Duration) (int64, error)
	KeepWarmLease(ctx context.Context, lease int64) error
	RenewWarmLease(ctx context.Context, lease int64) (time.Duration, error)
	RevokeWarmLease(ctx context.Context, lease int64)
	WaitWarmRun(ctx context.Context, pool, alloc string, rev int64) *store.WarmRun
}

// warmPollWait is how long a poll waits for a job before it answers 204 (a
// variable for tests).
var warmPollWait = 15 * time.Second

// warmRenewWait is how long a renewal waits for the job to be cancelled before
// it answers, at most a third of the lease's TTL, so that a renewal or two may
// fail and the lease still hold: the runner renews again at once, so a cancel
// reaches it within this long at worst, and usually as it is written.
const warmRenewWait = config.WarmRenewHold

// warmEtcdTimeout bounds each etcd call of the warm endpoints: with etcd away
// or slow, the call answers 503 within it and the runner tries again (perhaps
// through another gateway) while its lease holds; no handler waits on etcd for
// as long as it is away, and they do not pile up.
const warmEtcdTimeout = 5 * time.Second

// etcdCtx is ctx's values with a deadline of warmEtcdTimeout and none of ctx's
// cancellation (a poll's wait that ended must not cut the calls after it).
func etcdCtx(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.WithoutCancel(ctx), warmEtcdTimeout)
}

type warmRequest struct {
	Pool    string `json:"pool"`
	Run     string `json:"run,omitempty"`
	Lease   int64  `json:"lease,omitempty"`
	JobID   string `json:"job_id,omitempty"`
	Attempt int    `json:"attempt,omitempty"`
	Outcome string `json:"outcome,omitempty"`
	Why     string `json:"why,omitempty"`
}

// WarmLease is what a poll hands a runner: its job, and the lease it renews.
type WarmLease struct {
	Run        string          `json:"run"`
	Lease      int64           `json:"lease"`
	TTLSeconds int             `json:"ttl_seconds"`
	JobID      string          `json:"job_id"`
	Attempt    int             `json:"attempt"`
	Manifest   json.RawMessage `json:"manifest"`
}

// warmCaller is a verified runner and its pool.
type warmCaller struct {
	pool  string       // the runner's pool
	warm  *config.Warm // its warm block; nil once removed (renew and done still work)
	alloc string
	req   warmRequest
	ws    warmStore
}

// warmCall authenticates a runner's request and reads its body. Only a poll
// needs the pool to be warm now: runs handed out before its warm block was
// removed still renew and report.
func (g *Gateway) warmCall(c *fiber.Ctx, poll bool) (*warmCaller, error) {
	ws := g.Store
	if g.Warm == nil {
		return nil, mj.Errorf(mj.EUnavailable, "this server admits no warm runners (no Nomad workload identity verifier is configured)")
	}
	token, ok := strings.CutPrefix(c.Get(fiber.HeaderAuthorization), "Bearer ")
	if !ok || token == "" {
		return nil, mj.Errorf(mj.EBadAPIKey, "a warm runner authenticates with its Nomad workload identity: Authorization: Bearer <the JWT in ${NOMAD_SECRETS_DIR}/nomad_mediajobs.jwt>")
	}
	// The identity first: nothing about pools is said to a caller without one.
	claims, err := g.Warm.Verifier.Verify(c.UserContext(), token)
	if err != nil {
		return nil, mj.Errorf(mj.EBadAPIKey, "workload identity refused: %v", err)
	}
	body, err := g.jsonBody(c)
	if err != nil {
		return nil, err
	}
	var req warmRequest
	if err := json.Unmarshal(body, &req); err != nil {
		return nil, mj.Errorf(mj.EValidation, "the request must be a JSON object with \"pool\": %v", err)
	}
	var warm *config.Warm
	if pool := g.Config.Pool(req.Pool); pool != nil {
		warm = pool.Warm
	}
	if poll && warm == nil || req.Pool == "" {
		return nil, mj.Errorf(mj.ENotFound, "pool %q has no warm runners", mj.Clip(req.Pool, 64))
	}
	if want := mj.WarmJobID(req.Pool); claims.JobID != want {
		return nil, mj.Errorf(mj.EForbidden, "the identity is of Nomad job %q, not of pool %s's warm runners (%s)", claims.JobID, mj.Clip(req.Pool, 64), want)
	}
	if ns := g.nomadNamespace(); claims.Namespace != "" && claims.Namespace != ns {
		return nil, mj.Errorf(mj.EForbidden, "the identity is of Nomad namespace %q, not %q", claims.Namespace, ns)
	}
	return &warmCaller{pool: req.Pool, warm: warm, alloc: claims.AllocationID, req: req, ws: ws}, nil
}

func (g *Gateway) nomadNamespace() string {
	if n := g.Config.Nomad; n != nil && n.Namespace != "" {
		return n.Namespace
	}
	return "default"
}

// warmPoll waits for a job for the runner, under a fresh etcd lease it keeps
// alive while it waits.
func (g *Gateway) warmPoll(c *fiber.Ctx) error {
	w, err := g.warmCall(c, true)
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	// A token outlives its allocation: the allocation must be running now.
	client, desired, err := g.Warm.Allocs.AllocStatus(ctx, w.alloc)
	if err != nil {
		return mj.Errorf(mj.EUnavailable, "could not check allocation %s with Nomad: %v", w.alloc, err)
	}
	// (Pending too: its task runs before the client tells the servers.)
	if (client != "running" && client != "pending") || desired != "run" {
		return mj.Errorf(mj.EForbidden, "allocation %s is %s (desired %s), not running: it leases no work", w.alloc, client, desired)
	}
	ectx, cancel := etcdCtx(ctx)
	defer cancel()
	// A run this allocation still holds is one its runner lost (the process
	// restarted in place): its lease goes now, and the job is run again.
	if old, err := w.ws.WarmRunOf(ectx, w.pool, w.alloc); err != nil {
		return err
	} else if old != nil {
		w.ws.RevokeWarmLease(ectx, old.Lease)
	}
	ttl := w.warm.LeaseTTLD
	lease, err := w.ws.GrantWarmLease(ectx, ttl)
	if err != nil {
		return err
	}
	handed := false
	defer func() {
		if !handed { // no job went out under it: it goes now, not a TTL later
			rctx, cancel := etcdCtx(ctx)
			defer cancel()
			w.ws.RevokeWarmLease(rctx, lease)
		}
	}()
	wait, stop := context.WithTimeout(ctx, min(warmPollWait, max(g.Config.Server.RequestTimeoutD-3*time.Second, time.Second)))
	defer stop()
	// A gateway shutting down answers its waiting runners at once (204): they
	// poll another, and its shutdown is not held up by them.
	defer context.AfterFunc(g.streamCtx(), stop)()
	if err := w.ws.KeepWarmLease(wait, lease); err != nil {
		return err
	}
	pctx, cancel := etcdCtx(ctx)
	defer cancel()
	rev, err := w.ws.PutWarmIdle(pctx, store.WarmIdle{Pool: w.pool, Alloc: w.alloc, Lease: lease, Since: g.Now().UTC()})
	if err != nil {
		return err
	}
	// A runner that goes away while it waits (its allocation stopped, a proxy
	// gave up on the poll) stops waiting at once: its idle key would otherwise
	// live on, and a job handed to it would wait a lease TTL to run elsewhere.
	clientLeft := watchClient(c.Context().Conn(), stop)
	run := g.waitRun(wait, w, rev)
	stop() // the runner renews from here on; a wait that ends with no job ends its lease
	left := clientLeft()
	ectx, cancel = etcdCtx(ctx)
	defer cancel()
	if run == nil {
		if run, err = w.ws.StopWaiting(ectx, w.pool, w.alloc, rev); err != nil {
			return err
		}
	}
	if run == nil || run.Lease != lease {
		return c.SendStatus(fiber.StatusNoContent)
	}
	if left {
		// Handed over as the runner left: its lease goes now (deferred above),
		// and the job goes back to the queue at once, its attempt not started.
		g.Log.Info("a warm runner left its poll as a job was handed to it", "pool", w.pool, "alloc", w.alloc, "job", run.JobID)
		return c.SendStatus(fiber.StatusNoContent)
	}
	// The runner renews from here: the TTL starts afresh as it gets the job.
	if _, err := w.ws.RenewWarmLease(ectx, lease); err != nil {
		return fmt.Errorf("keep warm lease: %w", err)
	}
	handed = true
	return c.JSON(WarmLease{Run: run.Run, Lease: run.Lease, TTLSeconds: int(ttl / time.Second), JobID: run.JobID, Attempt: run.Attempt, Manifest: run.Manifest})
}

// waitRun watches the runner's run key from rev until a run is put there or ctx
// ends.
func (g *Gateway) waitRun(ctx context.Context, w *warmCaller, rev int64) *store.WarmRun {
	return w.ws.WaitWarmRun(ctx, w.pool, w.alloc, rev)
}

// renewHold is how long a renewal of a lease of ttl waits for its job to be
// cancelled: warmRenewWait, at most a third of ttl.
func renewHold(ttl time.Duration) time.Duration {
	return max(min(warmRenewWait, ttl/3), 100*time.Millisecond)
}

// WarmRenewal answers a renewal: Stop tells the runner to stop its job (and
// report nothing: the job has gone on without it).
type WarmRenewal struct {
	Stop bool   `json:"stop"`
	Why  string `json:"why,omitempty"`
}

// errLeaseGone answers a runner whose run is no longer its own.
func errLeaseGone(run string) error {
	return mj.Errorf(mj.EConflict, "run %s is no longer this runner's (its lease lapsed, or the job went on without it): stop it and report nothing", run)
}

// warmRenew keeps a run's lease alive, then waits a moment for its job to be
// cancelled or to go on without it.
func (g *Gateway) warmRenew(c *fiber.Ctx) error {
	w, err := g.warmCall(c, false)
	if err != nil {
		return err
	}
	ctx, cancel := etcdCtx(c.UserContext())
	defer cancel()
	run, err := w.ws.WarmRunOf(ctx, w.pool, w.alloc)
	if err != nil {
		return err
	}
	if run == nil || run.Run != w.req.Run || run.Lease != w.req.Lease {
		return errLeaseGone(w.req.Run)
	}
	ttl, err := w.ws.RenewWarmLease(ctx, run.Lease)
	if errors.Is(err, store.ErrWarmGone) {
		return errLeaseGone(w.req.Run)
	} else if err != nil {
		// etcd busy or away: the runner tries again within its TTL.
		return mj.Errorf(mj.EUnavailable, "could not renew the lease: %v", err)
	}
	if !run.Started {
		// The runner has the job: the dispatcher makes it running, and a lapse
		// from now on is an attempt that ran (dispatcher/warm.go).
		if err := w.ws.MarkWarmStarted(ctx, run); err != nil && !errors.Is(err, store.ErrWarmGone) {
			return err
		}
	}
	child := mj.WarmChild(run.Run)
	gone := func(j *mj.Job) bool { return j.Status.Terminal() || j.NomadJobID != child }
	wctx, cancel := context.WithTimeout(c.UserContext(), renewHold(ttl))
	defer cancel()
	defer context.AfterFunc(g.streamCtx(), cancel)()
	j, err := g.Store.WaitJob(wctx, run.JobID, gone)
	switch {
	case mj.ErrorCode(err) == mj.ENotFound:
		return c.JSON(WarmRenewal{Stop: true, Why: "the job was deleted"})
	case err != nil:
		return err
	case j.Status == mj.StatusCancelled:
		return c.JSON(WarmRenewal{Stop: true, Why: "the job was cancelled"})
	case gone(j):
		return c.JSON(WarmRenewal{Stop: true, Why: "the job is " + string(j.Status) + " without this run"})
	}
	return c.JSON(WarmRenewal{})
}

// warmDone records the end of a run: the runner uploaded its result (outcome
// "reported"), or gives the job back without one.
func (g *Gateway) warmDone(c *fiber.Ctx) error {
	w, err := g.warmCall(c, false)
	if err != nil {
		return err
	}
	switch w.req.Outcome {
	case "reported", "stopped", "fault":
	default:
		return mj.Errorf(mj.EValidation, "outcome must be \"reported\", \"stopped\" or \"fault\"")
	}
	ctx, cancel := etcdCtx(c.UserContext())
	defer cancel()
	// The lease revoked below is the run's own: one a request names could be
	// another runner's.
	cur, err := w.ws.WarmRunOf(ctx, w.pool, w.alloc)
	if err != nil {
		return err
	}
	if cur == nil || cur.Run != w.req.Run || cur.Lease != w.req.Lease {
		return errLeaseGone(w.req.Run)
	}
	err = w.ws.FinishWarmRun(ctx, store.WarmDone{Run: w.req.Run, JobID: w.req.JobID, Attempt: w.req.Attempt, Pool: w.pool, Alloc: w.alloc,
		Outcome: w.req.Outcome, Why: mj.Clip(w.req.Why, 500)})
	if errors.Is(err, store.ErrWarmGone) {
		return errLeaseGone(w.req.Run)
	}
	if err != nil {
		return err
	}
	w.ws.RevokeWarmLease(ctx, cur.Lease)
	return c.SendStatus(fiber.StatusNoContent)
}
