// Package logging builds the one slog logger a command uses: colourful text (tint) when stderr is a
// terminal, JSON otherwise, at the level the command line gives, and values of secret-looking keys
// redacted in one place.
package logging

import (
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/lmittmann/tint"
	"github.com/mattn/go-isatty"
)

// secretKeys are attribute keys whose values are never logged.
var secretKeys = []string{"token", "password", "passphrase", "secret", "private_key", "authorization"}

// New returns a logger writing to w. level is "debug", "info", "warn" or "error" (the command line
// takes it from --log-level, else $LOG_LEVEL).
func New(w io.Writer, level string) *slog.Logger {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		lvl = slog.LevelInfo
	}
	replace := func(_ []string, a slog.Attr) slog.Attr {
		k := strings.ToLower(a.Key)
		for _, s := range secretKeys {
			if strings.Contains(k, s) {
				return slog.String(a.Key, "***")
			}
		}
		return a
	}
	if f, ok := w.(*os.File); ok && isatty.IsTerminal(f.Fd()) {
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lvl, TimeFormat: time.TimeOnly, ReplaceAttr: replace}))
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: replace}))
}
