package cluster

import (
	"fmt"
	"path/filepath"
)

// nomadServer is the config of the one Nomad server. A client that stops
// heartbeating is noticed within seconds (the defaults take about half a minute),
// with enough slack that a busy 2-core machine does not disconnect a live one.
func nomadServer(dir, http, rpc, serf string) string {
	return fmt.Sprintf(`
name                 = "nomad-server"
disable_update_check = true
data_dir             = %q
bind_addr            = "127.0.0.1"
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = %s
  rpc  = %s
  serf = %s
}
server {
  enabled                = true
  bootstrap_expect       = 1
  heartbeat_grace        = "3s"
  min_heartbeat_ttl      = "2s"
  failover_heartbeat_ttl = "10s"
}
client {
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
`, filepath.Join(dir, "data"), http, rpc, serf)
}

// nomadClient is the config of a client agent: raw_exec (the runner sandboxes
// ffmpeg with bubblewrap), on loopback, with compute capped so that a few jobs
// run at a time per client and the rest queue, as on a real node.
func nomadClient(name, dir, http, rpc, serf, serverRPC string, cpu int) string {
	return fmt.Sprintf(`
name                 = %q
disable_update_check = true
data_dir             = %q
bind_addr            = "127.0.0.1"
advertise {
  http = "127.0.0.1"
  rpc  = "127.0.0.1"
  serf = "127.0.0.1"
}
ports {
  http = %s
  rpc  = %s
  serf = %s
}
client {
  enabled           = true
  servers           = ["127.0.0.1:%s"]
  network_interface = "lo"
  cpu_total_compute = %d
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
plugin "raw_exec" {
  config {
    enabled = true
  }
}
`, name, filepath.Join(dir, "data"), http, rpc, serf, serverRPC, cpu)
}
