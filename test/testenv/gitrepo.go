package testenv

import (
	"cmp"
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-billy/v5/util"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// API is a Gitea SDK client authenticated as the admin user.
func (g *Gitea) API(t testing.TB) *gitea.Client {
	t.Helper()
	api, err := g.Gitea.API()
	if err != nil {
		t.Fatal(err)
	}
	return api
}

// HTTPAuth is go-git authentication with the admin's token.
func (g *Gitea) HTTPAuth() *githttp.BasicAuth {
	return &githttp.BasicAuth{Username: g.User, Password: g.Token}
}

// SSHAuth registers a new ed25519 key for the admin through the SDK and returns go-git authentication
// for Gitea's SSH server, its host key pinned.
func (g *Gitea) SSHAuth(t testing.TB) *gitssh.PublicKeys {
	t.Helper()
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.NewSignerFromKey(priv)
	if err != nil {
		t.Fatal(err)
	}
	sshPub, err := ssh.NewPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := g.API(t).CreatePublicKey(gitea.CreateKeyOption{Title: "key-" + RandomHex(4), Key: string(ssh.MarshalAuthorizedKey(sshPub))}); err != nil {
		t.Fatalf("add SSH key: %v", err)
	}
	auth := &gitssh.PublicKeys{User: "git", Signer: signer}
	auth.HostKeyCallback = g.HostKeyCallback()
	return auth
}

// SSHURL is the SSH clone URL of one of the admin's repositories.
func (g *Gitea) SSHURL(repo string) string {
	return "ssh://git@" + g.SSHAddr + "/" + g.User + "/" + repo + ".git"
}

// Repo is a repository of the test Gitea with a local in-memory clone that pushes its main branch
// over HTTP. Each change starts from the server's main, so commits the reconciler pushed in between
// are kept.
type Repo struct {
	Info  *gitea.Repository
	t     testing.TB
	local *git.Repository
	auth  *githttp.BasicAuth
	// author of the next commits: a user's name ("" for dev@example.test, whom Gitea does not know),
	// and an address of its own ("": name@example.test)
	author, email string
}

// CreateRepo creates a private repository with default branch main through the SDK.
func (g *Gitea) CreateRepo(t testing.TB, name string) *Repo {
	t.Helper()
	info, _, err := g.API(t).CreateRepo(gitea.CreateRepoOption{Name: name, DefaultBranch: "main", Private: true})
	if err != nil {
		t.Fatalf("create repository: %v", err)
	}
	local, err := git.Init(memory.NewStorage(), memfs.New())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{info.CloneURL}}); err != nil {
		t.Fatal(err)
	}
	return &Repo{Info: info, t: t, local: local, auth: g.HTTPAuth()}
}

// Commit writes one file, commits it and pushes to main over HTTP; it returns the commit hash.
func (r *Repo) Commit(path, content, msg string) string {
	r.t.Helper()
	return r.Change(msg, map[string]string{path: content})
}

// Change writes files and removes paths (a folder removes everything under it) in one commit on top
// of the server's main, and pushes it; it returns the commit hash.
func (r *Repo) Change(msg string, write map[string]string, remove ...string) string {
	r.t.Helper()
	return r.ChangeOn("main", msg, write, remove...)
}

// ChangeBy is Change authored by a user CreateUser made, whose address Gitea knows.
func (r *Repo) ChangeBy(user, msg string, write map[string]string, remove ...string) string {
	r.t.Helper()
	r.author = user
	defer func() { r.author = "" }()
	return r.Change(msg, write, remove...)
}

// ChangeAs is ChangeOn authored under any name and address: as a writer forging someone's commit
// would.
func (r *Repo) ChangeAs(name, email, branch, msg string, write map[string]string, remove ...string) string {
	r.t.Helper()
	r.author, r.email = name, email
	defer func() { r.author, r.email = "", "" }()
	return r.ChangeOn(branch, msg, write, remove...)
}

// ChangeByOn is ChangeOn authored by a user CreateUser made (or any name: its address is
// name@example.test).
func (r *Repo) ChangeByOn(user, branch, msg string, write map[string]string, remove ...string) string {
	r.t.Helper()
	r.author = user
	defer func() { r.author = "" }()
	return r.ChangeOn(branch, msg, write, remove...)
}

