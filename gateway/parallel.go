package gateway

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"github.com/gofiber/fiber/v2"

	mj "github.com/mediajobs/mediajobs"
	chunk "github.com/mediajobs/mediajobs/chunked"
	"github.com/mediajobs/mediajobs/command"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/metrics"
	"github.com/mediajobs/mediajobs/store"
)

// parallelRequest is a create's "parallel" (docs/chunked.md): split the one
// command's video into chunks encoded by jobs of their own. Unset values take
// the chunked block's defaults.
type parallelRequest struct {
	ChunkSeconds *float64 `json:"chunk_seconds,omitempty"`
	MaxWorkers   *int     `json:"max_workers,omitempty"`
	Fallback     bool     `json:"fallback,omitempty"`
	SceneCuts    bool     `json:"scene_cuts,omitempty"`
	// Quality asks for the comparison against a single-pass encode
	// (docs/chunked.md#quality).
	Quality bool `json:"quality,omitempty"`
}

// maxChunkSeconds bounds chunk_seconds: a day, far past any useful chunk.
const maxChunkSeconds = 86400

// decideParallel sets j.Parallel from req's "parallel", after newJob checked
// everything else: chunked when the command can be split, single (one
// ordinary job) when it cannot and fallback was asked for; otherwise a 400
// whose details' "parallel" names what prevents it.
func decideParallel(req *createRequest, cfg *config.Config, j *mj.Job) error {
	p := req.Parallel
	if p == nil {
		return nil
	}
	problems := map[string]string{}
	cs := float64(cfg.Chunked.ChunkSeconds)
	if p.ChunkSeconds != nil {
		if cs = *p.ChunkSeconds; cs < 1 || cs > maxChunkSeconds {
			problems["parallel.chunk_seconds"] = fmt.Sprintf("must be between 1 and %d seconds", maxChunkSeconds)
		}
	}
	mw := cfg.Chunked.MaxWorkers
	if p.MaxWorkers != nil {
		if mw = *p.MaxWorkers; mw < 1 || mw > cfg.Chunked.MaxChunks {
			problems["parallel.max_workers"] = fmt.Sprintf("must be between 1 and %d (chunked.max_chunks)", cfg.Chunked.MaxChunks)
		}
	}
	if len(problems) > 0 {
		return validationError(problems)
	}
	why := unsplittable(cfg, j)
	switch {
	case why == "":
		j.Parallel = &mj.Parallel{Mode: mj.ParallelChunked, ChunkSeconds: cs, MaxWorkers: mw, MaxChunks: cfg.Chunked.MaxChunks, Fallback: p.Fallback,
			SceneCuts: p.SceneCuts, Quality: p.Quality}
		return nil
	case p.Fallback:
		j.Parallel = &mj.Parallel{Mode: mj.ParallelSingle, Reason: why, Fallback: true}
		return nil
	}
	e := mj.Errorf(mj.EValidation, "this job cannot be encoded in chunks: %s (send \"parallel\": {\"fallback\": true} to run it as one job instead)", why)
	e.Details = map[string]string{"parallel": why}
	return e
}

// unsplittable says what prevents j from being encoded in chunks, "" if
// nothing does: its shape (one command, one input, one output), then
// chunked.Check on the command as the runner will run it.
func unsplittable(cfg *config.Config, j *mj.Job) string {
	switch {
	case len(j.FFmpegCommands) != 1:
		return fmt.Sprintf("a chunked job runs exactly one command; this one has %d", len(j.FFmpegCommands))
	case len(j.InputFiles) != 1:
		return fmt.Sprintf("a chunked job has exactly one input (the video to split); this one has %d", len(j.InputFiles))
	case len(j.OutputNames) != 1:
		return fmt.Sprintf("a chunked job has exactly one output; this one has %d", len(j.OutputNames))
	case strings.Contains(j.OutputNames[0], "%"):
		return fmt.Sprintf("output %q is a numbered sequence of files: each chunk would number its own from the start", j.OutputNames[0])
	case j.OutputNames[0] == mj.ChunkVerification:
		return fmt.Sprintf("output %q is the name of the verification report the stitch writes beside the output; name it otherwise", mj.ChunkVerification)
	}
	pool := cfg.Pool(j.Machine)
	argv, err := command.Prepare(j.FFmpegCommands[0], commandSpec(cfg, pool, j))
	if err != nil { // newJob checked it: cannot happen
		return err.Error()
	}
	if err := chunk.Check(argv); err != nil {
		var r *chunk.Refusal
		if errors.As(err, &r) {
			return r.What + " " + r.Why
		}
		return err.Error()
	}
	return ""
}

