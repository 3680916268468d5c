package dispatcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"regexp"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/nomad/api"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/jobspecs"
)

// NomadJobs is what the dispatcher needs of Nomad's jobs API; *api.Jobs has it.
type NomadJobs interface {
	ParseHCLOpts(req *api.JobsParseRequest) (*api.Job, error)
	Register(job *api.Job, q *api.WriteOptions) (*api.JobRegisterResponse, *api.WriteMeta, error)
	RegisterOpts(job *api.Job, opts *api.RegisterOptions, q *api.WriteOptions) (*api.JobRegisterResponse, *api.WriteMeta, error)
	DispatchOpts(opts *api.DispatchOptions, q *api.WriteOptions) (*api.JobDispatchResponse, *api.WriteMeta, error)
	Deregister(jobID string, purge bool, q *api.WriteOptions) (string, *api.WriteMeta, error)
	Info(jobID string, q *api.QueryOptions) (*api.Job, *api.QueryMeta, error)
	List(q *api.QueryOptions) ([]*api.JobListStub, *api.QueryMeta, error)
	Allocations(jobID string, allAllocs bool, q *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error)
	Evaluations(jobID string, q *api.QueryOptions) ([]*api.Evaluation, *api.QueryMeta, error)
	Summary(jobID string, q *api.QueryOptions) (*api.JobSummary, *api.QueryMeta, error)
}

// NomadAllocs lists allocations across jobs; *api.Allocations has it.
type NomadAllocs interface {
	List(q *api.QueryOptions) ([]*api.AllocationListStub, *api.QueryMeta, error)
}

// NomadEvents is Nomad's event stream; *api.EventStream has it.
type NomadEvents interface {
	Stream(ctx context.Context, topics map[api.Topic][]string, index uint64, q *api.QueryOptions) (<-chan *api.Events, error)
}

// NomadTimeout bounds every Nomad call, on top of the leader's context: a
// half-open connection cannot stall dispatch or reconcile. (ParseHCLOpts takes no
// options: the Nomad client's own HTTP timeout bounds it, see cmd/mediajobs.)
const NomadTimeout = 30 * time.Second

// nomadAPI is the dispatcher's Nomad adapter: the options and deadline of every
// call, what a failed call means (nomadFault), the pools' parameterized jobs and
// warm runners, and stopping children. It owns whether Nomad is down (down, set
// by the scheduler's dispatches) and which pools Nomad accepted (registered).
type nomadAPI struct {
	jobs      NomadJobs
	writeOpts *api.WriteOptions
	queryOpts *api.QueryOptions
	timeout   time.Duration // CallTimeout
	cfg       *config.Config
	runner    string // RunnerCommand
	log       *slog.Logger
	// down: a dispatch found Nomad unreachable or failing (5xx), and none has
	// succeeded since.
	down       atomic.Bool
	mu         sync.Mutex
	registered map[string]bool
}

func newNomadAPI(jobs NomadJobs, cfg *config.Config, runner string, timeout time.Duration, log *slog.Logger) *nomadAPI {
	return &nomadAPI{
		jobs: jobs, cfg: cfg, runner: runner, timeout: timeout, log: log,
		writeOpts: &api.WriteOptions{Region: cfg.Nomad.Region, Namespace: cfg.Nomad.Namespace},
		queryOpts: &api.QueryOptions{Region: cfg.Nomad.Region, Namespace: cfg.Nomad.Namespace},
	}
}

// query and write are the options of one Nomad call made on behalf of ctx.
func (n *nomadAPI) query(ctx context.Context) (*api.QueryOptions, context.CancelFunc) {
	c, cancel := context.WithTimeout(ctx, n.timeout)
	return n.queryOpts.WithContext(c), cancel
}

func (n *nomadAPI) write(ctx context.Context) (*api.WriteOptions, context.CancelFunc) {
	c, cancel := context.WithTimeout(ctx, n.timeout)
	return n.writeOpts.WithContext(c), cancel
}

// markDown records a dispatch that found Nomad down, and reports whether it is
// the first since Nomad last took one (it alone says so).
func (n *nomadAPI) markDown() (first bool) { return !n.down.Swap(true) }

// markUp records a dispatch Nomad took.
func (n *nomadAPI) markUp() { n.down.Store(false) }

// forgetPools forgets which pools are registered (a new term registers them).
func (n *nomadAPI) forgetPools() {
	n.mu.Lock()
	n.registered = nil
	n.mu.Unlock()
}

// poolRegistered reports whether Nomad accepted the pool's parameterized job.
func (n *nomadAPI) poolRegistered(name string) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.registered[name]
}

