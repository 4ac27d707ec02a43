package reconcile

import (
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/diff"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/internal/statefile"
	"github.com/stands-engine/stands-reconciler/reason"
)

// The operator's controls, for on-call without a dummy commit:
//   - pause: no operation starts on any stand (apply, destroy, drift check, output read) while a
//     committed PauseFile is on the tracked branch or the local switch is on. Stands with work
//     waiting say so (Blocked, Paused). Pull request plans go on: they only read, and the pull
//     request that removes PauseFile needs its plan to be merged.
//   - plan-only: every cycle decides as usual and reports in each stand's status what it would apply
//     or destroy (Blocked, PlanOnly), and applies and destroys nothing; drift checks (read-only) and
//     plans go on, a drift is never repaired.
//   - retry: one stand's backoff and stall are forgotten and it is attempted at the next cycle,
//     which starts at once.
// Each is logged with who asked, and shown in STATUS.md and the stand's status.

// PauseFile pauses the reconciler while the tracked branch has it; its first line says why.
const PauseFile = ".stands/pause"

// maxReason bounds a pause's reason, in every status message that quotes it.
const maxReason = 200

// Switch is an operator's switch: who turned it on, when, and why.
type Switch struct {
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"`
}

// OperatorAction is the last thing an operator asked of one stand, in its status.
type OperatorAction struct {
	Action string    `json:"action"`
	By     string    `json:"by"`
	At     time.Time `json:"at"`
	Reason string    `json:"reason,omitempty"` // as the operator gave it (ctl approve)
}

// Controls are the local switches, kept in Config.Controls.State across restarts: an emergency pause
// must survive the restart systemd may do.
type Controls struct {
	Paused   *Switch `json:"paused,omitempty"`
	PlanOnly *Switch `json:"planOnly,omitempty"`
}

// ControlView is what `stands-reconciler ctl status` shows.
type ControlView struct {
	Local Controls `json:"local"`
	// RepositoryPause is the committed PauseFile's reason ("" when absent); PlanOnlyConfigured is the
	// --plan-only setting.
	RepositoryPause    *Switch        `json:"repositoryPause,omitempty"`
	PlanOnlyConfigured bool           `json:"planOnlyConfigured"`
	Paused             bool           `json:"paused"`
	PlanOnly           bool           `json:"planOnly"`
	Running            int            `json:"operationsRunning"`
	Phases             map[string]int `json:"stands"`
}

// ErrUnknownStand is Retry's answer for a stand the reconciler has never seen.
var ErrUnknownStand = errors.New("no such stand")

// switches are the operator's controls and what the tracked branch says of them: the local
// switches (kept in Config.Controls.State), the committed PauseFile, the --plan-only setting, and the
// tracked branch's missing and unread safeguards. They hold operations (held) and head STATUS.md
// (banner). Their lock is a leaf: taken under the loop's (Reconciler.mu) or alone, never the other
// way round, and nothing is called while it is held.
type switches struct {
	configured bool   // --plan-only
	state      string // Config.Controls.State
	branch     string // Config.Branch, named in the banner
	ungated    bool   // not Config.Review.Require: every change is applied as it lands
	now        func() time.Time

	mu        leafMutex
	local     Controls
	repoPause *Switch // PauseFile of the last snapshot
	// unguarded and unknown are the tracked branch's missing and unread safeguards (SetSafeguards).
	unguarded, unknown []string
}

// newSwitches reads the local switches an earlier run kept. An unreadable file is an error, and
// the switches then start paused: a pause an operator turned on must not be lost with the file.
func newSwitches(cfg Config) (*switches, error) {
	sw := &switches{configured: cfg.Controls.PlanOnly, state: cfg.Controls.State, branch: cfg.Branch, now: cfg.Now, ungated: !cfg.Review.Require}
	if _, err := statefile.Read(sw.state, &sw.local); err != nil {
		sw.local = Controls{Paused: &Switch{By: "the reconciler itself", At: sw.now().UTC(), Reason: "its operator controls file could not be read"}}
		return sw, fmt.Errorf("read the operator controls %s: %w", sw.state, err)
	}
	return sw, nil
}

