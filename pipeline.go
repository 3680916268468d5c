package mediajobs

import (
	"slices"
	"sort"
	"strconv"
	"time"
)

// Pipelines (docs/pipelines.md): named steps, each an ordinary job body, whose
// inputs may name other steps' outputs. Every step is one job, or one job per
// item of its for_each list; a reference between steps is a reference between
// jobs (job:<id>/<output>, references.go), so the jobs wait, start, fail and
// retry as any job does. The pipeline's own record holds the plan (every job,
// its id assigned) until the jobs are stored, then what the view needs.

// PipelineRef is what a job of a pipeline knows of it: the job's "pipeline".
type PipelineRef struct {
	ID   string `json:"id"`
	Step string `json:"step"`
	// Item is the job's index in its step's for_each list; absent for a step
	// that runs once.
	Item *int `json:"item,omitempty"`
	// Intermediate: the step says "publish": false. Its outputs are only for
	// the pipeline's steps after: no signed links, no references from outside
	// the pipeline, deleted when the pipeline ends (dispatcher/pipelines.go).
	Intermediate bool `json:"intermediate,omitempty"`
}

// IntermediateOutputs reports whether j's outputs are a pipeline step's
// intermediate outputs ("publish": false; docs/pipelines.md).
func (j *Job) IntermediateOutputs() bool { return j.Pipeline != nil && j.Pipeline.Intermediate }

// Pipeline is the stored record of a pipeline. Its public view is PipelineView.
type Pipeline struct {
	ID        string `json:"id"`
	AccountID string `json:"account_id"`
	// Status is "" until the pipeline ends, then how it ended: set once, by the
	// write that ends it (PipelineStatus derives it from the steps' jobs before).
	Status       Status            `json:"status,omitempty"`
	ErrorMessage string            `json:"error_message,omitempty"`
	FailFast     bool              `json:"fail_fast,omitempty"`
	WebhookURL   string            `json:"webhook_url,omitempty"`
	Webhook      *WebhookState     `json:"webhook,omitempty"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	Steps        []PipelineStep    `json:"steps"`
	// Stop says why the steps not ended are being cancelled: by the client, or
	// a step that failed under fail_fast. Jobs stored after it is set are
	// stored cancelled.
	Stop string `json:"stop,omitempty"`
	// Cancelled: the client cancelled the pipeline (Stop says so).
	Cancelled bool `json:"cancelled,omitempty"`
	// Plan holds every job not yet stored, until all are (store/pipelines.go).
	Plan     []*Job `json:"plan,omitempty"`
	IdemHash string `json:"idem_hash,omitempty"`
	// Kind is "" for a pipeline a client sent, PipelineKindChunked for a
	// chunked job's (parallel.go): Owner is that job, which follows it.
	Kind  string `json:"kind,omitempty"`
	Owner string `json:"owner,omitempty"`

	CreatedAt  time.Time  `json:"created_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`

	// Revision is the etcd revision this copy was read or written at (not stored).
	Revision int64 `json:"-"`
}

// PipelineStep is one step: its jobs, by item (one for a step without
// for_each), and the steps whose outputs it takes.
type PipelineStep struct {
	Name  string              `json:"name"`
	Jobs  []string            `json:"jobs"`
	Items []map[string]string `json:"for_each,omitempty"`
	Needs []string            `json:"needs,omitempty"`
	// Intermediate: "publish": false (PipelineRef.Intermediate).
	Intermediate bool `json:"intermediate,omitempty"`
}

// JobIDs lists every job of p, step by step.
func (p *Pipeline) JobIDs() []string {
	var ids []string
	for _, s := range p.Steps {
		ids = append(ids, s.Jobs...)
	}
	return ids
}

// StepOf names the step of job id, "" if it is not one of p's.
func (p *Pipeline) StepOf(id string) string {
	for _, s := range p.Steps {
		if slices.Contains(s.Jobs, id) {
			return s.Name
		}
	}
	return ""
}

// ArmWebhook marks an ended pipeline's webhook as due (the write that ends it
// puts its outbox entry).
func (p *Pipeline) ArmWebhook() {
	if p.Status.Terminal() && p.WebhookURL != "" && p.Webhook == nil {
		p.Webhook = &WebhookState{Status: WebhookPending, DeliveryID: NewDeliveryID()}
	}
}

