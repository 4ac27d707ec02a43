package prplan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/diff"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// PlanContext is the commit status every pull request head gets; branch protection can require it.
const PlanContext = "stands/plan"

// CommentMarker identifies the reconciler's comment on a pull request.
const CommentMarker = "<!-- stands-reconciler:plan -->"

// planHead judges one pull request (its merge result, without Pulumi: one whose plan a move of
// the tracked branch changes shows stands/plan pending at once) and previews it, within its
// head's budget: one pull request at its budget holds one worker, not the others.
func (pl *Planner) planHead(ctx context.Context, pr stands.PullRequest, main *judge.Evaluation, commit string, actual []diff.Actual) {
	hctx, cancel := pl.cfg.Budget.context(ctx)
	defer cancel()
	if j := pl.judgeOne(hctx, pr, main, commit, actual); j != nil {
		pl.planOne(hctx, j)
	}
}

// forgetClosed forgets the pull requests no longer open once nothing of theirs can still be
// applied: the reviewed changes of one merged stay ReviewRetention.
func (pl *Planner) forgetClosed(open map[int64]bool, now time.Time) {
	pl.hmu.Lock()
	defer pl.hmu.Unlock()
	changed := false
	for idx, h := range pl.heads {
		switch {
		case open[idx] && !h.ClosedAt.IsZero():
			h.ClosedAt, changed = time.Time{}, true // reopened
			pl.heads[idx] = h
		case open[idx]:
		case len(h.Changes) == 0 && len(h.Ends) == 0 || !h.ClosedAt.IsZero() && now.Sub(h.ClosedAt) > ReviewRetention:
			delete(pl.heads, idx) // closed or merged, and nothing of it can still be applied
			changed = true
		case h.ClosedAt.IsZero():
			// Merged, perhaps: its reviewed changes stay for the applies of the merge.
			h.ClosedAt, changed = now, true
			pl.heads[idx] = h
		}
	}
	if changed {
		pl.savePlannedLocked()
	}
}

// judgeOne judges what merging a pull request would do, when its head or the tracked branch moved
// since its plan, and returns the judgement to preview; nil when there is nothing to plan: nothing
// moved, the head gets no plan, or the move leaves its plan as it is.
func (pl *Planner) judgeOne(ctx context.Context, pr stands.PullRequest, main *judge.Evaluation, commit string, actual []diff.Actual) *judgement {
	log := pl.log.With("pull_request", pr.Index, "head", mdtext.Short(pr.HeadSHA), "base", mdtext.Short(commit))
	was := pl.head(pr.Index)
	same := was.Head == pr.HeadSHA
	if same && (was.UntilPush || was.Done && was.Base == commit) {
		return nil
	}
	// The head was planned, at another commit of the tracked branch: the branch moved. Any other
	// head is checked for trust first, whatever was known of it.
	moved := same && was.Done && was.Key != ""
	if !moved {
		why, err := pl.untrusted(ctx, pr)
		if err != nil {
			log.Warn("pull request not planned; retrying", "err", err)
			return nil
		}
		if why != "" {
			// Previews read production state and render the head's templates: only for code someone
			// with write access pushed.
			pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StateFailure, why, pr.URL)
			pl.settle(pr.Index, plannedHead{Head: pr.HeadSHA, UntilPush: true})
			pl.plans.WithLabelValues("untrusted").Inc()
			log.Info("pull request not planned", "why", why)
			return nil
		}
	}
	if !pl.startPlan(ctx, pr) {
		return nil
	}
	j, err := pl.judgePR(ctx, pr, main, commit, actual)
	if errors.Is(err, errInBranch) {
		pl.keepMerged(ctx, pr, was, commit)
		log.Info("pull request's head is in the tracked branch already; its plan stays as it was")
		return nil
	}
	if err != nil {
		pl.failed(ctx, pr, err, log)
		return nil
	}
	log.Debug("pull request judged", "stands", len(j.merged.Verdicts), "judged_anew", len(j.merged.Judged))
	if moved && j.key == was.Key && (!was.Stale || was.State != "") {
		// The move leaves this plan as it was: no preview, and stands/plan stays, or is set back
		// where it went pending while the head waited for a worker.
		if was.Stale {
			pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, was.State, was.Summary, pr.URL)
		}
		kept := was
		kept.Base, kept.Attempts, kept.Stale = commit, 0, false
		pl.settle(pr.Index, kept)
		log.Debug("tracked branch moved; plan unchanged")
		return nil
	}
	what := "planning"
	if moved {
		what = pl.cfg.Branch + " moved; planning again"
	}
	if !moved || !was.Stale {
		pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StatePending, what, pr.URL)
	}
	return j
}

