package dispatcher

import (
	"context"
	"encoding/json"
	"testing"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
)

// TestManifestCarriesAllowLists: runners get server.allow_cidrs and allow_hosts
// with the job, as they get allow_loopback.
func TestManifestCarriesAllowLists(t *testing.T) {
	cfg := config.Default()
	cfg.Server.AllowCIDRs = []string{"10.1.0.0/16"}
	cfg.Server.AllowHosts = []string{"minio.internal"}
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	blobs, _ := blob.NewLocal(t.TempDir())
	d := &Dispatcher{Config: cfg, Blobs: blobs, Signer: blob.Signer{Secret: []byte("0123456789abcdef"), Base: "http://x"}}
	b, err := d.manifest(context.Background(), &mj.Job{ID: "j", Machine: "cpu", TimeoutSeconds: 60}, 1)
	if err != nil {
		t.Fatal(err)
	}
	var m mj.Manifest
	json.Unmarshal(b, &m)
	if len(m.AllowCIDRs) != 1 || m.AllowCIDRs[0] != "10.1.0.0/16" || len(m.AllowHosts) != 1 || m.AllowHosts[0] != "minio.internal" {
		t.Fatalf("manifest %s", b)
	}
}
