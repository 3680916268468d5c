package mediajobs

import (
	"sort"
	"strconv"
	"time"
)

// JobView is the public job object: the "data" of create, GET and cancel, and the
// webhook body. Field names follow Very Good FFmpeg's API so its clients work as is:
// created_at, queued_at and updated_at are always present, output_files is a map of
// name to signed URL, maps are {} rather than null.
type JobView struct {
	ID               string                `json:"id"`
	Status           Status                `json:"status"`
	OutputFiles      map[string]string     `json:"output_files"`
	ErrorMessage     string                `json:"error_message"`
	CreatedAt        time.Time             `json:"created_at"`
	QueuedAt         time.Time             `json:"queued_at"`
	UpdatedAt        time.Time             `json:"updated_at"`
	StartedAt        *time.Time            `json:"started_at"`
	FinishedAt       *time.Time            `json:"finished_at"`
	Machine          string                `json:"machine"`
	InputFiles       map[string]string     `json:"input_files"`
	FFmpegCommands   []string              `json:"ffmpeg_commands"`
	WebhookURL       *string               `json:"webhook_url"`
	TimeoutSeconds   int                   `json:"timeout_seconds"`
	Metadata         map[string]string     `json:"metadata"`
	Progress         *Progress             `json:"progress"`
	Outputs          map[string]OutputView `json:"outputs"`
	StatusDetail     string                `json:"status_detail"`
	Webhook          *WebhookState         `json:"webhook"`
	TotalInputBytes  *int64                `json:"total_input_bytes"`
	TotalOutputBytes *int64                `json:"total_output_bytes"`
	// Logs maps a command's number ("1", "2", ...) to a signed URL of its full
	// ffmpeg log, once the job has ended (succeeded or failed).
	Logs map[string]string `json:"logs"`
	// Analysis lists the JSON objects analysis filters printed (loudnorm with
	// print_format=json, ...), once the job has ended; [] when none did.
	Analysis []Analysis `json:"analysis"`
	// Usage is what the job consumed (docs/usage.md), once its result is in;
	// null before, and for jobs ended without one (cancelled, lost workers).
	Usage *Usage `json:"usage"`
	// Worker is where the job's current (or last) attempt runs: a warm runner or a
	// child dispatched to Nomad, and its allocation; null while queued.
	Worker *Worker `json:"worker"`
	// Pipeline: the pipeline and step the job is one of; absent for a job
	// created by itself (docs/pipelines.md).
	Pipeline *PipelineRef `json:"pipeline,omitempty"`
	// Parallel: a job that asked for chunked encoding (docs/chunked.md): how
	// it runs, its chunks and, once stitched, the verification report.
	Parallel *ParallelView `json:"parallel,omitempty"`
}

// OutputView describes one produced file: its size and what ffprobe says of it.
type OutputView struct {
	SizeBytes       int64    `json:"size_bytes"`
	DurationSeconds *float64 `json:"duration_seconds"`
	Format          string   `json:"format"`
	Streams         []Stream `json:"streams"`
	// Destination: where the output was sent (output_destinations) and how that
	// went; absent for an output without one.
	Destination *Delivery `json:"destination,omitempty"`
	// Intermediate: an output of a pipeline step with "publish": false, kept
	// for the steps after only and deleted when the pipeline ends; it has no
	// link in output_files (docs/pipelines.md#intermediate-outputs).
	Intermediate bool `json:"intermediate,omitempty"`
}

// View renders j for clients. sign turns a blob key into a signed download URL; it
// is only called for a succeeded job's outputs.
func View(j *Job, sign func(key string) string) JobView {
	v := JobView{
		ID: j.ID, Status: j.Status, ErrorMessage: j.ErrorMessage,
		CreatedAt: j.CreatedAt, QueuedAt: j.QueuedAt, UpdatedAt: j.UpdatedAt,
		StartedAt: j.StartedAt, FinishedAt: j.FinishedAt,
		Machine: j.Machine, FFmpegCommands: j.FFmpegCommands, TimeoutSeconds: j.TimeoutSeconds,
		InputFiles: nonNil(j.InputFiles), Metadata: nonNil(j.Metadata),
		OutputFiles: map[string]string{}, Outputs: map[string]OutputView{}, Logs: map[string]string{},
		Analysis: []Analysis{}, StatusDetail: j.StatusDetail, Webhook: j.Webhook, Usage: j.Usage, Worker: j.Worker,
		Pipeline: j.Pipeline, Parallel: viewParallel(j.Parallel),
	}
	if j.ChunkedParent() && j.Usage == nil {
		v.Usage = j.Parallel.Usage // its jobs' sum, as GET sums them (docs/chunked.md)
	}
	if v.FFmpegCommands == nil {
		v.FFmpegCommands = []string{}
	}
	if j.WebhookURL != "" {
		v.WebhookURL = &j.WebhookURL
	}
	if j.Status == StatusRunning && j.Progress != nil {
		v.Progress = j.Progress
	}
	if j.TotalInputBytes > 0 || j.Status == StatusSucceeded {
		n := j.TotalInputBytes
		v.TotalInputBytes = &n
	}
	if j.Status.Terminal() {
		for _, n := range j.LogCommands {
			v.Logs[strconv.Itoa(n)] = sign(LogKey(j.LogsPrefix, n))
		}
		if j.Analysis != nil {
			v.Analysis = j.Analysis
		}
	}
	if j.Status == StatusSucceeded {
		n := j.TotalOutputBytes
		v.TotalOutputBytes = &n
		outs := append([]Output(nil), j.Outputs...)
		sort.Slice(outs, func(a, b int) bool { return outs[a].Name < outs[b].Name })
		inter := j.IntermediateOutputs()
		for _, o := range outs {
			// Not linked: only in its destination (keep_outputs false), or
			// only for its pipeline's steps after (publish false).
			if o.Stored() && !inter {
				v.OutputFiles[o.Name] = sign(o.Key)
			}
			ov := OutputView{SizeBytes: o.Size, Streams: []Stream{}, Destination: o.Destination, Intermediate: inter}
			if p := o.Probe; p != nil {
				ov.DurationSeconds, ov.Format = p.DurationSeconds, p.Format
				if p.Streams != nil {
					ov.Streams = p.Streams
				}
			}
			v.Outputs[o.Name] = ov
		}
	}
	return v
}

func nonNil(m map[string]string) map[string]string {
	if m == nil {
		return map[string]string{}
	}
	return m
}