// errInBranch: the tracked branch holds the pull request's head already.
var errInBranch = errors.New("the head is in the tracked branch")

// keepMerged settles a pull request whose head the tracked branch holds: it was merged, and Gitea
// lists it open only until it marks it so. Planned again, its merge would change nothing: the
// comment the reviewer approved would be overwritten with an empty plan, and the changes it showed,
// which the merge's applies are checked against (review.go), forgotten. Its record stays as it was
// planned, stands/plan is set back if a move turned it pending, and the head is not judged again.
func (pl *Planner) keepMerged(ctx context.Context, pr stands.PullRequest, was plannedHead, commit string) {
	kept := plannedHead{Head: pr.HeadSHA, Author: pr.Author}
	if was.Head != pr.HeadSHA {
		// Never planned: opened on a commit the branch already has; merging it changes nothing.
		pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StateSuccess, "no stand changes: "+pl.cfg.Branch+" holds this head already", pr.URL)
	} else {
		kept = was
		if was.Stale && was.State != "" {
			pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, was.State, was.Summary, pr.URL)
		}
	}
	kept.Base, kept.Attempts, kept.Stale, kept.UntilPush = commit, 0, false, true
	pl.settle(pr.Index, kept)
}

// planOne previews a judged pull request and writes its comment and stands/plan.
func (pl *Planner) planOne(ctx context.Context, j *judgement) {
	pr := j.pr
	log := pl.log.With("pull_request", pr.Index, "head", mdtext.Short(pr.HeadSHA), "base", mdtext.Short(j.base))
	plan, err := pl.planPR(ctx, j)
	if err == nil && ctx.Err() != nil {
		// planPR shows a preview cut short as an error row; cut short by the plan's own end (its
		// budget, a stop), the plan itself ends.
		err = context.Cause(ctx)
	}
	if err != nil {
		pl.failed(ctx, pr, err, log)
		return
	}
	// An approval submitted from this time on, by the forge's clock, may be of this plan.
	shown, err := pl.forge.UpsertComment(ctx, pr.Index, CommentMarker, plan.comment(pr))
	if err != nil {
		log.Warn("plan comment not written; retrying", "err", err)
		return
	}
	state := stands.StateSuccess
	if plan.failed {
		state = stands.StateFailure
	}
	pl.plans.WithLabelValues(string(state)).Inc()
	pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, state, plan.summary(), pr.URL)
	done := plannedHead{Head: pr.HeadSHA, Base: j.base, Key: j.key, Done: true, Author: pr.Author, State: state, Summary: plan.summary()}
	if !plan.failed {
		// Only a plan that succeeded is one a review can approve.
		var err error
		if done.Changes, err = pl.changes(j, plan, pl.head(pr.Index), shown); err != nil {
			log.Warn("the plan's changes not kept: none of them counts as reviewed", "err", err)
		}
		done.Ends = ends(j, pl.head(pr.Index), shown)
	}
	pl.settle(pr.Index, done)
	pl.reviewStatuses(ctx, []stands.PullRequest{pr}, nil) // what its approvals are worth, at once
	log.Info("pull request planned", "stands", len(plan.rows), "conflicts", len(plan.conflicts), "failed", plan.failed)
}

