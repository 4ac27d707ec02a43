package prplan

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"

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

// previews plans every open pull request into the tracked branch whose head moved since its last
// plan. main is the tracked branch's evaluation: only the stands a pull request changes are planned.
func (pl *Planner) previews(ctx context.Context, main *judge.Evaluation, commit string, actual []diff.Actual) {
	pl.loadPlanned()
	prs, err := pl.forge.PullRequests(ctx, pl.cfg.Branch)
	if err != nil {
		pl.log.Warn("pull requests not planned", "err", err)
		return
	}
	open := map[int64]bool{}
	for _, pr := range prs {
		open[pr.Index] = true
		if ctx.Err() != nil || !pl.startPlan(ctx, pr) {
			continue
		}
		pl.planOne(ctx, pr, main, commit, actual)
	}
	forgot := false
	for idx := range pl.heads {
		if !open[idx] {
			delete(pl.heads, idx) // closed or merged: nothing kept
			forgot = true
		}
	}
	if forgot {
		pl.savePlanned()
	}
}

// planOne plans one pull request's head, or says why it gets no plan.
func (pl *Planner) planOne(ctx context.Context, pr stands.PullRequest, main *judge.Evaluation, commit string, actual []diff.Actual) {
	log := pl.log.With("pull_request", pr.Index, "head", mdtext.Short(pr.HeadSHA))
	why, err := pl.untrusted(ctx, pr)
	if err != nil {
		log.Warn("pull request not planned; retrying", "err", err)
		return
	}
	if why != "" {
		// Previews read production state and render the head's templates: only for code someone
		// with write access pushed.
		pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StateFailure, why, pr.URL)
		pl.finishPlan(pr.Index, pr.HeadSHA)
		pl.plans.WithLabelValues("untrusted").Inc()
		log.Info("pull request not planned", "why", why)
		return
	}
	pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StatePending, "planning", pr.URL)
	pctx, cancel := context.WithTimeout(ctx, pl.cfg.Timeout)
	plan, err := pl.planPR(pctx, pr, main, commit, actual)
	cancel()
	if err != nil && ctx.Err() == nil {
		pl.plans.WithLabelValues("error").Inc()
	}
	switch {
	case err != nil && ctx.Err() != nil:
		return // stopping: the try counts, the head is tried again after the restart
	case err != nil && errors.Is(pctx.Err(), context.DeadlineExceeded):
		pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StateFailure, fmt.Sprintf("not planned: planning took longer than %s", pl.cfg.Timeout), pr.URL)
		pl.finishPlan(pr.Index, pr.HeadSHA)
		log.Warn("pull request plan timed out", "timeout", pl.cfg.Timeout)
		return
	case errors.Is(err, errTooManySecrets):
		pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StateFailure, fmt.Sprintf("not planned: the commit names more than %d secrets", maxSecretNames), pr.URL)
		pl.finishPlan(pr.Index, pr.HeadSHA)
		log.Warn("pull request not planned", "err", err)
		return
	case errors.Is(err, stands.ErrTooLarge):
		pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StateFailure, fmt.Sprintf("not planned: the commit holds more files than the reconciler reads (%d MiB)", stands.MaxTreeSize>>20), pr.URL)
		pl.finishPlan(pr.Index, pr.HeadSHA)
		log.Warn("pull request not planned", "err", err)
		return
	case err != nil:
		// Tried again at the next cycle, up to maxPlanAttempts.
		log.Warn("pull request not planned; retrying", "err", err)
		// The error's text goes to the log only: a preview's may quote the pull request's content.
		pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StateError, "planning failed, will retry ("+string(reason.Of(err))+")", pr.URL)
		return
	}
	if err := pl.forge.UpsertComment(ctx, pr.Index, CommentMarker, plan.comment(pr)); err != nil {
		log.Warn("plan comment not written; retrying", "err", err)
		return
	}
	state := stands.StateSuccess
	if plan.failed {
		state = stands.StateFailure
	}
	pl.plans.WithLabelValues(string(state)).Inc()
	pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, state, plan.summary(), pr.URL)
	pl.finishPlan(pr.Index, pr.HeadSHA)
	log.Info("pull request planned", "stands", len(plan.rows), "failed", plan.failed)
}

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
	rows   []planRow
	cost   float64
	priced bool // every server of the plan had a known price
	cur    string
	failed bool
	// warnings of the head's manifests: they load, in a form that should change.
	warnings []manifest.Diagnostic
}

