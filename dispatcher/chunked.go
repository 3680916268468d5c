package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/store"
)

// A chunked job's pipeline (docs/chunked.md, mj.ExtendChunked) is settled as
// any pipeline, and more, by the same service:
//
//   - when its plan job succeeded, the leader reads the plan's chunks.json and
//     extends the pipeline, in one write of its record, with the steps encode
//     (a job per chunk), audio and stitch; the store then stores their jobs
//     as it stores any pipeline's (MaterialisePipeline: each once, by id,
//     and again past the grace if this leader dies first). The jobs' ids
//     derive from the pipeline's, so a second extension names the same jobs;
//     a record that holds the encode step already is not extended again;
//   - its owner, the user's job, follows it: running once one of its jobs
//     started, then ended as the pipeline ended, once: succeeded with the
//     stitch's outputs and the verification report, failed naming the step,
//     or cancelled. That write arms the owner's webhook, as any job's end.

// chunked does what is a chunked pipeline's own, before settle looks at its
// end: it tells whether settle goes on (false: the pipeline was extended, or
// is being).
func (p *pipelines) chunked(ctx context.Context, pl *mj.Pipeline, jobs map[string]*mj.Job) bool {
	parent, err := p.store.Job(ctx, pl.Owner)
	if err != nil {
		if mj.ErrorCode(err) != mj.ENotFound {
			p.log.Warn("reading a chunked job failed; the next resync looks again", "job", pl.Owner, "err", err)
			return false
		}
		parent = nil // deleted by the retention: nothing follows the pipeline
	}
	p.watchStart(pl.ID, parent != nil && !p.startParent(ctx, parent, jobs))
	if parent != nil && parent.Status.Terminal() && pl.Stop == "" {
		// Cancelled by the client, its pipeline not stopped (the gateway's
		// stop failed): stopped here, as the gateway would have.
		stopped, err := p.store.UpdatePipeline(ctx, pl.ID, func(pl *mj.Pipeline) error {
			if pl.Stop != "" || pl.Status.Terminal() {
				return errSkip
			}
			pl.Cancelled, pl.Stop = true, "its chunked job "+parent.ID+" was "+string(parent.Status)
			return nil
		})
		if err == nil {
			p.cancelRest(ctx, stopped, jobs, stopped.Stop)
		} else if err != errSkip {
			p.log.Warn("stopping an ended chunked job's pipeline failed; the next resync tries again", "pipeline", pl.ID, "err", err)
		}
		return false
	}
	if len(pl.Steps) != 1 {
		return true
	}
	plan := jobs[pl.Steps[0].Jobs[0]]
	if plan == nil || plan.Status != mj.StatusSucceeded {
		return true // running, or failed: the pipeline ends as any
	}
	if pl.Stop != "" {
		// Stopped before its extension: nothing more runs, and its plan
		// alone succeeding is no success of the pipeline's (failPlan ends
		// it cancelled).
		if err := p.failPlan(ctx, pl.ID, pl.Stop); err != nil {
			p.log.Warn("ending a stopped chunked job's pipeline failed; the next resync tries again", "pipeline", pl.ID, "err", err)
		}
		return false
	}
	if parent == nil || parent.Status.Terminal() {
		return true
	}
	if err := p.extend(ctx, pl, parent, plan); err != nil {
		p.log.Warn("extending a chunked job's pipeline failed; the next resync tries again", "pipeline", pl.ID, "err", err)
	}
	return false
}

// maxStarting bounds the chunked pipelines a tick looks at for their first
// start; past it, the minute's resync (or the plan's end) marks them.
const maxStarting = 64

// watchStart adds pipeline id to those each tick looks at until its owner
// runs (on), or takes it off.
func (p *pipelines) watchStart(id string, on bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.starting == nil {
		return // not running (a test calling settle by itself)
	}
	if on && len(p.starting) < maxStarting {
		p.starting[id] = true
	} else if !on {
		delete(p.starting, id)
	}
}

