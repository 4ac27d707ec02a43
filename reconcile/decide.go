package reconcile

import (
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/diff"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

type opKind string

const (
	opApply   opKind = "apply"
	opObserve opKind = "observe" // read a stand's outputs when its status is missing or stale; no pulumi up
	opDrift   opKind = "drift"
	opDestroy opKind = "destroy"
)

type op struct {
	kind   opKind
	id     string
	in     *stands.Input
	ref    stands.StackRef
	commit string
	repair bool            // an apply a heal asked for: forced, reading the instances back first
	auth   *Authorised     // what let its change through the review gate, when it gates
	yield  <-chan struct{} // replicas: closed while it waits for a worker when the stand is another's now
}

// decide turns the actions into outcomes and operations. Called with r.mu held.
func (r *Reconciler) decide(actions []diff.Action, d *desiredState, found map[string]stands.StackInfo, commit string) []op {
	now := r.cfg.Now()
	var ops []op
	for _, a := range actions {
		st := r.state(a.ID)
		if info, ok := found[a.ID]; ok {
			st.ref = stands.StackRef{Project: info.Project, Env: info.Env, StandID: info.StandID}
		} else if a.Kind != diff.Noop {
			st.ref = stands.StackRef{}
		}
		if st.running {
			continue
		}
		if !r.claims.holds(a.ID) {
			r.gate.release(a.ID) // another replica's stand: it decides and holds, and its status comes from its record
			continue
		}
		if d.waiting[a.ID] || r.gate.gating() && gatedKind(a) && !d.gated[a.ID] {
			continue // its removal's merge is under way, or the gate has not judged it: the next cycle decides
		}
		if why, held := d.unreviewed[a.ID]; held {
			r.record(a.ID, r.gate.hold(a, d, applied(found, a.ID), why, commit))
			continue
		}
		r.gate.release(a.ID)
		o, ok := r.decideOne(a, d, st, found[a.ID], now)
		if !ok {
			continue
		}
		if instead, held := r.sw.held(a, o.kind); held {
			if instead.kind == outBlocked {
				r.record(a.ID, instead)
			}
			continue
		}
		info := found[a.ID]
		o.id, o.commit, o.ref, o.auth = a.ID, commit, stands.StackRef{Project: info.Project, Env: info.Env, StandID: info.StandID}, d.authorised[a.ID]
		ops = append(ops, o)
	}
	if len(d.unreadable) == 0 {
		r.forgetGone(actions)
	}
	for i, o := range ops {
		r.stands[o.id].running = true
		ops[i].yield = r.claims.queue(o.id)
		if o.kind == opApply || o.kind == opDestroy {
			started := outcome{kind: outStarted, op: o.kind, commit: commit}
			if o.in != nil {
				started.spec, started.file = o.in.SpecHash, o.in.Stand.Path
			}
			r.record(o.id, started)
		}
	}
	return ops
}

// decideOne is one action's decision: an operation to start, or an outcome recorded now.
func (r *Reconciler) decideOne(a diff.Action, d *desiredState, st *stand, stack stands.StackInfo, now time.Time) (op, bool) {
	in := d.inputs[a.ID]
	switch a.Kind {
	case diff.Create, diff.Update:
		st.rt = st.rt.forSpec(in.SpecHash)
		if d.secretsErr != nil {
			// Nothing is applied while the secret store is down: the connection record could
			// not be kept, and other stands' specs are unknown.
			r.record(a.ID, outcome{kind: outHeld, spec: in.SpecHash})
			return op{}, false
		}
		return op{kind: opApply, in: in}, r.due(st, now)
	case diff.Destroy:
		st.rt = st.rt.forSpec("destroy")
		return op{kind: opDestroy}, r.due(st, now)
	case diff.Noop:
		switch a.Reason {
		case reason.SuspendedByRepo:
			r.record(a.ID, outcome{kind: outSuspended})
		case reason.UpToDate:
			if in != nil && in.Print == "" {
				in.Print = stack.Print // the same spec: a repair or re-apply keeps what was reviewed
			}
			if r.heals.repairAsked(a.ID) && r.due(st, now) {
				r.heals.takeRepair(a.ID)
				return op{kind: opApply, in: in, repair: true}, true
			}
			if kind := r.upToDate(st, in, stack, now); kind != "" {
				return op{kind: kind, in: in}, true
			}
		} // a foreign stack nobody declares: not ours to judge
	case diff.Blocked:
		detail := a.Detail
		switch a.Reason {
		case reason.Invalid:
			return op{}, false // judge recorded why already
		case reason.SourceUnavailable:
			detail = strings.Join(d.unreadable, "; ")
		case reason.VaultUnavailable:
			detail = "removed from the repository; not destroyed while the secret store is unavailable"
		}
		r.record(a.ID, outcome{kind: outBlocked, reason: a.Reason, detail: detail})
	}
	return op{}, false
}

// due reports whether a stand may be attempted now: not stalled, not backing off.
func (r *Reconciler) due(st *stand, now time.Time) bool {
	return st.rt.failures < r.cfg.StallAfter && !now.Before(st.rt.next)
}

// upToDate is what an applied stand needs: its outputs read when its status was not made from the
// stack's current state, a drift check when one is due, or nothing. Its status, read back from the
// status branch after a restart, names the state it was made from (StateDigest) and is only
// written once the connection record is stored: a restart reads no stand whose stack did not change.
func (r *Reconciler) upToDate(st *stand, in *stands.Input, stack stands.StackInfo, now time.Time) opKind {
	st.rt = st.rt.forSpec(in.SpecHash)
	if !r.due(st, now) {
		return ""
	}
	s := st.status
	switch {
	case s == nil || s.SpecHash != in.SpecHash || !s.Phase.Applied():
		return opObserve
	case s.StateDigest == "" || s.StateDigest != stack.StateDigest:
		return opObserve // changed outside this reconciler's view: a run it did not see end, a hand edit
	case r.cfg.NodesMode != "" && stack.NodesMode != "" && stack.NodesMode != r.cfg.NodesMode:
		return opObserve // applied in another node mode: the apply it runs brings the stand to this one
	case r.cfg.DriftInterval > 0 && st.lastDrift.IsZero():
		st.lastDrift = now
	case r.cfg.DriftInterval > 0 && now.Sub(st.lastDrift) >= r.cfg.DriftInterval:
		st.lastDrift = now
		return opDrift
	}
	return ""
}

// forgetGone records that a stand which left the repository without ever having a stack (e.g. it
// never validated) has nothing to destroy, instead of keeping its last failure forever.
func (r *Reconciler) forgetGone(actions []diff.Action) {
	planned := map[string]bool{}
	for _, a := range actions {
		planned[a.ID] = true
	}
	for id, st := range r.stands {
		if !planned[id] && !st.running && st.status != nil && st.status.Phase != reason.Destroyed {
			r.record(id, outcome{kind: outGone})
		}
	}
}
