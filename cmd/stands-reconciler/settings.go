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
	filesOnly bool               // the daemon: a secret's value in the environment is refused
	args      []string           // the command line parsed: a reload parses it again
	olds      map[string]oldName // a setting's name → the name it had before, still taken
	// Deprecated are the old names this command's settings were given by, each with its new one.
	Deprecated []string
}

// oldName is a setting's name before it was renamed: its flag, variable and config key still set
// it for a release, with a warning naming the new one.
type oldName struct{ flag, variable string }

// configVariable names the config file when --config is not given.
const configVariable = "STANDS_CONFIG"

func newSettings(fs *flag.FlagSet, getenv env) *settings {
	s := &settings{fs: fs, getenv: getenv, vars: map[string]string{}, olds: map[string]oldName{}}
	fs.StringVar(&s.config, "config", "", "a YAML file of settings keyed by flag name, secrets as file paths under credentials: (docs/operations.md) ($"+configVariable+")")
	return s
}

// renamed keeps a setting's old flag and variable working: both set the setting now named name, and
// say so (Deprecated). The old flag is listed in --help as deprecated.
func (s *settings) renamed(name, oldFlag, oldVariable string) {
	s.olds[name] = oldName{oldFlag, oldVariable}
	s.fs.Func(oldFlag, fmt.Sprintf("deprecated: --%s ($%s)", name, oldVariable), func(v string) error {
		return s.fs.Set(name, v)
	})
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
	for _, o := range c.olds {
		c.vars[o.flag] = o.variable
	}
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
			return ours || other || s.oldKey(key) != ""
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
		if err := s.resolveOne(name, set); err != nil {
			return err
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

// resolveOne sets one setting from the first of its flag, its variable, its config file line and its
// default that has it, each by its new name before its old one.
func (s *settings) resolveOne(name string, set map[string]bool) error {
	variable, old := s.vars[name], s.olds[name]
	v := s.getenv(variable)
	if v == "" && old.variable != "" && s.getenv(old.variable) != "" {
		variable, v = old.variable, s.getenv(old.variable)
		s.deprecate("$"+old.variable, "$"+s.vars[name])
	}
	key := name
	if s.file != nil && s.file.Values[name].Line == 0 && old.flag != "" && s.file.Values[old.flag].Line > 0 {
		key = old.flag
	}
	switch {
	case old.flag != "" && set[old.flag]: // it set name too
		s.origin[name] = "--" + old.flag
		s.deprecate("--"+old.flag, "--"+name)
	case set[name]:
		s.origin[name] = "--" + name
	case v != "":
		if err := s.fs.Set(name, v); err != nil {
			return fmt.Errorf("$%s (for --%s): %v", variable, name, err)
		}
		s.origin[name] = "$" + variable
	case s.file != nil && s.file.Values[key].Line > 0:
		e := s.file.Values[key]
		if err := s.fs.Set(name, e.Value); err != nil {
			return fmt.Errorf("%s:%d: %s: %v", s.file.Path, e.Line, key, err)
		}
		s.origin[name] = fmt.Sprintf("%s:%d", s.file.Path, e.Line)
		if key != name {
			s.deprecate(fmt.Sprintf("%s:%d: %s", s.file.Path, e.Line, key), name)
		}
	default:
		s.origin[name] = "default"
	}
	return nil
}

// deprecate notes an old name in use.
func (s *settings) deprecate(old, now string) {
	s.Deprecated = append(s.Deprecated, fmt.Sprintf("%s is deprecated: use %s (the old name works until the next release)", old, now))
}

// oldKey is the setting an old config key sets, or "".
func (s *settings) oldKey(key string) string {
	for name, o := range s.olds {
		if o.flag == key {
			return name
		}
	}
	return ""
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
