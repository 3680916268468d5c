// Package config loads the service's HCL configuration: defaults first, the file
// decoded on top with gohcl, then every value checked. Every problem is reported as an
// hcl.Diagnostic that points at file:line.
package config

import (
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/hashicorp/hcl/v2"
	"github.com/hashicorp/hcl/v2/gohcl"
	"github.com/hashicorp/hcl/v2/hclsyntax"
	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/logging"
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
	Usage      *Usage      `hcl:"usage,block"` // usage.go
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
	MaxJobSeconds int    `hcl:"max_job_seconds,optional"` // a job goes warm only if its timeout_seconds <= this; default 120
	CPU           int    `hcl:"cpu,optional"`             // MHz per runner; default the pool's cpu
	Memory        int    `hcl:"memory,optional"`          // MiB per runner; default the pool's memory
	Disk          int    `hcl:"disk,optional"`            // MB ephemeral disk per runner; default the pool's disk
	LeaseTTL      string `hcl:"lease_ttl,optional"`       // how long a runner that stops renewing keeps its job before it is retried; default "10s", min 3s, max 5m
	// SpillAfter is how long a job that fits waits for a warm runner, while the
	// pool has runners, before it is dispatched as its own Nomad child instead;
	// default "30s". "0s": never wait (only an idle runner takes a job).
	SpillAfter string `hcl:"spill_after,optional"`

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

// stringList decodes a list-of-strings attribute kept as an expression, with the
// range of each element (the attribute's own where the list is not written out).
func stringList(expr hcl.Expression) ([]string, []hcl.Range, hcl.Diagnostics) {
	if expr == nil {
		return nil, nil, nil
	}
	v, diags := expr.Value(evalContext())
	if diags.HasErrors() || v.IsNull() {
		return nil, nil, diags
	}
	var out []string
	if diags := gohcl.DecodeExpression(expr, evalContext(), &out); diags.HasErrors() {
		return nil, nil, diags
	}
	ranges := make([]hcl.Range, len(out))
	tuple, _ := expr.(*hclsyntax.TupleConsExpr)
	for i := range out {
		ranges[i] = expr.Range()
		if tuple != nil && i < len(tuple.Exprs) {
			ranges[i] = tuple.Exprs[i].Range()
		}
	}
	return out, ranges, nil
}

// listenProblem says what is wrong with a host:port to listen on, or "".
// fromFile: port 0 (any free port) is for code, not for a file others dial.
func listenProblem(addr string, fromFile bool) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Sprintf("%q is not host:port, such as \"127.0.0.1:8080\" or \":8080\" (all interfaces).", addr)
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 0 || n > 65535 || (n == 0 && fromFile) {
		return fmt.Sprintf("%q: port %q must be a number from 1 to 65535.", addr, port)
	}
	if host != "" && !strings.EqualFold(host, "localhost") {
		if _, err := netip.ParseAddr(host); err != nil && netguard.CheckHost(host) != nil {
			return fmt.Sprintf("%q: %q is neither an IP address nor a host name.", addr, host)
		}
	}
	return ""
}

