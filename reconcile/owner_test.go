package reconcile

import (
	"testing"

	"github.com/stands-engine/stands-reconciler/stands"
)

// TestOtherOwnersStacksAreNotOurs: on a backend shared with another owner's reconciler, its stacks
// are neither destroyed nor counted nor given a status, even when this repository declares none
// of them.
func TestOtherOwnersStacksAreNotOurs(t *testing.T) {
	h := newHarness(t, repoWith("a"), func(c *Config) { c.AllowMassDestroy = true })
	h.eng.Stacks["other_x_dev"] = stands.StackInfo{Project: "x", Env: "dev", StandID: "other_x_dev", Owned: true, Known: true, SpecHash: "v1-x"}
	h.mustCycle()
	h.mustCycle()
	if len(h.eng.Destroys) != 0 {
		t.Fatalf("destroyed %v", h.eng.Destroys)
	}
	if st := h.r.Status("other_x_dev"); st != nil {
		t.Errorf("another owner's stand got a status: %+v", st)
	}
}
