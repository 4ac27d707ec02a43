// Package logging builds the one slog logger a command uses: text (tint, coloured unless NO_COLOR) on a
// terminal and JSON otherwise, or the format --log-format names, at the level the command line
// gives, and values of secret-looking keys redacted in one place.
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

// New returns a logger writing to w in the automatic format. level is "debug", "info", "warn" or
// "error" (the command line takes it from --log-level, else $LOG_LEVEL).
func New(w io.Writer, level string) *slog.Logger { return NewWithFormat(w, level, "auto") }

// Formats are the values of --log-format: auto (text on a terminal, JSON otherwise), text, json.
var Formats = []string{"auto", "text", "json"}

// NewWithFormat is New in the given format. Text is coloured on a terminal unless NO_COLOR is set
// (no-color.org).
func NewWithFormat(w io.Writer, level, format string) *slog.Logger {
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
	f, isFile := w.(*os.File)
	terminal := isFile && isatty.IsTerminal(f.Fd())
	if format == "text" || (format == "auto" && terminal) {
		noColor := !terminal || os.Getenv("NO_COLOR") != ""
		return slog.New(tint.NewTextHandler(w, &tint.Options{Level: lvl, TimeFormat: time.TimeOnly, ReplaceAttr: replace, NoColor: noColor}))
	}
	return slog.New(slog.NewJSONHandler(w, &slog.HandlerOptions{Level: lvl, ReplaceAttr: replace}))
}
