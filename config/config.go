// Package config loads the service's HCL configuration: defaults first, the file
// decoded on top with gohcl, then every value checked. Every problem is reported as an
// hcl.Diagnostic that points at file:line.
package config

import (
	"fmt"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/netguard"
	"github.com/zclconf/go-cty/cty"
	"github.com/zclconf/go-cty/cty/function"
)

// Config is the whole service configuration. See deploy/mediajobs.hcl.
type Config struct {
	Server     *Server     `hcl:"server,block"`
	Etcd       *Etcd       `hcl:"etcd,block"`
	Nomad      *Nomad      `hcl:"nomad,block"`
	Storage    *Storage    `hcl:"storage,block"`
	Dispatcher *Dispatcher `hcl:"dispatcher,block"`
	Webhooks   *Webhooks   `hcl:"webhooks,block"`
	Log        *Log        `hcl:"log,block"`
	Limits     *Limits     `hcl:"limits,block"`
	Usage      *Usage      `hcl:"usage,block"`     // usage.go
	Pipelines  *Pipelines  `hcl:"pipelines,block"` // pipelines.go
	Chunked    *Chunked    `hcl:"chunked,block"`   // chunked.go
	Pools      []*Pool     `hcl:"pool,block"`

	file *hcl.File // the parsed file, for the source lines of later diagnostics
}

// Limits are the defaults of per-account limits (docs/scheduling.md).
type Limits struct {
	// MaxRunningPerAccount is how many jobs of one account may hold a pool's slots
	// (dispatched to Nomad, waiting for or running on a node) at once; the others
	// wait in the queue. 0: no limit (the default). An account's own setting in
	// etcd replaces it.
	MaxRunningPerAccount int `hcl:"max_running_per_account,optional"`
	// Limits of amounts held per account (docs/limits.md): a create that would
	// cross one is refused with 429 quotaExceeded. 0: no limit. Nil when not
	// set: the defaults (1000 jobs queued, 256 MiB of job records, timeout up to
	// the pool's max_timeout, 10 GiB of storage, 16 event streams, inputs bounded
	// by the pool's disk only).
	MaxQueuedJobs     *int64 `hcl:"max_queued_jobs,optional"`
	MaxJobBytes       *int64 `hcl:"max_job_bytes,optional"`
	MaxTimeoutSeconds *int64 `hcl:"max_timeout_seconds,optional"`
	MaxStorageBytes   *int64 `hcl:"max_storage_bytes,optional"`
	MaxEventStreams   *int64 `hcl:"max_event_streams,optional"`
	MaxInputBytes     *int64 `hcl:"max_input_bytes,optional"`

	MaxRunningRange hcl.Range `hcl:"max_running_per_account,attr_range"`
	DefRange        hcl.Range `hcl:",def_range"`
}

// Default limits of amounts held per account (docs/limits.md).
const (
	DefaultMaxQueuedJobs = 1000
	DefaultMaxJobBytes   = 256 << 20
	DefaultMaxStorage    = 10 << 30
	DefaultMaxStreams    = 16
)

// Log is the server commands' log (stderr): "text" (key=value lines, the default)
// or "json" (one JSON object a line), from level up: debug, info (default), warn,
// error.
type Log struct {
	Format string `hcl:"format,optional"`
	Level  string `hcl:"level,optional"`

	FormatRange hcl.Range `hcl:"format,attr_range"`
	LevelRange  hcl.Range `hcl:"level,attr_range"`
	LevelV      slog.Level
}

// Webhooks tunes webhook delivery: 1 attempt + 5 retries, waiting about
// backoff_base, 2×, 4×, 8×, 16× (each between half and all of that, capped at
// backoff_cap) between them.
type Webhooks struct {
	BackoffBase    string `hcl:"backoff_base,optional"`
	BackoffCap     string `hcl:"backoff_cap,optional"`
	AttemptTimeout string `hcl:"attempt_timeout,optional"`
	// Concurrency is how many attempts run at once (a slot is held only during an
	// attempt); AccountConcurrency how many of them one account may hold (default an
	// eighth of Concurrency), so one account's dead receiver cannot hold them all.
	Concurrency        int `hcl:"concurrency,optional"`
	AccountConcurrency int `hcl:"account_concurrency,optional"`

	ConcRange    hcl.Range `hcl:"concurrency,attr_range"`
	AcctRange    hcl.Range `hcl:"account_concurrency,attr_range"`
	BaseRange    hcl.Range `hcl:"backoff_base,attr_range"`
	CapRange     hcl.Range `hcl:"backoff_cap,attr_range"`
	TimeoutRange hcl.Range `hcl:"attempt_timeout,attr_range"`
	BaseD        time.Duration
	CapD         time.Duration
	TimeoutD     time.Duration
}

