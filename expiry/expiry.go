// Package expiry warns of stands nearing their end where the team looks, in Git (docs/lifetime.md):
// for each stand whose end is within the lifetime policy's warn_before, one pull request removing
// it, from a branch of the reconciler's own named after the stand and its end, mentioning who set
// the end and what the removal saves. The pull request is planned like any other. When the end moves
// or the stand goes, the reconciler closes it, saying why; at the end, where the repository opts in
// (merge_at_expiry), it merges it, once the head is still its own removal. Nothing here destroys a
// stand: the merge commit on the tracked branch does, through the loop, as any removal.
//
// Exactly one pull request per stand and end, across restarts and replicas, without state of its
// own: the branch's name says which stand and end it is for, a branch is pushed only where none is,
// and Gitea opens one pull request from a branch into a base. A pull request someone closed leaves
// its branch, and no other is opened for that end.
package expiry

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path"
	"strings"
	"sync"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
)

// BranchPrefix starts every removal branch: BranchPrefix<stand id>/<end, 20061224T150405Z>.
const BranchPrefix = "stands-reconciler/expire/"

const endFormat = "20060102T150405Z"

// Branch is the removal branch of a stand for one end.
func Branch(id string, end time.Time) string {
	return BranchPrefix + id + "/" + end.UTC().Format(endFormat)
}

// parseBranch reads a removal branch's stand and end.
func parseBranch(ref string) (string, time.Time, bool) {
	rest, ok := strings.CutPrefix(ref, BranchPrefix)
	if !ok {
		return "", time.Time{}, false
	}
	id, at, ok := strings.Cut(rest, "/")
	if !ok {
		return "", time.Time{}, false
	}
	end, err := time.Parse(endFormat, at)
	if _, _, _, valid := manifest.ParseStandID(id); err != nil || !valid {
		return "", time.Time{}, false
	}
	return id, end, true
}

// Forge is Gitea as the warnings use it (gitsource.Gitea).
type Forge interface {
	Me(ctx context.Context) (string, error)
	PullRequests(ctx context.Context, base string) ([]stands.PullRequest, error)
	PullState(ctx context.Context, base, head string) (int64, string, error)
	BranchCommit(ctx context.Context, branch string) (string, time.Time, error)
	OpenPullRequest(ctx context.Context, head, base, title string, body mdtext.Markup) (stands.PullRequest, error)
	ClosePullRequest(ctx context.Context, index int64, branch string, why mdtext.Markup) error
	MergePullRequest(ctx context.Context, index int64, head, message string) error
	CommitLogin(ctx context.Context, sha string) (string, error)
}

// Repo is the repository's git side (gitsource.Source).
type Repo interface {
	PushRemoval(ctx context.Context, branch, onto, folder, message string) (string, error)
	CheckRemoval(ctx context.Context, branch, head, folder string) (string, error)
	LastSet(ctx context.Context, onto, file string, key func([]byte) string) (stands.Author, error)
}

// Config tunes the warnings.
type Config struct {
	Branch string // the tracked branch: the pull requests' base
	Log    *slog.Logger
	Now    func() time.Time
	// Merging is told of each removal the reconciler is about to merge under the policy, so the
	// review gate waits for it instead of holding its destroy as unreviewed
	// (reconcile.Reconciler.ApproveRemoval; an error: the gate cannot wait for it, and it is not
	// merged); Merged once the merge succeeded, which approves the destroy (ConfirmRemoval);
	// Unmerged when it failed, which takes the wait back (RevokeRemoval).
	Merging  func(id, by string) error
	Merged   func(id string)
	Unmerged func(id string)
}

// Warner runs the warnings of the cycles it is handed, one at a time, off the loop: a newer
// cycle's replaces one still waiting.
type Warner struct {
	cfg   Config
	forge Forge
	repo  Repo
	log   *slog.Logger

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu      sync.Mutex
	pending *stands.Endings
	running bool
	idle    *sync.Cond
	// declined are the branches found with a closed pull request: not asked again in this process.
	declined map[string]bool
	// quiet: the last run found no stand ending and no removal pull request open, so a cycle without
	// an end asks Gitea nothing.
	quiet bool
}

