// Package reason is the one catalogue of why a stand is where it is. Every status reason is declared
// here once, with the kind of problem it stands for (which decides retry, wait or stall, after Flux's
// Stalling/Waiting/Generic), the phase it implies and the message on-call reads. Add a reason here
// and nowhere else: diff, the engine's error classification, the loop and the pull request plans all
// take theirs from this table. It imports nothing of this module, so every package can use it.
package reason

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
)

// Kind decides what the loop does after a problem.
type Kind int

const (
	// Generic: retry with capped exponential backoff; after a few failures on the same spec the stand
	// is Stalled.
	Generic Kind = iota
	// Stalling: bad input or configuration; retrying cannot help until something changes.
	Stalling
	// Waiting: an outside service is down, busy or rate-limiting; retry later, never stall.
	Waiting
)

func (k Kind) String() string {
	switch k {
	case Stalling:
		return "Stalling"
	case Waiting:
		return "Waiting"
	}
	return "Generic"
}

// Phase is where a stand is (docs/architecture.md#status-and-reasons).
type Phase string

// Phases.
const (
	Ready       Phase = "Ready"
	Progressing Phase = "Progressing"
	Failed      Phase = "Failed"
	Stalled     Phase = "Stalled"
	Drifted     Phase = "Drifted"
	// Degraded: applied, but the live health check finds an instance down or a server unreachable.
	Degraded  Phase = "Degraded"
	Destroyed Phase = "Destroyed"
	Suspended Phase = "Suspended"
	Blocked   Phase = "Blocked"
	// Expired: applied and past its end (docs/lifetime.md), kept until a commit removes it.
	Expired Phase = "Expired"
)

// Phases lists every phase, for tests that must cover them all.
var Phases = []Phase{Ready, Progressing, Failed, Stalled, Drifted, Degraded, Destroyed, Suspended, Blocked, Expired}

// Applied reports whether a stand in the phase is as its spec says: its last apply succeeded and
// nothing is under way.
func (p Phase) Applied() bool { return p == Ready || p == Drifted || p == Degraded || p == Expired }

// Reason is a status reason: its string is what status files, STATUS.md, commit statuses and logs
// show, and never changes once published.
type Reason string

// The loop's reasons.
const (
	Applied       Reason = "Applied"
	UpToDate      Reason = "UpToDate"
	Removed       Reason = "RemovedFromRepository"
	DriftDetected Reason = "DriftDetected"
	// The live health check's reasons (reconcile/health.go).
	InstanceUnhealthy Reason = "InstanceUnhealthy"
	NodeUnreachable   Reason = "NodeUnreachable"
	Recovered         Reason = "Recovered"
	Ended             Reason = "Expired" // past its end, not removed yet
	Invalid           Reason = "InvalidManifest"
	VaultUnavailable  Reason = "VaultUnavailable"
	OtherOwner        Reason = "OtherOwner"
	SuspendedByRepo   Reason = "Suspended"
	// Applying and Destroying mark an operation in progress (lower case: they name the operation).
	Applying   Reason = "apply"
	Destroying Reason = "destroy"
)

// The destroy guards' reasons (diff).
const (
	Foreign           Reason = "ForeignStack"
	SourceUnavailable Reason = "SourceUnavailable"
	Protected         Reason = "Protected"
	MassDeletion      Reason = "MassDeletionGuard"
	LastStand         Reason = "WouldRemoveAllStands"
)

// The reasons an operation's error maps to (engine.Classify).
const (
	UpdateConflict     Reason = "UpdateConflict"
	StackLocked        Reason = "StackLocked"
	PendingOperations  Reason = "PendingOperations"
	ProviderAuth       Reason = "ProviderAuth"
	RateLimited        Reason = "RateLimited"
	CloudUnavailable   Reason = "CloudUnavailable"
	BackendUnavailable Reason = "BackendUnavailable"
	Passphrase         Reason = "Passphrase"
	NotOwned           Reason = "NotOwned"
	MissingPrereq      Reason = "MissingPrerequisite"
	ProviderMissing    Reason = "ProviderMissing"
	Canceled           Reason = "Canceled"
	OwnerChanged       Reason = "OwnerChanged"
	// Unreviewed: a change of the stand landed that no pull request's approved plan showed
	// (reconcile/review.go); it is not applied until reviewed or released.
	Unreviewed Reason = "Unreviewed"
	// Paused and PlanOnly: the operator's controls hold the stand's operation.
	Paused   Reason = "Paused"
	PlanOnly Reason = "PlanOnly"
	Timeout  Reason = "Timeout"
	Failure  Reason = "Failed"
	// LeaseLost: with replicas, the stand's lease was lost mid-operation (the lease store did not
	// answer in time); the replica that takes the stand over runs it again.
	LeaseLost Reason = "LeaseLost"
)

// entry is what the catalogue knows about a reason. message is a template with at most one %s, the
// outcome's detail; without a %s it is the default message, which a detail replaces.
type entry struct {
	kind    Kind
	phase   Phase
	message string
}