// startingNow lists the pipelines watchStart holds.
func (p *pipelines) startingNow() []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	ids := make([]string, 0, len(p.starting))
	for id := range p.starting {
		ids = append(ids, id)
	}
	return ids
}

// startParent marks parent running once a job of its pipeline started, and
// tells whether it is past queued (it runs, or ended).
func (p *pipelines) startParent(ctx context.Context, parent *mj.Job, jobs map[string]*mj.Job) bool {
	if parent.Status != mj.StatusQueued {
		return true
	}
	var started *time.Time
	for _, j := range jobs {
		if j.StartedAt != nil && (started == nil || j.StartedAt.Before(*started)) {
			started = j.StartedAt
		}
	}
	if started == nil {
		return false
	}
	_, err := p.store.UpdateJob(ctx, parent.ID, func(j *mj.Job) error {
		if j.Status != mj.StatusQueued {
			return errSkip
		}
		t := *started
		j.StartedAt = &t
		j.Run("encoding in chunks")
		return nil
	})
	if err != nil && err != errSkip {
		p.log.Warn("marking a chunked job running failed; the next look tries again", "job", parent.ID, "err", err)
		return false
	}
	return true
}

// extend adds the steps after plan to pl, then stores their jobs. A plan
// that cannot be extended (no chunks, a list that does not read) ends the
// pipeline failed.
func (p *pipelines) extend(ctx context.Context, pl *mj.Pipeline, parent, plan *mj.Job) error {
	key := ""
	for _, o := range plan.Outputs {
		if o.Name == mj.ChunkListFile {
			key = o.Key
		}
	}
	var list mj.ChunkList
	var steps []mj.PipelineStep
	var jobs []*mj.Job
	failed := ""
	if key == "" {
		failed = "the plan step made no " + mj.ChunkListFile
	} else {
		b, err := p.read(ctx, key)
		switch {
		case errors.Is(err, blob.ErrNotFound):
			// Reading again will not find it: the plan fails, not retried.
			failed = "the plan step's " + mj.ChunkListFile + " is not in storage (deleted, or its output_retention passed)"
		case errors.Is(err, blob.ErrTooLarge):
			failed = fmt.Sprintf("the plan step's %s is over %d bytes", mj.ChunkListFile, blob.MaxSmall)
		case err != nil:
			return fmt.Errorf("read the plan's %s: %w", mj.ChunkListFile, err)
		}
		if failed == "" {
			if err := json.Unmarshal(b, &list); err != nil {
				failed = "the plan step's " + mj.ChunkListFile + " does not read: " + err.Error()
			} else if steps, jobs, err = mj.ExtendChunked(pl, parent, plan, &list, p.now()); err != nil {
				failed = err.Error()
			}
		}
	}
	if failed != "" {
		return p.failPlan(ctx, pl.ID, failed)
	}
	var defaults store.Limits
	if q := p.cfg.Limits.MaxQueuedJobs; q != nil {
		defaults.MaxQueuedJobs = *q
	}
	_, extended, err := p.store.ExtendPipeline(ctx, pl.ID, steps, jobs, defaults)
	switch mj.ErrorCode(err) {
	case mj.EValidation:
		return p.failPlan(ctx, pl.ID, err.Error())
	case mj.EQuotaExceeded:
		return p.failPlan(ctx, pl.ID, fmt.Sprintf("its %d jobs (a chunk each, the audio, the stitch) would take the account past a limit: %v", len(jobs), err))
	}
	if err != nil {
		return err
	}
	if extended {
		p.log.Info("extended a chunked job's pipeline", "pipeline", pl.ID, "job", parent.ID, "chunks", len(list.Chunks))
	}
	_, err = p.store.MaterialisePipeline(ctx, pl.ID, p.now())
	return err
}