// New returns a Warner; Stop ends it.
func New(cfg Config, forge Forge, repo Repo) *Warner {
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	w := &Warner{cfg: cfg, forge: forge, repo: repo, log: cfg.Log.With("part", "expiry"), declined: map[string]bool{}}
	w.idle = sync.NewCond(&w.mu)
	w.ctx, w.cancel = context.WithCancel(context.Background())
	return w
}

// Schedule hands the warner a cycle's endings and returns at once.
func (w *Warner) Schedule(e stands.Endings) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.pending = &e
	if w.running || w.ctx.Err() != nil {
		return
	}
	w.running = true
	w.wg.Add(1)
	go w.loop()
}

func (w *Warner) loop() {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		e := w.pending
		w.pending = nil
		if e == nil || w.ctx.Err() != nil {
			w.running = false
			w.idle.Broadcast()
			w.mu.Unlock()
			return
		}
		w.mu.Unlock()
		if err := w.run(w.ctx, *e); err != nil && w.ctx.Err() == nil {
			w.log.Warn("stands' ends not handled; tried again next cycle", "err", err)
		}
	}
}

// Wait returns when no cycle's endings are waiting or running.
func (w *Warner) Wait() {
	w.mu.Lock()
	defer w.mu.Unlock()
	for w.running {
		w.idle.Wait()
	}
}

// Close ends the work under way and waits for it.
func (w *Warner) Close() {
	w.cancel()
	w.wg.Wait()
}

// run handles one cycle's endings: its pull requests closed where the end moved or the stand went,
// opened where an end is near, merged at the end where the policy says so.
func (w *Warner) run(ctx context.Context, e stands.Endings) error {
	if w.quiet && len(e.Ends) == 0 {
		return nil
	}
	me, err := w.forge.Me(ctx)
	if err != nil {
		return err
	}
	prs, err := w.forge.PullRequests(ctx, w.cfg.Branch)
	if err != nil {
		return err
	}
	open := map[string]stands.PullRequest{}
	for _, pr := range prs {
		// Only the reconciler's own: anyone with write access can name a branch so.
		if strings.HasPrefix(pr.HeadRef, BranchPrefix) && pr.SameRepo && pr.Author == me {
			open[pr.HeadRef] = pr
		}
	}
	w.quiet = len(open) == 0 && len(e.Ends) == 0
	ends := map[string]stands.Ending{}
	for _, end := range e.Ends {
		ends[end.ID] = end
	}
	var errs []error
	for ref, pr := range open {
		if why := w.stale(ref, e, ends); why != "" {
			errs = append(errs, w.close(ctx, pr, why))
		}
	}
	now := w.cfg.Now()
	for _, end := range e.Ends {
		ref := Branch(end.ID, end.End)
		switch pr, ok := open[ref]; {
		case ok && e.MergeAtEnd && !now.Before(end.End):
			errs = append(errs, w.merge(ctx, pr, end, e))
		case ok, now.Before(end.End.Add(-e.WarnBefore)), w.declined[ref]:
		default:
			errs = append(errs, w.open(ctx, ref, end, e))
		}
	}
	return errors.Join(errs...)
}

// stale says why an open removal pull request is no longer due ("" when it is).
func (w *Warner) stale(ref string, e stands.Endings, ends map[string]stands.Ending) mdtext.Markup {
	id, at, ok := parseBranch(ref)
	if !ok {
		return ""
	}
	end, ending := ends[id]
	valid, declared := e.Declared[id]
	switch {
	case !declared:
		return mdtext.F("Stand %s is no longer declared on %s (at %s): there is nothing left to remove.", id, w.cfg.Branch, mdtext.Short(e.Commit))
	case !valid:
		return "" // its manifest is refused now: what it says of its end is unknown
	case !ending:
		return mdtext.F("Stand %s no longer ends on %s (at %s): it is protected, or its end was taken away.", id, w.cfg.Branch, mdtext.Short(e.Commit))
	case !end.End.Truncate(time.Second).Equal(at):
		return mdtext.F("The end of stand %s moved from %s to %s on %s (at %s): this removal is no longer due.",
			id, at.UTC().Format(dateFormat), end.End.UTC().Format(dateFormat), w.cfg.Branch, mdtext.Short(e.Commit))
	}
	return ""
}