// dryRunParallel is a dry run's "parallel": the verdict and the steps that
// would run. The chunks themselves are decided when a worker probes the
// source (the plan step), so a dry run cannot list them.
type dryRunParallel struct {
	Mode         string       `json:"mode"`
	Reason       string       `json:"reason,omitempty"`
	ChunkSeconds float64      `json:"chunk_seconds,omitempty"`
	MaxWorkers   int          `json:"max_workers,omitempty"`
	MaxChunks    int          `json:"max_chunks,omitempty"`
	SceneCuts    bool         `json:"scene_cuts,omitempty"`
	Quality      bool         `json:"quality,omitempty"`
	Steps        []dryRunStep `json:"steps,omitempty"`
	Note         string       `json:"note,omitempty"`
}

type dryRunStep struct {
	Name string `json:"name"`
	Runs string `json:"runs"`
}

func parallelDryRun(p *mj.Parallel) *dryRunParallel {
	if p == nil {
		return nil
	}
	if p.Mode != mj.ParallelChunked {
		return &dryRunParallel{Mode: p.Mode, Reason: p.Reason, Note: "runs as one ordinary job (fallback)"}
	}
	plan := "one job: probe the source's packet index, cut at keyframes near every chunk_seconds (at most max_chunks chunks), stream-copy each chunk's video"
	if p.SceneCuts {
		plan = "one job: probe the source's packet index, cut at keyframes near every chunk_seconds (at most max_chunks chunks), each cut moved to a scene change among the keyframes within a quarter of chunk_seconds (measured by decoding the frames around them), stream-copy each chunk's video"
	}
	steps := []dryRunStep{
		{"plan", plan},
		{"encode", fmt.Sprintf("one job per chunk: the command's video options on the chunk, a closed keyframe at its start; at most %d at once", p.MaxWorkers)},
		{"audio", "one job, beside the encodes, if the output has streams besides the video: the command without its video"},
	}
	stitch := "one job: join the chunks on the source's timeline, mux the rest in, verify; the output is published only if the verification passes"
	if p.Quality {
		steps = append(steps, dryRunStep{"reference", "one job, beside the encodes (quality): the command's video options over the whole source as one encode, not published"})
		stitch += "; then PSNR, SSIM (and VMAF where the worker's ffmpeg has libvmaf) of the stitched file and the single-pass encode against the source, informative: it fails nothing"
	}
	steps = append(steps, dryRunStep{"stitch", stitch})
	return &dryRunParallel{Mode: p.Mode, ChunkSeconds: p.ChunkSeconds, MaxWorkers: p.MaxWorkers, MaxChunks: p.MaxChunks, SceneCuts: p.SceneCuts, Quality: p.Quality,
		Steps: steps,
		Note:  "the chunks (how many, their boundaries) are decided when a worker probes the source, in the plan step: a dry run cannot list them"}
}

// chunkedStore is what chunked jobs need of the store; *store.Store has it.
type chunkedStore interface {
	CreateChunkedJob(ctx context.Context, j *mj.Job, p *mj.Pipeline, idem *store.Idempotency, defaults store.Limits) (*mj.Job, error)
}

var _ chunkedStore = (*store.Store)(nil)

