package gitsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"path"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/stands"
)

// The git side of a stand's removal pull request (package expiry, docs/lifetime.md): a branch of
// the reconciler's own whose one commit removes the stand's folder, checked again before it is
// merged, and who last set the stand's end.

// PushRemoval creates branch with one commit on onto (a commit of the tracked branch) that removes
// folder, authored by the reconciler. A branch of that name is never moved: stands.ErrBranchExists.
func (s *Source) PushRemoval(ctx context.Context, branch, onto, folder, message string) (string, error) {
	if folder == "" || folder == "." || strings.HasPrefix(folder, "/") || stands.IsStatusPath(folder) {
		return "", fmt.Errorf("remove %q: not a stand's folder", folder)
	}
	ctx, auth, done, err := s.locked(ctx)
	if err != nil {
		return "", err
	}
	defer done()
	if tip, err := s.store.fetch(ctx, auth, branch); err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	} else if tip != nil {
		return "", fmt.Errorf("push %s: %w", branch, stands.ErrBranchExists)
	}
	repo := s.store.repo()
	base, err := repo.CommitObject(plumbing.NewHash(onto))
	if err != nil {
		return "", fmt.Errorf("read commit %s: %w", onto, err)
	}
	baseTree, err := base.Tree()
	if err != nil {
		return "", fmt.Errorf("read tree of %s: %w", onto, err)
	}
	if _, err := baseTree.FindEntry(folder); err != nil {
		return "", fmt.Errorf("remove %s: not in %s: %w", folder, onto, err)
	}
	tree, err := writeTree(repo, baseTree, map[string][]byte{folder: nil})
	if err != nil {
		return "", fmt.Errorf("write the removal's tree: %w", err)
	}
	hash, err := s.commit(tree, []plumbing.Hash{base.Hash}, message)
	if err != nil {
		return "", fmt.Errorf("store the removal commit: %w", err)
	}
	if err := s.store.push(ctx, auth, branch, nil, hash); err != nil {
		if errors.Is(err, errRace) {
			return "", fmt.Errorf("push %s: %w", branch, stands.ErrBranchExists) // another replica pushed it first
		}
		return "", err
	}
	s.log.Info("removal branch pushed", "branch", branch, "commit", hash.String()[:12], "removes", folder)
	return hash.String(), nil
}

// CheckRemoval says why head is not the reconciler's removal of folder ("" when it is): one commit
// of its identity whose only change is that folder's files gone. Anyone with write access can push
// to the branch; such a head is never merged for the reconciler.
func (s *Source) CheckRemoval(ctx context.Context, branch, head, folder string) (string, error) {
	ctx, auth, done, err := s.locked(ctx)
	if err != nil {
		return "", err
	}
	defer done()
	tip, err := s.store.fetch(ctx, auth, branch)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if tip == nil || tip.String() != head {
		return "the branch is not at the pull request's head", nil
	}
	c, err := s.store.repo().CommitObject(*tip)
	if err != nil {
		return "", fmt.Errorf("read commit %s: %w", head, err)
	}
	if why := s.notOwn(c); why != "" {
		return "its head is not a commit of the reconciler's: " + why, nil
	}
	if c.NumParents() != 1 {
		return "its head is not a commit on one parent", nil
	}
	parent, err := c.Parent(0)
	if err != nil {
		return "", fmt.Errorf("read parent of %s: %w", head, err)
	}
	// Its parent on the tracked branch's own history: else the removal carries, into the merge,
	// whatever its parent's history holds that no review saw.
	main, err := s.store.fetch(ctx, auth, s.branch)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if main == nil {
		return "the tracked branch is gone", nil
	}
	switch on, err := s.onFirstParents(ctx, *main, parent.Hash); {
	case err != nil:
		return "", err
	case !on:
		return fmt.Sprintf("its head's parent %s is not on %s's history", parent.Hash.String()[:12], s.branch), nil
	}
	from, err := parent.Tree()
	if err != nil {
		return "", err
	}
	to, err := c.Tree()
	if err != nil {
		return "", err
	}
	changes, err := object.DiffTree(from, to)
	if err != nil {
		return "", fmt.Errorf("diff %s: %w", head, err)
	}
	if len(changes) == 0 {
		return "its head removes nothing", nil
	}
	for _, ch := range changes {
		if ch.To.Name != "" || !strings.HasPrefix(ch.From.Name, folder+"/") {
			return fmt.Sprintf("its head changes %s, not only removes %s/", cmpName(ch), folder), nil
		}
	}
	return "", nil
}

func cmpName(ch *object.Change) string {
	if ch.To.Name != "" {
		return ch.To.Name
	}
	return ch.From.Name
}

// maxLastSet bounds the history LastSet reads.
const maxLastSet = 2000

