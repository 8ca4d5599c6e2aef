package supervisor

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/corral-llm/corral/supervisor/process"
)

// redactHandler is a slog.Handler that hides secrets (process.Redactor) in
// the message and in every string, error, Stringer and []string attribute
// before passing a record on: a worker logs through it, so that its API
// key, credentials in its command line or environment and any
// Authorization header that found its way into an error never reach the
// supervisor's log.
type redactHandler struct {
	next slog.Handler
	r    *process.Redactor
}

// Enabled reports whether the next handler handles level.
func (h redactHandler) Enabled(ctx context.Context, level slog.Level) bool {
	return h.next.Enabled(ctx, level)
}

// Handle passes a redacted copy of rec on.
func (h redactHandler) Handle(ctx context.Context, rec slog.Record) error {
	out := slog.NewRecord(rec.Time, rec.Level, h.r.String(rec.Message), rec.PC)
	rec.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

// WithAttrs redacts attrs and adds them to the next handler.
func (h redactHandler) WithAttrs(attrs []slog.Attr) slog.Handler {
	red := make([]slog.Attr, len(attrs))
	for i, a := range attrs {
		red[i] = h.attr(a)
	}
	return redactHandler{h.next.WithAttrs(red), h.r}
}

// WithGroup opens a group in the next handler.
func (h redactHandler) WithGroup(name string) slog.Handler {
	return redactHandler{h.next.WithGroup(name), h.r}
}

// attr redacts one attribute.
func (h redactHandler) attr(a slog.Attr) slog.Attr {
	v := a.Value.Resolve()
	switch v.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.r.String(v.String()))
	case slog.KindGroup:
		g := v.Group()
		red := make([]any, len(g))
		for i, ga := range g {
			red[i] = h.attr(ga)
		}
		return slog.Group(a.Key, red...)
	case slog.KindAny:
		switch x := v.Any().(type) {
		case []string:
			return slog.Any(a.Key, h.r.Args(x))
		case error:
			return slog.String(a.Key, h.r.String(x.Error()))
		case fmt.Stringer:
			return slog.String(a.Key, h.r.String(x.String()))
		}
	}
	return slog.Attr{Key: a.Key, Value: v}
}
