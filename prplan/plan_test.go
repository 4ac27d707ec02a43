package prplan

import (
	"strings"
	"testing"
	"time"

	"errors"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/fakes"
)

func TestPreviewAddsAStand(t *testing.T) {
	h, f := newPreviewHarness(t, "a", "b")
	h.mustCycle()
	ups := h.eng.TotalUps()
	f.Open(1, "head1", h.files(), map[string]string{fakes.StandFile("c"): fakes.StandYML("c", "")}, true)
	h.mustCycle()
	c := f.Comment(1)
	for _, want := range []string{CommentMarker, "`local_c_dev`", "create `local-c-dev-main` (`cx22`, `hel1`)", "+4.51 EUR", "Monthly cost change: `+4.51 EUR`"} {
		if !strings.Contains(c, want) {
			t.Errorf("comment lacks %q:\n%s", want, c)
		}
	}
	if strings.Contains(c, "local_a_dev") {
		t.Errorf("an unchanged stand is in the plan:\n%s", c)
	}
	if st := f.Status("head1", PlanContext); !strings.HasPrefix(st, "success: 1 create") {
		t.Errorf("stands/plan: %q", st)
	}
	if h.eng.TotalUps() != ups || len(h.eng.Stacks) != 2 {
		t.Errorf("a preview applied: %d ups, %d stacks", h.eng.TotalUps()-ups, len(h.eng.Stacks))
	}
	// The same head is not planned again; a new head edits the one comment.
	previews := h.eng.Previews
	h.mustCycle()
	if h.eng.Previews != previews {
		t.Error("an unchanged head was planned again")
	}
	f.Open(1, "head2", h.files(), map[string]string{fakes.StandFile("c"): fakes.StandYML("c", ""), fakes.StandFile("d"): fakes.StandYML("d", "")}, true)
	h.mustCycle()
	if f.Edits != 1 || !strings.Contains(f.Comment(1), "local_d_dev") || len(f.Comments) != 1 {
		t.Errorf("after a push: %d edits, %d comments:\n%s", f.Edits, len(f.Comments), f.Comment(1))
	}
	// A closed pull request is not planned again; what its plan changes is kept for the reviews of
	// a merge (ReviewRetention), then forgotten.
	f.Close(1)
	h.mustCycle()
	kept := h.pl.heads[1]
	if kept.ClosedAt.IsZero() || len(kept.Changes) != 2 {
		t.Errorf("a closed pull request's changes are not kept: %+v", kept)
	}
	kept.ClosedAt = kept.ClosedAt.Add(-ReviewRetention - time.Minute)
	h.pl.heads[1] = kept
	h.mustCycle()
	if len(h.pl.heads) != 0 {
		t.Errorf("a pull request closed longer than %s ago is remembered: %v", ReviewRetention, h.pl.heads)
	}
}

func TestPreviewChangeBrokenAndRemovals(t *testing.T) {
	h, f := newPreviewHarness(t, "a", "b", "c")
	h.mustCycle()
	base := h.files()
	f.Open(2, "broken", base, map[string]string{fakes.StandFile("b"): strings.Replace(fakes.StandYML("b", ""), "profile: small", "profile: huge", 1)}, true)
	f.Open(3, "all-gone", base, map[string]string{fakes.StandFile("a"): "", fakes.StandFile("b"): "", fakes.StandFile("c"): ""}, true)
	f.Open(4, "change", base, map[string]string{fakes.StandFile("a"): strings.Replace(fakes.StandYML("a", ""), "cache: {}", "cache: {preferences: {port: 6390}}", 1)}, true)
	f.Open(5, "fork", base, map[string]string{fakes.StandFile("z"): fakes.StandYML("z", "")}, false)
	f.Open(6, "one-gone", base, map[string]string{fakes.StandFile("c"): ""}, true)
	h.mustCycle()
	if st := f.Status("broken", PlanContext); !strings.HasPrefix(st, "failure: 1 invalid") {
		t.Errorf("broken: %q", st)
	}
	if c := f.Comment(2); !strings.Contains(c, "stands/b/stand.yml:") || !strings.Contains(c, "huge") {
		t.Errorf("broken comment:\n%s", c)
	}
	if st, c := f.Status("all-gone", PlanContext), f.Comment(3); !strings.HasPrefix(st, "failure: 3 blocked") || !strings.Contains(c, "WouldRemoveAllStands") {
		t.Errorf("removing all: %q\n%s", st, c)
	}
	if c := f.Comment(4); !strings.Contains(c, "replace `local-a-dev-main` (`cx22` → `cx32`, `hel1`)") || !strings.Contains(c, "+3.58 EUR") {
		t.Errorf("change:\n%s", c)
	}
	if st := f.Status("fork", PlanContext); !strings.HasPrefix(st, "failure: no plan for a pull request from a fork") || f.Comment(5) != "" {
		t.Errorf("fork: %q %q", st, f.Comment(5))
	}
	if st, c := f.Status("one-gone", PlanContext), f.Comment(6); !strings.HasPrefix(st, "success: 1 destroy") || !strings.Contains(c, "delete `local-c-dev-main` (`cx22`, `hel1`)") || !strings.Contains(c, "−4.51 EUR") {
		t.Errorf("one removal: %q\n%s", st, c)
	}
	for n, c := range f.Comments {
		if strings.Contains(c, fakes.KVPassword) || strings.Contains(c, "reg-s3cret-value") {
			t.Errorf("comment %d shows a secret", n)
		}
	}
	if len(h.eng.Destroys) != 0 || h.eng.TotalUps() != 3 {
		t.Errorf("previews changed stands: destroys %v ups %d", h.eng.Destroys, h.eng.TotalUps())
	}
}

