package main

import (
	"flag"
	"fmt"
	"slices"
	"strings"

	"github.com/stands-engine/stands-reconciler/compat"
	"github.com/stands-engine/stands-reconciler/daemon"
)

// A setting comes from its flag, else its environment variable, else the --config file, else the
// flag's default, which is static: --help never prints a value read from the environment or a file
// (a repository URL with a token, say). A value that does not parse fails the start naming where it
// came from. Secrets are never flags: each is KEY or KEY_FILE in the environment (the daemon takes
// only KEY_FILE: an environment is readable in /proc/<pid>/environ and inherited by children), or a
// file named under credentials: in the config file.

// settings is one command's configuration layer over its flag set.
type settings struct {
	fs        *flag.FlagSet
	getenv    env
	config    string            // --config
	vars      map[string]string // flag name → its variable
	origin    map[string]string // after resolve: flag name → where its value came from
	file      *daemon.ConfigFile
	filesOnly bool     // the daemon: a secret's value in the environment is refused
	args      []string // the command line parsed: a reload parses it again
}

// configVariable names the config file when --config is not given.
const configVariable = "STANDS_CONFIG"

func newSettings(fs *flag.FlagSet, getenv env) *settings {
	s := &settings{fs: fs, getenv: getenv, vars: map[string]string{}}
	fs.StringVar(&s.config, "config", "", "a YAML file of settings keyed by flag name, secrets as file paths under credentials: (docs/operations.md) ($"+configVariable+")")
	return s
}

// bound binds flag name to variable and returns d, the flag's static default.
func bound[T any](s *settings, name, variable string, d T) T {
	s.vars[name] = variable
	return d
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
	return c.vars
}

// resolve sets every bound flag the command line left alone from its variable or the config file,
// and checks the secrets' sources.
func (s *settings) resolve() error {
	path := s.config
	if path == "" {
		path = s.getenv(configVariable)
	}
	if path != "" {
		f, err := daemon.ReadConfigFile(path, func(key string) bool {
			_, ours := s.vars[key]
			_, other := allSettings()[key] // another command's: one file serves run, ctl and the one-shot commands
			return ours || other
		})
		if err != nil {
			return err
		}
		s.file = f
	}
	set := map[string]bool{}
	s.fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	s.origin = map[string]string{}
	names := make([]string, 0, len(s.vars))
	for name := range s.vars {
		names = append(names, name)
	}
	slices.Sort(names)
	for _, name := range names {
		variable := s.vars[name]
		v := s.getenv(variable)
		switch {
		case set[name]:
			s.origin[name] = "--" + name
		case v != "":
			if err := s.fs.Set(name, v); err != nil {
				return fmt.Errorf("$%s (for --%s): %v", variable, name, err)
			}
			s.origin[name] = "$" + variable
		case s.file != nil && s.file.Values[name].Line > 0:
			e := s.file.Values[name]
			if err := s.fs.Set(name, e.Value); err != nil {
				return fmt.Errorf("%s:%d: %s: %v", s.file.Path, e.Line, name, err)
			}
			s.origin[name] = fmt.Sprintf("%s:%d", s.file.Path, e.Line)
		default:
			s.origin[name] = "default"
		}
	}
	if s.filesOnly {
		for _, c := range daemon.Credentials {
			if s.getenv(c.Key) != "" {
				return fmt.Errorf("$%s is set: the daemon takes secrets from files only: set $%s_FILE (systemd: LoadCredential=) or credentials.%s in --config", c.Key, c.Key, c.Name)
			}
		}
	}
	return nil
}

// Setting says where a setting's value came from: a flag, a variable, a config file's line or the
// default.
func (s *settings) Setting(name string) string { return s.origin[name] }

// env is the environment the command reads the rest of its configuration from: the process's, with
// each credential file the config file names as KEY_FILE, unless the environment sets KEY or
// KEY_FILE itself.
func (s *settings) env() env {
	return func(k string) string {
		if v := s.getenv(k); v != "" || s.file == nil {
			return v
		}
		key, ok := strings.CutSuffix(k, "_FILE")
		if !ok {
			return ""
		}
		c, ok := daemon.CredentialByKey(key)
		if !ok || s.getenv(key) != "" {
			return ""
		}
		return s.file.Credentials[c.Name].Value
	}
}

// Credential says where a credential comes from, for `config check` and the errors that name it:
// never its value.
func (s *settings) Credential(c daemon.Credential) string {
	switch {
	case s.getenv(c.Key) != "":
		return "$" + c.Key
	case s.getenv(c.Key+"_FILE") != "":
		return fmt.Sprintf("$%s_FILE (%s)", c.Key, s.getenv(c.Key+"_FILE"))
	case s.file != nil && s.file.Credentials[c.Name].Line > 0:
		e := s.file.Credentials[c.Name]
		return fmt.Sprintf("%s:%d (%s)", s.file.Path, e.Line, e.Value)
	}
	return ""
}