// retryPools registers the pools Nomad refused again, with backoff, until all are in.
func (n *nomadAPI) retryPools(ctx context.Context, pools []*config.Pool) {
	backoff := 2 * time.Second
	for len(pools) > 0 {
		if sleep(ctx, backoff); ctx.Err() != nil {
			return
		}
		backoff = min(backoff*2, time.Minute)
		var still []*config.Pool
		for _, pool := range pools {
			if err := n.registerPool(ctx, pool); err != nil {
				n.log.Warn("register pool failed; retrying", "pool", pool.Name, "err", err, "in", backoff)
				still = append(still, pool)
			}
		}
		pools = still
	}
}

// registerPool renders a pool's jobspec, has Nomad parse it, and registers it;
// then registers the pool's warm runners, or stops them when the pool has no warm
// block (any more). Registering an unchanged job is a no-op in Nomad, so this is
// idempotent. The pool counts as registered (its jobs are dispatched) once its
// parameterized job is in, even when its warm runners then fail: the error says so,
// and the caller retries the whole.
func (n *nomadAPI) registerPool(ctx context.Context, pool *config.Pool) error {
	r, err := jobspecs.Render(pool, n.runner)
	if err != nil {
		return fmt.Errorf("pool %q: %w", pool.Name, err)
	}
	job, err := n.parseJob(r)
	if err != nil {
		return fmt.Errorf("pool %q: nomad could not parse the jobspec: %w", pool.Name, err)
	}
	wo, cancel := n.write(ctx)
	defer cancel()
	if _, _, err := n.jobs.Register(job, wo); err != nil {
		return fmt.Errorf("pool %q: register nomad job %s: %w", pool.Name, r.JobID, err)
	}
	n.mu.Lock()
	if n.registered == nil {
		n.registered = map[string]bool{}
	}
	n.registered[pool.Name] = true
	n.mu.Unlock()
	n.log.Info("registered pool", "pool", pool.Name, "nomad_job", r.JobID)
	if pool.Warm == nil {
		if err := n.stopWarm(ctx, pool.Name, "the pool has no warm block"); err != nil {
			return fmt.Errorf("pool %q: stop warm runners %s: %w", pool.Name, mj.WarmJobID(pool.Name), err)
		}
		return nil
	}
	if err := n.registerWarm(ctx, pool); err != nil {
		return fmt.Errorf("pool %q: warm runners: %w", pool.Name, err)
	}
	return nil
}

// parseJob has Nomad parse a rendered jobspec, in the configured namespace and
// region.
func (n *nomadAPI) parseJob(r jobspecs.Rendered) (*api.Job, error) {
	job, err := n.jobs.ParseHCLOpts(&api.JobsParseRequest{JobHCL: r.HCL, Variables: r.Variables, Canonicalize: true})
	if err != nil {
		return nil, err
	}
	if ns := n.cfg.Nomad.Namespace; ns != "" {
		job.Namespace = &ns
	}
	if rg := n.cfg.Nomad.Region; rg != "" {
		job.Region = &rg
	}
	return job, nil
}

// registerWarm registers a warm pool's service job (jobspecs/warm.nomad.hcl). It
// keeps the count Nomad has (PreserveCounts): an operator's `nomad job scale` or an
// autoscaler's is never reset by a new leader or a restart; warm.count only sets the
// first one.
func (n *nomadAPI) registerWarm(ctx context.Context, pool *config.Pool) error {
	r, err := jobspecs.RenderWarm(pool, n.runner, n.cfg.Server.PublicURL)
	if err != nil {
		return err
	}
	job, err := n.parseJob(r)
	if err != nil {
		return fmt.Errorf("nomad could not parse the warm jobspec: %w", err)
	}
	wo, cancel := n.write(ctx)
	defer cancel()
	if _, _, err := n.jobs.RegisterOpts(job, &api.RegisterOptions{PreserveCounts: true}, wo); err != nil {
		return fmt.Errorf("register nomad job %s: %w", r.JobID, err)
	}
	n.log.Info("registered warm runners", "pool", pool.Name, "nomad_job", r.JobID)
	return nil
}

// warmRole is the meta mediajobs_role of the warm runners' job: only a job that
// says so is ever stopped as one (a pool named "x-warm" has a parameterized job
// with the ID of pool x's runners; config refuses both at once, not one after the
// other).
const warmRole = "warm-runner"

// stopWarm stops (deregisters, without purging: its history stays in Nomad) pool's
// warm runners if Nomad runs them; none is fine.
func (n *nomadAPI) stopWarm(ctx context.Context, pool, why string) error {
	id := mj.WarmJobID(pool)
	q, qcancel := n.query(ctx)
	job, _, err := n.jobs.Info(id, q)
	qcancel()
	if isNotFound(err) {
		return nil
	}
	if err != nil {
		return err
	}
	if job == nil || job.Meta["mediajobs_role"] != warmRole || (job.Stop != nil && *job.Stop) {
		return nil
	}
	// Another installation sharing the Nomad namespace may have a warm pool of
	// that name: only runners that lease from this one are ours to stop.
	if c := job.Meta["mediajobs_control"]; c != n.cfg.Server.PublicURL {
		return nil
	}
	wo, cancel := n.write(ctx)
	defer cancel()
	if _, _, err := n.jobs.Deregister(id, false, wo); err != nil && !isNotFound(err) {
		return err
	}
	n.log.Info("stopped warm runners", "pool", pool, "nomad_job", id, "why", why)
	return nil
}

