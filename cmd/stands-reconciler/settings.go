package main

import (
	"flag"

	"github.com/stands-engine/stands-reconciler/compat"
	"github.com/stands-engine/stands-reconciler/daemon"
	"github.com/stands-engine/stands-reconciler/internal/layered"
)

// settings is one command's settings (internal/layered): flag > variable > --config file > default,
// the daemon's credentials as its secrets, one config file for every command.
type settings = layered.Settings

func newSettings(fs *flag.FlagSet, getenv env) *settings {
	return layered.New(fs, getenv, daemon.Credentials, func(key string) bool { _, ok := allSettings()[key]; return ok })
}

// bound binds flag name to variable and returns d, the flag's static default.
func bound[T any](s *settings, name, variable string, d T) T {
	return layered.Bound(s, name, variable, d)
}

// allSettings is every command's settings: the daemon's, which hold the one-shot commands', and
// apply's own.
func allSettings() map[string]string {
	c := newSettings(flag.NewFlagSet("all", flag.ContinueOnError), func(string) string { return "" })
	var f daemonFlags
	f.register(c)
	bound(c, "show-secrets", "OUTPUT__CONSOLE_SECRETS", false)
	bound(c, "print-record", "OUTPUT__CONSOLE", true)
	bound(c, "output-dir", compat.OutputDirVariable, "")
	bound(c, "key-file", "STANDS_SSH_KEY_PATH", "")
	return c.Variables()
}
