package repofs

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"testing/fstest"
)

// Entry is what a tree holds at a path that is not a folder: a file's content, a symbolic link's
// target, or a file over MaxFileSize, which is never read.
type Entry struct {
	Data   []byte
	IsLink bool
	Link   string
	Large  bool
}

// Same reports whether two entries read the same. Two large files do, whatever they hold: nothing
// reads either.
func (e Entry) Same(o Entry) bool {
	switch {
	case e.Large || o.Large:
		return e.Large == o.Large
	case e.IsLink || o.IsLink:
		return e.IsLink == o.IsLink && e.Link == o.Link
	}
	return bytes.Equal(e.Data, o.Data)
}

// Entries lists what fsys holds at every path that is not a folder, so trees can be compared path by
// path and a tree put together from parts of others (FromEntries). Links are listed, never entered.
func Entries(fsys fs.FS) (map[string]Entry, error) {
	if t, ok := fsys.(treeFS); ok {
		return t.entries(), nil
	}
	out := map[string]Entry{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		switch {
		case err != nil:
			return err
		case d.IsDir():
			return nil
		case d.Type()&fs.ModeSymlink != 0:
			target, err := fs.ReadLink(fsys, p)
			if err != nil {
				return fmt.Errorf("read link %s: %w", p, err)
			}
			out[p] = Entry{IsLink: true, Link: target}
			return nil
		}
		data, err := fs.ReadFile(fsys, p)
		if errors.Is(err, ErrTooLarge) {
			out[p] = Entry{Large: true}
			return nil
		}
		if err != nil {
			return err
		}
		out[p] = Entry{Data: data}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("list files: %w", err)
	}
	return out, nil
}

func (t treeFS) entries() map[string]Entry {
	out := make(map[string]Entry, len(t.m))
	for p, f := range t.m {
		switch _, large := t.large[p]; {
		case f.Mode.IsDir():
		case large:
			out[p] = Entry{Large: true}
		case f.Mode&fs.ModeSymlink != 0:
			out[p] = Entry{IsLink: true, Link: t.links[p]}
		default:
			out[p] = Entry{Data: f.Data}
		}
	}
	return out
}

// FromEntries is the tree holding entries, read as Tree reads a commit's.
func FromEntries(entries map[string]Entry) fs.FS {
	files, links, large := fstest.MapFS{}, map[string]string{}, map[string]int64{}
	for p, e := range entries {
		switch {
		case e.Large:
			large[p] = MaxFileSize + 1
		case e.IsLink:
			links[p] = e.Link
		default:
			files[p] = &fstest.MapFile{Data: e.Data, Mode: 0o444}
		}
	}
	return Tree(files, links, large)
}
