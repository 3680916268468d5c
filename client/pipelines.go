package client

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"time"

	"github.com/google/uuid"
	mj "github.com/mediajobs/mediajobs"
)

// Pipelines (docs/pipelines.md): named steps, each a job body, whose inputs may
// name other steps' outputs (step:<step>/<output>), run once per item of a
// for_each list (fan-out) or take every item's output (fan-in).

// Pipeline is a pipeline as the API shows it: its status, and each step's
// status, timings and jobs (with their outputs' signed links).
type Pipeline = mj.PipelineView

// PipelineStep is one step of a Pipeline.
type PipelineStep = mj.StepView

// PipelineRequest is a new pipeline: its steps by name.
type PipelineRequest struct {
	Steps map[string]Step `json:"steps"`
	// WebhookURL gets one webhook when the pipeline ends (event
	// pipeline.<status>); each step's own WebhookURL still fires for its jobs.
	WebhookURL string `json:"webhook_url,omitempty"`
	// FailFast cancels every job not ended at the first one that fails.
	FailFast bool              `json:"fail_fast,omitempty"`
	Metadata map[string]string `json:"metadata,omitempty"`
	// IdempotencyKey is sent as Idempotency-Key; empty: a new random one per
	// CreatePipeline call, kept across that call's retries.
	IdempotencyKey string `json:"-"`
}

// Step is one step: a job body whose input_files may name other steps'
// outputs, step:<step>/<output> (step:<step>[*]/<output> for every item of a
// step with ForEach, step:<step>[${index}]/<output> for the item of the same
// index), and the items it runs once per. OutputDestinations and KeepOutputs
// are not available in a step.
type Step struct {
	CreateRequest
	// FFmpegCommand is one command, as Very Good FFmpeg's single-command body
	// writes it; FFmpegCommands is the usual form.
	FFmpegCommand string `json:"ffmpeg_command,omitempty"`
	// ForEach runs the step once per item; ${item.<key>} and ${index} in its
	// commands, output names, URL inputs and metadata take each item's values.
	ForEach []map[string]string `json:"for_each,omitempty"`
	// Publish false keeps the step's outputs for the steps after it only: no
	// links, deleted when the pipeline ends (nil: published).
	Publish *bool `json:"publish,omitempty"`
}

// body is r as the API takes it: no step with "output_files": null.
func (r PipelineRequest) body() PipelineRequest {
	steps := make(map[string]Step, len(r.Steps))
	for name, s := range r.Steps {
		if s.OutputFiles == nil {
			s.OutputFiles = []string{}
		}
		steps[name] = s
	}
	r.Steps = steps
	return r
}

