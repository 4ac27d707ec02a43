// Package gitsource reads the stands repository and writes status back to it. It fetches the tracked
// branch with go-git (over HTTP(S) with a token, over SSH with a key, or straight from a local
// repository) into an immutable Snapshot, keeps the last good snapshot when a fetch fails — an
// unreachable source is never "no stands" — recognises the reconciler's own status commits so they
// never trigger work, and commits status files with bounded retries when someone pushed first.
package gitsource

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"strings"
	"sync"
	"testing/fstest"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Identity is who the reconciler commits as.
type Identity struct {
	Name  string
	Email string
}

// DefaultIdentity is the reconciler's commit identity unless configured otherwise.
var DefaultIdentity = Identity{Name: "stands-reconciler", Email: "stands-reconciler@localhost"}

// ErrUnavailable marks a fetch that failed: the source is down or refuses us. The last good snapshot
// stays in force.
var ErrUnavailable = errors.New("the stands repository is unavailable")

// ErrRejected marks a status push the server refused for another reason than a race (e.g. a
// protected branch without the reconciler in its push allow-list): retrying cannot help.
var ErrRejected = errors.New("the status push was rejected")

// Source fetches one branch of one repository and writes status to a branch of it.
type Source struct {
	url          string
	branch       string
	statusBranch string
	identity     Identity
	retries      int
	timeout      time.Duration
	recloneEvery int
	auth         func() (transport.AuthMethod, error)
	log          *slog.Logger
	store        store

	mu        sync.Mutex
	last      *stands.Snapshot
	available bool
	lastErr   error
}

// Option configures a Source.
type Option func(*Source)

// WithToken authenticates over HTTP(S); token is called at every fetch and push, so a rotated
// credential file needs no restart.
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

// WithStatusBranch writes status to branch instead of the tracked branch, for teams that forbid bot
// pushes to it. A status branch that does not exist yet starts as an orphan holding status only.
func WithStatusBranch(branch string) Option { return func(s *Source) { s.statusBranch = branch } }

// WithIdentity sets who status commits are authored by.
func WithIdentity(id Identity) Option { return func(s *Source) { s.identity = id } }

// WithPushRetries bounds how many times a status commit is recreated after losing a race (default 5).
func WithPushRetries(n int) Option { return func(s *Source) { s.retries = n } }

// WithTimeout bounds each fetch and push (default 2 minutes): a server that accepts connections and
// never answers must not hold the reconciler.
func WithTimeout(d time.Duration) Option { return func(s *Source) { s.timeout = d } }

// WithRecloneEvery starts the in-memory copy of a remote repository afresh every n fetches (default
// 500): it holds every fetched object, the reconciler's own status commits included, and would
// otherwise only grow.
func WithRecloneEvery(n int) Option { return func(s *Source) { s.recloneEvery = n } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(s *Source) { s.log = l } }

// New returns a source for branch at url: an http(s):// or ssh:// URL, or a local repository path
// (plain or file://), read and written in place without a clone.
func New(url, branch string, opts ...Option) *Source {
	s := &Source{url: url, branch: branch, identity: DefaultIdentity, retries: 5, timeout: 2 * time.Minute, recloneEvery: 500,
		log:  slog.New(slog.DiscardHandler),
		auth: func() (transport.AuthMethod, error) { return nil, nil }}
	for _, o := range opts {
		o(s)
	}
	if s.statusBranch == "" {
		s.statusBranch = branch
	}
	if path, ok := localPath(url); ok {
		s.store = &localStore{path: path}
	} else {
		s.store = &remoteStore{url: url, recloneEvery: s.recloneEvery}
	}
	return s
}

// StatusBranch is where status commits go.
func (s *Source) StatusBranch() string { return s.statusBranch }

// Fetch brings the branch up to date and returns its snapshot. On failure it returns the last good
// snapshot (nil before the first success) and an error wrapping ErrUnavailable.
func (s *Source) Fetch(ctx context.Context) (*stands.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	snap, err := s.fetch(ctx)
	if err != nil {
		s.available, s.lastErr = false, err
		return s.last, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	s.last, s.available, s.lastErr = snap, true, nil
	return snap, nil
}

// Latest is the last good snapshot and whether the last fetch succeeded.
func (s *Source) Latest() (*stands.Snapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last, s.available
}

func (s *Source) fetch(ctx context.Context) (*stands.Snapshot, error) {
	auth, err := s.auth()
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	head, err := s.store.fetch(ctx, auth, s.branch)
	if err != nil {
		return nil, err
	}
	if head == nil {
		return nil, fmt.Errorf("branch %s does not exist in %s", s.branch, RedactURL(s.url))
	}
	repo := s.store.repo()
	commit, err := repo.CommitObject(*head)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", head, err)
	}
	source, err := s.sourceCommit(commit)
	if err != nil {
		return nil, err
	}
	files, err := treeFS(commit)
	if err != nil {
		return nil, err
	}
	return &stands.Snapshot{Commit: commit.Hash.String(), Source: source.Hash.String(), Message: strings.TrimSpace(source.Message),
		Author: source.Author.Email, Time: source.Committer.When, Files: files}, nil
}

