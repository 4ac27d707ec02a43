package prplan

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/fakes"
)

// printOfFiles is judge.Print of stand id in files, as the loop would compute it after a merge.
func printOfFiles(t *testing.T, files map[string]string, id string) string {
	t.Helper()
	fsys := fakes.NewSource(t, files).Files
	ev, err := judge.Evaluate(context.Background(), fsys, judge.Options{Owner: "local", Passphrase: "pass", Secrets: manifest.PlaceholderSource{}})
	if err != nil {
		t.Fatal(err)
	}
	in := ev.Input(id)
	if in == nil {
		t.Fatalf("no input for %s", id)
	}
	p, err := judge.Print(in, "pass")
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestReviewedChanges: a change counts as reviewed only when a successful plan showed it and a
// second person who may write approved the planned head after that plan, and the approval stands.
// Each way of missing one of those is a row; a removal and a merged pull request count too.
func TestReviewedChanges(t *testing.T) {
	resizeA := map[string]string{fakes.StandFile("a"): resized("a", "cx32")}
	later := func() time.Time { return time.Now().Add(time.Hour) }
	cases := []struct {
		name   string
		review func(f *fakes.Forge)
		push   bool // the author pushes another change after the review
		need   int  // approvals required (Config.RequiredApprovals); 0: the default
		want   bool
		by     string // who approved it, when it counts: "rev" unless said
		why    string
	}{
		{name: "approved by a reviewer", review: func(f *fakes.Forge) {
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later()})
		}, want: true},
		{name: "no review", review: func(*fakes.Forge) {}, why: "has no approval"},
		{name: "approved by its author", review: func(f *fakes.Forge) {
			f.Review(1, stands.Review{User: "author", State: stands.Approved, Commit: "head1", Submitted: later()})
		}, why: "approved by author, its author"},
		{name: "a comment, not an approval", review: func(f *fakes.Forge) {
			f.Review(1, stands.Review{User: "rev", State: "COMMENT", Commit: "head1", Submitted: later()})
		}, why: "has no approval"},
		{name: "approved before the plan", review: func(f *fakes.Forge) {
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: time.Now().Add(-time.Hour)})
		}, why: "approved before its plan showed this change"},
		{name: "dismissed", review: func(f *fakes.Forge) {
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later(), Dismissed: true})
		}, why: "dismissed"},
		{name: "a push after the approval", review: func(f *fakes.Forge) {
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later()})
		}, push: true, why: "approved at another head"},
		// Four eyes: a second person who may write, whose last verdict approves.
		{name: "approved by someone who pushed to it", review: func(f *fakes.Forge) {
			f.Push(1, "rev")
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later()})
		}, why: "rev, who pushed to it"},
		{name: "approved by a reader", review: func(f *fakes.Forge) {
			f.Readers = map[string]bool{"rev": true}
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later()})
		}, why: "rev, who may not write"},
		{name: "approved by a reader Gitea counts", review: func(f *fakes.Forge) {
			f.Readers = map[string]bool{"rev": true}
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later(), Official: true})
		}, want: true},
		{name: "approved, then changes requested", review: func(f *fakes.Forge) {
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later()})
			f.Review(1, stands.Review{User: "rev", State: "COMMENT", Commit: "head1", Submitted: later()})
			f.Review(1, stands.Review{User: "rev", State: stands.RequestChanges, Commit: "head1", Submitted: later()})
		}, why: "changes requested by rev"},
		{name: "changes requested, then approved", review: func(f *fakes.Forge) {
			f.Review(1, stands.Review{User: "rev", State: stands.RequestChanges, Commit: "head1", Submitted: later()})
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later()})
		}, want: true},
		{name: "a pusher's approval and a second writer's", review: func(f *fakes.Forge) {
			f.Push(1, "pusher")
			f.Review(1, stands.Review{User: "pusher", State: stands.Approved, Commit: "head1", Submitted: later()})
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later()})
		}, want: true},
		{name: "approved by a user since deleted", review: func(f *fakes.Forge) {
			f.Review(1, stands.Review{User: "", State: stands.Approved, Commit: "head1", Submitted: later(), Official: true})
		}, why: "has no approval"},
		// As many as the protection or the setting requires, of different people.
		{name: "two required, one given", need: 2, review: func(f *fakes.Forge) {
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later()})
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later()})
		}, why: "has 1 of the 2 approvals it needs (by rev)"},
		{name: "two required, one counts", need: 2, review: func(f *fakes.Forge) {
			f.Readers = map[string]bool{"reader": true}
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later()})
			f.Review(1, stands.Review{User: "reader", State: stands.Approved, Commit: "head1", Submitted: later()})
		}, why: "has 1 of the 2 approvals it needs (by rev): approved by reader, who may not write"},
		{name: "two required, two given", need: 2, review: func(f *fakes.Forge) {
			f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later()})
			f.Review(1, stands.Review{User: "rev2", State: stands.Approved, Commit: "head1", Submitted: later()})
		}, want: true, by: "rev, rev2"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, repoWith("a", "b"), func(_ *reconcile.Config, c *Config) {
				c.RequiredApprovals = func() int { return tc.need }
			})
			f := h.forge
			h.mustCycle()
			cut := h.files()
			f.Open(1, "head1", cut, resizeA, true)
			h.mustCycle()
			tc.review(f)
			change := resizeA
			if tc.push {
				change = map[string]string{fakes.StandFile("a"): resized("a", "cx42")}
				f.Open(1, "head2", cut, change, true)
				h.mustCycle()
			}
			merged := map[string]string{}
			for p, c := range change {
				merged[p] = c
			}
			merged[fakes.StandFile("b")] = fakes.StandYML("b", "")
			got, err := h.pl.Reviewed(context.Background(), "local_a_dev", printOfFiles(t, merged, "local_a_dev"))
			if err != nil {
				t.Fatal(err)
			}
			if got.Reviewed != tc.want || !strings.Contains(got.Why, tc.why) {
				t.Errorf("reviewed %v (%+v), want %v saying %q", got.Reviewed, got, tc.want, tc.why)
			}
			if tc.by == "" {
				tc.by = "rev"
			}
			if tc.want && (got.PR != 1 || got.By != tc.by) {
				t.Errorf("reviewed by %q on #%d", got.By, got.PR)
			}
		})
	}
}

