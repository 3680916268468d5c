package runner

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"io"
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
	m := &mj.Manifest{AllowLoopback: true}
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

	// Loopback is refused unless the server allows it (server.allow_loopback).
	_, err = toDestination(ctx, &mj.Manifest{}, openTemp(t, "hello"), 5, srv.URL+"/b/ok.mp4?X-Amz-Signature="+sig)
	if err == nil || strings.Contains(err.Error(), sig) || !strings.Contains(err.Error(), "loopback") {
		t.Fatalf("a loopback destination without allow_loopback: %v", err)
	}
}