// Dispatcher tunes the dispatcher's clocks.
type Dispatcher struct {
	// ReconcileEvery: how often unfinished jobs are re-read from Nomad even while the
	// event stream is healthy.
	ReconcileEvery string `hcl:"reconcile_every,optional"`
	// LeaderTTL: the etcd session TTL; a standby takes over about this long after the
	// leader dies.
	LeaderTTL string `hcl:"leader_ttl,optional"`
	// TimeoutGrace: how long past timeout_seconds a worker may live before the
	// dispatcher stops it.
	TimeoutGrace string `hcl:"timeout_grace,optional"`
	// DisconnectGrace: how long a job waits for the Nomad node running it to come
	// back (its allocation "unknown") before it is retried elsewhere.
	DisconnectGrace string `hcl:"disconnect_grace,optional"`
	// Listen is where the dispatcher serves /metrics, /healthz and /readyz
	// (host:port); "" (the default) serves nothing.
	Listen string `hcl:"listen,optional"`

	ReconcileRange  hcl.Range `hcl:"reconcile_every,attr_range"`
	DisconnectRange hcl.Range `hcl:"disconnect_grace,attr_range"`
	ListenRange     hcl.Range `hcl:"listen,attr_range"`
	LeaderRange     hcl.Range `hcl:"leader_ttl,attr_range"`
	GraceRange      hcl.Range `hcl:"timeout_grace,attr_range"`
	ReconcileD      time.Duration
	LeaderTTLD      time.Duration
	TimeoutGraceD   time.Duration
	DisconnectD     time.Duration
}

// Server configures the HTTP gateway and signed links.
type Server struct {
	Listen string `hcl:"listen,optional"`
	// MetricsListen, when set, serves /metrics on this host:port only, not on
	// Listen (the public port).
	MetricsListen string `hcl:"metrics_listen,optional"`
	// PublicURL is the base of every signed link: what clients and runners dial.
	PublicURL     string `hcl:"public_url,optional"`
	SigningSecret string `hcl:"signing_secret,optional"`
	WaitLimit     string `hcl:"wait_limit,optional"`
	MaxCommands   int    `hcl:"max_commands,optional"`
	// MaxCommandBytes caps the text of all of one job's commands together, in bytes
	// as stored (mj.StoredLen).
	MaxCommandBytes int `hcl:"max_command_bytes,optional"`
	// MaxInputs and MaxOutputs cap a job's input_files and output_files entries.
	MaxInputs  int `hcl:"max_inputs,optional"`
	MaxOutputs int `hcl:"max_outputs,optional"`
	// MaxOutputFiles caps the files one job may produce (sequence outputs).
	MaxOutputFiles int    `hcl:"max_output_files,optional"`
	MaxBodyBytes   int    `hcl:"max_body_bytes,optional"`
	MaxUploadBytes int64  `hcl:"max_upload_bytes,optional"`
	TmpFileTTL     string `hcl:"tmp_file_ttl,optional"`
	// SessionTTL is how long a dashboard sign-in lasts.
	SessionTTL string `hcl:"session_ttl,optional"`
	// UploadTimeout bounds one request's reading, the body of a large upload
	// included: it must cover max_upload_bytes at the slowest client's speed.
	UploadTimeout string `hcl:"upload_timeout,optional"`
	AllowLoopback bool   `hcl:"allow_loopback,optional"`
	// AllowCIDRs and AllowHosts let job inputs and webhooks reach internal
	// addresses: the ranges listed ("10.1.0.0/16"), and the private addresses of the
	// host names listed ("minio.internal", "*.svc.internal"). Loopback stays behind
	// allow_loopback; link-local and cloud metadata addresses open only to a range
	// that names them. Set in code, or decoded from allow_cidrs / allow_hosts.
	AllowCIDRs []string
	AllowHosts []string
	// The attributes as written, so each entry's problem points at its own line.
	AllowCIDRsExpr hcl.Expression `hcl:"allow_cidrs,optional"`
	AllowHostsExpr hcl.Expression `hcl:"allow_hosts,optional"`
	// DestinationAllowLoopback, DestinationAllowCIDRs and DestinationAllowHosts
	// are output_destinations' own allow lists: a destination receives a PUT of
	// a body the user controls, so it reaches public addresses only unless these
	// say otherwise (the lists above never open it).
	DestinationAllowLoopback bool `hcl:"destination_allow_loopback,optional"`
	DestinationAllowCIDRs    []string
	DestinationAllowHosts    []string
	DestCIDRsExpr            hcl.Expression `hcl:"destination_allow_cidrs,optional"`
	DestHostsExpr            hcl.Expression `hcl:"destination_allow_hosts,optional"`
	// ControlPlane names more of the service's own endpoints ("host:port":
	// Consul, Vault, a proxy's admin port) to refuse to every URL a user names,
	// beside those the config already knows (Nomad, etcd, the listeners).
	ControlPlane []string  `hcl:"control_plane,optional"`
	ControlRange hcl.Range `hcl:"control_plane,attr_range"`

	// AllowInsecureWarm lets warm pools run although public_url, or Nomad's
	// address (where the gateway fetches the keys that sign the runners'
	// identities), is plain http:// to another machine: the identity tokens and
	// the keys then cross the network in clear (docs/configuration.md).
	AllowInsecureWarm bool      `hcl:"allow_insecure_warm,optional"`
	InsecureWarmRange hcl.Range `hcl:"allow_insecure_warm,attr_range"`

	// RateLimit is each account's sustained requests per second on /api, per gateway
	// process; RateBurst the short burst above it. 0 disables the limit.
	RateLimit      float64 `hcl:"rate_limit,optional"`
	RateBurst      int     `hcl:"rate_burst,optional"`
	RequestTimeout string  `hcl:"request_timeout,optional"`
	// AuthFailureRate is the failed authentications (bad API keys, unknown session
	// cookies, failed sign-ins) each client address may make per second, per
	// gateway process; AuthFailureBurst the failures allowed at once. Past them the
	// address is answered 429 before anything is read from etcd. 0 disables it.
	// Unset in a Config built in code: 1 and 20.
	AuthFailureRate  float64 `hcl:"auth_failure_rate,optional"`
	AuthFailureBurst int     `hcl:"auth_failure_burst,optional"`
	// AuthFailureGlobalRate and AuthFailureGlobalBurst are the same for all
	// client addresses together, per gateway process: they bound the etcd reads
	// junk credentials cost however many addresses send them. 0 disables it.
	// Unset: 100 and 1000.
	AuthFailureGlobalRate  float64 `hcl:"auth_failure_global_rate,optional"`
	AuthFailureGlobalBurst int     `hcl:"auth_failure_global_burst,optional"`
	// TrustedProxies lists the addresses or ranges of reverse proxies whose
	// X-Forwarded-For names the client (docs/configuration.md); without it the
	// client address is the connection's.
	TrustedProxies []string `hcl:"trusted_proxies,optional"`
	// HeaderTimeout bounds the reading of a request's line and headers (and of a
	// body fasthttp reads before the handler); upload_timeout bounds the body.
	HeaderTimeout string `hcl:"header_timeout,optional"`
	// ShutdownTimeout bounds a graceful shutdown: requests in flight (a ?wait=true
	// among them) get this long to finish before the rest are cut off. Unset: the
	// larger of 30s and wait_limit + 5s; set: at least wait_limit.
	ShutdownTimeout string `hcl:"shutdown_timeout,optional"`

	DefRange       hcl.Range `hcl:",def_range"`
	ListenRange    hcl.Range `hcl:"listen,attr_range"`
	MetricsRange   hcl.Range `hcl:"metrics_listen,attr_range"`
	RateLimitRange hcl.Range `hcl:"rate_limit,attr_range"`
	RateBurstRange hcl.Range `hcl:"rate_burst,attr_range"`
	AuthRateRange  hcl.Range `hcl:"auth_failure_rate,attr_range"`
	AuthBurstRange hcl.Range `hcl:"auth_failure_burst,attr_range"`
	GlobRateRange  hcl.Range `hcl:"auth_failure_global_rate,attr_range"`
	GlobBurstRange hcl.Range `hcl:"auth_failure_global_burst,attr_range"`
	ProxiesRange   hcl.Range `hcl:"trusted_proxies,attr_range"`
	HeaderTORange  hcl.Range `hcl:"header_timeout,attr_range"`
	BodyBytesRange hcl.Range `hcl:"max_body_bytes,attr_range"`
	UploadRange    hcl.Range `hcl:"max_upload_bytes,attr_range"`
	PublicURLRange hcl.Range `hcl:"public_url,attr_range"`
	WaitLimitRange hcl.Range `hcl:"wait_limit,attr_range"`
	ReqTimeRange   hcl.Range `hcl:"request_timeout,attr_range"`
	ShutdownRange  hcl.Range `hcl:"shutdown_timeout,attr_range"`
	TmpTTLRange    hcl.Range `hcl:"tmp_file_ttl,attr_range"`
	SessionRange   hcl.Range `hcl:"session_ttl,attr_range"`
	UploadTORange  hcl.Range `hcl:"upload_timeout,attr_range"`
	SecretRange    hcl.Range `hcl:"signing_secret,attr_range"`
	CommandsRange  hcl.Range `hcl:"max_commands,attr_range"`
	CmdBytesRange  hcl.Range `hcl:"max_command_bytes,attr_range"`
	InputsRange    hcl.Range `hcl:"max_inputs,attr_range"`
	OutputsRange   hcl.Range `hcl:"max_outputs,attr_range"`
	OutFilesRange  hcl.Range `hcl:"max_output_files,attr_range"`

	WaitLimitD      time.Duration
	RequestTimeoutD time.Duration
	TmpFileTTLD     time.Duration
	SessionTTLD     time.Duration
	UploadTimeoutD  time.Duration
	ShutdownD       time.Duration
	HeaderTimeoutD  time.Duration
}

