package manifest

import (
	"errors"
	"fmt"
	"io/fs"
	"path"
	"regexp"
	"strings"
)

// Resource roots: folders outside the stands repository that the one-shot command line names with
// --resource NAME=PATH (the Stands Engine's flag), for shared app packages, bases and templates. A
// manifest, app.yml or template reference reaches one as resource://NAME/PATH; inside a root,
// relative paths stay in that root. The daemon has no roots — its repository never reaches outside
// itself — and a resource:// reference read by it fails naming the root.

// ResourceScheme starts a reference to a resource root.
const ResourceScheme = "resource://"

// resourceElem is the first element of a resource path inside the combined file system: a name no
// stand repository uses (WithResources refuses one that does).
const resourceElem = "resource:"

var resourceName = regexp.MustCompile(`^[a-z0-9][a-z0-9._-]*$`)

// ValidResourceName reports whether name can name a resource root: lower-case letters, digits,
// '.', '_' and '-', starting with a letter or digit.
func ValidResourceName(name string) bool { return resourceName.MatchString(name) }

// ErrNoResource is the error of reading a resource root no --resource gave.
var ErrNoResource = errors.New("no such resource root: resource:// paths are folders the one-shot command line names with --resource NAME=PATH; the daemon reads its repository only")

// ResourceRoot returns the root of a path inside a resource ("resource:/NAME"), and whether it is
// inside one.
func ResourceRoot(p string) (string, bool) {
	rest, ok := strings.CutPrefix(p, resourceElem+"/")
	if !ok {
		return "", p == resourceElem
	}
	name, _, _ := strings.Cut(rest, "/")
	return resourceElem + "/" + name, true
}

// ResourcePath splits a path inside a resource into the root's name and the path in it.
func ResourcePath(p string) (name, rel string, ok bool) {
	rest, ok := strings.CutPrefix(p, resourceElem+"/")
	if !ok {
		return "", "", false
	}
	name, rel, _ = strings.Cut(rest, "/")
	if rel == "" {
		rel = "."
	}
	return name, rel, true
}

// Shown is a path as a manifest writes it: resource://NAME/PATH for a root's file.
func Shown(p string) string {
	if name, rel, ok := ResourcePath(p); ok {
		return ResourceScheme + name + "/" + strings.TrimPrefix(rel, ".")
	}
	return p
}

// resolveResource resolves resource://NAME/PATH.
func resolveResource(ref string) (string, error) {
	name, rest, _ := strings.Cut(strings.TrimPrefix(ref, ResourceScheme), "/")
	if !ValidResourceName(name) {
		return "", fmt.Errorf("want %sNAME/PATH, NAME of lower-case letters, digits, '.', '_' and '-'", ResourceScheme)
	}
	root := resourceElem + "/" + name
	p := path.Join(root, rest)
	if !fs.ValidPath(p) || !within(p, root) {
		return "", fmt.Errorf("the path leaves the resource root %q", name)
	}
	return p, nil
}

func within(p, root string) bool { return p == root || strings.HasPrefix(p, root+"/") }

// resourceFS is a stand repository with resource roots mounted under resourceElem.
type resourceFS struct {
	repo  fs.FS
	roots map[string]fs.FS
}

// WithResources is repo with the roots readable as resource://NAME/…. A repository holding a
// top-level entry named like the roots' mount is refused: its files would be unreachable.
func WithResources(repo fs.FS, roots map[string]fs.FS) (fs.FS, error) {
	for name := range roots {
		if !ValidResourceName(name) {
			return nil, fmt.Errorf("resource root %q: want a name of lower-case letters, digits, '.', '_' and '-'", name)
		}
	}
	if _, err := fs.Stat(repo, resourceElem); err == nil {
		return nil, fmt.Errorf("the repository has an entry named %q, the name resource roots are read under", resourceElem)
	}
	return resourceFS{repo: repo, roots: roots}, nil
}

func (r resourceFS) Open(name string) (fs.File, error) {
	if n, rel, ok := ResourcePath(name); ok {
		root, found := r.roots[n]
		if !found {
			return nil, &fs.PathError{Op: "open", Path: name, Err: ErrNoResource}
		}
		f, err := root.Open(rel)
		return f, inRoot(err, name)
	}
	if name == resourceElem {
		return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
	}
	return r.repo.Open(name)
}

// inRoot names the path as the repository's readers know it in a root's error.
func inRoot(err error, name string) error {
	var pe *fs.PathError
	if errors.As(err, &pe) {
		return &fs.PathError{Op: pe.Op, Path: name, Err: pe.Err}
	}
	return err
}

// noResources is a repository read without roots (the daemon's, or a command line given none): a
// resource path fails with ErrNoResource rather than reading whatever the repository holds there.
type noResources struct{ fs.FS }

func (n noResources) Open(name string) (fs.File, error) {
	if _, ok := ResourceRoot(name); ok {
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrNoResource}
	}
	return n.FS.Open(name)
}

// Stat keeps the repository's own Stat (repofs stats a file too large to open).
func (n noResources) Stat(name string) (fs.FileInfo, error) {
	if _, ok := ResourceRoot(name); ok {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: ErrNoResource}
	}
	return fs.Stat(n.FS, name)
}

func (r resourceFS) Stat(name string) (fs.FileInfo, error) {
	if n, rel, ok := ResourcePath(name); ok {
		root, found := r.roots[n]
		if !found {
			return nil, &fs.PathError{Op: "stat", Path: name, Err: ErrNoResource}
		}
		st, err := fs.Stat(root, rel)
		return st, inRoot(err, name)
	}
	if name == resourceElem {
		return nil, &fs.PathError{Op: "stat", Path: name, Err: fs.ErrNotExist}
	}
	return fs.Stat(r.repo, name)
}

// guardResources is fsys as the loader reads it.
func guardResources(fsys fs.FS) fs.FS {
	switch fsys.(type) {
	case resourceFS, noResources, recordingFS: // a recording reads a guarded tree (Reads.FS)
		return fsys
	}
	return noResources{fsys}
}