// ChangeOn is Change pushed to branch (created from main), e.g. a pull request's head. A push that
// loses a race (the branch moved between the fetch and the push: the reconciler commits status to
// main while a test pushes) is made again on top of the branch as it is then, as a person would.
func (r *Repo) ChangeOn(branch, msg string, write map[string]string, remove ...string) string {
	r.t.Helper()
	for attempt := 1; ; attempt++ {
		h, err := r.commitOn(branch, msg, write, remove)
		if err == nil {
			return h
		}
		if !raced(err) || attempt == 5 {
			r.t.Fatalf("push over HTTP (attempt %d): %v", attempt, err)
		}
		r.t.Logf("push to %s lost a race (%v): again on top of it", branch, err)
	}
}

// raced says whether a push failed because the ref moved meanwhile: go-git's own check against the
// refs it was shown, or the server's refusal to update a ref that is no longer where it was.
func raced(err error) bool {
	return errors.Is(err, git.ErrNonFastForwardUpdate) || strings.Contains(err.Error(), "failed to update ref") ||
		strings.Contains(err.Error(), "non-fast-forward")
}

// commitOn makes one commit on top of branch (or main) as the server has it now, and pushes it.
func (r *Repo) commitOn(branch, msg string, write map[string]string, remove []string) (string, error) {
	t := r.t
	// Start from the branch when it exists (a pull request's next commit), else from main.
	for _, b := range []string{"main", branch} {
		err := r.local.Fetch(&git.FetchOptions{Auth: r.auth, RefSpecs: []config.RefSpec{config.RefSpec("+refs/heads/" + b + ":refs/remotes/origin/" + b)}})
		if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) && !errors.Is(err, transport.ErrEmptyRemoteRepository) &&
			!errors.Is(err, git.NoMatchingRefSpecError{}) {
			t.Fatalf("fetch %s: %v", b, err)
		}
	}
	wt, err := r.local.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	ref, err := r.local.Reference(plumbing.NewRemoteReferenceName("origin", branch), true)
	if err != nil {
		ref, err = r.local.Reference("refs/remotes/origin/main", true)
	}
	if err == nil {
		if err := wt.Reset(&git.ResetOptions{Commit: ref.Hash(), Mode: git.HardReset}); err != nil {
			t.Fatalf("reset to %s: %v", ref.Name(), err)
		}
	}
	for _, p := range remove {
		err := util.Walk(wt.Filesystem, p, func(f string, info os.FileInfo, err error) error {
			if err != nil || info.IsDir() {
				return err
			}
			_, err = wt.Remove(f)
			return err
		})
		if err != nil {
			t.Fatalf("remove %s: %v", p, err)
		}
	}
	for path, content := range write {
		putFile(t, wt, path, content)
	}
	// One add of everything: an add a file reads the worktree's whole status, which at thousands
	// of files (the bench's stands, STATUS.md's pages) takes minutes.
	if len(write) > 0 {
		if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
			t.Fatal(err)
		}
	}
	author := &object.Signature{Name: "dev", Email: "dev@example.test", When: time.Now()}
	if r.author != "" {
		author.Name, author.Email = r.author, cmp.Or(r.email, r.author+"@example.test") // as CreateUser made them
	}
	h, err := wt.Commit(msg, &git.CommitOptions{AllowEmptyCommits: true, Author: author})
	if err != nil {
		t.Fatal(err)
	}
	return h.String(), r.local.Push(&git.PushOptions{Auth: r.auth, RefSpecs: []config.RefSpec{config.RefSpec("refs/heads/master:refs/heads/" + branch)}})
}

// WaitBranch waits until Gitea knows a pushed branch: it records a push asynchronously, and answers
// for a branch of a repository it still thinks empty with an error (500, a panic in 1.26).
func (r *Repo) WaitBranch(api *gitea.Client, branch string) {
	r.t.Helper()
	wait.NoError(r.t, "Gitea to know the pushed branch "+branch, 30*time.Second, func() error {
		_, _, err := api.GetRepoBranch(r.Info.Owner.UserName, r.Info.Name, branch)
		return err
	})
}