func (c *Config) finish() hcl.Diagnostics {
	var diags hcl.Diagnostics
	bad := func(rng hcl.Range, summary, detail string) {
		r := rng
		diags = append(diags, &hcl.Diagnostic{Severity: hcl.DiagError, Summary: summary, Detail: detail, Subject: &r})
	}
	dur := func(s string, rng hcl.Range, name string) time.Duration {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			bad(rng, "Invalid duration", fmt.Sprintf("%s = %q is not a positive duration such as \"30s\", \"10m\" or \"1h\".", name, s))
		}
		return d
	}

	s := c.Server
	if s.PublicURL == "" {
		s.PublicURL = "http://" + s.Listen
	}
	if u, err := url.Parse(s.PublicURL); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		bad(s.PublicURLRange, "Invalid public_url", fmt.Sprintf("public_url = %q must be an absolute http(s) URL that clients and workers can reach.", s.PublicURL))
	}
	s.PublicURL = strings.TrimRight(s.PublicURL, "/")
	if msg := listenProblem(s.Listen, s.ListenRange.Filename != ""); msg != "" {
		bad(s.ListenRange, "Invalid listen", "listen = "+msg)
	}
	if s.MetricsListen != "" {
		if msg := listenProblem(s.MetricsListen, s.MetricsRange.Filename != ""); msg != "" {
			bad(s.MetricsRange, "Invalid metrics_listen", "metrics_listen = "+msg)
		} else if s.MetricsListen == s.Listen {
			bad(s.MetricsRange, "Invalid metrics_listen", fmt.Sprintf("metrics_listen = %q is listen's address: leave it unset to serve /metrics on the public port, or give it an address of its own.", s.MetricsListen))
		}
	}
	if s.RateLimit < 0 {
		bad(s.RateLimitRange, "Invalid rate_limit", fmt.Sprintf("rate_limit = %g: use requests per second above 0, or 0 for no limit.", s.RateLimit))
	}
	if s.RateBurst < 0 {
		bad(s.RateBurstRange, "Invalid rate_burst", fmt.Sprintf("rate_burst = %d: use the requests an account may send at once above rate_limit (at least 1).", s.RateBurst))
	}
	if s.AuthFailureRate == 0 && s.AuthRateRange.Filename == "" { // unset in a Config built in code
		s.AuthFailureRate = 1
	}
	if s.AuthFailureBurst == 0 && s.AuthBurstRange.Filename == "" {
		s.AuthFailureBurst = 20
	}
	if s.AuthFailureRate < 0 {
		bad(s.AuthRateRange, "Invalid auth_failure_rate", fmt.Sprintf("auth_failure_rate = %g: use failed authentications per second per client address above 0 (default 1), or 0 for no limit.", s.AuthFailureRate))
	}
	if s.AuthFailureBurst < 0 {
		bad(s.AuthBurstRange, "Invalid auth_failure_burst", fmt.Sprintf("auth_failure_burst = %d: use the failed authentications a client address may make at once (default 20).", s.AuthFailureBurst))
	}
	if s.AuthFailureGlobalRate == 0 && s.GlobRateRange.Filename == "" {
		s.AuthFailureGlobalRate = 100
	}
	if s.AuthFailureGlobalBurst == 0 && s.GlobBurstRange.Filename == "" {
		s.AuthFailureGlobalBurst = 1000
	}
	if s.AuthFailureGlobalRate < 0 {
		bad(s.GlobRateRange, "Invalid auth_failure_global_rate", fmt.Sprintf("auth_failure_global_rate = %g: use failed authentications per second from all client addresses together above 0 (default 100), or 0 for no global limit.", s.AuthFailureGlobalRate))
	}
	if s.AuthFailureGlobalBurst < 0 {
		bad(s.GlobBurstRange, "Invalid auth_failure_global_burst", fmt.Sprintf("auth_failure_global_burst = %d: use the failed authentications all client addresses together may make at once (default 1000).", s.AuthFailureGlobalBurst))
	}
	for _, p := range s.TrustedProxies {
		if _, err := ParseProxy(p); err != nil {
			bad(s.ProxiesRange, "Invalid trusted_proxies", fmt.Sprintf("trusted_proxies: %q is neither an address nor a range such as \"10.0.0.0/8\".", p))
		}
	}
	if s.MaxBodyBytes == 0 && s.BodyBytesRange.Filename == "" { // unset in a Config built in code
		s.MaxBodyBytes = 1 << 20
	}
	if s.MaxUploadBytes == 0 && s.UploadRange.Filename == "" {
		s.MaxUploadBytes = 8 << 30
	}
	if s.MaxBodyBytes <= 0 {
		bad(s.BodyBytesRange, "Invalid max_body_bytes", fmt.Sprintf("max_body_bytes = %d must be positive (default 1048576): every create request is a JSON body.", s.MaxBodyBytes))
	}
	if s.MaxUploadBytes <= 0 {
		bad(s.UploadRange, "Invalid max_upload_bytes", fmt.Sprintf("max_upload_bytes = %d must be positive (default 8589934592, 8 GiB).", s.MaxUploadBytes))
	}
	// allow_cidrs and allow_hosts: every entry checked where it is written.
	for _, l := range []struct {
		expr  hcl.Expression
		dst   *[]string
		name  string
		check func(string) error
	}{
		{s.AllowCIDRsExpr, &s.AllowCIDRs, "allow_cidrs", func(v string) error { _, err := netguard.ParseCIDR(v); return err }},
		{s.AllowHostsExpr, &s.AllowHosts, "allow_hosts", netguard.CheckHost},
		{s.DestCIDRsExpr, &s.DestinationAllowCIDRs, "destination_allow_cidrs", func(v string) error { _, err := netguard.ParseCIDR(v); return err }},
		{s.DestHostsExpr, &s.DestinationAllowHosts, "destination_allow_hosts", netguard.CheckHost},
	} {
		vals, ranges, d := stringList(l.expr)
		diags = append(diags, d...)
		if vals != nil {
			*l.dst = vals
		}
		for i, v := range *l.dst {
			if err := l.check(v); err != nil {
				var rng hcl.Range
				if i < len(ranges) {
					rng = ranges[i]
				}
				bad(rng, "Invalid "+l.name, fmt.Sprintf("%s: %v.", l.name, err))
			}
		}
	}
	for _, e := range s.ControlPlane {
		if _, _, err := netguard.SplitEndpoint(e); err != nil {
			bad(s.ControlRange, "Invalid control_plane", fmt.Sprintf("control_plane: %v.", err))
		}
	}
	s.WaitLimitD = dur(s.WaitLimit, s.WaitLimitRange, "wait_limit")
	s.RequestTimeoutD = dur(s.RequestTimeout, s.ReqTimeRange, "request_timeout")
	s.TmpFileTTLD = dur(s.TmpFileTTL, s.TmpTTLRange, "tmp_file_ttl")
	s.UploadTimeoutD = dur(s.UploadTimeout, s.UploadTORange, "upload_timeout")
	if s.HeaderTimeout == "" && s.HeaderTORange.Filename == "" { // unset in a Config built in code
		s.HeaderTimeout = "10s"
	}
	s.HeaderTimeoutD = dur(s.HeaderTimeout, s.HeaderTORange, "header_timeout")
	if s.SessionTTL == "" && s.SessionRange.Filename == "" { // unset in a Config built in code
		s.SessionTTL = "12h"
	}
	if s.SessionTTLD = dur(s.SessionTTL, s.SessionRange, "session_ttl"); s.SessionTTLD > 0 && (s.SessionTTLD < time.Minute || s.SessionTTLD > 30*24*time.Hour) {
		bad(s.SessionRange, "Invalid session_ttl", fmt.Sprintf("session_ttl = %q: a dashboard sign-in lasts from 1m to 720h (30 days); the default is 12h.", s.SessionTTL))
	}
	if s.ShutdownTimeout == "" {
		s.ShutdownD = max(DefaultShutdownTimeout, s.WaitLimitD+5*time.Second)
	} else if s.ShutdownD = dur(s.ShutdownTimeout, s.ShutdownRange, "shutdown_timeout"); s.ShutdownD > 0 && s.ShutdownD < s.WaitLimitD {
		bad(s.ShutdownRange, "Invalid shutdown_timeout", fmt.Sprintf("shutdown_timeout = %q is shorter than wait_limit = %q: a POST ?wait=true in flight at shutdown would be cut off; use at least wait_limit (default: the larger of 30s and wait_limit + 5s).", s.ShutdownTimeout, s.WaitLimit))
	}
	if s.SigningSecret != "" && len(s.SigningSecret) < 16 {
		bad(s.SecretRange, "Signing secret too short", "signing_secret must be at least 16 characters; use a long random string.")
	}
	// The settings that size a job: each at most its ceiling, so that the largest
	// job record stays within etcd's request limit (see mediajobs' bounds.go).
	jobBound := func(v *int, def, ceil int, rng hcl.Range, name, why string) {
		switch {
		case *v == 0 && rng.Filename == "": // unset in a Config built in code
			*v = def
		case *v <= 0 || *v > ceil:
			bad(rng, "Invalid "+name, fmt.Sprintf("%s = %d must be between 1 and %d (default %d): a job is stored as one etcd value, which etcd refuses over 1.5 MiB; %s.", name, *v, ceil, def, why))
		}
	}
	jobBound(&s.MaxCommands, mj.DefaultMaxCommands, mj.CeilMaxCommands, s.CommandsRange, "max_commands",
		"the largest job allowed is computed with this many commands")
	jobBound(&s.MaxCommandBytes, mj.DefaultMaxCommandBytes, mj.CeilMaxCommandBytes, s.CmdBytesRange, "max_command_bytes",
		"the commands' text is stored in the job record, beside 50 inputs of 4 KiB URLs and 1,000 output files with their probe data")
	jobBound(&s.MaxInputs, mj.DefaultMaxInputs, mj.CeilMaxInputs, s.InputsRange, "max_inputs",
		fmt.Sprintf("each input may carry a URL of %d bytes, and %d of them already take a fifth of the job record's budget", mj.MaxURLBytes, mj.CeilMaxInputs))
	jobBound(&s.MaxOutputs, mj.DefaultMaxOutputs, mj.CeilMaxOutputs, s.OutputsRange, "max_outputs",
		"the declared output names are stored in the job record")
	jobBound(&s.MaxOutputFiles, mj.DefaultMaxOutputFiles, mj.CeilMaxOutputFiles, s.OutFilesRange, "max_output_files",
		"every file produced is stored in the job record with its name, key and probe, about 400 bytes each plus probe data")

	if c.Log == nil { // a Config built in code
		c.Log = &Log{}
	}
	lg := c.Log
	switch lg.Format {
	case "":
		lg.Format = "text"
	case "text", "json":
	default:
		bad(lg.FormatRange, "Invalid log format", fmt.Sprintf("format = %q; use \"text\" (key=value lines, the default) or \"json\" (one JSON object a line).", lg.Format))
	}
	if v, err := logging.ParseLevel(lg.Level); err != nil {
		bad(lg.LevelRange, "Invalid log level", fmt.Sprintf("level = %q; use \"debug\", \"info\" (the default), \"warn\" or \"error\".", lg.Level))
	} else {
		lg.LevelV = v
	}

	e := c.Etcd
	e.DialTimeoutD = dur(e.DialTimeout, e.DialTimeoutRange, "dial_timeout")
	if !e.Embedded && len(e.Endpoints) == 0 {
		e.Endpoints = []string{"http://127.0.0.1:2379"}
	}
	if e.Embedded {
		for _, l := range []struct {
			addr, name string
			rng        hcl.Range
		}{{e.ListenClient, "listen_client", e.ClientRange}, {e.ListenPeer, "listen_peer", e.PeerRange}} {
			if msg := listenProblem(l.addr, l.rng.Filename != ""); msg != "" {
				bad(l.rng, "Invalid "+l.name, l.name+" = "+msg)
			}
		}
	} else {
		for _, ep := range e.Endpoints {
			if u, err := url.Parse(ep); err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || (u.Path != "" && u.Path != "/") {
				bad(e.EndpointsRange, "Invalid endpoints", fmt.Sprintf("endpoints: %q is not an etcd client URL such as \"http://etcd-1.internal:2379\" (https:// with TLS).", ep))
			}
		}
	}
	if !strings.HasSuffix(e.Prefix, "/") {
		e.Prefix += "/"
	}
	e.CompactionRetentionD = dur(e.CompactionRetention, e.CompactionRange, "compaction_retention")
	if e.CompactionRetentionD > 0 && e.CompactionRetentionD < time.Minute {
		bad(e.CompactionRange, "Invalid compaction_retention", fmt.Sprintf("compaction_retention = %q is too short: watchers resume from revisions read moments earlier and would have to start over; use at least \"1m\" (default \"10m\").", e.CompactionRetention))
	}
	if e.QuotaBackendBytes < MinQuotaBackendBytes || e.QuotaBackendBytes > MaxQuotaBackendBytes {
		bad(e.QuotaRange, "Invalid quota_backend_bytes", fmt.Sprintf("quota_backend_bytes = %d must be between %d (64 MiB: less trips etcd's NOSPACE alarm in ordinary bursts) and %d (100 GiB: etcd recommends at most 8 GiB; beyond this snapshots, recovery and defragmentation take too long). Default 8589934592 (8 GiB).", e.QuotaBackendBytes, int64(MinQuotaBackendBytes), int64(MaxQuotaBackendBytes)))
	}
	e.DefragEveryD = dur(e.DefragEvery, e.DefragEveryRange, "defrag_every")
	if e.DefragEveryD > 0 && e.DefragEveryD < time.Minute {
		bad(e.DefragEveryRange, "Invalid defrag_every", fmt.Sprintf("defrag_every = %q is too short: a defragmentation stalls its member; check at most every minute (default \"10m\").", e.DefragEvery))
	}
	if !(e.DefragFreeRatio > 0 && e.DefragFreeRatio < 1) {
		bad(e.DefragRatioRange, "Invalid defrag_free_ratio", fmt.Sprintf("defrag_free_ratio = %g must be above 0 and below 1: the share of a member's database that must be free space before it is defragmented (default 0.5).", e.DefragFreeRatio))
	}
	if e.DefragMinBytes < 0 || e.DefragMinBytes >= e.QuotaBackendBytes {
		bad(e.DefragMinRange, "Invalid defrag_min_bytes", fmt.Sprintf("defrag_min_bytes = %d must be at least 0 and below quota_backend_bytes (%d), or no member is ever defragmented before etcd refuses writes (default 67108864, 64 MiB).", e.DefragMinBytes, e.QuotaBackendBytes))
	}

	c.Nomad.PurgeAfterD = dur(c.Nomad.PurgeAfter, c.Nomad.PurgeRange, "purge_after")

	wh := c.Webhooks
	wh.BaseD = dur(wh.BackoffBase, wh.BaseRange, "backoff_base")
	wh.CapD = dur(wh.BackoffCap, wh.CapRange, "backoff_cap")
	wh.TimeoutD = dur(wh.AttemptTimeout, wh.TimeoutRange, "attempt_timeout")
	if wh.Concurrency < 0 || (wh.Concurrency == 0 && wh.ConcRange.Filename != "") {
		bad(wh.ConcRange, "Invalid concurrency", fmt.Sprintf("concurrency = %d: webhook attempts in flight at once must be at least 1 (default 128).", wh.Concurrency))
	}
	if wh.AccountConcurrency < 0 || (wh.AcctRange.Filename != "" && (wh.AccountConcurrency == 0 || wh.AccountConcurrency > max(wh.Concurrency, 1))) {
		bad(wh.AcctRange, "Invalid account_concurrency", fmt.Sprintf("account_concurrency = %d must be between 1 and concurrency (%d); default an eighth of concurrency.", wh.AccountConcurrency, wh.Concurrency))
	}
	if wh.Concurrency <= 0 {
		wh.Concurrency = 128
	}
	if wh.AccountConcurrency <= 0 || wh.AccountConcurrency > wh.Concurrency {
		wh.AccountConcurrency = max(1, wh.Concurrency/8)
	}

	dd := c.Dispatcher
	dd.ReconcileD = dur(dd.ReconcileEvery, dd.ReconcileRange, "reconcile_every")
	dd.LeaderTTLD = dur(dd.LeaderTTL, dd.LeaderRange, "leader_ttl")
	dd.TimeoutGraceD = dur(dd.TimeoutGrace, dd.GraceRange, "timeout_grace")
	dd.DisconnectD = dur(dd.DisconnectGrace, dd.DisconnectRange, "disconnect_grace")
	if dd.LeaderTTLD > 0 && dd.LeaderTTLD < 2*time.Second {
		bad(dd.LeaderRange, "Invalid leader_ttl", "leader_ttl must be at least 2s: etcd sessions count in whole seconds.")
	}
	if dd.Listen != "" {
		if msg := listenProblem(dd.Listen, dd.ListenRange.Filename != ""); msg != "" {
			bad(dd.ListenRange, "Invalid listen", "dispatcher listen = "+msg)
		}
	}

	st := c.Storage
	if st.Type != "local" {
		bad(st.TypeRange, "Unsupported storage type", fmt.Sprintf("storage type %q is not supported; set url instead (file:///dir or s3://bucket?...).", st.Type))
	}
	if st.URL != "" {
		if msg := storageURLProblem(st.URL); msg != "" {
			bad(st.URLRange, "Invalid storage url", msg)
		}
	} else if st.Path == "" {
		rng := st.PathRange
		if rng.Filename == "" {
			rng = st.DefRange
		}
		bad(rng, "Missing storage", "storage needs url (file:///dir or s3://bucket?...) or path (a local directory).")
	}
	st.TTL = dur(st.DownloadURLTTL, st.TTLRange, "download_url_ttl")
	st.Retention = dur(st.OutputRetention, st.RetentionRange, "output_retention")
	st.Sweep = dur(st.SweepEvery, st.SweepRange, "sweep_every")
	st.JobRetentionD = dur(st.JobRetention, st.JobRetRange, "job_retention")
	if st.JobRetentionD > 0 && st.JobRetentionD < st.Retention {
		bad(st.JobRetRange, "Invalid job_retention", fmt.Sprintf("job_retention = %q is shorter than output_retention = %q: a job must outlive its output files, or their links would point at a deleted job's files.", st.JobRetention, st.OutputRetention))
	}

	if c.Limits == nil {
		c.Limits = &Limits{}
	}
	if c.Usage == nil {
		c.Usage = &Usage{RetentionDays: DefaultUsageRetentionDays}
	}
	c.Usage.check(bad)
	if c.Limits.MaxRunningPerAccount < 0 {
		bad(c.Limits.MaxRunningRange, "Invalid max_running_per_account", fmt.Sprintf("max_running_per_account = %d; use 0 for no limit, or how many jobs of one account may run in a pool at once.", c.Limits.MaxRunningPerAccount))
	}
	for _, l := range []struct {
		v    **int64
		name string
		def  int64
	}{
		{&c.Limits.MaxQueuedJobs, "max_queued_jobs", DefaultMaxQueuedJobs},
		{&c.Limits.MaxJobBytes, "max_job_bytes", DefaultMaxJobBytes},
		{&c.Limits.MaxTimeoutSeconds, "max_timeout_seconds", 0},
		{&c.Limits.MaxStorageBytes, "max_storage_bytes", DefaultMaxStorage},
		{&c.Limits.MaxEventStreams, "max_event_streams", DefaultMaxStreams},
		{&c.Limits.MaxInputBytes, "max_input_bytes", 0},
	} {
		if *l.v == nil {
			*l.v = &l.def
		} else if **l.v < 0 {
			bad(c.Limits.DefRange, "Invalid "+l.name, fmt.Sprintf("%s = %d; use 0 for no limit.", l.name, **l.v))
		}
	}

	if len(c.Pools) == 0 {
		c.Pools = []*Pool{{Name: "cpu"}}
	}
	seen := map[string]bool{}
	for _, p := range c.Pools {
		if seen[p.Name] {
			bad(p.DefRange, "Duplicate pool", fmt.Sprintf("pool %q is defined twice.", p.Name))
		}
		seen[p.Name] = true
		// Written as 0 (or less) in the file: applyDefaults would take it for unset.
		inFlight0 := p.MaxInFlight == 0 && p.InFlightRange.Filename != ""
		if p.DispatchLookahead < 0 || p.DispatchLookahead == 0 && p.LookaheadRange.Filename != "" {
			bad(p.LookaheadRange, "Invalid dispatch_lookahead", fmt.Sprintf("pool %q: dispatch_lookahead = %d; use a positive number (default %d).", p.Name, p.DispatchLookahead, DefaultDispatchLookahead))
		}
		attempts, attempts0 := p.MaxAttempts, p.MaxAttempts <= 0 && p.AttemptsRange.Filename != ""
		p.applyDefaults()
		if !supportedDrivers[p.Driver] {
			bad(p.DriverRange, "Unsupported driver", fmt.Sprintf("pool %q: driver %q has no jobspec; supported: docker, raw_exec.", p.Name, p.Driver))
		}
		if p.Driver == "docker" && p.Image == "" {
			bad(p.DefRange, "Missing image", fmt.Sprintf("pool %q uses the docker driver and needs an image (the worker image, e.g. \"mediajobs-worker:local\").", p.Name))
		}
		switch {
		case p.Driver == "raw_exec" && p.Sandbox != "bwrap" && p.Sandbox != "none":
			bad(p.SandboxRange, "Invalid sandbox", fmt.Sprintf("pool %q: sandbox = %q; use \"bwrap\" (bubblewrap, the default) or \"none\" (no sandbox: only for trusted commands).", p.Name, p.Sandbox))
		case p.Driver == "docker" && p.Sandbox != "":
			bad(p.SandboxRange, "Invalid sandbox", fmt.Sprintf("pool %q: sandbox applies to raw_exec pools; a docker pool's ffmpeg runs in its container (no network, unprivileged user, read-only root). Remove the setting.", p.Name))
		}
		if p.Disk < 50 {
			bad(p.DiskRange, "Invalid disk", fmt.Sprintf("pool %q: disk = %d MB is too small; jobs keep inputs and outputs there (at least 50).", p.Name, p.Disk))
		}
		for _, c := range p.Constraints {
			switch c.Operator {
			case "=", "!=", ">", ">=", "<", "<=", "regexp", "set_contains", "set_contains_any", "version", "semver", "is_set", "is_not_set", "distinct_hosts", "distinct_property":
			default:
				bad(c.DefRange, "Invalid constraint", fmt.Sprintf("pool %q: constraint operator %q is not one of Nomad's (=, !=, <, <=, >, >=, regexp, set_contains, version, is_set, ...).", p.Name, c.Operator))
			}
			if _, err := regexp.Compile(c.Value); c.Operator == "regexp" && err != nil && !strings.Contains(c.Value, "${") {
				bad(c.ValueRange, "Invalid constraint", fmt.Sprintf("pool %q: constraint value %q is not a regular expression: %v.", p.Name, c.Value, err))
			}
		}
		if g := p.GPU; g != nil {
			if g.Vendor != "nvidia" {
				bad(g.VendorRange, "Unsupported GPU vendor", fmt.Sprintf("pool %q: gpu vendor %q is not supported; use \"nvidia\".", p.Name, g.Vendor))
			}
			if g.Count < 1 || g.Count > 16 {
				bad(g.CountRange, "Invalid GPU count", fmt.Sprintf("pool %q: gpu count = %d must be between 1 and 16.", p.Name, g.Count))
			}
			if g.MinMemoryMB < 0 {
				bad(g.MinMemRange, "Invalid min_memory_mb", fmt.Sprintf("pool %q: gpu min_memory_mb = %d: use the least GPU memory in MiB, or leave it unset.", p.Name, g.MinMemoryMB))
			}
			if _, err := regexp.Compile(g.Model); g.Model != "" && err != nil {
				bad(g.ModelRange, "Invalid GPU model", fmt.Sprintf("pool %q: gpu model = %q is not a regular expression (Nomad matches the device model with it): %v.", p.Name, g.Model, err))
			}
		}
		if p.CPU < 100 {
			bad(p.CPURange, "Invalid cpu", fmt.Sprintf("pool %q: cpu = %d MHz is below Nomad's minimum of 100.", p.Name, p.CPU))
		}
		if p.MaxInFlight < -1 || inFlight0 {
			rng := p.InFlightRange
			if rng.Filename == "" {
				rng = p.DefRange
			}
			bad(rng, "Invalid max_in_flight", fmt.Sprintf("pool %q: max_in_flight = %d; use a positive number, or -1 for no cap (default %d).", p.Name, min(p.MaxInFlight, 0), DefaultMaxInFlight))
		}
		if attempts0 {
			bad(p.AttemptsRange, "Invalid max_attempts", fmt.Sprintf("pool %q: max_attempts = %d must be at least 1 (default 3): the first attempt counts.", p.Name, attempts))
		}
		if p.Memory < 64 {
			bad(p.MemoryRange, "Invalid memory", fmt.Sprintf("pool %q: memory = %d MiB is too small for ffmpeg; use at least 64.", p.Name, p.Memory))
		}
		p.DefaultTimeoutD = dur(p.DefaultTimeout, p.DefaultTORange, "default_timeout")
		p.MaxTimeoutD = dur(p.MaxTimeout, p.MaxTORange, "max_timeout")
		p.QueueLimitD = dur(p.QueueLimit, p.QueueLimRange, "queue_limit")
		p.StartTimeoutD = dur(p.StartTimeout, p.StartTORange, "start_timeout")
		if p.DefaultTimeoutD > p.MaxTimeoutD && p.MaxTimeoutD > 0 {
			bad(p.DefaultTORange, "Invalid default_timeout", fmt.Sprintf("pool %q: default_timeout %s is above max_timeout %s.", p.Name, p.DefaultTimeout, p.MaxTimeout))
		}
		if p.Warm != nil {
			p.Warm.check(p, bad, dur)
			c.checkWarmTransport(p, bad)
		}
	}
	// A warm pool's service job is mediajobs-<pool>-warm: the parameterized job of
	// a pool named "<pool>-warm" would have the same Nomad ID.
	for _, p := range c.Pools {
		if p.Warm != nil {
			if q := c.Pool(p.Name + "-warm"); q != nil {
				bad(q.DefRange, "Conflicting pool name", fmt.Sprintf("pool %q: its Nomad job would be mediajobs-%s, the ID of pool %q's warm runners; rename the pool.", q.Name, q.Name, p.Name))
			}
		}
	}
	return diags
}

