package server

import (
	"encoding/pem"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	"github.com/mediajobs/mediajobs/config"
)

// The dispatcher's bounded Nomad client keeps the TLS settings of Nomad's own
// environment (NOMAD_CACERT here): on a TLS cluster every call but the event
// stream would otherwise fail its handshake.
func TestDispatcherNomadCallsUseNomadTLS(t *testing.T) {
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		io.WriteString(w, "[]")
	}))
	defer srv.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	t.Setenv("NOMAD_CACERT", ca)
	cfg := config.Default()
	cfg.Nomad.Address = srv.URL
	if err := cfg.Finish(); err != nil {
		t.Fatal(err)
	}
	d, err := (&Backends{Config: cfg}).Dispatcher(slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := d.Jobs.List(nil); err != nil {
		t.Fatalf("a Nomad call over TLS with NOMAD_CACERT: %v", err)
	}
}
