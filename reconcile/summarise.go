package reconcile

import (
	"cmp"
	"fmt"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// outcomeKind is what a step found out about one stand.
type outcomeKind int

const (
	// outDeclared: the repository declares the stand with a valid manifest; only its file may move,
	// and its phase between Ready and Expired (ended: why it is past its end; "" when it is not).
	outDeclared outcomeKind = iota
	// outInvalid: its manifest was refused (detail: the report, with file:line).
	outInvalid
	// outHeld: its secrets cannot be resolved because the secret store is down (Waiting).
	outHeld
	// outBlocked: refused by a guard or by ownership (reason, detail); nothing runs until it changes.
	outBlocked
	// outSuspended: stand.suspend is true.
	outSuspended
	// outGone: it left the repository without ever having a stack.
	outGone
	// outStarted: an apply or destroy was started.
	outStarted
	// outSucceeded: an operation finished (op, res).
	outSucceeded
	// outFailed: an operation failed (reason from its error, detail the scrubbed error text).
	outFailed
	// outUnsaved: the connection record could not be stored; the status stays, the stand is retried.
	outUnsaved
	// outRetried: an operator asked for an attempt now (detail: who); failures and backoff are forgotten.
	outRetried
	// outHealth: a live health check's finding (health).
	outHealth
	// outHealed: a heal step (heal).
	outHealed
)

// outcomeKinds lists them all, for the summariser's table test.
var outcomeKinds = []outcomeKind{outDeclared, outInvalid, outHeld, outBlocked, outSuspended, outGone, outStarted, outSucceeded, outFailed, outUnsaved, outRetried, outHealth, outHealed}

func (k outcomeKind) String() string {
	return [...]string{"declared", "invalid", "held", "blocked", "suspended", "gone", "started", "succeeded", "failed", "unsaved", "retried", "health", "healed"}[k]
}

// outcome is what every step of the loop returns about a stand instead of editing its status: one
// function, summarise, turns it into the new status and the next attempt.
type outcome struct {
	kind    outcomeKind
	reason  reason.Reason // blocked and failed
	detail  string        // scrubbed of secret values by whoever made it
	commit  string        // the source commit the step looked at
	file    string        // the stand.yml, when the repository has it
	spec    string        // the spec hash the step was about ("" when unknown)
	op      opKind        // started, succeeded, failed
	res     *stands.Result
	started time.Time
	health  *stands.Health // outHealth
	heal    *HealStep      // outHealed
	ended   string         // outDeclared: the stand is past its end, and why ("" when not)
	auth    *Authorised    // outSucceeded: what let its change through the review gate
}

// retries is a stand's retry bookkeeping: what decides the next attempt and the stall.
type retries struct {
	failures int       // consecutive Generic/Stalling failures on spec
	waits    int       // consecutive Waiting failures: backoff only, never Stalled
	spec     string    // spec hash (or "destroy") the failures were on
	next     time.Time // no attempt before
}

// forSpec starts counting afresh when the stand's input changed: a new spec deserves new attempts.
func (rt retries) forSpec(spec string) retries {
	if rt.spec != spec {
		return retries{spec: spec}
	}
	return rt
}

// policy is what summarise needs of the configuration.
type policy struct {
	stallAfter int
	backoff    func(n int) time.Duration
}

// maxMessage bounds a status message: Pulumi's errors carry the whole CLI output.
const maxMessage = 2000

// summarise is the only code that decides a stand's phase, reason and message. prev is the status
// before (Phase "" when the stand has none); the result has Phase "" when it still has none. The
// stand is stalled when the result's phase is Stalled.
func summarise(o outcome, prev Status, rt retries, now time.Time, p policy) (Status, retries) {
	x := prev
	switch o.kind {
	case outDeclared:
		if prev.Phase != "" && o.file != "" {
			x.File = o.file
		}
		return expired(o, x), rt
	case outUnsaved:
		x.StateDigest = "" // the record is not stored: the stand must be read again
		rt.waits++
		rt.next = now.Add(p.backoff(rt.waits))
		return x, rt
	case outRetried:
		if prev.Phase != "" {
			x.Operator, x.NextAttempt = &OperatorAction{Action: "retry", By: o.detail, At: now.UTC()}, nil
		}
		return x, retries{spec: rt.spec}
	case outHeld:
		if prev.Phase == reason.Stalled && (o.spec == "" || o.spec == prev.SpecHash) {
			return x, rt // stays Stalled: whether its input changed is unknown until the store answers
		}
		x.Phase, x.Reason, x.Message, x.NextAttempt = reason.VaultUnavailable.Phase(), reason.VaultUnavailable, reason.VaultUnavailable.Message(o.detail), nil
		x.File = cmp.Or(o.file, x.File)
	case outInvalid:
		x.Phase, x.Reason, x.Message, x.LastAttemptedCommit = reason.Invalid.Phase(), reason.Invalid, reason.Invalid.Message(o.detail), o.commit
		x.NextAttempt, x.File = nil, cmp.Or(o.file, x.File)
	case outBlocked:
		x.Phase, x.Reason, x.Message, x.NextAttempt = reason.Blocked, o.reason, o.reason.Message(o.detail), nil
		x.File = cmp.Or(o.file, x.File)
	case outSuspended:
		x.Phase, x.Reason, x.Message, x.NextAttempt = reason.SuspendedByRepo.Phase(), reason.SuspendedByRepo, reason.SuspendedByRepo.Message(""), nil
	case outGone:
		x.Phase, x.Reason, x.Message, x.NextAttempt = reason.Destroyed, reason.Removed, reason.Removed.Message("removed from the repository; it had no stack"), nil
		x.Nodes, x.Connection, x.Failures = nil, nil, 0
	case outStarted:
		r := reason.Applying
		if o.op == opDestroy {
			r = reason.Destroying
		}
		x.Phase, x.Reason, x.Message, x.LastAttemptedCommit, x.NextAttempt = r.Phase(), r, "", o.commit, nil
		if o.spec != "" {
			x.SpecHash, x.File = o.spec, o.file
		}
	case outHealth:
		return healthStatus(o.health, x), rt
	case outHealed:
		if prev.Phase == "" {
			return x, rt
		}
		return withHealStep(x, *o.heal), rt
	case outFailed:
		return failed(o, x, rt, now, p)
	case outSucceeded:
		return succeeded(o, x, now), retries{spec: rt.spec}
	}
	if x.Phase != "" && x.SchemaVersion == 0 {
		x.SchemaVersion = SchemaVersion
	}
	return x, rt
}

// expired is summarise's part for a declared stand's end (docs/lifetime.md): a Ready stand past it
// is Expired, and Ready again once its end moves beyond now. Any other phase says more, and stays.
func expired(o outcome, x Status) Status {
	switch {
	case o.ended != "" && (x.Phase == reason.Ready || x.Phase == reason.Expired):
		x.Phase, x.Reason, x.Message = reason.Expired, reason.Ended, reason.Ended.Message(o.ended)
	case o.ended == "" && x.Phase == reason.Expired:
		x.Phase, x.Reason, x.Message = reason.Ready, reason.UpToDate, ""
	}
	return x
}

func failed(o outcome, x Status, rt retries, now time.Time, p policy) (Status, retries) {
	msg := mdtext.Truncate(o.detail, maxMessage)
	x.SchemaVersion = SchemaVersion
	// An error's own text is the message: a reason's default message would hide what failed.
	x.Phase, x.Reason, x.Message, x.LastAttemptedCommit, x.Timings = reason.Failed, o.reason, msg, o.commit, timings(o, now)
	x.StateDigest = "" // a failed run may have changed the state
	if o.reason.Kind() == reason.Waiting {
		rt.waits++
		rt.next = now.Add(p.backoff(rt.waits))
	} else {
		rt.failures++
		rt.next = now.Add(p.backoff(rt.failures))
		x.Failures = rt.failures
	}
	next := rt.next.UTC()
	x.NextAttempt = &next
	if rt.failures >= p.stallAfter {
		x.Phase, x.NextAttempt = reason.Stalled, nil
		x.Message = fmt.Sprintf("%d attempts failed on this spec; no retry until the stand's input changes. Last error (%s): %s",
			rt.failures, o.reason, msg)
	}
	return x, rt
}

func succeeded(o outcome, x Status, now time.Time) Status {
	x.SchemaVersion = SchemaVersion
	x.Failures, x.NextAttempt = 0, nil
	if o.auth != nil && (o.op == opApply || o.op == opDestroy) {
		x.Authorised = o.auth
	}
	res := o.res
	switch o.op {
	case opDestroy:
		x.Phase, x.Reason, x.Message = reason.Destroyed, reason.Removed, reason.Removed.Message(summary(res.Changes, "deleted"))
		x.LastSuccessfulCommit, x.Timings, x.Changes, x.Nodes, x.Connection, x.SpecHash = o.commit, timings(o, now), res.Changes, nil, nil, ""
		x.StateDigest = ""
		return x
	case opDrift:
		if res.Changed {
			x.Phase, x.Reason, x.Message = reason.Drifted, reason.DriftDetected, mdtext.Truncate(reason.DriftDetected.Message(summary(res.Changes, "")+drifted(res.Steps)), maxMessage)
		} else if x.Phase == reason.Drifted {
			x.Phase, x.Reason, x.Message = reason.Ready, reason.UpToDate, ""
		}
		return x
	case opApply:
		x.Reason, x.Message, x.Timings, x.Changes = reason.Applied, reason.Applied.Message(summary(res.Changes, "")), timings(o, now), res.Changes
	case opObserve:
		if x.Phase != reason.Ready {
			x.Reason, x.Message = reason.UpToDate, ""
		}
		x.LastSuccessfulCommit = observedCommit(o, x, res)
	}
	if o.op != opObserve {
		x.LastSuccessfulCommit = o.commit
	}
	x.Phase, x.SpecHash, x.File = reason.Ready, res.SpecHash, o.file
	if x.LastAttemptedCommit == "" {
		x.LastAttemptedCommit = o.commit
	}
	x.NodesMode, x.Nodes, x.Connection, x.StateDigest = res.NodesMode, res.Nodes, res.Masked, res.StateDigest
	return x
}

// observedCommit is lastSuccessfulCommit after a stand was only read, nothing applied: the commit
// of the apply that made its spec. That is the one the status already names when it was Ready at
// that spec; the attempted one when its last apply was on that spec and its end was not seen (a
// kill, a lost status commit); the commit read only when its status says nothing of that spec.
func observedCommit(o outcome, prev Status, res *stands.Result) string {
	switch {
	case prev.SpecHash != res.SpecHash || prev.LastAttemptedCommit == "":
		return o.commit
	case prev.LastSuccessfulCommit != "" && prev.Phase.Applied():
		return prev.LastSuccessfulCommit
	}
	return prev.LastAttemptedCommit
}

// drifted names what a refresh found changed on the servers, per resource ("; web--front: unit inactive").
func drifted(steps []stands.Step) string {
	var b strings.Builder
	for _, s := range steps {
		if s.Drift != "" {
			b.WriteString("; " + cmp.Or(s.Instance, s.ServerName, s.Node) + ": " + s.Drift)
		}
	}
	return b.String()
}

func timings(o outcome, now time.Time) *Timings {
	return &Timings{Operation: string(o.op), Started: o.started.UTC(), Finished: now.UTC(), Seconds: now.Sub(o.started).Round(time.Millisecond).Seconds()}
}

// summary says what Pulumi did, from its step counts, in a fixed order.
func summary(changes map[string]int, fallback string) string {
	var parts []string
	for _, k := range []string{"create", "update", "replace", "delete", "same"} {
		if n := changes[k]; n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", n, k))
		}
	}
	if len(parts) == 0 {
		return fallback
	}
	return strings.Join(parts, ", ")
}

