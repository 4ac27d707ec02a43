package reconcile

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestPlansRunOffThePollPath: while a pull request's plan hangs in its preview, cycles go on and a
// change of another stand on the tracked branch is applied.
func TestPlansRunOffThePollPath(t *testing.T) {
	h, f := newPreviewHarness(t, "a", "b")
	h.mustCycle()
	h.eng.mu.Lock()
	h.eng.previewGate, h.eng.previewing = make(chan struct{}), make(chan string, 1)
	h.eng.mu.Unlock()
	f.open(1, "head1", h.files(), map[string]string{standFile("a"): standYML("a", "node_profiles:\n  small:\n    type_serv: cx32")}, true)
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.eng.previewing:
	case <-time.After(10 * time.Second):
		t.Fatal("the plan did not start")
	}
	h.src.commit(map[string]string{standFile("b"): standYML("b", "node_profiles:\n  small:\n    type_serv: cx32")})
	done := make(chan error, 1)
	go func() { done <- h.r.Cycle(context.Background()) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("a cycle waited for a pull request's plan")
	}
	h.r.ops.Wait()
	if h.eng.upsOf("local_b_dev") != 2 {
		t.Errorf("b applied %d times while a plan hung, want 2", h.eng.upsOf("local_b_dev"))
	}
	close(h.eng.previewGate)
	h.r.Wait()
	if !strings.Contains(f.comment(1), "local_a_dev") {
		t.Errorf("the plan did not finish:\n%s", f.comment(1))
	}
}

// TestPlannedHeadsSurviveRestarts: a head planned before a restart is not planned again; a head
// whose plan is interrupted by every stop is tried maxPlanAttempts times, then given up with
// stands/plan failure, not replayed forever.
func TestPlannedHeadsSurviveRestarts(t *testing.T) {
	state := filepath.Join(t.TempDir(), "planned.json")
	var stopped []*Reconciler
	restart := func(h *harness) {
		t.Helper()
		stopped = append(stopped, h.r)
		h.r = New(h.r.cfg, h.src, h.eng, h.sec)
	}
	h, f := newPreviewHarness(t, "a")
	h.r.cfg.PreviewState = state
	h.mustCycle()
	f.open(1, "head1", h.files(), map[string]string{standFile("c"): standYML("c", "")}, true)
	h.mustCycle()
	previews := h.eng.previews
	restart(h)
	h.mustCycle()
	if h.eng.previews != previews {
		t.Errorf("a head planned before the restart was planned again")
	}

	// Every plan of head2 hangs until the reconciler stops, as a kill would leave it.
	f.open(1, "head2", h.files(), map[string]string{standFile("c"): standYML("c", ""), standFile("d"): standYML("d", "")}, true)
	h.eng.mu.Lock()
	h.eng.previewGate, h.eng.previewing = make(chan struct{}), make(chan string, 10)
	gate := h.eng.previewGate
	h.eng.mu.Unlock()
	t.Cleanup(func() {
		close(gate)
		for _, r := range stopped {
			r.pw.wg.Wait() // before the state file's folder goes
		}
	})
	tries := 0
	for range maxPlanAttempts + 2 {
		restart(h)
		if err := h.r.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.eng.previewing:
			tries++
			h.r.pw.cancel() // the process is gone: its worker never finishes this plan
		case <-time.After(3 * time.Second):
		}
	}
	if tries != maxPlanAttempts {
		t.Errorf("head2 was tried %d times, want %d", tries, maxPlanAttempts)
	}
	if st := f.status("head2", PlanContext); !strings.HasPrefix(st, "failure: not planned: 3 tries") {
		t.Errorf("stands/plan of the head given up on: %q", st)
	}
}

// TestNoPlanForAGitPullRequests: a pull request whose head is no branch's tip (AGit: refs/for/…,
// which users without write access can open) or comes from a fork gets stands/plan failure saying
// why, and nothing of it is rendered or previewed.
func TestNoPlanForAGitPullRequests(t *testing.T) {
	h, f := newPreviewHarness(t, "a")
	h.mustCycle()
	f.open(1, "agit1", h.files(), map[string]string{standFile("c"): standYML("c", "")}, true)
	f.agit(1)
	f.open(2, "fork1", h.files(), map[string]string{standFile("d"): standYML("d", "")}, false)
	h.mustCycle()
	if h.eng.previews != 0 || f.comment(1) != "" || f.comment(2) != "" {
		t.Errorf("%d previews, comments %q %q", h.eng.previews, f.comment(1), f.comment(2))
	}
	for sha, want := range map[string]string{"agit1": "failure: no plan: the head is not the tip of a branch", "fork1": "failure: no plan for a pull request from a fork"} {
		if st := f.status(sha, PlanContext); !strings.HasPrefix(st, want) {
			t.Errorf("stands/plan of %s: %q, want %q", sha, st, want)
		}
	}
}

// TestHeadTooLargeFailsOnce: a head over the snapshot's size limit gets stands/plan failure once;
// later cycles do not fetch it again.
func TestHeadTooLargeFailsOnce(t *testing.T) {
	h, f := newPreviewHarness(t, "a")
	h.mustCycle()
	f.tooLarge = true
	f.open(1, "big1", h.files(), map[string]string{standFile("c"): standYML("c", "")}, true)
	h.mustCycle()
	fetches := f.fetches
	h.mustCycle()
	h.mustCycle()
	if st := f.status("big1", PlanContext); !strings.HasPrefix(st, "failure: not planned: the commit holds more files") {
		t.Errorf("stands/plan: %q", st)
	}
	if fetches != 1 || f.fetches != fetches {
		t.Errorf("the head was fetched %d times, then %d more", fetches, f.fetches-fetches)
	}
}
