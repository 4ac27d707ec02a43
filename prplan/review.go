package prplan

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/stands"
)

// A reviewed change (docs/pr-workflow.md#apply-only-what-was-reviewed) is a stand's print
// (judge.Print: its spec with secrets as placeholders, which is what a plan shows and a reviewer
// approves) that a pull request's successful plan showed, approved on that pull request by someone
// other than its author, of the head planned, after the plan showed it, and not dismissed since.

// plannedChange is one stand's change in a head's successful plan.
type plannedChange struct {
	Print string    `json:"print"` // "" for a removal
	Since time.Time `json:"since"` // when a plan of this head first showed it
}

// ReviewRetention is how long a closed pull request's planned changes are kept: a merge is applied
// long before, but a stand that failed may be applied again days later.
const ReviewRetention = 30 * 24 * time.Hour

// changes is what a successful plan changes, by stand: the merge's print of each created or updated
// stand, "" for each removed one.
func (pl *Planner) changes(j *judgement, plan *prPlan, was plannedHead, now time.Time) (map[string]plannedChange, error) {
	out := map[string]plannedChange{}
	for _, r := range plan.rows {
		var print string
		switch r.action {
		case "create", "update":
			in := j.merged.Input(r.id)
			if in == nil {
				continue
			}
			var err error
			if print, err = judge.Print(in, pl.cfg.Passphrase); err != nil {
				return nil, fmt.Errorf("print of %s: %w", r.id, err)
			}
		case "destroy":
		default:
			continue
		}
		c := plannedChange{Print: print, Since: now}
		if old, ok := was.Changes[r.id]; ok && was.Head == j.pr.HeadSHA && old.Print == print {
			c.Since = old.Since // the same change, shown again after main moved
		}
		out[r.id] = c
	}
	if was.Head == j.pr.HeadSHA {
		// A change the head's earlier plan showed, which main now holds (a squash or rebase merge
		// Gitea has not marked yet, or main made the same change): the merge no longer shows it, but
		// what was approved at this head stays approved, for the applies of the commit that holds it.
		shown := map[string]bool{}
		for _, r := range plan.rows {
			shown[r.id] = true
		}
		for id, c := range was.Changes {
			if !shown[id] {
				out[id] = c
			}
		}
	}
	return out, nil
}

// Reviewed says whether the change of stand id to print ("" its removal) was reviewed. Only an
// error of the forge is an error; any other answer is a Review, saying why when it is not one.
func (pl *Planner) Reviewed(ctx context.Context, id, print string) (stands.ChangeReview, error) {
	pl.mu.Lock()
	var cands []candidate
	for idx, h := range pl.records {
		if c, ok := h.Changes[id]; ok && c.Print == print {
			cands = append(cands, candidate{index: idx, head: h.Head, author: h.Author, since: c.Since})
		}
	}
	pl.mu.Unlock()
	if len(cands) == 0 {
		return stands.ChangeReview{Why: "no pull request's successful plan shows this change"}, nil
	}
	slices.SortFunc(cands, func(a, b candidate) int { return cmp.Compare(b.index, a.index) })
	var why []string
	for _, c := range cands {
		reviews, err := pl.forge.Reviews(ctx, c.index)
		if err != nil {
			return stands.ChangeReview{}, err
		}
		by, not := approval(reviews, c)
		if not == "" {
			return stands.ChangeReview{Reviewed: true, PR: c.index, By: by}, nil
		}
		why = append(why, fmt.Sprintf("#%d %s", c.index, not))
	}
	return stands.ChangeReview{Why: "the pull requests that planned it are not approved: " + strings.Join(why, "; ")}, nil
}

type candidate struct {
	index  int64
	head   string
	author string
	since  time.Time
}

// approval finds the review that approves c: by someone other than the author, of the head
// planned, submitted after the plan showed the change, not dismissed. Else it says why not.
func approval(reviews []stands.Review, c candidate) (by, why string) {
	why = "has no approval"
	for _, r := range reviews {
		if r.State != stands.Approved {
			continue
		}
		switch {
		case r.Dismissed:
			why = "has an approval that was dismissed"
		case r.User == c.author:
			why = "is approved by its author only"
		case r.Commit != c.head:
			why = "is approved at another head than the one planned (a push followed the approval)"
		case r.Submitted.Before(c.since):
			why = "was approved before its plan showed this change"
		default:
			return r.User, ""
		}
	}
	return "", why
}