// PipelineStatus derives where p stands from its jobs (by id): queued until a
// job starts or ends, running until every job ended; then succeeded when all
// did, cancelled when the client cancelled it, failed when a job failed (msg
// names the first step that did), else cancelled (a step cancelled by
// itself). A job missing while p has a plan is not stored yet; once every job
// is stored (no plan), one missing was deleted by the retention, job_retention
// after it ended: it counts as ended, its outcome no longer known, failing
// nothing by itself (a failure under fail_fast is still told by p.Stop).
func PipelineStatus(p *Pipeline, jobs map[string]*Job) (st Status, msg string) {
	ended, started, all, deleted := 0, false, 0, 0
	var firstFail *Job
	cancelled := false
	for _, s := range p.Steps {
		for _, id := range s.Jobs {
			all++
			j := jobs[id]
			if j == nil {
				if len(p.Plan) == 0 { // deleted, after it ended
					ended, started, deleted = ended+1, true, deleted+1
				}
				continue
			}
			if j.Status != StatusQueued {
				started = true
			}
			if !j.Status.Terminal() {
				continue
			}
			ended++
			switch j.Status {
			case StatusFailed:
				if firstFail == nil || j.FinishedAt != nil && firstFail.FinishedAt != nil && j.FinishedAt.Before(*firstFail.FinishedAt) {
					firstFail = j
				}
			case StatusCancelled:
				cancelled = true
			}
		}
	}
	switch {
	case ended < all && started:
		return StatusRunning, ""
	case ended < all:
		return StatusQueued, ""
	case firstFail == nil && !cancelled:
		return StatusSucceeded, ""
	case p.Cancelled:
		return StatusCancelled, p.Stop
	case firstFail != nil:
		return StatusFailed, "step " + stepLabel(p, firstFail) + " failed: " + firstFail.ErrorMessage
	case deleted > 0 && p.FailFast && p.Stop != "":
		// Stopped under fail_fast, the failed job deleted since.
		return StatusFailed, p.Stop
	}
	return StatusCancelled, "a step was cancelled"
}

// stepLabel names j's step, with its item: encode[2].
func stepLabel(p *Pipeline, j *Job) string {
	name := p.StepOf(j.ID)
	if j.Pipeline != nil {
		name = j.Pipeline.Step
		if j.Pipeline.Item != nil {
			name += "[" + strconv.Itoa(*j.Pipeline.Item) + "]"
		}
	}
	return name
}

// PipelineView is the public pipeline object: GET /api/pipelines/{id}'s data,
// and its webhook's body.
type PipelineView struct {
	ID           string            `json:"id"`
	Status       Status            `json:"status"`
	ErrorMessage string            `json:"error_message"`
	FailFast     bool              `json:"fail_fast"`
	CreatedAt    time.Time         `json:"created_at"`
	UpdatedAt    time.Time         `json:"updated_at"`
	StartedAt    *time.Time        `json:"started_at"`
	FinishedAt   *time.Time        `json:"finished_at"`
	WebhookURL   *string           `json:"webhook_url"`
	Webhook      *WebhookState     `json:"webhook"`
	Metadata     map[string]string `json:"metadata"`
	Steps        []StepView        `json:"steps"`
}

// StepView is one step of a PipelineView: its status derived from its jobs
// as the pipeline's is, its timings, and each job.
type StepView struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	// Publish is false for a step whose outputs are intermediate: its jobs'
	// output_files stay {} (docs/pipelines.md#intermediate-outputs).
	Publish    bool       `json:"publish"`
	Needs      []string   `json:"needs"`
	StartedAt  *time.Time `json:"started_at"`
	FinishedAt *time.Time `json:"finished_at"`
	// DurationSeconds: from the first job's start to the last one's end, once
	// every job ended.
	DurationSeconds *float64  `json:"duration_seconds"`
	Jobs            []StepJob `json:"jobs"`
}

// StepJob is one job of a step: what a pipeline's reader needs at a glance;
// GET /api/jobs/{id} has the rest.
type StepJob struct {
	ID           string            `json:"id"`
	Item         map[string]string `json:"item,omitempty"`
	Status       Status            `json:"status"`
	StatusDetail string            `json:"status_detail"`
	ErrorMessage string            `json:"error_message"`
	StartedAt    *time.Time        `json:"started_at"`
	FinishedAt   *time.Time        `json:"finished_at"`
	Progress     *Progress         `json:"progress"`
	// OutputFiles: name to signed link, once the job succeeded; {} for a
	// step that does not publish its outputs.
	OutputFiles map[string]string `json:"output_files"`
}

