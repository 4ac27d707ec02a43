package gitsource

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/stands-engine/stands-reconciler/stands"
)

// Status files feed decisions after a restart (when a stand was first seen, which its default end
// counts from; the state a status was made from), and every writer of the repository can push to
// the status branch. So the reconciler reads them as it wrote them: walking the status branch back
// from its tip to the reconciler's newest commit (signed with its key, signing.go), a change of a
// status path by any other commit is ignored (the files are read at that commit of its own),
// logged, and put back by its next status commit, which keeps this true: every status commit of its
// own holds only status files it wrote. Before the reconciler's first signed status commit (an
// upgrade) the files are read as they are; once it made one (a mark in its state folder), a branch
// without any (rewritten by a force-push) yields no status at all.

// foreignStatus is a change of status paths by a commit that is not the reconciler's.
type foreignStatus struct {
	commit plumbing.Hash
	author string
	why    string // why the commit is not the reconciler's
	paths  []string
}

func (f foreignStatus) String() string {
	return fmt.Sprintf("%s by %s (%s): %s", f.commit.String()[:12], f.author, f.why, strings.Join(f.paths, ", "))
}

// statusTrust walks the status branch back from tip to the reconciler's newest commit, and returns
// that commit (nil: none on the branch) with the changes of status paths others made since.
func (s *Source) statusTrust(ctx context.Context, tip plumbing.Hash) (*object.Commit, []foreignStatus, error) {
	c, err := s.store.repo().CommitObject(tip)
	if err != nil {
		return nil, nil, fmt.Errorf("read commit %s: %w", tip, err)
	}
	var foreign []foreignStatus
	for {
		if err := ctx.Err(); err != nil {
			return nil, nil, err
		}
		why := s.notOwn(c)
		if why == "" {
			return c, foreign, nil
		}
		paths, err := statusChanges(c)
		if err != nil {
			return nil, nil, err
		}
		if len(paths) > 0 {
			foreign = append(foreign, foreignStatus{commit: c.Hash, author: c.Author.Name + " <" + c.Author.Email + ">", why: why, paths: paths})
		}
		if c.NumParents() == 0 {
			return nil, foreign, nil
		}
		if c, err = c.Parent(0); err != nil {
			return nil, nil, fmt.Errorf("read the status branch's history: %w", err)
		}
	}
}

// statusChanges are the status paths c changes against its first parent.
func statusChanges(c *object.Commit) ([]string, error) {
	to, err := c.Tree()
	if err != nil {
		return nil, err
	}
	from := &object.Tree{}
	if c.NumParents() > 0 {
		p, err := c.Parent(0)
		if err != nil {
			return nil, err
		}
		if from, err = p.Tree(); err != nil {
			return nil, err
		}
	}
	changes, err := object.DiffTree(from, to)
	if err != nil {
		return nil, fmt.Errorf("diff %s: %w", c.Hash, err)
	}
	var out []string
	for _, ch := range changes {
		if name := cmpName(ch); stands.IsStatusPath(name) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out, nil
}

// trustedStatus is the commit whose status files the reconciler trusts on a status branch at tip:
// tip itself unless others changed status paths since its own last commit. Such changes are logged
// (each once) and returned, to be put back.
func (s *Source) trustedStatus(ctx context.Context, tip plumbing.Hash) (*object.Commit, []foreignStatus, error) {
	own, foreign, err := s.statusTrust(ctx, tip)
	if err != nil {
		return nil, nil, err
	}
	for _, f := range foreign {
		if !s.reported[f.commit] {
			s.reported[f.commit] = true
			s.log.Warn("status files changed by a commit the reconciler did not make are ignored, and put back by its next status commit",
				"branch", s.statusBranch, "commit", f.commit.String()[:12], "author", f.author, "why", f.why, "paths", f.paths)
		}
	}
	switch {
	case own != nil:
		if len(foreign) == 0 {
			own, err = s.store.repo().CommitObject(tip)
		}
		return own, foreign, err
	case s.signer != nil && s.signedBefore():
		s.log.Warn("the status branch holds no status commit the reconciler signed, though it signed some before (the branch was rewritten): no status file is trusted",
			"branch", s.statusBranch)
		return nil, nil, nil
	}
	// Not one of the reconciler's own yet: an upgrade to signed status commits, or a new branch.
	c, err := s.store.repo().CommitObject(tip)
	return c, nil, err
}

// signedMark is the file in the source's work folder that says it signed a status commit before.
const signedMark = "status-signed"

func (s *Source) signedBefore() bool {
	if s.signedOnce {
		return true
	}
	if s.workDir == "" {
		return false
	}
	_, err := os.Stat(filepath.Join(s.workDir, signedMark))
	return err == nil
}

func (s *Source) markSigned() {
	if s.signer == nil || s.signedOnce {
		return
	}
	s.signedOnce = true
	if s.workDir == "" {
		return
	}
	// A local repository is read in place: its work folder may not exist yet.
	err := os.MkdirAll(s.workDir, 0o700)
	if err == nil {
		err = os.WriteFile(filepath.Join(s.workDir, signedMark), []byte("the reconciler signed a status commit on "+s.statusBranch+"\n"), 0o600)
	}
	if err != nil {
		s.log.Warn("the mark of a signed status commit not kept", "err", err)
	}
}

// putBack adds to files, for each status path others changed, its content at own (nil where own
// has none), unless files write it anyway; it returns what it put back.
func putBack(own *object.Commit, foreign []foreignStatus, files map[string][]byte) ([]string, error) {
	if own == nil || len(foreign) == 0 {
		return nil, nil
	}
	var back []string
	for _, f := range foreign {
		for _, p := range f.paths {
			if _, ok := files[p]; ok || slices.Contains(back, p) {
				continue
			}
			file, err := own.File(p)
			switch {
			case errors.Is(err, object.ErrFileNotFound):
				files[p] = nil
			case err != nil:
				return nil, fmt.Errorf("read %s at %s: %w", p, own.Hash, err)
			default:
				text, err := file.Contents()
				if err != nil {
					return nil, fmt.Errorf("read %s at %s: %w", p, own.Hash, err)
				}
				files[p] = []byte(text)
			}
			back = append(back, p)
		}
	}
	slices.Sort(back)
	return back, nil
}