// sourceCommit walks back over the reconciler's own commits.
func (s *Source) sourceCommit(c *object.Commit) (*object.Commit, error) {
	for range 10000 {
		own, err := s.isOwn(c)
		if err != nil || !own {
			return c, err
		}
		parent, err := c.Parent(0)
		if err != nil {
			return nil, fmt.Errorf("read parent of %s: %w", c.Hash, err)
		}
		c = parent
	}
	return c, nil
}

// isOwn: authored by the reconciler's identity AND touching only status paths.
func (s *Source) isOwn(c *object.Commit) (bool, error) {
	if c.Author.Email != s.identity.Email || c.Author.Name != s.identity.Name || c.NumParents() != 1 {
		return false, nil
	}
	parent, err := c.Parent(0)
	if err != nil {
		return false, fmt.Errorf("read parent of %s: %w", c.Hash, err)
	}
	from, err := parent.Tree()
	if err != nil {
		return false, err
	}
	to, err := c.Tree()
	if err != nil {
		return false, err
	}
	changes, err := object.DiffTree(from, to)
	if err != nil {
		return false, fmt.Errorf("diff %s: %w", c.Hash, err)
	}
	for _, ch := range changes {
		if !stands.IsStatusPath(ch.From.Name) && ch.From.Name != "" || !stands.IsStatusPath(ch.To.Name) && ch.To.Name != "" {
			return false, nil
		}
	}
	return true, nil
}

// StatusFiles is the status branch's tree: the tracked snapshot's when status goes to the tracked
// branch, an empty tree when the status branch does not exist yet.
func (s *Source) StatusFiles(ctx context.Context) (fs.FS, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	auth, err := s.auth()
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	head, err := s.store.fetch(ctx, auth, s.statusBranch)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	if head == nil {
		return fstest.MapFS{}, nil
	}
	c, err := s.store.repo().CommitObject(*head)
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", head, err)
	}
	return treeFS(c)
}

// Publish commits files (path → content; nil content removes the file) to the status branch as the
// reconciler's identity, only when they change something. Losing a race to another push refetches
// and recreates the commit, up to the configured retries. It returns the new commit, or "" when
// nothing changed.
func (s *Source) Publish(ctx context.Context, files map[string][]byte, message string) (string, error) {
	for p := range files {
		if !stands.IsStatusPath(p) {
			return "", fmt.Errorf("publish %s: only %s/ and %s are written by the reconciler", p, stands.StatusDir, stands.StatusFile)
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for attempt := 1; ; attempt++ {
		commit, err := s.publish(ctx, files, message)
		if err == nil || !errors.Is(err, errRace) || attempt > s.retries {
			return commit, err
		}
		s.log.Info("status push lost a race; recreating the commit", "attempt", attempt, "branch", s.statusBranch)
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(time.Duration(attempt*100) * time.Millisecond):
		}
	}
}

var errRace = errors.New("the branch moved")

func (s *Source) publish(ctx context.Context, files map[string][]byte, message string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	auth, err := s.auth()
	if err != nil {
		return "", fmt.Errorf("credentials: %w", err)
	}
	base, err := s.store.fetch(ctx, auth, s.statusBranch)
	if err != nil {
		return "", fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	repo := s.store.repo()
	var baseTree *object.Tree
	var parents []plumbing.Hash
	if base != nil {
		c, err := repo.CommitObject(*base)
		if err != nil {
			return "", fmt.Errorf("read commit %s: %w", base, err)
		}
		if baseTree, err = c.Tree(); err != nil {
			return "", fmt.Errorf("read tree of %s: %w", base, err)
		}
		parents = []plumbing.Hash{*base}
	}
	tree, err := writeTree(repo, baseTree, files)
	if err != nil {
		return "", fmt.Errorf("write status tree: %w", err)
	}
	if baseTree != nil && tree == baseTree.Hash {
		return "", nil
	}
	sig := object.Signature{Name: s.identity.Name, Email: s.identity.Email, When: time.Now()}
	c := &object.Commit{Author: sig, Committer: sig, Message: message, TreeHash: tree, ParentHashes: parents}
	obj := repo.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return "", err
	}
	hash, err := repo.Storer.SetEncodedObject(obj)
	if err != nil {
		return "", fmt.Errorf("store status commit: %w", err)
	}
	if err := s.store.push(ctx, auth, s.statusBranch, base, hash); err != nil {
		return "", err
	}
	s.log.Info("status committed", "commit", hash.String()[:12], "branch", s.statusBranch, "files", len(files))
	return hash.String(), nil
}

// maxTreeSize is stands.MaxTreeSize; tests lower it.
var maxTreeSize int64 = stands.MaxTreeSize

// treeFS copies a commit's tree into memory: snapshots are small (manifests and templates) and must not
// change under a running reconcile.
func treeFS(c *object.Commit) (fs.FS, error) {
	tree, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("read tree: %w", err)
	}
	out := fstest.MapFS{}
	links := map[string]string{}
	large := map[string]int64{}
	var total int64
	err = tree.Files().ForEach(func(f *object.File) error {
		if !f.Mode.IsFile() {
			return nil
		}
		if f.Size > repofs.MaxFileSize {
			large[f.Name] = f.Size // never read: a stand that needs it fails, naming it
			return nil
		}
		if total += f.Size; total > maxTreeSize {
			return fmt.Errorf("%w: the commit's files hold more than %d MiB", stands.ErrTooLarge, stands.MaxTreeSize>>20)
		}
		if f.Mode == filemode.Symlink {
			// Kept as a link, which refuses to be read (internal/repofs), as the command line sees it;
			// go-git counts links as files whose content is the target's path.
			target, err := f.Contents()
			if err != nil {
				return err
			}
			links[f.Name] = target
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
	return repofs.Tree(out, links, large), nil
}

// RedactURL drops credentials from a URL for messages and logs.
func RedactURL(u string) string {
	if i := strings.Index(u, "@"); i >= 0 {
		if j := strings.Index(u, "://"); j >= 0 && j < i {
			return u[:j+3] + "***@" + u[i+1:]
		}
	}
	return u
}

// store is where the repository lives: a remote reached over a transport, or a local repository.
type store interface {
	repo() *git.Repository
	// fetch brings branch's objects in and returns its head (nil when the branch does not exist).
	fetch(ctx context.Context, auth transport.AuthMethod, branch string) (*plumbing.Hash, error)
	// push moves branch from old (nil: create) to new; a moved branch is errRace.
	push(ctx context.Context, auth transport.AuthMethod, branch string, old *plumbing.Hash, new plumbing.Hash) error
}

type remoteStore struct {
	url          string
	r            *git.Repository
	fetches      int
	recloneEvery int
}

func (r *remoteStore) repo() *git.Repository { return r.r }

func (r *remoteStore) fetch(ctx context.Context, auth transport.AuthMethod, branch string) (*plumbing.Hash, error) {
	if r.fetches++; r.recloneEvery > 0 && r.fetches > r.recloneEvery {
		r.r, r.fetches = nil, 1
	}
	if r.r == nil {
		repo, err := git.Init(memory.NewStorage(), nil)
		if err != nil {
			return nil, err
		}
		if _, err := repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{r.url}}); err != nil {
			return nil, err
		}
		r.r = repo
	}
	tracking := plumbing.NewRemoteReferenceName("origin", branch)
	err := r.r.FetchContext(ctx, &git.FetchOptions{Auth: auth, Tags: git.NoTags, Force: true,
		RefSpecs: []config.RefSpec{config.RefSpec("+" + plumbing.NewBranchReferenceName(branch).String() + ":" + tracking.String())}})
	switch {
	case errors.Is(err, git.NoMatchingRefSpecError{}):
		_ = r.r.Storer.RemoveReference(tracking)
		return nil, nil
	case err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate):
		return nil, fmt.Errorf("fetch %s from %s: %w", branch, RedactURL(r.url), err)
	}
	ref, err := r.r.Reference(tracking, true)
	if err != nil {
		return nil, fmt.Errorf("branch %s: %w", branch, err)
	}
	h := ref.Hash()
	return &h, nil
}

