package config

import (
	"slices"
	"strings"
	"testing"
)

// The control plane is what the config names (Nomad, etcd, the listeners,
// control_plane), and destinations have their own allow lists, checked where
// they are written.
func TestControlPlaneAndDestinationLists(t *testing.T) {
	src := "server {\n  listen = \":8080\"\n  metrics_listen = \"127.0.0.1:9100\"\n  public_url = \"https://api.example\"\n" +
		"  destination_allow_cidrs = [\"10.9.0.0/16\"]\n  destination_allow_hosts = [\"minio.internal\"]\n  control_plane = [\"consul.internal:8500\"]\n}\n" +
		"etcd {\n  embedded = false\n  endpoints = [\"http://etcd-1.internal:2379\"]\n}\n" +
		"nomad {\n  address = \"http://nomad.internal:4646\"\n}\n"
	c, err := Parse([]byte(src), "cp.hcl")
	if err != nil {
		t.Fatal(err)
	}
	cp := c.ControlPlane()
	for _, want := range []string{"http://nomad.internal:4646", "http://etcd-1.internal:2379", ":8080", "127.0.0.1:9100", "https://api.example", "consul.internal:8500"} {
		if !slices.Contains(cp, want) {
			t.Errorf("control plane %v lacks %s", cp, want)
		}
	}
	g, d := c.Guard(), c.DestinationGuard()
	if len(d.AllowCIDRs) != 1 || len(d.AllowHosts) != 1 || len(g.AllowCIDRs) != 0 || d.AllowLoopback || d.Control == nil || g.Control != d.Control {
		t.Fatalf("guard %+v, destination guard %+v", g, d)
	}
	for _, bad := range []string{
		"server {\n  destination_allow_cidrs = [\"10.0.0.1/8\"]\n}\n",
		"server {\n  destination_allow_hosts = [\"http://x\"]\n}\n",
		"server {\n  control_plane = [\"consul.internal\"]\n}\n",
	} {
		if _, err := Parse([]byte(bad), "bad.hcl"); err == nil || !strings.Contains(err.Error(), "bad.hcl:2") {
			t.Errorf("%q: %v", bad, err)
		}
	}
}