func (w *Warner) close(ctx context.Context, pr stands.PullRequest, why mdtext.Markup) error {
	if err := w.forge.ClosePullRequest(ctx, pr.Index, pr.HeadRef, why+"\n\nClosed by stands-reconciler.\n"); err != nil {
		return err
	}
	w.log.Info("removal pull request closed", "pull_request", pr.Index, "branch", pr.HeadRef, "why", string(why))
	return nil
}

// open pushes the removal branch and opens its pull request. A branch there already was warned of
// before: its pull request is open (another replica), closed by someone (declined: none other is
// opened for this end), merged, or was never opened (a push whose pull request failed), and then it
// is opened now.
func (w *Warner) open(ctx context.Context, ref string, end stands.Ending, e stands.Endings) error {
	msg := fmt.Sprintf("Remove stand %s: it ends at %s\n\nOpened by stands-reconciler %s before the end set at %s.",
		end.ID, end.End.UTC().Format(dateFormat), manifest.FormatLifetime(e.WarnBefore), end.At)
	_, err := w.repo.PushRemoval(ctx, ref, e.Commit, Folder(end.File), msg)
	if errors.Is(err, stands.ErrBranchExists) {
		index, state, serr := w.forge.PullState(ctx, w.cfg.Branch, ref)
		if serr != nil {
			return serr
		}
		if state != "" {
			if state != "open" {
				w.declined[ref] = true
				w.log.Info("removal pull request was "+state+"; no other is opened for this end", "stand", end.ID, "pull_request", index, "branch", ref)
			}
			return nil
		}
		// A branch without a pull request: the reconciler's, whose pull request failed to open, or
		// someone's under its name. Only its own removal gets a pull request of the reconciler's.
		tip, pushed, err := w.forge.BranchCommit(ctx, ref)
		if err != nil {
			return err
		}
		if w.cfg.Now().Sub(pushed) < orphanAfter {
			return nil // another replica pushed it just now, and is opening its pull request
		}
		why, err := w.repo.CheckRemoval(ctx, ref, tip, Folder(end.File))
		if err != nil {
			return err
		}
		if why != "" {
			w.declined[ref] = true
			w.log.Warn("a branch with a removal's name is not the reconciler's removal: no pull request is opened for this end", "stand", end.ID, "branch", ref, "why", why)
			return nil
		}
	} else if err != nil {
		return fmt.Errorf("push the removal of %s: %w", end.ID, err)
	}
	by := w.setBy(ctx, end, e.Commit)
	pr, err := w.forge.OpenPullRequest(ctx, ref, w.cfg.Branch, "Remove stand "+end.ID+": it ends at "+end.End.UTC().Format(dateFormat), body(end, e, by, w.cfg.Branch))
	if errors.Is(err, stands.ErrPullExists) {
		return nil // another replica opened it
	}
	if err != nil {
		return err
	}
	w.log.Info("removal pull request opened", "stand", end.ID, "pull_request", pr.Index, "ends", end.End, "branch", ref, "set_by", by.Login)
	return nil
}

// setBy is who last set the stand's end: the author of the commit that gave stand.expires its
// value, or that added the stand when the default set it; the zero Author when that cannot be read
// (the pull request then names nobody).
func (w *Warner) setBy(ctx context.Context, end stands.Ending, commit string) stands.Author {
	key := func(data []byte) string { return manifest.ExpiresKey(end.SetIn, data) }
	if end.ByDefault {
		key = func(data []byte) string { return fmt.Sprint(data != nil) }
	}
	a, err := w.repo.LastSet(ctx, commit, end.SetIn, key)
	if err != nil {
		w.log.Warn("who set the stand's end is unknown", "stand", end.ID, "err", err)
		return stands.Author{}
	}
	if a.Login, err = w.forge.CommitLogin(ctx, a.Commit); err != nil {
		w.log.Warn("the Gitea user of a commit's author is unknown", "commit", mdtext.Short(a.Commit), "err", err)
	}
	return a
}

