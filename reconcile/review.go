package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"time"

	"github.com/stands-engine/stands-reconciler/diff"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/internal/statefile"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Apply only what was reviewed (docs/pr-workflow.md#apply-only-what-was-reviewed). With
// Config.Review.Require, each create, update and destroy a commit of the tracked branch asks for is a
// change of the stand's print (judge.Print: its spec, secrets as placeholders: what a plan shows and
// a review approves; "" for a removal), and it starts only when that change was reviewed:
//   - the stack's recorded print is the same (only secret values or policy changed since the
//     apply a review let through),
//   - the first import: at the gate's first run no stack of the owner exists, so the stands of
//     that commit are how the repository starts (a stand pushed later into an empty repository
//     is a change),
//   - an operator released it (ctl approve STAND COMMIT), or it was let through before,
//   - or Config.Reviews finds a pull request whose successful plan showed it, approved there
//     (prplan.Planner.Reviewed).
// Anything else is Blocked, reason Unreviewed, with stands/<id> failure on the commit, until one of
// those holds. The reconciler's own commits change no stand; a revert is a change like any other.

// Reviews says whether a change of a stand was reviewed on a pull request (prplan.Planner).
type Reviews interface {
	Reviewed(ctx context.Context, id, print string) (stands.ChangeReview, error)
}

// reviewState is what the gate keeps across restarts (Config.Review.State).
type reviewState struct {
	// Baseline is the commit of the gate's first run ("" before it): a first import when no stack
	// existed then.
	Baseline string `json:"baseline,omitempty"`
	// Approved holds, by stand, the prints let through: by a review, an operator or the first
	// import. The last maxApproved are kept.
	Approved map[string][]approval `json:"approved,omitempty"`
}

type approval struct {
	Print string    `json:"print"`
	By    string    `json:"by"`
	At    time.Time `json:"at"`
}

const maxApproved = 5

// unreviewed is a change held for review: what ctl approve releases.
type unreviewed struct {
	commit, print, why string
	statused           bool // stands/<id> says so on commit
}

// gate is the review gate: which changes were let through (kept in Config.Review.State across
// restarts) and which are held. Two locks of its own: mu over what was let through, held across the
// question to the forge (Reviews) and the state file, so taken with no other lock held and taking
// none; heldMu over the changes held, a leaf taken under the loop's lock (decide) or alone.
type gate struct {
	required   bool
	reviews    Reviews
	file       string
	passphrase string
	now        func() time.Time
	log        *slog.Logger

	mu     sync.Mutex
	loaded bool
	state  reviewState

	heldMu leafMutex
	held   map[string]*unreviewed // by stand
}

func newGate(cfg Config) *gate {
	return &gate{required: cfg.Review.Require, reviews: cfg.Review.Reviews, file: cfg.Review.State, passphrase: cfg.Passphrase, now: cfg.Now,
		log: cfg.Log, held: map[string]*unreviewed{}}
}

// review gates the changes among actions and returns why each one held is not reviewed, by stand.
func (g *gate) review(ctx context.Context, actions []diff.Action, d *desiredState, found map[string]stands.StackInfo, commit string) map[string]string {
	if !g.required {
		return nil
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.load()
	held := map[string]string{}
	changed, first := false, false
	if g.state.Baseline == "" {
		// The gate's first run: its commit is the baseline, whatever it holds. Only when no stack
		// exists is it a first import; a stand pushed into an empty repository later is a change.
		first, changed = len(found) == 0, true
		g.state.Baseline = commit
		if first {
			g.log.Warn("first import: the stands of this commit are taken as reviewed; every later change needs a reviewed pull request",
				"commit", mdtext.Short(commit))
		}
	}
	for _, a := range actions {
		if a.Kind != diff.Create && a.Kind != diff.Update && a.Kind != diff.Destroy || d.running[a.ID] {
			continue
		}
		print := ""
		if a.Kind != diff.Destroy {
			in := d.inputs[a.ID]
			if in == nil {
				continue
			}
			p, err := judge.Print(in, g.passphrase)
			if err != nil {
				held[a.ID] = "its print cannot be computed: " + err.Error()
				continue
			}
			in.Print, print = p, p
			if found[a.ID].Print == p {
				continue // what was applied was reviewed; only secret values or policy changed
			}
		}
		if first {
			g.approveLocked(a.ID, print, "the first import at "+mdtext.Short(commit))
			continue
		}
		if g.approvedLocked(a.ID, print) {
			continue
		}
		if g.reviews == nil {
			held[a.ID] = "no pull request plans review it (--previews=false)"
			continue
		}
		rv, err := g.reviews.Reviewed(ctx, a.ID, print)
		switch {
		case err != nil:
			held[a.ID] = "its reviews cannot be read now (" + err.Error() + "); tried again next cycle"
		case rv.Reviewed:
			g.approveLocked(a.ID, print, fmt.Sprintf("#%d, approved by %s", rv.PR, rv.By))
			changed = true
		default:
			held[a.ID] = rv.Why
		}
	}
	if changed {
		g.save()
	}
	return held
}

// approveRemoval lets a stand's destroy through, when changes must be reviewed at all.
func (g *gate) approveRemoval(id, by string) {
	if g.required {
		g.approve(id, "", by)
	}
}

// approve lets a stand's change to print through and keeps it.
func (g *gate) approve(id, print, by string) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.load()
	g.approveLocked(id, print, by)
	g.save()
}

