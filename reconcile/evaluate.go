package reconcile

import (
	"context"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// evaluate judges a snapshot of the tracked branch. A stand judged less than SecretRefresh ago none
// of whose files a new commit changed is kept as judged (judge.Options.Previous): a commit touching
// one stand reads the secrets and renders the templates of that stand alone, whatever the number
// of stands. While the branch has no commit but the reconciler's own status commits, the whole
// judgement is kept. After SecretRefresh every stand is judged again (its secrets read again), and
// a stand an operator retries at once (Retry). A stand whose secret store did not answer is never
// kept, nor is a judgement that met one kept whole.
func (r *Reconciler) evaluate(ctx context.Context, snap *stands.Snapshot) (*judge.Evaluation, error) {
	now := r.cfg.Now()
	policy := r.gate.policy(ctx, snap.Files, snap.Source) // the one in force under the review gate
	var print string
	if policy != nil {
		print = policy.Print()
	}
	forget := r.takeForgotten()
	c := r.lastEval
	if c != nil && c.whole && c.source == snap.Source && c.policy == print && len(forget) == 0 && now.Sub(c.ev.Oldest()) < r.cfg.SecretRefresh {
		return c.ev, nil
	}
	o := judge.Options{Owner: r.cfg.Owner, Passphrase: r.cfg.Passphrase, Secrets: judge.Once(r.sec), Now: now, Policy: policy,
		KeepFor: r.cfg.SecretRefresh, Forget: func(id string) bool { return forget[id] }}
	if c != nil && r.cfg.SecretRefresh > 0 {
		o.Previous = c.ev
	}
	ev, err := judge.Evaluate(ctx, snap.Files, o)
	if err != nil {
		r.lastEval = nil
		return nil, err
	}
	r.log.Debug("stands judged", "commit", mdtext.Short(snap.Commit), "stands", len(ev.Verdicts), "judged_anew", len(ev.Judged))
	r.lastEval = &keptEvaluation{source: snap.Source, policy: print, whole: ev.SecretsErr == nil, ev: ev}
	return ev, nil
}

// keptEvaluation is the last judgement of the tracked branch (evaluate).
type keptEvaluation struct {
	source string // Snapshot.Source
	policy string // the lifetime policy in force it was judged under (manifest.Policy.Print)
	whole  bool   // the secret store answered: the judgement may be kept whole
	ev     *judge.Evaluation
}

// forgetJudgement has the next judgement judge a stand again, whatever its files (Retry).
func (r *Reconciler) forgetJudgement(id string) {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	if r.forgotten == nil {
		r.forgotten = map[string]bool{}
	}
	r.forgotten[id] = true
}

func (r *Reconciler) takeForgotten() map[string]bool {
	r.fmu.Lock()
	defer r.fmu.Unlock()
	out := r.forgotten
	r.forgotten = nil
	return out
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
