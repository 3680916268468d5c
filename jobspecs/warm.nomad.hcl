# mediajobs warm runners of one pool: a service job beside the pool's parameterized
# batch job (mediajobs-<pool>). Each allocation is a long-lived `mediajobs runner -warm`
# that leases the pool's short jobs from the mediajobs control plane over HTTP and runs
# them one at a time under bubblewrap, so a short job starts without a Nomad dispatch
# of its own. The jobs themselves do not show here: see the mediajobs dashboard or API.
#
# The dispatcher registers it from the pool's warm block (docs/configuration.md) and
# stops it when the block or the pool is removed. Scale it freely (nomad job scale, the
# UI, an autoscaler) within the scaling block's min and max: the dispatcher re-registers
# it keeping the scaled count. Stopping an allocation is safe: its runner finishes or
# hands back its job on SIGINT.
#
# By hand:  nomad job run -var pool=cpu -var runner_command=/usr/local/bin/mediajobs \
#             -var control_url=https://mediajobs.example.com warm.nomad.hcl

variable "pool" {
  type        = string
  description = "mediajobs pool name; the Nomad job is called mediajobs-<pool>-warm"
}

variable "runner_command" {
  type        = string
  description = "path of the mediajobs binary on the nodes"
}

variable "control_url" {
  type        = string
  description = "the mediajobs gateway the runners lease jobs from (server.public_url)"
}

variable "datacenters" {
  type    = list(string)
  default = ["*"]
}

variable "node_pool" {
  type    = string
  default = "default"
}

variable "count" {
  type        = number
  default     = 2
  description = "runners at first registration; a scaled count is kept after"
}

variable "min" {
  type        = number
  default     = 0
  description = "fewest runners scaling may leave"
}

variable "max" {
  type        = number
  default     = 10
  description = "most runners scaling may start"
}

variable "cpu" {
  type        = number
  default     = 1000
  description = "MHz per runner"
}

variable "memory" {
  type        = number
  default     = 1024
  description = "MiB per runner"
}

variable "disk" {
  type        = number
  default     = 2048
  description = "MB of ephemeral disk per runner (one job's files at a time)"
}

variable "sandbox" {
  type        = string
  default     = "bwrap"
  description = "where ffmpeg runs: bwrap (bubblewrap: no network, uid 65534, only the job's files)"
}

variable "constraints" {
  type        = list(object({ attribute = string, operator = string, value = string }))
  default     = []
  description = "extra placement constraints on the pool's nodes"
}

variable "gpu_count" {
  type        = number
  default     = 0
  description = "NVIDIA GPUs per runner (device nvidia/gpu); 0 for none"
}

variable "gpu_min_memory_mb" {
  type    = number
  default = 0
}

variable "gpu_model" {
  type        = string
  default     = ""
  description = "regular expression the GPU model must match; empty for any"
}

# A block label cannot hold a template, so the ID comes from the pool here.
job "mediajobs-warm" {
  id          = "mediajobs-${var.pool}-warm"
  name        = "mediajobs-${var.pool}-warm"
  type        = "service"
  datacenters = var.datacenters
  node_pool   = var.node_pool

  meta {
    mediajobs_pool = var.pool
    mediajobs_role = "warm-runner"
    # The service the runners lease from: a dispatcher stops only its own.
    mediajobs_control = var.control_url
  }

  dynamic "constraint" {
    for_each = var.constraints
    content {
      attribute = constraint.value.attribute
      operator  = constraint.value.operator
      value     = constraint.value.value
    }
  }

  group "warm" {
    count = var.count

    # Bounds for nomad job scale and an autoscaler; no policy of its own.
    scaling {
      enabled = true
      min     = var.min
      max     = var.max
    }

    # A runner that exits (the control plane unreachable for long, a crash) is
    # started again; the job it held is retried by the control plane once its
    # lease runs out, not by Nomad.
    restart {
      attempts = 10
      interval = "5m"
      delay    = "2s"
      mode     = "delay"
    }

    ephemeral_disk {
      size = var.disk
    }

    task "runner" {
      driver = "raw_exec"

      config {
        command = var.runner_command
        # The runner leases, fetches and uploads; ffmpeg and ffprobe run under
        # bubblewrap: see docs/containment.md, "Containment".
        args = ["runner", "-warm", "-pool", var.pool, "-control", var.control_url, "-sandbox", var.sandbox]
      }

      # The runner authenticates to the control plane with this workload identity
      # (${NOMAD_SECRETS_DIR}/nomad_mediajobs.jwt), renewed by Nomad before it expires.
      identity {
        name = "mediajobs"
        aud  = ["mediajobs"]
        ttl  = "1h"
        file = true
      }

      # On SIGINT the runner stops leasing and finishes or hands back its job.
      kill_signal  = "SIGINT"
      kill_timeout = "30s"

      resources {
        cpu    = var.cpu
        memory = var.memory

        dynamic "device" {
          for_each = var.gpu_count > 0 ? [var.gpu_count] : []
          iterator = gpu
          labels   = ["nvidia/gpu"]
          content {
            count = gpu.value

            dynamic "constraint" {
              for_each = var.gpu_min_memory_mb > 0 ? [var.gpu_min_memory_mb] : []
              content {
                attribute = "$${device.attr.memory}"
                operator  = ">="
                value     = "${constraint.value} MiB"
              }
            }

            dynamic "constraint" {
              for_each = var.gpu_model != "" ? [var.gpu_model] : []
              content {
                attribute = "$${device.model}"
                operator  = "regexp"
                value     = constraint.value
              }
            }
          }
        }
      }

      # Each job's ffmpeg stderr tail is what the runner reports; keep the Nomad
      # logs small.
      logs {
        max_files     = 2
        max_file_size = 10
      }
    }
  }
}
