// Package cluster holds the end-to-end tests that run installations of their own
// (e2e.NewCluster: etcd, a gateway, `mediajobs dispatcher` processes they kill
// and restart; MinIO, Docker) on one Nomad agent shared by all of them.
package cluster

import (
	"flag"
	"os"
	"testing"

	"github.com/mediajobs/mediajobs/e2e"
)

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(e2e.Main(m, e2e.Options{}))
}