// failed ends a try of a pull request's plan that err stopped; ctx is the plan's (planHead). A
// head the plan refuses, its budget used up among them, gets stands/plan failure until the next
// push; any other error is tried again at the next cycle, up to maxPlanAttempts.
func (pl *Planner) failed(ctx context.Context, pr stands.PullRequest, err error, log *slog.Logger) {
	cause := context.Cause(ctx)
	if ctx.Err() == nil {
		pl.plans.WithLabelValues("error").Inc()
	}
	// The plan's context may be over (its budget, a stop): what is said of it is said beyond it.
	wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), forgeTimeout)
	defer cancel()
	var tooLarge *stands.TooLarge
	refuse := func(why string) {
		pl.setCommitStatus(wctx, pr.HeadSHA, PlanContext, stands.StateFailure, why, pr.URL)
		pl.settle(pr.Index, plannedHead{Head: pr.HeadSHA, UntilPush: true, Attempts: pl.head(pr.Index).Attempts})
		log.Warn("pull request not planned", "err", err)
	}
	switch {
	case errors.Is(cause, errSuperseded):
		pl.untry(pr.Index) // the tracked branch moved: the plan starts again on it
	case errors.Is(cause, errBudget) || errors.Is(err, errBudget):
		// The wall time ends the plan's context; the render CPU ends a render, with err.
		refuse(fmt.Sprintf("not planned: %v; push a new commit to try again", budgetErr(cause, err)))
	case ctx.Err() != nil:
		// stopping: the try counts, the head is tried again after the restart
	case errors.Is(err, errTooManySecrets):
		refuse(fmt.Sprintf("not planned: the commit names more than %d secrets", maxSecretNames))
	case errors.As(err, &tooLarge):
		refuse("not planned: " + tooLarge.Limit + ", more than the reconciler reads")
	case errors.Is(err, stands.ErrTooLarge):
		refuse(fmt.Sprintf("not planned: the commit holds more files than the reconciler reads (%d MiB)", stands.MaxTreeSize>>20))
	default:
		log.Warn("pull request not planned; retrying", "err", err)
		// The error's text goes to the log only: a preview's may quote the pull request's content.
		pl.setCommitStatus(wctx, pr.HeadSHA, PlanContext, stands.StateError, "planning failed, will retry ("+string(reason.Of(err))+")", pr.URL)
	}
}

// budgetErr is whichever of the plan's cause and error names the budget it passed.
func budgetErr(cause, err error) error {
	if errors.Is(cause, errBudget) {
		return cause
	}
	return err
}

// forgeTimeout bounds what is said to Gitea after a plan's own context ended.
const forgeTimeout = 30 * time.Second

// untrusted says why a pull request gets no plan: its head must be the tip of a branch of this
// repository, which only users with write access can push. A fork's pull request is not, and
// neither is an AGit one (refs/for/..., which users with read access can open on this repository).
func (pl *Planner) untrusted(ctx context.Context, pr stands.PullRequest) (string, error) {
	if !pr.SameRepo {
		return "no plan for a pull request from a fork: push its branch to this repository", nil
	}
	tip, err := pl.forge.BranchTip(ctx, pr.HeadRef)
	if err != nil {
		return "", err
	}
	if tip != pr.HeadSHA {
		return "no plan: the head is not the tip of a branch of this repository (an AGit pull request, or a branch that moved); someone with write access can push it as a branch", nil
	}
	return "", nil
}

func (pl *Planner) setCommitStatus(ctx context.Context, sha, name string, state stands.CommitState, description, url string) {
	if err := pl.forge.SetStatus(ctx, sha, name, state, description, url); err != nil {
		pl.log.Warn("commit status not set", "context", name, "commit", mdtext.Short(sha), "err", err)
	}
}

