package gitsource

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"sync"
	"time"

	"code.gitea.io/sdk/gitea"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Gitea is the repository's Gitea API: its open pull requests, one comment per pull request kept by
// the reconciler, and commit statuses.
type Gitea struct {
	base  string // the server's root URL, without a trailing slash
	owner string
	repo  string
	token func() (string, error)
	http  *http.Client

	mu sync.Mutex
	me string // the token's user: the author of the comments it may edit
}

// NewGitea derives the API of the repository at an HTTP(S) clone URL
// (https://host[/sub]/owner/repo.git). token is asked at every call, so a rotated credential file
// needs no restart.
func NewGitea(cloneURL string, token func() (string, error)) (*Gitea, error) {
	u, err := url.Parse(cloneURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") {
		return nil, fmt.Errorf("the Gitea API needs an http(s) repository URL, not %s", RedactURL(cloneURL))
	}
	parts := strings.Split(strings.Trim(strings.TrimSuffix(u.Path, ".git"), "/"), "/")
	if len(parts) < 2 {
		return nil, fmt.Errorf("repository URL %s has no owner/repository path", RedactURL(cloneURL))
	}
	u.User = nil
	u.Path = "/" + strings.Join(parts[:len(parts)-2], "/")
	return &Gitea{base: strings.TrimSuffix(u.String(), "/"), owner: parts[len(parts)-2], repo: parts[len(parts)-1], token: token,
		http: &http.Client{Timeout: 30 * time.Second}}, nil
}

func (g *Gitea) client(ctx context.Context) (*gitea.Client, error) {
	tok, err := g.token()
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	return gitea.NewClient(g.base, gitea.SetToken(tok), gitea.SetContext(ctx), gitea.SetGiteaVersion(""), gitea.SetHTTPClient(g.http))
}

// PullRequests lists the open pull requests into base.
func (g *Gitea) PullRequests(ctx context.Context, base string) ([]stands.PullRequest, error) {
	c, err := g.client(ctx)
	if err != nil {
		return nil, err
	}
	var out []stands.PullRequest
	for page := 1; ; page++ {
		prs, _, err := c.ListRepoPullRequests(g.owner, g.repo, gitea.ListPullRequestsOptions{State: gitea.StateOpen,
			ListOptions: gitea.ListOptions{Page: page, PageSize: 50}})
		if err != nil {
			return nil, fmt.Errorf("%w: list pull requests: %w", ErrUnavailable, err)
		}
		for _, pr := range prs {
			if pr.Base == nil || pr.Head == nil || pr.Base.Ref != base {
				continue
			}
			out = append(out, stands.PullRequest{Index: pr.Index, Title: pr.Title, HeadSHA: pr.Head.Sha, HeadRef: pr.Head.Ref,
				SameRepo: pr.Head.RepoID == pr.Base.RepoID, URL: pr.HTMLURL})
		}
		if len(prs) < 50 {
			return out, nil
		}
	}
}

// BranchTip is the commit a branch of the repository points at, "" when there is no such branch.
func (g *Gitea) BranchTip(ctx context.Context, branch string) (string, error) {
	c, err := g.client(ctx)
	if err != nil {
		return "", err
	}
	b, resp, err := c.GetRepoBranch(g.owner, g.repo, branch)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("%w: read branch %s: %w", ErrUnavailable, branch, err)
	}
	if b == nil || b.Commit == nil {
		return "", nil
	}
	return b.Commit.ID, nil
}

