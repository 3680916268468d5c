package logging

import (
	"context"
	"errors"
	"log/slog"
	"sort"
	"strings"
	"sync/atomic"

	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// Zap returns a zap logger (what etcd's client and embedded server log to) that
// writes its entries of level warn and above into log as records of the same level
// (dpanic, panic and fatal as error) with component=etcd, the zap logger's name as
// logger and its fields as attributes. A nil log gives zap.NewNop().
func Zap(log *slog.Logger) *zap.Logger {
	z, _ := ZapUntil(log)
	return z
}

// ZapUntil is Zap, and a function that silences the logger from then on: call it
// before closing etcd, whose client and server report their own shutdown as
// errors ("server closed", "context canceled").
func ZapUntil(log *slog.Logger) (*zap.Logger, func()) {
	if log == nil {
		return zap.NewNop(), func() {}
	}
	off := new(atomic.Bool)
	return zap.New(&zapCore{h: log.Handler().WithAttrs([]slog.Attr{slog.String("component", "etcd")}), off: off}),
		func() { off.Store(true) }
}

// zapCore is a zapcore.Core over a slog.Handler. go.uber.org/zap/exp/zapslog
// bridges the other way (slog onto zap).
type zapCore struct {
	h   slog.Handler
	off *atomic.Bool // shared with the cores With derives
}

// zapMin is the least zap level passed on: etcd's info lines are chatter.
const zapMin = zapcore.WarnLevel

func slogLevel(l zapcore.Level) slog.Level {
	switch {
	case l < zapcore.InfoLevel:
		return slog.LevelDebug
	case l == zapcore.InfoLevel:
		return slog.LevelInfo
	case l == zapcore.WarnLevel:
		return slog.LevelWarn
	}
	return slog.LevelError
}

func (c *zapCore) Enabled(l zapcore.Level) bool {
	return l >= zapMin && !c.off.Load() && c.h.Enabled(context.Background(), slogLevel(l))
}

func (c *zapCore) With(fs []zapcore.Field) zapcore.Core {
	if len(fs) == 0 {
		return c
	}
	return &zapCore{h: c.h.WithAttrs(attrs(fs)), off: c.off}
}

func (c *zapCore) Check(e zapcore.Entry, ce *zapcore.CheckedEntry) *zapcore.CheckedEntry {
	if c.Enabled(e.Level) {
		return ce.AddCore(e, c)
	}
	return ce
}

func (c *zapCore) Write(e zapcore.Entry, fs []zapcore.Field) error {
	if cancelled(fs) {
		return nil
	}
	r := slog.NewRecord(e.Time, slogLevel(e.Level), e.Message, 0)
	if e.LoggerName != "" {
		r.AddAttrs(slog.String("logger", e.LoggerName))
	}
	r.AddAttrs(attrs(fs)...)
	return c.h.Handle(context.Background(), r)
}

func (c *zapCore) Sync() error { return nil }

// cancelled reports whether an entry is about a call this process cancelled itself
// (etcd's client warns "retrying of unary invoker failed" at every shutdown).
func cancelled(fs []zapcore.Field) bool {
	for _, f := range fs {
		if err, ok := f.Interface.(error); ok && f.Type == zapcore.ErrorType &&
			(errors.Is(err, context.Canceled) || strings.Contains(err.Error(), "context canceled")) {
			return true
		}
	}
	return false
}

// attrs turns zap fields into slog attributes, in key order, through zap's own
// map encoder (so every field type encodes as zap would).
func attrs(fs []zapcore.Field) []slog.Attr {
	enc := zapcore.NewMapObjectEncoder()
	for _, f := range fs {
		f.AddTo(enc)
	}
	keys := make([]string, 0, len(enc.Fields))
	for k := range enc.Fields {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	as := make([]slog.Attr, 0, len(keys))
	for _, k := range keys {
		as = append(as, slog.Any(k, enc.Fields[k]))
	}
	return as
}
