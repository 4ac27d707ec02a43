// Package gitsource reads the stands repository: it fetches the tracked branch with go-git (over HTTP(S)
// with a token, or SSH with a key) into an immutable Snapshot, keeps the last good snapshot when a
// fetch fails — an unreachable source is never "no stands" — and verifies Gitea push webhooks.
package gitsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"strings"
	"sync"
	"testing/fstest"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
)

// Snapshot is the tracked branch at one commit. Files is read-only.
type Snapshot struct {
	Commit  string
	Message string
	Author  string
	Time    time.Time
	Files   fs.FS
}

// ErrUnavailable marks a fetch that failed: the source is down or refuses us. The last good snapshot
// stays in force.
var ErrUnavailable = errors.New("the stands repository is unavailable")

// Source fetches one branch of one repository.
type Source struct {
	url    string
	branch string
	auth   func() (transport.AuthMethod, error)

	mu        sync.Mutex
	repo      *git.Repository
	last      *Snapshot
	available bool
	lastErr   error
}

// Option configures a Source.
type Option func(*Source)

// WithToken authenticates over HTTP(S); token is called at every fetch, so a rotated credential file
// needs no restart.
func WithToken(user string, token func() (string, error)) Option {
	return func(s *Source) {
		s.auth = func() (transport.AuthMethod, error) {
			t, err := token()
			if err != nil {
				return nil, err
			}
			return &githttp.BasicAuth{Username: user, Password: t}, nil
		}
	}
}

// WithAuth sets any go-git auth method, e.g. SSH public keys with a pinned host key.
func WithAuth(a transport.AuthMethod) Option {
	return func(s *Source) { s.auth = func() (transport.AuthMethod, error) { return a, nil } }
}

// New returns a source for branch at url.
func New(url, branch string, opts ...Option) *Source {
	s := &Source{url: url, branch: branch, auth: func() (transport.AuthMethod, error) { return nil, nil }}
	for _, o := range opts {
		o(s)
	}
	return s
}

// Fetch brings the branch up to date and returns its snapshot. On failure it returns the last good
// snapshot (nil before the first success) and an error wrapping ErrUnavailable.
func (s *Source) Fetch(ctx context.Context) (*Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	snap, err := s.fetch(ctx)
	if err != nil {
		s.available, s.lastErr = false, err
		return s.last, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.last, s.available, s.lastErr = snap, true, nil
	return snap, nil
}

// Latest is the last good snapshot and whether the last fetch succeeded.
func (s *Source) Latest() (*Snapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.available
}

func (s *Source) fetch(ctx context.Context) (*Snapshot, error) {
	auth, err := s.auth()
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	ref := plumbing.NewBranchReferenceName(s.branch)
	if s.repo == nil {
		repo, err := git.CloneContext(ctx, memory.NewStorage(), nil, &git.CloneOptions{
			URL: s.url, Auth: auth, ReferenceName: ref, SingleBranch: true, Depth: 1, Tags: git.NoTags,
		})
		if err != nil {
			return nil, fmt.Errorf("clone %s: %w", redact(s.url), err)
		}
		s.repo = repo
	} else {
		err := s.repo.FetchContext(ctx, &git.FetchOptions{
			Auth: auth, Depth: 1, Tags: git.NoTags, Force: true,
			RefSpecs: []config.RefSpec{config.RefSpec("+" + ref.String() + ":refs/remotes/origin/" + s.branch)},
		})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
			return nil, fmt.Errorf("fetch %s: %w", redact(s.url), err)
		}
	}
	head, err := s.repo.Reference(plumbing.NewRemoteReferenceName("origin", s.branch), true)
	if err != nil {
		return nil, fmt.Errorf("branch %s: %w", s.branch, err)
	}
	commit, err := s.repo.CommitObject(head.Hash())
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", head.Hash(), err)
	}
	files, err := treeFS(commit)
	if err != nil {
		return nil, err
	}
	return &Snapshot{Commit: commit.Hash.String(), Message: strings.TrimSpace(commit.Message), Author: commit.Author.Email,
		Time: commit.Committer.When, Files: files}, nil
}

// treeFS copies a commit's tree into memory: snapshots are small (manifests and templates) and must not
// change under a running reconcile.
func treeFS(c *object.Commit) (fs.FS, error) {
	tree, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("read tree: %w", err)
	}
	out := fstest.MapFS{}
	err = tree.Files().ForEach(func(f *object.File) error {
		if !f.Mode.IsFile() {
			return nil
		}
		r, err := f.Reader()
		if err != nil {
			return err
		}
		defer r.Close()
		data, err := io.ReadAll(r)
		if err != nil {
			return err
		}
		out[f.Name] = &fstest.MapFile{Data: data, Mode: 0o444}
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("read files: %w", err)
	}
	return out, nil
}

// redact drops credentials from a URL for messages.
func redact(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "***@" + u[i+1:]
		}
	}
	return u
}
