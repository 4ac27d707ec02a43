package testenv

import (
	"crypto/ed25519"
	"crypto/rand"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/go-git/go-billy/v5/memfs"
	"github.com/go-git/go-billy/v5/util"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/transport"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"
	"github.com/go-git/go-git/v5/storage/memory"
	"golang.org/x/crypto/ssh"
)

// API is a Gitea SDK client authenticated as the admin user.
func (g *Gitea) API(t testing.TB) *gitea.Client {
	t.Helper()
	api, err := gitea.NewClient(strings.TrimSuffix(g.URL, "/"), gitea.SetToken(g.Token))
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
	if _, _, err := g.API(t).CreatePublicKey(gitea.CreateKeyOption{Title: "key-" + randomHex(4), Key: string(ssh.MarshalAuthorizedKey(sshPub))}); err != nil {
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

// ChangeOn is Change pushed to branch (created from main), e.g. a pull request's head.
func (r *Repo) ChangeOn(branch, msg string, write map[string]string, remove ...string) string {
	r.t.Helper()
	t := r.t
	err := r.local.Fetch(&git.FetchOptions{Auth: r.auth, RefSpecs: []config.RefSpec{"+refs/heads/main:refs/remotes/origin/main"}})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) && !errors.Is(err, transport.ErrEmptyRemoteRepository) &&
		!errors.Is(err, git.NoMatchingRefSpecError{}) {
		t.Fatalf("fetch main: %v", err)
	}
	wt, err := r.local.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if ref, err := r.local.Reference("refs/remotes/origin/main", true); err == nil {
		if err := wt.Reset(&git.ResetOptions{Commit: ref.Hash(), Mode: git.HardReset}); err != nil {
			t.Fatalf("reset to origin/main: %v", err)
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
		writeFile(t, wt, path, content)
	}
	h, err := wt.Commit(msg, &git.CommitOptions{AllowEmptyCommits: true, Author: &object.Signature{Name: "dev", Email: "dev@example.test", When: time.Now()}})
	if err != nil {
		t.Fatal(err)
	}
	if err := r.local.Push(&git.PushOptions{Auth: r.auth, RefSpecs: []config.RefSpec{config.RefSpec("refs/heads/master:refs/heads/" + branch)}}); err != nil {
		t.Fatalf("push over HTTP: %v", err)
	}
	return h.String()
}

// Merge opens a pull request from branch into main and merges it with a merge commit through the
// Gitea API, as a reviewer's approval does; it returns the merge commit.
func (r *Repo) Merge(api *gitea.Client, branch, title string) string {
	r.t.Helper()
	owner, name := r.Info.Owner.UserName, r.Info.Name
	pr, _, err := api.CreatePullRequest(owner, name, gitea.CreatePullRequestOption{Head: branch, Base: "main", Title: title})
	if err != nil {
		r.t.Fatalf("open pull request: %v", err)
	}
	// Gitea checks mergeability in the background right after the PR opens.
	deadline := time.Now().Add(60 * time.Second)
	for {
		ok, _, err := api.MergePullRequest(owner, name, pr.Index, gitea.MergePullRequestOption{Style: gitea.MergeStyleMerge, Title: title})
		if err == nil && ok {
			break
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("merge pull request %d: %v", pr.Index, err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	pr, _, err = api.GetPullRequest(owner, name, pr.Index)
	if err != nil || pr.MergedCommitID == nil {
		r.t.Fatalf("merged pull request %d: %v", pr.Index, err)
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

func writeFile(t testing.TB, wt *git.Worktree, path, content string) {
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
	if _, err := wt.Add(path); err != nil {
		t.Fatal(err)
	}
}
