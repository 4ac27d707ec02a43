// Package layered is a command's settings as layers over its flag set: each flag bound to an
// environment variable and a key of the --config file, resolved flag > variable > file > default,
// with where each value came from (docs/operations.md), secrets as files only where asked, and a
// renamed setting's old names kept working for a release with a warning.
package layered

import (
	"flag"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// A setting comes from its flag, else its environment variable, else the --config file, else the
// flag's default, which is static: --help never prints a value read from the environment or a file
// (a repository URL with a token, say). A value that does not parse fails the start naming where it
// came from. Secrets are never flags: each is KEY or KEY_FILE in the environment (the daemon takes
// only KEY_FILE: an environment is readable in /proc/<pid>/environ and inherited by children), or a
// file named under credentials: in the config file.

// Credential is a secret: read from $Key or the file $Key_FILE names, or the file credentials.Name
// of the config file names.
type Credential struct{ Key, Name string }

// Settings is one command's configuration layer over its flag set.
type Settings struct {
	FS     *flag.FlagSet
	Getenv func(string) string
	// FilesOnly refuses a secret's value in the environment (the daemon's: an environment is
	// readable in /proc/<pid>/environ and inherited by children).
	FilesOnly bool
	Args      []string // the command line parsed: a reload parses it again
	File      *File    // after Resolve: the config file read, if any
	// Deprecated are the old names this command's settings were given by, each with its new one.
	Deprecated []string

	config string             // --config
	vars   map[string]string  // flag name → its variable
	origin map[string]string  // after Resolve: flag name → where its value came from
	olds   map[string]oldName // a setting's name → the name it had before, still taken
	creds  []Credential
	others func(key string) bool
}

// oldName is a setting's name before it was renamed: its flag, variable and config key still set
// it for a release, with a warning naming the new one.
type oldName struct{ flag, variable string }

// ConfigVariable names the config file when --config is not given.
const ConfigVariable = "STANDS_CONFIG"

// New is the settings of the command whose flags fs holds, its variables read with getenv, its
// secrets among creds; others says whether a config file key is another command's (one file serves
// them all).
func New(fs *flag.FlagSet, getenv func(string) string, creds []Credential, others func(key string) bool) *Settings {
	s := &Settings{FS: fs, Getenv: getenv, vars: map[string]string{}, olds: map[string]oldName{}, creds: creds, others: others}
	fs.StringVar(&s.config, "config", "", "a YAML file of settings keyed by flag name, secrets as file paths under credentials: (docs/operations.md) ($"+ConfigVariable+")")
	return s
}

// Variables are the variables of the flags bound, old names too, by flag name.
func (s *Settings) Variables() map[string]string {
	out := maps.Clone(s.vars)
	for _, o := range s.olds {
		out[o.flag] = o.variable
	}
	return out
}

// ConfigPath is the config file named (--config, else $STANDS_CONFIG); "" when none is.
func (s *Settings) ConfigPath() string {
	if s.config != "" {
		return s.config
	}
	return s.Getenv(ConfigVariable)
}

// Renamed keeps a setting's old flag and variable working: both set the setting now named name, and
// say so (Deprecated). The old flag is listed in --help as deprecated.
func (s *Settings) Renamed(name, oldFlag, oldVariable string) {
	s.olds[name] = oldName{oldFlag, oldVariable}
	s.FS.Func(oldFlag, fmt.Sprintf("deprecated: --%s ($%s)", name, oldVariable), func(v string) error {
		return s.FS.Set(name, v)
	})
}

// Bound binds flag name to variable and returns d, the flag's static default.
func Bound[T any](s *Settings, name, variable string, d T) T {
	s.vars[name] = variable
	return d
}

// Resolve sets every bound flag the command line left alone from its variable or the config file,
// and checks the secrets' sources.
func (s *Settings) Resolve() error {
	if path := s.ConfigPath(); path != "" {
		f, err := ReadFile(path, func(key string) bool {
			_, ours := s.vars[key]
			return ours || s.oldKey(key) != "" || s.others != nil && s.others(key)
		}, s.creds)
		if err != nil {
			return err
		}
		s.File = f
	}
	set := map[string]bool{}
	s.FS.Visit(func(f *flag.Flag) { set[f.Name] = true })
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
	if s.FilesOnly {
		for _, c := range s.creds {
			if s.Getenv(c.Key) != "" {
				return fmt.Errorf("$%s is set: the daemon takes secrets from files only: set $%s_FILE (systemd: LoadCredential=) or credentials.%s in --config", c.Key, c.Key, c.Name)
			}
		}
	}
	return nil
}

// resolveOne sets one setting from the first of its flag, its variable, its config file line and its
// default that has it, each by its new name before its old one.
func (s *Settings) resolveOne(name string, set map[string]bool) error {
	variable, old := s.vars[name], s.olds[name]
	v := s.Getenv(variable)
	if v == "" && old.variable != "" && s.Getenv(old.variable) != "" {
		variable, v = old.variable, s.Getenv(old.variable)
		s.deprecate("$"+old.variable, "$"+s.vars[name])
	}
	key := name
	if s.File != nil && s.File.Values[name].Line == 0 && old.flag != "" && s.File.Values[old.flag].Line > 0 {
		key = old.flag
	}
	switch {
	case old.flag != "" && set[old.flag]: // it set name too
		s.origin[name] = "--" + old.flag
		s.deprecate("--"+old.flag, "--"+name)
	case set[name]:
		s.origin[name] = "--" + name
	case v != "":
		if err := s.FS.Set(name, v); err != nil {
			return fmt.Errorf("$%s (for --%s): %v", variable, name, err)
		}
		s.origin[name] = "$" + variable
	case s.File != nil && s.File.Values[key].Line > 0:
		e := s.File.Values[key]
		if err := s.FS.Set(name, e.Value); err != nil {
			return fmt.Errorf("%s:%d: %s: %v", s.File.Path, e.Line, key, err)
		}
		s.origin[name] = fmt.Sprintf("%s:%d", s.File.Path, e.Line)
		if key != name {
			s.deprecate(fmt.Sprintf("%s:%d: %s", s.File.Path, e.Line, key), name)
		}
	default:
		s.origin[name] = "default"
	}
	return nil
}

// deprecate notes an old name in use.
func (s *Settings) deprecate(old, now string) {
	s.Deprecated = append(s.Deprecated, fmt.Sprintf("%s is deprecated: use %s (the old name works until the next release)", old, now))
}

// oldKey is the setting an old config key sets, or "".
func (s *Settings) oldKey(key string) string {
	for name, o := range s.olds {
		if o.flag == key {
			return name
		}
	}
	return ""
}

// Setting says where a setting's value came from: a flag, a variable, a config file's line or the
// default; for config itself, --config, $STANDS_CONFIG or none.
func (s *Settings) Setting(name string) string {
	if name == "config" {
		switch {
		case s.config != "":
			return "--config"
		case s.Getenv(ConfigVariable) != "":
			return "$" + ConfigVariable
		}
		return "none"
	}
	if o, ok := s.origin[name]; ok {
		return o
	}
	origin := "default" // a flag bound to no variable (--allow-mass-destroy)
	s.FS.Visit(func(f *flag.Flag) {
		if f.Name == name {
			origin = "--" + name
		}
	})
	return origin
}

// Env is the environment the command reads the rest of its configuration from: the process's, with
// each credential file the config file names as KEY_FILE, unless the environment sets KEY or
// KEY_FILE itself.
func (s *Settings) Env() func(string) string {
	return func(k string) string {
		if v := s.Getenv(k); v != "" || s.File == nil {
			return v
		}
		key, ok := strings.CutSuffix(k, "_FILE")
		if !ok {
			return ""
		}
		i := slices.IndexFunc(s.creds, func(c Credential) bool { return c.Key == key })
		if i < 0 || s.Getenv(key) != "" {
			return ""
		}
		return s.File.Credentials[s.creds[i].Name].Value
	}
}

// Credential says where a credential comes from, for `config check` and the errors that name it:
// never its value.
func (s *Settings) Credential(c Credential) string {
	switch {
	case s.Getenv(c.Key) != "":
		return "$" + c.Key
	case s.Getenv(c.Key+"_FILE") != "":
		return fmt.Sprintf("$%s_FILE (%s)", c.Key, s.Getenv(c.Key+"_FILE"))
	case s.File != nil && s.File.Credentials[c.Name].Line > 0:
		e := s.File.Credentials[c.Name]
		return fmt.Sprintf("%s:%d (%s)", s.File.Path, e.Line, e.Value)
	}
	return ""
}
