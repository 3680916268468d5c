# A Nomad Autoscaler policy for a warm pool's runners (docs/warm.md): it keeps
# the warm job `mediajobs-cpu-warm` about 80% busy, counting the jobs waiting in
# the pool's dispatch queue as work for it. Load it as a file policy (the
# autoscaler agent's `policy { dir = "..." }`), with the `prometheus` APM plugin
# pointed at the Prometheus that scrapes the dispatchers (docs/operations.md).
# mediajobs itself never scales anything: this is Nomad's job.
#
# Rename the pool in the queries and the target for another pool; keep min and
# max within the warm block's (Nomad refuses a count outside the job's scaling
# block).

scaling "mediajobs_cpu_warm" {
  enabled = true
  min     = 1
  max     = 10

  policy {
    cooldown            = "1m"
    evaluation_interval = "15s"

    # Demand over supply: busy runners plus queued jobs, over all runners. With
    # target-value, the new count is count × value / target: more runners while
    # jobs queue, fewer while most runners wait.
    check "demand" {
      source = "prometheus"
      query  = <<-EOQ
        (sum(mediajobs_warm_runners_busy{pool="cpu"}) + sum(mediajobs_jobs_queued{pool="cpu"}))
        /
        clamp_min(sum(mediajobs_warm_runners_busy{pool="cpu"}) + sum(mediajobs_warm_runners_idle{pool="cpu"}), 1)
      EOQ

      strategy "target-value" {
        target = 0.8
      }
    }

    target "nomad" {
      Namespace = "default"
      Job       = "mediajobs-cpu-warm"
      Group     = "warm"
    }
  }
}
