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
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"github.com/go-git/go-git/v5/plumbing/storer"
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
	err = eachPage(func(o gitea.ListOptions) ([]*gitea.PullRequest, error) {
		prs, _, err := c.ListRepoPullRequests(g.owner, g.repo, gitea.ListPullRequestsOptions{State: gitea.StateOpen, ListOptions: o})
		return prs, err
	}, func(pr *gitea.PullRequest) {
		if pr.Base == nil || pr.Head == nil || pr.Base.Ref != base {
			return
		}
		author := ""
		if pr.Poster != nil {
			author = pr.Poster.UserName
		}
		out = append(out, stands.PullRequest{Index: pr.Index, Title: pr.Title, Author: author, HeadSHA: pr.Head.Sha, HeadRef: pr.Head.Ref,
			SameRepo: pr.Head.RepoID == pr.Base.RepoID, URL: pr.HTMLURL})
	})
	if err != nil {
		return nil, fmt.Errorf("%w: list pull requests: %w", ErrUnavailable, err)
	}
	return out, nil
}

// pageSize is how many items each page of a Gitea list asks for.
const pageSize = 50

// eachPage hands each item of a Gitea list to each, asking list for pages 1, 2, … until one comes
// back short.
func eachPage[T any](list func(gitea.ListOptions) ([]T, error), each func(T)) error {
	for page := 1; ; page++ {
		items, err := list(gitea.ListOptions{Page: page, PageSize: pageSize})
		if err != nil {
			return err
		}
		for _, it := range items {
			each(it)
		}
		if len(items) < pageSize {
			return nil
		}
	}
}

// Reviews lists the reviews of pull request index, every one of them.
func (g *Gitea) Reviews(ctx context.Context, index int64) ([]stands.Review, error) {
	c, err := g.client(ctx)
	if err != nil {
		return nil, err
	}
	var out []stands.Review
	err = eachPage(func(o gitea.ListOptions) ([]*gitea.PullReview, error) {
		rs, _, err := c.ListPullReviews(g.owner, g.repo, index, gitea.ListPullReviewsOptions{ListOptions: o})
		return rs, err
	}, func(r *gitea.PullReview) {
		user := ""
		if r.Reviewer != nil && r.Reviewer.ID > 0 { // Gitea's ghost (-1) stands for a deleted user
			user = r.Reviewer.UserName
		}
		out = append(out, stands.Review{User: user, State: stands.ReviewState(r.State), Commit: r.CommitID, Dismissed: r.Dismissed,
			Stale: r.Stale, Official: r.Official, Submitted: r.Submitted})
	})
	if err != nil {
		return nil, fmt.Errorf("%w: list the reviews of pull request %d: %w", ErrUnavailable, index, err)
	}
	return out, nil
}

// Merged is the commit that merged pull request index, "" while it is not merged; open says it is
// open still.
func (g *Gitea) Merged(ctx context.Context, index int64) (string, bool, error) {
	c, err := g.client(ctx)
	if err != nil {
		return "", false, err
	}
	pr, _, err := c.GetPullRequest(g.owner, g.repo, index)
	if err != nil {
		return "", false, fmt.Errorf("%w: read pull request %d: %w", ErrUnavailable, index, err)
	}
	if !pr.HasMerged || pr.MergedCommitID == nil {
		return "", pr.State == gitea.StateOpen, nil
	}
	return *pr.MergedCommitID, false, nil
}

