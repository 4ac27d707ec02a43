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
	"maps"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing/fstest"
	"time"

	"github.com/go-git/go-billy/v5/osfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/cache"
	"github.com/go-git/go-git/v5/plumbing/filemode"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage"
	"github.com/go-git/go-git/v5/storage/filesystem"
	"github.com/go-git/go-git/v5/storage/memory"
	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/stands"
	"golang.org/x/crypto/ssh"
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

// unavailable wraps a failed fetch in ErrUnavailable, saying first when it failed here rather than at
// the server: the tracked branch's objects are kept in the state folder, so a full disk fails the
// fetch, and "the stands repository is unavailable" would send on-call to a Gitea that is fine.
func unavailable(err error) error {
	if localWriteFailed(err) {
		return &stateWriteError{err: err}
	}
	return fmt.Errorf("%w: %w", ErrUnavailable, err)
}

// stateWriteError is a fetch that could not write the state folder; it is ErrUnavailable still, so
// the loop keeps the last good snapshot and destroys nothing.
type stateWriteError struct{ err error }

func (e *stateWriteError) Error() string {
	return "the state folder cannot be written (the repository's objects are kept there): " + e.err.Error()
}
func (e *stateWriteError) Unwrap() []error { return []error{ErrUnavailable, e.err} }

// localWriteFailed: the disk or quota is full, or the file system read-only. go-git does not always
// keep the errno in its chain, so its text counts too.
func localWriteFailed(err error) bool {
	for _, no := range []syscall.Errno{syscall.ENOSPC, syscall.EDQUOT, syscall.EROFS} {
		if errors.Is(err, no) || strings.Contains(err.Error(), no.Error()) {
			return true
		}
	}
	return false
}

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
	workDir      string
	pullLimits   PullLimits
	maxTree      int64                  // bytes a snapshot's files may hold in all (stands.MaxTreeSize)
	largeBlobs   bool                   // the filter's control: every blob asked for (withLargeBlobs)
	cleaned      bool                   // the pull request folders a killed daemon left were removed
	signer       ssh.Signer             // signs the reconciler's commits (signing.go); nil: unsigned
	trusted      []ssh.PublicKey        // keys rotated out whose signatures still count
	signedOnce   bool                   // a status commit was signed (status_trust.go)
	reported     map[plumbing.Hash]bool // others' status changes logged

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

// WithRecloneEvery starts the copy of a remote repository afresh every n fetches (default 500): it
// holds every fetched object, the reconciler's own status commits included, and would otherwise only
// grow.
func WithRecloneEvery(n int) Option { return func(s *Source) { s.recloneEvery = n } }

// WithWorkDir keeps the repository's objects on disk under dir (default: in memory, for one-shot
// commands): the tracked and status branches' in dir/tracked, kept across restarts, and a pull
// request's in a folder of its own while its head is read. The daemon gives its state folder's git/.
func WithWorkDir(dir string) Option { return func(s *Source) { s.workDir = dir } }

// WithPullLimits bounds what reading a pull request's head may take (default DefaultPullLimits).
func WithPullLimits(l PullLimits) Option { return func(s *Source) { s.pullLimits = l } }

// withMaxTreeSize bounds what one snapshot's files may hold in all (default stands.MaxTreeSize):
// tests lower it.
func withMaxTreeSize(n int64) Option { return func(s *Source) { s.maxTree = n } }

// withLargeBlobs asks every fetch for every blob, those the filter leaves on the server too: the
// control of the tests that show what the filter keeps out.
func withLargeBlobs() Option { return func(s *Source) { s.largeBlobs = true } }

// WithLogger sets the logger.
func WithLogger(l *slog.Logger) Option { return func(s *Source) { s.log = l } }

