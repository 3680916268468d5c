package dispatcher

import (
	"context"
	"encoding/json"
	"errors"
	"log/slog"
	"sync"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/store"
	"github.com/mediajobs/mediajobs/webhook"
)

// Pipelines (docs/pipelines.md) are ordinary jobs that await each other's
// outputs (awaits.go). What is the leader's own is the pipeline as a whole:
//
//   - storing the jobs of a pipeline whose gateway died between writing its
//     record and storing its jobs (pmat/<id>, store/pipelines.go);
//   - under fail_fast, stopping a pipeline at its first failed job; and for
//     any stop recorded (that, or the client's cancel), cancelling every job
//     not ended, again at each look until none is: a writer that died
//     part-way is finished;
//   - recording the pipeline's end, once, when its last job ends: the write
//     that sets its status puts its webhook's outbox entry (poutbox/<id>);
//   - delivering that webhook, once, and recording the outcome.
//
// It follows the done/ keys of jobs that end (as the awaiter does) and the
// deletes of pmat/ keys (a pipeline's jobs all stored: one may have ended
// before, unseen), and looks at every unfinished pipeline again each resync.

// pipelinesStore is what the pipeline service needs of the store (the
// term's: its writes are fenced).
type pipelinesStore interface {
	TailDone(ctx context.Context, from int64, log *slog.Logger, fn func(ctx context.Context, id string))
	TailMaterialised(ctx context.Context, log *slog.Logger, fn func(ctx context.Context, id string))
	Job(ctx context.Context, id string) (*mj.Job, error)
	Jobs(ctx context.Context, ids []string) ([]*mj.Job, []error)
	UpdateJob(ctx context.Context, id string, fn func(*mj.Job) error) (*mj.Job, error)
	Pipeline(ctx context.Context, id string) (*mj.Pipeline, error)
	UpdatePipeline(ctx context.Context, id string, fn func(*mj.Pipeline) error) (*mj.Pipeline, error)
	MaterialisePipeline(ctx context.Context, id string, now time.Time) (*mj.Pipeline, error)
	ExpireOutputs(ctx context.Context, j *mj.Job, now time.Time) error
	PendingPipelines(ctx context.Context) (map[string]time.Time, error)
	PipelineIDs(ctx context.Context, prefix string) ([]string, error)
	ExtendPipeline(ctx context.Context, id string, steps []mj.PipelineStep, jobs []*mj.Job, defaults store.Limits) (*mj.Pipeline, bool, error)
	PipelineRunningPrefix() string
	PipelineOutboxPrefix() string
	PipelineFollowPrefix() string
	FollowedPipeline(ctx context.Context, id string) error
}

var _ pipelinesStore = (*store.Store)(nil)

// pipelines is the leader's pipeline service for one term.
type pipelines struct {
	store   pipelinesStore
	log     *slog.Logger
	now     func() time.Time
	cfg     *config.Config
	sender  *webhook.Sender
	secrets AccountSecrets
	links   blob.Links
	// blobs deletes the intermediate outputs of a pipeline that ends (nil:
	// they are left to output_retention).
	blobs Blobs
	// read reads a small blob: a chunked plan's chunks.json, a report (chunked.go).
	read func(ctx context.Context, key string) ([]byte, error)
	// grace: how old a pipeline whose jobs are not all stored must be before
	// the leader stores them (its gateway is storing them meanwhile).
	grace time.Duration
	// tick: how often pending pipelines and pipeline webhooks are looked for;
	// resync: how often every unfinished pipeline is looked at again.
	tick, resync time.Duration

	mu       sync.Mutex
	inflight map[string]bool // pipelines whose webhook is being delivered
	// starting: chunked pipelines whose owner waits to be marked running,
	// looked at each tick (chunked.go).
	starting  map[string]bool
	deliverer sync.WaitGroup
}

