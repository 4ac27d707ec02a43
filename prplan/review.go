package prplan

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/stands"
)

// A reviewed change (docs/pr-workflow.md#apply-only-what-was-reviewed) is a transition of a stand
// (stands.Transition: from the print the tracked branch gave it to the print the merge gives it;
// judge.Print is its spec with secrets as placeholders, which is what a plan shows and a reviewer
// approves) that a pull request's successful plan showed, approved on that pull request by a second
// person (approval below), of the head planned, after the plan showed it, and not withdrawn since;
// and that pull request merged, its merge on the first-parent history of the commit applied.
// Transitions chain: two reviewed merges applied in one go are covered. Each authorises its
// transition once: the loop keeps those used (stands.ReviewQuery.Used).

// plannedChange is one stand's change in a head's successful plan.
type plannedChange struct {
	// From is the stand's print on the tracked branch the plan merged into ("" not declared there;
	// the stack's print where the branch cannot judge the stand); Print what the merge gives it
	// ("" a removal).
	From  string    `json:"from"`
	Print string    `json:"print"`
	Since time.Time `json:"since"` // when a plan of this head first showed it
}

// ReviewRetention is how long a closed pull request's planned changes are kept: a merge is applied
// long before, but a stand that failed may be applied again days later.
const ReviewRetention = 30 * 24 * time.Hour

