package reconcile

import (
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// TestOwnerChangeDestroysNothing: editing stand.owner leaves the old stand's stack as it is,
// Blocked with OwnerChanged (the new id is another owner's, not this reconciler's), in the cycle
// and in a pull request's plan; only the last stand is in the repository, so no guard but this one
// stands in the way of the destroy.
func TestOwnerChangeDestroysNothing(t *testing.T) {
	h, f := newPreviewHarness(t, "a")
	h.r.cfg.AllowMassDestroy = true // the share and last-stand guards would hold it too
	h.mustCycle()
	changed := map[string]string{standFile("a"): standYML("a", "  owner: other")}
	f.open(1, "head1", h.files(), changed, true)
	h.mustCycle()
	h.src.commit(changed) // merged
	h.mustCycle()
	h.mustCycle()
	if len(h.eng.destroys) != 0 {
		t.Fatalf("destroyed %v", h.eng.destroys)
	}
	st := h.src.statusOf(t, "local_a_dev")
	if st.Phase != reason.Blocked || st.Reason != reason.OwnerChanged || !strings.Contains(st.Message, "other_a_dev") {
		t.Errorf("status: %s %s %q", st.Phase, st.Reason, st.Message)
	}
	if c := f.comment(1); !strings.Contains(c, "OwnerChanged") {
		t.Errorf("the plan does not refuse the owner change:\n%s", c)
	}
}

// TestOtherOwnersStacksAreNotOurs: on a backend shared with another owner's reconciler, its stacks
// are neither destroyed nor counted nor given a status, even when this repository declares none
// of them.
func TestOtherOwnersStacksAreNotOurs(t *testing.T) {
	h := newHarness(t, repoWith("a"), func(c *Config) { c.AllowMassDestroy = true })
	h.eng.stacks["other_x_dev"] = stands.StackInfo{Project: "x", Env: "dev", StandID: "other_x_dev", Owned: true, Known: true, SpecHash: "v1-x"}
	h.mustCycle()
	h.mustCycle()
	if len(h.eng.destroys) != 0 {
		t.Fatalf("destroyed %v", h.eng.destroys)
	}
	if st := h.r.Status("other_x_dev"); st != nil {
		t.Errorf("another owner's stand got a status: %+v", st)
	}
}

// TestPlanRefusesAProtectedReplacement: a pull request that would replace a server of a protected
// stand gets the refusal in its plan, naming the server and the input, and stands/plan failure.
func TestPlanRefusesAProtectedReplacement(t *testing.T) {
	h, f := newPreviewHarness(t, "a")
	h.src.commit(map[string]string{standFile("a"): standYML("a", "  protect: true")})
	h.mustCycle()
	f.open(1, "head1", h.files(), map[string]string{standFile("a"): standYML("a", "  protect: true\nnode_profiles:\n  small:\n    type_serv: cx32")}, true)
	h.mustCycle()
	c := f.comment(1)
	if !strings.Contains(c, "⛔ refused") || !strings.Contains(c, "Protected: server local-a-dev-main would be replaced (serverType changed)") {
		t.Errorf("plan:\n%s", c)
	}
	if st := f.status("head1", PlanContext); !strings.HasPrefix(st, "failure") {
		t.Errorf("stands/plan: %q", st)
	}
}