// failPlan ends pipeline id, whose plan cannot be extended for why, failed,
// and its owner with it; or cancelled, with its stop's message, when it was
// stopped meanwhile (its job cancelled: why is then no failure of its own).
func (p *pipelines) failPlan(ctx context.Context, id, why string) error {
	_, err := p.store.UpdatePipeline(ctx, id, func(pl *mj.Pipeline) error {
		if pl.Status.Terminal() || len(pl.Steps) != 1 {
			return errSkip
		}
		now := p.now().UTC()
		if pl.Stop != "" {
			pl.Status, pl.ErrorMessage, pl.FinishedAt = mj.StatusCancelled, pl.Stop, &now
			return nil
		}
		pl.Status, pl.ErrorMessage, pl.FinishedAt = mj.StatusFailed, "step plan failed: "+why, &now
		return nil
	})
	if err != nil && err != errSkip {
		return err
	}
	p.log.Info("a chunked job's plan cannot be carried out", "pipeline", id, "why", why)
	p.finishParent(ctx, id)
	return nil
}

// finishParent ends pipeline id's owner as the pipeline ended, once, then
// deletes pfollow/<id>; what fails leaves pfollow/<id>, listed again at each
// resync (pass), so that the owner always ends.
func (p *pipelines) finishParent(ctx context.Context, id string) {
	if p.endParent(ctx, id) {
		if err := p.store.FollowedPipeline(ctx, id); err != nil {
			p.log.Warn("deleting a chunked pipeline's follow key failed; the next resync looks again", "pipeline", id, "err", err)
		}
	}
}

// endParent ends pipeline id's owner as the pipeline ended, and tells
// whether nothing is left to do: the owner ended (now or before) or is gone,
// or the pipeline is.
func (p *pipelines) endParent(ctx context.Context, id string) bool {
	pl, err := p.store.Pipeline(ctx, id)
	if err != nil {
		if mj.ErrorCode(err) == mj.ENotFound {
			return true
		}
		p.log.Warn("reading a chunked pipeline failed; the next resync tries again", "pipeline", id, "err", err)
		return false
	}
	if pl.Kind != mj.PipelineKindChunked {
		return true
	}
	if !pl.Status.Terminal() {
		return false
	}
	parent, err := p.store.Job(ctx, pl.Owner)
	if err != nil {
		if mj.ErrorCode(err) == mj.ENotFound {
			return true
		}
		p.log.Warn("reading a chunked job failed; the next resync tries again", "job", pl.Owner, "err", err)
		return false
	}
	usage, ok := p.chunkedUsage(ctx, pl)
	if !ok {
		return false
	}
	if parent.Status.Terminal() {
		return p.summarise(ctx, parent, usage)
	}
	var outputs []mj.Output
	var report json.RawMessage
	if pl.Status == mj.StatusFailed {
		// A stitch that failed its verification left the report in its
		// analysis (the runner's verifyAnalysis).
		for _, s := range pl.Steps {
			if s.Name != mj.ChunkStepStitch || len(s.Jobs) != 1 {
				continue
			}
			if stitch, err := p.store.Job(ctx, s.Jobs[0]); err == nil {
				for _, a := range stitch.Analysis {
					if a.Filter == mj.ChunkVerifyFilter {
						report = a.Data
					}
				}
			}
		}
	}
	if pl.Status == mj.StatusSucceeded {
		var stitch *mj.Job
		for _, s := range pl.Steps {
			if s.Name == mj.ChunkStepStitch && len(s.Jobs) == 1 {
				stitch, err = p.store.Job(ctx, s.Jobs[0])
				if err != nil {
					p.log.Warn("reading a chunked job's stitch failed; the next resync tries again", "pipeline", id, "err", err)
					return false
				}
			}
		}
		if stitch == nil {
			return true // cannot be: it succeeded with its last step
		}
		// J's outputs are its declared output alone: the report is in its
		// parallel.verification (whole in the stitch job's outputs).
		for _, o := range stitch.Outputs {
			if slices.Contains(parent.OutputNames, o.Name) {
				outputs = append(outputs, o)
			}
		}
		for _, o := range stitch.Outputs {
			if o.Name == mj.ChunkVerification && o.Key != "" {
				b, err := p.read(ctx, o.Key)
				switch {
				case errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrTooLarge):
					// Never readable: J ends without the report (the stitch
					// succeeded, so its verification passed).
					p.log.Warn("a chunked job's verification cannot be read; it ends without it", "pipeline", id, "err", err)
				case err != nil:
					p.log.Warn("reading a chunked job's verification failed; the next resync tries again", "pipeline", id, "err", err)
					return false
				default:
					report = mj.BoundVerification(b)
				}
			}
		}
	}
	_, err = p.store.UpdateJob(ctx, parent.ID, func(j *mj.Job) error {
		if j.Status.Terminal() {
			return errSkip
		}
		now := p.now().UTC()
		if j.StartedAt == nil && pl.Status != mj.StatusCancelled {
			j.StartedAt = &now
		}
		if j.Status == mj.StatusQueued && pl.Status == mj.StatusSucceeded {
			j.Run("encoding in chunks")
		}
		// Its jobs' usage, summed: in its views, never metered (Usage stays
		// nil: each job was metered as it ended).
		par := *j.Parallel
		par.Usage = usage
		j.Parallel = &par
		switch pl.Status {
		case mj.StatusSucceeded:
			// The stitch's files: counted against storage on the stitch
			// (TotalOutputBytes stays 0 here), metered there too.
			j.Outputs = outputs
			par.Verification = report
			j.Succeed(now, "")
		case mj.StatusFailed:
			if report != nil {
				par.Verification = report
			}
			j.Fail(now, pl.ErrorMessage)
		default:
			msg := pl.ErrorMessage
			if msg == "" {
				msg = "cancelled"
			}
			j.Cancel(now, msg)
		}
		return nil
	})
	switch {
	case err == nil:
		p.log.Info("chunked job ended", "job", parent.ID, "status", pl.Status)
	case err == errSkip || mj.ErrorCode(err) == mj.ENotFound:
	default:
		p.log.Warn("ending a chunked job failed; the next resync tries again", "job", parent.ID, "err", err)
		return false
	}
	return true
}