// Contributors names who took part in pull request index up to head: the reconciler's own user
// (OwnUser), who opened it, the authors and committers of its commits (where Gitea knows the
// address), and everyone who pushed to it, as its timeline names them (a push of commits, a
// force-push). A commit's author and committer are what its writer says; who pushed is what Gitea
// saw, so a pusher is named even under a borrowed name.
//
// Gitea records a push onto a pull request (its commits, its timeline) from a queue after the push
// returned, while the head its API reports is the branch's at once; and a push it has not recorded
// when the pull request is merged it never records. So the answer counts only once the commits Gitea
// lists reach head: until then it is ErrUnavailable, and the gate holds the change (the same push,
// seen later, may name a pusher). docs/pr-workflow.md#four-eyes.
func (g *Gitea) Contributors(ctx context.Context, index int64, head string) (stands.Contributors, error) {
	c, err := g.client(ctx)
	if err != nil {
		return nil, err
	}
	pr, _, err := c.GetPullRequest(g.owner, g.repo, index)
	if err != nil {
		return nil, fmt.Errorf("%w: read pull request %d: %w", ErrUnavailable, index, err)
	}
	out := stands.Contributors{}
	add := func(u *gitea.User, did string) {
		if u != nil && u.UserName != "" && out[u.UserName] == "" {
			out[u.UserName] = did
		}
	}
	// The reconciler's own user first: its token is on the reconciler's host, and an approval
	// made with it is no second person's, whatever else that user did.
	me, err := g.self(c)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	add(&gitea.User{UserName: me}, OwnUser)
	add(pr.Poster, "opened it")
	err = eachPage(func(o gitea.ListOptions) ([]*gitea.TimelineComment, error) {
		events, _, err := c.ListIssueTimeline(g.owner, g.repo, index, gitea.ListIssueCommentOptions{ListOptions: o})
		return events, err
	}, func(e *gitea.TimelineComment) {
		if e.Type == "pull_push" {
			add(e.Poster, "pushed to it")
		}
	})
	if err != nil {
		return nil, fmt.Errorf("%w: read the timeline of pull request %d: %w", ErrUnavailable, index, err)
	}
	reached := false
	err = eachPage(func(o gitea.ListOptions) ([]*gitea.Commit, error) {
		commits, _, err := c.ListPullRequestCommits(g.owner, g.repo, index, gitea.ListPullRequestCommitsOptions{ListOptions: o})
		return commits, err
	}, func(cm *gitea.Commit) {
		sha := ""
		if cm.CommitMeta != nil {
			sha = mdtext.Short(cm.SHA)
			reached = reached || cm.SHA == head
		}
		add(cm.Author, "authored "+sha)
		add(cm.Committer, "committed "+sha)
	})
	if err != nil {
		return nil, fmt.Errorf("%w: list the commits of pull request %d: %w", ErrUnavailable, index, err)
	}
	if !reached {
		return nil, fmt.Errorf("%w: pull request %d's commits as Gitea lists them do not reach %s: Gitea has not recorded that push, so who pushed it is not known",
			ErrUnavailable, index, mdtext.Short(head))
	}
	return out, nil
}

// CanWrite says whether user may push to the repository now. Gitea answers a token of the
// repository's administrators (or the user's own); any other is refused, and said so.
func (g *Gitea) CanWrite(ctx context.Context, user string) (bool, error) {
	c, err := g.client(ctx)
	if err != nil {
		return false, err
	}
	p, resp, err := c.CollaboratorPermission(g.owner, g.repo, user)
	switch {
	case resp != nil && resp.StatusCode == http.StatusForbidden:
		return false, fmt.Errorf("read the permission of %s: Gitea answers the repository's administrators only: %w", user, err)
	case err != nil:
		return false, fmt.Errorf("%w: read the permission of %s: %w", ErrUnavailable, user, err)
	}
	switch p.Permission {
	case gitea.AccessModeWrite, gitea.AccessModeAdmin, gitea.AccessModeOwner:
		return true, nil
	}
	return false, nil
}

// BranchTip is the commit a branch of the repository points at, "" when there is no such branch.
func (g *Gitea) BranchTip(ctx context.Context, branch string) (string, error) {
	tip, _, err := g.BranchCommit(ctx, branch)
	return tip, err
}

