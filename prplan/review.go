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
// approves) that a pull request's successful plan showed, approved on that pull request by a
// second person (approval below), of the head planned, after the plan showed it, and not
// withdrawn since.

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
		by, not, err := pl.approval(ctx, reviews, c)
		if err != nil {
			return stands.ChangeReview{}, err
		}
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

// approval finds the reviews that approve c (docs/pr-workflow.md#four-eyes): as many as
// Config.RequiredApprovals asks, of different people. Each reviewer's last verdict is theirs (a
// request for changes withdraws an earlier approval); it must approve the head planned, after the
// plan showed the change, not dismissed, by someone who may write to the repository and took no
// part in the change: neither opened it, pushed to it, nor authored or committed a commit of it.
// Else it says why each verdict does not count. Who took part and who may write are asked of the
// forge only for an approval that passes every other rule.
func (pl *Planner) approval(ctx context.Context, reviews []stands.Review, c candidate) (by, why string, err error) {
	need := 1
	if pl.cfg.RequiredApprovals != nil {
		need = max(need, pl.cfg.RequiredApprovals())
	}
	var took stands.Contributors
	var yes, not []string
	for _, r := range lastVerdicts(reviews) {
		switch {
		case r.State == stands.RequestChanges:
			not = append(not, "changes requested by "+r.User)
			continue
		case r.Dismissed:
			not = append(not, r.User+"'s approval was dismissed")
			continue
		case r.User == c.author:
			not = append(not, "approved by "+r.User+", its author")
			continue
		case r.Commit != c.head:
			not = append(not, r.User+" approved at another head than the one planned (a push followed the approval)")
			continue
		case r.Submitted.Before(c.since):
			not = append(not, r.User+" approved before its plan showed this change")
			continue
		}
		if took == nil {
			if took, err = pl.forge.Contributors(ctx, c.index); err != nil {
				return "", "", err
			}
		}
		if did, ok := took[r.User]; ok {
			not = append(not, "approved by "+r.User+", who "+did)
			continue
		}
		if !r.Official {
			// Not an error of the gate's: a permission the token may not read holds the change
			// saying why, and the next cycle asks again.
			switch w, err := pl.forge.CanWrite(ctx, r.User); {
			case err != nil:
				not = append(not, fmt.Sprintf("approved by %s, whose approval is not official and whose permission cannot be read (%v)", r.User, err))
				continue
			case !w:
				not = append(not, "approved by "+r.User+", who may not write to the repository")
				continue
			}
		}
		if yes = append(yes, r.User); len(yes) == need {
			return strings.Join(yes, ", "), "", nil
		}
	}
	why = "has no approval that counts"
	switch {
	case len(yes) > 0:
		why = fmt.Sprintf("has %d of the %d approvals it needs (by %s)", len(yes), need, strings.Join(yes, ", "))
	case len(not) == 0:
		return "", "has no approval", nil
	}
	if len(not) > 0 {
		why += ": " + strings.Join(not, "; ")
	}
	return "", why, nil
}

// lastVerdicts is each reviewer's last approval or request for changes, in the order given
// (Gitea's: as submitted). Comments decide nothing, nor does a review whose user is gone.
func lastVerdicts(reviews []stands.Review) []stands.Review {
	last := map[string]int{}
	for i, r := range reviews {
		if r.User != "" && (r.State == stands.Approved || r.State == stands.RequestChanges) {
			last[r.User] = i
		}
	}
	var out []stands.Review
	for i, r := range reviews {
		if j, ok := last[r.User]; ok && j == i {
			out = append(out, r)
		}
	}
	return out
}