// Open opens a pull request from branch into main as the API client's user; it returns its index.
// Gitea records a pushed branch asynchronously: Open waits until it knows the branch.
func (r *Repo) Open(api *gitea.Client, branch, title string) int64 {
	r.t.Helper()
	r.WaitBranch(api, branch)
	pr, _, err := api.CreatePullRequest(r.Info.Owner.UserName, r.Info.Name, gitea.CreatePullRequestOption{Head: branch, Base: "main", Title: title})
	if err != nil {
		r.t.Fatalf("open pull request: %v", err)
	}
	return pr.Index
}

// TryMerge merges a pull request with a merge commit once Gitea has checked it can be merged; a
// refusal (e.g. a required status check) is returned, not fatal. A refusal is tried again twice, a
// second apart, as a reviewer would: the reconciler pushes status commits to the base branch, and
// Gitea answers a merge during its recheck of the pull request with "Please try again later" (405)
// or "head out of date" (409).
func (r *Repo) TryMerge(api *gitea.Client, index int64) error {
	r.t.Helper()
	var err error
	for attempt := range 3 {
		if attempt > 0 {
			time.Sleep(time.Second)
		}
		if err = r.mergeOnce(api, index); err == nil {
			return nil
		}
	}
	return err
}

func (r *Repo) mergeOnce(api *gitea.Client, index int64) error {
	r.t.Helper()
	owner, name := r.Info.Owner.UserName, r.Info.Name
	// Gitea checks mergeability in the background right after the PR opens or moves.
	wait.For(r.t, fmt.Sprintf("pull request %d to be mergeable", index), time.Minute, func() bool {
		pr, _, err := api.GetPullRequest(owner, name, index)
		if err != nil {
			r.t.Fatalf("pull request %d: %v", index, err)
		}
		return pr.Mergeable
	}, wait.Every(300*time.Millisecond))
	ok, resp, err := api.MergePullRequest(owner, name, index, gitea.MergePullRequestOption{Style: gitea.MergeStyleMerge})
	if err == nil && !ok {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		err = fmt.Errorf("merge refused (HTTP %d)", code)
	}
	return err
}

// Merge opens a pull request from branch into main and merges it with a merge commit through the
// Gitea API, as a reviewer's approval does; it returns the merge commit.
func (r *Repo) Merge(api *gitea.Client, branch, title string) string {
	r.t.Helper()
	index := r.Open(api, branch, title)
	if err := r.TryMerge(api, index); err != nil {
		r.t.Fatalf("merge pull request %d: %v", index, err)
	}
	pr, _, err := api.GetPullRequest(r.Info.Owner.UserName, r.Info.Name, index)
	if err != nil || pr.MergedCommitID == nil {
		r.t.Fatalf("merged pull request %d: %v", index, err)
	}
	return *pr.MergedCommitID
}

