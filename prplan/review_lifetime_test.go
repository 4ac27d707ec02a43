package prplan

import (
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/fakes"
)

// endings keeps the last stands.Endings the loop scheduled: what the removal pull requests act on.
type endings struct {
	mu   sync.Mutex
	last stands.Endings
}

func (e *endings) Schedule(x stands.Endings) { e.mu.Lock(); e.last = x; e.mu.Unlock() }
func (e *endings) Wait()                     {}
func (e *endings) Close()                    {}

// of is stand id's end as last scheduled (zero: none).
func (e *endings) of(id string) (time.Time, bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, x := range e.last.Ends {
		if x.ID == id {
			return x.End, e.last.MergeAtEnd
		}
	}
	return time.Time{}, e.last.MergeAtEnd
}

// TestOnlyReviewedEndsTakeEffect runs the loop with --require-review on the fakes: a lifetime policy
// that merges removals at the end with a one-hour default, and a stand's end moved into the past,
// both pushed around review, change no stand's end and no removal (the stand stays Ready, its
// end and its removal's where they were), and are reported: stands/lifetime failure on the commit,
// the stand's status and STATUS.md. ctl approve puts the policy in force; an end put back needs
// nothing; a reviewed pull request moves an end; the end moved back around review is held again.
func TestOnlyReviewedEndsTakeEffect(t *testing.T) {
	files := repoWith("a", "b")
	files[manifest.LifetimeFile] = "default: 30d\n"
	files[fakes.StandFile("a")] = fakes.StandYML("a", "  expires: 2026-12-20T00:00:00Z")
	seen := &endings{}
	h := newHarness(t, files, func(c *reconcile.Config, _ *Config) {
		c.Review.Require, c.Review.State, c.Expiries = true, t.TempDir()+"/reviews.json", seen
	})
	h.mustCycle() // the first import: its policy and ends are in force
	since := h.statusOf(t, "local_b_dev").DeclaredSince
	if since == nil {
		t.Fatal("b has no declaredSince")
	}
	ends := func(a, b time.Time, mergeAtEnd bool) {
		t.Helper()
		for id, want := range map[string]time.Time{"local_a_dev": a, "local_b_dev": b} {
			st := h.statusOf(t, id)
			if st.Expires == nil || !st.Expires.Equal(want) || st.Phase != reason.Ready {
				t.Errorf("%s ends at %v (%s), want %v, Ready", id, st.Expires, st.Phase, want)
			}
			if got, merge := seen.of(id); !got.Equal(want) || merge != mergeAtEnd {
				t.Errorf("%s's removal scheduled at %v, merge at its end %v; want %v, %v", id, got, merge, want, mergeAtEnd)
			}
		}
	}
	endA := time.Date(2026, 12, 20, 0, 0, 0, 0, time.UTC)
	ends(endA, since.Add(30*24*time.Hour), false)

	// Around review: merge at the end, a one-hour default, and a's end an hour ago.
	h.src.Commit(map[string]string{manifest.LifetimeFile: "default: 1h\nmerge_at_expiry: true\n",
		fakes.StandFile("a"): fakes.StandYML("a", "  expires: 2026-11-30T07:00:00Z")})
	h.mustCycle()
	ends(endA, since.Add(30*24*time.Hour), false)
	if st := h.statusOf(t, "local_a_dev"); !strings.Contains(st.EndHeld, "the end it asks at h002 (stand.expires 2026-11-30T07:00:00Z) is not in force") ||
		!strings.Contains(st.EndHeld, "ctl approve local_a_dev h002") {
		t.Errorf("a's status says of its end held: %q", st.EndHeld)
	}
	if cs := h.forge.Status("h002", reconcile.LifetimeContext); cs != "failure: not in force: unreviewed change of the lifetime policy, the end of local_a_dev" {
		t.Errorf("%s on h002: %q", reconcile.LifetimeContext, cs)
	}
	md, _ := h.src.StatusFile("STATUS.md")
	for _, want := range []string{"> **Lifetime policy change not in force**: `.stands/lifetime.yml` at `h002` was not reviewed",
		"`2026-12-20 00:00 UTC` (a change of it is held: unreviewed)"} {
		if !strings.Contains(string(md), want) {
			t.Errorf("STATUS.md does not say %q:\n%s", want, md)
		}
	}
	if len(h.eng.Destroys) != 0 {
		t.Fatalf("destroyed %v", h.eng.Destroys)
	}

	// ctl approve puts the policy in force: b's default is an hour now, removals merge at the end.
	if err := h.r.Approve(manifest.LifetimeFile, "h002", "ops", "agreed in the weekly"); err != nil {
		t.Fatal(err)
	}
	h.mustCycle()
	ends(endA, since.Add(time.Hour), true)
	if md, _ := h.src.StatusFile("STATUS.md"); strings.Contains(string(md), "Lifetime policy change not in force") {
		t.Errorf("STATUS.md still holds the policy:\n%s", md)
	}

	// a's end put back as it was: nothing to review.
	h.src.Commit(map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  expires: 2026-12-20T00:00:00Z")})
	h.mustCycle()
	if st := h.statusOf(t, "local_a_dev"); st.EndHeld != "" {
		t.Errorf("a's end is the one in force again, yet held: %q", st.EndHeld)
	}

	// A reviewed extension takes effect once merged.
	endA = time.Date(2026, 12, 24, 0, 0, 0, 0, time.UTC)
	h.mergeReviewed(1, "extend-a", map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  expires: 2026-12-24T00:00:00Z")})
	h.mustCycle()
	ends(endA, since.Add(time.Hour), true)

	// Replay: back to the end reviewed before, around review: held.
	h.src.Commit(map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  expires: 2026-12-20T00:00:00Z")})
	h.mustCycle()
	ends(endA, since.Add(time.Hour), true)
	if st := h.statusOf(t, "local_a_dev"); !strings.Contains(st.EndHeld, "the end it asks at h005 (stand.expires 2026-12-20T00:00:00Z) is not in force") {
		t.Errorf("a's end moved back around review: %q", st.EndHeld)
	}

	// A stand made with an end: through a reviewed pull request, the end is in force with it;
	// around review, both its create and its end are held until one ctl approve releases both.
	endC := map[string]string{fakes.StandFile("c"): fakes.StandYML("c", "  expires: 2026-12-10T00:00:00Z")}
	h.mergeReviewed(2, "add-c", endC)
	h.mustCycle()
	if st := h.statusOf(t, "local_c_dev"); st.EndHeld != "" || st.Expires == nil || st.Phase != reason.Ready {
		t.Errorf("c made through a review: %s, ends %v, held %q", st.Phase, st.Expires, st.EndHeld)
	}
	h.src.Commit(map[string]string{fakes.StandFile("d"): fakes.StandYML("d", "  expires: 2026-12-11T00:00:00Z")})
	h.mustCycle()
	if st := h.statusOf(t, "local_d_dev"); st.Reason != reason.Unreviewed || !strings.Contains(st.EndHeld, "not in force") || st.Expires == nil || !st.Expires.Equal(since.Add(time.Hour)) {
		t.Errorf("d made around review: %s, ends %v, held %q", st.Reason, st.Expires, st.EndHeld)
	}
	if err := h.r.Approve("local_d_dev", "h007", "ops", "a stand for the demo"); err != nil {
		t.Fatal(err)
	}
	h.mustCycle()
	if st := h.statusOf(t, "local_d_dev"); st.Phase != reason.Ready || st.EndHeld != "" || st.Expires == nil || st.Expires.Day() != 11 {
		t.Errorf("d after ctl approve: %s, ends %v, held %q", st.Phase, st.Expires, st.EndHeld)
	}
}

// TestReviewStatusSaysBeforeTheMerge: with the gate on, stands/review on an open pull request's
// head says whether its approvals count, before anyone merges: none yet; a reviewer who pushed onto
// it and approved (Gitea would let them merge); then a second writer's approval.
func TestReviewStatusSaysBeforeTheMerge(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), func(c *reconcile.Config, p *Config) {
		c.Review.Require, c.Review.State, p.ReviewStatus = true, t.TempDir()+"/reviews.json", true
	})
	h.mustCycle()
	h.forge.Open(1, "head1", h.files(), map[string]string{fakes.StandFile("a"): resized("a", "cx32")}, true)
	status := func(want string) {
		t.Helper()
		h.mustCycle()
		if got := h.forge.Status("head1", ReviewContext); got != want {
			t.Errorf("%s: %q, want %q", ReviewContext, got, want)
		}
	}
	status("pending: not applied if merged now: it has no approval")
	h.forge.Push(1, "rev")
	h.forge.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: time.Now().Add(time.Minute)})
	status("pending: not applied if merged now: it has no approval that counts: approved by rev, who pushed to it")
	h.forge.Review(1, stands.Review{User: "lead", State: stands.Approved, Commit: "head1", Submitted: time.Now().Add(time.Minute)})
	status("success: approved by lead: applied once merged")
}