type planRow struct {
	id      string
	action  string // create, update, destroy, blocked, invalid, error
	steps   []stands.Step
	note    string // a reason or an error, scrubbed
	cost    float64
	counted bool
}

// planPR plans what merging the pull request would do. What it changes is where the diff of its head
// and the diff of the tracked branch, each against the backend's stacks, decide differently; only
// those stands are previewed.
func (pl *Planner) planPR(ctx context.Context, pr stands.PullRequest, main *judge.Evaluation, commit string, actual []diff.Actual) (*prPlan, error) {
	snap, err := pl.refs.FetchRef(ctx, pr.Ref())
	if err != nil {
		return nil, err
	}
	if pl.blindCommit != commit || pl.blind == nil {
		if pl.blind, err = pl.evaluateBlind(ctx, main.Files, nil); err != nil {
			return nil, err
		}
		pl.blindCommit = commit
	}
	blindMain := pl.blind
	head, err := pl.evaluateBlind(ctx, snap.Files, blindMain)
	if err != nil {
		return nil, err
	}
	if err := cmp.Or(head.SecretsErr, blindMain.SecretsErr, main.SecretsErr); err != nil {
		pl.blind = nil
		return nil, fmt.Errorf("secret store unavailable: %w", err)
	}
	head.sameAs(main, blindMain)
	prices, err := pl.prev.Prices(ctx)
	if err != nil {
		pl.log.Warn("plan without prices", "err", err)
	}
	plan := &prPlan{head: snap.Commit, priced: prices != nil, cur: "EUR", warnings: head.Warnings}
	for _, u := range head.Unreadable {
		plan.add(planRow{id: "?", action: "invalid", note: u})
	}
	before := map[string]diff.Action{}
	for _, a := range main.Decide(actual, pl.cfg.Guards, nil, "") {
		before[a.ID] = a
	}
	inputs := map[string]*stands.Input{}
	for _, v := range head.Verdicts {
		inputs[v.ID] = v.Input
	}
	declared := map[string]bool{}
	for _, v := range main.Verdicts {
		declared[v.ID] = true
	}
	for _, a := range head.Decide(actual, pl.cfg.Guards, nil, "") {
		if b, ok := before[a.ID]; ok && b == a {
			continue // merging it changes nothing for this stand
		}
		if _, inHead := inputs[a.ID]; !inHead && !declared[a.ID] && a.Kind == diff.Blocked {
			continue // a stack the tracked branch does not declare either: not this pull request's removal
		}
		if a.Reason == reason.SourceUnavailable {
			a.Detail = strings.Join(head.Unreadable, "; ")
		}
		row, err := pl.planRow(ctx, a, inputs[a.ID], prices, plan)
		if row.action == "update" {
			row.steps = blindSteps(row.steps, blindMain.prints[a.ID], head.prints[a.ID])
		}
		if err != nil {
			return nil, err
		}
		if row.action != "" {
			plan.add(row)
		}
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
	if len(p.rows) == 0 {
		return "no stand changes"
	}
	parts := []string{}
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
	d.F("### Stands plan for %s\n\n", mdtext.Short(p.head))
	if len(p.rows) == 0 {
		d.Add("This pull request changes no stand.\n")
	} else {
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
	d.Add("\n<sub>stands-reconciler previews never create stacks or servers; this comment is updated when the pull request's head moves.</sub>\n")
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
