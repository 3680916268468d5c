package mediajobs

import (
	"encoding/json"
	"strconv"
	"strings"
	"time"
)

// Status is where a job stands. See ValidateTransition and docs/state_machine.md.
type Status string

const (
	StatusQueued    Status = "queued"
	StatusRunning   Status = "running"
	StatusSucceeded Status = "succeeded"
	StatusFailed    Status = "failed"
	StatusCancelled Status = "cancelled"
)

// Terminal reports whether no further transition is allowed from s.
func (s Status) Terminal() bool {
	return s == StatusSucceeded || s == StatusFailed || s == StatusCancelled
}

// Valid reports whether s is one of the five known statuses.
func (s Status) Valid() bool {
	switch s {
	case StatusQueued, StatusRunning, StatusSucceeded, StatusFailed, StatusCancelled:
		return true
	}
	return false
}

// Job is the stored record of one FFmpeg job. Its public JSON view is JobView.
type Job struct {
	ID        string `json:"id"`
	AccountID string `json:"account_id"`
	Status    Status `json:"status"`

	InputFiles     map[string]string `json:"input_files"`
	OutputNames    []string          `json:"output_names"`
	FFmpegCommands []string          `json:"ffmpeg_commands"`
	WebhookURL     string            `json:"webhook_url,omitempty"`
	Machine        string            `json:"machine"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	Metadata       map[string]string `json:"metadata,omitempty"`

	// Awaits are the jobs whose outputs this job's inputs name (job:<id>/<output>,
	// ParseJobRef) that have not succeeded yet. While any is left the job is
	// queued outside its pool's queue (store.derivedOps); see Release.
	Awaits []string `json:"awaits,omitempty"`
	// InputKeys are the blob keys of the outputs its job: inputs name, by input
	// name, once their jobs succeeded: the dispatcher signs them into the
	// runner's manifest, so the file goes from storage to the worker directly.
	InputKeys map[string]string `json:"input_keys,omitempty"`
	// Pipeline: the pipeline and step this job is one of (docs/pipelines.md).
	Pipeline *PipelineRef `json:"pipeline,omitempty"`
	// Parallel: what the job's "parallel" asked for and what became of it
	// (parallel.go); a chunked parent is never dispatched itself.
	Parallel *Parallel `json:"parallel,omitempty"`
	// Chunk: the phase of a chunked pipeline this job runs instead of its
	// commands (parallel.go).
	Chunk *ChunkTask `json:"chunk,omitempty"`

	// Outputs are the files the runner uploaded, in the order it found them.
	Outputs []Output `json:"outputs,omitempty"`
	// LogCommands are the commands whose full ffmpeg log the attempt that ended
	// the job uploaded, each at LogsPrefix + "logs/<n>.log" (kept this compact: a
	// job may have a thousand commands).
	LogCommands []int  `json:"log_commands,omitempty"`
	LogsPrefix  string `json:"logs_prefix,omitempty"`
	// Analysis is what analysis filters printed as JSON (loudnorm with
	// print_format=json, ...), within MaxAnalysisBytes (BoundResult).
	Analysis []Analysis `json:"analysis,omitempty"`
	// Progress is not part of the record: it lives on its own short-lived key
	// and is merged in when the job is read (store.Job, ListJobs, the gateway's cache).
	Progress *Progress `json:"-"`
	// ProgressRevision is the etcd revision of Progress (not stored).
	ProgressRevision int64  `json:"-"`
	ErrorMessage     string `json:"error_message,omitempty"`
	StatusDetail     string `json:"status_detail,omitempty"`

	TotalInputBytes  int64 `json:"total_input_bytes,omitempty"`
	TotalOutputBytes int64 `json:"total_output_bytes,omitempty"`
	// Usage is what the attempt whose result ended the job consumed (docs/usage.md);
	// nil when no result was applied (cancelled, lost workers).
	Usage *Usage `json:"usage,omitempty"`

	// IdemHash names the Idempotency-Key record that created the job, deleted with
	// it (store.DeleteFinishedJobs).
	IdemHash string `json:"idem_hash,omitempty"`
	// RecordBytes is what the job counted against its account's max_job_bytes
	// when it was created: its record and what the create stored beside it (its
	// destinations and Idempotency-Key record), given back when it is deleted
	// (docs/limits.md); 0 for jobs of versions before limits.
	RecordBytes int64 `json:"record_bytes,omitempty"`
	// MaxInputBytes is its account's max_input_bytes when it was created: the
	// runner fetches no more inputs than that (0: no limit; docs/limits.md).
	MaxInputBytes int64 `json:"max_input_bytes,omitempty"`
	// HasDestinations: the job has output_destinations, stored under a key of
	// their own (a URL is a credential) and deleted when the job ends. Destinations
	// holds them only while the job is created (store.CreateJobWithin writes
	// them); a job read back has nil.
	HasDestinations bool          `json:"has_destinations,omitempty"`
	Destinations    *Destinations `json:"-"`

	// Dispatch bookkeeping, not public.
	NomadJobID   string     `json:"nomad_job_id,omitempty"`
	Attempt      int        `json:"attempt,omitempty"`
	DispatchedAt *time.Time `json:"dispatched_at,omitempty"`
	// PlacementReason is why Nomad could not place the current attempt yet.
	PlacementReason string `json:"placement_reason,omitempty"`
	// WaitingForCapacity: Nomad has nodes that can run the attempt, all busy. Such
	// a job waits for one to free up; only a job no node can take fails at the
	// pool's queue limit.
	WaitingForCapacity bool `json:"waiting_for_capacity,omitempty"`
	// Worker is where the current attempt runs (or the last one ran).
	Worker *Worker `json:"worker,omitempty"`
	// AttemptStartedAt is when the current attempt's task started (StartedAt is the
	// first attempt's); the timeout backstop measures from it.
	AttemptStartedAt *time.Time `json:"attempt_started_at,omitempty"`
	// WarmLapses counts the warm runners that went away before they started the
	// job (its attempt did not run); after a few it goes to Nomad. GivenBack
	// counts the attempts a stopping warm runner (drain, scale-down) handed
	// back: up to a few, they do not count against max_attempts (docs/warm.md).
	WarmLapses int `json:"warm_lapses,omitempty"`
	GivenBack  int `json:"given_back,omitempty"`

	Webhook *WebhookState `json:"webhook,omitempty"`

	// Revision is the etcd revision this copy was read or written at (not stored).
	Revision int64 `json:"-"`

	CreatedAt  time.Time  `json:"created_at"`
	QueuedAt   time.Time  `json:"queued_at"`
	UpdatedAt  time.Time  `json:"updated_at"`
	StartedAt  *time.Time `json:"started_at,omitempty"`
	FinishedAt *time.Time `json:"finished_at,omitempty"`
}

// Worker says which path runs a job's attempt and where: a warm runner of the
// pool's warm service job, or a child dispatched to Nomad for the job alone
// (docs/warm.md). It is part of the job view.
type Worker struct {
	Path         string `json:"path"`                    // WorkerWarm or WorkerDispatch
	NomadJobID   string `json:"nomad_job_id,omitempty"`  // the warm service job, or the dispatched child
	AllocationID string `json:"allocation_id,omitempty"` // the Nomad allocation, once known
}

// The paths of Worker.
const (
	WorkerWarm     = "warm"
	WorkerDispatch = "dispatch"
)

// Output is one file a job produced.
type Output struct {
	Name  string `json:"name"` // the file name as the runner found it under outputs/
	Key   string `json:"key"`  // blob store key
	Size  int64  `json:"size"`
	Probe *Probe `json:"probe,omitempty"`
	// Destination: what became of the copy sent to the output's destination
	// (output_destinations); nil for an output without one.
	Destination *Delivery `json:"destination,omitempty"`
}

// Probe is what ffprobe says of a file.
type Probe struct {
	DurationSeconds *float64 `json:"duration_seconds"`
	Format          string   `json:"format"`
	Streams         []Stream `json:"streams"`
}

// Stream is one stream of a probed file.
type Stream struct {
	Type       string `json:"type"`
	Codec      string `json:"codec"`
	Width      int    `json:"width,omitempty"`
	Height     int    `json:"height,omitempty"`
	SampleRate int    `json:"sample_rate,omitempty"`
	Channels   int    `json:"channels,omitempty"`
}

// Progress is how far a running job has got, as its runner last reported.
type Progress struct {
	// Percent of the current command, when its duration is known.
	Percent        *float64  `json:"percent"`
	CommandIndex   int       `json:"command_index"` // 1-based
	CommandCount   int       `json:"command_count"`
	FPS            float64   `json:"fps"`
	Speed          float64   `json:"speed"`
	OutTimeSeconds float64   `json:"out_time_seconds"`
	ETASeconds     *float64  `json:"eta_seconds"`
	UpdatedAt      time.Time `json:"updated_at"`
}

// WebhookStatus is where a job's webhook delivery stands.
type WebhookStatus string

const (
	WebhookPending   WebhookStatus = "pending"   // armed: the outbox delivers it
	WebhookDelivered WebhookStatus = "delivered" // the receiver answered 2xx
	WebhookFailed    WebhookStatus = "failed"    // every attempt failed
)

// WebhookState is the delivery state of a job's webhook, visible on the job.
type WebhookState struct {
	Status WebhookStatus `json:"status"`
	// DeliveryID is sent with every attempt of this delivery, so receivers can
	// deduplicate.
	DeliveryID     string     `json:"delivery_id"`
	Attempts       int        `json:"attempts"`
	LastHTTPStatus int        `json:"last_http_status"`
	LastError      string     `json:"last_error"`
	DeliveredAt    *time.Time `json:"delivered_at"`
}

// Analysis is one JSON object ffmpeg printed for a filter of a command: loudnorm
// with print_format=json prints its measurements so, after a line tagged
// "[Parsed_loudnorm_0 @ 0x…]". The runner parses it from the command's log.
type Analysis struct {
	Command int `json:"command"` // 1-based
	// Filter is the filter's name ("loudnorm"), Instance ffmpeg's name of the
	// filter in its graph ("Parsed_loudnorm_0"), both at most MaxAnalysisNameBytes.
	Filter   string          `json:"filter"`
	Instance string          `json:"instance"`
	Data     json.RawMessage `json:"data"` // a JSON object, as ffmpeg printed it (compacted)
}

// LogFile is one command's full ffmpeg log, uploaded with the result.
type LogFile struct {
	Command int   `json:"command"` // 1-based
	Size    int64 `json:"size"`
}

// LogKey is where command n's log of an attempt is, under the attempt's (or its
// allocation's) prefix.
func LogKey(prefix string, n int) string { return prefix + "logs/" + strconv.Itoa(n) + ".log" }

// LogIndex parses a log's path in an attempt's files, "logs/<n>.log" (n ≥ 1).
func LogIndex(path string) (int, bool) {
	rest, ok := strings.CutPrefix(path, "logs/")
	num, ok2 := strings.CutSuffix(rest, ".log")
	n, err := strconv.Atoi(num)
	if !ok || !ok2 || err != nil || n < 1 || strconv.Itoa(n) != num {
		return 0, false
	}
	return n, true
}

// Result is what a runner reports at the end of an attempt.
type Result struct {
	JobID   string `json:"job_id"`
	Attempt int    `json:"attempt"`
	// AllocID is the Nomad allocation that ran the attempt: its files are under
	// jobs/<id>/<attempt>/<alloc>/ (empty: under the attempt's prefix).
	AllocID      string    `json:"alloc_id,omitempty"`
	Succeeded    bool      `json:"succeeded"`
	ErrorMessage string    `json:"error_message,omitempty"`
	Outputs      []Output  `json:"outputs,omitempty"`
	Logs         []LogFile `json:"logs,omitempty"`
	// Analysis: the JSON blocks of analysis filters in the commands' logs.
	Analysis   []Analysis `json:"analysis,omitempty"`
	Progress   *Progress  `json:"progress,omitempty"`
	InputBytes int64      `json:"input_bytes"`
	// Usage is what the attempt's ffmpeg and ffprobe processes consumed.
	Usage *Usage `json:"usage,omitempty"`
}

// Manifest is what the dispatcher hands a runner in the Nomad dispatch payload.
type Manifest struct {
	JobID          string            `json:"job_id"`
	Attempt        int               `json:"attempt"`
	InputFiles     map[string]string `json:"input_files"`
	OutputNames    []string          `json:"output_names"`
	FFmpegCommands []string          `json:"ffmpeg_commands"`
	TimeoutSeconds int               `json:"timeout_seconds"`
	// ReportSeconds bounds what the runner does after the job's deadline (logs,
	// the result): half of the dispatcher's timeout_grace, so the result is up
	// before the timeout backstop looks for it. 0 (an older dispatcher): 30.
	ReportSeconds int `json:"report_seconds,omitempty"`
	// UploadURL is a signed URL template for this attempt's files: the runner replaces
	// "{path}" with "outputs/<name>" or "result.json" and PUTs the bytes.
	UploadURL string `json:"upload_url"`
	// ProgressURL is where the runner POSTs Progress (signed, this attempt only).
	ProgressURL string `json:"progress_url,omitempty"`
	// UploadsURL, when set, is where the runner asks for one upload link per file
	// it found (signed, this attempt only): the store's own presigned PUTs, so no
	// byte passes through a gateway. UploadURL is for runners that predate it.
	UploadsURL string `json:"uploads_url,omitempty"`
	// MaxOutputFiles caps the files one job may produce (sequences).
	MaxOutputFiles int `json:"max_output_files,omitempty"`
	// AllowLoopback lets inputs come from loopback addresses (development only).
	AllowLoopback bool `json:"allow_loopback,omitempty"`
	// AllowCIDRs and AllowHosts open internal ranges and host names to inputs
	// (server.allow_cidrs and server.allow_hosts).
	AllowCIDRs []string `json:"allow_cidrs,omitempty"`
	AllowHosts []string `json:"allow_hosts,omitempty"`
	// DestAllowLoopback, DestAllowCIDRs and DestAllowHosts are output
	// destinations' own allow lists (server.destination_allow_*): without them
	// a destination reaches public addresses only.
	DestAllowLoopback bool     `json:"dest_allow_loopback,omitempty"`
	DestAllowCIDRs    []string `json:"dest_allow_cidrs,omitempty"`
	DestAllowHosts    []string `json:"dest_allow_hosts,omitempty"`
	// ControlPlane is the service's own endpoints (host:port or URL), refused
	// to inputs and destinations whatever the allow lists say; the runner adds
	// the well-known control-plane ports on its own node's addresses.
	ControlPlane []string `json:"control_plane,omitempty"`
	// AllowGPU: the pool has GPUs, so GPU codecs and filters are allowed.
	AllowGPU bool `json:"allow_gpu,omitempty"`
	// DiskBytes caps the job's directory (the pool's disk): inputs, intermediate
	// files and outputs together. 0: no cap.
	DiskBytes int64 `json:"disk_bytes,omitempty"`
	// MaxInputBytes caps the bytes of all inputs fetched (the account's
	// max_input_bytes). 0: no cap.
	MaxInputBytes int64 `json:"max_input_bytes,omitempty"`
	// ManifestURL, when set, is all the payload holds: the manifest was over Nomad's
	// payload limit and waits behind this signed URL.
	ManifestURL string `json:"manifest_url,omitempty"`
	// Chunk: the chunked phase the runner runs instead of FFmpegCommands.
	Chunk *ChunkTask `json:"chunk,omitempty"`
}

// Account owns jobs and API keys.
type Account struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	CreatedAt time.Time `json:"created_at"`
	// WebhookSecret, when set, signs the account's webhooks (HMAC-SHA256).
	WebhookSecret string `json:"webhook_secret,omitempty"`
}

// APIKey is a stored API key. The secret itself is never stored, only its hash.
type APIKey struct {
	ID        string     `json:"id"`
	AccountID string     `json:"account_id"`
	Name      string     `json:"name"`
	Prefix    string     `json:"prefix"`
	Hash      string     `json:"hash"`
	CreatedAt time.Time  `json:"created_at"`
	LastUsed  *time.Time `json:"last_used,omitempty"`
}