// stopRemovedWarm stops the warm runners of pools that are no longer configured
// (a pool removed from the file); their parameterized jobs stay, placing nothing.
func (n *nomadAPI) stopRemovedWarm(ctx context.Context) error {
	q, cancel := n.query(ctx)
	q.Prefix, q.Filter = "mediajobs-", `ParentID == "" and Status != "dead" and ID matches "-warm$"`
	stubs, _, err := n.jobs.List(q)
	cancel()
	if err != nil {
		return fmt.Errorf("list nomad jobs: %w", err)
	}
	var errs []error
	for _, s := range stubs {
		if s.ParentID != "" || s.Stop || s.Type != "service" || !strings.HasSuffix(s.ID, "-warm") {
			continue
		}
		pool := strings.TrimSuffix(strings.TrimPrefix(s.ID, "mediajobs-"), "-warm")
		if n.cfg.Pool(pool) != nil {
			continue // registerPool keeps or stops it
		}
		if err := n.stopWarm(ctx, pool, "the pool is no longer configured"); err != nil {
			errs = append(errs, fmt.Errorf("stop warm runners %s of removed pool %q: %w", s.ID, pool, err))
		}
	}
	return errors.Join(errs...)
}

// stopChild deregisters a Nomad child (not purged: the operator can still read it).
// A warm run has no child of its own: its runner learns from its lease that the
// job went on without it, and stops it (gateway/warm.go).
func (n *nomadAPI) stopChild(ctx context.Context, child, why, id string) {
	if _, warm := mj.WarmRunOfChild(child); warm {
		return
	}
	wo, cancel := n.write(ctx)
	defer cancel()
	if _, _, err := n.jobs.Deregister(child, false, wo); err != nil && !isNotFound(err) {
		n.log.Warn("could not stop nomad job", "job", id, "nomad_job", child, "why", why, "err", err)
		return
	}
	n.log.Info("stopped nomad job", "job", id, "nomad_job", child, "why", why)
}

// stoppedChild tells a dispatch Nomad answered with a child it already had for
// the token (it created no evaluation) that was stopped since. A child Nomad
// cannot describe now counts as not stopped: it is recorded, as it was before.
func (n *nomadAPI) stoppedChild(ctx context.Context, resp *api.JobDispatchResponse) bool {
	if resp == nil || resp.EvalID != "" {
		return false
	}
	q, cancel := n.query(ctx)
	defer cancel()
	job, _, err := n.jobs.Info(resp.DispatchedJobID, q)
	return err == nil && job != nil && job.Stop != nil && *job.Stop
}

// answers is the check of a quiet event stream: a cheap read (one job at
// most) through the leader, bounded by CallTimeout. An answer, even a refusal,
// proves the agent and its cluster alive: the stream is merely quiet, and is kept.
// Only when Nomad cannot answer (unreachable, no leader, timing out) is the stream
// taken for dead. A connection that died in the network is not left to this
// check: the read on it fails when the stream's TCP keepalives go unanswered
// (Nomad's api client dials with keepalives), and reconcile settles every
// ReconcileEvery what a stream missed meanwhile.
func (n *nomadAPI) answers(ctx context.Context) error {
	q, cancel := n.query(ctx)
	defer cancel()
	q.PerPage, q.Prefix, q.AllowStale = 1, "mediajobs-", false
	_, _, err := n.jobs.List(q)
	if err != nil && nomadTrouble(err) {
		return err
	}
	return nil
}

// index is an index Nomad has reached: its jobs table's, no later than
// the latest event.
func (n *nomadAPI) index(ctx context.Context) (uint64, error) {
	q, cancel := n.query(ctx)
	defer cancel()
	q.PerPage = 1
	_, meta, err := n.jobs.List(q)
	if err == nil && meta == nil {
		err = errors.New("nomad's answer carried no index")
	}
	if err != nil {
		return 0, err
	}
	return meta.LastIndex, nil
}

// nomadFault is what a failed Nomad call says about who is at fault, and so what
// the dispatcher does next (classify).
type nomadFault int

