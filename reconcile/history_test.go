package reconcile

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/test/fakes"
)

// twelve is a repository of twelve stands, s00…s11.
func twelve() (map[string]string, []string) {
	var ids []string
	for i := range 12 {
		ids = append(ids, fmt.Sprintf("s%02d", i))
	}
	return repoWith(ids...), ids
}

// changed lists the files each status commit since commit n touched.
func (s *fakeSource) changedSince(n int) [][]string {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	var out [][]string
	for _, files := range s.Published[n:] {
		var names []string
		for p := range files {
			names = append(names, p)
		}
		slices.Sort(names)
		out = append(out, names)
	}
	return out
}

// TestRestartTouchesOnlyTheChangedStand: twelve stands applied; a restarted reconciler makes no
// engine call and no commit; a commit changing one stand, after another restart, makes exactly one
// engine call (that stand's apply) and status commits of that stand only, and the eleven others
// keep their lastSuccessfulCommit.
func TestRestartTouchesOnlyTheChangedStand(t *testing.T) {
	repo, _ := twelve()
	h := newHarness(t, repo, func(c *Config) { c.NodesMode = "skipped" })
	h.mustCycle()
	if h.eng.TotalUps() != 12 {
		t.Fatalf("%d ups, want 12", h.eng.TotalUps())
	}
	restart := func() {
		h.r = New(h.r.cfg, h.src, h.eng, h.sec)
	}
	restart()
	calls, commits := h.eng.Calls, h.src.Commits()
	for range 3 {
		h.mustCycle()
	}
	if h.eng.Calls != calls || h.src.Commits() != commits {
		t.Errorf("after a restart, no-op cycles made %d engine calls and %d commits", h.eng.Calls-calls, h.src.Commits()-commits)
	}

	h.src.Commit(map[string]string{fakes.StandFile("s05"): strings.Replace(fakes.StandYML("s05", ""), "cache: {}", "cache: {preferences: {port: 6390}}", 1)})
	restart()
	h.mustCycle()
	h.mustCycle()
	if h.eng.Calls != calls+1 || h.eng.UpsOf("local_s05_dev") != 2 {
		t.Errorf("one changed stand: %d engine calls, %d ups of s05", h.eng.Calls-calls, h.eng.UpsOf("local_s05_dev"))
	}
	for _, files := range h.src.changedSince(commits) {
		for _, f := range files {
			if f != "STATUS.md" && f != "status/local_s05_dev.json" {
				t.Errorf("a status commit for one changed stand touched %s (%v)", f, files)
			}
		}
	}
	for i := range 12 {
		id := fmt.Sprintf("local_s%02d_dev", i)
		want := "h001"
		if i == 5 {
			want = "h002"
		}
		if st := h.src.statusOf(t, id); st.LastSuccessfulCommit != want || st.Phase != reason.Ready {
			t.Errorf("%s: %s at %s, want Ready at %s", id, st.Phase, st.LastSuccessfulCommit, want)
		}
	}
}

// TestObservedStandKeepsItsCommit: a stand read again because its stack changed behind the
// reconciler's back keeps the commit it was applied from; one whose apply ended unseen (its status
// still Progressing on the commit it was attempted at) takes that commit.
func TestObservedStandKeepsItsCommit(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), nil)
	h.mustCycle()
	h.src.Commit(map[string]string{fakes.StandFile("b"): strings.Replace(fakes.StandYML("b", ""), "cache: {}", "cache: {preferences: {port: 6390}}", 1)})
	h.eng.Touch("local_a_dev")
	calls := h.eng.Calls
	h.mustCycle()
	if h.eng.Calls != calls+2 || h.eng.UpsOf("local_a_dev") != 1 {
		t.Fatalf("%d engine calls (want a's read and b's apply), %d ups of a", h.eng.Calls-calls, h.eng.UpsOf("local_a_dev"))
	}
	if st := h.src.statusOf(t, "local_a_dev"); st.LastSuccessfulCommit != "h001" || st.StateDigest != "local_a_dev-1+" {
		t.Errorf("a, read again at h002: %+v", st)
	}

	// b's apply at h003 ends while the reconciler is gone: its last status says Progressing.
	h.src.Commit(map[string]string{fakes.StandFile("b"): strings.Replace(fakes.StandYML("b", ""), "cache: {}", "cache: {preferences: {port: 6391}}", 1)})
	h.eng.Gate = make(chan struct{})
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	h.eng.WaitRunning(t, 1)
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Progressing || st.LastAttemptedCommit != "h003" {
		t.Fatalf("b while applying: %+v", st)
	}
	h.src.Mu.Lock()
	h.src.Down = true // its final status is never committed
	h.src.Mu.Unlock()
	close(h.eng.Gate)
	h.r.Wait()
	h.src.Mu.Lock()
	h.src.Down = false
	h.src.Mu.Unlock()
	h.eng.Gate = nil
	h.src.Commit(map[string]string{"README.md": "another commit"})
	h.r = New(h.r.cfg, h.src, h.eng, h.sec)
	h.mustCycle()
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Ready || st.LastSuccessfulCommit != "h003" || st.LastAttemptedCommit != "h003" {
		t.Errorf("b, found applied after a restart at h004: %+v", st)
	}
	if ups := h.eng.UpsOf("local_b_dev"); ups != 3 {
		t.Errorf("b: %d ups, want 3 (no apply for the read)", ups)
	}
}

