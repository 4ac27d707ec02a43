package prplan

import (
	"context"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/test/fakes"
)

func resized(id, serverType string) string {
	return fakes.StandYML(id, "node_profiles:\n  small:\n    type_serv: "+serverType)
}

// gatePreviews makes every preview wait until the returned func is called, reporting the stand
// previewed on started.
func gatePreviews(h *harness) (started chan string, release func()) {
	h.eng.Mu.Lock()
	defer h.eng.Mu.Unlock()
	h.eng.PreviewGate, h.eng.Previewing = make(chan struct{}), make(chan string, 100)
	gate := h.eng.PreviewGate
	return h.eng.Previewing, func() { close(gate) }
}

func sorted(s []string) []string {
	s = slices.Clone(s)
	slices.Sort(s)
	return s
}

func drain(c chan string) []string {
	var out []string
	for {
		select {
		case id := <-c:
			out = append(out, id)
		default:
			return out
		}
	}
}

// TestPlanFollowsTheTrackedBranch: a pull request is planned as merged into the tracked branch, and
// planned again when the branch moves in a way that changes its plan: stands/plan is pending ("main
// moved; planning again") from the cycle that sees the move, and the new comment names the new base
// and holds the branch's change. A stand folder both sides changed is a conflict the plan names and
// fails on. A pull request the move does not touch is not previewed again.
func TestPlanFollowsTheTrackedBranch(t *testing.T) {
	h, f := newPreviewHarness(t, "a", "b")
	h.mustCycle()
	cut := h.files()
	base := string(cut["bases/common.yml"].Data)
	f.Open(1, "shared", cut, map[string]string{"bases/common.yml": strings.Replace(base, "type_serv: cx22", "type_serv: cx32", 1)}, true)
	f.Open(2, "resize-b", cut, map[string]string{fakes.StandFile("b"): resized("b", "cx42")}, true)
	f.Open(3, "resize-a", cut, map[string]string{fakes.StandFile("a"): resized("a", "cx32")}, true)
	h.mustCycle()
	planned := map[int64]string{1: f.Comment(1), 2: f.Comment(2), 3: f.Comment(3)}
	for n, c := range planned {
		if !strings.Contains(c, "merged into `main` at `h001`") {
			t.Fatalf("plan %d does not name its base:\n%s", n, c)
		}
	}
	if strings.Contains(planned[1], "local_e_dev") || !strings.HasPrefix(f.Status("resize-a", PlanContext), "success: 1 update") {
		t.Fatalf("before the move: %q\n%s", f.Status("resize-a", PlanContext), planned[1])
	}

	// main adds a stand (the base change of #1 resizes it too) and resizes a (as #3 does, to
	// another type); #2 is about b, which main leaves alone.
	started, release := gatePreviews(h)
	h.src.Commit(map[string]string{fakes.StandFile("e"): fakes.StandYML("e", ""), fakes.StandFile("a"): resized("a", "cx52")})
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	var first string
	select {
	case first = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no plan started after the move")
	}
	if st := f.Status("shared", PlanContext); st != "pending: main moved; planning again" {
		t.Errorf("stands/plan of shared while its plan is made again: %q", st)
	}
	// #3 is judged on another worker, and needs no preview: pending, or planned already; never
	// its old success.
	if st := f.Status("resize-a", PlanContext); st != "pending: main moved; planning again" && !strings.HasPrefix(st, "failure: 1 changed on both sides") {
		t.Errorf("stands/plan of resize-a while #1's plan is made again: %q", st)
	}
	if st := f.Status("resize-b", PlanContext); !strings.HasPrefix(st, "success: 1 update") {
		t.Errorf("stands/plan of a pull request the move does not touch: %q", st)
	}
	release()
	h.r.Wait()
	// #1 is previewed again where its base change now shows: b, and main's new stand e; a is main's
	// (its own type wins over the base's). #2 and #3 need no preview.
	if got := append(drain(started), first); !slices.Equal(sorted(got), []string{"local_b_dev", "local_e_dev"}) {
		t.Errorf("previewed after the move: %v, want #1's b and e only", got)
	}
	c := f.Comment(1)
	if !strings.Contains(c, "merged into `main` at `h002`") || !strings.Contains(c, "local_e_dev") {
		t.Errorf("#1's plan is not of its merge into the moved branch:\n%s", c)
	}
	if c := f.Comment(2); c != planned[2] {
		t.Errorf("#2 was planned again:\n%s", c)
	}
	st, c := f.Status("resize-a", PlanContext), f.Comment(3)
	if !strings.HasPrefix(st, "failure: 1 changed on both sides") || !strings.Contains(c, "#### Conflicts") || !strings.Contains(c, "- `stands/a`") ||
		strings.Contains(c, "| `local_a_dev`") {
		t.Errorf("#3, which changes the stand main changed: %q\n%s", st, c)
	}
}

