package gitsource

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Gitea's side of a stand's removal pull request (package expiry, docs/lifetime.md).

// Me is the user the token belongs to: the poster of the reconciler's own pull requests.
func (g *Gitea) Me(ctx context.Context) (string, error) {
	c, err := g.client(ctx)
	if err != nil {
		return "", err
	}
	return g.self(c)
}

// OpenPullRequest opens a pull request from head into base.
func (g *Gitea) OpenPullRequest(ctx context.Context, head, base, title string, body mdtext.Markup) (stands.PullRequest, error) {
	c, err := g.client(ctx)
	if err != nil {
		return stands.PullRequest{}, err
	}
	pr, resp, err := c.CreatePullRequest(g.owner, g.repo, gitea.CreatePullRequestOption{Head: head, Base: base, Title: mdtext.Plain(title, 200), Body: string(body)})
	if resp != nil && resp.StatusCode == http.StatusConflict {
		// Gitea allows one open pull request from a branch into a base: a removal's stays single
		// across replicas.
		return stands.PullRequest{}, fmt.Errorf("open a pull request from %s: %w", head, stands.ErrPullExists)
	}
	if err != nil {
		return stands.PullRequest{}, fmt.Errorf("%w: open a pull request from %s: %w", ErrUnavailable, head, err)
	}
	out := stands.PullRequest{Index: pr.Index, Title: pr.Title, URL: pr.HTMLURL, HeadRef: head, SameRepo: true}
	if pr.Head != nil {
		out.HeadSHA = pr.Head.Sha
	}
	return out, nil
}

// ClosePullRequest comments why on pull request index, closes it and deletes its branch.
func (g *Gitea) ClosePullRequest(ctx context.Context, index int64, branch string, why mdtext.Markup) error {
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	if pr, _, err := c.GetPullRequest(g.owner, g.repo, index); err != nil {
		return fmt.Errorf("%w: read #%d: %w", ErrUnavailable, index, err)
	} else if pr.State != gitea.StateOpen {
		return nil // closed already (by another replica): said once
	}
	if _, _, err := c.CreateIssueComment(g.owner, g.repo, index, gitea.CreateIssueCommentOption{Body: string(why)}); err != nil {
		return fmt.Errorf("%w: comment on #%d: %w", ErrUnavailable, index, err)
	}
	closed := gitea.StateClosed
	if _, _, err := c.EditPullRequest(g.owner, g.repo, index, gitea.EditPullRequestOption{State: &closed}); err != nil {
		return fmt.Errorf("%w: close #%d: %w", ErrUnavailable, index, err)
	}
	if _, resp, err := c.DeleteRepoBranch(g.owner, g.repo, branch); err != nil && (resp == nil || resp.StatusCode != http.StatusNotFound) {
		return fmt.Errorf("%w: delete branch %s of #%d: %w", ErrUnavailable, branch, index, err)
	}
	return nil
}

// MergePullRequest merges pull request index at head (Gitea refuses when the head moved), with a
// merge commit whose message is message, and deletes its branch.
func (g *Gitea) MergePullRequest(ctx context.Context, index int64, head, message string) error {
	c, err := g.client(ctx)
	if err != nil {
		return err
	}
	del := true
	ok, resp, err := c.MergePullRequest(g.owner, g.repo, index, gitea.MergePullRequestOption{Style: gitea.MergeStyleMerge, HeadCommitId: head,
		Message: message, DeleteBranchAfterMerge: &del})
	if err == nil && !ok {
		err = errors.New("not merged")
	}
	if err != nil {
		code := 0
		if resp != nil {
			code = resp.StatusCode
		}
		return fmt.Errorf("merge #%d (HTTP %d): %w", index, code, err)
	}
	return nil
}

// CommitLogin is the Gitea user a commit's author address belongs to ("" when none).
func (g *Gitea) CommitLogin(ctx context.Context, sha string) (string, error) {
	c, err := g.client(ctx)
	if err != nil {
		return "", err
	}
	commit, _, err := c.GetSingleCommit(g.owner, g.repo, sha)
	if err != nil {
		return "", fmt.Errorf("%w: read commit %s: %w", ErrUnavailable, sha, err)
	}
	if commit.Author == nil {
		return "", nil
	}
	return commit.Author.UserName, nil
}

// PullState is the state of the last pull request from head into base: "open", "closed" (not
// merged), "merged", or "" when there is none.
func (g *Gitea) PullState(ctx context.Context, base, head string) (int64, string, error) {
	c, err := g.client(ctx)
	if err != nil {
		return 0, "", err
	}
	pr, resp, err := c.GetPullRequestByBaseHead(g.owner, g.repo, base, head)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return 0, "", nil
	}
	if err != nil {
		return 0, "", fmt.Errorf("%w: read the pull request from %s: %w", ErrUnavailable, head, err)
	}
	switch {
	case pr.HasMerged:
		return pr.Index, "merged", nil
	case pr.State == gitea.StateClosed:
		return pr.Index, "closed", nil
	}
	return pr.Index, "open", nil
}

// BranchCommit is the commit a branch points at and when it was committed ("" when there is no such
// branch).
func (g *Gitea) BranchCommit(ctx context.Context, branch string) (string, time.Time, error) {
	c, err := g.client(ctx)
	if err != nil {
		return "", time.Time{}, err
	}
	b, resp, err := c.GetRepoBranch(g.owner, g.repo, branch)
	if resp != nil && resp.StatusCode == http.StatusNotFound {
		return "", time.Time{}, nil
	}
	if err != nil {
		return "", time.Time{}, fmt.Errorf("%w: read branch %s: %w", ErrUnavailable, branch, err)
	}
	if b == nil || b.Commit == nil {
		return "", time.Time{}, nil
	}
	return b.Commit.ID, b.Commit.Timestamp, nil
}
