// Package logging builds the one slog logger a command uses: text (tint, coloured unless NO_COLOR) on a
// terminal and JSON otherwise, or the format --log-format names, at the level the command line
// gives, and values of secret-looking keys redacted in one place.
package logging

import (
	"fmt"
	"io"
	"log/slog"
	"net/url"
	"os"
	"slices"
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
	lvl := new(slog.LevelVar)
	lvl.Set(Level(level))
	return NewLeveled(w, lvl, format)
}

// Level is the slog level a --log-level names; info for a name it does not know (Check refuses
// those first).
func Level(name string) slog.Level {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(name)); err != nil {
		return slog.LevelInfo
	}
	return lvl
}

// NewLeveled is NewWithFormat at a level that can change while the logger is in use (the daemon's
// reload).
func NewLeveled(w io.Writer, lvl *slog.LevelVar, format string) *slog.Logger {
	replace := func(_ []string, a slog.Attr) slog.Attr {
		if a.Value.Kind() == slog.KindDuration {
			// JSON would give nanoseconds; on-call reads "1m30s" in both formats (docs/operations.md).
			return slog.String(a.Key, a.Value.Duration().String())
		}
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

// RedactPassword shows a URL with its password, if any, as ***: what a setting's value may show.
// A string that is not a URL is shown as it is.
func RedactPassword(v string) string {
	u, err := url.Parse(v)
	if err != nil || u.User == nil {
		return v
	}
	if _, has := u.User.Password(); has {
		u.User = url.UserPassword(u.User.Username(), "***")
	}
	return u.String()
}

// Levels are the values of --log-level.
var Levels = []string{"debug", "info", "warn", "error"}

// Check refuses a log level or format the logger does not know.
func Check(level, format string) error {
	if !slices.Contains(Levels, level) {
		return fmt.Errorf("--log-level=%s: want debug, info, warn or error", level)
	}
	if !slices.Contains(Formats, format) {
		return fmt.Errorf("--log-format=%s: want auto, text or json", format)
	}
	return nil
}
