package gitsource

import (
	"context"
	"slices"
	"strings"
	"testing"

	"code.gitea.io/sdk/gitea"

	"github.com/stands-engine/stands-reconciler/safeguard"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestProtectionAsGiteaAppliesIt reads the protection of main from a real Gitea: none at first (every
// safeguard missing); then the rule Gitea itself applies among a weak pattern rule and a plain one
// with every safeguard, and the plain one alone (none missing); then, with a writer's token, the part of the rule Gitea shows
// writers, the rest unknown and said why.
func TestProtectionAsGiteaAppliesIt(t *testing.T) {
	g := testenv.StartGitea(t)
	api := g.API(t)
	p := g.CreateRepo(t, "stands")
	p.Commit("README.md", "stands\n", "first")
	p.WaitBranch(api, "main")
	owner, repo := p.Info.Owner.UserName, p.Info.Name
	admin, err := NewGitea(p.Info.CloneURL, func() (string, error) { return g.Token, nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	check := func(gt *Gitea) ([]safeguard.Finding, string) {
		t.Helper()
		prot, err := gt.Protection(ctx, "main")
		if err != nil {
			t.Fatal(err)
		}
		return safeguard.Check(prot, "stands/plan"), prot.Rule
	}
	if fs, rule := check(admin); rule != "" || !slices.Equal(safeguard.Lacking(fs), safeguard.Names) {
		t.Errorf("without protection: rule %q, missing %v", rule, safeguard.Lacking(fs))
	}

	// A pattern rule first, with nothing on; then the plain rule, which Gitea applies before it.
	if _, _, err := api.CreateBranchProtection(owner, repo, gitea.CreateBranchProtectionOption{RuleName: "ma*"}); err != nil {
		t.Fatal(err)
	}
	if fs, rule := check(admin); rule != "ma*" || len(safeguard.Lacking(fs)) != len(safeguard.Names)-1 {
		t.Errorf("under the pattern rule: rule %q, missing %v (all but the pushes, which it blocks)", rule, safeguard.Lacking(fs))
	}
	if _, _, err := api.CreateBranchProtection(owner, repo, gitea.CreateBranchProtectionOption{RuleName: "main",
		EnablePush: true, EnablePushWhitelist: true, PushWhitelistUsernames: []string{g.User},
		EnableStatusCheck: true, StatusCheckContexts: []string{"ci/*", "stands/*"}, RequiredApprovals: 1,
		DismissStaleApprovals: true, BlockOnOutdatedBranch: true, BlockAdminMergeOverride: true}); err != nil {
		t.Fatal(err)
	}
	// Gitea 1.26 gives each new rule the next priority, and priority comes before "plain names
	// first": the pattern rule still applies. The reading follows Gitea's choice, whatever it is.
	if fs, rule := check(admin); rule != "ma*" || len(safeguard.Lacking(fs)) != len(safeguard.Names)-1 {
		t.Errorf("under both rules: rule %q, missing %v; want the pattern rule, created first", rule, safeguard.Lacking(fs))
	}
	if _, err := api.DeleteBranchProtection(owner, repo, "ma*"); err != nil {
		t.Fatal(err)
	}
	fs, rule := check(admin)
	if rule != "main" || len(safeguard.Lacking(fs)) != 0 || len(safeguard.Unread(fs)) != 0 {
		t.Errorf("under the plain rule: rule %q, missing %v, unknown %v", rule, safeguard.Lacking(fs), safeguard.Unread(fs))
	}

	writer := g.CreateUser(t, "writer")
	p.AddWriter(api, writer.Name)
	wg, err := NewGitea(p.Info.CloneURL, func() (string, error) { return writer.Token, nil })
	if err != nil {
		t.Fatal(err)
	}
	fs, _ = check(wg)
	if len(safeguard.Lacking(fs)) != 0 || !slices.Equal(safeguard.Unread(fs), []string{"stale-approvals-dismissed",
		"outdated-branches-blocked", "admin-override-blocked", "direct-push-restricted"}) {
		t.Errorf("with a writer's token: missing %v, unknown %v", safeguard.Lacking(fs), safeguard.Unread(fs))
	}
	for _, f := range fs {
		if f.State == safeguard.Unknown && !strings.Contains(f.Why, "Admin permission") {
			t.Errorf("%s unknown without saying which permission reads it: %q", f.Name, f.Why)
		}
	}
}
