// Package repofs is how a stands repository's files are read, by the command line from a folder and by
// the daemon from a commit, under one rule: a symbolic link is never followed. Reading through one —
// the link itself, or a folder on the way that is one — fails with ErrSymlink naming it, and the stand
// that needs it fails with that error. A link that would stay inside the repository is refused too: one
// rule, the same in both places, instead of the command line following a link to /etc/shadow while the
// daemon reads the same link as a file holding its target's path.
package repofs

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing/fstest"
	"time"
)

// ErrSymlink is the error of a read through a symbolic link.
var ErrSymlink = errors.New("a symbolic link: the files of a stands repository must be regular files and folders")

// MaxFileSize bounds every file read from a repository (manifests, templates, app files): the
// repository is pull request input, and a stand's files are a few kilobytes each.
const MaxFileSize = 1 << 20

// ErrTooLarge is the error of opening a file larger than MaxFileSize.
var ErrTooLarge = errors.New("larger than 1 MiB, the most a stands repository's file may hold")

// Dir is the repository in the folder root. Listing shows a link as what it is (not a folder), so a
// walk never enters one.
func Dir(root string) fs.FS { return dirFS{root: root, fs: os.DirFS(root)} }

type dirFS struct {
	root string
	fs   fs.FS
}

func (d dirFS) Open(name string) (fs.File, error) {
	if err := d.check("open", name); err != nil {
		return nil, err
	}
	f, err := d.fs.Open(name)
	return bounded(name, f, err)
}

// bounded refuses a regular file over MaxFileSize before anything reads it.
func bounded(name string, f fs.File, err error) (fs.File, error) {
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	if st.Mode().IsRegular() && st.Size() > MaxFileSize {
		f.Close()
		return nil, &fs.PathError{Op: "open", Path: name, Err: ErrTooLarge}
	}
	return f, nil
}

func (d dirFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := d.check("readdir", name); err != nil {
		return nil, err
	}
	return fs.ReadDir(d.fs, name)
}

func (d dirFS) Stat(name string) (fs.FileInfo, error) {
	if err := d.check("stat", name); err != nil {
		return nil, err
	}
	return fs.Stat(d.fs, name)
}

// check refuses a name that is, or passes through, a symbolic link.
func (d dirFS) check(op, name string) error {
	if !fs.ValidPath(name) {
		return &fs.PathError{Op: op, Path: name, Err: fs.ErrInvalid}
	}
	if name == "." {
		return nil
	}
	p := d.root
	for part := range strings.SplitSeq(name, "/") {
		p = filepath.Join(p, part)
		st, err := os.Lstat(p)
		if err != nil {
			return nil // the read itself reports it
		}
		if st.Mode()&fs.ModeSymlink != 0 {
			rel, _ := filepath.Rel(d.root, p)
			return &fs.PathError{Op: op, Path: filepath.ToSlash(rel), Err: ErrSymlink}
		}
	}
	return nil
}

// Tree is a commit's files in memory, with its symbolic links (path → target) kept as links: they list
// as links and refuse to be read, as Dir does. large names the files over MaxFileSize, which the
// commit has but which were never read into memory: they list, and refuse to open.
func Tree(files fstest.MapFS, links map[string]string, large map[string]int64) fs.FS {
	out := fstest.MapFS{}
	for p, f := range files {
		out[p] = f
	}
	for p, target := range links {
		out[p] = &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink | 0o777}
	}
	for p := range large {
		out[p] = &fstest.MapFile{Mode: 0o444}
	}
	return treeFS{m: out, links: links, large: large, dirs: index(out)}
}

type treeFS struct {
	m     fstest.MapFS
	links map[string]string
	large map[string]int64
	// dirs are each folder's entries, sorted by name. fstest.MapFS finds a folder's entries by
	// scanning every file of the tree, once for each folder read: walking a commit of 10,000 stands
	// cost a restart 3.7 s.
	dirs map[string][]fs.DirEntry
}

