package cluster

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// nomadServer is the config of Nomad server i of len(serfs) (their serf
// addresses, to find each other: at start, and when a killed one comes back). A
// client that stops heartbeating is noticed within seconds (the defaults take
// about half a minute), with enough slack that a busy 2-core machine does not
// disconnect a live one.
func nomadServer(i int, dir, http, rpc, serf string, serfs []string) string {
	return fmt.Sprintf(`
name                 = "nomad-server%d"
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
  bootstrap_expect       = %d
  heartbeat_grace        = "3s"
  min_heartbeat_ttl      = "2s"
  failover_heartbeat_ttl = "10s"
  server_join {
    retry_join     = [%s]
    retry_interval = "2s"
  }
}
client {
  options {
    "fingerprint.denylist" = "env_aws,env_gce,env_azure,env_digitalocean"
  }
}
`, i+1, filepath.Join(dir, "data"), http, rpc, serf, len(serfs), quoted(serfs))
}

// quoted is an HCL list's items.
func quoted(ss []string) string {
	q := make([]string, len(ss))
	for i, s := range ss {
		q[i] = strconv.Quote(s)
	}
	return strings.Join(q, ", ")
}

// nomadClient is the config of a client agent: raw_exec (the runner sandboxes
// ffmpeg with bubblewrap), on loopback, with compute capped so that a few jobs
// run at a time per client and the rest queue, as on a real node. It knows
// every server (their RPC addresses), and goes to another when one dies.
func nomadClient(name, dir, http, rpc, serf string, serverRPCs []string, cpu int) string {
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
  servers           = [%s]
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
`, name, filepath.Join(dir, "data"), http, rpc, serf, quoted(serverRPCs), cpu)
}