func (d *Dispatcher) newPipelines() *pipelines {
	p := &pipelines{store: d.st(), log: d.Log, now: d.now, cfg: d.Config, sender: d.Webhook, secrets: d.Accounts, links: d.links(),
		read:  func(ctx context.Context, key string) ([]byte, error) { return d.storage().ReadAll(ctx, key) },
		grace: 30 * time.Second, tick: 5 * time.Second, resync: time.Minute}
	if d.Blobs != nil {
		p.blobs = d.storage()
	}
	return p
}

// pipelinesLoop runs the term's pipeline service until ctx ends.
func (d *Dispatcher) pipelinesLoop(ctx context.Context) { d.newPipelines().run(ctx) }

func (p *pipelines) run(ctx context.Context) {
	p.mu.Lock()
	p.inflight, p.starting = map[string]bool{}, map[string]bool{}
	p.mu.Unlock()
	defer p.deliverer.Wait()
	var tails sync.WaitGroup
	tails.Add(2)
	go func() {
		defer tails.Done()
		// Under fail_fast, a job that failed while the pipeline's jobs were
		// being stored was passed over (settle waits for them): settled now.
		p.store.TailMaterialised(ctx, p.log, p.settle)
	}()
	go func() {
		defer tails.Done()
		p.store.TailDone(ctx, 0, p.log, func(ctx context.Context, id string) {
			j, err := p.store.Job(ctx, id)
			if err != nil || j.Pipeline == nil {
				return // a job of no pipeline, or gone: the resync looks again
			}
			p.settle(ctx, j.Pipeline.ID)
		})
	}()
	p.pass(ctx, true)
	tick, resync := time.NewTicker(p.tick), time.NewTicker(p.resync)
	defer tick.Stop()
	defer resync.Stop()
	for {
		select {
		case <-ctx.Done():
			tails.Wait()
			return
		case <-tick.C:
			p.pass(ctx, false)
		case <-resync.C:
			p.pass(ctx, true)
		}
	}
}

// pass stores the jobs of pipelines left past grace, delivers the webhooks
// due, and with all, settles every unfinished pipeline.
func (p *pipelines) pass(ctx context.Context, all bool) {
	pending, err := p.store.PendingPipelines(ctx)
	if err != nil {
		p.log.Warn("listing pipelines whose jobs are not all stored failed", "err", err)
	}
	for id, created := range pending {
		if p.now().Sub(created) < p.grace {
			continue
		}
		if _, err := p.store.MaterialisePipeline(ctx, id, p.now()); err != nil {
			p.log.Warn("storing a pipeline's jobs failed; the next pass tries again", "pipeline", id, "err", err)
			continue
		}
		p.log.Info("stored the jobs of a pipeline its gateway left", "pipeline", id)
		p.settle(ctx, id)
	}
	if all {
		ids, err := p.store.PipelineIDs(ctx, p.store.PipelineRunningPrefix())
		if err != nil {
			p.log.Warn("listing unfinished pipelines failed", "err", err)
		}
		for _, id := range ids {
			p.settle(ctx, id)
		}
		// Chunked pipelines that ended before their owner did (a leader
		// that died between the two writes, a write or read that failed).
		follow, err := p.store.PipelineIDs(ctx, p.store.PipelineFollowPrefix())
		if err != nil {
			p.log.Warn("listing chunked pipelines to follow failed", "err", err)
		}
		for _, id := range follow {
			p.finishParent(ctx, id)
		}
	}
	for _, id := range p.startingNow() {
		p.settle(ctx, id)
	}
	due, err := p.store.PipelineIDs(ctx, p.store.PipelineOutboxPrefix())
	if err != nil {
		p.log.Warn("listing pipeline webhooks failed", "err", err)
	}
	for _, id := range due {
		p.deliver(ctx, id)
	}
}