// prPlan is what a pull request would do.
type prPlan struct {
	head   string
	base   string // the tracked branch's commit the head is merged into
	branch string
	// conflicts are the stand folders and files both the pull request and the tracked branch
	// changed: the plan keeps the tracked branch's side of them, and fails.
	conflicts []string
	rows      []planRow
	cost      float64
	priced    bool // every server of the plan had a known price
	cur       string
	failed    bool
	// warnings of the head's manifests: they load, in a form that should change.
	warnings []manifest.Diagnostic
	// lifetimes and policy: the stands' ends and the lifetime policy's settings the merge changes.
	lifetimes []lifetimeChange
	policy    []string
}

type planRow struct {
	id      string
	action  string // create, update, destroy, blocked, invalid, error
	steps   []stands.Step
	note    string // a reason or an error, scrubbed
	cost    float64
	counted bool
}

// judgement is what merging a pull request would do, judged without Pulumi: the stands where the
// merge result and the tracked branch decide differently, each to be previewed.
type judgement struct {
	pr        stands.PullRequest
	base      string // the tracked branch's commit the head is merged into
	merged    *blindEvaluation
	main      *blindEvaluation
	actions   []diff.Action
	conflicts []string
	lifetimes []lifetimeChange
	policy    []string
	// key digests everything the plan is made of but the stacks: equal keys, equal plans.
	key string
	// applied are the stacks' prints by stand (stands.Unrecorded where none is recorded; no entry
	// without a stack): where a change of a stand the tracked branch cannot judge starts.
	applied map[string]string
}

// judgePR judges what merging the pull request into the tracked branch at commit would do. The
// tree judged is the merge result (mergeTrees), not the head: a change the tracked branch made since
// the branch was cut is in it, as it will be after the merge. What the merge changes is where the
// decisions on that tree and on the tracked branch, each against the backend's stacks, differ.
func (pl *Planner) judgePR(ctx context.Context, pr stands.PullRequest, main *judge.Evaluation, commit string, actual []diff.Actual) (*judgement, error) {
	head, mergeBase, err := pl.refs.FetchPull(ctx, pr.Ref(), commit)
	if err != nil {
		return nil, err
	}
	if head.Commit != "" && head.Commit == mergeBase.Commit {
		return nil, errInBranch
	}
	m, err := mergeTrees(mergeBase.Files, main.Files, head.Files)
	if err != nil {
		return nil, err
	}
	blindMain, err := pl.blindMain(ctx, main, commit)
	if err != nil {
		return nil, err
	}
	j := &judgement{pr: pr, base: commit, main: blindMain, applied: map[string]string{}}
	for _, a := range actual {
		j.applied[a.ID] = cmp.Or(a.Print, stands.Unrecorded)
	}
	if j.merged, j.actions, err = pl.decideMerged(ctx, m.tree, main, blindMain, commit, actual); err != nil {
		return nil, err
	}
	j.conflicts = m.folders
	if len(m.paths) > 0 {
		// A file both sides changed counts where a stand reads it: the merge judged with the
		// head's side of those files decides otherwise.
		_, theirs, err := pl.decideMerged(ctx, m.theirs, main, blindMain, commit, actual)
		if err != nil {
			return nil, err
		}
		if digest(theirs) != digest(j.actions) {
			j.conflicts = append(j.conflicts, m.paths...)
		}
	}
	slices.Sort(j.conflicts)
	j.lifetimes = lifetimeChanges(blindMain.Evaluation, j.merged.Evaluation, time.Now())
	j.policy = policyChanges(blindMain.Lifetime, j.merged.Lifetime)
	j.key = j.digest()
	return j, nil
}

