package reconcile

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/stands-engine/stands-reconciler/diff"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/internal/statefile"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Apply only what was reviewed (docs/pr-workflow.md#apply-only-what-was-reviewed). With
// Config.RequireReview, each create, update and destroy a commit of the tracked branch asks for is a
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

// reviewState is what the gate keeps across restarts (Config.ReviewState).
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

// review gates the changes among actions and returns why each one held is not reviewed, by stand.
func (r *Reconciler) review(ctx context.Context, actions []diff.Action, d *desiredState, found map[string]stands.StackInfo, commit string) map[string]string {
	if !r.cfg.RequireReview {
		return nil
	}
	r.revMu.Lock()
	defer r.revMu.Unlock()
	r.loadReviews()
	held := map[string]string{}
	changed, first := false, false
	if r.revState.Baseline == "" {
		// The gate's first run: its commit is the baseline, whatever it holds. Only when no stack
		// exists is it a first import; a stand pushed into an empty repository later is a change.
		first, changed = len(found) == 0, true
		r.revState.Baseline = commit
		if first {
			r.log.Warn("first import: the stands of this commit are taken as reviewed; every later change needs a reviewed pull request",
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
			p, err := judge.Print(in, r.cfg.Passphrase)
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
			r.approveLocked(a.ID, print, "the first import at "+mdtext.Short(commit))
			continue
		}
		if r.approvedLocked(a.ID, print) {
			continue
		}
		if r.cfg.Reviews == nil {
			held[a.ID] = "no pull request plans review it (--previews=false)"
			continue
		}
		rv, err := r.cfg.Reviews.Reviewed(ctx, a.ID, print)
		switch {
		case err != nil:
			held[a.ID] = "its reviews cannot be read now (" + err.Error() + "); tried again next cycle"
		case rv.Reviewed:
			r.approveLocked(a.ID, print, fmt.Sprintf("#%d, approved by %s", rv.PR, rv.By))
			changed = true
		default:
			held[a.ID] = rv.Why
		}
	}
	if changed {
		r.saveReviews()
	}
	return held
}

// Approve releases a stand's unreviewed change at commit: it is applied (or destroyed) as if a
// review had approved it. commit must be the one its status names.
func (r *Reconciler) Approve(id, commit, by string) error {
	r.mu.Lock()
	u, ok := r.unreviewed[id]
	r.mu.Unlock()
	switch {
	case !ok:
		return fmt.Errorf("%w %q with an unreviewed change", ErrUnknownStand, id)
	case commit != u.commit && mdtext.Short(commit) != mdtext.Short(u.commit):
		return fmt.Errorf("the unreviewed change of %s is at %s, not %s: look at it there", id, mdtext.Short(u.commit), commit)
	}
	r.revMu.Lock()
	r.loadReviews()
	r.approveLocked(id, u.print, by+" (ctl approve of "+mdtext.Short(u.commit)+")")
	r.saveReviews()
	r.revMu.Unlock()
	r.log.Warn("operator: approve", "stand", id, "commit", mdtext.Short(u.commit), "by", by)
	r.Trigger()
	return nil
}

func (r *Reconciler) approvedLocked(id, print string) bool {
	return slices.ContainsFunc(r.revState.Approved[id], func(a approval) bool { return a.Print == print })
}

func (r *Reconciler) approveLocked(id, print, by string) {
	if r.approvedLocked(id, print) {
		return
	}
	if r.revState.Approved == nil {
		r.revState.Approved = map[string][]approval{}
	}
	list := append(r.revState.Approved[id], approval{Print: print, By: by, At: r.cfg.Now().UTC()})
	r.revState.Approved[id] = list[max(0, len(list)-maxApproved):]
}

func (r *Reconciler) loadReviews() {
	if r.revLoaded {
		return
	}
	r.revLoaded = true
	if _, err := statefile.Read(r.cfg.ReviewState, &r.revState); err != nil {
		r.log.Warn("reviewed changes not read: every change needs its review again", "file", r.cfg.ReviewState, "err", err)
	}
}

func (r *Reconciler) saveReviews() {
	if err := statefile.Write(r.cfg.ReviewState, r.revState); err != nil {
		r.log.Warn("reviewed changes not saved", "file", r.cfg.ReviewState, "err", err)
	}
}

// holdUnreviewed records a change held for review. Called with r.mu held.
func (r *Reconciler) holdUnreviewed(a diff.Action, d *desiredState, why, commit string) {
	print := ""
	if in := d.inputs[a.ID]; in != nil && a.Kind != diff.Destroy {
		print = in.Print
	}
	u := r.unreviewed[a.ID]
	if u == nil || u.commit != commit || u.print != print {
		u = &unreviewed{commit: commit, print: print}
		if r.unreviewed == nil {
			r.unreviewed = map[string]*unreviewed{}
		}
		r.unreviewed[a.ID] = u
	}
	u.why = why
	would := map[diff.Kind]string{diff.Create: "create", diff.Update: "apply", diff.Destroy: "destroy"}[a.Kind]
	r.record(a.ID, outcome{kind: outBlocked, reason: reason.Unreviewed, detail: fmt.Sprintf(
		"not applied: the change at %s was not reviewed (%s); a reviewed pull request changing the stand, or "+
			"stands-reconciler ctl approve %s %s, lets the reconciler %s it", mdtext.Short(commit), why, a.ID, mdtext.Short(commit), would)})
}

// reportUnreviewed sets stands/<id> failure on the commit of each change newly held for review.
func (r *Reconciler) reportUnreviewed(ctx context.Context) {
	r.mu.Lock()
	var todo []string
	for id, u := range r.unreviewed {
		if !r.declaredIDs[id] && u.print != "" {
			delete(r.unreviewed, id) // the change is gone from the repository
			continue
		}
		if !u.statused {
			u.statused = true
			todo = append(todo, id)
		}
	}
	held := map[string]unreviewed{}
	for _, id := range todo {
		held[id] = *r.unreviewed[id]
	}
	r.mu.Unlock()
	for _, id := range slices.Sorted(maps.Keys(held)) {
		u := held[id]
		r.setCommitStatus(ctx, u.commit, "stands/"+id, stands.StateFailure, "not applied: unreviewed change ("+u.why+")", r.statusURL(id))
		r.log.Warn("change not applied: not reviewed", "stand", id, "commit", mdtext.Short(u.commit), "why", u.why)
	}
}