// TestAWaitingPlanSaysTheBranchMoved: with one worker, busy with a plan the move changes, a pull
// request waiting behind it does not show its old success: stands/plan is pending from the cycle
// that sees the move, and back to what it was, without a preview, once it is judged unchanged.
func TestAWaitingPlanSaysTheBranchMoved(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), func(_ *reconcile.Config, c *Config) { c.Workers = 1 })
	f := h.forge
	h.mustCycle()
	cut := h.files()
	base := string(cut["bases/common.yml"].Data)
	f.Open(1, "shared", cut, map[string]string{"bases/common.yml": strings.Replace(base, "type_serv: cx22", "type_serv: cx32", 1)}, true)
	f.Open(2, "resize-b", cut, map[string]string{fakes.StandFile("b"): resized("b", "cx42")}, true)
	h.mustCycle()
	was, comment := f.Status("resize-b", PlanContext), f.Comment(2)
	if !strings.HasPrefix(was, "success: 1 update") {
		t.Fatalf("stands/plan of #2 before the move: %q", was)
	}

	started, release := gatePreviews(h)
	h.src.Commit(map[string]string{fakes.StandFile("e"): fakes.StandYML("e", "")})
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	var first string
	select {
	case first = <-started:
	case <-time.After(10 * time.Second):
		t.Fatal("no plan started after the move")
	}
	if st := f.Status("resize-b", PlanContext); st != "pending: main moved; planning again" {
		t.Errorf("stands/plan of #2 while it waits for the worker: %q", st)
	}
	release()
	h.r.Wait()
	// #1's base change resizes every stand, main's new e among them; b is #2's too, once.
	if got := sorted(append(drain(started), first)); !slices.Equal(got, []string{"local_a_dev", "local_b_dev", "local_e_dev"}) {
		t.Errorf("previewed after the move: %v, want #1's a, b and e only", got)
	}
	if st := f.Status("resize-b", PlanContext); st != was {
		t.Errorf("stands/plan of #2 once judged unchanged: %q, want %q as before the move", st, was)
	}
	if c := f.Comment(2); c != comment {
		t.Errorf("#2 was planned again:\n%s", c)
	}
	if !strings.Contains(f.Comment(1), "merged into `main` at `h002`") {
		t.Errorf("#1 was not planned on the moved branch:\n%s", f.Comment(1))
	}
}

// TestPlanOfTheMergeNotTheHead: a branch cut before main removed a stand and changed another does
// not plan their revival or their revert: the merge keeps main's side of what only main changed.
func TestPlanOfTheMergeNotTheHead(t *testing.T) {
	h, f := newPreviewHarness(t, "a", "b", "c")
	h.mustCycle()
	cut := h.files()
	h.src.Commit(map[string]string{fakes.StandFile("c"): "", fakes.StandFile("b"): resized("b", "cx32")})
	f.Open(1, "old-branch", cut, map[string]string{fakes.StandFile("a"): resized("a", "cx32")}, true)
	h.mustCycle()
	c := f.Comment(1)
	if !strings.Contains(c, "local_a_dev") || strings.Contains(c, "local_b_dev") || strings.Contains(c, "local_c_dev") {
		t.Errorf("the plan shows what only main changed:\n%s", c)
	}
	if st := f.Status("old-branch", PlanContext); !strings.HasPrefix(st, "success: 1 update") {
		t.Errorf("stands/plan: %q", st)
	}
}

// TestAMoveStopsAStalePlan: a plan running when the tracked branch moves stops, without counting as
// a try, and the pull request is planned on the moved branch.
func TestAMoveStopsAStalePlan(t *testing.T) {
	h, f := newPreviewHarness(t, "a", "b")
	h.mustCycle()
	started, release := gatePreviews(h)
	f.Open(1, "resize-a", h.files(), map[string]string{fakes.StandFile("a"): resized("a", "cx32")}, true)
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-started
	for range maxPlanAttempts {
		h.src.Commit(map[string]string{fakes.StandFile("b"): resized("b", "cx32")})
		if err := h.r.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		select {
		case <-started:
		case <-time.After(10 * time.Second):
			t.Fatal("the stale plan did not give way")
		}
		h.src.Commit(map[string]string{fakes.StandFile("b"): resized("b", "cx22")})
	}
	release()
	h.r.Wait()
	if st := f.Status("resize-a", PlanContext); !strings.HasPrefix(st, "success: 1 update") {
		t.Errorf("stands/plan after the moves: %q", st)
	}
	h.eng.Mu.Lock()
	ended := len(h.eng.PreviewsEnded)
	h.eng.Mu.Unlock()
	if ended != maxPlanAttempts {
		t.Errorf("%d previews stopped by a move, want %d", ended, maxPlanAttempts)
	}
}

