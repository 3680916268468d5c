package gateway

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"strings"
	"time"

	"github.com/gofiber/fiber/v2"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
)

// Pipelines: POST /api/pipelines, GET /api/pipelines[/{id}], POST
// /api/pipelines/{id}/cancel (docs/pipelines.md). Planning is in
// pipelines_plan.go; storing in store/pipelines.go.

// pipelineStore is what the pipeline routes need of the store; *store.Store
// has it.
type pipelineStore interface {
	CreatePipeline(ctx context.Context, p *mj.Pipeline, idem *store.Idempotency, defaults store.Limits) (*mj.Pipeline, error)
	CheckPipeline(ctx context.Context, p *mj.Pipeline, defaults store.Limits) error
	IdempotentPipeline(ctx context.Context, account string, idem *store.Idempotency) (*mj.Pipeline, error)
	MaterialisePipeline(ctx context.Context, id string, now time.Time) (*mj.Pipeline, error)
	Pipeline(ctx context.Context, id string) (*mj.Pipeline, error)
	UpdatePipeline(ctx context.Context, id string, fn func(*mj.Pipeline) error) (*mj.Pipeline, error)
	ListPipelines(ctx context.Context, account string, limit, offset int) ([]*mj.Pipeline, int, error)
	Jobs(ctx context.Context, ids []string) ([]*mj.Job, []error)
	WatchPipelines(ctx context.Context, from int64, fn func(id string)) error
}

var _ pipelineStore = (*store.Store)(nil)

func (g *Gateway) createPipeline(c *fiber.Ctx) error {
	dry, err := boolQuery(c, "dry_run")
	if err != nil {
		return err
	}
	body, err := g.jsonBody(c)
	if err != nil {
		return err
	}
	req, err := decodePipeline(body)
	if err != nil {
		return err
	}
	ctx, acct := c.UserContext(), account(c)
	var idem *store.Idempotency
	if key := c.Get("Idempotency-Key"); key != "" && !dry {
		if len(key) > 255 {
			return mj.Errorf(mj.EValidation, "Idempotency-Key: at most 255 characters")
		}
		canon, _ := json.Marshal(req)
		sum := sha256.Sum256(canon)
		idem = &store.Idempotency{Key: key, Fingerprint: hex.EncodeToString(sum[:])}
		// A retry of a create that was stored gets its pipeline.
		if prior, err := g.Store.IdempotentPipeline(ctx, acct, idem); err != nil {
			return err
		} else if prior != nil {
			return g.sendPipeline(c, prior)
		}
	}
	plan, err := planPipeline(req, g.Config, acct, g.Now())
	if err != nil {
		return err
	}
	p := plan.p
	if err := g.checkPipelineHosts(ctx, p, dry); err != nil {
		return err
	}
	if err := g.resolvePipelineRefs(ctx, p); err != nil {
		return err
	}
	if dry {
		if err := g.Store.CheckPipeline(ctx, p, g.limitDefaults()); err != nil {
			return err
		}
		return g.pipelineDryRun(c, plan)
	}
	for _, j := range p.Plan {
		if err := g.claimInputs(ctx, j); err != nil { // temporary files' first use
			return prefixStep(err, j)
		}
	}
	stored, err := g.Store.CreatePipeline(ctx, p, idem, g.limitDefaults())
	if err != nil {
		return err
	}
	if stored.ID == p.ID {
		for _, j := range p.Plan {
			metrics.JobsCreated.WithLabelValues(j.Machine).Inc()
		}
	}
	// The jobs, now; if this fails or the gateway dies, the leader stores
	// them (dispatcher/pipelines.go).
	if done, err := g.Store.MaterialisePipeline(ctx, stored.ID, g.Now()); err != nil {
		g.Log.Warn("storing a pipeline's jobs failed; the leading dispatcher stores them", "pipeline", stored.ID, "err", err)
	} else {
		stored = done
	}
	return g.sendPipeline(c, stored)
}

// prefixStep names j's step in the fields of a problem with one of its inputs.
func prefixStep(err error, j *mj.Job) error {
	e, ok := err.(*mj.Error)
	if !ok || j.Pipeline == nil {
		return err
	}
	out := *e
	out.Details = map[string]string{}
	for k, v := range e.Details {
		if k == "field" {
			v = "steps." + j.Pipeline.Step + "." + v
		}
		out.Details[prefixField(k, j)] = v
	}
	out.Message = "steps." + j.Pipeline.Step + "." + e.Message
	return &out
}

func prefixField(k string, j *mj.Job) string {
	if strings.HasPrefix(k, "input_files") || strings.HasPrefix(k, "webhook_url") || strings.HasPrefix(k, "output_") {
		return "steps." + j.Pipeline.Step + "." + k
	}
	return k
}