// blindMain is the tracked branch at commit under placeholders, evaluated once for every pull
// request planned against it (within SecretRefresh). Its renders are not the cost of the plan that
// asks first.
func (pl *Planner) blindMain(ctx context.Context, main *judge.Evaluation, commit string) (*blindEvaluation, error) {
	pl.bmu.Lock()
	defer pl.bmu.Unlock()
	// Judged again at a new commit, and once its oldest stand is SecretRefresh old: the plans judge
	// a merge from it, so its secrets' existence is no staler than the loop's values.
	stale := pl.blind != nil && pl.cfg.SecretRefresh > 0 && time.Since(pl.blind.Oldest()) >= pl.cfg.SecretRefresh
	if pl.blindCommit != commit || pl.blind == nil || stale {
		var previous *blindEvaluation
		if pl.cfg.SecretRefresh > 0 {
			previous = pl.blind // its stands a commit left alone are kept, within the refresh
		}
		blind, err := pl.evaluateBlind(withoutBudget(ctx), main.Files, nil, previous, pl.cfg.SecretRefresh)
		if err != nil {
			return nil, err
		}
		pl.log.Debug("tracked branch judged for the plans", "commit", mdtext.Short(commit), "stands", len(blind.Verdicts), "judged_anew", len(blind.Judged))
		pl.blind, pl.blindCommit = blind, commit
	}
	return pl.blind, nil
}

// decideMerged evaluates a merge result blind to secrets and returns the actions where it decides
// otherwise than the tracked branch, blindMain at commit.
func (pl *Planner) decideMerged(ctx context.Context, files fs.FS, main *judge.Evaluation, blindMain *blindEvaluation, commit string,
	actual []diff.Actual) (*blindEvaluation, []diff.Action, error) {
	merged, err := pl.evaluateBlind(ctx, files, blindMain, blindMain, 0)
	if err != nil {
		return nil, nil, err
	}
	if err := cmp.Or(merged.SecretsErr, blindMain.SecretsErr, main.SecretsErr); err != nil {
		pl.bmu.Lock()
		if pl.blindCommit == commit {
			pl.blindCommit = "" // evaluated again once the secret store answers
		}
		pl.bmu.Unlock()
		return nil, nil, fmt.Errorf("secret store unavailable: %w", err)
	}
	merged.sameAs(main, blindMain)
	before := map[string]diff.Action{}
	for _, a := range main.Decide(actual, pl.cfg.Guards, nil, "") {
		before[a.ID] = a
	}
	declared := map[string]bool{}
	for _, v := range main.Verdicts {
		declared[v.ID] = true
	}
	for _, v := range merged.Verdicts {
		declared[v.ID] = true
	}
	var out []diff.Action
	for _, a := range merged.Decide(actual, pl.cfg.Guards, nil, "") {
		if b, ok := before[a.ID]; ok && b == a {
			continue // merging it changes nothing for this stand
		}
		if !declared[a.ID] && a.Kind == diff.Blocked {
			continue // a stack the tracked branch does not declare either: not this pull request's removal
		}
		if a.Reason == reason.SourceUnavailable {
			a.Detail = strings.Join(merged.Unreadable, "; ")
		}
		out = append(out, a)
	}
	return merged, out, nil
}

// digest is the judgement's key: the actions, the prints of their stands on both sides, the
// problems and the conflicts. A preview of the same inputs against the same stacks shows the same.
func (j *judgement) digest() string {
	prints := map[string][2]*standPrint{}
	for _, a := range j.actions {
		prints[a.ID] = [2]*standPrint{j.merged.prints[a.ID], j.main.prints[a.ID]}
	}
	return digest(struct {
		Actions           []diff.Action
		Prints            map[string][2]*standPrint
		Unreadable, Confl []string
		Warnings          []manifest.Diagnostic
		Lifetimes         []lifetimeChange
		Policy            []string
	}{j.actions, prints, j.merged.Unreadable, j.conflicts, j.merged.Warnings, j.lifetimes, j.policy})
}

