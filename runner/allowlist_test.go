package runner

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	mj "github.com/mediajobs/mediajobs"
)

// TestFetchHonoursAllowCIDRs: the manifest carries server.allow_cidrs, and the
// runner's guarded transport lets inputs come from the listed range only. All on
// loopback aliases with allow_loopback off: 127.0.0.2 plays an internal host that
// allow_cidrs lists, 127.0.0.3 one it does not.
func TestFetchHonoursAllowCIDRs(t *testing.T) {
	serve := func(addr string) string {
		ln, err := net.Listen("tcp", addr+":0")
		if err != nil {
			t.Skipf("cannot listen on %s: %v", addr, err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.Write([]byte("from " + addr)) }))
		srv.Listener.Close()
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		return srv.URL
	}
	listed, unlisted := serve("127.0.0.2"), serve("127.0.0.3")
	m := mj.Manifest{
		InputFiles:     map[string]string{"a": listed + "/a.wav"},
		OutputNames:    []string{"o.wav"},
		FFmpegCommands: []string{"-i {{a}} {{o.wav}}"},
		UploadURL:      "http://127.0.0.1:1/up/%7Bpath%7D?sig=ok",
		AllowCIDRs:     []string{"127.0.0.2/32"},
	}
	r := &Runner{WorkDir: t.TempDir()}
	if st := r.Fetch(context.Background(), &m); st.Failed {
		t.Fatalf("listed range: %s", st.Error)
	}
	if b, _ := os.ReadFile(filepath.Join(r.WorkDir, "inputs", "a")); string(b) != "from 127.0.0.2" {
		t.Fatalf("fetched %q", b)
	}
	m.InputFiles["a"] = unlisted + "/a.wav"
	if st := (&Runner{WorkDir: t.TempDir()}).Fetch(context.Background(), &m); !st.Failed || !strings.Contains(st.Error, "loopback") {
		t.Fatalf("unlisted 127.0.0.3: failed=%v %q, want refused", st.Failed, st.Error)
	}
}
