// Package migrate turns a Stands Engine repository (and its --resource roots) into one of ours
// (docs/migrating.md): each *.mako template becomes a *.tmpl Go template (package mako), each .mako
// reference and ${...} in a YAML file is rewritten, and every translated template a stand renders is
// rendered again the old way (python3 with Mako) with the same context, to prove the two write the
// same.
package migrate

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/mako"
	"github.com/stands-engine/stands-reconciler/manifest"
)

// Template is a *.mako template and its translation.
type Template struct {
	File, To string // on disk
	Src, Out string
	Manifest string // the new template's path as manifests name it (repository- or resource-relative)
	Problems []mako.Problem
}

// YAML is a YAML file with its .mako references and ${...} rewritten.
type YAML struct {
	File     string
	Manifest string // its path as manifests name it
	Out      string
	Edits    []int // lines changed
	Problems []mako.Problem
}

// Migration is every change a migration makes.
type Migration struct {
	Templates []*Template
	YAMLs     []*YAML
}

// Problems counts what is left for a human.
func (m *Migration) Problems() int {
	n := 0
	for _, t := range m.Templates {
		n += len(t.Problems)
	}
	for _, y := range m.YAMLs {
		n += len(y.Problems)
	}
	return n
}

var makoRef = regexp.MustCompile(`\.mako\b`)

// Scan reads the folder at dir, whose files manifests name under prefix ("" for the repository,
// resource:/NAME/ for a root), and adds what it would change.
func (m *Migration) Scan(dir, prefix string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch ext := filepath.Ext(p); {
		case ext == ".mako":
			out, problems := mako.Convert(string(data))
			to := strings.TrimSuffix(p, ".mako") + ".tmpl"
			m.Templates = append(m.Templates, &Template{File: p, To: to, Src: string(data), Out: out, Problems: problems,
				Manifest: prefix + filepath.ToSlash(strings.TrimSuffix(rel, ".mako")+".tmpl")})
		case ext == ".yml" || ext == ".yaml":
			if y := yamlMigration(p, string(data)); y != nil {
				y.Manifest = prefix + filepath.ToSlash(rel)
				m.YAMLs = append(m.YAMLs, y)
			}
		}
		return nil
	})
}

// yamlMigration rewrites a YAML file's .mako references and its ${...} values, line by line (the
// file's layout and comments stay); nil when nothing changes.
func yamlMigration(file, src string) *YAML {
	y := &YAML{File: file}
	lines := strings.SplitAfter(src, "\n")
	for i, line := range lines {
		changed := makoRef.ReplaceAllString(line, ".tmpl")
		if strings.Contains(changed, "${") {
			var problems []mako.Problem
			changed, problems = mako.ConvertInline(changed, i+1)
			y.Problems = append(y.Problems, problems...)
		}
		if changed != line {
			y.Edits = append(y.Edits, i+1)
			lines[i] = changed
		}
	}
	if len(y.Edits) == 0 && len(y.Problems) == 0 {
		return nil
	}
	y.Out = strings.Join(lines, "")
	return y
}

// Write applies the Migration: new templates (never over a different file), YAML rewritten, and
// each translated .mako removed once proven — kept beside its .tmpl when something in it is left for a
// human or no stand could prove it, so a run again translates and reports it again.
func (m *Migration) Write(proven []string) error {
	for _, t := range m.Templates {
		if old, err := os.ReadFile(t.To); err == nil && string(old) != t.Out {
			return fmt.Errorf("%s exists and differs from the translation of %s: move it away first", t.To, t.File)
		}
	}
	for _, t := range m.Templates {
		if err := os.WriteFile(t.To, []byte(t.Out), 0o644); err != nil {
			return err
		}
	}
	for _, y := range m.YAMLs {
		if err := os.WriteFile(y.File, []byte(y.Out), 0o644); err != nil {
			return err
		}
	}
	for _, t := range m.Templates {
		if len(t.Problems) == 0 && slices.Contains(proven, t.Manifest) {
			if err := os.Remove(t.File); err != nil {
				return err
			}
		}
	}
	return nil
}

// Proof is what rendering both ways showed.
type Proof struct {
	Notes    []string // stands whose templates could not be proven, and why
	Proven   []string // templates every render of which matched
	Differs  []string // template: where the first render that differed did
	Unproven []string // template: why it could not be proven
}