// planPR previews what a judgement found the merge would change.
func (pl *Planner) planPR(ctx context.Context, j *judgement) (*prPlan, error) {
	prices, err := pl.prev.Prices(ctx)
	if err != nil {
		pl.log.Warn("plan without prices", "err", err)
	}
	plan := &prPlan{head: j.pr.HeadSHA, base: j.base, branch: pl.cfg.Branch, priced: prices != nil, cur: "EUR",
		warnings: j.merged.Warnings, conflicts: j.conflicts, lifetimes: j.lifetimes, policy: j.policy}
	for _, u := range j.merged.Unreadable {
		plan.add(planRow{id: "?", action: "invalid", note: u})
	}
	for _, a := range j.actions {
		in := j.merged.Input(a.ID)
		row, err := pl.planRow(ctx, a, in, prices, plan)
		if row.action == "update" {
			row.steps = blindSteps(row.steps, j.main.prints[a.ID], j.merged.prints[a.ID])
		}
		if err != nil {
			return nil, err
		}
		if row.action != "" {
			plan.add(row)
		}
	}
	if len(j.conflicts) > 0 {
		plan.failed = true
	}
	sort.SliceStable(plan.rows, func(i, j int) bool { return plan.rows[i].id < plan.rows[j].id })
	return plan, nil
}

// planRow is one stand's row of a pull request's plan: the head's action, previewed where it would
// change servers. An empty action means no row.
func (pl *Planner) planRow(ctx context.Context, a diff.Action, in *stands.Input, prices stands.Prices, plan *prPlan) (planRow, error) {
	row := planRow{id: a.ID}
	switch {
	case a.Kind == diff.Blocked && a.Reason == reason.Invalid:
		row.action, row.note = "invalid", a.Detail
		return row, nil
	case in == nil && a.Kind == diff.Noop: // a foreign stack nobody declares
		return row, nil
	case a.Kind == diff.Blocked:
		row.action, row.note = "blocked", string(a.Reason)+": "+a.Reason.Message(a.Detail)
		if in != nil {
			return row, nil
		}
	case a.Kind == diff.Noop && a.Reason == reason.SuspendedByRepo:
		row.action, row.note = "update", string(a.Reason)+": "+a.Reason.Message("")
		return row, nil
	}
	if in == nil { // removed: what the destroy would delete, or what it would have deleted
		if row.action == "" {
			row.action = "destroy"
		}
		servers, err := pl.prev.StandServers(ctx, a.ID)
		if err != nil {
			return row, err
		}
		for _, s := range servers {
			row.steps = append(row.steps, stands.Step{Op: "delete", ServerName: s.Name, OldServerType: s.ServerType, OldLocation: s.Location})
		}
		return plan.priceSteps(row, prices), nil
	}
	var res *stands.Result
	var err error
	if a.Kind == diff.Create {
		row.action = "create"
		res, err = pl.prev.PreviewNew(ctx, *in)
	} else {
		row.action = "update"
		res, err = pl.prev.Preview(ctx, *in)
	}
	if err != nil {
		c := reason.Of(err)
		if c.Kind() == reason.Waiting {
			return row, err
		}
		// The reason only: a preview's output lists Pulumi's verdict on what secrets feed.
		row.action, row.note = "error", string(c)+": the preview failed; a plan shows none of its output"
		return row, nil
	}
	row.steps = res.Steps
	if res.Protected != "" {
		// The apply refuses it: protect holds servers as it holds a destroy.
		row.action, row.note = "blocked", string(reason.Protected)+": "+res.Protected+"; apply protect: false first"
	}
	return plan.priceSteps(row, prices), nil
}

func (p *prPlan) add(row planRow) {
	switch row.action {
	case "invalid", "blocked", "error":
		p.failed = true
	}
	if row.counted {
		p.cost += row.cost
	}
	p.rows = append(p.rows, row)
}

// priceSteps sets a row's monthly cost delta from the API's prices: a create adds its type, a delete
// takes its type away, a replace does both.
func (p *prPlan) priceSteps(row planRow, prices stands.Prices) planRow {
	row.counted = true
	price := func(t, loc string) float64 {
		pr, ok := prices.Of(t, loc)
		if !ok {
			row.counted, p.priced = false, false
		}
		if pr.Currency != "" {
			p.cur = pr.Currency
		}
		return pr.Monthly
	}
	if row.action == "blocked" {
		row.counted = false
		return row
	}
	for _, s := range row.steps {
		if s.Kind != "" {
			continue // node work costs nothing
		}
		switch s.Op {
		case "create":
			row.cost += price(s.ServerType, s.Location)
		case "delete":
			row.cost -= price(s.OldServerType, s.OldLocation)
		case "replace":
			row.cost += price(s.ServerType, s.Location) - price(s.OldServerType, s.OldLocation)
		case "update":
			if s.OldServerType != "" && s.OldServerType != s.ServerType {
				row.cost += price(s.ServerType, s.Location) - price(s.OldServerType, s.Location)
			}
		}
	}
	return row
}