// createChunked stores parent j with its pipeline, then the pipeline's plan
// job; a gateway that dies before that leaves it to the leader (it stores a
// pipeline's planned jobs past a grace).
func (g *Gateway) createChunked(c *fiber.Ctx, j *mj.Job, idem *store.Idempotency) (*mj.Job, error) {
	ctx := c.UserContext()
	// The account's max_input_bytes, which the create would set on j, goes
	// to the plan job too: its runner fetches the source.
	l, _, _, err := g.Store.AccountLimits(ctx, j.AccountID, g.limitDefaults())
	if err != nil {
		return nil, err
	}
	j.MaxInputBytes = l.MaxInputBytes
	p := mj.NewChunkedPipeline(j, g.Now())
	stored, err := g.Store.CreateChunkedJob(ctx, j, p, idem, g.limitDefaults())
	var e *mj.Error
	if errors.As(err, &e) && e.Code == mj.EQuotaExceeded && e.Details["limit"] == "max_queued_jobs" {
		c.Set(fiber.HeaderRetryAfter, strconv.Itoa(queuedRetryAfter))
	}
	if err != nil {
		return nil, err
	}
	if stored.ID == j.ID {
		if _, err := g.Store.MaterialisePipeline(ctx, p.ID, g.Now()); err != nil {
			g.Log.Warn("storing a chunked job's plan step failed; the leading dispatcher stores it", "job", j.ID, "pipeline", p.ID, "err", err)
		}
	}
	return stored, nil
}

// stopChunked cancels parent j (its cancel is being recorded) with its
// pipeline: the pipeline's stop first, so that the leader cancels what this
// does not reach, then each of its jobs not ended.
func (g *Gateway) stopChunked(ctx context.Context, j *mj.Job) {
	pid := j.Parallel.PipelineID
	p, err := g.Store.UpdatePipeline(ctx, pid, func(p *mj.Pipeline) error {
		if p.Status.Terminal() {
			return errEnded
		}
		if !p.Cancelled {
			p.Cancelled, p.Stop = true, "its chunked job "+j.ID+" was cancelled by the client"
		}
		return nil
	})
	switch {
	case err == errEnded:
		return
	case err != nil:
		g.Log.Warn("stopping a cancelled chunked job's pipeline failed", "job", j.ID, "pipeline", pid, "err", err)
		return
	}
	if len(p.Plan) > 0 {
		if done, err := g.Store.MaterialisePipeline(ctx, p.ID, g.Now()); err == nil {
			p = done
		}
	}
	ids := p.JobIDs()
	for i := len(ids) - 1; i >= 0; i-- {
		cj, err := g.Store.UpdateJob(ctx, ids[i], func(cj *mj.Job) error {
			if cj.Status.Terminal() {
				return errEnded
			}
			now := g.Now().UTC()
			cj.Cancel(now, "cancelled with its chunked job "+j.ID)
			gpus := 0
			if pool := g.Config.Pool(cj.Machine); pool != nil {
				gpus = pool.GPUs()
			}
			cj.Usage = mj.CancelledUsage(cj, now, gpus)
			return nil
		})
		switch {
		case err == errEnded || mj.ErrorCode(err) == mj.ENotFound:
		case err != nil:
			g.Log.Warn("cancelling a chunk job failed; the leading dispatcher cancels it", "job", j.ID, "chunk job", ids[i], "err", err)
		default:
			g.jobs.put(cj, false)
			g.jobChanged(cj)
			metrics.Finished(cj)
		}
	}
}

// parallelSteps fills v's parallel steps from its pipeline (the chunks as
// the encode step's items: index, start and end on the source's timeline),
// with each running job's progress, as the job's event stream shows them
// (fillSteps): its jobs are read through the job cache, which has their
// progress.
func (g *Gateway) parallelSteps(ctx context.Context, v *mj.JobView) {
	if v.Parallel == nil || v.Parallel.PipelineID == "" {
		return
	}
	p, err := g.Store.Pipeline(ctx, v.Parallel.PipelineID)
	if err != nil {
		return
	}
	jobs, _ := g.pipelineJobs(ctx, p) // unreadable: the steps without their jobs
	exp := g.Now().Add(g.Config.Storage.TTL)
	links := g.links()
	fillSteps(v, p, jobs, func(key string) string { return links.Download(ctx, key, exp) })
}