// set changes the local switches and keeps them, or changes nothing when they cannot be kept.
func (sw *switches) set(by, why string, set func(*Controls, *Switch)) error {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	next := sw.local
	set(&next, &Switch{By: by, At: sw.now().UTC(), Reason: why})
	if err := statefile.Write(sw.state, next); err != nil {
		return fmt.Errorf("keep the controls: %w", err)
	}
	sw.local = next
	return nil
}

// setRepoPause records the PauseFile of the snapshot a cycle judged.
func (sw *switches) setRepoPause(p *Switch) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	sw.repoPause = p
}

// setSafeguards records the tracked branch's missing and unread safeguards; true when they changed.
func (sw *switches) setSafeguards(missing, unknown []string) bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	same := slices.Equal(missing, sw.unguarded) && slices.Equal(unknown, sw.unknown)
	sw.unguarded, sw.unknown = slices.Clone(missing), slices.Clone(unknown)
	return !same
}

// paused is the pause in force (the local one first), nil when none.
func (sw *switches) paused() *Switch {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.pausedLocked()
}

func (sw *switches) pausedLocked() *Switch {
	if sw.local.Paused != nil {
		return sw.local.Paused
	}
	return sw.repoPause
}

// planOnly says whether plan-only is on, by the setting or the local switch.
func (sw *switches) planOnly() bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.planOnlyLocked()
}

func (sw *switches) planOnlyLocked() bool { return sw.configured || sw.local.PlanOnly != nil }

// holding says whether a pause or plan-only keeps operations off the servers (a heal, a repair).
func (sw *switches) holding() bool {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return sw.pausedLocked() != nil || sw.planOnlyLocked()
}

// view is ctl status's part of the switches.
func (sw *switches) view() ControlView {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	return ControlView{Local: sw.local, RepositoryPause: sw.repoPause, PlanOnlyConfigured: sw.configured,
		Paused: sw.pausedLocked() != nil, PlanOnly: sw.planOnlyLocked(), Phases: map[string]int{}}
}

// Pause turns the local pause on (again: the new reason replaces the old). Running operations go on.
func (r *Reconciler) Pause(by, why string) error {
	return r.setControl("pause", by, why, func(c *Controls, s *Switch) { c.Paused = s })
}

// Resume turns the local pause off; a committed PauseFile still pauses.
func (r *Reconciler) Resume(by string) error {
	return r.setControl("resume", by, "", func(c *Controls, _ *Switch) { c.Paused = nil })
}

// SetPlanOnly turns the local plan-only switch on or off (the --plan-only setting stays).
func (r *Reconciler) SetPlanOnly(on bool, by string) error {
	action := "plan-only off"
	if on {
		action = "plan-only on"
	}
	return r.setControl(action, by, "", func(c *Controls, s *Switch) {
		c.PlanOnly = nil
		if on {
			c.PlanOnly = s
		}
	})
}

func (r *Reconciler) setControl(action, by, why string, set func(*Controls, *Switch)) error {
	why = mdtext.Truncate(why, maxReason)
	if err := r.sw.set(by, why, set); err != nil {
		return err
	}
	r.log.Warn("operator: "+action, "by", by, "reason", why)
	r.Trigger()
	return nil
}

// Retry forgets a stand's failures and backoff (a Stalled stand too) and starts a cycle, which
// attempts it at once.
func (r *Reconciler) Retry(id, by string) error {
	r.mu.Lock()
	st, ok := r.stands[id]
	if !ok {
		r.mu.Unlock()
		return fmt.Errorf("%w %q", ErrUnknownStand, id)
	}
	running := st.running
	if !running {
		r.record(id, outcome{kind: outRetried, detail: by})
	}
	r.mu.Unlock()
	if running {
		return fmt.Errorf("%s has an operation running", id)
	}
	r.log.Warn("operator: retry", "stand", id, "by", by)
	r.forgetJudgement(id) // its secrets are read again: a value changed in the store applies now
	r.Trigger()
	return nil
}

// Controls is the state of the switches, with the stands' phases and operations running.
func (r *Reconciler) Controls() ControlView {
	v := r.sw.view()
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, st := range r.stands {
		if st.status != nil {
			v.Phases[string(st.status.Phase)]++
		}
		if st.running {
			v.Running++
		}
	}
	return v
}