func (p *prPlan) count(action string) int {
	n := 0
	for _, r := range p.rows {
		if r.action == action {
			n++
		}
	}
	return n
}

// summary is the commit status description.
func (p *prPlan) summary() string {
	if len(p.rows) == 0 && len(p.conflicts) == 0 && len(p.lifetimes) == 0 && len(p.policy) == 0 {
		return "no stand changes"
	}
	parts := []string{}
	if n := len(p.lifetimes); n > 0 {
		parts = append(parts, fmt.Sprintf("%d lifetime change(s)", n))
	}
	if len(p.policy) > 0 {
		parts = append(parts, "lifetime policy changed")
	}
	if n := len(p.conflicts); n > 0 {
		parts = append(parts, fmt.Sprintf("%d changed on both sides", n))
	}
	for _, a := range []string{"create", "update", "destroy", "blocked", "invalid", "error"} {
		if n := p.count(a); n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, a))
		}
	}
	s := strings.Join(parts, ", ")
	if p.priced {
		s += fmt.Sprintf("; %s/month", amount(p.cost, p.cur))
	}
	return s
}

func amount(v float64, cur string) string {
	sign := "+"
	if v < 0 {
		sign, v = "−", -v
	}
	return fmt.Sprintf("%s%.2f %s", sign, v, cur)
}

func money(v float64, cur string) mdtext.Markup { return mdtext.Code(amount(v, cur)) }

// comment is the pull request comment: stands, actions, servers and costs, and the problems with
// file and line. It names servers and types, never a value of the manifest. Everything in it that a
// pull request wrote (ids, names, types, positions, messages) is rendered inert by mdtext.
func (p *prPlan) comment(pr stands.PullRequest) mdtext.Markup {
	var d mdtext.Doc
	d.Add(CommentMarker + "\n")
	d.F("### Stands plan for %s merged into %s at %s\n\n", mdtext.Short(p.head), p.branch, mdtext.Short(p.base))
	switch {
	case len(p.rows) == 0 && len(p.conflicts) > 0:
		d.Add("Merging this pull request changes no stand beyond the conflicts below.\n")
	case len(p.rows) == 0 && (len(p.lifetimes) > 0 || len(p.policy) > 0):
		d.Add("Merging this pull request changes no server; it changes when stands end.\n")
	case len(p.rows) == 0:
		d.Add("This pull request changes no stand.\n")
	default:
		d.Add("What merging this pull request would do, as it merges today:\n\n")
	}
	if len(p.rows) > 0 {
		d.Add("| stand | plan | servers | monthly cost |\n|---|---|---|---|\n")
		for _, r := range p.rows {
			servers := []mdtext.Markup{}
			for _, s := range r.steps {
				servers = append(servers, stepText(s))
			}
			if len(servers) == 0 && r.action == "update" {
				servers = append(servers, "no server changes")
			}
			if r.note != "" && r.action != "invalid" && r.action != "error" {
				servers = append(servers, mdtext.Code(mdtext.FirstLine(r.note)))
			}
			var cost mdtext.Markup
			if r.counted {
				cost = money(r.cost, p.cur)
			}
			d.Add(mdtext.Row(r.id, actionText(r.action), mdtext.Join(servers, "<br>"), cost))
		}
		if p.priced {
			d.F("\n**Monthly cost change: %s** (Hetzner's list prices, gross, as the API states them)\n", money(p.cost, p.cur))
		} else {
			d.Add("\nMonthly cost change: unknown (a server type's price was not available).\n")
		}
	}
	d.Add(p.lifetimeSection())
	if len(p.conflicts) > 0 {
		d.F("\n#### Conflicts\n\nThis branch and %s both changed these since the branch was cut. The plan keeps %s's side of them and "+
			"does not guess the merge: merge %s into the branch (or rebase it) and push.\n\n", p.branch, p.branch, p.branch)
		for _, c := range p.conflicts {
			d.F("- %s\n", c)
		}
	}
	var problems []planRow
	for _, r := range p.rows {
		if r.action == "invalid" || r.action == "error" {
			problems = append(problems, r)
		}
	}
	if len(problems) > 0 {
		d.Add("\n#### Problems\n")
		for _, r := range problems {
			d.F("\n%s:\n%s", r.id, mdtext.Block(clip(r.note, 40, 4000)))
		}
	}
	if len(p.warnings) > 0 {
		d.Add("\n#### Warnings\n\n")
		for _, w := range p.warnings {
			d.F("- %s: %s\n", w.Pos, w.Msg)
		}
	}
	d.F("\n<sub>stands-reconciler previews never create stacks or servers; this comment is updated when the pull request's head moves, "+
		"or when %s moves in a way that changes this plan.</sub>\n", p.branch)
	return d.Markup()
}

