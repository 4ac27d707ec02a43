package layered

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"go.yaml.in/yaml/v3"
)

// File is a parsed --config file (docs/operations.md): scalar values by setting, credential files
// by name, each with the line it was read from.
type File struct {
	Path        string
	Values      map[string]Value
	Credentials map[string]Value
}

// Value is one value of a config file and its line.
type Value struct {
	Value string
	Line  int
}

// maxConfigFile bounds what is read: the file is small by nature.
const maxConfigFile = 1 << 20

// ReadFile reads path: a mapping of settings (flag names, known ones) to scalars, and
// credentials: a mapping of secret names (creds) to files (relative to the config file's folder).
// An unknown key fails naming its line: a typo must not silently leave a default in force.
func ReadFile(path string, known func(setting string) bool, creds []Credential) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("read --config: %w", err)
	}
	if len(data) > maxConfigFile {
		return nil, fmt.Errorf("%s: larger than %d bytes", path, maxConfigFile)
	}
	f := &File{Path: path, Values: map[string]Value{}, Credentials: map[string]Value{}}
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
			if err := f.readCredentials(v, base, creds); err != nil {
				return nil, err
			}
			continue
		}
		if !known(k.Value) {
			return nil, fmt.Errorf("%s:%d: unknown setting %q%s", path, k.Line, k.Value, hint(k.Value))
		}
		if _, dup := f.Values[k.Value]; dup {
			return nil, fmt.Errorf("%s:%d: %s is set twice", path, k.Line, k.Value)
		}
		if v.Kind != yaml.ScalarNode {
			return nil, fmt.Errorf("%s:%d: %s: want a single value", path, v.Line, k.Value)
		}
		f.Values[k.Value] = Value{Value: v.Value, Line: v.Line}
	}
	return f, nil
}

func (f *File) readCredentials(n *yaml.Node, base string, creds []Credential) error {
	if n.Kind != yaml.MappingNode {
		return fmt.Errorf("%s:%d: credentials: want a mapping of secret names to files", f.Path, n.Line)
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], n.Content[i+1]
		if !slices.ContainsFunc(creds, func(s Credential) bool { return s.Name == k.Value }) {
			var names []string
			for _, s := range creds {
				names = append(names, s.Name)
			}
			return fmt.Errorf("%s:%d: unknown credential %q (want one of %s)", f.Path, k.Line, k.Value, strings.Join(names, ", "))
		}
		if v.Kind != yaml.ScalarNode || v.Value == "" {
			return fmt.Errorf("%s:%d: credentials.%s: want the path of the file holding it", f.Path, v.Line, k.Value)
		}
		p := v.Value
		if !filepath.IsAbs(p) {
			p = filepath.Join(base, p)
		}
		f.Credentials[k.Value] = Value{Value: p, Line: v.Line}
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
