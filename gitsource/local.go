package gitsource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	"github.com/go-git/go-git/v5/storage"

	"github.com/stands-engine/stands-reconciler/internal/fswatch"
)

// localPath recognises a local repository: a file:// URL or a path without a scheme or scp-like host.
func localPath(url string) (string, bool) {
	if p, ok := strings.CutPrefix(url, "file://"); ok {
		return p, true
	}
	if strings.Contains(url, "://") {
		return "", false
	}
	if i := strings.IndexByte(url, ':'); i > 0 && !strings.HasPrefix(url, ".") && !strings.Contains(url[:i], "/") {
		return "", false // scp-like [user@]host:path
	}
	return url, true
}

// localStore reads and writes a repository on this machine in place: refs are read from it and status
// commits are stored into it with a compare-and-set of the branch ref, no transport and no git binary.
type localStore struct {
	path string
	r    *git.Repository
}

func (l *localStore) repo() *git.Repository { return l.r }

func (l *localStore) open() error {
	if l.r != nil {
		return nil
	}
	r, err := git.PlainOpenWithOptions(l.path, &git.PlainOpenOptions{DetectDotGit: true})
	if err != nil {
		return fmt.Errorf("open repository %s: %w", l.path, err)
	}
	l.r = r
	return nil
}

func (l *localStore) fetch(_ context.Context, _ transport.AuthMethod, branch string) (*plumbing.Hash, error) {
	if err := l.open(); err != nil {
		return nil, err
	}
	ref, err := l.r.Reference(plumbing.NewBranchReferenceName(branch), true)
	if errors.Is(err, plumbing.ErrReferenceNotFound) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("branch %s: %w", branch, err)
	}
	h := ref.Hash()
	return &h, nil
}

func (l *localStore) push(_ context.Context, _ transport.AuthMethod, branch string, old *plumbing.Hash, new plumbing.Hash) error {
	name := plumbing.NewBranchReferenceName(branch)
	var oldRef *plumbing.Reference
	if old != nil {
		oldRef = plumbing.NewHashReference(name, *old)
	}
	err := l.r.Storer.CheckAndSetReference(plumbing.NewHashReference(name, new), oldRef)
	if errors.Is(err, storage.ErrReferenceHasChanged) {
		return fmt.Errorf("update %s: %w", branch, errRace)
	}
	if err != nil {
		return fmt.Errorf("update %s: %w", branch, err)
	}
	return nil
}

// Watch calls trigger soon after the branch of a local repository moves (fsnotify on its refs), so a
// commit is picked up without waiting for the poll. For remote sources it returns at once: Gitea's
// webhook plays that part. It runs until ctx ends.
func (s *Source) Watch(ctx context.Context, trigger func()) error {
	l, ok := s.store.(*localStore)
	if !ok {
		return nil
	}
	gitDir := filepath.Join(l.path, ".git")
	if st, err := os.Stat(gitDir); err != nil || !st.IsDir() {
		gitDir = l.path // bare
	}
	dirs := []string{gitDir, filepath.Join(gitDir, "refs", "heads")}
	return fswatch.Dirs(ctx, dirs, 200*time.Millisecond, trigger)
}

// writeTree stores base with files applied (nil content removes a file) and returns the new tree's
// hash. Folders left empty disappear, as git has no empty trees.
func writeTree(repo *git.Repository, base *object.Tree, files map[string][]byte) (plumbing.Hash, error) {
	entries := map[string]object.TreeEntry{}
	if base != nil {
		for _, e := range base.Entries {
			entries[e.Name] = e
		}
	}
	sub := map[string]map[string][]byte{}
	for p, data := range files {
		if dir, rest, nested := strings.Cut(p, "/"); nested {
			if sub[dir] == nil {
				sub[dir] = map[string][]byte{}
			}
			sub[dir][rest] = data
			continue
		}
		if data == nil {
			delete(entries, p)
			continue
		}
		obj := repo.Storer.NewEncodedObject()
		obj.SetType(plumbing.BlobObject)
		w, err := obj.Writer()
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if _, err := w.Write(data); err != nil {
			return plumbing.ZeroHash, err
		}
		w.Close()
		h, err := repo.Storer.SetEncodedObject(obj)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		entries[p] = object.TreeEntry{Name: p, Mode: filemode.Regular, Hash: h}
	}
	for dir, inner := range sub {
		var child *object.Tree
		if e, ok := entries[dir]; ok && e.Mode == filemode.Dir {
			t, err := repo.TreeObject(e.Hash)
			if err != nil {
				return plumbing.ZeroHash, err
			}
			child = t
		}
		h, err := writeTree(repo, child, inner)
		if err != nil {
			return plumbing.ZeroHash, err
		}
		if h == emptyTree {
			delete(entries, dir)
		} else {
			entries[dir] = object.TreeEntry{Name: dir, Mode: filemode.Dir, Hash: h}
		}
	}
	t := &object.Tree{}
	for _, e := range entries {
		t.Entries = append(t.Entries, e)
	}
	// Git orders entries by name with a folder's name read as if it ended in "/".
	key := func(e object.TreeEntry) string {
		if e.Mode == filemode.Dir {
			return e.Name + "/"
		}
		return e.Name
	}
	sort.Slice(t.Entries, func(i, j int) bool { return key(t.Entries[i]) < key(t.Entries[j]) })
	obj := repo.Storer.NewEncodedObject()
	if err := t.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return repo.Storer.SetEncodedObject(obj)
}

// emptyTree is git's well-known hash of a tree with no entries.
var emptyTree = plumbing.NewHash("4b825dc642cb6eb9a060e54bf8d69288fbee4904")
