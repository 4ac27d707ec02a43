package prplan

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/test/fakes"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// TestPlansRunOffThePollPath: while a pull request's plan hangs in its preview, cycles go on and a
// change of another stand on the tracked branch is applied.
func TestPlansRunOffThePollPath(t *testing.T) {
	h, f := newPreviewHarness(t, "a", "b")
	h.mustCycle()
	h.eng.Mu.Lock()
	h.eng.PreviewGate, h.eng.Previewing = make(chan struct{}), make(chan string, 1)
	h.eng.Mu.Unlock()
	f.Open(1, "head1", h.files(), map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "node_profiles:\n  small:\n    type_serv: cx32")}, true)
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	select {
	case <-h.eng.Previewing:
	case <-time.After(10 * time.Second):
		t.Fatal("the plan did not start")
	}
	h.src.Commit(map[string]string{fakes.StandFile("b"): fakes.StandYML("b", "node_profiles:\n  small:\n    type_serv: cx32")})
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
	wait.For(t, "b applied again while a plan hangs", 10*time.Second, func() bool { return h.eng.UpsOf("local_b_dev") == 2 })
	close(h.eng.PreviewGate)
	h.r.Wait()
	if !strings.Contains(f.Comment(1), "local_a_dev") {
		t.Errorf("the plan did not finish:\n%s", f.Comment(1))
	}
}

// TestPlannedHeadsSurviveRestarts: a head planned before a restart is not planned again; a head
// whose plan is interrupted by every stop is tried maxPlanAttempts times, then given up with
// stands/plan failure, not replayed forever.
func TestPlannedHeadsSurviveRestarts(t *testing.T) {
	state := filepath.Join(t.TempDir(), "planned.json")
	var stopped []*Planner
	restart := func(h *harness) {
		t.Helper()
		stopped = append(stopped, h.pl)
		h.start()
	}
	h := newHarness(t, repoWith("a"), func(_ *reconcile.Config, c *Config) { c.StateFile = state })
	f := h.forge
	h.mustCycle()
	f.Open(1, "head1", h.files(), map[string]string{fakes.StandFile("c"): fakes.StandYML("c", "")}, true)
	h.mustCycle()
	previews := h.eng.Previews
	restart(h)
	h.mustCycle()
	if h.eng.Previews != previews {
		t.Errorf("a head planned before the restart was planned again")
	}

	// Every plan of head2 hangs until the reconciler stops, as a kill would leave it.
	f.Open(1, "head2", h.files(), map[string]string{fakes.StandFile("c"): fakes.StandYML("c", ""), fakes.StandFile("d"): fakes.StandYML("d", "")}, true)
	h.eng.Mu.Lock()
	h.eng.PreviewGate, h.eng.Previewing = make(chan struct{}), make(chan string, 10)
	gate := h.eng.PreviewGate
	h.eng.Mu.Unlock()
	t.Cleanup(func() {
		close(gate)
		for _, pl := range stopped {
			pl.w.wg.Wait() // before the state file's folder goes
		}
	})
	tries := 0
	for range maxPlanAttempts + 2 {
		restart(h)
		if err := h.r.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-h.eng.Previewing:
			tries++
			h.pl.w.cancel() // the process is gone: its worker never finishes this plan
		case <-time.After(3 * time.Second):
		}
	}
	if tries != maxPlanAttempts {
		t.Errorf("head2 was tried %d times, want %d", tries, maxPlanAttempts)
	}
	if st := f.Status("head2", PlanContext); !strings.HasPrefix(st, "failure: not planned: 3 tries") {
		t.Errorf("stands/plan of the head given up on: %q", st)
	}
}

// TestNoPlanForAGitPullRequests: a pull request whose head is no branch's tip (AGit: refs/for/…,
// which users without write access can open) or comes from a fork gets stands/plan failure saying
// why, and nothing of it is rendered or previewed.
func TestNoPlanForAGitPullRequests(t *testing.T) {
	h, f := newPreviewHarness(t, "a")
	h.mustCycle()
	f.Open(1, "agit1", h.files(), map[string]string{fakes.StandFile("c"): fakes.StandYML("c", "")}, true)
	f.Agit(1)
	f.Open(2, "fork1", h.files(), map[string]string{fakes.StandFile("d"): fakes.StandYML("d", "")}, false)
	h.mustCycle()
	if h.eng.Previews != 0 || f.Comment(1) != "" || f.Comment(2) != "" {
		t.Errorf("%d previews, comments %q %q", h.eng.Previews, f.Comment(1), f.Comment(2))
	}
	for sha, want := range map[string]string{"agit1": "failure: no plan: the head is not the tip of a branch", "fork1": "failure: no plan for a pull request from a fork"} {
		if st := f.Status(sha, PlanContext); !strings.HasPrefix(st, want) {
			t.Errorf("stands/plan of %s: %q, want %q", sha, st, want)
		}
	}
}

// TestHeadTooLargeFailsOnce: a head over the snapshot's size limit gets stands/plan failure once;
// later cycles do not fetch it again.
func TestHeadTooLargeFailsOnce(t *testing.T) {
	h, f := newPreviewHarness(t, "a")
	h.mustCycle()
	f.TooLarge = true
	f.Open(1, "big1", h.files(), map[string]string{fakes.StandFile("c"): fakes.StandYML("c", "")}, true)
	h.mustCycle()
	fetches := f.Fetches
	h.mustCycle()
	h.mustCycle()
	if st := f.Status("big1", PlanContext); !strings.HasPrefix(st, "failure: not planned: the commit's files hold more than 64 MiB, more than the reconciler reads") {
		t.Errorf("stands/plan: %q", st)
	}
	if fetches != 1 || f.Fetches != fetches {
		t.Errorf("the head was fetched %d times, then %d more", fetches, f.Fetches-fetches)
	}
}