// Etcd says where jobs live: an etcd cluster, or an embedded server (one machine).
type Etcd struct {
	Endpoints []string `hcl:"endpoints,optional"`
	Embedded  bool     `hcl:"embedded,optional"`
	DataDir   string   `hcl:"data_dir,optional"`
	Prefix    string   `hcl:"prefix,optional"`
	// Addresses of the embedded server (embedded = true only).
	ListenClient string `hcl:"listen_client,optional"`
	ListenPeer   string `hcl:"listen_peer,optional"`
	DialTimeout  string `hcl:"dial_timeout,optional"`
	Username     string `hcl:"username,optional"`
	Password     string `hcl:"password,optional"`

	// CompactionRetention is how much history embedded etcd keeps: it compacts
	// periodically (etcd's --auto-compaction-mode=periodic) to the revision of this
	// long ago. An external cluster needs the same flags of its own.
	CompactionRetention string `hcl:"compaction_retention,optional"`
	// QuotaBackendBytes is embedded etcd's backend quota: past it etcd raises the
	// NOSPACE alarm and refuses every write. For an external cluster set it to the
	// cluster's --quota-backend-bytes: the dispatcher disarms NOSPACE only once a
	// member's database is back below it.
	QuotaBackendBytes int64 `hcl:"quota_backend_bytes,optional"`
	// DefragEvery is how often the leading dispatcher reads every member's database
	// size and defragments those that are mostly free space, one at a time.
	DefragEvery string `hcl:"defrag_every,optional"`
	// DefragFreeRatio: a member is defragmented when (size - in use) / size is at
	// least this; DefragMinBytes: never one whose database is smaller than this.
	DefragFreeRatio float64 `hcl:"defrag_free_ratio,optional"`
	DefragMinBytes  int64   `hcl:"defrag_min_bytes,optional"`

	EndpointsRange   hcl.Range `hcl:"endpoints,attr_range"`
	ClientRange      hcl.Range `hcl:"listen_client,attr_range"`
	PeerRange        hcl.Range `hcl:"listen_peer,attr_range"`
	DialTimeoutRange hcl.Range `hcl:"dial_timeout,attr_range"`
	CompactionRange  hcl.Range `hcl:"compaction_retention,attr_range"`
	QuotaRange       hcl.Range `hcl:"quota_backend_bytes,attr_range"`
	DefragEveryRange hcl.Range `hcl:"defrag_every,attr_range"`
	DefragRatioRange hcl.Range `hcl:"defrag_free_ratio,attr_range"`
	DefragMinRange   hcl.Range `hcl:"defrag_min_bytes,attr_range"`

	DialTimeoutD         time.Duration
	CompactionRetentionD time.Duration
	DefragEveryD         time.Duration
}

