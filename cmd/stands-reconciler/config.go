package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"path/filepath"
	"strings"
	"text/tabwriter"

	"github.com/stands-engine/stands-reconciler/daemon"
	"github.com/stands-engine/stands-reconciler/internal/logging"
	"github.com/stands-engine/stands-reconciler/safeguard"
)

func runConfig(ctx context.Context, args []string, std stdio, getenv env) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(std.err, "config: the one subcommand is `config check [flags of run]`")
		return exitUsage
	}
	fs := newFlags("config check", "config check [flags of run]\n\nPrints the daemon's effective configuration — every setting, its value and where it came from (flag,\nvariable, --config file or default), every secret as *** with the file it is read from — and exits 1\nnaming each setting that is missing or wrong, as `run` would refuse to start.", std)
	conf := newSettings(fs, getenv)
	conf.FilesOnly = true
	var f daemonFlags
	f.register(conf)
	unitFile := fs.String("unit", "", "the systemd unit whose TimeoutStopSec must outlast --drain-timeout, with its drop-ins beside it (default: "+
		daemon.UnitName+" where systemd finds it installed)")
	done, code := parseFlags(conf, args[1:], std)
	if done && code != exitError {
		return code
	}
	var problems []error
	if done { // the layer itself refused a value; show what it could read anyway
		problems = append(problems, errors.New("see the error above"))
	} else {
		f.s.FilesOnly = conf.FilesOnly
		problems = f.s.Check(daemon.Env(conf.Env()), conf)
		unit, err := unitOf(*unitFile)
		switch {
		case err != nil:
			problems = append(problems, err)
		case unit == nil:
			fmt.Fprintf(std.err, "config: no %s installed (in %s): --drain-timeout not checked against TimeoutStopSec\n", daemon.UnitName, strings.Join(daemon.UnitDirs, ", "))
		default:
			fmt.Fprintf(std.err, "config: unit %s\n", unit.Path)
		}
		problems = append(problems, f.s.Preflight(daemon.Env(conf.Env()), conf, unit)...)
	}
	printConfig(std, conf)
	if len(problems) == 0 {
		printProtection(ctx, std, f.s, daemon.Env(conf.Env()))
	}
	if what, warning := f.s.Signing(daemon.Env(conf.Env())); what != "" {
		fmt.Fprintf(std.err, "config: %s\n", what)
		if warning != "" {
			fmt.Fprintf(std.err, "config: warning: %s\n", warning)
		}
	}
	if why := f.s.Ungated(daemon.Env(conf.Env())); why != "" {
		fmt.Fprintf(std.err, "config: warning: no review gate: every change landing on %s is applied, reviewed or not (%s)\n", f.s.Branch, why)
	}
	for _, p := range problems {
		fmt.Fprintf(std.err, "config: %v\n", p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(std.err, "config: %d problem(s); `run` would not start\n", len(problems))
		return exitError
	}
	fmt.Fprintln(std.err, "config: ok")
	return exitOK
}

// unitOf reads the unit file at path with the drop-ins beside it, or, for "", the one installed
// (nil: none).
func unitOf(path string) (*daemon.Unit, error) {
	if path != "" {
		u, err := daemon.ReadUnit(path, filepath.Dir(path))
		if err != nil {
			return nil, fmt.Errorf("--unit: %w", err)
		}
		return &u, nil
	}
	u, ok, err := daemon.InstalledUnit()
	if err != nil || !ok {
		return nil, err
	}
	return &u, nil
}

// printConfig writes every setting with its value and origin, then every secret as *** with where
// it is read from.
func printConfig(std stdio, c *settings) {
	w := tabwriter.NewWriter(std.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SETTING\tVALUE\tFROM")
	c.FS.VisitAll(func(fl *flag.Flag) {
		value := logging.RedactPassword(fl.Value.String())
		if fl.Name == "config" {
			value = c.ConfigPath()
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", fl.Name, quoted(value), c.Setting(fl.Name))
	})
	for _, s := range daemon.Credentials {
		origin, value := c.Credential(s), "***"
		if origin == "" {
			origin, value = "not set", "-"
		}
		fmt.Fprintf(w, "credential %s\t%s\t%s\n", s.Name, value, origin)
	}
	_ = w.Flush()
}

func quoted(v string) string {
	if v == "" {
		return `""`
	}
	return v
}

// printProtection reads the tracked branch's protection as the daemon would and shows each safeguard;
// a missing one is a warning (the daemon runs without it, and says so), not a refusal.
func printProtection(ctx context.Context, std stdio, s daemon.Settings, env daemon.Env) {
	findings, err := s.CheckSettingsProtection(ctx, env)
	switch {
	case errors.Is(err, daemon.ErrNoForge):
		fmt.Fprintf(std.err, "config: %v\n", err)
		return
	case err != nil:
		fmt.Fprintf(std.err, "config: warning: the protection of %s was not read: %v\n", s.Branch, err)
		return
	}
	w := tabwriter.NewWriter(std.out, 0, 4, 2, ' ', 0)
	fmt.Fprintf(w, "\nSAFEGUARD OF %s\tSTATE\n", s.Branch)
	for _, f := range findings {
		fmt.Fprintf(w, "%s\t%s\n", f.Name, f.State)
	}
	w.Flush()
	for _, f := range findings {
		switch f.State {
		case safeguard.Missing:
			fmt.Fprintf(std.err, "config: warning: the protection of %s lacks %s: %s; set %q in the rule\n", s.Branch, f.Name, f.Why, f.Fix)
		case safeguard.Unknown:
			fmt.Fprintf(std.err, "config: warning: %s of %s is not known: %s\n", f.Name, s.Branch, f.Why)
		}
	}
}
