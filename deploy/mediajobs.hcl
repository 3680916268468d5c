# mediajobs configuration: every setting, with its default.
# Load it with `mediajobs <gateway|dispatcher|dev> -config deploy/mediajobs.hcl`.
# env("NAME") reads an environment variable, so secrets can stay out of this file.

server {
  # Address the HTTP API listens on.
  listen = "127.0.0.1:8080"

  # Base of every signed link (downloads, temporary uploads, runner uploads). Clients
  # AND workers must reach it. Default: "http://" + listen.
  public_url = "http://127.0.0.1:8080"

  # HMAC key for signed links. At least 16 characters. Required for `gateway` and
  # `dispatcher` (they must share it); `dev` generates one under .data/ when unset.
  signing_secret = env("MEDIAJOBS_SIGNING_SECRET")

  # How long POST /api/ffmpeg?wait=true blocks before returning the job as it stands.
  # Keep it below your clients' read timeout (VGF's Python SDK uses 30s).
  wait_limit = "25s"

  # A separate address for the gateway's Prometheus /metrics. Unset (the default):
  # /metrics is on listen; set: only here, so the public port does not expose it.
  # Production sets it: /metrics says how busy the service is, and whose jobs.
  metrics_listen = "127.0.0.1:9090"

  # A job is stored as one etcd value, which etcd refuses over 1.5 MiB: these bound
  # what one job holds, and each has a ceiling that keeps the largest job possible
  # within two thirds of that (see bounds.go). Over a bound, a create is a 400
  # validationError naming the field.

  # Most commands in one job (at most 1000).
  max_commands = 20

  # Most bytes of command text in one job, all commands together, counted as stored
  # (JSON escapes count: &, < and > take 6 bytes each). At most 98304.
  max_command_bytes = 65536

  # Most input_files entries in one job. At most 50: each may carry a URL of 4 KiB
  # (a long presigned S3 link), and 50 of them take a fifth of the job's budget.
  max_inputs = 50

  # Most output_files names in one job (at most 100).
  max_outputs = 50

  # Most files one job may produce (sequence outputs such as seg_%03d.ts). At most
  # 1000: each is stored in the job with its name, key and probe data.
  max_output_files = 1000

  # Largest JSON request body, in bytes (413 payloadTooLarge above it).
  max_body_bytes = 1048576

  # Largest file a PUT to a signed upload URL may carry (temporary files and outputs).
  max_upload_bytes = 8589934592

  # Lifetime of the upload_url and download_url of POST /api/tmp-file.
  tmp_file_ttl = "1h"

  # How long a dashboard sign-in lasts (it also ends on sign-out, and when the API
  # key that signed in is revoked).
  session_ttl = "12h"

  # A request's body, an upload's included, must arrive within this once its
  # headers are in: it must cover max_upload_bytes at your slowest clients' speed
  # (8 GiB at 20 Mbit/s ≈ 1 h).
  upload_timeout = "1h"

  # A request's line and headers must arrive within this, or the connection is
  # closed (slow-header connections are not held for upload_timeout).
  header_timeout = "10s"

  # Deadline of one API request.
  request_timeout = "30s"

  # Per-account rate limit on /api, per gateway process: sustained requests per second
  # and the burst above it. Over it: 429 tooManyRequests with Retry-After. 0 disables.
  rate_limit = 20
  rate_burst = 40

  # Failed authentications (bad keys, unknown session cookies, failed sign-ins)
  # per second per client address, and the burst above it. Over it: 429 before
  # etcd is read (docs/api.md, "Rate limits"). 0 disables.
  auth_failure_rate  = 1
  auth_failure_burst = 20
  # The same for all client addresses together: bounds the etcd reads junk
  # keys cost from any number of addresses. 0 disables this one.
  auth_failure_global_rate  = 100
  auth_failure_global_burst = 1000

  # Reverse proxies in front of the gateway: requests from these addresses are
  # counted under the client address in X-Forwarded-For.
  # trusted_proxies = ["10.0.0.0/8"]

  # Allow input URLs on loopback (127.0.0.0/8, ::1). Only for development.
  allow_loopback = false

  # Internal ranges and host names that job inputs and webhooks may reach, which are
  # refused otherwise (private addresses). Link-local and cloud metadata addresses
  # open only to a range that names them (e.g. "169.254.169.254/32"), never to a
  # broad one. Checked by the gateway, the dispatcher's webhooks and the runners.
  # allow_cidrs = ["10.1.0.0/16", "fd12:3456::/48"]
  # allow_hosts = ["minio.internal", "*.svc.internal"]

  # output_destinations get a PUT of bytes the job controls: they reach public
  # addresses only, unless these lists (theirs alone) open more.
  # destination_allow_cidrs = ["10.9.0.0/16"]
  # destination_allow_hosts = ["minio.internal"]

  # More of your own endpoints that no input, webhook or destination may reach,
  # beside those this file names (Nomad, etcd, the listeners) and the well-known
  # Nomad, etcd, Consul and Vault ports, which are always refused.
  # control_plane = ["consul.internal:8500", "vault.internal:8200"]
}

