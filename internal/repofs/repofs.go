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
	"os"
	"path"
	"path/filepath"
	"strings"
	"testing/fstest"
)

// ErrSymlink is the error of a read through a symbolic link.
var ErrSymlink = errors.New("a symbolic link: the files of a stands repository must be regular files and folders")

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
	return d.fs.Open(name)
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
// as links and refuse to be read, as Dir does.
func Tree(files fstest.MapFS, links map[string]string) fs.FS {
	out := fstest.MapFS{}
	for p, f := range files {
		out[p] = f
	}
	for p, target := range links {
		out[p] = &fstest.MapFile{Data: []byte(target), Mode: fs.ModeSymlink | 0o777}
	}
	return treeFS{m: out, links: links}
}

type treeFS struct {
	m     fstest.MapFS
	links map[string]string
}

func (t treeFS) check(op, name string) error {
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
	return t.m.Open(name)
}

func (t treeFS) ReadDir(name string) ([]fs.DirEntry, error) {
	if err := t.check("readdir", name); err != nil {
		return nil, err
	}
	return t.m.ReadDir(name)
}

func (t treeFS) Stat(name string) (fs.FileInfo, error) {
	if err := t.check("stat", name); err != nil {
		return nil, err
	}
	return t.m.Stat(name)
}

// ReadFile is fs.ReadFile's fast path, checked the same way.
func (t treeFS) ReadFile(name string) ([]byte, error) {
	if err := t.check("open", name); err != nil {
		return nil, err
	}
	return t.m.ReadFile(name)
}