// merge merges a stand's removal pull request at its end, as the policy allows, once its head is
// still the reconciler's removal of the stand's folder alone.
func (w *Warner) merge(ctx context.Context, pr stands.PullRequest, end stands.Ending, e stands.Endings) error {
	why, err := w.repo.CheckRemoval(ctx, pr.HeadRef, pr.HeadSHA, Folder(end.File))
	if err != nil {
		return err
	}
	if why != "" {
		w.log.Warn("removal pull request not merged: its head is not the reconciler's removal; a reviewer decides", "pull_request", pr.Index, "why", why)
		return nil
	}
	by := fmt.Sprintf("merge_at_expiry (%s): #%d", e.PolicyAt, pr.Index)
	if w.cfg.Merging != nil {
		// Before the merge: the cycle it triggers waits for the answer.
		if err := w.cfg.Merging(end.ID, by); err != nil {
			return fmt.Errorf("merge the removal of %s: %w", end.ID, err)
		}
	}
	msg := fmt.Sprintf("Remove stand %s at its end (#%d)\n\nMerged by stands-reconciler: the repository's lifetime policy says merge_at_expiry: true (%s).", end.ID, pr.Index, e.PolicyAt)
	if err := w.forge.MergePullRequest(ctx, pr.Index, pr.HeadSHA, msg); err != nil {
		if w.cfg.Unmerged != nil {
			w.cfg.Unmerged(end.ID)
		}
		return err
	}
	if w.cfg.Merged != nil {
		w.cfg.Merged(end.ID) // only a removal merged is approved
	}
	w.log.Info("removal pull request merged at the stand's end", "stand", end.ID, "pull_request", pr.Index)
	return nil
}

// body is the removal pull request's description. Everything a repository wrote in it (ids, paths,
// names) is inert (mdtext); the mention is a Gitea user name or nothing.
func body(end stands.Ending, e stands.Endings, by stands.Author, branch string) mdtext.Markup {
	var d mdtext.Doc
	set := mdtext.F("set by %s", end.At)
	if end.ByDefault {
		set = mdtext.F("the repository's default lifetime, %s, counted from when the reconciler first saw the stand", end.At)
	}
	d.F("Stand %s ends at **%s** (%s).\n\n", end.ID, end.End.UTC().Format(dateFormat), set)
	switch {
	case by.Login != "":
		d.F("%s, you set this end (%s): ", mdtext.Mention(by.Login), mdtext.Short(by.Commit))
	case by.Commit != "":
		d.F("%s set this end (%s): ", by.Name, mdtext.Short(by.Commit))
	}
	d.Add("merging this pull request removes the stand: the reconciler destroys its servers")
	if end.Cost != "" {
		d.F(", saving %s a month (Hetzner's list prices)", end.Cost)
	}
	d.Add(".\n\n")
	d.F("- **To keep it**, extend its end: a reviewed change of `stand.expires` on %s. This pull request is then closed.\n", branch)
	if e.MergeAtEnd {
		d.F("- **At the end**, the reconciler merges this pull request itself: the repository's lifetime policy says `merge_at_expiry: true` (%s).\n", e.PolicyAt)
	} else {
		d.Add("- **At the end**, unless this pull request is merged, the stand is `Expired` and stays, running and costing, until a commit removes it.\n")
	}
	d.Add("\n<sub>Opened by stands-reconciler. Closing it unmerged keeps the stand; no other pull request is opened for this end.</sub>\n")
	return d.Markup()
}

const dateFormat = "2006-01-02 15:04 UTC"

// orphanAfter is how old a removal branch without a pull request must be before another run opens
// its pull request: Gitea's one pull request per branch is checked racily, so a replica that lost the
// push leaves the opening to the one that won it, unless that one died in between.
const orphanAfter = 2 * time.Minute

// Folder is the stand's folder: what its removal takes away.
func Folder(file string) string { return path.Dir(file) }