// Prove renders every stand of the repository open gives with placeholder secrets and test
// addresses, and each translated template it renders again with the same context through Mako.
func (m *Migration) Prove(ctx context.Context, open func() (fs.FS, error), owner string) *Proof {
	pr := &Proof{}
	byPath := map[string]*Template{}
	for _, t := range m.Templates {
		if len(t.Problems) == 0 {
			byPath[t.Manifest] = t
		}
	}
	python, err := mako.FindPython()
	fsys, ferr := open()
	var files []string
	if ferr == nil {
		files, ferr = manifest.Discover(fsys)
	}
	if err == nil {
		err = ferr
	}
	seen := map[string]bool{}
	for _, file := range files {
		st, lerr := manifest.Load(fsys, file, manifest.LoadOptions{DefaultOwner: owner})
		if lerr != nil {
			pr.Notes = append(pr.Notes, fmt.Sprintf("%s does not load yet, its templates are not proven:\n%v", file, lerr))
			continue
		}
		// The stand's own preferences, then varied ones, so that branches and loops its values do
		// not take are compared too. Under a variant only a difference counts: Mako failing on
		// values no stand has is no fault of the translation.
		for v := range manifest.Variants + 1 {
			_, _ = manifest.RenderVariant(fsys, st, manifest.PlaceholderSecrets(st, 0), manifest.PreflightAddresses(st), v, func(p string, c map[string]any, keys func(map[string]any) []string, out []byte) {
				t := byPath[p]
				if t == nil || err != nil || slices.ContainsFunc(pr.Differs, func(d string) bool { return strings.HasPrefix(d, p+":") }) {
					return
				}
				old, rerr := mako.Render(ctx, python, t.Src, c, keys)
				if rerr != nil {
					if v == 0 {
						pr.Differs = append(pr.Differs, fmt.Sprintf("%s: Mako fails on it (stand %s): %v", p, st.ID, rerr))
					}
					return
				}
				seen[p] = true
				if line, ok := sameOutput(old, out); !ok {
					with := ""
					if v > 0 {
						with = " with its " + manifest.VariantNames[v]
					}
					pr.Differs = append(pr.Differs, fmt.Sprintf("%s: stand %s%s, line %d: %s", p, st.ID, with, line, firstDiff(old, out, line)))
				}
			})
		}
	}
	for _, p := range slices.Sorted(maps.Keys(byPath)) {
		switch {
		case err != nil:
			pr.Unproven = append(pr.Unproven, p+": "+err.Error())
		case !seen[p]:
			pr.Unproven = append(pr.Unproven, p+": no stand renders it")
		case !slices.ContainsFunc(pr.Differs, func(d string) bool { return strings.HasPrefix(d, p+":") }):
			pr.Proven = append(pr.Proven, p)
		}
	}
	return pr
}

// sameOutput compares two renders; when they differ, it returns the first line that does.
func sameOutput(a, b []byte) (int, bool) {
	if bytes.Equal(a, b) {
		return 0, true
	}
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		if i >= len(al) || i >= len(bl) || al[i] != bl[i] {
			return i + 1, false
		}
	}
	return len(al), false
}

func firstDiff(a, b []byte, line int) string {
	get := func(s []byte) string {
		ls := strings.Split(string(s), "\n")
		if line-1 < len(ls) {
			return ls[line-1]
		}
		return "(nothing)"
	}
	return fmt.Sprintf("Mako wrote %q, the Go template writes %q", get(a), get(b))
}

// Overlaid is the repository (and its roots) as the Migration would leave it: its translations and
// rewritten YAML over the files on disk, which stay as they are. Prove reads it, so nothing is
// written before the proof.
func (m *Migration) Overlaid(repo fs.FS, roots map[string]fs.FS) (fs.FS, error) {
	files := map[string]map[string][]byte{} // root name ("" for the repository) → path → content
	put := func(p, out string) {
		name, rel := "", p
		if n, r, ok := manifest.ResourcePath(p); ok {
			name, rel = n, r
		}
		if files[name] == nil {
			files[name] = map[string][]byte{}
		}
		files[name][rel] = []byte(out)
	}
	for _, t := range m.Templates {
		put(t.Manifest, t.Out)
	}
	for _, y := range m.YAMLs {
		put(y.Manifest, y.Out)
	}
	over := overlay{FS: repo, files: files[""]}
	if len(roots) == 0 {
		return over, nil
	}
	rs := map[string]fs.FS{}
	for n, r := range roots {
		rs[n] = overlay{FS: r, files: files[n]}
	}
	return manifest.WithResources(over, rs)
}

// overlay is a file system with some files' contents replaced or added.
type overlay struct {
	fs.FS
	files map[string][]byte
}

func (o overlay) Open(name string) (fs.File, error) {
	if data, ok := o.files[name]; ok {
		return &memFile{name: path.Base(name), Reader: bytes.NewReader(data), size: int64(len(data))}, nil
	}
	return o.FS.Open(name)
}

func (o overlay) ReadFile(name string) ([]byte, error) {
	if data, ok := o.files[name]; ok {
		return bytes.Clone(data), nil
	}
	return fs.ReadFile(o.FS, name)
}

func (o overlay) Stat(name string) (fs.FileInfo, error) {
	if data, ok := o.files[name]; ok {
		return memInfo{name: path.Base(name), size: int64(len(data))}, nil
	}
	return fs.Stat(o.FS, name)
}

func (o overlay) ReadDir(name string) ([]fs.DirEntry, error) { return fs.ReadDir(o.FS, name) }

type memFile struct {
	*bytes.Reader
	name string
	size int64
}

func (f *memFile) Stat() (fs.FileInfo, error) { return memInfo{name: f.name, size: f.size}, nil }
func (f *memFile) Close() error               { return nil }

type memInfo struct {
	name string
	size int64
}

func (i memInfo) Name() string       { return i.name }
func (i memInfo) Size() int64        { return i.size }
func (i memInfo) Mode() fs.FileMode  { return 0o644 }
func (i memInfo) ModTime() time.Time { return time.Time{} }
func (i memInfo) IsDir() bool        { return false }
func (i memInfo) Sys() any           { return nil }