// TestReviewedRemovalAndMerge: an approved removal counts as reviewed, also once its pull request is
// closed (merged) and after a restart; a change nobody planned does not.
func TestReviewedRemovalAndMerge(t *testing.T) {
	h, f := newPreviewHarness(t, "a", "b", "c")
	h.plc.StateFile = t.TempDir() + "/planned.json"
	h.start()
	h.mustCycle()
	f.Open(1, "remove-c", h.files(), map[string]string{fakes.StandFile("c"): ""}, true)
	h.mustCycle()
	f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "remove-c", Submitted: time.Now().Add(time.Minute)})
	f.Close(1)
	h.mustCycle()
	h.start() // a restart: what was planned is read back
	for _, c := range []struct {
		id, print string
		want      bool
	}{{"local_c_dev", "", true}, {"local_b_dev", "", false}, {"local_a_dev", "v1-none", false}} {
		got, err := h.pl.Reviewed(context.Background(), c.id, c.print)
		if err != nil || got.Reviewed != c.want {
			t.Errorf("%s to %q: %+v %v, want reviewed %v", c.id, c.print, got, err, c.want)
		}
	}
}

// TestOnlyReviewedChangesApply runs the loop with --require-review on the fakes: the first import
// applies; a change pushed straight to main is held (Unreviewed, stands/<id> failure on its commit,
// no up) until ctl approve; a merged pull request whose approved plan showed the change applies; a
// push after the approval is held; an unreviewed removal destroys nothing; a new secret value alone
// needs no review.
func TestOnlyReviewedChangesApply(t *testing.T) {
	h := newHarness(t, repoWith("a", "b", "c"), func(c *reconcile.Config, _ *Config) {
		c.Review.Require, c.Review.State = true, t.TempDir()+"/reviews.json"
	})
	f := h.forge
	h.mustCycle()
	for _, id := range []string{"local_a_dev", "local_b_dev", "local_c_dev"} {
		if h.eng.UpsOf(id) != 1 {
			t.Fatalf("the first import did not apply %s", id)
		}
	}
	held := func(id, commit string) {
		t.Helper()
		st := h.statusOf(t, id)
		if st.Phase != reason.Blocked || st.Reason != reason.Unreviewed || !strings.Contains(st.Message, "ctl approve "+id+" "+commit) {
			t.Errorf("%s: %s %s %q", id, st.Phase, st.Reason, st.Message)
		}
		if cs := f.Status(commit, "stands/"+id); !strings.HasPrefix(cs, "failure: not applied: unreviewed change") {
			t.Errorf("stands/%s on %s: %q", id, commit, cs)
		}
	}

	// Straight to main: held, then released by an operator.
	h.src.Commit(map[string]string{fakes.StandFile("a"): resized("a", "cx32")})
	h.mustCycle()
	held("local_a_dev", "h002")
	if h.eng.UpsOf("local_a_dev") != 1 {
		t.Fatal("an unreviewed change was applied")
	}
	if err := h.r.Approve("local_a_dev", "h001", "ops"); err == nil {
		t.Error("ctl approve of another commit than the held change's went through")
	}
	if err := h.r.Approve("local_a_dev", "h002", "ops"); err != nil {
		t.Fatal(err)
	}
	h.mustCycle()
	if h.eng.UpsOf("local_a_dev") != 2 || h.statusOf(t, "local_a_dev").Phase != reason.Ready {
		t.Errorf("after ctl approve: %d ups, %s", h.eng.UpsOf("local_a_dev"), h.statusOf(t, "local_a_dev").Phase)
	}

	// Through a pull request: reviewed, applied once merged.
	change := map[string]string{fakes.StandFile("b"): resized("b", "cx32")}
	f.Open(1, "resize-b", h.files(), change, true)
	h.mustCycle()
	f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "resize-b", Submitted: time.Now().Add(time.Minute)})
	h.src.Commit(change)
	f.Close(1)
	h.mustCycle()
	if h.eng.UpsOf("local_b_dev") != 2 {
		t.Errorf("a reviewed change was not applied: %+v", h.statusOf(t, "local_b_dev"))
	}

	// A push after the approval: the merge is of a head nobody approved.
	cut := h.files()
	f.Open(2, "b-again", cut, map[string]string{fakes.StandFile("b"): resized("b", "cx42")}, true)
	h.mustCycle()
	f.Review(2, stands.Review{User: "rev", State: stands.Approved, Commit: "b-again", Submitted: time.Now().Add(time.Minute)})
	pushed := map[string]string{fakes.StandFile("b"): resized("b", "cx52")}
	f.Open(2, "b-pushed", cut, pushed, true)
	h.mustCycle()
	h.src.Commit(pushed)
	f.Close(2)
	h.mustCycle()
	held("local_b_dev", "h004")
	if h.eng.UpsOf("local_b_dev") != 2 {
		t.Error("a change pushed after the approval was applied")
	}
	if st := h.statusOf(t, "local_b_dev"); !strings.Contains(st.Message, "another head") {
		t.Errorf("the held change does not say why: %q", st.Message)
	}

	// An unreviewed removal destroys nothing; a new secret value needs no review.
	h.src.Commit(map[string]string{fakes.StandFile("c"): ""})
	h.sec.Mu.Lock()
	h.sec.Values["kv-password"] = "a-rotated-password-value"
	h.sec.Mu.Unlock()
	h.mustCycle()
	held("local_c_dev", "h005")
	if len(h.eng.Destroys) != 0 {
		t.Errorf("an unreviewed removal destroyed %v", h.eng.Destroys)
	}
	if h.eng.UpsOf("local_a_dev") != 3 {
		t.Errorf("a new secret value was not applied to a: %d ups, %+v", h.eng.UpsOf("local_a_dev"), h.statusOf(t, "local_a_dev"))
	}
	// Also with what the gate let through forgotten: the stack's print says what was reviewed.
	h.cfg.Review.State = t.TempDir() + "/reviews.json"
	h.start()
	h.sec.Mu.Lock()
	h.sec.Values["kv-password"] = "rotated-once-more-value"
	h.sec.Mu.Unlock()
	h.mustCycle()
	if h.eng.UpsOf("local_a_dev") != 4 {
		t.Errorf("after a restart without the gate's state, a new secret value was held: %+v", h.statusOf(t, "local_a_dev"))
	}
}

// TestFirstImportIsTheFirstCommitOnly: a stand pushed into a repository that had none when the gate
// first ran is a change like any other, not part of a first import.
func TestFirstImportIsTheFirstCommitOnly(t *testing.T) {
	h := newHarness(t, repoWith(), func(c *reconcile.Config, _ *Config) {
		c.Review.Require, c.Review.State = true, t.TempDir()+"/reviews.json"
	})
	h.mustCycle()
	h.src.Commit(map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "")})
	h.mustCycle()
	if st := h.statusOf(t, "local_a_dev"); st.Reason != reason.Unreviewed || h.eng.UpsOf("local_a_dev") != 0 {
		t.Errorf("a stand pushed after the first run: %s %s, %d ups", st.Phase, st.Reason, h.eng.UpsOf("local_a_dev"))
	}
}