// clip keeps a note to its first lines and bytes: a pull request decides how long its problems are.
func clip(s string, lines, size int) string {
	all := strings.Split(s, "\n")
	out := strings.Join(all[:min(len(all), lines)], "\n")
	if len(out) > size {
		out = out[:size]
	}
	if out != s {
		out += "\n… (cut: stands-reconciler validate lists every problem)"
	}
	return out
}

func actionText(a string) mdtext.Markup {
	return map[string]mdtext.Markup{"create": "➕ create", "update": "🔄 update", "destroy": "🗑️ destroy", "blocked": "⛔ refused",
		"invalid": "❌ invalid", "error": "❌ preview failed"}[a]
}

func stepText(s stands.Step) mdtext.Markup {
	switch s.Kind {
	case "":
	case "instance":
		t := mdtext.F("%s instance %s on %s", opText(s.Op), s.Instance, s.Node)
		switch {
		case s.Op == "update" && s.MayChange:
			t += " (may restart it: a secret's value decides, and plans never read secrets)"
		case s.Op == "update" && s.ConfigUnknown:
			t += " (may restart it: its configuration depends on servers not made yet)"
		case s.Op == "update" && strings.Contains(s.Changed, "configHash"):
			t += " (restarts it)"
		}
		return t
	default:
		t := mdtext.F("%s %s of %s", opText(s.Op), s.Kind, s.Node)
		if s.MayChange {
			t += " (may change: a secret's value decides)"
		}
		return t
	}
	switch s.Op {
	case "create":
		return mdtext.F("create %s (%s, %s)", s.ServerName, s.ServerType, s.Location)
	case "delete":
		return mdtext.F("delete %s (%s, %s)", s.ServerName, s.OldServerType, s.OldLocation)
	case "replace":
		return mdtext.F("replace %s (%s → %s, %s)", s.ServerName, s.OldServerType, s.ServerType, s.Location)
	case "update":
		if s.OldServerType != "" && s.OldServerType != s.ServerType {
			return mdtext.F("resize %s in place (%s → %s, %s; stopped for the change, disk and addresses kept)", s.ServerName, s.OldServerType, s.ServerType, s.Location)
		}
	}
	return mdtext.F("%s %s", opText(s.Op), s.ServerName)
}

// opText is a step's operation as a word: the engine's operations are a closed set, and any other
// value is shown inert.
func opText(op string) mdtext.Markup {
	switch op {
	case "create":
		return "create"
	case "update":
		return "update"
	case "delete":
		return "delete"
	case "replace":
		return "replace"
	}
	return mdtext.Code(op)
}