// settle looks at pipeline id's jobs: under fail_fast, stops it at its first
// failure; stopped, cancels every job not ended; once every job ended,
// records its end (and its webhook's outbox entry) and delivers the webhook.
func (p *pipelines) settle(ctx context.Context, id string) {
	pl, err := p.store.Pipeline(ctx, id)
	if err != nil {
		if mj.ErrorCode(err) != mj.ENotFound {
			p.log.Warn("reading a pipeline failed; the next resync looks again", "pipeline", id, "err", err)
		} else {
			p.watchStart(id, false)
		}
		return
	}
	if pl.Status.Terminal() {
		p.watchStart(id, false)
		if pl.Webhook != nil && pl.Webhook.Status == mj.WebhookPending {
			p.deliver(ctx, id)
		}
		if pl.Kind == mj.PipelineKindChunked {
			p.finishParent(ctx, id) // a leader that died between the two writes
		}
		return
	}
	if len(pl.Plan) > 0 {
		// Its jobs are being stored (the pass stores them past grace); the
		// write that drops the plan settles it (TailMaterialised).
		return
	}
	ids := pl.JobIDs()
	read, errs := p.store.Jobs(ctx, ids)
	jobs := make(map[string]*mj.Job, len(ids))
	for i, j := range read {
		if errs[i] != nil && mj.ErrorCode(errs[i]) != mj.ENotFound {
			p.log.Warn("reading a pipeline's jobs failed; the next resync looks again", "pipeline", id, "err", errs[i])
			return
		}
		if j != nil {
			jobs[ids[i]] = j
		}
	}
	if pl.Kind == mj.PipelineKindChunked && !p.chunked(ctx, pl, jobs) {
		return
	}
	switch {
	case pl.Stop != "":
		// Recorded, by a gateway's cancel or this service's fail_fast stop,
		// whose cancels may not all have happened: the rest now.
		if p.cancelRest(ctx, pl, jobs, pl.Stop) {
			return // the cancels' ends settle it
		}
	case pl.FailFast:
		if first := firstFailed(pl, jobs); first != "" {
			p.stop(ctx, pl, jobs, "step "+first+" failed, and the pipeline stops at its first failure (fail_fast)")
			return // the cancels' ends settle it
		}
	}
	st, msg := mj.PipelineStatus(pl, jobs)
	if !st.Terminal() {
		return
	}
	// Every job ended: no step will read an intermediate output again.
	// Deleted before the end is recorded, so that a leader that dies in
	// between deletes them at its successor's resync.
	p.purgeIntermediate(ctx, pl, jobs)
	ended, err := p.store.UpdatePipeline(ctx, id, func(pl *mj.Pipeline) error {
		if pl.Status.Terminal() {
			return errSkip
		}
		now := p.now().UTC()
		pl.Status, pl.ErrorMessage, pl.FinishedAt = st, msg, &now
		pl.ArmWebhook()
		return nil
	})
	switch {
	case err == errSkip:
		return
	case err != nil:
		p.log.Warn("recording a pipeline's end failed; the next resync tries again", "pipeline", id, "err", err)
		return
	}
	p.log.Info("pipeline ended", "pipeline", id, "status", st)
	if ended.Webhook != nil {
		p.deliver(ctx, id)
	}
	if ended.Kind == mj.PipelineKindChunked {
		p.finishParent(ctx, id)
	}
}