// Bounds of etcd.quota_backend_bytes.
const (
	// MinQuotaBackendBytes: below this a burst of jobs plus the history kept until the
	// next compaction trips NOSPACE in ordinary use.
	MinQuotaBackendBytes = 64 << 20
	// MaxQuotaBackendBytes: etcd recommends at most 8 GiB and warns above it; past
	// this, snapshots, member recovery and defragmentation take too long.
	MaxQuotaBackendBytes = 100 << 30
)

// Nomad is the cluster the dispatcher submits to. Unset fields fall back to the
// Nomad client's own environment (NOMAD_ADDR, NOMAD_TOKEN, ...).
type Nomad struct {
	Address   string `hcl:"address,optional"`
	Token     string `hcl:"token,optional"`
	Region    string `hcl:"region,optional"`
	Namespace string `hcl:"namespace,optional"`
	// PurgeAfter: finished child jobs are purged from Nomad this long after they end,
	// once their result is stored, so the Nomad UI stays usable.
	PurgeAfter string `hcl:"purge_after,optional"`

	PurgeRange  hcl.Range `hcl:"purge_after,attr_range"`
	AddrRange   hcl.Range `hcl:"address,attr_range"`
	PurgeAfterD time.Duration
}

// Storage is the blob store for temporary files and outputs.
type Storage struct {
	// URL chooses the store (gocloud.dev/blob): "file:///abs/dir" or
	// "s3://bucket?region=...&endpoint=...&use_path_style=true". Unset: the
	// directory at Path.
	URL            string `hcl:"url,optional"`
	Type           string `hcl:"type,optional"`
	Path           string `hcl:"path,optional"`
	DownloadURLTTL string `hcl:"download_url_ttl,optional"`
	// OutputRetention is how long job outputs are kept; SweepEvery how often the
	// janitor deletes expired temporary files and outputs.
	OutputRetention string `hcl:"output_retention,optional"`
	SweepEvery      string `hcl:"sweep_every,optional"`
	// JobRetention is how long finished jobs are kept in etcd (then the janitor
	// deletes them with every key derived from them); at least output_retention, so
	// a job outlives its files.
	JobRetention string `hcl:"job_retention,optional"`

	DefRange       hcl.Range `hcl:",def_range"`
	PathRange      hcl.Range `hcl:"path,attr_range"`
	TypeRange      hcl.Range `hcl:"type,attr_range"`
	URLRange       hcl.Range `hcl:"url,attr_range"`
	TTLRange       hcl.Range `hcl:"download_url_ttl,attr_range"`
	RetentionRange hcl.Range `hcl:"output_retention,attr_range"`
	SweepRange     hcl.Range `hcl:"sweep_every,attr_range"`
	JobRetRange    hcl.Range `hcl:"job_retention,attr_range"`
	TTL            time.Duration
	Retention      time.Duration
	Sweep          time.Duration
	JobRetentionD  time.Duration
}