// New returns a source for branch at url: an http(s):// or ssh:// URL, or a local repository path
// (plain or file://), read and written in place without a clone.
func New(url, branch string, opts ...Option) *Source {
	s := &Source{url: url, branch: branch, identity: DefaultIdentity, retries: 5, timeout: 2 * time.Minute, recloneEvery: 500, pullLimits: DefaultPullLimits, maxTree: stands.MaxTreeSize,
		log: slog.New(slog.DiscardHandler), reported: map[plumbing.Hash]bool{},
		auth: func() (transport.AuthMethod, error) { return nil, nil }}
	for _, o := range opts {
		o(s)
	}
	s.pullLimits.largeBlobs = s.pullLimits.largeBlobs || s.largeBlobs
	if s.statusBranch == "" {
		s.statusBranch = branch
	}
	if path, ok := localPath(url); ok {
		s.store = &localStore{path: path}
	} else {
		r := &remoteStore{url: url, recloneEvery: s.recloneEvery, limits: TrackedLimits}
		r.limits.largeBlobs = r.limits.largeBlobs || s.largeBlobs
		if s.workDir != "" {
			r.dir = filepath.Join(s.workDir, trackedDir)
		}
		s.store = r
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
		return s.last, unavailable(err)
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
	if s.last != nil && s.last.Commit == head.String() {
		return s.last, nil // a snapshot never changes: the branch did not move, nothing is read again
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
	files, err := treeFS(repo.Storer, commit, s.maxTree)
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

// isOwn: the reconciler's (signed, when it has a key) AND touching only status paths.
func (s *Source) isOwn(c *object.Commit) (bool, error) {
	if s.notOwn(c) != "" || c.NumParents() != 1 {
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
		return nil, unavailable(err)
	}
	if head == nil {
		return fstest.MapFS{}, nil
	}
	c, _, err := s.trustedStatus(ctx, *head)
	if err != nil || c == nil {
		return fstest.MapFS{}, err
	}
	return treeFS(s.store.repo().Storer, c, s.maxTree)
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

// commit stores a commit of tree on parents as the reconciler's identity.
func (s *Source) commit(tree plumbing.Hash, parents []plumbing.Hash, message string) (plumbing.Hash, error) {
	repo := s.store.repo()
	sig := object.Signature{Name: s.identity.Name, Email: s.identity.Email, When: time.Now()}
	c := &object.Commit{Author: sig, Committer: sig, Message: message, TreeHash: tree, ParentHashes: parents}
	if err := s.sign(c); err != nil {
		return plumbing.ZeroHash, err
	}
	obj := repo.Storer.NewEncodedObject()
	if err := c.Encode(obj); err != nil {
		return plumbing.ZeroHash, err
	}
	return repo.Storer.SetEncodedObject(obj)
}

// locked takes the source's lock, bounds ctx by its timeout and reads the credentials, for one
// exchange with the remote; done ends both.
func (s *Source) locked(ctx context.Context) (_ context.Context, _ transport.AuthMethod, done func(), _ error) {
	s.mu.Lock()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	done = func() { cancel(); s.mu.Unlock() }
	auth, err := s.auth()
	if err != nil {
		done()
		return nil, nil, nil, fmt.Errorf("credentials: %w", err)
	}
	return ctx, auth, done, nil
}

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
		own, foreign, err := s.trustedStatus(ctx, *base)
		if err != nil {
			return "", fmt.Errorf("read the status branch's history: %w", err)
		}
		files = maps.Clone(files)
		back, err := putBack(own, foreign, files)
		if err != nil {
			return "", err
		}
		if len(back) > 0 {
			message += "\n\nPut back as the reconciler wrote them (changed by commits it did not make): " + strings.Join(back, ", ")
		}
	}
	tree, err := writeTree(repo, baseTree, files)
	if err != nil {
		return "", fmt.Errorf("write status tree: %w", err)
	}
	if baseTree != nil && tree == baseTree.Hash {
		return "", nil
	}
	hash, err := s.commit(tree, parents, message)
	if err != nil {
		return "", fmt.Errorf("store status commit: %w", err)
	}
	if err := s.store.push(ctx, auth, s.statusBranch, base, hash); err != nil {
		return "", err
	}
	s.markSigned()
	s.log.Info("status committed", "commit", hash.String()[:12], "branch", s.statusBranch, "files", len(files))
	return hash.String(), nil
}

// treeFS copies a commit's tree into memory: snapshots are small (manifests and templates) and must not
// change under a running reconcile. Each file's size is read from its object's header before its
// contents; a file over repofs.MaxFileSize, or whose blob a partial fetch left on the server (it is
// over that size: pullfetch.go), is listed but never read.
func treeFS(s storer.EncodedObjectStorer, c *object.Commit, maxTree int64) (fs.FS, error) {
	tree, err := c.Tree()
	if err != nil {
		return nil, fmt.Errorf("read tree: %w", err)
	}
	out := fstest.MapFS{}
	links := map[string]string{}
	large := map[string]int64{}
	var total int64
	w := object.NewTreeWalker(tree, true, nil)
	defer w.Close()
	for {
		name, e, err := w.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read files: %w", err)
		}
		if !e.Mode.IsFile() {
			continue
		}
		// Not EncodedObjectSize: go-git's leaves a loose object's file open, which TestSoak sees as
		// growing file descriptors.
		b, err := object.GetBlob(s, e.Hash)
		switch {
		case errors.Is(err, plumbing.ErrObjectNotFound):
			large[name] = -1 // left on the server by a partial fetch
			continue
		case err != nil:
			return nil, fmt.Errorf("read files: %s: %w", name, err)
		case b.Size > repofs.MaxFileSize:
			large[name] = b.Size // never read: a stand that needs it fails, naming it
			continue
		}
		if total += b.Size; total > maxTree {
			return nil, &stands.TooLarge{Limit: fmt.Sprintf("the commit's files hold more than %d MiB", stands.MaxTreeSize>>20)}
		}
		data, err := blobData(b)
		if err != nil {
			return nil, fmt.Errorf("read files: %s: %w", name, err)
		}
		if e.Mode == filemode.Symlink {
			// Kept as a link, which refuses to be read (internal/repofs), as the command line sees it;
			// Git keeps a link as a blob holding the target's path.
			links[name] = string(data)
			continue
		}
		out[name] = &fstest.MapFile{Data: data, Mode: 0o444}
	}
	return repofs.Tree(out, links, large), nil
}

// blobData reads a blob of at most repofs.MaxFileSize bytes.
func blobData(b *object.Blob) ([]byte, error) {
	r, err := b.Reader()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	return io.ReadAll(io.LimitReader(r, repofs.MaxFileSize))
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

// remoteStore keeps a remote repository's objects: on disk in dir (the daemon's state folder), or in
// memory when no folder was given (one-shot commands). Objects come through upload.fetch, as a pull
// request's do: every blob over repofs.MaxFileSize stays on the server and no object over the limits
// reaches memory, so what the tracked branch holds does not set the daemon's size.
type remoteStore struct {
	url          string
	dir          string
	r            *git.Repository
	close        func() error
	fetches      int
	recloneEvery int
	limits       PullLimits
}

// TrackedLimits bound one fetch of the tracked or status branch. They are wider than a pull
// request's: the branch was reviewed, a first fetch brings its whole history, and a branch over
// them leaves the reconciler on its last good snapshot until it is fixed. Object bounds what indexing
// the pack holds in memory at once.
var TrackedLimits = PullLimits{Pack: 4 << 30, Object: 64 << 20, Objects: 10_000_000, Total: 64 << 30}.control(false)

func (r *remoteStore) repo() *git.Repository { return r.r }

// open opens the store, or starts it afresh: a folder that does not read as a repository (a daemon
// killed while starting it) is removed first.
func (r *remoteStore) open() error {
	if r.r != nil {
		return nil
	}
	err := r.openOnce()
	if err == nil || r.dir == "" {
		return err
	}
	if rerr := os.RemoveAll(r.dir); rerr != nil {
		return fmt.Errorf("remove the unreadable store %s (%w): %w", r.dir, err, rerr)
	}
	return r.openOnce()
}

func (r *remoteStore) openOnce() (err error) {
	var st storage.Storer = memory.NewStorage()
	r.close = func() error { return nil }
	if r.dir != "" {
		if err := os.MkdirAll(r.dir, 0o700); err != nil {
			return err
		}
		// A few packs stay open between reads. Not ExclusiveAccess: with it a fetch of a branch that did
		// not move took 150 ms against 35 in BenchmarkFetch, after each new pack.
		fst := filesystem.NewStorageWithOptions(osfs.New(r.dir), cache.NewObjectLRU(4<<20),
			filesystem.Options{MaxOpenDescriptors: 8})
		st, r.close = fst, fst.Close
	}
	defer func() {
		if err != nil {
			_ = r.close()
		}
	}()
	repo, err := git.Open(st, nil)
	if errors.Is(err, git.ErrRepositoryNotExists) {
		if repo, err = git.Init(st, nil); err == nil {
			_, err = repo.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{r.url}})
		}
	}
	if err != nil {
		return err
	}
	r.r = repo
	return nil
}