// push moves the remote branch from old to new, and only from old: a compare-and-swap on the ref
// (a push "with lease"). A plain push would also go through when the branch was force-pushed back
// to an ancestor of old meanwhile (new still descends from it), and put the rewound commits back.
func (r *remoteStore) push(ctx context.Context, auth transport.AuthMethod, branch string, old *plumbing.Hash, new plumbing.Hash) error {
	// The lease is read from the remote-tracking ref of the local branch of the same name.
	local := plumbing.NewBranchReferenceName(branch)
	if err := r.r.Storer.SetReference(plumbing.NewHashReference(local, new)); err != nil {
		return err
	}
	opts := &git.PushOptions{Auth: auth, RefSpecs: []config.RefSpec{config.RefSpec(local.String() + ":" + local.String())}}
	if old != nil {
		opts.ForceWithLease = &git.ForceWithLease{RefName: local, Hash: *old}
	}
	err := r.r.PushContext(ctx, opts)
	if err == nil || errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil
	}
	return pushError(branch, err)
}

// pushError tells a lost race (someone pushed first) from a refusal.
func pushError(branch string, err error) error {
	msg := strings.ToLower(err.Error())
	switch {
	case errors.Is(err, git.ErrForceNeeded), errors.Is(err, git.ErrNonFastForwardUpdate),
		strings.Contains(msg, "non-fast-forward"), strings.Contains(msg, "fetch first"), strings.Contains(msg, "failed to update ref"):
		return fmt.Errorf("push status to %s: %w: %w", branch, errRace, err)
	case errors.Is(err, transport.ErrAuthenticationRequired), errors.Is(err, transport.ErrAuthorizationFailed),
		strings.Contains(msg, "protected branch"), strings.Contains(msg, "pre-receive hook declined"), strings.Contains(msg, "not allowed to push"):
		return fmt.Errorf("push status to %s: %w: %w", branch, ErrRejected, err)
	}
	return fmt.Errorf("push status to %s: %w: %w", branch, ErrUnavailable, err)
}
