package engine

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
)

// standLog is the engine's logger for one stand's operation: what the nodes print (a hook's stderr,
// say) reaches the log through Pulumi's diagnostics, so every string is scrubbed of the stand's
// resolved secrets on the way.
func (e *Engine) standLog(in stands.Input, args ...any) *slog.Logger {
	return slog.New(scrubHandler{e.log.Handler(), in.Secrets}).With(append([]any{"stand", in.Stand.ID}, args...)...)
}

type scrubHandler struct {
	next    slog.Handler
	secrets manifest.Secrets
}

func (h scrubHandler) Enabled(ctx context.Context, l slog.Level) bool { return h.next.Enabled(ctx, l) }

func (h scrubHandler) Handle(ctx context.Context, r slog.Record) error {
	out := slog.NewRecord(r.Time, r.Level, h.secrets.Scrub(r.Message), r.PC)
	r.Attrs(func(a slog.Attr) bool {
		out.AddAttrs(h.attr(a))
		return true
	})
	return h.next.Handle(ctx, out)
}

func (h scrubHandler) attr(a slog.Attr) slog.Attr {
	a.Value = a.Value.Resolve()
	switch a.Value.Kind() {
	case slog.KindString:
		return slog.String(a.Key, h.secrets.Scrub(a.Value.String()))
	case slog.KindGroup:
		var as []any
		for _, g := range a.Value.Group() {
			as = append(as, h.attr(g))
		}
		return slog.Group(a.Key, as...)
	case slog.KindAny:
		// Errors, Stringers, maps, slices: whatever they print as, scrubbed.
		return slog.String(a.Key, h.secrets.Scrub(fmt.Sprint(a.Value.Any())))
	}
	return a
}

func (h scrubHandler) WithAttrs(as []slog.Attr) slog.Handler {
	scrubbed := make([]slog.Attr, len(as))
	for i, a := range as {
		scrubbed[i] = h.attr(a)
	}
	return scrubHandler{h.next.WithAttrs(scrubbed), h.secrets}
}

func (h scrubHandler) WithGroup(name string) slog.Handler {
	return scrubHandler{h.next.WithGroup(name), h.secrets}
}