// chunkedUsage sums the usage of pl's jobs (ended: pl is), in the pipeline's
// order and to the millisecond, as each was metered; nil when none has any,
// as GET's sum (gateway parallelSteps). false: a read failed.
func (p *pipelines) chunkedUsage(ctx context.Context, pl *mj.Pipeline) (*mj.Usage, bool) {
	ids := pl.JobIDs()
	jobs, errs := p.store.Jobs(ctx, ids)
	for _, err := range errs {
		if err != nil && mj.ErrorCode(err) != mj.ENotFound { // not found: deleted by the retention
			p.log.Warn("reading a chunked job's jobs failed; the next resync tries again", "pipeline", pl.ID, "err", err)
			return nil, false
		}
	}
	return mj.SumUsage(jobs), true
}

// summarise records usage on a parent that ended before its pipeline did
// (cancelled by its client, whose jobs' cancels came after), so that its
// record and list show its jobs' sum too (its webhook, armed by the cancel,
// may have gone without). Never metered (chunkedUsage).
func (p *pipelines) summarise(ctx context.Context, parent *mj.Job, usage *mj.Usage) bool {
	if !parent.ChunkedParent() || usage == nil || parent.Parallel.Usage != nil && *parent.Parallel.Usage == *usage {
		return true
	}
	_, err := p.store.UpdateJob(ctx, parent.ID, func(j *mj.Job) error {
		if !j.ChunkedParent() || !j.Status.Terminal() {
			return errSkip
		}
		par := *j.Parallel
		par.Usage = usage
		j.Parallel = &par
		return nil
	})
	if err != nil && err != errSkip && mj.ErrorCode(err) != mj.ENotFound {
		p.log.Warn("recording an ended chunked job's usage failed; the next resync tries again", "job", parent.ID, "err", err)
		return false
	}
	return true
}
