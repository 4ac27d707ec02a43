// Package safeguard judges the tracked branch's protection against what the reconciler relies on: a
// plan is only the reviewer's promise if merging needs an approval, the approval is of the commit
// merged, the merge is of a plan that is current, and nobody can go around it
// (docs/pr-workflow.md#branch-protection). It decides only; the daemon reads the protection
// (gitsource) and reports what is missing in its log, its metrics, config check and STATUS.md.
package safeguard

import (
	"fmt"
	"strings"

	"github.com/gobwas/glob"

	"github.com/stands-engine/stands-reconciler/stands"
)

// State is what is known of one safeguard.
type State string

const (
	Present State = "present"
	Missing State = "missing"
	Unknown State = "unknown" // the token could not read that part of the rule
)

// Finding is one safeguard of the tracked branch.
type Finding struct {
	Name  string // stable: a metric label and a heading of docs/pr-workflow.md
	State State
	Why   string // what its absence allows, or why it is unknown
	Fix   string // the setting in Gitea's rule
}

// Names are the safeguards, in the order they are reported.
var Names = []string{"required-approvals", "stale-approvals-dismissed", "plan-required", "outdated-branches-blocked",
	"admin-override-blocked", "direct-push-restricted"}

// Check judges p; planContext is the commit status the plans set (stands/plan).
func Check(p stands.Protection, planContext string) []Finding {
	full := p.Rule != "" && p.Partial == ""
	var out []Finding
	add := func(name string, known, ok bool, why, fix string) {
		f := Finding{Name: name, State: Present, Fix: fix}
		switch {
		case p.Rule == "":
			f.State, f.Why = Missing, "no protection rule applies to "+p.Branch+"; "+why
		case !known:
			f.State, f.Why = Unknown, p.Partial
		case !ok:
			f.State, f.Why = Missing, why
		}
		out = append(out, f)
	}
	add("required-approvals", true, p.RequiredApprovals >= 1,
		"a pull request merges without anyone's approval", "Required approvals: 1 or more")
	add("stale-approvals-dismissed", full, p.StaleApprovalsDismissed,
		"an approval survives later pushes: the author pushes after it and merges", "Dismiss stale approvals")
	planWhy, planned := plans(p, planContext)
	add("plan-required", true, planned, planWhy, "Enable status check, with the pattern "+planContext)
	add("outdated-branches-blocked", full, p.BlockOutdatedBranch,
		"a pull request merges while its plan is of an older "+p.Branch, "Block merge if pull request is outdated")
	add("admin-override-blocked", full, p.BlockAdminMergeOverride,
		"an administrator merges past the approvals and the plan", "Block admin merge override")
	add("direct-push-restricted", full, p.PushRestricted,
		"anyone with write access pushes to "+p.Branch+" without a pull request", "Enable push → Allowlist restricted push, with only the reconciler's user")
	return out
}

// plans says whether a status check pattern of p requires planContext, as Gitea matches them (each
// pattern a glob, without separators), and if not, why.
func plans(p stands.Protection, planContext string) (string, bool) {
	if !p.StatusCheck {
		return "a pull request merges without a plan, or with a failed one", false
	}
	var bad []string
	for _, pattern := range p.StatusCheckContexts {
		g, err := glob.Compile(pattern)
		if err != nil {
			bad = append(bad, pattern+" (not a pattern Gitea can read)")
			continue
		}
		if g.Match(planContext) {
			return "", true
		}
		bad = append(bad, pattern)
	}
	if len(bad) == 0 {
		return "status checks are on, with no pattern: " + planContext + " is not required", false
	}
	return fmt.Sprintf("no status check pattern matches %s (%s): a pull request merges without a plan", planContext, strings.Join(bad, ", ")), false
}

// Lacking lists the safeguards missing.
func Lacking(fs []Finding) []string { return named(fs, Missing) }

// Unread lists the safeguards not known.
func Unread(fs []Finding) []string { return named(fs, Unknown) }

func named(fs []Finding, st State) []string {
	var out []string
	for _, f := range fs {
		if f.State == st {
			out = append(out, f.Name)
		}
	}
	return out
}
