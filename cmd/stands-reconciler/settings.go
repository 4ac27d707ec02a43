package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stands-engine/stands-reconciler/compat"
	"github.com/stands-engine/stands-reconciler/daemon"
	"go.yaml.in/yaml/v3"
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
	file      *configFile
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
		f, err := loadConfigFile(path, s.vars)
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
		case s.file != nil && s.file.values[name].line > 0:
			e := s.file.values[name]
			if err := s.fs.Set(name, e.value); err != nil {
				return fmt.Errorf("%s:%d: %s: %v", s.file.path, e.line, name, err)
			}
			s.origin[name] = fmt.Sprintf("%s:%d", s.file.path, e.line)
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
		return s.file.credentials[c.Name].value
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
	case s.file != nil && s.file.credentials[c.Name].line > 0:
		e := s.file.credentials[c.Name]
		return fmt.Sprintf("%s:%d (%s)", s.file.path, e.line, e.value)
	}
	return ""
}

// configFile is a parsed --config file: scalar values by setting, credential files by name.
type configFile struct {
	path        string
	values      map[string]configValue
	credentials map[string]configValue
}

type configValue struct {
	value string
	line  int
}

// maxConfigFile bounds what is read: the file is small by nature.
const maxConfigFile = 1 << 20

// loadConfigFile reads path: a mapping of the command's settings (flag names) to scalars, and
// credentials: a mapping of secret names to files (relative to the config file's folder). An
// unknown key fails naming its line: a typo must not silently leave a default in force.
func loadConfigFile(path string, known map[string]string) (*configFile, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read --config: %w", err)
	}
	if len(data) > maxConfigFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxConfigFile)
	}
	f := &configFile{path: path, values: map[string]configValue{}, credentials: map[string]configValue{}}
	var doc yaml.Node
	dec := yaml.NewDecoder(bytes.NewReader(data))
	if err := dec.Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return f, nil // empty: all defaults
		}
		return nil, fmt.Errorf("%s: %v", path, err)
	}
	if len(doc.Content) == 0 {
		return f, nil
	}
	root := doc.Content[0]
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a mapping of settings", path, root.Line)
	}
	base := filepath.Dir(path)
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		if k.Value == "credentials" {
			if err := f.readCredentials(v, base); err != nil {
				return nil, err
			}
			continue
		}
		if _, ok := known[k.Value]; !ok {
			if _, other := allSettings()[k.Value]; other {
				continue // another command's (one file serves run, ctl and the one-shot commands)
			}
			return nil, fmt.Errorf("%s:%d: unknown setting %q%s", path, k.Line, k.Value, hint(k.Value))
		}
		if _, dup := f.values[k.Value]; dup {
			return nil, fmt.Errorf("%s:%d: %s is set twice", path, k.Line, k.Value)
		}
		if v.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s:%d: %s: want a single value", path, v.Line, k.Value)
		}
		f.values[k.Value] = configValue{value: v.Value, line: v.Line}
	}
	return f, nil
}

func (f *configFile) readCredentials(n *yaml.Node, base string) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: credentials: want a mapping of secret names to files", f.path, n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !slices.ContainsFunc(daemon.Credentials, func(s daemon.Credential) bool { return s.Name == k.Value }) {
			var names []string
			for _, s := range daemon.Credentials {
				names = append(names, s.Name)
			}
			return fmt.Errorf("%s:%d: unknown credential %q (want one of %s)", f.path, k.Line, k.Value, strings.Join(names, ", "))
		}
		if v.Kind != yaml.ScalarNode || v.Value == "" {
			return fmt.Errorf("%s:%d: credentials.%s: want the path of the file holding it", f.path, v.Line, k.Value)
		}
		p := v.Value
		if !filepath.IsAbs(p) {
			p = filepath.Join(base, p)
		}
		f.credentials[k.Value] = configValue{value: p, line: v.Line}
	}
	return nil
}

// hint points a secret-looking key to where secrets go.
func hint(key string) string {
	for _, word := range []string{"token", "passphrase", "password", "secret", "key"} {
		if strings.Contains(key, word) {
			return "; secrets go under credentials: as file paths, never as values"
		}
	}
	return ""
}
