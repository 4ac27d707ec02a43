package reconcile

import (
	"context"
	"strings"
	"testing"
)

func TestCommitStatusPerStand(t *testing.T) {
	h, f := newForgeHarness(t, "a")
	h.mustCycle()
	if st := f.Status("h001", "stands/local_a_dev"); !strings.HasPrefix(st, "success: Ready") {
		t.Errorf("stands/local_a_dev on the applied commit: %q", st)
	}
	h.eng.Fail["local_b_dev"] = context.DeadlineExceeded
	h.src.Commit(repoWith("b"))
	h.mustCycle()
	if st := f.Status("h002", "stands/local_b_dev"); !strings.HasPrefix(st, "failure: Failed") {
		t.Errorf("stands/local_b_dev after a failure: %q", st)
	}
}