// purgeIntermediate deletes the outputs of pl's steps with "publish": false
// (every job of pl has ended), and ends their count against the account's
// storage. What it cannot delete (the store failing) is left to the output
// retention's sweep, as any output; the pipeline ends all the same.
func (p *pipelines) purgeIntermediate(ctx context.Context, pl *mj.Pipeline, jobs map[string]*mj.Job) {
	files := 0
	for _, s := range pl.Steps {
		if !s.Intermediate {
			continue
		}
		for _, id := range s.Jobs {
			j := jobs[id]
			if j == nil || j.Status != mj.StatusSucceeded || len(j.Outputs) == 0 {
				continue // nothing made, or deleted by the retention with its files
			}
			deleted := p.blobs != nil
			for _, o := range j.Outputs {
				if o.Key == "" || p.blobs == nil {
					continue
				}
				if err := p.blobs.Delete(ctx, o.Key); err != nil && !errors.Is(err, blob.ErrNotFound) {
					p.log.Warn("deleting an intermediate output failed; output_retention's sweep deletes it", "pipeline", pl.ID, "job", id, "key", o.Key, "err", err)
					deleted = false
					continue
				}
				files++
			}
			if !deleted {
				continue // still held: still counted
			}
			if err := p.store.ExpireOutputs(ctx, j, p.now()); err != nil {
				p.log.Warn("ending the storage count of intermediate outputs failed; they count until output_retention", "pipeline", pl.ID, "job", id, "err", err)
			}
		}
	}
	if files > 0 {
		p.log.Info("deleted a pipeline's intermediate outputs", "pipeline", pl.ID, "files", files)
	}
}

// firstFailed names the step (and item) of pl's first failed job, "" if none.
func firstFailed(pl *mj.Pipeline, jobs map[string]*mj.Job) string {
	var first *mj.Job
	for _, j := range jobs {
		if j.Status == mj.StatusFailed && (first == nil || j.FinishedAt != nil && first.FinishedAt != nil && j.FinishedAt.Before(*first.FinishedAt)) {
			first = j
		}
	}
	if first == nil {
		return ""
	}
	name := pl.StepOf(first.ID)
	if first.Pipeline != nil && first.Pipeline.Item != nil {
		b, _ := json.Marshal(*first.Pipeline.Item)
		name += "[" + string(b) + "]"
	}
	return name
}

// stop records why pl stops, then cancels each of its jobs not ended.
func (p *pipelines) stop(ctx context.Context, pl *mj.Pipeline, jobs map[string]*mj.Job, why string) {
	stopped, err := p.store.UpdatePipeline(ctx, pl.ID, func(pl *mj.Pipeline) error {
		if pl.Stop != "" || pl.Status.Terminal() {
			return errSkip
		}
		pl.Stop = why
		return nil
	})
	switch {
	case err == errSkip:
		return // stopped already (the client's cancel): settle cancels
	case err != nil:
		p.log.Warn("stopping a pipeline failed; the next resync tries again", "pipeline", pl.ID, "err", err)
		return
	}
	p.cancelRest(ctx, stopped, jobs, why)
	p.log.Info("pipeline stopped", "pipeline", pl.ID, "why", why)
}

// cancelRest cancels each job of stopped pipeline pl not ended in jobs (as
// read), the ones that take others' outputs first, and tells whether there
// was one. Twice, or beside a gateway's cancel, is harmless: a job ended
// meanwhile is left as it is.
func (p *pipelines) cancelRest(ctx context.Context, pl *mj.Pipeline, jobs map[string]*mj.Job, why string) bool {
	ids, some := pl.JobIDs(), false
	for i := len(ids) - 1; i >= 0; i-- {
		if j := jobs[ids[i]]; j == nil || j.Status.Terminal() {
			continue // ended, or deleted by the retention after it ended
		}
		some = true
		_, err := p.store.UpdateJob(ctx, ids[i], func(j *mj.Job) error {
			if j.Status.Terminal() {
				return errSkip
			}
			now := p.now().UTC()
			j.Cancel(now, "cancelled: "+why)
			gpus := 0
			if pool := p.cfg.Pool(j.Machine); pool != nil {
				gpus = pool.GPUs()
			}
			j.Usage = mj.CancelledUsage(j, now, gpus)
			return nil
		})
		if err != nil && err != errSkip {
			p.log.Warn("cancelling a job of a stopped pipeline failed; the next resync tries again", "pipeline", pl.ID, "job", ids[i], "err", err)
		}
	}
	return some
}