// TestConflictsOnlyWhereAStandReads: a file outside the stand folders that both sides changed is a
// conflict when a stand reads it (the base manifest), and not when none does (a README).
func TestConflictsOnlyWhereAStandReads(t *testing.T) {
	h, f := newPreviewHarness(t, "a")
	h.mustCycle()
	cut := h.files()
	base := string(cut["bases/common.yml"].Data)
	h.src.Commit(map[string]string{"bases/common.yml": strings.Replace(base, "type_serv: cx22", "type_serv: cx42", 1), "README.md": "main's"})
	f.Open(1, "base-and-readme", cut, map[string]string{"bases/common.yml": strings.Replace(base, "type_serv: cx22", "type_serv: cx32", 1)}, true)
	f.Open(2, "readme", cut, map[string]string{"README.md": "the branch's", fakes.StandFile("z"): fakes.StandYML("z", "")}, true)
	h.mustCycle()
	if st, c := f.Status("base-and-readme", PlanContext), f.Comment(1); !strings.HasPrefix(st, "failure: 1 changed on both sides") || !strings.Contains(c, "- `bases/common.yml`") {
		t.Errorf("a base manifest both sides changed: %q\n%s", st, c)
	}
	if st, c := f.Status("readme", PlanContext), f.Comment(2); !strings.HasPrefix(st, "success: 1 create") || strings.Contains(c, "Conflicts") {
		t.Errorf("a file no stand reads, both sides changed: %q\n%s", st, c)
	}
}

// resizeAPlanned opens pull request #1 (head "resize-a"), which resizes stand a, and plans it.
func resizeAPlanned(t *testing.T) (*harness, *fakes.Forge, map[string]string) {
	t.Helper()
	h, f := newPreviewHarness(t, "a", "b")
	h.mustCycle()
	change := map[string]string{fakes.StandFile("a"): resized("a", "cx32")}
	f.Open(1, "resize-a", h.files(), change, true)
	h.mustCycle()
	h.r.Wait()
	if st, changes := f.Status("resize-a", PlanContext), h.pl.head(1).Changes; !strings.HasPrefix(st, "success: 1 update") || len(changes) != 1 {
		t.Fatalf("before the merge: %q, changes %v\n%s", st, changes, f.Comment(1))
	}
	return h, f, change
}

// TestAMergedPullRequestKeepsItsPlan: the tracked branch moves to the merge of a pull request that
// Gitea still lists open (it marks it merged a moment later). Its head is in the branch: it is not
// planned again, so the comment the reviewer approved is not overwritten with an empty plan, the
// changes it showed stay for the review of the merge's applies, and stands/plan stays.
func TestAMergedPullRequestKeepsItsPlan(t *testing.T) {
	h, f, change := resizeAPlanned(t)
	comment, status, changes := f.Comment(1), f.Status("resize-a", PlanContext), h.pl.head(1).Changes

	started, release := gatePreviews(h)
	h.src.Commit(change)
	f.Mu.Lock()
	f.InBranch[f.Prs[0].Ref()] = true
	fetches := f.Fetches
	f.Mu.Unlock()
	h.mustCycle()
	release()
	h.r.Wait()
	if got := drain(started); len(got) > 0 {
		t.Errorf("previewed after the merge: %v", got)
	}
	if c := f.Comment(1); c != comment {
		t.Errorf("the merged pull request's comment was rewritten:\n%s", c)
	}
	if st := f.Status("resize-a", PlanContext); st != status {
		t.Errorf("stands/plan of the merged head: %q, want %q", st, status)
	}
	if got := h.pl.head(1).Changes; !maps.Equal(got, changes) {
		t.Errorf("the changes the plan showed: %v, want %v", got, changes)
	}
	h.src.Commit(map[string]string{fakes.StandFile("e"): fakes.StandYML("e", "")})
	h.mustCycle()
	h.r.Wait()
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Fetches != fetches+1 {
		t.Errorf("the merged head fetched %d times over two moves, want once", f.Fetches-fetches)
	}
}

// TestASquashedChangeStaysReviewed: main makes the pull request's change in a commit of its own (a
// squash or rebase merge Gitea has not marked yet): planned again, the merge changes no stand, but
// the change the head's plan showed stays the one the review of main's applies finds.
func TestASquashedChangeStaysReviewed(t *testing.T) {
	h, f, change := resizeAPlanned(t)
	changes := h.pl.head(1).Changes
	h.src.Commit(change)
	h.mustCycle()
	h.r.Wait()
	if c := f.Comment(1); !strings.Contains(c, "changes no stand") {
		t.Fatalf("the plan after main made the change:\n%s", c)
	}
	if got := h.pl.head(1).Changes; !maps.Equal(got, changes) {
		t.Errorf("the changes the head's plan showed: %v, want %v", got, changes)
	}
}