// index lists every folder of m, those m names and those its paths imply.
func index(m fstest.MapFS) map[string][]fs.DirEntry {
	dirs := map[string]map[string]fs.DirEntry{".": {}}
	var addDir func(d string)
	addDir = func(d string) {
		if _, ok := dirs[d]; ok {
			return
		}
		dirs[d] = map[string]fs.DirEntry{}
		parent := path.Dir(d)
		addDir(parent)
		dirs[parent][path.Base(d)] = fs.FileInfoToDirEntry(dirInfo(path.Base(d)))
	}
	for p, f := range m {
		if f.Mode.IsDir() {
			addDir(p)
			if p != "." {
				dirs[path.Dir(p)][path.Base(p)] = fs.FileInfoToDirEntry(fileInfo{name: path.Base(p), f: f}) // its own mode
			}
			continue
		}
		parent := path.Dir(p)
		addDir(parent)
		dirs[parent][path.Base(p)] = fs.FileInfoToDirEntry(fileInfo{name: path.Base(p), f: f})
	}
	out := make(map[string][]fs.DirEntry, len(dirs))
	for d, entries := range dirs {
		list := slices.Collect(maps.Values(entries))
		slices.SortFunc(list, func(a, b fs.DirEntry) int { return strings.Compare(a.Name(), b.Name()) })
		out[d] = list
	}
	return out
}

// fileInfo is a file of the tree, as fstest.MapFS describes it.
type fileInfo struct {
	name string
	f    *fstest.MapFile
}

func (i fileInfo) Name() string       { return i.name }
func (i fileInfo) Size() int64        { return int64(len(i.f.Data)) }
func (i fileInfo) Mode() fs.FileMode  { return i.f.Mode }
func (i fileInfo) ModTime() time.Time { return i.f.ModTime }
func (i fileInfo) IsDir() bool        { return i.f.Mode.IsDir() }
func (i fileInfo) Sys() any           { return i.f.Sys }

// dirInfo is a folder of the tree.
type dirInfo string

func (d dirInfo) Name() string       { return string(d) }
func (d dirInfo) Size() int64        { return 0 }
func (d dirInfo) Mode() fs.FileMode  { return fs.ModeDir | 0o555 }
func (d dirInfo) ModTime() time.Time { return time.Time{} }
func (d dirInfo) IsDir() bool        { return true }
func (d dirInfo) Sys() any           { return nil }

func (t treeFS) check(op, name string) error {
	if _, ok := t.large[name]; ok && op == "open" {
		return &fs.PathError{Op: op, Path: name, Err: ErrTooLarge}
	}
	for p := name; p != "." && p != "/" && p != ""; p = path.Dir(p) {
		if _, ok := t.links[p]; ok {
			return &fs.PathError{Op: op, Path: p, Err: ErrSymlink}
		}
	}
	return nil
}

func (t treeFS) Open(name string) (fs.File, error) {
	if err := t.check("open", name); err != nil {
		return nil, err
	}
	f, err := t.m.Open(name)
	return bounded(name, f, err)
}

func (t treeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := t.check("readdir", name); err != nil {
		return nil, err
	}
	if entries, ok := t.dirs[name]; ok {
		return slices.Clone(entries), nil
	}
	return t.m.ReadDir(name) // not a folder: its error
}

func (t treeFS) Stat(name string) (fs.FileInfo, error) {
	if err := t.check("stat", name); err != nil {
		return nil, err
	}
	if f, ok := t.m[name]; ok {
		return fileInfo{name: path.Base(name), f: f}, nil
	}
	if _, ok := t.dirs[name]; ok {
		return dirInfo(path.Base(name)), nil
	}
	return t.m.Stat(name) // not there: its error
}

// ReadFile is fs.ReadFile's fast path, checked the same way.
func (t treeFS) ReadFile(name string) ([]byte, error) {
	if err := t.check("open", name); err != nil {
		return nil, err
	}
	f, err := t.Open(name)
	if err != nil {
		return nil, err
	}
	f.Close()
	return t.m.ReadFile(name)
}