etcd {
  # Embedded single-node etcd keeping its data in data_dir (one machine only).
  # Set embedded = false and list endpoints to use an etcd cluster.
  embedded = true
  data_dir = ".data/etcd"
  # Where the embedded server listens for clients (etcdctl, other processes) and peers.
  listen_client = "127.0.0.1:2479"
  listen_peer   = "127.0.0.1:2480"
  # endpoints = ["http://etcd-1.internal:2379", "http://etcd-2.internal:2379", "http://etcd-3.internal:2379"]
  # username = "mediajobs"
  # password = env("ETCD_PASSWORD")

  # Key prefix for everything mediajobs stores.
  prefix       = "/mediajobs/"
  dial_timeout = "5s"

  # Keeping etcd small. etcd keeps every revision of every key until it is compacted,
  # and compaction only frees space inside the database file; the file shrinks when
  # a member is defragmented. At the quota etcd raises the NOSPACE alarm and refuses
  # every write.
  # Embedded etcd compacts to the revision of this long ago, every this long
  # (--auto-compaction-mode=periodic). At least "1m". An external cluster needs
  # --auto-compaction-mode=periodic --auto-compaction-retention=10m of its own.
  compaction_retention = "10m"
  # Embedded etcd's backend quota, 64 MiB to 100 GiB (etcd's own default is 2 GiB).
  # With an external cluster, set it to the cluster's --quota-backend-bytes: the
  # dispatcher disarms a NOSPACE alarm once the member is back below it.
  quota_backend_bytes = 8589934592
  # How often the leading dispatcher reads every member's database size (embedded or
  # external) and defragments, one member at a time, those at least defrag_min_bytes
  # large of which at least defrag_free_ratio is free space. While NOSPACE is active
  # it defragments any member with defrag_free_ratio or defrag_min_bytes to give back.
  defrag_every      = "10m"
  defrag_free_ratio = 0.5
  defrag_min_bytes  = 67108864
}

nomad {
  # Unset values fall back to NOMAD_ADDR, NOMAD_TOKEN, NOMAD_REGION, NOMAD_NAMESPACE.
  address   = "http://127.0.0.1:4646"
  token     = env("NOMAD_TOKEN")
  region    = ""
  namespace = ""

  # Finished child jobs are purged from Nomad this long after dispatch, once their
  # result is stored, so the Nomad UI stays usable.
  purge_after = "1h"
}

storage {
  # Where temporary files and outputs live (gocloud.dev/blob). Unset: the directory
  # `path`, which gateway and dispatcher must share (one machine). A bucket lets any
  # number of gateways and dispatchers share nothing else; every link is then the
  # bucket's own presigned URL, so clients and workers must reach its endpoint.
  # Credentials: AWS_ACCESS_KEY_ID / AWS_SECRET_ACCESS_KEY (or a profile or role).
  #   url = "s3://mediajobs?region=us-east-1"
  #   url = "s3://mediajobs?region=us-east-1&endpoint=https://minio.example.com&use_path_style=true"
  #   url = "file:///var/lib/mediajobs/blobs"
  path = ".data/blobs"

  # Lifetime of the signed download URLs in job objects (they are re-signed on every read).
  download_url_ttl = "24h"

  # The janitor (in the dispatcher) deletes job outputs older than output_retention
  # and temporary files older than server.tmp_file_ttl, every sweep_every.
  output_retention = "168h"
  sweep_every      = "10m"
  # Finished jobs are deleted from etcd, with every key derived from them, this long
  # after they finished (at least output_retention).
  job_retention = "720h"
}

webhooks {
  # When a job with a webhook_url finishes: 1 attempt + 5 retries. The waits grow
  # exponentially from backoff_base (1s, 2s, 4s, 8s, 16s; each between half and all of
  # that, at most backoff_cap); a Retry-After on 429 or 503 is honoured.
  backoff_base    = "1s"
  backoff_cap     = "30s"
  # One attempt's deadline (connect to last byte).
  attempt_timeout = "10s"
  # Attempts in flight at once (a slot is held only during an attempt, not while
  # waiting for the next), and how many of them one account may hold (so one
  # account's dead receiver cannot delay the others; default an eighth).
  concurrency         = 128
  account_concurrency = 16
}

dispatcher {
  # Unfinished jobs are re-read from Nomad this often even while the event stream is
  # healthy (it is a best-effort tail), and after every reconnect.
  reconcile_every = "15s"
  # One dispatcher leads (etcd election); a standby takes over about leader_ttl after
  # the leader dies. Run two or three for failover.
  leader_ttl = "10s"
  # A worker still alive this long past its job's timeout_seconds is stopped.
  timeout_grace = "60s"
  # A job whose Nomad node stopped heartbeating waits this long for the node to come
  # back (a network blip), then runs again elsewhere.
  disconnect_grace = "5m"
  # Where this dispatcher serves /metrics, /healthz and /readyz (etcd session, etcd
  # and Nomad reachable; leadership is not a condition). Unset (the default): none.
  # Set it on every dispatcher you monitor; the alerts in deploy/observability expect it.
  # listen = "127.0.0.1:9091"
}