// Pool is one kind of hardware jobs can ask for with "machine".
type Pool struct {
	Name          string   `hcl:"name,label"`
	Driver        string   `hcl:"driver,optional"`
	RunnerCommand string   `hcl:"runner_command,optional"`
	Datacenters   []string `hcl:"datacenters,optional"`
	NodePool      string   `hcl:"node_pool,optional"`
	// Image is the worker image of docker pools (ffmpeg and the mediajobs runner).
	Image  string `hcl:"image,optional"`
	CPU    int    `hcl:"cpu,optional"`
	Memory int    `hcl:"memory,optional"`
	// Disk is the ephemeral disk of one job in MB: inputs, intermediates, outputs.
	Disk        int           `hcl:"disk,optional"`
	Constraints []*Constraint `hcl:"constraint,block"`
	// GPU requests NVIDIA GPUs (device "nvidia/gpu"); absent for a CPU pool.
	GPU            *GPU   `hcl:"gpu,block"`
	DefaultTimeout string `hcl:"default_timeout,optional"`
	MaxTimeout     string `hcl:"max_timeout,optional"`
	// MaxInFlight caps this pool's Nomad children at once; the rest wait in the
	// etcd queue, first in first out, rather than as blocked evaluations in Nomad.
	// Default DefaultMaxInFlight; -1: no cap.
	MaxInFlight int `hcl:"max_in_flight,optional"`
	// DispatchLookahead is how many of this pool's children may wait in Nomad for
	// a node (dispatched, not placed) before the dispatcher stops handing it more,
	// until Nomad has said the pool is full (then one waits): the backlog waits in
	// the etcd queue, where fair share decides its order (docs/scheduling.md). The
	// window grows to an eighth of the pool's running children on a large pool.
	// Default DefaultDispatchLookahead.
	DispatchLookahead int `hcl:"dispatch_lookahead,optional"`
	// QueueLimit is how long a dispatched job may wait for Nomad to place it before
	// it fails with the placement reason.
	QueueLimit string `hcl:"queue_limit,optional"`
	// StartTimeout is how long an allocation Nomad placed may take to start (image
	// pull included) before the attempt counts as lost and is retried.
	StartTimeout string `hcl:"start_timeout,optional"`
	// MaxAttempts bounds the attempts of a job whose worker was lost or crashed
	// (never a job whose command failed).
	MaxAttempts int `hcl:"max_attempts,optional"`
	// Sandbox is where a raw_exec pool's ffmpeg runs: "bwrap" (the default:
	// bubblewrap, no network, only the job's files) or "none" (unsandboxed, for
	// trusted commands only). Docker pools are contained by the container.
	Sandbox string `hcl:"sandbox,optional"`
	// Warm, when set, keeps long-lived runners for the pool's short jobs (a Nomad
	// service job beside the parameterized one); nil: every job is dispatched.
	Warm *Warm `hcl:"warm,block"`

	DefRange       hcl.Range `hcl:",def_range"`
	DriverRange    hcl.Range `hcl:"driver,attr_range"`
	ImageRange     hcl.Range `hcl:"image,attr_range"`
	DiskRange      hcl.Range `hcl:"disk,attr_range"`
	DefaultTORange hcl.Range `hcl:"default_timeout,attr_range"`
	MaxTORange     hcl.Range `hcl:"max_timeout,attr_range"`
	CPURange       hcl.Range `hcl:"cpu,attr_range"`
	MemoryRange    hcl.Range `hcl:"memory,attr_range"`
	QueueLimRange  hcl.Range `hcl:"queue_limit,attr_range"`
	StartTORange   hcl.Range `hcl:"start_timeout,attr_range"`
	SandboxRange   hcl.Range `hcl:"sandbox,attr_range"`
	InFlightRange  hcl.Range `hcl:"max_in_flight,attr_range"`
	LookaheadRange hcl.Range `hcl:"dispatch_lookahead,attr_range"`
	AttemptsRange  hcl.Range `hcl:"max_attempts,attr_range"`

	DefaultTimeoutD time.Duration
	MaxTimeoutD     time.Duration
	QueueLimitD     time.Duration
	StartTimeoutD   time.Duration
}

// Constraint is a Nomad placement constraint on the pool's nodes.
type Constraint struct {
	Attribute string `hcl:"attribute"`
	Operator  string `hcl:"operator,optional"`
	Value     string `hcl:"value,optional"`

	DefRange   hcl.Range `hcl:",def_range"`
	ValueRange hcl.Range `hcl:"value,attr_range"`
}

// GPU is a pool's GPU request.
type GPU struct {
	Count int `hcl:"count,optional"`
	// Vendor is the device vendor; only "nvidia" is supported (device "nvidia/gpu").
	Vendor string `hcl:"vendor,optional"`
	// MinMemoryMB, when set, places jobs only on GPUs with at least that much memory.
	MinMemoryMB int `hcl:"min_memory_mb,optional"`
	// Model, when set, is a regular expression the GPU model must match.
	Model string `hcl:"model,optional"`
	// Encode says whether the GPUs have a video encoder (NVENC). Unset: not when
	// Model can match a GPU without one (A100, H100, ...: see gpu.go), else yes.
	Encode *bool `hcl:"encode,optional"`

	DefRange    hcl.Range `hcl:",def_range"`
	VendorRange hcl.Range `hcl:"vendor,attr_range"`
	CountRange  hcl.Range `hcl:"count,attr_range"`
	MinMemRange hcl.Range `hcl:"min_memory_mb,attr_range"`
	ModelRange  hcl.Range `hcl:"model,attr_range"`

	// NVENC is what Encode decides, defaults applied; NoNVENCWhy says why not.
	NVENC      bool
	NoNVENCWhy string
}