// TestNodesModeChangeApplies: a stack applied in another node mode than the reconciler's is applied
// again, though its spec is unchanged.
func TestNodesModeChangeApplies(t *testing.T) {
	h := newHarness(t, repoWith("a"), func(c *Config) { c.NodesMode = "skipped" })
	h.mustCycle()
	calls := h.eng.Calls
	h.mustCycle()
	if h.eng.Calls != calls {
		t.Fatalf("same mode: %d engine calls", h.eng.Calls-calls)
	}
	cfg := h.r.cfg
	cfg.NodesMode = "full"
	h.r = New(cfg, h.src, h.eng, h.sec)
	h.mustCycle()
	if h.eng.Calls != calls+1 {
		t.Errorf("another mode: %d engine calls, want the apply", h.eng.Calls-calls)
	}
}

// TestStatusCommitsCoalesced: ten applies ending 20 ms apart are one status commit with a status
// delay, and a commit each without (the control).
func TestStatusCommitsCoalesced(t *testing.T) {
	for _, tc := range []struct {
		delay    time.Duration
		min, max int
	}{
		{delay: 0, min: 10, max: 11},
		{delay: 2 * time.Second, min: 1, max: 2},
	} {
		t.Run(fmt.Sprint("delay ", tc.delay), func(t *testing.T) {
			repo, _ := twelve()
			for _, id := range []string{"s10", "s11"} {
				delete(repo, fakes.StandFile(id))
			}
			h := newHarness(t, repo, func(c *Config) { c.Workers, c.StatusDelay = 10, tc.delay })
			h.eng.Gate = make(chan struct{})
			if err := h.r.Cycle(context.Background()); err != nil {
				t.Fatal(err)
			}
			h.eng.WaitRunning(t, 10)
			for range 10 {
				h.eng.Gate <- struct{}{}
				time.Sleep(20 * time.Millisecond)
			}
			h.r.Wait()
			if n := h.src.Commits(); n < tc.min || n > tc.max {
				t.Errorf("%d status commits, want %d to %d", n, tc.min, tc.max)
			}
			for i := range 10 {
				if st := h.src.statusOf(t, fmt.Sprintf("local_s%02d_dev", i)); st.Phase != reason.Ready {
					t.Errorf("s%02d: %s", i, st.Phase)
				}
			}
		})
	}
}

// TestDrainCommitsADelayedStatus: a stop does not wait out the status delay, nor lose what it held.
func TestDrainCommitsADelayedStatus(t *testing.T) {
	h := newHarness(t, repoWith("a"), func(c *Config) { c.StatusDelay = time.Hour })
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- shutdownWithin(h.r, time.Minute) }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the drain waited for the status delay")
	}
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready {
		t.Errorf("after the drain: %+v", st)
	}
}

// TestNoOpCycleReadsNoSecret: a stand's judgement is kept for SecretRefresh while its files stay as
// they are: no-op cycles read no secret; twelve stands sharing two secrets read each once; a
// commit leaving the stands' files alone reads none, a commit touching one stand reads its own; a
// value changed in the store is applied once the refresh is over, or at once for a stand retried.
func TestNoOpCycleReadsNoSecret(t *testing.T) {
	repo, _ := twelve()
	h := newHarness(t, repo, func(c *Config) { c.SecretRefresh = 5 * time.Minute })
	reads := func() int {
		h.sec.Mu.Lock()
		defer h.sec.Mu.Unlock()
		return h.sec.Reads
	}
	h.mustCycle()
	if n := reads(); n != 2 {
		t.Errorf("twelve stands sharing two secrets: %d reads", n)
	}
	calls, before := h.eng.Calls, reads()
	for range 3 {
		h.now = h.now.Add(time.Minute)
		h.mustCycle()
	}
	if n := reads() - before; n != 0 || h.eng.Calls != calls {
		t.Errorf("no-op cycles: %d secret reads, %d engine calls", n, h.eng.Calls-calls)
	}
	h.src.Commit(map[string]string{"README.md": "a commit"})
	h.mustCycle()
	if n := reads() - before; n != 0 || h.eng.Calls != calls {
		t.Errorf("a commit no stand reads: %d secret reads, %d engine calls, want none", n, h.eng.Calls-calls)
	}
	h.src.Commit(map[string]string{fakes.StandFile("s03"): fakes.StandYML("s03", "") + "# a comment\n"})
	h.mustCycle()
	if n := reads() - before; n != 2 {
		t.Errorf("a commit touching one stand: %d secret reads, want its own two", n)
	}
	h.sec.Mu.Lock()
	h.sec.Values["kv-password"] = "rotated-value"
	h.sec.Mu.Unlock()
	h.now = h.now.Add(time.Minute) // 4 minutes after the first judgement
	h.mustCycle()
	if ups := h.eng.TotalUps(); ups != 12 {
		t.Fatalf("a rotated secret was read within the refresh: %d ups", ups)
	}
	if err := h.r.Retry("local_s05_dev", "test"); err != nil {
		t.Fatal(err)
	}
	h.mustCycle()
	if h.eng.UpsOf("local_s05_dev") != 2 || h.eng.TotalUps() != 13 {
		t.Errorf("a retried stand: %d ups of it, %d in all; want its secrets read again and it alone applied", h.eng.UpsOf("local_s05_dev"), h.eng.TotalUps())
	}
	h.now = h.now.Add(5 * time.Minute) // past the refresh of every stand
	h.mustCycle()
	if ups := h.eng.TotalUps(); ups != 24 {
		t.Errorf("after the refresh: %d ups, want the twelve stands applied again with the new value", ups)
	}
	// A stand whose store is down is asked once a cycle, not kept: the next cycle asks again.
	h.sec.Mu.Lock()
	h.sec.Down = true
	h.sec.Mu.Unlock()
	h.src.Commit(map[string]string{fakes.StandFile("s03"): fakes.StandYML("s03", "") + "# another\n"})
	before = reads()
	h.mustCycle()
	h.mustCycle()
	if n := reads() - before; n != 2 {
		t.Errorf("with the store down: %d reads in two cycles, want one each", n)
	}
}