// LastSet finds the commit that gave file the value key reads from it now, walking back from onto
// (a commit of the tracked branch) along first parents, and into a merge's second parent when the
// value came from there: the commit a person made, not the merge that brought it. key gets nil for
// a commit without the file. A history longer than maxLastSet gives the oldest commit read.
func (s *Source) LastSet(ctx context.Context, onto, file string, key func([]byte) string) (stands.Author, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	repo := s.store.repo()
	c, err := repo.CommitObject(plumbing.NewHash(onto))
	if err != nil {
		return stands.Author{}, fmt.Errorf("read commit %s: %w", onto, err)
	}
	keys := map[plumbing.Hash]string{} // by the file's blob: most commits do not change it
	keyAt := func(c *object.Commit) (string, error) {
		f, err := c.File(file)
		if errors.Is(err, object.ErrFileNotFound) || errors.Is(err, object.ErrDirectoryNotFound) {
			return key(nil), nil
		}
		if err != nil {
			return "", err
		}
		if k, ok := keys[f.Hash]; ok {
			return k, nil
		}
		r, err := f.Reader()
		if err != nil {
			return "", err
		}
		defer r.Close()
		data, err := io.ReadAll(io.LimitReader(r, 1<<20))
		if err != nil {
			return "", err
		}
		keys[f.Hash] = key(data)
		return keys[f.Hash], nil
	}
	want, err := keyAt(c)
	if err != nil {
		return stands.Author{}, fmt.Errorf("read %s at %s: %w", file, onto, err)
	}
	for range maxLastSet {
		if ctx.Err() != nil {
			return stands.Author{}, ctx.Err()
		}
		next, err := s.older(c, want, keyAt)
		if err != nil {
			return stands.Author{}, fmt.Errorf("read the history of %s: %w", path.Clean(file), err)
		}
		if next == nil {
			break
		}
		c = next
	}
	return stands.Author{Commit: c.Hash.String(), Name: c.Author.Name, Email: c.Author.Email}, nil
}

// older is the parent of c that has the value want too (nil when none does: c set it).
func (s *Source) older(c *object.Commit, want string, keyAt func(*object.Commit) (string, error)) (*object.Commit, error) {
	for i := range c.NumParents() {
		p, err := c.Parent(i)
		if err != nil {
			return nil, err
		}
		k, err := keyAt(p)
		if err != nil {
			return nil, err
		}
		if k == want {
			return p, nil
		}
	}
	return nil, nil
}

// maxFirstParents bounds OnFirstParents' walk: a year of a status commit every minute on the
// tracked branch is half a million; reading a commit costs microseconds.
const maxFirstParents = 1 << 20

// OnFirstParents says whether commit is tip or one of its first parents, its first parent's, and
// so on: the tracked branch's own history, not what a merge brought in. A merge the branch no
// longer holds (reset, force-pushed) is not on it.
func (s *Source) OnFirstParents(ctx context.Context, tip, commit string) (bool, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.onFirstParents(ctx, plumbing.NewHash(tip), plumbing.NewHash(commit))
}

// onFirstParents is OnFirstParents with the source's lock held.
func (s *Source) onFirstParents(ctx context.Context, tip, want plumbing.Hash) (bool, error) {
	c, err := s.store.repo().CommitObject(tip)
	if err != nil {
		return false, fmt.Errorf("read commit %s: %w", tip, err)
	}
	for range maxFirstParents {
		if c.Hash == want {
			return true, nil
		}
		if c.NumParents() == 0 || ctx.Err() != nil {
			return false, ctx.Err()
		}
		if c, err = c.Parent(0); err != nil {
			return false, fmt.Errorf("read the history of %s: %w", tip, err)
		}
	}
	return false, fmt.Errorf("read the history of %s: over %d commits", tip, maxFirstParents)
}

// FirstParents lists the commits of tip's first-parent history, newest first, each with the paths
// it changes against its first parent: back to since (not included), or else through the commit that
// added the file added, at most max. Complete says the list reached since or that commit.
func (s *Source) FirstParents(ctx context.Context, tip, since, added string, max int) (_ []stands.LogEntry, complete bool, _ error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	c, err := s.store.repo().CommitObject(plumbing.NewHash(tip))
	if err != nil {
		return nil, false, fmt.Errorf("read commit %s: %w", tip, err)
	}
	var out []stands.LogEntry
	for len(out) < max {
		if err := ctx.Err(); err != nil {
			return nil, false, err
		}
		if since != "" && c.Hash.String() == since {
			return out, true, nil
		}
		to, err := c.Tree()
		if err != nil {
			return nil, false, err
		}
		from := &object.Tree{}
		var parent *object.Commit
		if c.NumParents() > 0 {
			if parent, err = c.Parent(0); err != nil {
				return nil, false, fmt.Errorf("read parent of %s: %w", c.Hash, err)
			}
			if from, err = parent.Tree(); err != nil {
				return nil, false, err
			}
		}
		changes, err := object.DiffTree(from, to)
		if err != nil {
			return nil, false, fmt.Errorf("diff %s: %w", c.Hash, err)
		}
		e := stands.LogEntry{Commit: c.Hash.String(), Author: c.Author.Name, Subject: mdtext.FirstLine(c.Message)}
		for _, ch := range changes {
			e.Paths = append(e.Paths, cmpName(ch))
		}
		out = append(out, e)
		if parent == nil {
			return out, true, nil
		}
		if since == "" && added != "" {
			if _, err := from.FindEntry(added); err != nil {
				return out, true, nil // c added it
			}
		}
		c = parent
	}
	return out, false, nil
}
