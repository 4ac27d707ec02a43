package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"log/slog"
	"os"
	"strings"

	"github.com/stands-engine/stands-reconciler/daemon"
	"github.com/stands-engine/stands-reconciler/internal/logging"
)

// The daemon's reload (SIGHUP; `systemctl reload` sends it, ExecReload= in deploy/'s unit): the
// settings are read again as the start read them — the command line, the environment, the --config
// file — and checked as the start checks them. A reload never stops work in flight: settings that
// can change live (liveSettings) take effect at once; a change of any other is logged, naming the
// setting, and waits for the next start, the running value kept. Settings that do not pass Check
// are refused whole. Credential files are read again as they change without a reload
// (internal/credential), Vault's at each login.

// reloadSignals gets `run`'s SIGHUP: runMain registers it before the command starts, so a SIGHUP
// never takes its default action (the process killed mid-apply, its Pulumi CLIs and their locks left).
var reloadSignals = make(chan os.Signal, 1)

// liveSettings are the settings a reload changes in the running daemon.
var liveSettings = map[string]bool{"log-level": true, "poll-interval": true}

// reloader reloads one running daemon.
type reloader struct {
	conf  *settings // as the daemon runs them: a reload updates the live ones
	level *slog.LevelVar
	log   *slog.Logger
	d     *daemon.Daemon
}

// run reloads at each signal on sigs until ctx ends.
func (r *reloader) run(ctx context.Context, sigs <-chan os.Signal) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-sigs:
			r.reload()
		}
	}
}

func (r *reloader) reload() {
	r.log.Info("reload: reading the settings again")
	var out bytes.Buffer
	std := stdio{out: &out, err: &out}
	conf := newSettings(newFlags("run", "run", std), r.conf.Getenv)
	conf.FilesOnly = true
	var f daemonFlags
	f.register(conf)
	if done, _ := parseFlags(conf, r.conf.Args, std); done {
		r.log.Error("reload refused: the settings do not read; the running ones stay", "err", strings.TrimSpace(out.String()))
		return
	}
	f.s.FilesOnly = true
	if errs := f.s.Check(daemon.Env(conf.Env()), conf); len(errs) > 0 {
		r.log.Error("reload refused: the settings read again have problems; the running ones stay", "err", errors.Join(errs...))
		return
	}
	changed := 0
	conf.FS.VisitAll(func(fl *flag.Flag) {
		running := r.conf.FS.Lookup(fl.Name)
		if running == nil || running.Value.String() == fl.Value.String() {
			return
		}
		changed++
		was, now := logging.RedactPassword(running.Value.String()), logging.RedactPassword(fl.Value.String())
		if !liveSettings[fl.Name] {
			r.log.Warn("reload: setting changed; it takes effect at the next start, the running value stays", "setting", fl.Name,
				"running", was, "read", now, "source", conf.Setting(fl.Name))
			return
		}
		switch fl.Name {
		case "log-level":
			r.level.Set(logging.Level(f.s.LogLevel))
		case "poll-interval":
			r.d.SetPollInterval(f.s.Poll)
		}
		_ = running.Value.Set(fl.Value.String()) // what runs now, for the next reload's comparison
		r.log.Info("reload: setting changed", "setting", fl.Name, "from", was, "to", now, "source", conf.Setting(fl.Name))
	})
	for _, c := range daemon.Credentials {
		if was, now := r.conf.Credential(c), conf.Credential(c); was != now {
			changed++
			r.log.Warn("reload: a credential's source changed; it takes effect at the next start", "credential", c.Name, "running", was, "read", now)
		}
	}
	r.log.Info("reload done", "changes", changed)
}