// check reports what is wrong with pool p's warm block, its defaults applied,
// and sets LeaseTTLD.
func (w *Warm) check(p *Pool, bad func(hcl.Range, string, string), dur func(string, hcl.Range, string) time.Duration) {
	at := func(rng hcl.Range) hcl.Range { // the block itself for a value not written
		if rng.Filename == "" {
			return w.DefRange
		}
		return rng
	}
	switch {
	case p.Driver == "docker":
		bad(w.DefRange, "Invalid warm block", fmt.Sprintf("pool %q: warm pools run on raw_exec with bubblewrap: a docker pool's runner cannot lease work while ffmpeg has no network in the same container; remove the warm block or use driver = \"raw_exec\".", p.Name))
	case p.Driver == "raw_exec" && p.Sandbox == "none":
		bad(w.DefRange, "Invalid warm block", fmt.Sprintf("pool %q: a warm runner takes the jobs of every account one after another; with sandbox = \"none\" they would share it unsandboxed. Remove the warm block or use sandbox = \"bwrap\".", p.Name))
	}
	if w.Count < 0 {
		bad(at(w.CountRange), "Invalid warm count", fmt.Sprintf("pool %q: warm count = %d; use how many runners to start with, 0 or more (default %d).", p.Name, w.Count, DefaultWarmCount))
	}
	if w.Min < 0 {
		bad(at(w.MinRange), "Invalid warm min", fmt.Sprintf("pool %q: warm min = %d; use the fewest runners Nomad's scaling may leave, 0 or more (default 0).", p.Name, w.Min))
	}
	if w.Max < w.Min {
		bad(at(w.MaxRange), "Invalid warm max", fmt.Sprintf("pool %q: warm max = %d is below min = %d.", p.Name, w.Max, w.Min))
	} else if w.Count >= 0 && (w.Count < w.Min || w.Count > w.Max) {
		bad(at(w.CountRange), "Invalid warm count", fmt.Sprintf("pool %q: warm count = %d is outside min = %d and max = %d (Nomad refuses a count outside its scaling block).", p.Name, w.Count, w.Min, w.Max))
	}
	if w.MaxJobSeconds <= 0 {
		bad(at(w.MaxJobRange), "Invalid max_job_seconds", fmt.Sprintf("pool %q: warm max_job_seconds = %d; use the longest timeout_seconds a job may have to run on a warm runner, above 0 (default %d).", p.Name, w.MaxJobSeconds, DefaultWarmMaxJobSeconds))
	} else if p.MaxTimeoutD > 0 && time.Duration(w.MaxJobSeconds)*time.Second > p.MaxTimeoutD {
		bad(at(w.MaxJobRange), "Invalid max_job_seconds", fmt.Sprintf("pool %q: warm max_job_seconds = %d is above the pool's max_timeout %s: no job could ask for that long.", p.Name, w.MaxJobSeconds, p.MaxTimeout))
	}
	if w.CPU < 100 {
		bad(at(w.CPURange), "Invalid warm cpu", fmt.Sprintf("pool %q: warm cpu = %d MHz is below Nomad's minimum of 100.", p.Name, w.CPU))
	}
	if w.Memory < 64 {
		bad(at(w.MemoryRange), "Invalid warm memory", fmt.Sprintf("pool %q: warm memory = %d MiB is too small for ffmpeg; use at least 64.", p.Name, w.Memory))
	}
	if w.Disk < 50 {
		bad(at(w.DiskRange), "Invalid warm disk", fmt.Sprintf("pool %q: warm disk = %d MB is too small; each job's inputs and outputs are kept there (at least 50).", p.Name, w.Disk))
	}
	w.SpillAfterD = dur(w.SpillAfter, at(w.SpillRange), "spill_after")
	if w.SpillAfterD < 0 || w.SpillAfterD > time.Hour {
		bad(at(w.SpillRange), "Invalid spill_after", fmt.Sprintf("pool %q: warm spill_after = %q must be between \"0s\" (a job that fits goes to Nomad at once when no runner waits) and \"1h\"; default %q.", p.Name, w.SpillAfter, DefaultWarmSpillAfter))
	}
	w.LeaseTTLD = dur(w.LeaseTTL, at(w.LeaseTTLRange), "lease_ttl")
	if w.LeaseTTLD > 0 && (w.LeaseTTLD < MinWarmLeaseTTL || w.LeaseTTLD > MaxWarmLeaseTTL) {
		bad(at(w.LeaseTTLRange), "Invalid lease_ttl", fmt.Sprintf("pool %q: warm lease_ttl = %q must be between \"6s\" (three renewal periods of 2s: shorter, a slow renewal or a brief pause of a runner or the network would hand its job to another) and \"5m\" (a job whose runner died waits this long to run again); default %q.", p.Name, w.LeaseTTL, DefaultWarmLeaseTTL))
	}
}