func (g *gate) approvedLocked(id, print string) bool {
	return slices.ContainsFunc(g.state.Approved[id], func(a approval) bool { return a.Print == print })
}

func (g *gate) approveLocked(id, print, by string) {
	if g.approvedLocked(id, print) {
		return
	}
	if g.state.Approved == nil {
		g.state.Approved = map[string][]approval{}
	}
	list := append(g.state.Approved[id], approval{Print: print, By: by, At: g.now().UTC()})
	g.state.Approved[id] = list[max(0, len(list)-maxApproved):]
}

func (g *gate) load() {
	if g.loaded {
		return
	}
	g.loaded = true
	if _, err := statefile.Read(g.file, &g.state); err != nil {
		g.log.Warn("reviewed changes not read: every change needs its review again", "file", g.file, "err", err)
	}
}

func (g *gate) save() {
	if err := statefile.Write(g.file, g.state); err != nil {
		g.log.Warn("reviewed changes not saved", "file", g.file, "err", err)
	}
}

// hold records a change held for review and returns the stand's outcome.
func (g *gate) hold(a diff.Action, d *desiredState, why, commit string) outcome {
	print := ""
	if in := d.inputs[a.ID]; in != nil && a.Kind != diff.Destroy {
		print = in.Print
	}
	g.heldMu.Lock()
	u := g.held[a.ID]
	if u == nil || u.commit != commit || u.print != print {
		u = &unreviewed{commit: commit, print: print}
		g.held[a.ID] = u
	}
	u.why = why
	g.heldMu.Unlock()
	would := map[diff.Kind]string{diff.Create: "create", diff.Update: "apply", diff.Destroy: "destroy"}[a.Kind]
	return outcome{kind: outBlocked, reason: reason.Unreviewed, detail: fmt.Sprintf(
		"not applied: the change at %s was not reviewed (%s); a reviewed pull request changing the stand, or "+
			"stands-reconciler ctl approve %s %s, lets the reconciler %s it", mdtext.Short(commit), why, a.ID, mdtext.Short(commit), would)}
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

// pending counts the changes held.
func (g *gate) pending() int {
	g.heldMu.Lock()
	defer g.heldMu.Unlock()
	return len(g.held)
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

// Approve releases a stand's unreviewed change at commit: it is applied (or destroyed) as if a
// review had approved it. commit must be the one its status names.
func (r *Reconciler) Approve(id, commit, by string) error {
	u, ok := r.gate.heldChange(id)
	switch {
	case !ok:
		return fmt.Errorf("%w %q with an unreviewed change", ErrUnknownStand, id)
	case commit != u.commit && mdtext.Short(commit) != mdtext.Short(u.commit):
		return fmt.Errorf("the unreviewed change of %s is at %s, not %s: look at it there", id, mdtext.Short(u.commit), commit)
	}
	r.gate.approve(id, u.print, by+" (ctl approve of "+mdtext.Short(u.commit)+")")
	r.log.Warn("operator: approve", "stand", id, "commit", mdtext.Short(u.commit), "by", by)
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
}

// ApproveRemoval lets the destroy of a stand through the review gate: its removal pull request was
// merged by the reconciler at its end, as the repository's lifetime policy allows (by says so).
func (r *Reconciler) ApproveRemoval(id, by string) {
	r.gate.approveRemoval(id, by)
}