// TestPlanShowsInstances: an instance step names the instance and its node, says whether the unit
// restarts, and costs nothing; node work does not make the cost unknown.
func TestPlanShowsInstances(t *testing.T) {
	steps := []stands.Step{
		{Op: "update", Kind: "instance", Node: "web", Instance: "web--front", Changed: "configHash,spec"},
		{Op: "update", Kind: "instance", Node: "db", Instance: "kv--cache", Changed: "spec"},
		{Op: "update", Kind: "images", Node: "web"},
		{Op: "update", Kind: "instance", Node: "db", Instance: "kv--cache", Changed: "configHash,host,spec", ConfigUnknown: true},
		{Op: "create", ServerName: "o-p-e-n", ServerType: "cx22", Location: "hel1"},
		{Op: "update", ServerName: "o-p-e-m", ServerType: "cx32", OldServerType: "cx22", Location: "hel1", OldLocation: "hel1", Changed: "serverType"},
	}
	want := []mdtext.Markup{"update instance `web--front` on `web` (restarts it)", "update instance `kv--cache` on `db`", "update `images` of `web`",
		"update instance `kv--cache` on `db` (may restart it: its configuration depends on servers not made yet)",
		"create `o-p-e-n` (`cx22`, `hel1`)", "resize `o-p-e-m` in place (`cx22` → `cx32`, `hel1`; stopped for the change, disk and addresses kept)"}
	for i, s := range steps {
		if got := stepText(s); got != want[i] {
			t.Errorf("step %d: %q, want %q", i, got, want[i])
		}
	}
	p := &prPlan{priced: true}
	row := p.priceSteps(planRow{action: "update", steps: steps}, stands.Prices{"cx22": {"hel1": {Monthly: 4.5, Currency: "EUR"}}, "cx32": {"hel1": {Monthly: 8, Currency: "EUR"}}})
	if !p.priced || !row.counted || row.cost != 8 {
		t.Errorf("cost: priced %v counted %v %v", p.priced, row.counted, row.cost)
	}
}

// TestPreviewOnTopOfAPendingChange: while a change of the tracked branch is not applied yet (its
// apply failed), a pull request that leaves the stand as the branch has it plans nothing for it, and
// one that changes it further plans it, although both heads would "update" it against the stack.
func TestPreviewOnTopOfAPendingChange(t *testing.T) {
	h, f := newPreviewHarness(t, "a", "b")
	h.mustCycle()
	h.eng.Fail["local_a_dev"] = errors.New("boom")
	h.src.Commit(map[string]string{fakes.StandFile("a"): strings.Replace(fakes.StandYML("a", ""), "cache: {}", "cache: {preferences: {port: 6390}}", 1)})
	h.mustCycle()
	if st := h.statusOf(t, "local_a_dev"); st.Phase != reason.Failed {
		t.Fatalf("a's change was applied: %+v", st) // the case needs it pending
	}
	f.Open(7, "as-main", h.files(), nil, true)
	f.Open(8, "further", h.files(), map[string]string{fakes.StandFile("a"): strings.Replace(fakes.StandYML("a", ""), "cache: {}", "cache: {preferences: {port: 6391}}", 1)}, true)
	h.mustCycle()
	if c := f.Comment(7); !strings.Contains(c, "changes no stand") {
		t.Errorf("a head equal to the branch plans something:\n%s", c)
	}
	if c := f.Comment(8); !strings.Contains(c, "`local_a_dev`") || !strings.Contains(c, "update") {
		t.Errorf("a further change of a pending stand is not planned:\n%s", c)
	}
}

// TestPreviewNewBrokenStand: a stand the pull request adds that does not validate, or that belongs to
// another owner, fails the plan with its report; the tracked branch does not have it to compare with.
func TestPreviewNewBrokenStand(t *testing.T) {
	h, f := newPreviewHarness(t, "a")
	h.mustCycle()
	f.Open(9, "new-broken", h.files(), map[string]string{fakes.StandFile("z"): strings.Replace(fakes.StandYML("z", ""), "profile: small", "profile: huge", 1)}, true)
	f.Open(10, "other-owner", h.files(), map[string]string{fakes.StandFile("q"): fakes.StandYML("q", "  owner: qa")}, true)
	h.mustCycle()
	if st, c := f.Status("new-broken", PlanContext), f.Comment(9); !strings.HasPrefix(st, "failure: 1 invalid") || !strings.Contains(c, "stands/z/stand.yml:") {
		t.Errorf("new broken stand: %q\n%s", st, c)
	}
	if st, c := f.Status("other-owner", PlanContext), f.Comment(10); !strings.HasPrefix(st, "failure: 1 invalid") || !strings.Contains(c, `owner is "qa"`) {
		t.Errorf("new stand of another owner: %q\n%s", st, c)
	}
}

// TestPreviewListsManifestWarnings: a stand in the old form (users at the top level) plans as usual,
// and the comment tells the author what to move.
func TestPreviewListsManifestWarnings(t *testing.T) {
	h, f := newPreviewHarness(t, "a")
	h.mustCycle()
	old := fakes.StandYML("z", "") + "users:\n  sudo: admin\n  app: app\n"
	f.Open(11, "old-form", h.files(), map[string]string{fakes.StandFile("z"): old}, true)
	h.mustCycle()
	st, c := f.Status("old-form", PlanContext), f.Comment(11)
	if !strings.HasPrefix(st, "success: 1 create") || !strings.Contains(c, "#### Warnings") || !strings.Contains(c, "`stands/z/stand.yml:14:1`: `top-level users is the old form") {
		t.Errorf("%q\n%s", st, c)
	}
}
