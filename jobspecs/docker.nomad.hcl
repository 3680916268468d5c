# mediajobs worker pool, docker driver: one parameterized batch job per pool. The
# dispatcher fills the variables from the pool's config block and registers it; each
# mediajobs job is one dispatched child (meta mediajobs_job_id, payload = manifest).
#
# One allocation, four tasks sharing the allocation directory (/alloc/work):
#   fetch     prestart   network: host  downloads the inputs; with its workload identity,
#                                       gets the destinations ticket for upload
#   runner    main       network: none  runs ffmpeg (read-only root, only /alloc writable);
#                                       no manifest: nothing it can read holds a signed link
#   progress  sidecar    network: host  posts the progress file the runner writes
#   upload    poststop   network: host  uploads the outputs and the result
# ffmpeg itself can reach nothing: not the network, not the host's loopback. Every
# task runs as uid/gid 65534 without capabilities.
#
# By hand:  nomad job run -var pool=cpu -var image=mediajobs-worker:local docker.nomad.hcl

variable "pool" {
  type        = string
  description = "mediajobs pool name; the Nomad job is called mediajobs-<pool>"
}

variable "runner_command" {
  type        = string
  default     = "/usr/local/bin/mediajobs"
  description = "path of the mediajobs binary in the image"
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
  default     = ""
  description = "unused by docker pools: the container is ffmpeg's sandbox"
}

variable "user" {
  type        = string
  default     = "65534:65534"
  description = "uid:gid every task runs as (the worker image's USER too)"
}

variable "image" {
  type        = string
  description = "the worker image: ffmpeg, ffprobe and /usr/local/bin/mediajobs"
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

    task "fetch" {
      driver = "docker"
      user   = var.user

      lifecycle {
        hook    = "prestart"
        sidecar = false
      }

      config {
        image           = var.image
        command         = var.runner_command
        args            = ["runner", "-phase", "fetch", "-sandbox", "container", "-manifest", "${NOMAD_TASK_DIR}/manifest.json", "-workdir", "${NOMAD_ALLOC_DIR}/work"]
        network_mode    = "host"
        readonly_rootfs = true
        cap_drop        = ["all"]
        security_opt    = ["no-new-privileges"]
      }

      # The job's output_destinations go only to the allocation running it. The
      # upload task (poststop) gets no identity from Nomad, which stops renewing
      # them when the main task ends; this task proves the allocation with its own
      # (${NOMAD_SECRETS_DIR}/nomad_mediajobs.jwt, out of ffmpeg's container) and
      # leaves upload a ticket that is no key without the payload's links.
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
        cpu    = 100
        memory = 128
      }
    }

    task "runner" {
      driver = "docker"
      user   = var.user

      config {
        image           = var.image
        command         = var.runner_command
        # No -manifest and no dispatch_payload: exec reads what fetch left in the
        # work directory without any signed link (ffmpeg can read all this task can).
        args            = ["runner", "-phase", "exec", "-sandbox", "container", "-workdir", "${NOMAD_ALLOC_DIR}/work"]
        network_mode    = "none"
        readonly_rootfs = true
        runtime         = var.gpu_count > 0 ? "nvidia" : null
        # ffmpeg runs the user's command: no capabilities, no privilege gain
        # through setuid files, and a bound on processes and threads.
        cap_drop     = ["all"]
        security_opt = ["no-new-privileges"]
        pids_limit   = 1024
      }

      env {
        HOME                       = "${NOMAD_ALLOC_DIR}/work"
        NVIDIA_DRIVER_CAPABILITIES = "compute,video,utility"
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

      logs {
        max_files     = 2
        max_file_size = 10
      }
    }

    task "progress" {
      driver = "docker"
      user   = var.user

      lifecycle {
        hook    = "poststart"
        sidecar = true
      }

      config {
        image           = var.image
        command         = var.runner_command
        args            = ["runner", "-phase", "progress", "-sandbox", "container", "-manifest", "${NOMAD_TASK_DIR}/manifest.json", "-workdir", "${NOMAD_ALLOC_DIR}/work"]
        network_mode    = "host"
        readonly_rootfs = true
        cap_drop        = ["all"]
        security_opt    = ["no-new-privileges"]
      }

      dispatch_payload {
        file = "manifest.json"
      }

      resources {
        cpu    = 50
        memory = 64
      }
    }

    task "upload" {
      driver = "docker"
      user   = var.user

      lifecycle {
        hook = "poststop"
      }

      config {
        image           = var.image
        command         = var.runner_command
        args            = ["runner", "-phase", "upload", "-sandbox", "container", "-manifest", "${NOMAD_TASK_DIR}/manifest.json", "-workdir", "${NOMAD_ALLOC_DIR}/work"]
        network_mode    = "host"
        readonly_rootfs = true
        cap_drop        = ["all"]
        security_opt    = ["no-new-privileges"]
      }

      dispatch_payload {
        file = "manifest.json"
      }

      resources {
        cpu    = 100
        memory = 128
      }
    }
  }
}