// CommitFile writes one file into a go-git work tree and commits it; it returns the commit hash.
func CommitFile(t testing.TB, r *git.Repository, path, content, msg string) string {
	t.Helper()
	wt, err := r.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, wt, path, content)
	h, err := wt.Commit(msg, &git.CommitOptions{Author: &object.Signature{Name: "dev", Email: "dev@example.test", When: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

// CommitAll writes files into the work tree of the repository at dir, removes the paths in remove,
// and commits everything there (what InitStandsRepo laid out included) as one commit; it returns
// the commit hash.
func CommitAll(t testing.TB, r *git.Repository, dir, msg string, files map[string]string, remove ...string) string {
	t.Helper()
	for p, c := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range remove {
		if err := os.RemoveAll(filepath.Join(dir, p)); err != nil {
			t.Fatal(err)
		}
	}
	wt, err := r.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if err := wt.AddWithOptions(&git.AddOptions{All: true}); err != nil {
		t.Fatal(err)
	}
	h, err := wt.Commit(msg, &git.CommitOptions{Author: &object.Signature{Name: "dev", Email: "dev@example.test", When: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	return h.String()
}

func writeFile(t testing.TB, wt *git.Worktree, path, content string) {
	t.Helper()
	putFile(t, wt, path, content)
	if _, err := wt.Add(path); err != nil {
		t.Fatal(err)
	}
}

// putFile writes a file of the worktree, not added.
func putFile(t testing.TB, wt *git.Worktree, path, content string) {
	t.Helper()
	if err := wt.Filesystem.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	f, err := wt.Filesystem.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte(content)); err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// User is a non-admin Gitea user with an all-scopes access token.
type User struct{ *localserver.User }

// CreateUser makes a non-admin user through the admin API and a token as that user.
func (g *Gitea) CreateUser(t testing.TB, name string) *User {
	t.Helper()
	u, err := g.Gitea.CreateUser(name)
	if err != nil {
		t.Fatal(err)
	}
	return &User{u}
}

// AddWriter gives a user write access to a repository of the admin.
func (r *Repo) AddWriter(api *gitea.Client, user string) {
	r.t.Helper()
	mode := gitea.AccessModeWrite
	if _, err := api.AddCollaborator(r.Info.Owner.UserName, r.Info.Name, user, gitea.AddCollaboratorOption{Permission: &mode}); err != nil {
		r.t.Fatalf("add collaborator %s: %v", user, err)
	}
}

// Client is an API client acting as the user.
func (u *User) Client(t testing.TB, g *Gitea) *gitea.Client {
	t.Helper()
	c, err := u.User.Client(g.Gitea)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// AddReader gives a user read access to a repository of the admin.
func (r *Repo) AddReader(api *gitea.Client, user string) {
	r.t.Helper()
	mode := gitea.AccessModeRead
	if _, err := api.AddCollaborator(r.Info.Owner.UserName, r.Info.Name, user, gitea.AddCollaboratorOption{Permission: &mode}); err != nil {
		r.t.Fatalf("add collaborator %s: %v", user, err)
	}
}

// PushAGit opens a pull request the AGit way, as a user with read access can: a commit on main
// with files written, pushed by the git CLI to refs/for/main/<topic>. It returns the commit. The
// token goes in through the environment (http.extraHeader), not argv.
func (r *Repo) PushAGit(u *User, topic string, files map[string]string) string {
	r.t.Helper()
	t := r.t
	dir := t.(interface{ TempDir() string }).TempDir()
	env := append(os.Environ(), "GIT_CONFIG_COUNT=3", "GIT_CONFIG_KEY_0=http.extraHeader", "GIT_CONFIG_VALUE_0=Authorization: token "+u.Token,
		"GIT_CONFIG_KEY_1=user.name", "GIT_CONFIG_VALUE_1="+u.Name, "GIT_CONFIG_KEY_2=user.email", "GIT_CONFIG_VALUE_2="+u.Name+"@example.test",
		"GIT_TERMINAL_PROMPT=0")
	git := func(args ...string) string {
		cmd := exec.Command("git", args...)
		cmd.Dir, cmd.Env = dir, env
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git("clone", "--quiet", "--branch", "main", r.Info.CloneURL, ".")
	for p, content := range files {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("add", "-A")
	git("commit", "--quiet", "-m", "AGit change "+topic)
	git("push", "--quiet", "origin", "HEAD:refs/for/main/"+topic, "-o", "title=AGit "+topic)
	return git("rev-parse", "HEAD")
}

// ForcePush moves branch on the server to commit, a commit of main's history, whatever the branch
// held: a reset of main, force-pushed.
func (r *Repo) ForcePush(branch, commit string) {
	r.t.Helper()
	err := r.local.Fetch(&git.FetchOptions{Auth: r.auth, RefSpecs: []config.RefSpec{"+refs/heads/main:refs/remotes/origin/main"}})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		r.t.Fatalf("fetch main: %v", err)
	}
	if err := r.local.Storer.SetReference(plumbing.NewHashReference("refs/heads/reset", plumbing.NewHash(commit))); err != nil {
		r.t.Fatal(err)
	}
	if err := r.local.Push(&git.PushOptions{Auth: r.auth, Force: true, RefSpecs: []config.RefSpec{config.RefSpec("+refs/heads/reset:refs/heads/" + branch)}}); err != nil {
		r.t.Fatalf("force-push %s to %s: %v", branch, commit, err)
	}
}