// UpsertComment keeps one comment per pull request: the one containing marker is edited in place
// (only when its text changes), or created.
func (g *Gitea) UpsertComment(ctx context.Context, index int64, marker string, body mdtext.Markup) error {
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	me, err := g.self(c)
	if err != nil {
		return err
	}
	for page := 1; ; page++ {
		comments, _, err := c.ListIssueComments(g.owner, g.repo, index, gitea.ListIssueCommentOptions{ListOptions: gitea.ListOptions{Page: page, PageSize: 50}})
		if err != nil {
			return fmt.Errorf("list comments of #%d: %w", index, err)
		}
		for _, cm := range comments {
			// Only the reconciler's own comment: anyone can write the marker into one of theirs.
			if !strings.Contains(cm.Body, marker) || cm.Poster == nil || cm.Poster.UserName != me {
				continue
			}
			if cm.Body == string(body) {
				return nil
			}
			if _, _, err := c.EditIssueComment(g.owner, g.repo, cm.ID, gitea.EditIssueCommentOption{Body: string(body)}); err != nil {
				return fmt.Errorf("edit comment of #%d: %w", index, err)
			}
			return nil
		}
		if len(comments) < 50 {
			break
		}
	}
	if _, _, err := c.CreateIssueComment(g.owner, g.repo, index, gitea.CreateIssueCommentOption{Body: string(body)}); err != nil {
		return fmt.Errorf("comment on #%d: %w", index, err)
	}
	return nil
}

// self is the user the token belongs to, asked once.
func (g *Gitea) self(c *gitea.Client) (string, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.me == "" {
		u, _, err := c.GetMyUserInfo()
		if err != nil {
			return "", fmt.Errorf("who the Gitea token belongs to: %w", err)
		}
		g.me = u.UserName
	}
	return g.me, nil
}

// maxDescription keeps a commit status description within what Gitea stores.
const maxDescription = 200

// SetStatus sets the commit status named context on sha.
func (g *Gitea) SetStatus(ctx context.Context, sha, context string, state stands.CommitState, description, targetURL string) error {
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	// Gitea shows a description as text; mdtext.Plain keeps it to one line a reader can trust.
	description = mdtext.Plain(description, maxDescription)
	_, _, err = c.CreateStatus(g.owner, g.repo, sha, gitea.CreateStatusOption{State: gitea.StatusState(state), Context: context,
		Description: description, TargetURL: targetURL})
	if err != nil {
		return fmt.Errorf("set status %s on %s: %w", context, sha, err)
	}
	return nil
}

// FileURL is the web address of a file on a branch.
func (g *Gitea) FileURL(branch, path string) string {
	return g.base + "/" + g.owner + "/" + g.repo + "/src/branch/" + branch + "/" + path
}

// FetchRef returns the snapshot of any ref of the repository, e.g. a pull request's head. It does not
// change the tracked branch's last good snapshot.
func (s *Source) FetchRef(ctx context.Context, ref string) (*stands.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	r, ok := s.store.(*remoteStore)
	if !ok {
		return nil, errors.New("pull requests need a Gitea repository, not a local path")
	}
	auth, err := s.auth()
	if err != nil {
		return nil, fmt.Errorf("credentials: %w", err)
	}
	if _, err := r.fetch(ctx, auth, s.branch); err != nil { // makes sure the repository exists
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	local := plumbing.ReferenceName("refs/stands-refs/" + strings.TrimPrefix(ref, "refs/"))
	err = r.r.FetchContext(ctx, &git.FetchOptions{Auth: auth, Tags: git.NoTags, Force: true,
		RefSpecs: []config.RefSpec{config.RefSpec("+" + ref + ":" + local.String())}})
	if err != nil && !errors.Is(err, git.NoErrAlreadyUpToDate) {
		return nil, fmt.Errorf("%w: fetch %s: %w", ErrUnavailable, ref, err)
	}
	h, err := r.r.Reference(local, true)
	if err != nil {
		return nil, fmt.Errorf("ref %s: %w", ref, err)
	}
	c, err := r.r.CommitObject(h.Hash())
	if err != nil {
		return nil, fmt.Errorf("read commit %s: %w", h.Hash(), err)
	}
	files, err := treeFS(c)
	if err != nil {
		return nil, err
	}
	return &stands.Snapshot{Commit: c.Hash.String(), Source: c.Hash.String(), Message: strings.TrimSpace(c.Message), Author: c.Author.Email,
		Time: c.Committer.When, Files: files}, nil
}
