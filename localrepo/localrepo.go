// Package localrepo finds the stands a command line names on disk: the stands repository each path
// belongs to (the nearest folder holding stands/ or .git, so relative references resolve as they do
// for the reconciler), and the --resource roots manifests reach outside it (the Stands Engine's
// flag, for the one-shot commands only: the daemon's repository never reaches outside itself).
package localrepo

import (
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/manifest"
)

// Roots are --resource NAME=PATH: folders outside the stands repository that manifests reach as
// resource://NAME/PATH. As a flag.Value, each Set adds one.
type Roots map[string]string // name → absolute folder

func (r Roots) String() string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(r)) {
		out = append(out, n+"="+r[n])
	}
	return strings.Join(out, ",")
}

func (r Roots) Set(v string) error {
	name, dir, ok := strings.Cut(v, "=")
	if !ok || dir == "" {
		return fmt.Errorf("%q: want NAME=PATH", v)
	}
	if !manifest.ValidResourceName(name) {
		return fmt.Errorf("%q: a root's name has lower-case letters, digits, '.', '_' and '-'", name)
	}
	if _, dup := r[name]; dup {
		return fmt.Errorf("%q is given twice", name)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return fmt.Errorf("%s=%s: not a folder", name, dir)
	}
	r[name] = abs
	return nil
}

// Repo is the repository at root as the command reads it: with the roots when there are any. Each
// root is read as the repository is (repofs: no symbolic link followed).
func (r Roots) Repo(root string) (fs.FS, error) {
	if len(r) == 0 {
		return repofs.Dir(root), nil
	}
	roots := map[string]fs.FS{}
	for n, dir := range r {
		roots[n] = repofs.Dir(dir)
	}
	return manifest.WithResources(repofs.Dir(root), roots)
}

// Opener reads the repository at root when called (Repo).
func (r Roots) Opener(root string) func() (fs.FS, error) {
	return func() (fs.FS, error) { return r.Repo(root) }
}

// Display shows a file of the repository at root, or of a root, as a path on disk: relative to the
// working directory when that is shorter.
func (r Roots) Display(root, file string) string {
	if name, rel, ok := manifest.ResourcePath(file); ok && r[name] != "" {
		root, file = r[name], rel
	}
	return Display(root, file)
}

// Target is a set of stands in one repository.
type Target struct {
	Root  string   // repository root on disk
	Files []string // stand manifests, relative to root
}

// Display shows a repository path relative to the working directory when that is shorter.
func Display(root, file string) string {
	abs := filepath.Join(root, filepath.FromSlash(file))
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, abs); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return abs
}

// Targets maps command-line paths to stands grouped by repository. A repository root is the
// nearest folder holding a stands/ folder or .git, so relative references (../../apps/x) resolve
// as they do for the reconciler.
func Targets(paths []string) ([]Target, error) {
	byRoot := map[string]*Target{}
	var order []string
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, errors.Unwrap(err))
		}
		var files []string
		start := abs
		if !st.IsDir() {
			start = filepath.Dir(abs)
			files = []string{abs}
		}
		root := FindRoot(start)
		if st.IsDir() {
			if abs == root {
				rel, err := manifest.Discover(repofs.Dir(root))
				if err != nil {
					return nil, fmt.Errorf("%s: %w", p, err)
				}
				for _, f := range rel {
					files = append(files, filepath.Join(root, filepath.FromSlash(f)))
				}
			} else {
				err := filepath.WalkDir(abs, func(q string, d fs.DirEntry, err error) error {
					if err == nil && !d.IsDir() && d.Name() == manifest.StandFile {
						files = append(files, q)
					}
					return err
				})
				if err != nil {
					return nil, fmt.Errorf("%s: %w", p, err)
				}
			}
			if len(files) == 0 {
				return nil, fmt.Errorf("%s: no %s found", p, manifest.StandFile)
			}
		}
		t := byRoot[root]
		if t == nil {
			t = &Target{Root: root}
			byRoot[root] = t
			order = append(order, root)
		}
		for _, f := range files {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				return nil, err
			}
			rel = filepath.ToSlash(rel)
			if !slices.Contains(t.Files, rel) {
				t.Files = append(t.Files, rel)
			}
		}
	}
	out := make([]Target, 0, len(order))
	for _, r := range order {
		out = append(out, *byRoot[r])
	}
	return out, nil
}

// FindRoot is the repository a folder belongs to: the nearest folder holding stands/ or .git.
func FindRoot(dir string) string {
	for d := dir; ; {
		if IsDir(filepath.Join(d, manifest.StandsDir)) || exists(filepath.Join(d, ".git")) {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return string(filepath.Separator)
		}
		d = parent
	}
}

// IsDir reports whether p is a folder.
func IsDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// Identity reads a stand id, <owner>_<project>_<env>, or the identity of the stand.yml at a path without
// resolving its secrets or files.
func Identity(arg, defaultOwner string, roots Roots) (owner, project, env string, err error) {
	if st, statErr := os.Stat(arg); statErr == nil {
		file := arg
		if st.IsDir() {
			file = filepath.Join(arg, manifest.StandFile)
		}
		abs, err := filepath.Abs(file)
		if err != nil {
			return "", "", "", err
		}
		root := FindRoot(filepath.Dir(abs))
		rel, err := filepath.Rel(root, abs)
		if err != nil {
			return "", "", "", err
		}
		fsys, err := roots.Repo(root)
		if err != nil {
			return "", "", "", err
		}
		id, err := manifest.ReadIdentity(fsys, filepath.ToSlash(rel), manifest.LoadOptions{DefaultOwner: defaultOwner})
		if err != nil {
			return "", "", "", err
		}
		return id.Owner, id.Project, id.Env, nil
	}
	owner, project, env, ok := manifest.ParseStandID(arg)
	if !ok {
		return "", "", "", fmt.Errorf("%q is neither a path nor a stand id <owner>_<project>_<env>", arg)
	}
	return owner, project, env, nil
}
