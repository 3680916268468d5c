package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	mj "github.com/mediajobs/mediajobs"
)

func openTemp(t *testing.T, content string) *os.File {
	t.Helper()
	p := filepath.Join(t.TempDir(), "out.mp4")
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { f.Close() })
	return f
}

func TestToDestination(t *testing.T) {
	const sig = "5ec2e7515ec2e7515ec2e751"
	var got atomic.Value
	var hits atomic.Int32
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer other.Close()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/b/ok.mp4":
			b, _ := io.ReadAll(r.Body)
			got.Store(string(b))
		case "/b/moved.mp4":
			http.Redirect(w, r, other.URL+"/x", http.StatusTemporaryRedirect)
		default: // AWS quotes the signature it got in its refusal
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, `<?xml version="1.0" encoding="UTF-8"?><Error><Code>SignatureDoesNotMatch</Code><Message>The request signature we calculated does not match the signature you provided.</Message><SignatureProvided>`+sig+`</SignatureProvided></Error>`)
		}
	}))
	defer srv.Close()
	m := &mj.Manifest{DestAllowLoopback: true}
	ctx := context.Background()

	d, err := toDestination(ctx, m, openTemp(t, "hello"), 5, srv.URL+"/b/ok.mp4?X-Amz-Signature="+sig)
	sum := sha256.Sum256([]byte("hello"))
	if err != nil || got.Load() != "hello" || d.SHA256 != hex.EncodeToString(sum[:]) || d.HTTPStatus != 200 || d.URL != srv.URL+"/b/ok.mp4" || d.Status != "uploaded" {
		t.Fatalf("delivery %+v, %v; the destination got %v", d, err, got.Load())
	}

	_, err = toDestination(ctx, m, openTemp(t, "hello"), 5, srv.URL+"/b/refused.mp4?X-Amz-Signature="+sig)
	if err == nil || !strings.Contains(err.Error(), "HTTP 403") || !strings.Contains(err.Error(), "SignatureDoesNotMatch: The request signature") ||
		!strings.Contains(err.Error(), srv.URL+"/b/refused.mp4") || strings.Contains(err.Error(), sig) {
		t.Fatalf("refusal: %v", err)
	}

	_, err = toDestination(ctx, m, openTemp(t, "hello"), 5, srv.URL+"/b/moved.mp4?X-Amz-Signature="+sig)
	if err == nil || !strings.Contains(err.Error(), "HTTP 307") || hits.Load() != 0 {
		t.Fatalf("redirect: %v (followed %d times)", err, hits.Load())
	}

	// Loopback is refused unless destinations' own list allows it
	// (server.destination_allow_loopback); the inputs' lists never do.
	for _, m := range []*mj.Manifest{{}, {AllowLoopback: true, AllowCIDRs: []string{"127.0.0.0/8"}}} {
		_, err = toDestination(ctx, m, openTemp(t, "hello"), 5, srv.URL+"/b/ok.mp4?X-Amz-Signature="+sig)
		if err == nil || strings.Contains(err.Error(), sig) || !strings.Contains(err.Error(), "loopback") {
			t.Fatalf("a loopback destination under %+v: %v", m, err)
		}
	}
}

// A destination never reaches the service's own control plane, whatever the
// allow lists say: a PUT to a Nomad agent's /v1/jobs would register a job. A
// stand-in listens where the manifest says the control plane is, and on
// Nomad's well-known port when that is free; it must see no request.
func TestDestinationNeverReachesTheControlPlane(t *testing.T) {
	var hits atomic.Int32
	handler := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) })
	named := httptest.NewServer(handler) // an endpoint the config names (nomad.address, say)
	defer named.Close()
	servers := []string{named.URL}
	if ln, err := net.Listen("tcp", "127.0.0.1:4646"); err == nil { // a Nomad agent beside the runner
		wellKnown := httptest.NewUnstartedServer(handler)
		wellKnown.Listener.Close()
		wellKnown.Listener = ln
		wellKnown.Start()
		defer wellKnown.Close()
		servers = append(servers, wellKnown.URL)
	}
	_, port, _ := net.SplitHostPort(strings.TrimPrefix(named.URL, "http://"))
	m := &mj.Manifest{DestAllowLoopback: true, DestAllowCIDRs: []string{"127.0.0.0/8"}, AllowLoopback: true,
		ControlPlane: []string{named.URL}}
	ctx := context.Background()
	for _, base := range servers {
		for _, u := range []string{base + "/v1/jobs", strings.Replace(base, "127.0.0.1", "localhost", 1) + "/v1/jobs",
			strings.Replace(base, "127.0.0.1", "127.0.0.2", 1) + "/v1/jobs", strings.Replace(base, "127.0.0.1", "[::ffff:127.0.0.1]", 1) + "/v1/jobs"} {
			_, err := toDestination(ctx, m, openTemp(t, `{"Job":{}}`), 10, u)
			if err == nil || !strings.Contains(err.Error(), "control plane") {
				t.Errorf("destination %s: %v", u, err)
			}
		}
	}
	// Inputs too: an input naming the control plane fails the job with that reason.
	r := &Runner{WorkDir: t.TempDir(), Log: io.Discard}
	st := r.Fetch(ctx, &mj.Manifest{AllowLoopback: true, ControlPlane: []string{"127.0.0.1:" + port},
		InputFiles: map[string]string{"j": named.URL + "/v1/jobs"}, OutputNames: []string{"o.json"},
		FFmpegCommands: []string{"-f data -i inputs/j -map 0 -c copy -f data outputs/o.json"}})
	if st.Error == "" || !strings.Contains(st.Error, "control plane") {
		t.Errorf("an input naming the control plane: %q", st.Error)
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("the control plane got %d requests", n)
	}
}
