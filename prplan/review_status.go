package prplan

import (
	"context"
	"fmt"
	"maps"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/stands"
)

// ReviewContext is the commit status on a pull request's head that says, before the merge, whether
// its approvals are ones the review gate counts (docs/pr-workflow.md#four-eyes): Gitea lets a
// reviewer who pushed onto the pull request approve it and merge, and the gate would then hold the
// change. Branch protection can require it, so that Gitea refuses such a merge.
const ReviewContext = "stands/review"

// reviewStatuses sets stands/review on the head of each open pull request whose plan at that head
// succeeded and changes something: success when its approvals count, pending saying why not.
// Each is set again only when it changes; open, when given, are all the open pull requests, and
// what was set on others is forgotten. Only with Config.ReviewStatus: without the gate every merge
// is applied, and the status would say otherwise.
func (pl *Planner) reviewStatuses(ctx context.Context, prs []stands.PullRequest, open map[int64]bool) {
	if !pl.cfg.ReviewStatus {
		return
	}
	if open != nil {
		pl.mu.Lock()
		maps.DeleteFunc(pl.reviewSet, func(idx int64, _ string) bool { return !open[idx] })
		pl.mu.Unlock()
	}
	for _, pr := range prs {
		h := pl.head(pr.Index)
		if h.Head != pr.HeadSHA || !h.Done || h.State != stands.StateSuccess || len(h.Changes)+len(h.Ends) == 0 {
			continue
		}
		var since time.Time // after the plan showed every change of this head
		for _, changes := range []map[string]plannedChange{h.Changes, h.Ends} {
			for _, c := range changes {
				if c.Since.After(since) {
					since = c.Since
				}
			}
		}
		reviews, err := pl.forge.Reviews(ctx, pr.Index)
		if err != nil {
			pl.log.Warn("reviews not read: stands/review not set", "pull_request", pr.Index, "err", err)
			continue
		}
		by, why, err := pl.approval(ctx, reviews, candidate{index: pr.Index, head: pr.HeadSHA, author: pr.Author, since: since})
		if err != nil {
			pl.log.Warn("reviews not read: stands/review not set", "pull_request", pr.Index, "err", err)
			continue
		}
		state, desc := stands.StateSuccess, fmt.Sprintf("approved by %s: applied once merged", by)
		if why != "" {
			state, desc = stands.StatePending, "not applied if merged now: it "+why
		}
		key := pr.HeadSHA + " " + string(state) + " " + desc
		pl.mu.Lock()
		same := pl.reviewSet[pr.Index] == key
		pl.mu.Unlock()
		if same {
			continue
		}
		pl.setCommitStatus(ctx, pr.HeadSHA, ReviewContext, state, mdtext.Truncate(desc, 250), pr.URL)
		pl.mu.Lock()
		pl.reviewSet[pr.Index] = key
		pl.mu.Unlock()
	}
}