const (
	faultNone       nomadFault = iota // no error
	faultOutage                       // unreachable, or a 5xx of the server's own trouble (nomadTrouble): wait for Nomad
	faultParentGone                   // a 404, or the pool's parameterized job missing or stopped (parentGone): register it again
	faultAuth                         // 401, 403, an ACL token's trouble: the operator's
	faultThrottled                    // 408, 429: later
	faultRefused                      // any other 4xx or 500: a refusal of the request, maybe the job's own trouble
	faultOther                        // none of the above (an error of our own, another answer)
)

// classify tells what err says, the first that fits in the order above.
func classify(err error) nomadFault {
	if err == nil {
		return faultNone
	}
	if nomadTrouble(err) {
		return faultOutage
	}
	if parentGone(err) {
		return faultParentGone
	}
	code := statusCode(err)
	if code < 400 || code > 500 {
		return faultOther
	}
	switch {
	case code == 401 || code == 403:
		return faultAuth
	case code == 408 || code == 429:
		return faultThrottled
	case tokenTrouble.MatchString(err.Error()):
		return faultAuth
	}
	return faultRefused
}

// refusedError is a dispatch Nomad answered with a refusal (refusedByNomad), which may
// be the job's own trouble.
type refusedError struct {
	pool string
	err  error
}

func (e *refusedError) Error() string { return e.err.Error() }
func (e *refusedError) Unwrap() error { return e.err }

// refusedByNomad tells an answer of Nomad's that refuses a dispatch without saying the
// server, the pool's parent job or the token is at fault: a 4xx or 500 other
// than an outage (nomadTrouble), a missing or stopped parent job (parentGone),
// an authorization error (401, 403, an expired token) or throttling (408, 429).
func refusedByNomad(err error) bool { return classify(err) == faultRefused }

var tokenTrouble = regexp.MustCompile(`(?i)permission denied|acl token|token (expired|not found)|unauthori[sz]ed`)

// parentGone tells a dispatch refused because the pool's parameterized job is
// missing or stopped: Nomad answers 404, or a 500 naming it (Job.Dispatch's own
// errors), which no retry clears until it is registered again.
func parentGone(err error) bool {
	if err == nil {
		return false
	}
	msg := err.Error()
	return isNotFound(err) || strings.Contains(msg, "parameterized job not found") ||
		strings.Contains(msg, "is stopped") || strings.Contains(msg, "is not a parameterized job") ||
		strings.Contains(msg, "job not found")
}

// isNotFound tells Nomad's 404 from other errors. Only Nomad's own answer counts:
// a connection error names the URL, and a job id in it may well contain "404".
func isNotFound(err error) bool {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode() == 404
	}
	var uep *api.UnexpectedResponseError
	if errors.As(err, &uep) {
		return uep.StatusCode() == 404
	}
	return err != nil && strings.HasPrefix(err.Error(), "Unexpected response code: 404")
}

// unreachable tells a failure to reach Nomad (refused, reset, timed out: the HTTP
// client's *url.Error) from an answer Nomad gave or a failure of our own.
func unreachable(err error) bool {
	var ue *url.Error
	return errors.As(err, &ue) || errors.Is(err, context.DeadlineExceeded)
}

// nomadTrouble tells an error that says Nomad cannot answer now: unreachable, or
// a 5xx answer of the server's own trouble (no cluster leader, overloaded, a
// server timing out). A reconcile pass stops on it. Nomad answers 500 for any
// RPC error without a code, a request it refused (a dispatch it finds invalid)
// too: a 500 counts only when its text is the server's trouble, or one job could
// stop its pool for good; a 4xx is an answer about the request itself.
func nomadTrouble(err error) bool {
	switch code := statusCode(err); {
	case unreachable(err), code > 500:
		return true
	case code == 500:
		return serverTrouble.MatchString(err.Error())
	}
	return false
}

// serverTrouble is what Nomad's 500s say when the server, not the request, is
// at fault: among them Nomad's own raft and leadership errors, which come
// without the "rpc error:" prefix when the agent asked is the leader
// ("leadership lost while committing log", "node is not the leader",
// "leadership transfer in progress"), and Job.Dispatch's "failed to retrieve
// jobs for idempotency check".
var serverTrouble = regexp.MustCompile(`(?i)no (cluster )?leader|not the leader|leadership|idempotency check|rpc error|raft|timeout|timed out|deadline|\bEOF\b|connection|unavailable|too many|rate limit|not ready|shutting down`)

// statusCode is the HTTP status of Nomad's answer in err, 0 when err is none.
func statusCode(err error) int {
	var ue api.UnexpectedResponseError
	if errors.As(err, &ue) {
		return ue.StatusCode()
	}
	var uep *api.UnexpectedResponseError
	if errors.As(err, &uep) {
		return uep.StatusCode()
	}
	var code int
	if err != nil {
		fmt.Sscanf(err.Error(), "Unexpected response code: %d", &code) // as isNotFound reads it
	}
	return code
}
