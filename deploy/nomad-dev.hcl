# Extra configuration for `nomad agent -dev` used by `make run`.

# No phoning home: the update check resolves checkpoint-api.hashicorp.com.
disable_update_check = true

client {
  options {
    # The cloud fingerprinters probe 169.254.169.254 (off limits, and env_aws can abort
    # the agent on machines without a metadata service).
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}

plugin "raw_exec" {
  config {
    enabled = true
  }
}

# The worker image (make docker) is built on this machine and cannot be pulled
# again: the docker driver must not remove it 3 minutes after its last task.
plugin "docker" {
  config {
    gc {
      image = false
    }
  }
}