// DefaultShutdownTimeout is server.shutdown_timeout's floor when unset (see
// Server.ShutdownTimeout).
const DefaultShutdownTimeout = 30 * time.Second

// DefaultMaxInFlight is a pool's max_in_flight when unset: enough to keep a
// sizeable cluster busy, few enough that a burst waits in etcd, not in Nomad.
const DefaultMaxInFlight = 256

// DefaultDispatchLookahead is a pool's dispatch_lookahead when unset.
const DefaultDispatchLookahead = 4

// storageURLProblem says what is wrong with a storage url, or "".
func storageURLProblem(raw string) string {
	u, err := url.Parse(raw)
	switch {
	case err != nil:
		return fmt.Sprintf("url is not a URL: %v.", err)
	case u.Scheme == "file" && (u.Host != "" || !strings.HasPrefix(u.Path, "/")):
		return "a file url names an absolute directory: file:///var/lib/mediajobs/blobs (three slashes)."
	case u.Scheme == "s3" && u.Host == "":
		return "an s3 url names its bucket: s3://BUCKET?region=us-east-1 (and, for MinIO or another S3-compatible store, &endpoint=http://host:9000&use_path_style=true)."
	case u.Scheme != "file" && u.Scheme != "s3":
		return fmt.Sprintf("storage scheme %q is not supported; use file:///dir or s3://bucket?....", u.Scheme)
	case u.User != nil:
		return "put no credentials in the url: the s3 driver reads AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or a profile, or an instance role)."
	}
	return ""
}