// checkPipelineHosts is checkHosts for every job of p and its webhook_url.
func (g *Gateway) checkPipelineHosts(ctx context.Context, p *mj.Pipeline, dry bool) error {
	problems := map[string]string{}
	if p.WebhookURL != "" {
		if err := g.Config.Guard().CheckURL(ctx, g.Resolver, p.WebhookURL); err != nil {
			problems["webhook_url"] = "refused: " + err.Error()
		}
	}
	for _, j := range p.Plan {
		if err := g.checkHosts(ctx, j, dry); err != nil {
			if e, ok := err.(*mj.Error); ok {
				for k, v := range e.Details {
					problems[prefixField(k, j)] = v
				}
				continue
			}
			return err
		}
	}
	if len(problems) > 0 {
		return validationError(problems)
	}
	return nil
}

// resolvePipelineRefs resolves, for each planned job, the inputs that name
// jobs outside the pipeline (job:<id>/<output>) as a job's create does; the
// ones that name the pipeline's own jobs are awaited already.
func (g *Gateway) resolvePipelineRefs(ctx context.Context, p *mj.Pipeline) error {
	own := map[string]bool{}
	for _, j := range p.Plan {
		own[j.ID] = true
	}
	problems := map[string]string{}
	for _, j := range p.Plan {
		outside := &mj.Job{ID: j.ID, AccountID: j.AccountID, InputFiles: map[string]string{}}
		for name, v := range j.InputFiles {
			if id, _, ok := mj.ParseJobRef(v); ok && !own[id] {
				outside.InputFiles[name] = v
			}
		}
		if len(outside.InputFiles) == 0 {
			continue
		}
		if err := g.resolveRefs(ctx, outside); err != nil {
			e, ok := err.(*mj.Error)
			if !ok {
				return err
			}
			for k, v := range e.Details {
				problems[prefixField(k, j)] = v
			}
			continue
		}
		for _, id := range outside.Awaits {
			if !contains(j.Awaits, id) {
				j.Awaits = append(j.Awaits, id)
			}
		}
		if len(outside.InputKeys) > 0 {
			j.InputKeys = outside.InputKeys
		}
	}
	if len(problems) > 0 {
		return validationError(problems)
	}
	for _, j := range p.Plan {
		if len(j.Awaits) > 0 {
			j.StatusDetail = j.AwaitingDetail()
		}
	}
	return nil
}

func contains(s []string, v string) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// pipelineDryRun answers what a create would store, storing nothing: the
// pipeline's view (no ids) and every job as it would be created, its inputs
// that name the pipeline's own steps written as step:<step>[<item>]/<output>.
func (g *Gateway) pipelineDryRun(c *fiber.Ctx, plan *plannedPipeline) error {
	p := plan.p
	jobs := map[string][]mj.JobView{}
	for _, j := range p.Plan {
		v := g.view(j)
		v.ID = ""
		in := make(map[string]string, len(v.InputFiles))
		for name, val := range v.InputFiles {
			if id, out, ok := mj.ParseJobRef(val); ok && plan.labels[id] != "" {
				val = plan.labels[id] + "/" + out
			}
			in[name] = val
		}
		v.InputFiles = in
		if v.StatusDetail != "" && len(j.Awaits) > 0 {
			v.StatusDetail = "waiting for the steps it takes outputs of"
		}
		jobs[j.Pipeline.Step] = append(jobs[j.Pipeline.Step], v)
	}
	view := mj.ViewPipeline(p, nil, func(string) string { return "" })
	view.ID = ""
	for i := range view.Steps {
		for k := range view.Steps[i].Jobs {
			view.Steps[i].Jobs[k].ID = ""
		}
	}
	return c.JSON(fiber.Map{"data": fiber.Map{"dry_run": true, "pipeline": view, "jobs": jobs}})
}

// storedPipelineJobs reads p's jobs that exist from the store, by id.
func (g *Gateway) storedPipelineJobs(ctx context.Context, p *mj.Pipeline) (map[string]*mj.Job, error) {
	ids := p.JobIDs()
	read, errs := g.Store.Jobs(ctx, ids)
	jobs := make(map[string]*mj.Job, len(ids))
	for i, j := range read {
		switch {
		case errs[i] == nil:
			jobs[ids[i]] = j
		case mj.ErrorCode(errs[i]) != mj.ENotFound:
			return nil, errs[i]
		}
	}
	return jobs, nil
}

// pipelineView reads p's jobs and renders it.
func (g *Gateway) pipelineView(ctx context.Context, p *mj.Pipeline) (mj.PipelineView, error) {
	jobs, err := g.storedPipelineJobs(ctx, p)
	if err != nil {
		return mj.PipelineView{}, err
	}
	exp := g.Now().Add(g.Config.Storage.TTL)
	links := g.links()
	return mj.ViewPipeline(p, jobs, func(key string) string { return links.Download(context.Background(), key, exp) }), nil
}

