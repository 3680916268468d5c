// Package logging builds the service's slog log from the config's log block, routes
// etcd's zap log into it, and keeps secrets out of it (RedactURL).
package logging

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"sort"
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

// RedactURL is how a URL that may itself be a credential (a webhook receiver's:
// Zapier, Make and n8n put the secret in the path) appears in logs:
// scheme://host[:port]/… with the user info, path, query and fragment cut. A string
// that does not parse as such a URL becomes "…".
func RedactURL(raw string) string {
	u, err := url.Parse(raw)
	if err != nil || u.Scheme == "" || u.Host == "" {
		return "…"
	}
	s := u.Scheme + "://" + u.Host
	if (u.Path != "" && u.Path != "/") || u.RawQuery != "" || u.Fragment != "" || u.Opaque != "" {
		s += "/…"
	}
	return s
}

// RedactError is err's text with every occurrence of raw (a URL as RedactURL
// treats it) replaced by its redacted form: HTTP clients' errors quote the whole
// URL ("Post \"https://hooks.example/secret\": dial tcp: ...").
func RedactError(err error, raw string) string {
	if err == nil {
		return ""
	}
	msg := err.Error()
	if raw == "" {
		return msg
	}
	red := RedactURL(raw)
	forms := []string{raw}
	// net/http quotes the URL as it re-serialised it (escaping may differ), with a
	// password as "***".
	if u, perr := url.Parse(raw); perr == nil {
		forms = append(forms, u.String(), u.Redacted())
		if pw, ok := u.User.Password(); ok {
			forms = append(forms, strings.Replace(u.String(), pw+"@", "***@", 1))
		}
	}
	sort.Slice(forms, func(i, j int) bool { return len(forms[i]) > len(forms[j]) })
	for _, f := range forms {
		if f != "" {
			msg = strings.ReplaceAll(msg, f, red)
		}
	}
	return msg
}
