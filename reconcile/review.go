package reconcile

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stands-engine/stands-reconciler/diff"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/internal/statefile"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Apply only what was reviewed (docs/pr-workflow.md#apply-only-what-was-reviewed). With
// Config.Review.Require, each create, update and destroy a commit of the tracked branch asks for is a
// transition of the stand (stands.Transition): from the print its stack records (judge.Print: its
// spec, secrets as placeholders: what a plan shows and a review approves; "" no stack) to the print
// the commit gives it ("" a removal). It starts only when that transition was authorised:
//   - the stack's recorded print is the same (only secret values or policy changed since the
//     apply a review let through),
//   - Config.Reviews finds a chain of merged pull requests leading there, each approved, each
//     merge on the commit's first-parent history, none used before (prplan.Planner.Reviewed),
//   - an operator released it (ctl approve STAND COMMIT),
//   - the first import: at the gate's first run no stack of the owner exists, so the stands of
//     that commit are how the repository starts (a stand pushed later is a change),
//   - or the lifetime policy merged the stand's removal (ApproveRemoval).
// Each authorisation lets its one transition through once: applying it uses it up, and whatever
// leads back to a print some review once approved (a revert, a reset, a stand made again) is a
// new transition. Anything else is Blocked, reason Unreviewed, with stands/<id> failure on the
// commit, until one of those holds. The reconciler's own commits change no stand.

// Reviews says whether a transition of a stand was reviewed on pull requests (prplan.Planner).
type Reviews interface {
	Reviewed(ctx context.Context, q stands.ReviewQuery) (stands.ChangeReview, error)
}

// ReviewStore keeps the review gate's state where every replica reads it (lease.Document, with
// replicas; a file otherwise): a document replaced whole, only over the version read, so no
// authorisation one replica used is made unused again by another's older copy.
type ReviewStore interface {
	// Load reads the document, nil when it is at the known version.
	Load(ctx context.Context, known int64) (body []byte, version int64, err error)
	// Save replaces the version read; ok is false when another wrote since.
	Save(ctx context.Context, body []byte, version int64) (next int64, ok bool, err error)
}

// History says whether commit is on the first-parent history of tip (gitsource.Source): a merge the
// tracked branch no longer holds authorises nothing. A Source without it holds every reviewed change.
type History interface {
	OnFirstParents(ctx context.Context, tip, commit string) (bool, error)
}

// reviewState is what the gate keeps across restarts (Config.Review.State).
type reviewState struct {
	// Baseline is the commit of the gate's first run ("" before it): a first import when no stack
	// existed then.
	Baseline string `json:"baseline,omitempty"`
	// Granted is, by stand, the transition last let through: its apply may be tried again (after a
	// failure) while the stack is where it started, and no longer once it moved.
	Granted map[string]grant `json:"granted,omitempty"`
	// Used are the pull requests' authorisations that let their transition through, by
	// stands.Authorisation.Key, with when: each is used once. Kept usedRetention.
	Used map[string]time.Time `json:"used,omitempty"`
	// Lifetime is the lifetime policy and the stands' own ends in force (review_lifetime.go).
	Lifetime *lifetimeState `json:"lifetime,omitempty"`
}

// grant is a transition let through, and what let it through.
type grant struct {
	stands.Transition
	// Any: from whatever the stack has (a removal the lifetime policy merged), until Until;
	// Pending while that merge is under way: its destroy waits, neither held nor applied.
	Any     bool       `json:"any,omitempty"`
	Pending bool       `json:"pending,omitempty"`
	Until   time.Time  `json:"until,omitzero"`
	Auth    Authorised `json:"auth"`
	// Keys are the pull requests' authorisations it rests on: used once the stack moves, kept for
	// another change when the repository asks for one before it does.
	Keys []string `json:"keys,omitempty"`
}

// Authorised is what let a stand's last change through the review gate, in its status
// (docs/pr-workflow.md#the-audit-trail): the reviewed pull requests, or the operator's release, or
// the first import or the lifetime policy, as By says.
type Authorised struct {
	By           string          `json:"by"`
	PullRequests []AuthorisedPR  `json:"pullRequests,omitempty"`
	Operator     *OperatorAction `json:"operator,omitempty"` // ctl approve: who, and why
	At           time.Time       `json:"at"`                 // when it was let through
}

// AuthorisedPR is one reviewed step of an authorised change.
type AuthorisedPR struct {
	Number    int64    `json:"number"`
	Approvers []string `json:"approvers"`
	Head      string   `json:"head"`  // planned and approved
	Merge     string   `json:"merge"` // its merge commit
}

// short is the STATUS.md cell of a: what let the stand's last change through.
func (a *Authorised) short() string {
	switch {
	case a == nil:
		return ""
	case a.Operator != nil:
		return fmt.Sprintf("ctl approve by %s: %s", a.Operator.By, cmp.Or(mdtext.FirstLine(a.Operator.Reason), "no reason given"))
	case len(a.PullRequests) > 0:
		var prs []string
		for _, pr := range a.PullRequests {
			prs = append(prs, fmt.Sprintf("#%d by %s", pr.Number, strings.Join(pr.Approvers, ", ")))
		}
		return strings.Join(prs, "; ")
	}
	return a.By
}

// usedRetention outlasts the pull requests' planned changes (prplan.ReviewRetention, 30 days): an
// authorisation forgotten here is one no plan can offer again.
const usedRetention = 45 * 24 * time.Hour

// unreviewed is a change held for review: what ctl approve releases.
type unreviewed struct {
	commit, from, print, why string
	file                     string // the stand.yml asking for it ("" for a removal)
	statused                 bool   // stands/<id> says so on commit
}

// gate is the review gate: which transitions were let through and which authorisations used (kept
// in Config.Review.Store across restarts, shared by the replicas) and which changes are held. With
// replicas, each gates the stands it holds (mine) and only the leader the lifetime policy; every
// change of the state is made over the latest one (update). Two locks of its own: mu over the
// state, held across the question to the forge (Reviews) and the store, so taken with no other lock
// held and taking none; heldMu over the changes held, a leaf taken under the loop's lock (decide) or
// alone.
type gate struct {
	required   bool
	reviews    Reviews
	history    History
	store      ReviewStore
	passphrase string
	now        func() time.Time
	log        *slog.Logger
	mine       func(id string) bool // a stand this replica operates
	leader     func() bool

	mu      sync.Mutex
	loaded  bool
	version int64 // of the state loaded
	state   reviewState
	// inForce and lastEnds are the lifetime policy and the ends judged last: what stays in force
	// while the state cannot be kept.
	inForce  manifest.Policy
	lastEnds map[string]endHeld

	heldMu   leafMutex
	held     map[string]*unreviewed // by stand
	heldEnds map[string]*unreviewed // lifetime changes, by stand or manifest.LifetimeFile
}

func newGate(cfg Config, src Source, c *claims) *gate {
	h, _ := src.(History)
	if cfg.Review.Require && h == nil {
		cfg.Log.Error("the repository's history cannot be read: every reviewed change is held until ctl approve")
	}
	store := cfg.Review.Store
	if store == nil {
		store = statefile.NewDoc(cfg.Review.State)
	}
	return &gate{required: cfg.Review.Require, reviews: cfg.Review.Reviews, history: h, store: store, passphrase: cfg.Passphrase,
		now: cfg.Now, log: cfg.Log, mine: c.holds, leader: c.leader, held: map[string]*unreviewed{}, heldEnds: map[string]*unreviewed{}}
}

// applied is the print stand id's stack records: "" without a stack, stands.Unrecorded where the
// stack records none.
func applied(found map[string]stands.StackInfo, id string) string {
	s, ok := found[id]
	switch {
	case !ok:
		return ""
	case s.Print == "":
		return stands.Unrecorded
	}
	return s.Print
}

// review gates the changes among actions of the stands this replica operates, and returns why each
// one held is not reviewed, by stand. Those it let through are in d.gated: decide starts no other.
// When the gate's state cannot be read or kept, every change waits for the next cycle.
func (g *gate) review(ctx context.Context, actions []diff.Action, d *desiredState, found map[string]stands.StackInfo, commit string) map[string]string {
	if !g.required {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	var v reviewed
	err := g.update(ctx, func() bool {
		v = g.reviewLocked(ctx, actions, d, found, commit)
		return v.changed
	})
	if err != nil {
		g.log.Warn("the review gate's state cannot be kept: no change is applied this cycle", "err", err)
		for _, a := range actions {
			if gatedKind(a) {
				d.waiting[a.ID] = true
			}
		}
		return nil
	}
	maps.Copy(d.authorised, v.authorised)
	maps.Copy(d.waiting, v.waiting)
	d.gated = v.gated
	return v.held
}

// reviewed is what one pass of the gate over a cycle's actions found.
type reviewed struct {
	held       map[string]string
	gated      map[string]bool // the stands whose change the pass judged, held or not
	authorised map[string]*Authorised
	waiting    map[string]bool
	changed    bool // the state changed
}

// reviewLocked is review over the state as loaded, with g.mu held.
func (g *gate) reviewLocked(ctx context.Context, actions []diff.Action, d *desiredState, found map[string]stands.StackInfo, commit string) reviewed {
	v := reviewed{held: map[string]string{}, gated: map[string]bool{}, authorised: map[string]*Authorised{}, waiting: map[string]bool{}}
	v.changed = g.settle(found, d)
	if g.state.Baseline == "" {
		// The gate's first run: its commit is the baseline, whatever it holds. Only when no stack
		// exists is it a first import, of every stand the commit declares (replicas included); a
		// stand pushed into an empty repository later is a change.
		v.changed = true
		g.state.Baseline = commit
		if len(found) == 0 {
			g.firstImport(d, commit)
		}
	}
	for _, a := range actions {
		if !gatedKind(a) || d.running[a.ID] || !g.mine(a.ID) {
			continue
		}
		v.gated[a.ID] = true
		t := stands.Transition{From: applied(found, a.ID)}
		if a.Kind != diff.Destroy {
			in := d.inputs[a.ID]
			if in == nil {
				continue
			}
			p, err := judge.Print(in, g.passphrase)
			if err != nil {
				v.held[a.ID] = "its print cannot be computed: " + err.Error()
				continue
			}
			in.Print, t.To = p, p
			if t.From == p {
				continue // what was applied was reviewed; only secret values or policy changed
			}
		}
		why, granted := g.authorise(ctx, a.ID, t, commit)
		switch {
		case why == awaitingMerge:
			v.waiting[a.ID] = true
			continue
		case why != "":
			v.held[a.ID] = why
			continue
		case granted:
			v.changed = true
		}
		if gr, ok := g.state.Granted[a.ID]; ok {
			auth := gr.Auth
			v.authorised[a.ID] = &auth
		}
	}
	return v
}

// gatedKind says whether a is a change the gate judges.
func gatedKind(a diff.Action) bool {
	return a.Kind == diff.Create || a.Kind == diff.Update || a.Kind == diff.Destroy
}

// firstImport lets through the creation of every stand commit declares: how the repository starts.
func (g *gate) firstImport(d *desiredState, commit string) {
	g.log.Warn("first import: the stands of this commit are taken as reviewed; every later change needs a reviewed pull request",
		"commit", mdtext.Short(commit))
	for _, id := range slices.Sorted(maps.Keys(d.inputs)) {
		if p, err := judge.Print(d.inputs[id], g.passphrase); err == nil {
			g.grantLocked(id, grant{Transition: stands.Transition{To: p}, Auth: Authorised{By: "the first import at " + mdtext.Short(commit)}})
		}
	}
}

// authorise says why stand id's transition t at commit is held ("" when it goes on), and whether it
// was newly let through.
func (g *gate) authorise(ctx context.Context, id string, t stands.Transition, commit string) (string, bool) {
	if gr, ok := g.state.Granted[id]; ok && gr.To == t.To && (gr.Any || gr.From == t.From) {
		if gr.Pending {
			return awaitingMerge, false
		}
		return "", false // let through before, and not applied yet
	}
	if g.reviews == nil {
		return "no pull request plans review it (--previews=false)", false
	}
	rv, err := g.reviews.Reviewed(ctx, g.query(id, t, commit))
	switch {
	case err != nil:
		return "its reviews cannot be read now (" + err.Error() + "); tried again next cycle", false
	case !rv.Reviewed:
		if t.From == stands.Unrecorded {
			rv.Why += "; its stack records no print (applied before prints were recorded), so only ctl approve lets it through"
		}
		return rv.Why, false
	}
	auth, keys := authorisedBy(rv.Steps)
	g.grantLocked(id, grant{Transition: t, Auth: auth, Keys: keys})
	return "", true
}

// query asks whether subject's transition t at commit was reviewed, with the authorisations used.
func (g *gate) query(subject string, t stands.Transition, commit string) stands.ReviewQuery {
	return stands.ReviewQuery{Stand: subject, Transition: t, Used: func(key string) bool { _, ok := g.state.Used[key]; return ok },
		OnBranch: func(ctx context.Context, merge string) (bool, error) {
			if g.history == nil {
				return false, nil
			}
			return g.history.OnFirstParents(ctx, commit, merge)
		}}
}

// authorisedBy is what the reviewed steps authorise, for the audit trail, and their keys.
func authorisedBy(steps []stands.Authorisation) (Authorised, []string) {
	var by, keys []string
	var prs []AuthorisedPR
	for _, s := range steps {
		keys = append(keys, s.Key())
		by = append(by, fmt.Sprintf("#%d, approved by %s, merged at %s", s.PR, s.By, mdtext.Short(s.Merge)))
		prs = append(prs, AuthorisedPR{Number: s.PR, Approvers: strings.Split(s.By, ", "), Head: s.Head, Merge: s.Merge})
	}
	return Authorised{By: strings.Join(by, "; "), PullRequests: prs}, keys
}

// settle ends the transitions let through that will not go on. One whose stack moved from where it
// started (applied, or changed since) has used the approvals it rests on; one the repository no
// longer asks for (a grant waiting for its apply would else let the same content through again
// later) is forgotten, its approvals unused. It says whether anything changed.
func (g *gate) settle(found map[string]stands.StackInfo, d *desiredState) bool {
	changed := false
	for id, gr := range g.state.Granted {
		if !g.mine(id) {
			continue // its holder's to settle: another replica's view may be a cycle behind
		}
		from := applied(found, id)
		switch {
		case !gr.Until.IsZero() && g.now().After(gr.Until):
			// A removal merged under the policy is applied within a cycle or two; one that is
			// not (its merge failed unseen, a crash) lets no later removal through.
		case gr.Any && from != "", !gr.Any && gr.From == from && !g.askedNoMore(d, id, gr):
			continue
		case gr.Any || gr.From != from:
			for _, k := range gr.Keys {
				g.useLocked(k)
			}
		}
		delete(g.state.Granted, id)
		changed = true
	}
	for key, at := range g.state.Used {
		if g.now().Sub(at) > usedRetention {
			delete(g.state.Used, key)
			changed = true
		}
	}
	return changed
}

// askedNoMore says whether the repository asks for something else of stand id than gr's change
// now. A running stand's, or one judged while the secret store or a file cannot be read, is not
// known: it is still asked for.
func (g *gate) askedNoMore(d *desiredState, id string, gr grant) bool {
	if d.running[id] || d.secretsErr != nil || len(d.unreadable) > 0 {
		return false
	}
	to, known := g.desired(d, id)
	return !known || to != gr.To
}

// desired is the print the repository gives stand id now, "" when it declares none; false when
// it cannot be known (the print fails).
func (g *gate) desired(d *desiredState, id string) (string, bool) {
	in := d.inputs[id]
	if in == nil {
		return "", true
	}
	p, err := judge.Print(in, g.passphrase)
	return p, err == nil
}

// awaitingMerge is authorise's answer for a removal whose merge under the policy is under way.
const awaitingMerge = "the lifetime policy's merge of its removal is under way"

// approveRemoval readies a stand's destroy for the merge of its removal under the policy, when
// changes must be reviewed at all: until confirmRemoval it waits.
func (g *gate) approveRemoval(id, by string) error {
	if !g.required {
		return nil
	}
	return g.grant(id, grant{Any: true, Pending: true, Until: g.now().Add(removalGrant), Auth: Authorised{By: by}})
}

// confirmRemoval lets the destroy approveRemoval readied through: its merge succeeded.
func (g *gate) confirmRemoval(id string) {
	g.change("confirm the removal of "+id, func() bool {
		gr, ok := g.state.Granted[id]
		if ok && gr.Any && gr.Pending {
			gr.Pending = false
			g.state.Granted[id] = gr
		}
		return ok && gr.Any
	})
}

// removalGrant is how long a removal the lifetime policy merged is let through: its merge's cycle
// comes within seconds, or at the next poll.
const removalGrant = 15 * time.Minute

// revokeRemoval takes back a removal's approval: its merge failed.
func (g *gate) revokeRemoval(id string) {
	g.change("take back the removal of "+id, func() bool {
		gr, ok := g.state.Granted[id]
		if ok && gr.Any {
			delete(g.state.Granted, id)
		}
		return ok && gr.Any
	})
}

// grant lets a stand's transition through and keeps it.
func (g *gate) grant(id string, gr grant) error {
	return g.change("let the change of "+id+" through", func() bool {
		g.grantLocked(id, gr)
		return true
	})
}

func (g *gate) grantLocked(id string, gr grant) {
	if g.state.Granted == nil {
		g.state.Granted = map[string]grant{}
	}
	gr.Auth.At = g.now().UTC()
	g.state.Granted[id] = gr
	g.log.Info("change let through the review gate", "stand", id, "by", gr.Auth.By)
}

func (g *gate) useLocked(key string) {
	if g.state.Used == nil {
		g.state.Used = map[string]time.Time{}
	}
	g.state.Used[key] = g.now().UTC()
}

// stateTimeout bounds a change of the gate's state that no cycle asked for (ctl approve, a removal's
// merge).
const stateTimeout = 30 * time.Second

// change runs fn as update does, outside a cycle, and logs what failed.
func (g *gate) change(what string, fn func() bool) error {
	ctx, cancel := context.WithTimeout(context.Background(), stateTimeout)
	defer cancel()
	g.mu.Lock()
	defer g.mu.Unlock()
	err := g.update(ctx, fn)
	if err != nil {
		g.log.Warn("the review gate's state cannot be kept", "to", what, "err", err)
	}
	return err
}

// updateTries bounds how often update starts again over a newer state: another replica's write
// between a read and a save is rare, so many in a row is a store in trouble.
const updateTries = 5

// update runs fn over the latest state and keeps it when fn says it changed: again, over the newer
// state, when another replica wrote first. With g.mu held.
func (g *gate) update(ctx context.Context, fn func() bool) error {
	for range updateTries {
		if err := g.refresh(ctx); err != nil {
			return err
		}
		if !fn() {
			return nil
		}
		body, err := json.Marshal(g.state)
		if err != nil {
			return fmt.Errorf("write the review gate's state: %w", err)
		}
		next, ok, err := g.store.Save(ctx, body, g.version)
		if ok && err == nil {
			g.version = next
			return nil
		}
		g.loaded = false // what fn changed is not kept: read again
		if err != nil {
			return fmt.Errorf("write the review gate's state: %w", err)
		}
	}
	return fmt.Errorf("write the review gate's state: %d tries each found another replica's write first", updateTries)
}

// refresh loads the state when another wrote it since it was loaded. A state that cannot be parsed
// is logged and started afresh: every change then needs its review again.
func (g *gate) refresh(ctx context.Context) error {
	known := g.version
	if !g.loaded {
		known = -1
	}
	body, version, err := g.store.Load(ctx, known)
	if err != nil {
		return fmt.Errorf("read the review gate's state: %w", err)
	}
	if g.loaded && body == nil && version == g.version {
		return nil
	}
	g.state, g.version, g.loaded = reviewState{}, version, true
	if body != nil {
		if err := json.Unmarshal(body, &g.state); err != nil {
			g.state = reviewState{}
			g.log.Warn("reviewed changes not read: every change needs its review again", "err", err)
		}
	}
	return nil
}

// hold records a change held for review and returns the stand's outcome.
func (g *gate) hold(a diff.Action, d *desiredState, from, why, commit string) outcome {
	print, file := "", ""
	if in := d.inputs[a.ID]; in != nil && a.Kind != diff.Destroy {
		print, file = in.Print, in.Stand.Path
	}
	g.heldMu.Lock()
	u := g.held[a.ID]
	if u == nil || u.commit != commit || u.print != print || u.from != from {
		u = &unreviewed{commit: commit, from: from, print: print, file: file}
		g.held[a.ID] = u
	}
	u.why = why
	g.heldMu.Unlock()
	would := map[diff.Kind]string{diff.Create: "create", diff.Update: "apply", diff.Destroy: "destroy"}[a.Kind]
	return outcome{kind: outBlocked, reason: reason.Unreviewed, file: file, detail: fmt.Sprintf(
		"not applied: the change at %s was not reviewed (%s); a reviewed pull request changing the stand, or "+
			"stands-reconciler ctl approve %s %s REASON, lets the reconciler %s it", mdtext.Short(commit), why, a.ID, mdtext.Short(commit), would)}
}

// release forgets a stand's held change: it is reviewed now, or no longer asked for.
func (g *gate) release(id string) {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	delete(g.held, id)
}

// heldChange is a stand's change held for review.
func (g *gate) heldChange(id string) (unreviewed, bool) {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	u, ok := g.held[id]
	if !ok {
		return unreviewed{}, false
	}
	return *u, true
}

// gating says whether changes are applied only once reviewed.
func (g *gate) gating() bool { return g.required }

// pending counts the changes held.
func (g *gate) pending() int {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	return len(g.held) + len(g.heldEnds)
}

// toReport are the changes held and not yet reported on their commit, each marked reported; those of
// stands the repository no longer declares (declared says) are forgotten.
func (g *gate) toReport(declared func(string) bool) map[string]unreviewed {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	out := map[string]unreviewed{}
	for id, u := range g.held {
		if !declared(id) && u.print != "" {
			delete(g.held, id) // the change is gone from the repository
			continue
		}
		if !u.statused {
			u.statused = true
			out[id] = *u
		}
	}
	return out
}

// Approve releases a stand's unreviewed change at commit, and its unreviewed end there: it is
// applied (or destroyed, or put in force) as if a review had approved it. commit must be the one
// its status names. id manifest.LifetimeFile releases a change of the lifetime policy.
func (r *Reconciler) Approve(id, commit, by, why string) error {
	u, ok := r.gate.heldChange(id)
	end, endOK := r.gate.heldEnd(id)
	at := func(u unreviewed) bool { return commit == u.commit || mdtext.Short(commit) == mdtext.Short(u.commit) }
	switch {
	case !ok && !endOK:
		return cmp.Or(r.elsewhere(id), fmt.Errorf("%w %q with an unreviewed change", ErrUnknownStand, id))
	case !(ok && at(u)) && !(endOK && at(end)):
		held := cmp.Or(u.commit, end.commit)
		return fmt.Errorf("the unreviewed change of %s is at %s, not %s: look at it there", id, mdtext.Short(held), commit)
	}
	auth := func(u unreviewed) Authorised {
		return Authorised{By: by + " (ctl approve of " + mdtext.Short(u.commit) + ")",
			Operator: &OperatorAction{Action: "approve", By: by, At: r.cfg.Now().UTC(), Reason: why}}
	}
	if ok && at(u) {
		if err := r.gate.grant(id, grant{Transition: stands.Transition{From: u.from, To: u.print}, Auth: auth(u)}); err != nil {
			return err
		}
		r.log.Warn("operator: approve", "stand", id, "commit", mdtext.Short(u.commit), "by", by, "reason", why)
	}
	if endOK && at(end) {
		if err := r.gate.approveEnd(id, end, auth(end)); err != nil {
			return err
		}
		r.log.Warn("operator: approve", "lifetime_of", id, "commit", mdtext.Short(end.commit), "asks", end.print, "by", by, "reason", why)
	}
	r.Trigger()
	return nil
}

// reportUnreviewed sets stands/<id> failure on the commit of each change newly held for review.
func (r *Reconciler) reportUnreviewed(ctx context.Context) {
	r.mu.Lock()
	declared := maps.Clone(r.declaredIDs)
	r.mu.Unlock()
	held := r.gate.toReport(func(id string) bool { return declared[id] })
	for _, id := range slices.Sorted(maps.Keys(held)) {
		u := held[id]
		r.setCommitStatus(ctx, u.commit, "stands/"+id, stands.StateFailure, "not applied: unreviewed change ("+u.why+")", r.statusURL(id))
		r.log.Warn("change not applied: not reviewed", "stand", id, "commit", mdtext.Short(u.commit), "why", u.why)
	}
	r.reportUnreviewedEnds(ctx)
}

// ApproveRemoval readies the destroy of a stand for the review gate: the reconciler is merging its
// removal pull request at its end, as the repository's lifetime policy allows (by says so). The
// destroy waits, neither held nor applied, until ConfirmRemoval or RevokeRemoval.
func (r *Reconciler) ApproveRemoval(id, by string) error {
	return r.gate.approveRemoval(id, by)
}

// ConfirmRemoval lets the destroy ApproveRemoval readied through: the merge succeeded.
func (r *Reconciler) ConfirmRemoval(id string) {
	r.gate.confirmRemoval(id)
	r.Trigger()
}

// RevokeRemoval takes back ApproveRemoval: the removal pull request could not be merged after all.
func (r *Reconciler) RevokeRemoval(id string) {
	r.gate.revokeRemoval(id)
	r.log.Warn("the removal merged under the lifetime policy failed; its destroy is no longer approved", "stand", id)
}