// healthStatus is summarise's part for a health check: a Ready stand found unhealthy becomes
// Degraded, a Degraded one found healthy Ready again (an Expired one is Degraded while unhealthy).
// Any other phase is an operation's to set.
func healthStatus(h *stands.Health, x Status) Status {
	if x.Phase != reason.Ready && x.Phase != reason.Degraded && x.Phase != reason.Expired {
		return x
	}
	if h.Healthy() {
		if x.Phase == reason.Degraded { // an expired stand is Expired again at the next cycle
			x.Phase, x.Reason, x.Message, x.Health = reason.Ready, reason.Recovered, reason.Recovered.Message(""), nil
		}
		return x
	}
	f := &HealthFinding{}
	var parts []string
	for _, s := range h.Unreachable {
		f.Unreachable = append(f.Unreachable, s.Server)
		parts = append(parts, s.Server+": unreachable over SSH")
	}
	for _, in := range h.Instances {
		if len(in.Problems) > 0 {
			f.Instances = append(f.Instances, UnhealthyInstance{Instance: in.Instance, Server: in.Server, Problems: in.Problems})
			parts = append(parts, in.Instance+": "+strings.Join(in.Problems, ", "))
		}
	}
	x.Reason = reason.InstanceUnhealthy
	if len(f.Unreachable) > 0 {
		x.Reason = reason.NodeUnreachable
	}
	x.Phase, x.Message, x.Health = reason.Degraded, mdtext.Truncate(strings.Join(parts, "; "), maxMessage), f
	return x
}

// withHealStep appends a heal step, keeping the last maxHealSteps.
func withHealStep(x Status, step HealStep) Status {
	steps := append(append([]HealStep(nil), x.Healing...), step)
	if len(steps) > maxHealSteps {
		steps = steps[len(steps)-maxHealSteps:]
	}
	x.Healing = steps
	return x
}
