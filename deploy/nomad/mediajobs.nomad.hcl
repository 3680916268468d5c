# The mediajobs control plane as a Nomad service job: gateways (the HTTP API, any
# number side by side) and dispatchers (one leads through an etcd election, the
# others stand by). Workers are not here: the leading dispatcher registers them as
# parameterized jobs (jobspecs/).
#
# Settings and secrets come from the Nomad Variable nomad/jobs/mediajobs, which this
# job's tasks can read with no ACL policy (Nomad grants a job its own nomad/jobs/<id>).
# The tasks wait until it exists. Items (docs/scaling.md, "On Nomad"):
#   required: signing_secret, public_url, etcd_endpoints (comma-separated), storage_url
#   optional: etcd_username, etcd_password, aws_access_key_id, aws_secret_access_key,
#             aws_region, nomad_addr, nomad_token, nomad_namespace,
#             pools (pool blocks; default: one docker "cpu" pool on var.worker_image),
#             extra (other blocks: webhooks, dispatcher)
#
#   nomad job run -var image=REGISTRY/mediajobs:VERSION deploy/nomad/mediajobs.nomad.hcl
#
# jobspecs/controlplane_test.go parses and plans this file on a real Nomad agent and
# runs it there, on docker and on raw_exec.

variable "image" {
  type        = string
  default     = "registry.example.com/mediajobs:1"
  description = "The control-plane image (deploy/Dockerfile): mediajobs, no ffmpeg."
}

variable "worker_image" {
  type        = string
  default     = "registry.example.com/mediajobs-worker:1"
  description = "The worker image of the default cpu pool, when the variable has no pools item."
}

variable "datacenters" {
  type    = list(string)
  default = ["*"]
}

variable "node_pool" {
  type    = string
  default = "default"
}

variable "gateway_count" {
  type    = number
  default = 2
}

variable "dispatcher_count" {
  type    = number
  default = 2
}

variable "gateway_cpu" {
  type    = number
  default = 500
}

variable "gateway_memory" {
  type    = number
  default = 512
}

variable "dispatcher_cpu" {
  type    = number
  default = 500
}

variable "dispatcher_memory" {
  type    = number
  default = 512
}

variable "wait_limit_seconds" {
  type        = number
  default     = 25
  description = "server.wait_limit: the longest POST /api/ffmpeg?wait=true. The gateway's kill_timeout follows it."
}

locals {
  # A stopping gateway closes its listener and finishes the requests it holds; the
  # longest is a ?wait=true, up to wait_limit. Nomad kills it after kill_timeout, so
  # that is wait_limit plus a margin for the create before the wait. (Clients cap
  # kill_timeout at their max_kill_timeout, 30s by default.)
  gateway_kill_timeout = "${var.wait_limit_seconds + 15}s"

  # The configuration both groups run with. The gateway listens on the port Nomad
  # gave it; the dispatcher has no port and keeps the default. A missing required
  # item renders an argument the config check refuses, and the line it prints says
  # what to put.
  config = <<-EOT
    {{ with nomadVar "nomad/jobs/mediajobs" -}}
    {{- $v := . -}}
    server {
    {{- with env "NOMAD_ADDR_http" }}
      listen = {{ toJSON . }}
    {{- end }}
    {{- with env "NOMAD_ADDR_metrics" }}
      metrics_listen = {{ toJSON . }}
    {{- end }}
    {{- with $v.public_url.Value }}
      public_url     = {{ toJSON . }}
    {{- else }}
      missing_public_url = "nomad var put nomad/jobs/mediajobs public_url=https://..."
    {{- end }}
      signing_secret = env("MEDIAJOBS_SIGNING_SECRET")
      wait_limit     = "${var.wait_limit_seconds}s"
    }

    etcd {
      embedded  = false
    {{- with $v.etcd_endpoints.Value }}
      endpoints = [{{ range $i, $e := split "," . }}{{ if $i }}, {{ end }}{{ $e | trimSpace | toJSON }}{{ end }}]
    {{- else }}
      missing_etcd_endpoints = "nomad var put nomad/jobs/mediajobs etcd_endpoints=http://etcd-1:2379,..."
    {{- end }}
    {{- with $v.etcd_username.Value }}
      username  = {{ toJSON . }}
      password  = env("ETCD_PASSWORD")
    {{- end }}
    }

    nomad {
    {{- with $v.nomad_addr.Value }}
      address   = {{ toJSON . }}
    {{- end }}
    {{- with $v.nomad_token.Value }}
      token     = env("MEDIAJOBS_NOMAD_TOKEN")
    {{- end }}
    {{- with $v.nomad_namespace.Value }}
      namespace = {{ toJSON . }}
    {{- end }}
    }

    storage {
    {{- with $v.storage_url.Value }}
      url = {{ toJSON . }}
    {{- else }}
      missing_storage_url = "nomad var put nomad/jobs/mediajobs storage_url=s3://BUCKET?region=..."
    {{- end }}
    }

    {{ with $v.pools.Value }}{{ . }}{{ else -}}
    pool "cpu" {
      driver = "docker"
      image  = "${var.worker_image}"
    }
    {{- end }}

    {{ with $v.extra.Value }}{{ . }}{{ end }}
    {{- end }}
  EOT

  # Secrets reach the process as environment variables, never in the config file.
  secrets = <<-EOT
    {{ with nomadVar "nomad/jobs/mediajobs" -}}
    MEDIAJOBS_SIGNING_SECRET={{ .signing_secret.Value | toJSON }}
    {{ with .etcd_password.Value }}ETCD_PASSWORD={{ toJSON . }}{{ end }}
    {{ with .nomad_token.Value }}MEDIAJOBS_NOMAD_TOKEN={{ toJSON . }}{{ end }}
    {{ with .aws_access_key_id.Value }}AWS_ACCESS_KEY_ID={{ toJSON . }}{{ end }}
    {{ with .aws_secret_access_key.Value }}AWS_SECRET_ACCESS_KEY={{ toJSON . }}{{ end }}
    {{ with .aws_region.Value }}AWS_REGION={{ toJSON . }}{{ end }}
    {{- end }}
  EOT
}

