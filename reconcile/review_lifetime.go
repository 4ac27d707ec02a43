package reconcile

import (
	"cmp"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Only reviewed ends take effect (docs/lifetime.md#only-reviewed-ends-take-effect). With the review
// gate on, the lifetime policy and each stand's own end (its stand.expires, or stand.protect: it
// never ends) are what the last authorised change made them, not whatever the tracked branch says: a
// policy or an end pushed around review would otherwise decide unreviewed when a stand ends, and
// under merge_at_expiry remove it. A change of either is a transition (from the one in force to the
// one asked; manifest.Policy.Print, manifest.EndPrint) authorised as a stand's spec change is: a
// chain of merged pull requests whose approved plans showed it, each approval used once, or ctl
// approve. Until then the one in force stays, and the change is reported: stands/lifetime failure
// on its commit, the stand's status (EndHeld), STATUS.md and the log. The gate's first judgement of
// lifetimes takes what the branch holds then, as its first run takes the stacks as they are.

// lifetimeState is the lifetime in force, kept with the gate's state.
type lifetimeState struct {
	Since    string          `json:"since"` // the commit whose policy was taken at the first judgement
	Policy   manifest.Policy `json:"policy"`
	PolicyBy *Authorised     `json:"policyBy,omitempty"`
	// Ends are the stands' own ends in force, by stand (none: "", the default applies). EndsTaken:
	// the branch's were taken, at the first judgement that could read every stand.
	Ends      map[string]endInForce `json:"ends,omitempty"`
	EndsTaken bool                  `json:"endsTaken,omitempty"`
	// Granted are the lifetime changes ctl approve released and not yet in force, by stand, or
	// manifest.LifetimeFile for the policy.
	Granted map[string]grant `json:"granted,omitempty"`
}

// endInForce is a stand's own end in force (manifest.EndPrint), where it was declared, and what put
// it in force.
type endInForce struct {
	Print string       `json:"print"`
	Pos   manifest.Pos `json:"pos"`
	By    *Authorised  `json:"by,omitempty"`
}

// endHeld is a stand's end while the branch asks for another that no review let through: the
// stand as the loop judges its lifetime, and what to tell of the change held.
type endHeld struct {
	stand *manifest.Stand
	why   string
}

// policy is the lifetime policy the tracked branch at commit is judged under: the branch's own
// without the gate (nil), else the one in force. With replicas the leader alone lets a change of it
// through or holds it; the others judge under the one in force.
func (g *gate) policy(ctx context.Context, files fs.FS, commit string) *manifest.Policy {
	if !g.required {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	asked := manifest.ReadPolicy(files)
	var p manifest.Policy
	err := g.update(ctx, func() (changed bool) {
		p, changed = g.policyLocked(ctx, asked, commit)
		return changed
	})
	if err != nil {
		g.log.Warn("the review gate's state cannot be kept: the lifetime policy last in force stays", "err", err)
		p = g.inForce
	}
	g.inForce = p
	return &p
}

// policyLocked is policy over the state as loaded, with g.mu held; changed says the state changed.
func (g *gate) policyLocked(ctx context.Context, asked manifest.Policy, commit string) (p manifest.Policy, changed bool) {
	ls := g.state.Lifetime
	if ls == nil {
		g.state.Lifetime = &lifetimeState{Since: commit, Policy: asked,
			PolicyBy: &Authorised{By: "the review gate's first judgement of lifetimes, at " + mdtext.Short(commit), At: g.now().UTC()}}
		g.log.Info("lifetime policy taken as in force: every later change of it, or of a stand's end, needs a reviewed pull request",
			"commit", mdtext.Short(commit), "policy", asked.Print())
		return asked, true
	}
	if !g.leader() {
		g.releaseEnd(manifest.LifetimeFile) // the leader holds it, and reports it
		return ls.Policy, false
	}
	from, to := ls.Policy.Print(), asked.Print()
	auth, why := g.authoriseEnd(ctx, manifest.LifetimeFile, stands.Transition{From: from, To: to}, commit)
	switch {
	case why != "":
		g.holdEnd(manifest.LifetimeFile, commit, from, to, why)
		return ls.Policy, false
	case auth != nil:
		ls.PolicyBy, changed = auth, true
		g.log.Info("lifetime policy change let through the review gate", "commit", mdtext.Short(commit), "policy", to, "by", auth.By)
	}
	g.releaseEnd(manifest.LifetimeFile)
	ls.Policy = asked // the same settings, perhaps written otherwise: lines in messages are the branch's
	return asked, changed
}

// ends checks the stands' own ends the evaluation at commit asks for against those in force, and
// returns the stands whose end in force is another. With replicas each lets through or holds the
// ends of the stands it operates, and judges the others' under the end in force.
func (g *gate) ends(ctx context.Context, ev *judge.Evaluation, commit string) map[string]endHeld {
	if !g.required {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var out map[string]endHeld
	err := g.update(ctx, func() (changed bool) {
		out, changed = g.endsLocked(ctx, ev, commit)
		return changed
	})
	if err != nil {
		g.log.Warn("the review gate's state cannot be kept: the stands' ends last in force stay", "err", err)
		return g.lastEnds
	}
	g.lastEnds = out
	return out
}

// endsLocked is ends over the state as loaded, with g.mu held; changed says the state changed.
func (g *gate) endsLocked(ctx context.Context, ev *judge.Evaluation, commit string) (out map[string]endHeld, changed bool) {
	ls := g.state.Lifetime
	if ls == nil {
		return nil, false // policy runs first; nil only without a gate
	}
	if ls.Ends == nil {
		ls.Ends = map[string]endInForce{}
	}
	complete := len(ev.Unreadable) == 0 && ev.SecretsErr == nil
	if !ls.EndsTaken {
		if !complete {
			return nil, false // taken once every stand can be read
		}
		for _, v := range ev.Verdicts {
			if v.Input != nil {
				if p := manifest.EndPrint(v.Input.Stand); p != "" {
					ls.Ends[v.ID] = endInForce{Print: p, Pos: v.Input.Stand.ExpiresPos}
				}
			}
		}
		ls.EndsTaken, changed = true, true
	}
	out = map[string]endHeld{}
	declared := map[string]bool{manifest.LifetimeFile: true}
	for _, v := range ev.Verdicts {
		declared[v.ID] = true
		if v.Input == nil {
			continue
		}
		s := v.Input.Stand
		in := ls.Ends[v.ID]
		asked := manifest.EndPrint(s)
		if !g.mine(v.ID) {
			g.releaseEnd(v.ID) // its holder holds it, and reports it
			if in.Print != asked {
				out[v.ID] = endHeld{stand: standWithEnd(s, in), why: "its holder judges the end it asks"}
			}
			continue
		}
		auth, why := g.authoriseEnd(ctx, v.ID, stands.Transition{From: in.Print, To: asked}, commit)
		if why == "" {
			g.releaseEnd(v.ID)
			if in.Print != asked || in.Pos != s.ExpiresPos || auth != nil {
				ls.Ends[v.ID] = endInForce{Print: asked, Pos: s.ExpiresPos, By: cmp.Or(auth, in.By)}
				changed = true
			}
			if ls.Ends[v.ID].Print == "" {
				delete(ls.Ends, v.ID)
			}
			continue
		}
		g.holdEnd(v.ID, commit, in.Print, asked, why)
		out[v.ID] = endHeld{stand: standWithEnd(s, in), why: fmt.Sprintf("the end it asks at %s (%s) is not in force: the change was not reviewed (%s); "+
			"a reviewed pull request, or stands-reconciler ctl approve %s %s REASON, puts it in force", mdtext.Short(commit), endText(asked), why, v.ID, mdtext.Short(commit))}
	}
	if complete && g.leader() {
		for id := range ls.Ends {
			if !declared[id] {
				delete(ls.Ends, id) // a stand made again starts with no end of its own
				changed = true
			}
		}
		g.forgetHeldEnds(declared)
	}
	return out, changed
}

// standWithEnd is s with the end in force.
func standWithEnd(s *manifest.Stand, in endInForce) *manifest.Stand {
	st, err := manifest.WithEnd(s, in.Print, in.Pos)
	if err != nil {
		return s // not one this gate wrote; the branch's end stands rather than none
	}
	return st
}

// endText is an end print as a status says it.
func endText(p string) string {
	switch p {
	case "":
		return "no end of its own"
	case manifest.EndProtected:
		return "protected: never"
	}
	return "stand.expires " + p
}

// authoriseEnd says what let the lifetime transition t of subject (a stand, or
// manifest.LifetimeFile) through (nil: nothing to let through), or why it is held. An authorisation
// of a pull request is used at once: an end takes effect when it is let through.
func (g *gate) authoriseEnd(ctx context.Context, subject string, t stands.Transition, commit string) (*Authorised, string) {
	ls := g.state.Lifetime
	gr, granted := ls.Granted[subject]
	if granted && (gr.To != t.To || gr.From != t.From) {
		delete(ls.Granted, subject) // released for a change the branch no longer asks for
		granted = false
	}
	switch {
	case t.From == t.To:
		return nil, ""
	case granted:
		delete(ls.Granted, subject)
		auth := gr.Auth
		return &auth, ""
	case g.reviews == nil:
		return nil, "no pull request plans review it (--previews=false)"
	}
	q := g.query(subject, t, commit)
	q.End = true
	rv, err := g.reviews.Reviewed(ctx, q)
	switch {
	case err != nil:
		return nil, "its reviews cannot be read now (" + err.Error() + "); tried again next cycle"
	case !rv.Reviewed:
		return nil, rv.Why
	}
	auth, keys := authorisedBy(rv.Steps)
	for _, k := range keys {
		g.useLocked(k)
	}
	auth.At = g.now().UTC()
	return &auth, ""
}

// holdEnd records a lifetime change held for review: subject is a stand, or manifest.LifetimeFile.
func (g *gate) holdEnd(subject, commit, from, to, why string) {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	u := g.heldEnds[subject]
	if u == nil || u.commit != commit || u.from != from || u.print != to {
		u = &unreviewed{commit: commit, from: from, print: to}
		g.heldEnds[subject] = u
	}
	u.why = why
}

func (g *gate) releaseEnd(subject string) {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	delete(g.heldEnds, subject)
}

// forgetHeldEnds forgets the held ends of stands the branch no longer declares.
func (g *gate) forgetHeldEnds(declared map[string]bool) {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	maps.DeleteFunc(g.heldEnds, func(id string, _ *unreviewed) bool { return !declared[id] })
}

// heldEnd is the lifetime change of subject held for review.
func (g *gate) heldEnd(subject string) (unreviewed, bool) {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	u, ok := g.heldEnds[subject]
	if !ok {
		return unreviewed{}, false
	}
	return *u, true
}

// endsToReport are the lifetime changes held and not yet reported on their commit, by commit, each
// marked reported.
func (g *gate) endsToReport() map[string][]string {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	out := map[string][]string{}
	for subject, u := range g.heldEnds {
		if !u.statused {
			u.statused = true
			out[u.commit] = append(out[u.commit], subject)
		}
	}
	return out
}

// approveEnd releases the lifetime change of subject held at commit.
func (g *gate) approveEnd(subject string, u unreviewed, auth Authorised) error {
	return g.change("put the end of "+subject+" in force", func() bool {
		ls := g.state.Lifetime
		if ls == nil {
			return false
		}
		if ls.Granted == nil {
			ls.Granted = map[string]grant{}
		}
		auth.At = g.now().UTC()
		ls.Granted[subject] = grant{Transition: stands.Transition{From: u.from, To: u.print}, Auth: auth}
		return true
	})
}

// lifetimeBanner is STATUS.md's note of a lifetime policy change held for review.
func (g *gate) lifetimeBanner() mdtext.Markup {
	u, ok := g.heldEnd(manifest.LifetimeFile)
	if !ok {
		return ""
	}
	return mdtext.F("> **Lifetime policy change not in force**: %s at %s was not reviewed (%s); the policy reviewed before stays in force "+
		"until a reviewed pull request, or %s, puts it in force (docs/lifetime.md#only-reviewed-ends-take-effect).\n",
		manifest.LifetimeFile, mdtext.Short(u.commit), u.why, "stands-reconciler ctl approve "+manifest.LifetimeFile+" "+mdtext.Short(u.commit)+" REASON")
}

// reportUnreviewedEnds sets stands/lifetime failure on the commit of each lifetime change newly
// held for review.
func (r *Reconciler) reportUnreviewedEnds(ctx context.Context) {
	held := r.gate.endsToReport()
	for _, commit := range slices.Sorted(maps.Keys(held)) {
		subjects := held[commit]
		slices.Sort(subjects)
		var names []string
		for _, s := range subjects {
			u, _ := r.gate.heldEnd(s)
			name := "the end of " + s
			if s == manifest.LifetimeFile {
				name = "the lifetime policy"
			}
			names = append(names, name)
			r.log.Warn("lifetime change not in force: not reviewed", "of", s, "commit", mdtext.Short(commit), "asks", u.print, "in_force", u.from, "why", u.why)
		}
		url := ""
		if r.cfg.Forge != nil {
			url = r.cfg.Forge.FileURL(r.cfg.StatusBranch, stands.StatusFile)
		}
		r.setCommitStatus(ctx, commit, LifetimeContext, stands.StateFailure, "not in force: unreviewed change of "+strings.Join(names, ", "), url)
	}
}

// LifetimeContext is the commit status of a commit whose lifetime changes are held for review.
const LifetimeContext = "stands/lifetime"