// deliver sends pipeline id's webhook in the background, unless it is being
// sent already.
func (p *pipelines) deliver(ctx context.Context, id string) {
	p.mu.Lock()
	if p.inflight[id] {
		p.mu.Unlock()
		return
	}
	p.inflight[id] = true
	p.mu.Unlock()
	p.deliverer.Add(1)
	go func() {
		defer func() {
			p.mu.Lock()
			delete(p.inflight, id)
			p.mu.Unlock()
			p.deliverer.Done()
		}()
		p.send(ctx, id)
	}()
}

// send delivers pipeline id's pending webhook as the job outbox does
// (outbox.go): each attempt counted on the record before it is made, the
// outcome recorded by the write that removes the outbox entry.
func (p *pipelines) send(ctx context.Context, id string) {
	pl, err := p.store.Pipeline(ctx, id)
	if err != nil || pl.Webhook == nil || pl.Webhook.Status != mj.WebhookPending {
		return
	}
	secret := ""
	if p.secrets != nil {
		a, err := p.secrets.Account(ctx, pl.AccountID)
		switch {
		case err == nil && a != nil:
			secret = a.WebhookSecret
		case err != nil && mj.ErrorCode(err) != mj.ENotFound:
			p.log.Warn("pipeline webhook not sent: the account's signing secret could not be read; the next pass tries again", "pipeline", id, "err", err)
			return
		}
	}
	ids := pl.JobIDs()
	read, _ := p.store.Jobs(ctx, ids)
	jobs := make(map[string]*mj.Job, len(ids))
	for i, j := range read {
		if j != nil {
			jobs[ids[i]] = j
		}
	}
	exp := p.now().Add(p.cfg.Storage.TTL)
	body, _ := json.Marshal(mj.ViewPipeline(pl, jobs, func(key string) string { return p.links.Download(ctx, key, exp) }))
	sctx, abort := context.WithCancel(ctx)
	defer abort()
	var aborted error
	res := p.sender.Send(sctx, webhook.Message{
		URL: pl.WebhookURL, Event: "pipeline." + string(pl.Status), DeliveryID: pl.Webhook.DeliveryID,
		Body: body, Secret: secret, Done: pl.Webhook.Attempts,
		OnAttempt: func(n int) {
			_, err := p.store.UpdatePipeline(ctx, id, func(pl *mj.Pipeline) error {
				if pl.Webhook == nil || pl.Webhook.Status != mj.WebhookPending {
					return errSkip
				}
				w := *pl.Webhook
				w.Attempts = max(w.Attempts, n)
				pl.Webhook = &w
				return nil
			})
			if err != nil {
				aborted = err
				abort()
			}
		},
	})
	if aborted != nil || ctx.Err() != nil {
		return // settled elsewhere, deposed, or etcd failed: the entry stays
	}
	_, err = p.store.UpdatePipeline(ctx, id, func(pl *mj.Pipeline) error {
		if pl.Webhook == nil || pl.Webhook.Status != mj.WebhookPending {
			return errSkip
		}
		w := *pl.Webhook
		w.Attempts, w.LastHTTPStatus, w.LastError = max(w.Attempts, res.Attempts), res.LastStatus, ""
		if res.Err == nil {
			now := p.now().UTC()
			w.Status, w.DeliveredAt = mj.WebhookDelivered, &now
		} else {
			w.Status, w.LastError = mj.WebhookFailed, res.Err.Error()
		}
		pl.Webhook = &w
		return nil
	})
	if err != nil && err != errSkip {
		p.log.Warn("recording a pipeline webhook's outcome failed", "pipeline", id, "err", err)
		return
	}
	if res.Err != nil {
		p.log.Warn("pipeline webhook not delivered", "pipeline", id, "url", mj.HostOnlyURL(pl.WebhookURL), "attempts", res.Attempts,
			"err", mj.RedactHostOnly(res.Err.Error(), pl.WebhookURL))
	}
}
