package dispatcher

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	mj "github.com/mediajobs/mediajobs"
	"github.com/mediajobs/mediajobs/blob"
	"github.com/mediajobs/mediajobs/config"
	"github.com/mediajobs/mediajobs/netguard"
)

// TestWebhookAllowCIDRs: a receiver inside server.allow_cidrs gets its webhook,
// one outside does not. On loopback aliases with allow_loopback off: 127.0.0.2
// plays a listed internal host, 127.0.0.3 an unlisted one.
func TestWebhookAllowCIDRs(t *testing.T) {
	receiver := func(addr string) string {
		ln, err := net.Listen("tcp", addr+":0")
		if err != nil {
			t.Skipf("cannot listen on %s: %v", addr, err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(204) }))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		return srv.URL
	}
	listed, unlisted := receiver("127.0.0.2"), receiver("127.0.0.3")
	guard, err := netguard.NewPolicy(false, []string{"127.0.0.2/32"}, nil)
	if err != nil {
		t.Fatal(err)
	}
	w := &WebhookSender{Base: 10 * time.Millisecond, Cap: 20 * time.Millisecond, AttemptTimeout: 2 * time.Second, Guard: guard}
	if d := w.Send(context.Background(), Message{URL: listed + "/hook", Event: "job.succeeded", DeliveryID: "d1", Body: []byte(`{}`)}); d.Err != nil || d.LastStatus != 204 {
		t.Fatalf("listed receiver: %+v", d)
	}
	d := w.Send(context.Background(), Message{URL: unlisted + "/hook", Event: "job.succeeded", DeliveryID: "d2", Body: []byte(`{}`)})
	if d.Err == nil || !strings.Contains(d.Err.Error(), "loopback") {
		t.Fatalf("unlisted receiver: %+v", d)
	}
}

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
