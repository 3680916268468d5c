package logging

import (
	"bytes"
	"encoding/json"
	"errors"
	"log/slog"
	"strings"
	"testing"
	"time"

	"go.uber.org/zap"
)

func TestNewAndReconfigure(t *testing.T) {
	var buf bytes.Buffer
	log := New(&buf, FormatText, slog.LevelInfo)
	log.Debug("hidden")
	log.Info("shown", "k", "v")
	if s := buf.String(); strings.Contains(s, "hidden") || !strings.Contains(s, "msg=shown k=v") {
		t.Fatalf("text log %q", s)
	}
	buf.Reset()
	log = Reconfigure(log, FormatJSON, slog.LevelDebug)
	log.Debug("now shown", "k", 1)
	var m map[string]any
	if err := json.Unmarshal(buf.Bytes(), &m); err != nil || m["msg"] != "now shown" || m["k"] != float64(1) {
		t.Fatalf("json log %q: %v", buf.String(), err)
	}
	// A log made elsewhere, or one derived with attributes, is left as it is.
	other := slog.New(slog.NewTextHandler(&buf, nil))
	if Reconfigure(other, FormatJSON, slog.LevelDebug) != other {
		t.Fatal("Reconfigure replaced a log it did not make")
	}
	with := log.With("a", 1)
	if Reconfigure(with, FormatText, slog.LevelDebug) != with {
		t.Fatal("Reconfigure dropped a derived log's attributes")
	}
	if _, err := ParseLevel("loud"); err == nil {
		t.Fatal("ParseLevel accepted loud")
	}
}

func TestZapIntoSlog(t *testing.T) {
	var buf bytes.Buffer
	z := Zap(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelInfo}))).Named("etcd-client")
	z.Info("chatter")
	z.Debug("more chatter")
	z.With(zap.String("endpoint", "127.0.0.1:2379")).Warn("retrying of unary invoker failed",
		zap.Error(errors.New("rpc error: code = Unavailable")), zap.Int("attempt", 3), zap.Duration("took", 2*time.Second))
	z.Error("lost leader")
	z.Warn("retrying of unary invoker failed", zap.Error(errors.New("rpc error: code = Canceled desc = context canceled")))
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want the warn and error lines only, got:\n%s", buf.String())
	}
	var w, e map[string]any
	json.Unmarshal([]byte(lines[0]), &w)
	json.Unmarshal([]byte(lines[1]), &e)
	if w["level"] != "WARN" || w["msg"] != "retrying of unary invoker failed" || w["component"] != "etcd" || w["logger"] != "etcd-client" ||
		w["endpoint"] != "127.0.0.1:2379" || w["error"] != "rpc error: code = Unavailable" || w["attempt"] != float64(3) {
		t.Fatalf("warn line %v", w)
	}
	if e["level"] != "ERROR" || e["msg"] != "lost leader" {
		t.Fatalf("error line %v", e)
	}
	// A log at error drops etcd's warnings.
	buf.Reset()
	Zap(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelError}))).Warn("w")
	if buf.Len() != 0 {
		t.Fatalf("warn passed a log at error: %s", buf.String())
	}
	Zap(nil).Warn("nowhere") // a no-op
	// Silenced (etcd closing): nothing more, from derived loggers neither.
	z, quiet := ZapUntil(slog.New(slog.NewJSONHandler(&buf, nil)))
	zw := z.With(zap.String("k", "v"))
	quiet()
	z.Error("closing")
	zw.Error("closing")
	if buf.Len() != 0 {
		t.Fatalf("a silenced logger wrote %s", buf.String())
	}
}