var catalogue = map[Reason]entry{
	Applied:           {Generic, Ready, "%s"},
	UpToDate:          {Generic, Ready, ""},
	Removed:           {Generic, Destroyed, "%s"},
	DriftDetected:     {Generic, Drifted, "the stand differs from its last apply: %s"},
	InstanceUnhealthy: {Generic, Degraded, "%s"},
	NodeUnreachable:   {Waiting, Degraded, "%s"},
	Recovered:         {Generic, Ready, "the live health check passes again"},
	Ended:             {Generic, Expired, "%s"},
	Invalid:           {Stalling, Failed, "%s"},
	VaultUnavailable:  {Waiting, Progressing, "the secrets cannot be resolved: vault is unavailable; nothing is applied or destroyed until it answers"},
	OtherOwner:        {Stalling, Blocked, "%s"},
	SuspendedByRepo:   {Stalling, Suspended, "stand.suspend is true: no apply, no destroy, no drift check"},
	Applying:          {Generic, Progressing, ""},
	Destroying:        {Generic, Progressing, ""},

	Foreign:           {Stalling, Blocked, "a stack with this stand's name exists but was not made by stands-reconciler; it is never changed or replaced (a Stands Engine stack: stands-reconciler adopt takes it over, docs/migrating.md)"},
	SourceUnavailable: {Waiting, Blocked, "a stand.yml of the repository cannot be read, so no stand is destroyed: %s"},
	OwnerChanged:      {Stalling, Blocked, "%s"},
	Paused:            {Waiting, Blocked, "%s"},
	Unreviewed:        {Waiting, Blocked, "%s"},
	PlanOnly:          {Waiting, Blocked, "%s"},
	Protected:         {Stalling, Blocked, "stand.protect was true at its last apply: remove it from the repository only after an apply with protect: false"},
	MassDeletion:      {Stalling, Blocked, "%s"},
	LastStand:         {Stalling, Blocked, "%s"},

	UpdateConflict:    {Waiting, Failed, "%s"},
	StackLocked:       {Waiting, Failed, "%s"},
	PendingOperations: {Generic, Failed, "%s"},
	ProviderAuth:      {Stalling, Failed, "%s"},
	RateLimited:       {Waiting, Failed, "%s"},
	CloudUnavailable:  {Waiting, Failed, "%s"},
	// HetznerUnavailable is CloudUnavailable's name before clouds were named neutrally: status files
	// of earlier versions carry it, and keep its kind. Nothing gives it now.
	"HetznerUnavailable": {Waiting, Failed, "%s"},
	BackendUnavailable:   {Waiting, Failed, "%s"},
	Passphrase:           {Stalling, Failed, "%s"},
	NotOwned:             {Stalling, Failed, "%s"},
	MissingPrereq:        {Stalling, Failed, "%s"},
	ProviderMissing:      {Stalling, Failed, "%s"},
	Canceled:             {Waiting, Failed, "%s"},
	Timeout:              {Waiting, Failed, "%s"},
	LeaseLost:            {Waiting, Failed, "%s"},
	Failure:              {Generic, Failed, "%s"},
}

// All lists every reason of the catalogue, sorted.
func All() []Reason {
	out := make([]Reason, 0, len(catalogue))
	for r := range catalogue {
		out = append(out, r)
	}
	slices.Sort(out)
	return out
}

// Known reports whether the catalogue has the reason (a status file may carry an older one).
func (r Reason) Known() bool { _, ok := catalogue[r]; return ok }

// Kind is the kind of problem the reason stands for; Generic for unknown reasons.
func (r Reason) Kind() Kind { return catalogue[r].kind }

// Phase is the phase the reason implies. An operation's error implies Failed; the loop turns it into
// Stalled after repeated failures.
func (r Reason) Phase() Phase { return catalogue[r].phase }

// Message is the human message for the reason with the outcome's detail in it.
func (r Reason) Message(detail string) string {
	t, ok := catalogue[r]
	if !ok {
		return detail
	}
	switch {
	case strings.Contains(t.message, "%s"):
		return fmt.Sprintf(t.message, detail)
	case detail != "":
		return detail
	}
	return t.message
}

// Error is an error with the reason it maps to: the engine returns these so the loop decides retry,
// wait or stall without knowing the engine's errors.
type Error struct {
	Reason Reason
	Err    error
}

func (e *Error) Error() string { return e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// Wrap gives err its reason; nil stays nil.
func Wrap(r Reason, err error) error {
	if err == nil {
		return nil
	}
	return &Error{Reason: r, Err: err}
}

// Of is the reason of an error: the one it was wrapped with, Canceled for a cancelled context, else
// Failure (Generic).
func Of(err error) Reason {
	var e *Error
	switch {
	case err == nil:
		return ""
	case errors.As(err, &e):
		return e.Reason
	case errors.Is(err, context.Canceled):
		return Canceled
	}
	return Failure
}

// Across the Pulumi CLI an error is text: the stands provider ends the message of an error that
// carries a reason with a mark naming it, and the engine reads the mark back, so neither side needs
// to know what a cloud's errors look like.
const markPrefix, markSuffix = " [reason: ", "]"

// Mark is err with its reason named at the end of its text, when it has one other than Failure
// (Generic: nothing to name) or Canceled (the engine knows its own cancellations).
func Mark(err error) error {
	r := Of(err)
	if r == "" || r == Failure || r == Canceled {
		return err
	}
	return &Error{Reason: r, Err: fmt.Errorf("%w%s%s%s", err, markPrefix, r, markSuffix)}
}

// Marked is the reason named by the last mark in text, when the catalogue has it.
func Marked(text string) (Reason, bool) {
	i := strings.LastIndex(text, markPrefix)
	if i < 0 {
		return "", false
	}
	name, _, ok := strings.Cut(text[i+len(markPrefix):], markSuffix)
	if r := Reason(name); ok && r.Known() {
		return r, true
	}
	return "", false
}
