// Package diff decides what to do: desired stands (from the repository) × actual stacks (from the
// inventory) → ordered actions with reasons, behind every destroy guard (docs/operations.md). It is pure: no
// I/O, no clock, so every decision is a table test.
package diff

import (
	"cmp"
	"fmt"
	"github.com/stands-engine/stands-reconciler/reason"
	"math"
	"slices"
)

// Desired is a stand the repository declares.
type Desired struct {
	ID       string
	SpecHash string
	Suspend  bool
	Protect  bool // stand.protect: recorded in the stack so the guard holds after the manifest is gone
	// Invalid is set when the stand's manifest failed validation: it fails alone, and its stack, if
	// any, is left as it is (never destroyed because its file is broken).
	Invalid bool
	Problem string        // why it is invalid: the Blocked action's detail
	Reason  reason.Reason // of the Blocked action; Invalid when empty
}

// Actual is a stack of the backend.
type Actual struct {
	ID        string // stand id recorded in the stack
	Owned     bool   // carries the reconciler's mark
	SpecHash  string // of the last successful apply
	Print     string // its print (judge.Print), "" when none was recorded
	Protected bool   // the last applied manifest had stand.protect: true
}

// Input is everything a decision depends on.
type Input struct {
	Desired []Desired
	Actual  []Actual
	// SourceOK is false when the last fetch or parse of the repository failed: then nothing is
	// destroyed — an unreachable source is not "no stands".
	SourceOK bool
	// MaxDestroyShare caps destroys per cycle as a share of owned stacks (default 0.5); one destroy is
	// always allowed.
	MaxDestroyShare float64
	// AllowDestroy names stands whose destroy was approved in the repository (.stands/allow-destroy):
	// they pass the share and zero guards (not protect).
	AllowDestroy map[string]bool
	// Hold, when set, blocks every destroy of this cycle with it as the reason: an outside service the
	// cycle depends on (Vault) is down, and nothing is destroyed on partial knowledge.
	Hold reason.Reason
	// AllowMassDestroy lifts the share and zero guards for every stand (a flag for emergencies).
	AllowMassDestroy bool
}

// Kind is what happens to a stand.
type Kind string

// Kinds, in the order Decide lists them.
const (
	Create  Kind = "create"
	Update  Kind = "update"
	Destroy Kind = "destroy"
	Noop    Kind = "noop"
	Blocked Kind = "blocked"
)

// Action is one decision.
type Action struct {
	Kind   Kind
	ID     string
	Reason reason.Reason // why, for noop and blocked
	Detail string        // what changed, or the guard's numbers; never a value of the manifest
	// SpecHash is the desired spec of a declared stand: two decisions are the same for a stand only
	// when they also want the same spec of it.
	SpecHash string
}

var kindOrder = map[Kind]int{Create: 0, Update: 1, Destroy: 2, Noop: 3, Blocked: 4}

// Decide computes the actions for one cycle.
func Decide(in Input) []Action {
	actual := map[string]Actual{}
	owned := 0
	for _, a := range in.Actual {
		actual[a.ID] = a
		if a.Owned {
			owned++
		}
	}
	out, desired, validDesired := declared(in.Desired, actual)
	var candidates []Actual
	for _, a := range in.Actual {
		switch {
		case desired[a.ID]:
		case !a.Owned:
			out = append(out, Action{Kind: Noop, ID: a.ID, Reason: reason.Foreign})
		case !in.SourceOK:
			out = append(out, Action{Kind: Blocked, ID: a.ID, Reason: reason.SourceUnavailable})
		case in.Hold != "":
			out = append(out, Action{Kind: Blocked, ID: a.ID, Reason: in.Hold})
		case a.Protected:
			out = append(out, Action{Kind: Blocked, ID: a.ID, Reason: reason.Protected})
		default:
			candidates = append(candidates, a)
		}
	}
	out = append(out, destroys(in, candidates, owned, validDesired)...)
	slices.SortFunc(out, func(x, y Action) int {
		return cmp.Or(cmp.Compare(kindOrder[x.Kind], kindOrder[y.Kind]), cmp.Compare(x.ID, y.ID))
	})
	return out
}

// declared decides each declared stand against its stack; it returns the actions, the ids declared
// and how many of them are valid.
func declared(stands []Desired, actual map[string]Actual) ([]Action, map[string]bool, int) {
	var out []Action
	desired := map[string]bool{}
	valid := 0
	for _, d := range stands {
		desired[d.ID] = true
		a, exists := actual[d.ID]
		switch {
		case d.Invalid:
			out = append(out, Action{Kind: Blocked, ID: d.ID, SpecHash: d.SpecHash, Reason: cmp.Or(d.Reason, reason.Invalid), Detail: d.Problem})
			continue
		case d.Suspend:
			out = append(out, Action{Kind: Noop, ID: d.ID, SpecHash: d.SpecHash, Reason: reason.SuspendedByRepo})
		case !exists:
			out = append(out, Action{Kind: Create, ID: d.ID, SpecHash: d.SpecHash, Detail: "new stand"})
		case !a.Owned:
			out = append(out, Action{Kind: Blocked, ID: d.ID, SpecHash: d.SpecHash, Reason: reason.Foreign})
		case a.SpecHash == d.SpecHash && a.Protected == d.Protect:
			out = append(out, Action{Kind: Noop, ID: d.ID, SpecHash: d.SpecHash, Reason: reason.UpToDate})
		case a.SpecHash == d.SpecHash:
			out = append(out, Action{Kind: Update, ID: d.ID, SpecHash: d.SpecHash, Detail: "protect changed"})
		default:
			out = append(out, Action{Kind: Update, ID: d.ID, SpecHash: d.SpecHash, Detail: "spec changed"})
		}
		valid++
	}
	return out, desired, valid
}

// destroys puts the stacks no stand declares behind the guards: those approved are destroyed; of
// the rest, none when the repository would have no stand left, none when more than the share of
// the owned stacks would go at once (one always may).
func destroys(in Input, candidates []Actual, owned, validDesired int) []Action {
	share := in.MaxDestroyShare
	if share <= 0 {
		share = 0.5
	}
	var out []Action
	// The guards count only destroys nobody approved.
	var guarded []Actual
	for _, a := range candidates {
		if in.AllowMassDestroy || in.AllowDestroy[a.ID] {
			out = append(out, Action{Kind: Destroy, ID: a.ID, Detail: "removed from the repository (approved)"})
		} else {
			guarded = append(guarded, a)
		}
	}
	capacity := max(1, int(math.Floor(share*float64(owned))))
	toZero := validDesired == 0 && len(guarded) > 0
	for _, a := range guarded {
		switch {
		case toZero:
			out = append(out, Action{Kind: Blocked, ID: a.ID, Reason: reason.LastStand, Detail: "the repository would have no stands left; approve in .stands/allow-destroy"})
		case len(guarded) > capacity:
			out = append(out, Action{Kind: Blocked, ID: a.ID, Reason: reason.MassDeletion, Detail: fmt.Sprintf(
				"%d stands removed at once, more than %d (%.0f%% of %d); approve in .stands/allow-destroy", len(guarded), capacity, share*100, owned)})
		default:
			out = append(out, Action{Kind: Destroy, ID: a.ID, Detail: "removed from the repository"})
		}
	}
	return out
}