// Warm keeps long-lived runners that take short jobs without a Nomad dispatch each (docs/configuration.md).
type Warm struct {
	Count         int    `hcl:"count,optional"`           // runners registered at first; default 2. Nomad's scaling (nomad job scale) changes it after; re-registering keeps the scaled count.
	Min           int    `hcl:"min,optional"`             // scaling block min, default 0
	Max           int    `hcl:"max,optional"`             // scaling block max, default max(Count, 10)
	MaxJobSeconds int    `hcl:"max_job_seconds,optional"` // a job whose timeout_seconds (or the pool's default_timeout) is <= this may wait for a runner (spill_after); default 120
	CPU           int    `hcl:"cpu,optional"`             // MHz per runner; default the pool's cpu
	Memory        int    `hcl:"memory,optional"`          // MiB per runner; default the pool's memory
	Disk          int    `hcl:"disk,optional"`            // MB ephemeral disk per runner; default the pool's disk
	LeaseTTL      string `hcl:"lease_ttl,optional"`       // how long a runner that stops renewing keeps its job before it is retried; default "10s", min 3s, max 5m
	// SpillAfter is how long a job that fits waits for a warm runner, while the
	// pool has runners, before it is dispatched as its own Nomad child instead;
	// default "30s". "0s": never wait (only an idle runner takes a job).
	SpillAfter string `hcl:"spill_after,optional"`
	// Reserve is how many of the pool's runners are kept for the jobs that fit
	// max_job_seconds: the others (no timeout_seconds on a pool whose default
	// is longer, or a longer one) take a waiting runner only while fewer than
	// the pool's runners less Reserve run such jobs. Default 1.
	Reserve *int `hcl:"reserve,optional"`

	DefRange      hcl.Range `hcl:",def_range"`
	CountRange    hcl.Range `hcl:"count,attr_range"`
	MinRange      hcl.Range `hcl:"min,attr_range"`
	MaxRange      hcl.Range `hcl:"max,attr_range"`
	MaxJobRange   hcl.Range `hcl:"max_job_seconds,attr_range"`
	CPURange      hcl.Range `hcl:"cpu,attr_range"`
	MemoryRange   hcl.Range `hcl:"memory,attr_range"`
	DiskRange     hcl.Range `hcl:"disk,attr_range"`
	LeaseTTLRange hcl.Range `hcl:"lease_ttl,attr_range"`
	SpillRange    hcl.Range `hcl:"spill_after,attr_range"`
	ReserveRange  hcl.Range `hcl:"reserve,attr_range"`

	LeaseTTLD   time.Duration
	SpillAfterD time.Duration
}

// Defaults and bounds of a pool's warm block.
const (
	DefaultWarmCount         = 2
	DefaultWarmMax           = 10
	DefaultWarmMaxJobSeconds = 120
	DefaultWarmLeaseTTL      = "10s"
	DefaultWarmSpillAfter    = "30s"
	DefaultWarmReserve       = 1
	// WarmRenewHold is how long the gateway holds a warm runner's renewal (for a
	// cancel to reach it) before it answers and the runner renews again: the
	// renewal period. A lease_ttl of three of them lets a renewal or two fail
	// (a slow etcd, a gateway restarting) before a healthy job's lease lapses.
	WarmRenewHold   = 2 * time.Second
	MinWarmLeaseTTL = 3 * WarmRenewHold
	MaxWarmLeaseTTL = 5 * time.Minute
)

// GPUs is how many GPUs one job of the pool gets (0 for a CPU pool).
func (p *Pool) GPUs() int {
	if p.GPU == nil {
		return 0
	}
	return p.GPU.Count
}

// Pool returns the pool named name, or nil.
func (c *Config) Pool(name string) *Pool {
	for _, p := range c.Pools {
		if p.Name == name {
			return p
		}
	}
	return nil
}

// Default returns the configuration used when no file is given: one machine,
// embedded etcd, local blobs, a raw_exec cpu pool.
func Default() *Config {
	return &Config{
		Server:     &Server{Listen: "127.0.0.1:8080", WaitLimit: "25s", MaxCommands: mj.DefaultMaxCommands, MaxCommandBytes: mj.DefaultMaxCommandBytes, MaxInputs: mj.DefaultMaxInputs, MaxOutputs: mj.DefaultMaxOutputs, MaxOutputFiles: mj.DefaultMaxOutputFiles, MaxBodyBytes: 1 << 20, MaxUploadBytes: 8 << 30, TmpFileTTL: "1h", SessionTTL: "12h", UploadTimeout: "1h", RequestTimeout: "30s", RateLimit: 20, RateBurst: 40, AuthFailureRate: 1, AuthFailureBurst: 20, HeaderTimeout: "10s"},
		Etcd:       &Etcd{Embedded: true, DataDir: ".data/etcd", ListenClient: "127.0.0.1:2479", ListenPeer: "127.0.0.1:2480", Prefix: "/mediajobs/", DialTimeout: "5s", CompactionRetention: "10m", QuotaBackendBytes: 8 << 30, DefragEvery: "10m", DefragFreeRatio: 0.5, DefragMinBytes: 64 << 20},
		Nomad:      &Nomad{PurgeAfter: "1h"},
		Webhooks:   &Webhooks{BackoffBase: "1s", BackoffCap: "30s", AttemptTimeout: "10s", Concurrency: 128},
		Dispatcher: &Dispatcher{ReconcileEvery: "15s", LeaderTTL: "10s", TimeoutGrace: "60s", DisconnectGrace: "5m"},
		Log:        &Log{Format: "text", Level: "info"},
		Limits:     &Limits{},
		Usage:      &Usage{RetentionDays: DefaultUsageRetentionDays},
		Pipelines:  &Pipelines{},
		Chunked:    &Chunked{},
		Storage:    &Storage{Type: "local", Path: ".data/blobs", DownloadURLTTL: "24h", OutputRetention: "168h", SweepEvery: "10m", JobRetention: "720h"},
	}
}