// StatusDeleted is a pipeline's job in its view once the retention deleted it
// (job_retention after it ended, before the pipeline did): ended, its outcome
// no longer known. A view's value only; no job has it.
const StatusDeleted Status = "deleted"

// deletedDetail is a deleted job's status_detail in a pipeline's view.
const deletedDetail = "deleted by the retention (storage.job_retention) after it ended; its outcome is no longer known"

// ViewPipeline renders p with its jobs (by id; one not stored yet shows as
// queued, one deleted by the retention as deleted). sign turns a blob key into
// a signed link.
func ViewPipeline(p *Pipeline, jobs map[string]*Job, sign func(key string) string) PipelineView {
	st, msg := PipelineStatus(p, jobs)
	if p.Status.Terminal() {
		st, msg = p.Status, p.ErrorMessage
	}
	v := PipelineView{ID: p.ID, Status: st, ErrorMessage: msg, FailFast: p.FailFast, CreatedAt: p.CreatedAt, UpdatedAt: p.UpdatedAt,
		FinishedAt: p.FinishedAt, Webhook: p.Webhook, Metadata: nonNil(p.Metadata), Steps: make([]StepView, len(p.Steps))}
	if p.WebhookURL != "" {
		v.WebhookURL = &p.WebhookURL
	}
	for i, s := range p.Steps {
		sv := StepView{Name: s.Name, Publish: !s.Intermediate, Needs: s.Needs, Jobs: make([]StepJob, len(s.Jobs))}
		if sv.Needs == nil {
			sv.Needs = []string{}
		}
		one := &Pipeline{Steps: []PipelineStep{s}, Cancelled: p.Cancelled, Stop: p.Stop, Plan: p.Plan}
		sv.Status, _ = PipelineStatus(one, jobs)
		ended := true
		for k, id := range s.Jobs {
			sj := StepJob{ID: id, Status: StatusQueued, OutputFiles: map[string]string{}}
			if k < len(s.Items) {
				sj.Item = s.Items[k]
			}
			j := jobs[id]
			if j == nil && len(p.Plan) == 0 {
				sj.Status, sj.StatusDetail = StatusDeleted, deletedDetail
				sv.Jobs[k] = sj
				continue
			}
			if j == nil {
				sv.Jobs[k], ended = sj, false
				continue
			}
			sj.Status, sj.StatusDetail, sj.ErrorMessage, sj.StartedAt, sj.FinishedAt = j.Status, j.StatusDetail, j.ErrorMessage, j.StartedAt, j.FinishedAt
			if j.Status == StatusRunning {
				sj.Progress = j.Progress
			}
			if j.Status == StatusSucceeded && !s.Intermediate && !j.IntermediateOutputs() {
				for _, o := range j.Outputs {
					if o.Stored() {
						sj.OutputFiles[o.Name] = sign(o.Key)
					}
				}
			}
			sv.StartedAt = earliest(sv.StartedAt, j.StartedAt)
			if j.FinishedAt == nil {
				ended = false
			} else if sv.FinishedAt == nil || j.FinishedAt.After(*sv.FinishedAt) {
				sv.FinishedAt = j.FinishedAt
			}
			sv.Jobs[k] = sj
		}
		if !ended {
			sv.FinishedAt = nil
		} else if sv.StartedAt != nil && sv.FinishedAt != nil {
			d := sv.FinishedAt.Sub(*sv.StartedAt).Seconds()
			sv.DurationSeconds = &d
		}
		v.StartedAt = earliest(v.StartedAt, sv.StartedAt)
		v.Steps[i] = sv
	}
	return v
}

func earliest(a, b *time.Time) *time.Time {
	if a == nil || b != nil && b.Before(*a) {
		return b
	}
	return a
}

// OrderSteps sorts steps so that each comes after the steps it needs, ties by
// name: the order a reader follows the graph in. The graph has no cycle.
func OrderSteps(steps []PipelineStep) {
	depth := map[string]int{}
	var of func(name string, seen int) int
	byName := map[string]PipelineStep{}
	for _, s := range steps {
		byName[s.Name] = s
	}
	of = func(name string, seen int) int {
		if d, ok := depth[name]; ok || seen > len(steps) {
			return d
		}
		d := 0
		for _, n := range byName[name].Needs {
			d = max(d, of(n, seen+1)+1)
		}
		depth[name] = d
		return d
	}
	sort.SliceStable(steps, func(a, b int) bool {
		da, db := of(steps[a].Name, 0), of(steps[b].Name, 0)
		if da != db {
			return da < db
		}
		return steps[a].Name < steps[b].Name
	})
}