func (g *Gateway) sendPipeline(c *fiber.Ctx, p *mj.Pipeline) error {
	v, err := g.pipelineView(c.UserContext(), p)
	if err != nil {
		return err
	}
	return c.JSON(fiber.Map{"data": v})
}

// ownPipeline returns the caller's pipeline; another account's is "not found".
func (g *Gateway) ownPipeline(c *fiber.Ctx) (*mj.Pipeline, error) {
	id := c.Params("id")
	p, err := g.Store.Pipeline(c.UserContext(), id)
	if err == nil && p.AccountID != account(c) {
		err = mj.ErrNotFound
	}
	if mj.ErrorCode(err) == mj.ENotFound {
		return nil, mj.Errorf(mj.ENotFound, "pipeline %s not found", id)
	}
	return p, err
}

func (g *Gateway) getPipeline(c *fiber.Ctx) error {
	p, err := g.ownPipeline(c)
	if err != nil {
		return err
	}
	return g.sendPipeline(c, p)
}

func (g *Gateway) listPipelines(c *fiber.Ctx) error {
	limit, offset, err := pageQuery(c, 20, "")
	if err != nil {
		return err
	}
	ps, total, err := g.Store.ListPipelines(c.UserContext(), account(c), limit, offset)
	if err != nil {
		return err
	}
	views := make([]mj.PipelineView, len(ps))
	for i, p := range ps {
		if views[i], err = g.pipelineView(c.UserContext(), p); err != nil {
			return err
		}
	}
	return sendPage(c, views, limit, offset, total)
}

// cancelPipeline records the pipeline's stop (its jobs not stored yet are
// stored cancelled), then cancels each of its jobs that has not ended, as it
// can: once the stop is recorded, the leading dispatcher cancels whatever this
// request did not (dispatcher/pipelines.go), so a failure or a client gone
// part-way loses nothing.
func (g *Gateway) cancelPipeline(c *fiber.Ctx) error {
	p, err := g.ownPipeline(c)
	if err != nil {
		return err
	}
	ctx := c.UserContext()
	// Every job ended, the end not recorded yet (the leader records it at
	// once, or at its resync): ended all the same, as its view says. A stop
	// recorded now would turn a failed pipeline's end into cancelled. (A
	// chunked job's pipeline grows as it runs: its jobs all ended is no end.)
	if !p.Status.Terminal() && len(p.Plan) == 0 && p.Kind == "" {
		jobs, err := g.storedPipelineJobs(ctx, p)
		if err != nil {
			return err
		}
		if st, _ := mj.PipelineStatus(p, jobs); st.Terminal() {
			return mj.Errorf(mj.EConflict, "pipeline is already %s", st)
		}
	}
	p, err = g.Store.UpdatePipeline(ctx, p.ID, func(p *mj.Pipeline) error {
		if p.Status.Terminal() {
			return mj.Errorf(mj.EConflict, "pipeline is already %s", p.Status)
		}
		switch {
		case p.Stop != "" && !p.Cancelled:
			// Stopping under fail_fast: it ends failed, as it would have had
			// this cancel come a moment later; cancelling would rewrite why.
			return mj.Errorf(mj.EConflict, "pipeline is already stopping: %s", p.Stop)
		case !p.Cancelled:
			p.Cancelled, p.Stop = true, "the pipeline was cancelled by the client"
		}
		return nil
	})
	if err != nil {
		return err
	}
	if len(p.Plan) > 0 {
		if done, err := g.Store.MaterialisePipeline(ctx, p.ID, g.Now()); err != nil {
			g.Log.Warn("storing a cancelled pipeline's jobs failed; the leading dispatcher stores them", "pipeline", p.ID, "err", err)
		} else {
			p = done
		}
	}
	// The steps that take others' outputs first: their awaited jobs' cancels
	// then find them ended already, not failed for want of an input.
	ids := p.JobIDs()
	for i := len(ids) - 1; i >= 0; i-- {
		j, err := g.Store.UpdateJob(ctx, ids[i], func(j *mj.Job) error {
			if j.Status.Terminal() {
				return errEnded
			}
			now := g.Now().UTC()
			j.Cancel(now, "cancelled with its pipeline")
			gpus := 0
			if pool := g.Config.Pool(j.Machine); pool != nil {
				gpus = pool.GPUs()
			}
			j.Usage = mj.CancelledUsage(j, now, gpus)
			return nil
		})
		switch {
		case err == errEnded || mj.ErrorCode(err) == mj.ENotFound:
		case err != nil:
			g.Log.Warn("cancelling a job of a cancelled pipeline failed; the leading dispatcher cancels it", "pipeline", p.ID, "job", ids[i], "err", err)
		default:
			g.jobs.put(j, false)
			g.jobChanged(j)
			metrics.Finished(j)
		}
	}
	return g.sendPipeline(c, p)
}

var errEnded = mj.Errorf(mj.EConflict, "ended")