// Load reads and checks the file at path.
func Load(path string) (*Config, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	return Parse(src, path)
}

// Parse decodes src (named filename in diagnostics) on top of Default and checks it.
// The returned error, when there is one, lists every problem with file:line.
func Parse(src []byte, filename string) (*Config, error) {
	file, diags := hclsyntax.ParseConfig(src, filename, hcl.InitialPos)
	if diags.HasErrors() {
		return nil, Diagnostics{diags, file}
	}
	c := Default()
	c.file = file
	diags = gohcl.DecodeBody(file.Body, evalContext(), c)
	if diags.HasErrors() {
		return nil, Diagnostics{nomadInterpolationHint(diags, src), file}
	}
	if diags := c.finish(); diags.HasErrors() {
		return nil, Diagnostics{nomadInterpolationHint(diags, src), file}
	}
	return c, nil
}

// nomadInterpolationHint adds to HCL's "Variables not allowed" what to write
// instead when the variable was meant for Nomad: ${attr.x} in a constraint is read
// by HCL here, and only $${attr.x} reaches Nomad as ${attr.x}.
func nomadInterpolationHint(diags hcl.Diagnostics, src []byte) hcl.Diagnostics {
	for _, d := range diags {
		if d.Subject == nil || (d.Summary != "Variables not allowed" && d.Summary != "Unknown variable") {
			continue
		}
		start, end := d.Subject.Start.Byte, d.Subject.End.Byte
		if start < 2 || end > len(src) || string(src[start-2:start]) != "${" {
			continue
		}
		ref := string(src[start:end]) // the root name only: attr of attr.kernel.name
		if i := strings.IndexAny(string(src[start:]), "}\n"); i > 0 && src[start+i] == '}' {
			ref = string(src[start : start+i])
		}
		d.Detail += fmt.Sprintf(" This file has no variables: to pass Nomad's ${%s} through to the jobspec, write $${%s} (HCL turns \"$${\" into a literal \"${\").", ref, ref)
	}
	return diags
}

// Finish applies defaults and checks a Config built in code (tests, dev).
func (c *Config) Finish() error {
	if diags := c.finish(); diags.HasErrors() {
		return Diagnostics{Diags: diags, File: c.file}
	}
	return nil
}

// What a configuration is checked for: the server commands that need more than
// every configuration does. `mediajobs config check -for` takes these.
const (
	ForGateway    = "gateway"
	ForDispatcher = "dispatcher"
	ForDev        = "dev" // makes its own signing secret when none is set
)

// CheckFor reports, with file:line, what the named server command would refuse to
// start with beyond what Parse and Finish check already. The servers call it (or
// RequireSigningSecret) as they start, and `mediajobs config check` before them.
func (c *Config) CheckFor(role string) error {
	switch role {
	case ForGateway, ForDispatcher:
		return c.RequireSigningSecret()
	case ForDev:
		return nil
	}
	return fmt.Errorf("unknown server %q: use %s, %s or %s", role, ForGateway, ForDispatcher, ForDev)
}

// RequireSigningSecret refuses a config without server.signing_secret: gateways
// and dispatchers sign and check each other's links with it.
func (c *Config) RequireSigningSecret() error {
	if c.Server.SigningSecret != "" {
		return nil
	}
	rng := c.Server.SecretRange
	detail := "gateway and dispatcher sign and verify links with it, so every one of them needs the same secret of at least 16 characters (`mediajobs dev` makes its own)."
	if rng.Filename != "" {
		detail = "signing_secret is empty (an env(...) whose variable is unset?); " + detail
	} else if rng = c.Server.DefRange; rng.Filename == "" && c.file != nil {
		rng = hcl.Range{Filename: c.file.Body.MissingItemRange().Filename, Start: hcl.InitialPos, End: hcl.InitialPos}
	}
	d := &hcl.Diagnostic{Severity: hcl.DiagError, Summary: "Missing signing_secret", Detail: "server.signing_secret is not set: " + detail}
	if rng.Filename != "" {
		d.Subject = &rng
	}
	return Diagnostics{Diags: hcl.Diagnostics{d}, File: c.file}
}

// Guard is the outbound policy for job inputs and webhooks: allow_loopback,
// allow_cidrs and allow_hosts (checked by Finish; an invalid entry set in code
// afterwards is dropped), and the control plane refused whatever they say.
func (c *Config) Guard() netguard.Policy {
	p := guard(c.Server.AllowLoopback, c.Server.AllowCIDRs, c.Server.AllowHosts)
	p.Control = netguard.NewControlPlane(c.ControlPlane())
	return p
}

// DestinationGuard is the outbound policy for output_destinations: public
// addresses, plus the destination_allow_* lists, never the control plane.
func (c *Config) DestinationGuard() netguard.Policy {
	p := guard(c.Server.DestinationAllowLoopback, c.Server.DestinationAllowCIDRs, c.Server.DestinationAllowHosts)
	p.Control = netguard.NewControlPlane(c.ControlPlane())
	return p
}

