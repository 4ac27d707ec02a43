package safeguard

import (
	"slices"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/stands"
)

func full() stands.Protection {
	return stands.Protection{Branch: "main", Rule: "main", RequiredApprovals: 1, StatusCheck: true, StatusCheckContexts: []string{"stands/plan"},
		StaleApprovalsDismissed: true, BlockOutdatedBranch: true, BlockAdminMergeOverride: true, PushRestricted: true}
}

// TestCheck: each safeguard is missing exactly when its setting is off, the plan's context is matched
// as Gitea matches status check patterns, an unread rule leaves its settings unknown, and no rule
// misses everything.
func TestCheck(t *testing.T) {
	cases := []struct {
		name    string
		edit    func(*stands.Protection)
		missing []string
		unknown []string
		why     string
	}{
		{name: "every safeguard", edit: func(*stands.Protection) {}},
		{name: "no rule", edit: func(p *stands.Protection) { *p = stands.Protection{Branch: "main"} }, missing: Names, why: "no protection rule applies to main"},
		{name: "no approvals", edit: func(p *stands.Protection) { p.RequiredApprovals = 0 }, missing: []string{"required-approvals"}},
		{name: "stale approvals kept", edit: func(p *stands.Protection) { p.StaleApprovalsDismissed = false }, missing: []string{"stale-approvals-dismissed"}},
		{name: "no status check", edit: func(p *stands.Protection) { p.StatusCheck = false }, missing: []string{"plan-required"}},
		{name: "pattern stands/*", edit: func(p *stands.Protection) { p.StatusCheckContexts = []string{"ci/build", "stands/*"} }},
		{name: "pattern *", edit: func(p *stands.Protection) { p.StatusCheckContexts = []string{"*"} }},
		{name: "pattern stands/{plan,apply}", edit: func(p *stands.Protection) { p.StatusCheckContexts = []string{"stands/{plan,apply}"} }},
		{name: "another context", edit: func(p *stands.Protection) { p.StatusCheckContexts = []string{"stands/pla", "Stands/plan", "ci/*"} },
			missing: []string{"plan-required"}, why: "no status check pattern matches stands/plan (stands/pla, Stands/plan, ci/*)"},
		{name: "a broken pattern", edit: func(p *stands.Protection) { p.StatusCheckContexts = []string{"stands/[plan"} },
			missing: []string{"plan-required"}, why: "not a pattern Gitea can read"},
		{name: "no patterns", edit: func(p *stands.Protection) { p.StatusCheckContexts = nil }, missing: []string{"plan-required"}, why: "with no pattern"},
		{name: "outdated branches merge", edit: func(p *stands.Protection) { p.BlockOutdatedBranch = false }, missing: []string{"outdated-branches-blocked"}},
		{name: "admins override", edit: func(p *stands.Protection) { p.BlockAdminMergeOverride = false }, missing: []string{"admin-override-blocked"}},
		{name: "anyone pushes", edit: func(p *stands.Protection) { p.PushRestricted = false }, missing: []string{"direct-push-restricted"}},
		{name: "rule unread", edit: func(p *stands.Protection) {
			*p = stands.Protection{Branch: "main", Rule: "main", Partial: "needs admin", StatusCheck: true, StatusCheckContexts: []string{"stands/plan"}}
		}, missing: []string{"required-approvals"},
			unknown: []string{"stale-approvals-dismissed", "outdated-branches-blocked", "admin-override-blocked", "direct-push-restricted"}, why: "needs admin"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := full()
			tc.edit(&p)
			fs := Check(p, "stands/plan")
			if len(fs) != len(Names) {
				t.Fatalf("%d findings, want %d", len(fs), len(Names))
			}
			if got := Lacking(fs); !slices.Equal(got, tc.missing) {
				t.Errorf("missing %v, want %v", got, tc.missing)
			}
			if got := Unread(fs); !slices.Equal(got, tc.unknown) {
				t.Errorf("unknown %v, want %v", got, tc.unknown)
			}
			var whys []string
			for _, f := range fs {
				if f.State != Present && (f.Why == "" || f.Fix == "") {
					t.Errorf("%s is %s without saying why or how to fix it", f.Name, f.State)
				}
				whys = append(whys, f.Why)
			}
			if tc.why != "" && !strings.Contains(strings.Join(whys, "\n"), tc.why) {
				t.Errorf("no finding says %q: %q", tc.why, whys)
			}
		})
	}
}