// reset drops the store: the next fetch starts it afresh.
func (r *remoteStore) reset() error {
	if r.r == nil {
		return nil
	}
	r.r = nil
	err := r.close()
	if r.dir != "" {
		err = errors.Join(err, os.RemoveAll(r.dir))
	}
	return err
}

func (r *remoteStore) fetch(ctx context.Context, auth transport.AuthMethod, branch string) (*plumbing.Hash, error) {
	if r.fetches++; r.recloneEvery > 0 && r.fetches > r.recloneEvery {
		r.fetches = 1
		if err := r.reset(); err != nil {
			return nil, fmt.Errorf("start the store afresh: %w", err)
		}
	}
	if err := r.open(); err != nil {
		return nil, fmt.Errorf("open the store: %w", err)
	}
	up, err := listRefs(ctx, r.url, auth)
	if err != nil {
		return nil, fmt.Errorf("fetch %s from %s: %w", branch, RedactURL(r.url), err)
	}
	defer up.Close()
	tracking := plumbing.NewRemoteReferenceName("origin", branch)
	ref, ok := up.refs[plumbing.NewBranchReferenceName(branch)]
	if !ok || ref.Type() != plumbing.HashReference {
		_ = r.r.Storer.RemoveReference(tracking)
		return nil, nil
	}
	h := ref.Hash()
	if err := r.bring(ctx, up, h); err != nil {
		return nil, fmt.Errorf("fetch %s from %s: %w", branch, RedactURL(r.url), err)
	}
	if err := r.r.Storer.SetReference(plumbing.NewHashReference(tracking, h)); err != nil {
		return nil, fmt.Errorf("branch %s: %w", branch, errors.Join(err, r.reset()))
	}
	return &h, nil
}

// bring fetches commit h unless the store has it. A store that fails to take what was fetched is
// dropped, so the next fetch starts it afresh rather than fail on it until the next reclone.
func (r *remoteStore) bring(ctx context.Context, up *upload, h plumbing.Hash) error {
	if r.r.Storer.HasEncodedObject(h) == nil {
		return nil
	}
	tmp := r.dir
	if tmp == "" {
		tmp = os.TempDir()
	}
	err := up.fetch(ctx, h, r.tips(), r.r.Storer, tmp, r.limits)
	if errors.Is(err, errStore) {
		return errors.Join(err, r.reset())
	}
	return err
}

// tips are the commits the store has at its refs: what a fetch says it has, so the server sends only
// what is new.
func (r *remoteStore) tips() []plumbing.Hash {
	refs, err := r.r.Storer.IterReferences()
	if err != nil {
		return nil
	}
	var out []plumbing.Hash
	_ = refs.ForEach(func(ref *plumbing.Reference) error {
		if ref.Type() == plumbing.HashReference && r.r.Storer.HasEncodedObject(ref.Hash()) == nil {
			out = append(out, ref.Hash())
		}
		return nil
	})
	return out
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
