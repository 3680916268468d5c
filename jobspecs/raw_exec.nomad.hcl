# mediajobs worker pool, raw_exec driver: one parameterized batch job per pool. The
# dispatcher fills the variables from the pool's config block and registers it; each
# mediajobs job is one dispatched child (meta mediajobs_job_id, payload = manifest).
#
# By hand:  nomad job run -var pool=cpu -var runner_command=/usr/local/bin/mediajobs raw_exec.nomad.hcl

variable "pool" {
  type        = string
  description = "mediajobs pool name; the Nomad job is called mediajobs-<pool>"
}

variable "runner_command" {
  type        = string
  description = "path of the mediajobs binary on the nodes"
}

variable "datacenters" {
  type    = list(string)
  default = ["*"]
}

variable "node_pool" {
  type    = string
  default = "default"
}

variable "cpu" {
  type        = number
  default     = 1000
  description = "MHz per job"
}

variable "memory" {
  type        = number
  default     = 1024
  description = "MiB per job"
}

variable "disk" {
  type        = number
  default     = 2048
  description = "MB of ephemeral disk per job"
}

variable "sandbox" {
  type        = string
  default     = "bwrap"
  description = "where ffmpeg runs: bwrap (bubblewrap: no network, uid 65534, only the job's files) or none (trusted commands only)"
}

variable "image" {
  type        = string
  default     = ""
  description = "unused by raw_exec (the docker jobspec runs it)"
}

variable "constraints" {
  type        = list(object({ attribute = string, operator = string, value = string }))
  default     = []
  description = "extra placement constraints on the pool's nodes"
}

variable "gpu_count" {
  type        = number
  default     = 0
  description = "NVIDIA GPUs per job (device nvidia/gpu); 0 for none"
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
job "mediajobs" {
  id          = "mediajobs-${var.pool}"
  name        = "mediajobs-${var.pool}"
  type        = "batch"
  datacenters = var.datacenters
  node_pool   = var.node_pool

  meta {
    mediajobs_pool = var.pool
  }

  dynamic "constraint" {
    for_each = var.constraints
    content {
      attribute = constraint.value.attribute
      operator  = constraint.value.operator
      value     = constraint.value.value
    }
  }

  parameterized {
    payload       = "required"
    meta_required = ["mediajobs_job_id", "mediajobs_attempt"]
  }

  group "ffmpeg" {
    # Each allocation's end is final: the dispatcher alone decides retries, so a
    # failing user command is never re-run by Nomad behind its back.
    restart {
      attempts = 0
      mode     = "fail"
    }

    reschedule {
      attempts  = 0
      unlimited = false
    }

    # Nomad replaces an allocation whose node is lost whatever the reschedule block
    # says (its scheduler never asks it for lost allocations). With lost_after, a node
    # that stops heartbeating is "disconnected" instead, its allocation "unknown", and
    # nothing is placed for an hour: the dispatcher, which gives up on an unknown
    # allocation after a few minutes, starts the next attempt as a new child and
    # stops this one, which stops when its node comes back. Should Nomad ever place
    # a replacement, the returning original is the one stopped.
    disconnect {
      lost_after = "1h"
      replace    = false
      reconcile  = "keep_replacement"
    }

    ephemeral_disk {
      size = var.disk
    }

    task "runner" {
      driver = "raw_exec"

      config {
        command = var.runner_command
        # The runner fetches and uploads; ffmpeg and ffprobe run under bubblewrap
        # (-sandbox bwrap): see docs/containment.md, "Containment".
        args = ["runner", "-sandbox", var.sandbox, "-manifest", "${NOMAD_TASK_DIR}/manifest.json"]
      }

      # The runner proves it runs this job with this workload identity
      # (${NOMAD_SECRETS_DIR}/nomad_mediajobs.jwt) when it asks for the job's
      # output_destinations: the payload's links alone do not get them.
      identity {
        name = "mediajobs"
        aud  = ["mediajobs"]
        ttl  = "1h"
        file = true
      }

      dispatch_payload {
        file = "manifest.json"
      }

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

      # ffmpeg's stderr tail is what the runner reports; keep the Nomad logs small.
      logs {
        max_files     = 2
        max_file_size = 10
      }
    }
  }
}