// supportedDrivers are the drivers with a jobspec in jobspecs/.
var supportedDrivers = map[string]bool{"raw_exec": true, "docker": true}

func (p *Pool) applyDefaults() {
	if p.Driver == "" {
		p.Driver = "raw_exec"
	}
	if p.Driver == "raw_exec" && p.Sandbox == "" {
		p.Sandbox = "bwrap"
	}
	if len(p.Datacenters) == 0 {
		p.Datacenters = []string{"*"}
	}
	if p.NodePool == "" {
		p.NodePool = "default"
	}
	if p.CPU == 0 {
		p.CPU = 1000
	}
	if p.Memory == 0 {
		p.Memory = 1024
	}
	if p.Disk == 0 {
		p.Disk = 2048
	}
	for _, c := range p.Constraints {
		if c.Operator == "" {
			c.Operator = "="
		}
	}
	if g := p.GPU; g != nil {
		if g.Count == 0 {
			g.Count = 1
		}
		if g.Vendor == "" {
			g.Vendor = "nvidia"
		}
		g.setNVENC()
	}
	if p.DefaultTimeout == "" {
		p.DefaultTimeout = "1h"
	}
	if p.MaxTimeout == "" {
		p.MaxTimeout = "6h"
	}
	if p.QueueLimit == "" {
		p.QueueLimit = "10m"
	}
	if p.StartTimeout == "" {
		p.StartTimeout = "10m"
	}
	if p.MaxInFlight == 0 {
		p.MaxInFlight = DefaultMaxInFlight
	}
	if p.DispatchLookahead == 0 {
		p.DispatchLookahead = DefaultDispatchLookahead
	}
	if p.MaxAttempts <= 0 {
		p.MaxAttempts = 3
	}
	if w := p.Warm; w != nil {
		// A 0 written in the file is kept (and checked); unset, or in a Config built
		// in code, it is the default.
		if w.Count == 0 && w.CountRange.Filename == "" {
			w.Count = DefaultWarmCount
		}
		if w.Max == 0 && w.MaxRange.Filename == "" {
			w.Max = max(w.Count, DefaultWarmMax)
		}
		if w.MaxJobSeconds == 0 && w.MaxJobRange.Filename == "" {
			w.MaxJobSeconds = DefaultWarmMaxJobSeconds
		}
		if w.CPU == 0 && w.CPURange.Filename == "" {
			w.CPU = p.CPU
		}
		if w.Memory == 0 && w.MemoryRange.Filename == "" {
			w.Memory = p.Memory
		}
		if w.Disk == 0 && w.DiskRange.Filename == "" {
			w.Disk = p.Disk
		}
		if w.LeaseTTL == "" && w.LeaseTTLRange.Filename == "" {
			w.LeaseTTL = DefaultWarmLeaseTTL
		}
		if w.SpillAfter == "" && w.SpillRange.Filename == "" {
			w.SpillAfter = DefaultWarmSpillAfter
		}
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

// ParseProxy parses an entry of server.trusted_proxies: an address ("10.0.0.5")
// or a range ("10.0.0.0/8").
func ParseProxy(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, err
	}
	a = a.Unmap()
	return netip.PrefixFrom(a, a.BitLen()), nil
}