# One pool per kind of hardware; a job picks one with "machine" (default "cpu").
pool "cpu" {
  # Nomad task driver. docker (production): each job runs in the worker image, with
  # ffmpeg in a container without network, as uid 65534. raw_exec: the runner runs
  # on the node as a process and starts ffmpeg under bubblewrap.
  driver = "docker"
  # docker: the worker image (deploy/worker/). Required for docker pools.
  image = "mediajobs-worker:local"
  # raw_exec only: "bwrap" (default) runs ffmpeg and ffprobe in a bubblewrap sandbox
  # (no network, uid 65534, only the job's files writable); "none" runs them
  # unsandboxed, for trusted commands only. Docker pools refuse the setting.
  # sandbox = "bwrap"
  # raw_exec: path of the mediajobs binary on the nodes (default: this binary's
  # path); docker: its path in the image (default /usr/local/bin/mediajobs).
  # runner_command = "/usr/local/bin/mediajobs"

  datacenters = ["*"]
  node_pool   = "default"

  # Nomad resources of one job: CPU in MHz, memory in MiB, ephemeral disk in MB (the
  # inputs, intermediate files and outputs live there; the runner stops a job that
  # outgrows it, since Nomad does not enforce it).
  cpu    = 1000
  memory = 1024
  disk   = 2048

  # Extra Nomad placement constraints on the pool's nodes (any number of blocks).
  # constraint {
  #   attribute = "$${meta.media}"
  #   operator  = "="
  #   value     = "yes"
  # }

  # GPU pools add a gpu block (see pool "nvidia" below); GPU codecs and filters
  # (*_nvenc, cuda, scale_npp, ...) are refused on pools without one.


  # timeout_seconds: the default when a job sets none, and the most a job may ask for.
  default_timeout = "1h"
  max_timeout     = "6h"

  # Nomad children of this pool in flight at once; the rest wait in the etcd queue,
  # first in first out, not as blocked evaluations in Nomad. -1: no cap.
  max_in_flight = 256

  # A dispatched job no node can run (constraints, missing devices, an empty node
  # pool) waits this long, with the reason in status_detail, then fails with that
  # reason. A job whose nodes are only busy waits for one, however long.
  queue_limit = "10m"

  # An allocation Nomad placed that has not started after this long (an image pull
  # or a client that hangs) counts as a lost worker: a new attempt.
  start_timeout = "10m"

  # Attempts of a job whose worker was lost or crashed (a failing command is never
  # retried).
  max_attempts = 3

  # Warm runners (docs/configuration.md, "Warm runners"): long-lived runners that take
  # the pool's short jobs without a Nomad dispatch each, as the service job
  # mediajobs-<pool>-warm. raw_exec pools with sandbox = "bwrap" only: a docker pool
  # such as this one refuses the block. Scale it in Nomad within min and max; the
  # dispatcher keeps the scaled count.
  # warm {
  #   count           = 2     # runners at first
  #   min             = 0
  #   max             = 10
  #   max_job_seconds = 120   # jobs with timeout_seconds up to this wait for a busy runner;
  #                           # others take a waiting one, or go to Nomad at once
  #   cpu             = 1000  # per runner; default the pool's cpu, memory, disk
  #   memory          = 1024
  #   disk            = 2048
  #   lease_ttl       = "10s" # a job whose runner stops renewing is retried after this
  #   reserve         = 1     # runners kept for jobs that fit max_job_seconds
  # }
}

# A GPU pool in production: docker with the NVIDIA runtime on nodes in the "gpu" node
# pool that run Nomad's nvidia device plugin.
pool "nvidia" {
  driver    = "docker"
  image     = "registry.example.com/mediajobs-worker-nvidia:1"
  node_pool = "gpu"
  cpu       = 2000
  memory    = 4096
  disk      = 20480

  gpu {
    count         = 1
    vendor        = "nvidia"
    min_memory_mb = 8000           # only GPUs with at least this much memory
    model         = "RTX|L4|A10G?$" # regular expression on the GPU model
    # Whether these GPUs have a video encoder (NVENC). Unset: not when model can
    # match a GPU without one (A100, A30, H100, H200, B200, ...: they decode but
    # cannot encode), else yes. On a pool that cannot, *_nvenc encoders are refused
    # at create; decoding (-hwaccel cuda, *_cuvid) and CUDA filters still run.
    # encode = true
  }

  constraint {
    attribute = "$${attr.kernel.name}"
    operator  = "="
    value     = "linux"
  }

  default_timeout = "1h"
  max_timeout     = "6h"
  queue_limit     = "10m"
}