func guard(loopback bool, cidrs, hosts []string) netguard.Policy {
	p := netguard.Policy{AllowLoopback: loopback}
	for _, c := range cidrs {
		if pr, err := netguard.ParseCIDR(c); err == nil {
			p.AllowCIDRs = append(p.AllowCIDRs, pr)
		}
	}
	for _, h := range hosts {
		if netguard.CheckHost(h) == nil {
			p.AllowHosts = append(p.AllowHosts, strings.ToLower(strings.TrimSuffix(h, ".")))
		}
	}
	return p
}

// ControlPlane is the service's own endpoints that no job URL may reach: the
// Nomad address, the etcd endpoints (and the embedded member's listeners), the
// gateway's and dispatcher's listeners, public_url's host and port, and
// server.control_plane. netguard adds the well-known Nomad, etcd, Consul and
// Vault ports on the host's own addresses.
func (c *Config) ControlPlane() []string {
	var out []string
	add := func(e string) {
		if e = strings.TrimSpace(e); e == "" {
			return
		}
		if _, _, err := netguard.SplitEndpoint(e); err == nil && !slices.Contains(out, e) {
			out = append(out, e)
		}
	}
	add(c.Nomad.Address)
	for _, e := range c.Etcd.Endpoints {
		if !strings.Contains(e, "://") {
			e = "http://" + e
		}
		add(e)
	}
	if c.Etcd.Embedded {
		add(c.Etcd.ListenClient)
		add(c.Etcd.ListenPeer)
	}
	add(c.Server.Listen)
	add(c.Server.MetricsListen)
	add(c.Server.PublicURL)
	add(c.Dispatcher.Listen)
	for _, e := range c.Server.ControlPlane {
		add(e)
	}
	return out
}

// finish applies every block's defaults, then checks the blocks in order; each
// check also parses its block's durations and the like.
func (c *Config) finish() hcl.Diagnostics {
	c.defaults()
	var ck checker
	c.Server.check(&ck)
	c.Log.check(&ck)
	c.Etcd.check(&ck)
	c.Nomad.check(&ck)
	c.Webhooks.check(&ck)
	c.Dispatcher.check(&ck)
	c.Storage.check(&ck)
	c.Usage.check(&ck)
	c.Limits.check(&ck)
	c.Pipelines.check(&ck)
	c.Chunked.check(&ck)
	c.checkPools(&ck)
	return ck.diags
}

// defaults fills what is unset, blocks a Config built in code leaves out
// included. A pool's warm block follows its pool's defaults.
func (c *Config) defaults() {
	if c.Log == nil {
		c.Log = &Log{}
	}
	if c.Limits == nil {
		c.Limits = &Limits{}
	}
	if c.Usage == nil {
		c.Usage = &Usage{RetentionDays: DefaultUsageRetentionDays}
	}
	if c.Pipelines == nil {
		c.Pipelines = &Pipelines{}
	}
	if c.Chunked == nil {
		c.Chunked = &Chunked{}
	}
	if len(c.Pools) == 0 {
		c.Pools = []*Pool{{Name: "cpu"}}
	}
	c.Server.defaults()
	c.Log.defaults()
	c.Etcd.defaults()
	c.Webhooks.defaults()
	c.Limits.defaults()
	c.Pipelines.defaults()
	c.Chunked.defaults()
	for _, p := range c.Pools {
		p.defaults()
	}
}

// evalContext offers env("NAME") so secrets can stay out of the file.
func evalContext() *hcl.EvalContext {
	return &hcl.EvalContext{Functions: map[string]function.Function{
		"env": function.New(&function.Spec{
			Params: []function.Parameter{{Name: "name", Type: cty.String}},
			Type:   function.StaticReturnType(cty.String),
			Impl: func(args []cty.Value, _ cty.Type) (cty.Value, error) {
				return cty.StringVal(os.Getenv(args[0].AsString())), nil
			},
		}),
	}}
}

// Diagnostics is an error listing HCL problems with file:line and the source line.
type Diagnostics struct {
	Diags hcl.Diagnostics
	File  *hcl.File
}

func (d Diagnostics) Error() string {
	var b strings.Builder
	for i, diag := range d.Diags {
		if i > 0 {
			b.WriteString("\n")
		}
		if diag.Subject != nil && diag.Subject.Filename != "" {
			fmt.Fprintf(&b, "%s:%d,%d: ", diag.Subject.Filename, diag.Subject.Start.Line, diag.Subject.Start.Column)
		}
		b.WriteString(diag.Summary)
		if diag.Detail != "" {
			b.WriteString("; " + diag.Detail)
		}
		if d.File != nil && diag.Subject != nil {
			if line := sourceLine(d.File.Bytes, diag.Subject.Start.Line); line != "" {
				fmt.Fprintf(&b, "\n    %d | %s", diag.Subject.Start.Line, line)
			}
		}
	}
	return b.String()
}

func sourceLine(src []byte, n int) string {
	lines := strings.Split(string(src), "\n")
	if n < 1 || n > len(lines) {
		return ""
	}
	line := strings.TrimRight(lines[n-1], "\r")
	if m := secretAttr.FindStringSubmatchIndex(line); m != nil && !strings.HasPrefix(strings.TrimSpace(line[m[1]:]), "env(") {
		// A secret written in the file is never echoed into a log or a terminal.
		return line[:m[1]] + "<hidden>"
	}
	return line
}

// secretAttr is an attribute that holds a secret, up to its "=".
var secretAttr = regexp.MustCompile(`^\s*(signing_secret|password|token|secret_access_key|access_key_id|secret)\s*=\s*`)
