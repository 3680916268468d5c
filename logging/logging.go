// Package logging builds the service's slog log from the config's log block, routes
// etcd's zap log into it, and keeps secrets out of it (RedactURL).
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"strings"
)

// Formats and levels the config's log block accepts.
const (
	FormatText = "text"
	FormatJSON = "json"
)

// ParseLevel reads a log level: debug, info, warn (or warning), error.
func ParseLevel(s string) (slog.Level, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "debug":
		return slog.LevelDebug, nil
	case "info", "":
		return slog.LevelInfo, nil
	case "warn", "warning":
		return slog.LevelWarn, nil
	case "error":
		return slog.LevelError, nil
	}
	return 0, fmt.Errorf("unknown log level %q", s)
}

// New returns a log writing to w: JSON lines when format is "json", else slog's
// text (key=value) lines, from level up. Reconfigure can rebuild it on the same
// writer once a config file is read.
func New(w io.Writer, format string, level slog.Level) *slog.Logger {
	opts := &slog.HandlerOptions{Level: level}
	var h slog.Handler
	if format == FormatJSON {
		h = slog.NewJSONHandler(w, opts)
	} else {
		h = slog.NewTextHandler(w, opts)
	}
	return slog.New(&handler{Handler: h, w: w, root: true})
}

// Reconfigure returns a log like log (made by New) in format at level, on the same
// writer. A log New did not make is returned as it is (tests pass their own).
func Reconfigure(log *slog.Logger, format string, level slog.Level) *slog.Logger {
	h, ok := log.Handler().(*handler)
	if !ok || !h.root {
		return log
	}
	return New(h.w, format, level)
}

// handler remembers the writer of a log made by New, for Reconfigure.
type handler struct {
	slog.Handler
	w    io.Writer
	root bool // not derived with WithAttrs/WithGroup: nothing would be lost
}

func (h *handler) Handle(ctx context.Context, r slog.Record) error { return h.Handler.Handle(ctx, r) }

func (h *handler) WithAttrs(as []slog.Attr) slog.Handler {
	return &handler{Handler: h.Handler.WithAttrs(as), w: h.w}
}

func (h *handler) WithGroup(name string) slog.Handler {
	return &handler{Handler: h.Handler.WithGroup(name), w: h.w}
}
