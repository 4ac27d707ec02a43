package reconcile

import (
	"context"
	"time"

	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// evaluate judges a snapshot of the tracked branch. The judgement of the last one is kept for
// SecretRefresh while the branch has no commit but the reconciler's own status commits (which touch
// status files only): a no-op cycle then reads no secret and renders no template, whatever the
// number of stands. A judgement that met an unavailable secret store is never kept.
func (r *Reconciler) evaluate(ctx context.Context, snap *stands.Snapshot) (*judge.Evaluation, error) {
	now := r.cfg.Now()
	policy := r.gate.policy(ctx, snap.Files, snap.Source) // the one in force under the review gate
	var print string
	if policy != nil {
		print = policy.Print()
	}
	if c := r.lastEval; c != nil && c.source == snap.Source && c.policy == print && now.Sub(c.at) < r.cfg.SecretRefresh {
		return c.ev, nil
	}
	ev, err := judge.Evaluate(ctx, snap.Files, judge.Options{Owner: r.cfg.Owner, Passphrase: r.cfg.Passphrase, Secrets: judge.Once(r.sec), Now: r.cfg.Now(), Policy: policy})
	if err == nil && ev.SecretsErr == nil {
		r.lastEval = &keptEvaluation{source: snap.Source, policy: print, at: now, ev: ev}
	} else {
		r.lastEval = nil
	}
	return ev, err
}

// keptEvaluation is the last judgement of the tracked branch (evaluate).
type keptEvaluation struct {
	source string // Snapshot.Source
	policy string // the lifetime policy in force it was judged under (manifest.Policy.Print)
	at     time.Time
	ev     *judge.Evaluation
}

// outcomeOf is what the evaluation says about a stand before any diff: declared, or why it cannot
// go on.
func outcomeOf(v judge.Verdict, commit string) outcome {
	switch {
	case v.Input != nil:
		return outcome{kind: outDeclared, file: v.File}
	case v.Reason == reason.Invalid:
		return outcome{kind: outInvalid, detail: v.Problem, commit: commit, file: v.File}
	case v.Reason == reason.VaultUnavailable:
		return outcome{kind: outHeld, file: v.File}
	}
	return outcome{kind: outBlocked, reason: v.Reason, detail: v.Problem, file: v.File}
}