// changes is what a successful plan changes, by stand: the merge's print of each created or updated
// stand, "" for each removed one, each from the stand's print on the tracked branch.
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
		from, err := pl.mainPrint(j, r.id)
		if err != nil {
			return nil, err
		}
		c := plannedChange{From: from, Print: print, Since: now}
		if old, ok := was.Changes[r.id]; ok && was.Head == j.pr.HeadSHA && old.Print == print && old.From == from {
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

// mainPrint is where a stand's change in a plan starts: its print on the tracked branch, "" when
// the branch does not declare it; for a stand the branch declares but cannot judge (a broken
// manifest), the print of its stack, what the plan's preview compared against.
func (pl *Planner) mainPrint(j *judgement, id string) (string, error) {
	if in := j.main.Input(id); in != nil {
		p, err := judge.Print(in, pl.cfg.Passphrase)
		if err != nil {
			return "", fmt.Errorf("print of %s on %s: %w", id, pl.cfg.Branch, err)
		}
		return p, nil
	}
	for _, v := range j.main.Verdicts {
		if v.ID == id {
			return j.applied[id], nil // "" without a stack: the step is its create
		}
	}
	return "", nil
}

// edge is one pull request's planned change of the stand asked about.
type edge struct {
	candidate
	stands.Transition
}

// Reviewed says whether the stand's transition q asks about was reviewed: a chain of planned
// changes, each of a merged pull request whose merge q.OnBranch holds, approved, and not used,
// leading from q.From to q.To. Only an error of the forge or the history is an error; any other
// answer is a ChangeReview, saying why when it is not one.
func (pl *Planner) Reviewed(ctx context.Context, q stands.ReviewQuery) (stands.ChangeReview, error) {
	rv, _, err := pl.reviewed(ctx, q)
	return rv, err
}

// reviewed is Reviewed, with the walk it took.
func (pl *Planner) reviewed(ctx context.Context, q stands.ReviewQuery) (stands.ChangeReview, *walk, error) {
	if err := pl.readRecords(ctx); err != nil {
		return stands.ChangeReview{}, nil, err
	}
	pl.mu.Lock()
	var edges []edge
	for idx, h := range pl.records {
		changes := h.Changes
		if q.End {
			changes = h.Ends
		}
		if c, ok := changes[q.Stand]; ok {
			edges = append(edges, edge{candidate{index: idx, head: h.Head, author: h.Author, since: c.Since}, stands.Transition{From: c.From, To: c.Print}})
		}
	}
	pl.mu.Unlock()
	// The newest pull request first: the chain found is the one a reviewer saw last.
	slices.SortFunc(edges, func(a, b edge) int { return cmp.Compare(b.index, a.index) })
	w := &walk{pl: pl, q: q, edges: edges, checked: map[int]checkedEdge{}, dead: map[string]bool{}}
	steps, err := w.from(ctx, q.From, map[string]bool{})
	if err == nil && steps == nil {
		err = w.explain(ctx)
	}
	switch {
	case err != nil:
		return stands.ChangeReview{}, w, err
	case steps != nil:
		return stands.ChangeReview{Reviewed: true, Steps: steps}, w, nil
	case len(w.why) > 0:
		return stands.ChangeReview{Why: "no reviewed change leads to it: " + strings.Join(w.why, "; ")}, w, nil
	case len(edges) > 0:
		return stands.ChangeReview{Why: "no pull request's successful plan shows this change from what " + w.current()}, w, nil
	}
	return stands.ChangeReview{Why: "no pull request's successful plan shows this change"}, w, nil
}

// readRecords reads the planned heads where another wrote them since (the leader, with replicas).
func (pl *Planner) readRecords(ctx context.Context) error {
	pl.mu.Lock()
	known := pl.rversion
	pl.mu.Unlock()
	body, version, err := pl.store.Load(ctx, known)
	if err != nil {
		return fmt.Errorf("read the planned pull requests: %w", err)
	}
	if body == nil && version == known {
		return nil
	}
	records, err := parsePlanned(body)
	if err != nil {
		return fmt.Errorf("read the planned pull requests: %w", err)
	}
	pl.mu.Lock()
	pl.records, pl.rversion = records, version
	pl.mu.Unlock()
	return nil
}

// walk finds a chain of authorisations for one ReviewQuery, asking the forge about each planned
// change at most once.
type walk struct {
	pl      *Planner
	q       stands.ReviewQuery
	edges   []edge
	checked map[int]checkedEdge // by index into edges
	// dead are the prints no chain leads on from: each is walked once, so a writer opening many
	// pull requests of one stand costs the walk their number, not the paths between them.
	dead   map[string]bool
	why    []string
	visits int // prints walked from
}

type checkedEdge struct {
	auth stands.Authorisation
	ok   bool
}

// from is a chain from print to w.q.To, nil when there is none; seen are the prints on the way.
func (w *walk) from(ctx context.Context, print string, seen map[string]bool) ([]stands.Authorisation, error) {
	w.visits++
	seen[print] = true
	defer delete(seen, print)
	for i, e := range w.edges {
		if e.From != print || (seen[e.To] || w.dead[e.To]) && e.To != w.q.To {
			continue
		}
		a, ok, err := w.check(ctx, i)
		if err != nil || !ok {
			if err != nil {
				return nil, err
			}
			continue
		}
		if e.To == w.q.To {
			return []stands.Authorisation{a}, nil
		}
		rest, err := w.from(ctx, e.To, seen)
		if err != nil {
			return nil, err
		}
		if rest != nil {
			return append([]stands.Authorisation{a}, rest...), nil
		}
	}
	w.dead[print] = true
	return nil, nil
}

// current is where the query's transition starts, as its messages say it.
func (w *walk) current() string {
	if w.q.End {
		return "is in force"
	}
	return "is applied"
}

// explain adds why the planned changes that end where the query does, and that the walk did not
// reach, do not count: a reviewer expects to hear of the pull requests that planned this content.
func (w *walk) explain(ctx context.Context) error {
	for i, e := range w.edges {
		if e.To != w.q.To {
			continue
		}
		if _, done := w.checked[i]; done {
			continue
		}
		_, ok, err := w.check(ctx, i)
		if err != nil {
			return err
		}
		if ok {
			w.why = append(w.why, fmt.Sprintf("#%d approved its change from what %s held then, not from what %s: a change of the stand before it was not reviewed",
				e.index, w.pl.cfg.Branch, w.current()))
		}
	}
	return nil
}

// check says whether edge i authorises its transition: merged, its merge on the branch applied,
// approved, and not used. Each reason against it is kept once.
func (w *walk) check(ctx context.Context, i int) (stands.Authorisation, bool, error) {
	if c, ok := w.checked[i]; ok {
		return c.auth, c.ok, nil
	}
	e := w.edges[i]
	a := stands.Authorisation{Stand: w.q.Stand, End: w.q.End, Transition: e.Transition, PR: e.index, Head: e.head}
	why, err := w.against(ctx, &a, e.candidate)
	if err != nil {
		return a, false, err
	}
	if why != "" {
		w.why = append(w.why, fmt.Sprintf("#%d %s", e.index, why))
	}
	w.checked[i] = checkedEdge{auth: a, ok: why == ""}
	return a, why == "", nil
}

// against is why a's pull request does not authorise it, "" when it does; it fills in a's merge
// and approvers.
func (w *walk) against(ctx context.Context, a *stands.Authorisation, c candidate) (string, error) {
	var err error
	if a.Merge, err = w.pl.merge(ctx, c.index); err != nil {
		return "", err
	}
	if a.Merge == "" {
		return "is not merged", nil
	}
	if w.q.Used != nil && w.q.Used(a.Key()) {
		return "was applied already: its approval lets its change through once", nil
	}
	if w.q.OnBranch != nil {
		on, err := w.q.OnBranch(ctx, a.Merge)
		if err != nil {
			return "", err
		}
		if !on {
			return fmt.Sprintf("was merged at %s, which %s no longer holds (reset or force-pushed)", mdtext.Short(a.Merge), w.pl.cfg.Branch), nil
		}
	}
	reviews, err := w.pl.forge.Reviews(ctx, c.index)
	if err != nil {
		return "", err
	}
	by, not, err := w.pl.approval(ctx, reviews, c)
	a.By = by
	return not, err
}

// DefaultMergeWait is Config.MergeWait's default: Gitea marks a merge within a second of pushing it.
const DefaultMergeWait = 5 * time.Second

// merge is pull request index's merge commit, "" while it is not merged. A merge is for good: it
// is asked of the forge until it is one. An open pull request is asked again for up to
// Config.MergeWait, once: the cycle its merge's push started may ask before Gitea marks it merged.
func (pl *Planner) merge(ctx context.Context, index int64) (string, error) {
	pl.mu.Lock()
	m, ok := pl.merges[index]
	waited := pl.waited[index]
	pl.waited[index] = true
	pl.mu.Unlock()
	if ok {
		return m, nil
	}
	deadline := time.Now().Add(pl.cfg.MergeWait)
	for {
		m, open, err := pl.forge.Merged(ctx, index)
		switch {
		case err != nil:
			return "", err
		case m != "":
			pl.mu.Lock()
			pl.merges[index] = m
			pl.mu.Unlock()
			return m, nil
		case !open || waited || pl.cfg.MergeWait < 0 || time.Now().After(deadline):
			return "", nil
		}
		select {
		case <-ctx.Done():
			return "", ctx.Err()
		case <-time.After(min(500*time.Millisecond, pl.cfg.MergeWait)):
		}
	}
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
			if took, err = pl.forge.Contributors(ctx, c.index, c.head); err != nil {
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
