package prplan

import (
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/test/fakes"
)

// TestOwnerChangeDestroysNothing: editing stand.owner leaves the old stand's stack as it is,
// Blocked with OwnerChanged (the new id is another owner's, not this reconciler's), in the cycle
// and in a pull request's plan; only the last stand is in the repository, so no guard but this one
// stands in the way of the destroy.
func TestOwnerChangeDestroysNothing(t *testing.T) {
	h := newHarness(t, repoWith("a"), func(c *reconcile.Config, _ *Config) {
		c.AllowMassDestroy = true // the share and last-stand guards would hold it too
	})
	f := h.forge
	h.mustCycle()
	changed := map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  owner: other")}
	f.Open(1, "head1", h.files(), changed, true)
	h.mustCycle()
	if c := f.Comment(1); !strings.Contains(c, "OwnerChanged") {
		t.Errorf("the plan does not refuse the owner change:\n%s", c)
	}
	h.src.Commit(changed) // merged
	f.Close(1)
	h.mustCycle()
	h.mustCycle()
	if len(h.eng.Destroys) != 0 {
		t.Fatalf("destroyed %v", h.eng.Destroys)
	}
	st := h.statusOf(t, "local_a_dev")
	if st.Phase != reason.Blocked || st.Reason != reason.OwnerChanged || !strings.Contains(st.Message, "other_a_dev") {
		t.Errorf("status: %s %s %q", st.Phase, st.Reason, st.Message)
	}
}

// TestPlanRefusesAProtectedReplacement: a pull request that would replace a server of a protected
// stand gets the refusal in its plan, naming the server and the input, and stands/plan failure.
func TestPlanRefusesAProtectedReplacement(t *testing.T) {
	h, f := newPreviewHarness(t, "a")
	h.src.Commit(map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  protect: true")})
	h.mustCycle()
	f.Open(1, "head1", h.files(), map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  protect: true\nnode_profiles:\n  small:\n    type_serv: cx32")}, true)
	h.mustCycle()
	c := f.Comment(1)
	if !strings.Contains(c, "⛔ refused") || !strings.Contains(c, "Protected: server local-a-dev-main would be replaced (serverType changed)") {
		t.Errorf("plan:\n%s", c)
	}
	if st := f.Status("head1", PlanContext); !strings.HasPrefix(st, "failure") {
		t.Errorf("stands/plan: %q", st)
	}
}