// repositoryPause reads PauseFile of a snapshot: nil when absent.
func repositoryPause(files fs.FS, commit string) *Switch {
	data, err := fs.ReadFile(files, PauseFile)
	if err != nil {
		return nil
	}
	line, _, _ := strings.Cut(string(data[:min(len(data), 4096)]), "\n")
	return &Switch{By: PauseFile + " at " + mdtext.Short(commit), Reason: mdtext.Truncate(strings.TrimSpace(line), maxReason)}
}

// held is what a pause or plan-only makes of an action that would start an operation: the outcome
// to record instead, and whether the action is held at all (output reads and drift checks are not
// held by plan-only).
func (sw *switches) held(a diff.Action, kind opKind) (outcome, bool) {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	would := map[diff.Kind]string{diff.Create: "create it", diff.Update: "apply it", diff.Destroy: "destroy it"}[a.Kind]
	if p := sw.pausedLocked(); p != nil {
		if would == "" { // an output read or drift check: simply not now
			return outcome{}, true
		}
		return outcome{kind: outBlocked, reason: reason.Paused, detail: fmt.Sprintf("paused by %s%s; when resumed the reconciler will %s", p.By, because(p.Reason), would)}, true
	}
	if sw.planOnlyLocked() && (kind == opApply || kind == opDestroy) {
		why := a.Detail
		if why == "" {
			why = string(a.Reason)
		}
		return outcome{kind: outBlocked, reason: reason.PlanOnly, detail: fmt.Sprintf("plan-only mode: would %s (%s); nothing is applied or destroyed", would, why)}, true
	}
	return outcome{}, false
}

func because(why string) string {
	if why == "" {
		return ""
	}
	return ": " + why
}

// banner is STATUS.md's note of the switches in force ("" when none). Who paused and why come from
// a commit or an operator: mdtext renders them inert.
func (sw *switches) banner() mdtext.Markup {
	sw.mu.Lock()
	defer sw.mu.Unlock()
	var d mdtext.Doc
	if p := sw.pausedLocked(); p != nil {
		d.F("> **Paused** by %s%s", p.By, since(p.At))
		if p.Reason != "" {
			d.F(": %s", p.Reason)
		}
		d.Add(". No stand is applied, destroyed or checked until it is resumed")
		if p == sw.repoPause {
			d.Add(" (remove `" + PauseFile + "`).\n")
		} else {
			d.Add(" (`stands-reconciler ctl resume`).\n")
		}
	}
	if sw.planOnlyLocked() {
		by := mdtext.Markup("the --plan-only setting")
		if s := sw.local.PlanOnly; s != nil {
			by = mdtext.F("%s%s", s.By, since(s.At))
		}
		d.F("> **Plan-only** (%s): each stand's status says what would be applied or destroyed; nothing is.\n", by)
	}
	if sw.ungated {
		d.F("> **No review gate**: every change landing on %s is applied, reviewed or not (`--require-review=false`; docs/pr-workflow.md#apply-only-what-was-reviewed).\n", sw.branch)
	}
	if len(sw.unguarded) > 0 {
		d.F("> **The protection of %s lacks** %s: a merge can apply what no reviewer approved or planned "+
			"(see the reconciler's log, or `stands-reconciler config check`, for each fix).\n", sw.branch, codes(sw.unguarded))
	}
	if len(sw.unknown) > 0 {
		d.F("> **The protection of %s is not fully known**: the reconciler's token cannot read %s.\n", sw.branch, codes(sw.unknown))
	}
	if d.Len() == 0 {
		return ""
	}
	return d.Markup() + "\n"
}

func codes(names []string) mdtext.Markup {
	out := make([]mdtext.Markup, len(names))
	for i, n := range names {
		out[i] = mdtext.Code(n)
	}
	return mdtext.Join(out, ", ")
}

// SetSafeguards records which safeguards of the tracked branch's protection are missing and which
// the token cannot read (the daemon reads them from the forge); STATUS.md's header names them. A
// change starts a cycle, which commits it.
func (r *Reconciler) SetSafeguards(missing, unknown []string) {
	if r.sw.setSafeguards(missing, unknown) {
		r.Trigger()
	}
}

func since(at time.Time) mdtext.Markup {
	if at.IsZero() {
		return ""
	}
	return mdtext.F(" since %s", at.UTC().Format(time.RFC3339))
}