// UpsertComment keeps one comment per pull request: the one containing marker is edited in place
// (only when its text changes), or created. It returns when the comment got this body, by Gitea's
// clock: the one its reviews are stamped with, in whole seconds, so a review submitted after the
// comment shows the body is never dated before it (docs/pr-workflow.md#apply-only-what-was-reviewed).
func (g *Gitea) UpsertComment(ctx context.Context, index int64, marker string, body mdtext.Markup) (time.Time, error) {
	c, err := g.client(ctx)
	if err != nil {
		return time.Time{}, err
	}
	me, err := g.self(c)
	if err != nil {
		return time.Time{}, err
	}
	for page := 1; ; page++ {
		comments, _, err := c.ListIssueComments(g.owner, g.repo, index, gitea.ListIssueCommentOptions{ListOptions: gitea.ListOptions{Page: page, PageSize: 50}})
		if err != nil {
			return time.Time{}, fmt.Errorf("list comments of #%d: %w", index, err)
		}
		for _, cm := range comments {
			// Only the reconciler's own comment: anyone can write the marker into one of theirs.
			if !strings.Contains(cm.Body, marker) || cm.Poster == nil || cm.Poster.UserName != me {
				continue
			}
			if cm.Body == string(body) {
				return cm.Updated, nil
			}
			edited, _, err := c.EditIssueComment(g.owner, g.repo, cm.ID, gitea.EditIssueCommentOption{Body: string(body)})
			if err != nil {
				return time.Time{}, fmt.Errorf("edit comment of #%d: %w", index, err)
			}
			return edited.Updated, nil
		}
		if len(comments) < 50 {
			break
		}
	}
	created, _, err := c.CreateIssueComment(g.owner, g.repo, index, gitea.CreateIssueCommentOption{Body: string(body)})
	if err != nil {
		return time.Time{}, fmt.Errorf("comment on #%d: %w", index, err)
	}
	return created.Updated, nil
}

// OwnUser is what Contributors says of the reconciler's own Gitea user.
const OwnUser = "is the reconciler's own Gitea user"

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

// FetchPull fetches ref (a pull request's head) and returns its snapshot and the snapshot of the merge
// base of the head and onto, a commit of the tracked branch: where merging the head into onto starts
// from. It does not change the tracked branch's last good snapshot.
func (s *Source) FetchPull(ctx context.Context, ref, onto string) (head, base *stands.Snapshot, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, s.timeout)
	defer cancel()
	r, ok := s.store.(*remoteStore)
	if !ok {
		return nil, nil, errors.New("pull requests need a Gitea repository, not a local path")
	}
	auth, err := s.auth()
	if err != nil {
		return nil, nil, fmt.Errorf("credentials: %w", err)
	}
	if _, err := r.fetch(ctx, auth, s.branch); err != nil { // makes sure the repository and onto are here
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	hs, err := fetchHead(ctx, r.url, auth, ref, r.tips(), r.r.Storer, s.pullDir(), s.pullLimits)
	if errors.Is(err, stands.ErrTooLarge) {
		return nil, nil, err
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	// What the head brought is read into the snapshots, then removed: nothing of a pull request
	// stays after its plan.
	defer func() {
		if cerr := hs.close(); cerr != nil {
			s.log.Warn("a pull request's objects not removed", "ref", ref, "err", cerr)
		}
	}()
	hc, err := object.GetCommit(hs, hs.head)
	if err != nil {
		return nil, nil, fmt.Errorf("read commit %s: %w", hs.head, err)
	}
	oc, err := object.GetCommit(hs, plumbing.NewHash(onto))
	if err != nil {
		return nil, nil, fmt.Errorf("read commit %s of %s: %w", onto, s.branch, err)
	}
	bases, err := hc.MergeBase(oc)
	if err != nil {
		return nil, nil, fmt.Errorf("merge base of %s and %s: %w", hc.Hash, onto, err)
	}
	if len(bases) == 0 {
		return nil, nil, fmt.Errorf("%s and %s share no history: merge %s into the branch first", hc.Hash, onto, s.branch)
	}
	// Several merge bases come from criss-cross merges, which Git merges into one first; the plan
	// takes the oldest, against which most reads as changed, and so as a conflict when both sides
	// changed it.
	bc := bases[0]
	for _, c := range bases[1:] {
		if c.Committer.When.Before(bc.Committer.When) {
			bc = c
		}
	}
	if head, err = snapshotOf(hs, hc, s.maxTree); err != nil {
		return nil, nil, err
	}
	if base, err = snapshotOf(hs, bc, s.maxTree); err != nil {
		return nil, nil, err
	}
	return head, base, nil
}

func snapshotOf(st storer.EncodedObjectStorer, c *object.Commit, maxTree int64) (*stands.Snapshot, error) {
	files, err := treeFS(st, c, maxTree)
	if err != nil {
		return nil, err
	}
	return &stands.Snapshot{Commit: c.Hash.String(), Source: c.Hash.String(), Message: strings.TrimSpace(c.Message), Author: c.Author.Email,
		Time: c.Committer.When, Files: files}, nil
}