job "mediajobs" {
  type        = "service"
  datacenters = var.datacenters
  node_pool   = var.node_pool

  update {
    max_parallel     = 1
    min_healthy_time = "10s"
    healthy_deadline = "3m"
    auto_revert      = true
  }

  group "gateway" {
    count = var.gateway_count

    # /metrics is served on its own port only, never on the public one.
    network {
      port "http" {}
      port "metrics" {}
    }

    # Deregister the service first so whatever routes by it stops sending new
    # requests before the process is told to stop.
    shutdown_delay = "5s"

    update {
      health_check = "checks"
    }

    service {
      name     = "mediajobs-gateway"
      provider = "nomad"
      port     = "http"

      # /readyz answers 200 while etcd is reachable (2s deadline), 503 otherwise:
      # a gateway that cannot reach etcd is taken out of the service.
      check {
        name     = "readyz"
        type     = "http"
        path     = "/readyz"
        interval = "10s"
        timeout  = "3s"
      }
    }

    # Prometheus finds the gateways' /metrics by this service (nomad_sd_configs).
    service {
      name     = "mediajobs-gateway-metrics"
      provider = "nomad"
      port     = "metrics"
    }

    task "gateway" {
      driver = "docker"

      config {
        image = var.image
        # The process binds the address Nomad registers for the service: no NAT, and
        # it works on Docker hosts without a bridge network.
        network_mode = "host"
        cap_drop     = ["ALL"]
        args         = ["gateway", "-config", "${NOMAD_TASK_DIR}/mediajobs.hcl"]
      }

      kill_signal  = "SIGTERM"
      kill_timeout = local.gateway_kill_timeout

      template {
        data        = local.config
        destination = "local/mediajobs.hcl"
        # Staggered, so a changed variable does not restart every gateway at once.
        change_mode = "restart"
        splay       = "30s"
      }

      template {
        data        = local.secrets
        destination = "secrets/mediajobs.env"
        env         = true
        change_mode = "restart"
        splay       = "30s"
      }

      resources {
        cpu    = var.gateway_cpu
        memory = var.gateway_memory
      }
    }
  }

  group "dispatcher" {
    count = var.dispatcher_count

    update {
      health_check = "task_states"
    }

    task "dispatcher" {
      driver = "docker"

      config {
        image        = var.image
        network_mode = "host"
        cap_drop     = ["ALL"]
        args         = ["dispatcher", "-config", "${NOMAD_TASK_DIR}/mediajobs.hcl"]
      }

      # The Nomad API through the local agent's Task API socket, authenticated with
      # the task's workload identity; nomad_addr and nomad_token in the variable
      # override both. With ACLs on, the identity needs a policy (docs/scaling.md).
      identity {
        env = true
      }

      env {
        NOMAD_ADDR = "unix://${NOMAD_SECRETS_DIR}/api.sock"
      }

      # On SIGTERM the leader stops its loops and resigns, so a standby takes over at
      # once rather than after dispatcher.leader_ttl; a webhook attempt in flight has
      # webhooks.attempt_timeout (10s) to end.
      kill_signal  = "SIGTERM"
      kill_timeout = "20s"

      template {
        data        = local.config
        destination = "local/mediajobs.hcl"
        change_mode = "restart"
      }

      template {
        data        = local.secrets
        destination = "secrets/mediajobs.env"
        env         = true
        change_mode = "restart"
      }

      resources {
        cpu    = var.dispatcher_cpu
        memory = var.dispatcher_memory
      }
    }
  }
}