// CreatePipeline submits a pipeline and returns it as stored: every job
// planned, its id assigned, none run yet. Nothing is stored when it is refused
// (an *Error whose Details name each problem as steps.<step>.<field>).
func (c *Client) CreatePipeline(ctx context.Context, r PipelineRequest) (*Pipeline, error) {
	key := r.IdempotencyKey
	if key == "" {
		key = uuid.NewString()
	}
	var p Pipeline
	if err := c.do(ctx, http.MethodPost, "/api/pipelines", r.body(), http.Header{"Idempotency-Key": {key}}, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// PipelineDryRun is what a create would store (POST /api/pipelines?dry_run=true):
// the pipeline's view (no ids) and, by step, every job it would make, its
// placeholders filled in and its inputs from other steps written
// step:<step>[<item>]/<output>.
type PipelineDryRun struct {
	Pipeline Pipeline         `json:"pipeline"`
	Jobs     map[string][]Job `json:"jobs"`
}

// DryRunPipeline runs every check CreatePipeline runs and returns what it
// would store, or the same *Error; nothing is stored.
func (c *Client) DryRunPipeline(ctx context.Context, r PipelineRequest) (*PipelineDryRun, error) {
	var d PipelineDryRun
	if err := c.do(ctx, http.MethodPost, "/api/pipelines?dry_run=true", r.body(), nil, &d); err != nil {
		return nil, err
	}
	return &d, nil
}

// Pipeline returns one pipeline.
func (c *Client) Pipeline(ctx context.Context, id string) (*Pipeline, error) {
	var p Pipeline
	if err := c.do(ctx, http.MethodGet, "/api/pipelines/"+url.PathEscape(id), nil, nil, &p); err != nil {
		return nil, err
	}
	return &p, nil
}

// CancelPipeline cancels every job of the pipeline that has not ended and
// returns the pipeline. One that has already ended is returned as it ended,
// with an *Error "conflict" (which is also what a retried cancel whose first
// try went through gets: check the pipeline's Status).
func (c *Client) CancelPipeline(ctx context.Context, id string) (*Pipeline, error) {
	var p Pipeline
	err := c.do(ctx, http.MethodPost, "/api/pipelines/"+url.PathEscape(id)+"/cancel", nil, nil, &p)
	if IsCode(err, "conflict") {
		if ended, gerr := c.Pipeline(ctx, id); gerr == nil {
			return ended, err
		}
	}
	if err != nil {
		return nil, err
	}
	return &p, nil
}

// PipelinePage is one page of pipelines, newest first.
type PipelinePage struct {
	Pipelines []Pipeline
	Total     int
	HasMore   bool
}

// PipelineListOptions page ListPipelines.
type PipelineListOptions struct {
	Limit  int // 1–100, default 20
	Offset int
}

// ListPipelines returns the account's pipelines, newest first.
func (c *Client) ListPipelines(ctx context.Context, o PipelineListOptions) (*PipelinePage, error) {
	var ps []Pipeline
	total, more, err := c.page(ctx, "/api/pipelines", o.Limit, o.Offset, nil, &ps)
	if err != nil {
		return nil, err
	}
	return &PipelinePage{Pipelines: ps, Total: total, HasMore: more}, nil
}

// PipelineOptions follow a pipeline as it runs (RunPipeline, WaitPipeline).
type PipelineOptions struct {
	// OnChange, when not nil, is called with the pipeline on every change seen
	// (a job's status or progress), in order.
	OnChange func(*Pipeline)
	// OnStep, when not nil, is called with a step each time its status, or one
	// of its jobs' status or progress, changes: the first time with every step
	// as it stands, then with the steps that changed, in the pipeline's order
	// (a step after those it takes outputs of).
	OnStep func(p *Pipeline, s *PipelineStep)
}

// RunPipeline creates the pipeline and follows it until it ends, then returns
// it as it ended. A pipeline that ends failed or cancelled is not an error:
// check its Status, and each step's and job's ErrorMessage. When ctx ends
// first the pipeline goes on; the error is ctx's, and the pipeline, when it
// was created, is returned as last seen (CancelPipeline stops it).
func (c *Client) RunPipeline(ctx context.Context, r PipelineRequest, o *PipelineOptions) (*Pipeline, error) {
	p, err := c.CreatePipeline(ctx, r)
	if err != nil {
		return nil, err
	}
	return c.followPipeline(ctx, p, o)
}

// WaitPipeline follows a pipeline until it ends and returns it as it ended. It
// follows the pipeline's event stream (GET /api/pipelines/{id}/events) and
// polls GET /api/pipelines/{id} every PollInterval where there is none; a
// broken stream or connection is resumed, errors the API answers with end it.
func (c *Client) WaitPipeline(ctx context.Context, id string, o *PipelineOptions) (*Pipeline, error) {
	p, err := c.Pipeline(ctx, id)
	if err != nil {
		return nil, err
	}
	return c.followPipeline(ctx, p, o)
}

func (c *Client) followPipeline(ctx context.Context, p *Pipeline, o *PipelineOptions) (*Pipeline, error) {
	if o == nil {
		o = &PipelineOptions{}
	}
	var last string
	steps := map[string]string{}
	seen := func(next *Pipeline) {
		p = next
		b, _ := json.Marshal(p)
		if string(b) == last {
			return
		}
		last = string(b)
		if o.OnChange != nil {
			o.OnChange(p)
		}
		for i := range p.Steps {
			s := &p.Steps[i]
			b, _ := json.Marshal(s)
			if steps[s.Name] != string(b) && o.OnStep != nil {
				o.OnStep(p, s)
			}
			steps[s.Name] = string(b)
		}
	}
	seen(p)
	streaming := true
	for !p.Status.Terminal() {
		if streaming {
			err := c.stream(ctx, "/api/pipelines/"+url.PathEscape(p.ID)+"/events", "pipeline", func(data []byte) {
				var next Pipeline
				if json.Unmarshal(data, &next) == nil {
					seen(&next)
				}
			})
			switch {
			case p.Status.Terminal():
				return p, nil
			case ctx.Err() != nil:
				return p, ctx.Err()
			case errors.Is(err, errNoStream):
				streaming = false
			case IsCode(err, "notFound") || IsCode(err, "badApiKey"):
				return p, err
			}
			// The stream broke, ended early or is refused for now (too many
			// streams): read the pipeline, then follow again.
		}
		next, err := c.Pipeline(ctx, p.ID)
		if err != nil {
			var e *Error
			if errors.As(err, &e) || ctx.Err() != nil {
				return p, err
			}
		} else {
			seen(next)
			if p.Status.Terminal() {
				break
			}
		}
		select {
		case <-ctx.Done():
			return p, ctx.Err()
		case <-time.After(max(c.PollInterval, 100*time.Millisecond)):
		}
	}
	return p, nil
}
