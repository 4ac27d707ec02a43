// Package testfs builds small repositories for tests: a folder of testdata copied into memory, and
// txtar-style archives ("-- name --" sections) that overlay files on it.
package testfs

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing/fstest"
)

// Dir copies a folder into a MapFS.
func Dir(dir string) (fstest.MapFS, error) {
	out := fstest.MapFS{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(dir, p)
		if err != nil {
			return err
		}
		out[filepath.ToSlash(rel)] = &fstest.MapFile{Data: data, Mode: 0o644}
		return nil
	})
	return out, err
}

// Archive is a parsed txtar-style file: section name → body.
type Archive map[string]string

// Parse reads "-- name --" sections.
func Parse(data string) Archive {
	a := Archive{}
	name := ""
	var b strings.Builder
	flush := func() {
		if name != "" {
			a[name] = b.String()
		}
		b.Reset()
	}
	for line := range strings.SplitAfterSeq(data, "\n") {
		trimmed := strings.TrimRight(line, "\n")
		if strings.HasPrefix(trimmed, "-- ") && strings.HasSuffix(trimmed, " --") && len(trimmed) > 6 {
			flush()
			name = strings.TrimSpace(trimmed[3 : len(trimmed)-3])
			continue
		}
		b.WriteString(line)
	}
	flush()
	return a
}

// Meta sections describe a case and are not files.
var Meta = map[string]bool{"want": true, "comment": true, "delete": true, "symlinks": true, "large": true}

// Overlay returns base with the archive applied: sections are files to write, "delete" lists files
// to remove; "want" and "comment" are left to the test.
func Overlay(base fstest.MapFS, a Archive) (fstest.MapFS, error) {
	out := fstest.MapFS{}
	for k, v := range base {
		out[k] = v
	}
	for f := range strings.FieldsSeq(a["delete"]) {
		if _, ok := out[f]; !ok {
			return nil, fmt.Errorf("delete %s: not in the base repository", f)
		}
		delete(out, f)
	}
	for name, body := range a {
		if !Meta[name] {
			out[name] = &fstest.MapFile{Data: []byte(body), Mode: 0o644}
		}
	}
	return out, nil
}

// WriteDir writes a MapFS to a folder on disk.
func WriteDir(dir string, fsys fstest.MapFS) error {
	for name, f := range fsys {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, f.Data, 0o644); err != nil {
			return err
		}
	}
	return nil
}
