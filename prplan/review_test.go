package prplan

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"slices"
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

// ask asks the planner whether stand id's transition from to was reviewed, on the branch as it is
// now, with used the authorisations used already.
func (h *harness) ask(id, from, to string, used ...string) stands.ChangeReview {
	h.t.Helper()
	tip := h.src.Head()
	got, err := h.pl.Reviewed(context.Background(), stands.ReviewQuery{Stand: id, Transition: stands.Transition{From: from, To: to},
		OnBranch: func(ctx context.Context, merge string) (bool, error) { return h.src.OnFirstParents(ctx, tip, merge) },
		Used:     func(key string) bool { return slices.Contains(used, key) }})
	if err != nil {
		h.t.Fatal(err)
	}
	return got
}

// mergeReviewed opens pull request n at head with change, plans it, has rev approve the planned head,
// and merges it: the change reaches main, and the forge marks the pull request merged.
func (h *harness) mergeReviewed(n int64, head string, change map[string]string) (merge string) {
	h.t.Helper()
	h.pushReviewed(n, head, change)
	merge = h.src.Head()
	h.forge.Merge(n, merge)
	return merge
}

// pushReviewed is mergeReviewed up to the merge's push to main: the forge does not know of it yet.
func (h *harness) pushReviewed(n int64, head string, change map[string]string) {
	h.t.Helper()
	h.forge.Open(n, head, h.files(), change, true)
	h.mustCycle()
	h.forge.Review(n, stands.Review{User: "rev", State: stands.Approved, Commit: head, Submitted: time.Now().Add(time.Minute)})
	h.src.Commit(change)
}

// TestReviewedChanges: a change counts as reviewed only when a successful plan showed it and a
// second person who may write approved the planned head after that plan, the approval stands, and
// the pull request was merged into the branch's history and its approval not used. Each way of
// missing one of those is a row.
func TestReviewedChanges(t *testing.T) {
	resizeA := map[string]string{fakes.StandFile("a"): resized("a", "cx32")}
	later := func() time.Time { return time.Now().Add(time.Hour) }
	approve := func(f *fakes.Forge) {
		f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: later()})
	}
	from := printOfFiles(t, repoWith("a", "b"), "local_a_dev")
	cases := []struct {
		name   string
		review func(f *fakes.Forge)
		push   bool // the author pushes another change after the review
		// end ends the pull request: merged (nil), closed, or merged and then reset away; used
		// says its approval was used.
		end  func(h *harness, f *fakes.Forge, merged map[string]string)
		used bool
		need int // approvals required (Config.RequiredApprovals); 0: the default
		want bool
		by   string // who approved it, when it counts: "rev" unless said
		why  string
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
		// Merged into the branch's history, once.
		{name: "closed without a merge", review: approve, end: func(h *harness, f *fakes.Forge, _ map[string]string) {
			f.Close(1)
		}, why: "#1 is not merged"},
		{name: "merged, then reset away", review: approve, end: func(h *harness, f *fakes.Forge, merged map[string]string) {
			before := h.src.Head()
			cut := h.files()
			h.src.Commit(merged)
			f.Merge(1, h.src.Head())
			h.src.Reset(before, cut)
		}, why: "no longer holds (reset or force-pushed)"},
		{name: "its approval used already", review: approve, used: true, why: "was applied already"},
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
			if tc.end == nil {
				h.src.Commit(merged)
				f.Merge(1, h.src.Head())
			} else {
				tc.end(h, f, merged)
			}
			merged[fakes.StandFile("b")] = fakes.StandYML("b", "")
			var used []string
			if tc.used {
				used = []string{stands.Authorisation{Stand: "local_a_dev", PR: 1, Transition: stands.Transition{From: from, To: printOfFiles(t, merged, "local_a_dev")}}.Key()}
			}
			got := h.ask("local_a_dev", from, printOfFiles(t, merged, "local_a_dev"), used...)
			if got.Reviewed != tc.want || !strings.Contains(got.Why, tc.why) {
				t.Errorf("reviewed %v (%+v), want %v saying %q", got.Reviewed, got, tc.want, tc.why)
			}
			if tc.by == "" {
				tc.by = "rev"
			}
			if tc.want && (len(got.Steps) != 1 || got.Steps[0].PR != 1 || got.Steps[0].By != tc.by || got.Steps[0].Merge == "") {
				t.Errorf("reviewed by %+v", got.Steps)
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
	h.src.Commit(map[string]string{fakes.StandFile("c"): ""})
	f.Merge(1, h.src.Head())
	h.mustCycle()
	h.start() // a restart: what was planned is read back
	all := repoWith("a", "b", "c")
	for _, c := range []struct {
		id, to string
		want   bool
	}{{"local_c_dev", "", true}, {"local_b_dev", "", false}, {"local_a_dev", "v1-none", false}} {
		if got := h.ask(c.id, printOfFiles(t, all, c.id), c.to); got.Reviewed != c.want {
			t.Errorf("%s to %q: %+v, want reviewed %v", c.id, c.to, got, c.want)
		}
	}
}

// TestAnApprovalWaitsForThePushToBeRecorded: Gitea records a push onto a pull request from a queue,
// and one it has not recorded by the merge it never records. A writer who pushed the head and
// approved it is then named by nobody: the approval is not counted while the pull request's commits
// do not reach the head, and once they do, the pusher is named (docs/pr-workflow.md#four-eyes).
func TestAnApprovalWaitsForThePushToBeRecorded(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), nil)
	f := h.forge
	h.mustCycle()
	change := map[string]string{fakes.StandFile("a"): resized("a", "cx32")}
	f.Open(1, "head1", h.files(), change, true)
	h.mustCycle()
	f.Unrecorded = map[int64]bool{1: true} // rev pushed head1; Gitea has not noted it yet
	f.Review(1, stands.Review{User: "rev", State: stands.Approved, Commit: "head1", Submitted: time.Now().Add(time.Hour)})
	from := printOfFiles(t, repoWith("a", "b"), "local_a_dev")
	h.src.Commit(change)
	f.Merge(1, h.src.Head())
	merged := repoWith("a", "b")
	maps.Copy(merged, change)
	q := stands.ReviewQuery{Stand: "local_a_dev", Transition: stands.Transition{From: from, To: printOfFiles(t, merged, "local_a_dev")}}
	if got, err := h.pl.Reviewed(context.Background(), q); err == nil || !strings.Contains(err.Error(), "do not reach") {
		t.Errorf("an approval of a push Gitea has not recorded: %+v, %v; want an error that holds it", got, err)
	}
	f.Unrecorded[1] = false
	f.Push(1, "rev")
	if got := h.ask(q.Stand, q.From, q.To); got.Reviewed || !strings.Contains(got.Why, "rev, who pushed to it") {
		t.Errorf("once recorded: %+v, want held for rev's own push", got)
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
		if a := h.statusOf(t, id).Authorised; a == nil || a.By != "the first import at h001" {
			t.Errorf("%s's status names what let it through as %+v", id, a)
		}
	}
	// What let each stand's last change through is in its status and STATUS.md (the audit trail).
	authorised := func(id string, want reconcile.Authorised, cell string) {
		t.Helper()
		got := h.statusOf(t, id).Authorised
		if got != nil {
			got.At = time.Time{}
			if got.Operator != nil {
				got.Operator.At = time.Time{}
			}
		}
		if got == nil || !reflect.DeepEqual(*got, want) {
			t.Errorf("%s authorised by %+v, want %+v", id, got, want)
		}
		if md, _ := h.src.StatusFile("STATUS.md"); !strings.Contains(string(md), cell) {
			t.Errorf("STATUS.md does not say %q:\n%s", cell, md)
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
	if err := h.r.Approve("local_a_dev", "h001", "ops", "checked by hand"); err == nil {
		t.Error("ctl approve of another commit than the held change's went through")
	}
	if err := h.r.Approve("local_a_dev", "h002", "ops", "checked by hand"); err != nil {
		t.Fatal(err)
	}
	h.mustCycle()
	if h.eng.UpsOf("local_a_dev") != 2 || h.statusOf(t, "local_a_dev").Phase != reason.Ready {
		t.Errorf("after ctl approve: %d ups, %s", h.eng.UpsOf("local_a_dev"), h.statusOf(t, "local_a_dev").Phase)
	}
	authorised("local_a_dev", reconcile.Authorised{By: "ops (ctl approve of h002)",
		Operator: &reconcile.OperatorAction{Action: "approve", By: "ops", Reason: "checked by hand"}}, "| `ctl approve by ops: checked by hand` |")

	// Through a pull request: reviewed, applied once merged.
	change := map[string]string{fakes.StandFile("b"): resized("b", "cx32")}
	merge := h.mergeReviewed(1, "resize-b", change)
	h.mustCycle()
	if h.eng.UpsOf("local_b_dev") != 2 {
		t.Errorf("a reviewed change was not applied: %+v", h.statusOf(t, "local_b_dev"))
	}
	authorised("local_b_dev", reconcile.Authorised{By: "#1, approved by rev, merged at " + merge,
		PullRequests: []reconcile.AuthorisedPR{{Number: 1, Approvers: []string{"rev"}, Head: "resize-b", Merge: merge}}}, "| `#1 by rev` |")

	// Replay: a revert pushed around review is a change of its own, and so is the reviewed change
	// made again: its approval was used.
	h.src.Commit(map[string]string{fakes.StandFile("b"): fakes.StandYML("b", "")})
	h.mustCycle()
	held("local_b_dev", "h004")
	if err := h.r.Approve("local_b_dev", "h004", "ops", "checked by hand"); err != nil {
		t.Fatal(err)
	}
	h.mustCycle()
	h.src.Commit(change)
	h.mustCycle()
	held("local_b_dev", "h005")
	if st := h.statusOf(t, "local_b_dev"); h.eng.UpsOf("local_b_dev") != 3 || !strings.Contains(st.Message, "#1 was applied already") {
		t.Errorf("the reviewed change made again: %d ups, %q", h.eng.UpsOf("local_b_dev"), st.Message)
	}
	if err := h.r.Approve("local_b_dev", "h005", "ops", "checked by hand"); err != nil {
		t.Fatal(err)
	}
	h.mustCycle()

	// A push after the approval: the merge is of a head nobody approved.
	cut := h.files()
	f.Open(2, "b-again", cut, map[string]string{fakes.StandFile("b"): resized("b", "cx42")}, true)
	h.mustCycle()
	f.Review(2, stands.Review{User: "rev", State: stands.Approved, Commit: "b-again", Submitted: time.Now().Add(time.Minute)})
	pushed := map[string]string{fakes.StandFile("b"): resized("b", "cx52")}
	f.Open(2, "b-pushed", cut, pushed, true)
	h.mustCycle()
	h.src.Commit(pushed)
	f.Merge(2, h.src.Head())
	h.mustCycle()
	held("local_b_dev", "h006")
	if h.eng.UpsOf("local_b_dev") != 4 {
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
	held("local_c_dev", "h007")
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

// TestAnApprovalLetsItsChangeThroughOnce: a stand created and then removed through reviewed pull
// requests, made again around review with the very content the first review approved, is held; so is
// its removal around review afterwards. Each approval was used by the apply it let through.
func TestAnApprovalLetsItsChangeThroughOnce(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), func(c *reconcile.Config, _ *Config) {
		c.Review.Require, c.Review.State = true, t.TempDir()+"/reviews.json"
	})
	h.mustCycle()
	add := map[string]string{fakes.StandFile("c"): fakes.StandYML("c", "")}
	remove := map[string]string{fakes.StandFile("c"): ""}
	h.mergeReviewed(1, "add-c", add)
	h.mustCycle()
	h.mergeReviewed(2, "remove-c", remove)
	h.mustCycle()
	if h.eng.UpsOf("local_c_dev") != 1 || len(h.eng.Destroys) != 1 {
		t.Fatalf("reviewed create and removal: %d ups, destroys %v", h.eng.UpsOf("local_c_dev"), h.eng.Destroys)
	}

	h.src.Commit(add)
	h.mustCycle()
	if st := h.statusOf(t, "local_c_dev"); st.Reason != reason.Unreviewed || !strings.Contains(st.Message, "#1 was applied already") ||
		h.eng.UpsOf("local_c_dev") != 1 {
		t.Fatalf("made again around review: %d ups, %s %q", h.eng.UpsOf("local_c_dev"), st.Reason, st.Message)
	}
	if err := h.r.Approve("local_c_dev", fmt.Sprintf("h%03d", h.src.Humans), "ops", "checked by hand"); err != nil {
		t.Fatal(err)
	}
	h.mustCycle()
	if h.eng.UpsOf("local_c_dev") != 2 {
		t.Fatalf("ctl approve did not create c again: %+v", h.statusOf(t, "local_c_dev"))
	}

	h.src.Commit(remove)
	h.mustCycle()
	if st := h.statusOf(t, "local_c_dev"); st.Reason != reason.Unreviewed || !strings.Contains(st.Message, "#2 was applied already") ||
		len(h.eng.Destroys) != 1 {
		t.Errorf("removed around review: destroys %v, %s %q", h.eng.Destroys, st.Reason, st.Message)
	}
}

// TestALetThroughChangeEndsWhenAskedNoMore: a change let through whose apply failed goes on at the
// next try while the repository asks for it, and is forgotten once it asks for something else: the
// first import's stand removed before its create succeeded and pushed again later is a change.
func TestALetThroughChangeEndsWhenAskedNoMore(t *testing.T) {
	h := newHarness(t, repoWith("a", "b", "c"), func(c *reconcile.Config, _ *Config) {
		c.Review.Require, c.Review.State = true, t.TempDir()+"/reviews.json"
		c.BackoffBase, c.Now = time.Nanosecond, time.Now // a failed apply is tried again at the next cycle
	})
	h.eng.Mu.Lock()
	h.eng.Fail["local_a_dev"] = errors.New("the cloud said no")
	h.eng.Fail["local_c_dev"] = errors.New("the cloud said no")
	h.eng.Mu.Unlock()
	h.mustCycle()
	if h.eng.UpsOf("local_a_dev")+h.eng.UpsOf("local_c_dev") != 0 {
		t.Fatal("the first creates of a and c did not fail")
	}
	h.src.Commit(map[string]string{fakes.StandFile("c"): ""})
	h.mustCycle()
	if h.eng.UpsOf("local_a_dev") != 1 {
		t.Errorf("the first import's a, tried again: %+v", h.statusOf(t, "local_a_dev"))
	}
	h.src.Commit(map[string]string{fakes.StandFile("c"): fakes.StandYML("c", "")})
	h.mustCycle()
	h.mustCycle()
	h.mustCycle()
	if st := h.statusOf(t, "local_c_dev"); st.Reason != reason.Unreviewed || h.eng.UpsOf("local_c_dev") != 0 {
		t.Errorf("the first import's c, pushed again: %d ups, %s %q", h.eng.UpsOf("local_c_dev"), st.Reason, st.Message)
	}
}

// TestReviewedMergesChain: two reviewed pull requests of one stand, merged before either was applied
// (the first one's apply failed), are applied in one go: their steps chain from what the stack has.
// The first one's change, let through and never applied, used no approval.
func TestReviewedMergesChain(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), func(c *reconcile.Config, _ *Config) {
		c.Review.Require, c.Review.State = true, t.TempDir()+"/reviews.json"
		c.BackoffBase, c.Now = time.Nanosecond, time.Now
	})
	h.mustCycle()
	h.eng.Mu.Lock()
	h.eng.Fail["local_a_dev"] = errors.New("the cloud said no")
	h.eng.Mu.Unlock()
	h.mergeReviewed(1, "a-32", map[string]string{fakes.StandFile("a"): resized("a", "cx32")})
	h.mustCycle()
	if h.eng.UpsOf("local_a_dev") != 1 {
		t.Fatalf("the first import and a failed apply: %d ups", h.eng.UpsOf("local_a_dev"))
	}
	h.eng.Mu.Lock()
	h.eng.Fail["local_a_dev"] = errors.New("the cloud said no again") // its try during the next plan
	h.eng.Mu.Unlock()
	h.mergeReviewed(2, "a-42", map[string]string{fakes.StandFile("a"): resized("a", "cx42")})
	if h.eng.UpsOf("local_a_dev") != 1 {
		t.Fatalf("the first change was applied before the second merged: %d ups", h.eng.UpsOf("local_a_dev"))
	}
	h.mustCycle()
	h.mustCycle()
	if st := h.statusOf(t, "local_a_dev"); st.Phase != reason.Ready || h.eng.UpsOf("local_a_dev") != 2 {
		t.Errorf("two reviewed merges: %d ups, %s %s %q", h.eng.UpsOf("local_a_dev"), st.Phase, st.Reason, st.Message)
	}
}

// TestAMergeGiteaMarksLate: the cycle a merge's push starts may ask before Gitea marks the pull
// request merged; the review waits for it (Config.MergeWait) rather than hold the change. With no
// wait, the same change is held.
func TestAMergeGiteaMarksLate(t *testing.T) {
	for _, c := range []struct {
		name string
		wait time.Duration
		ups  int
	}{{"waited for", 5 * time.Second, 2}, {"not waited for", -1, 1}} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, repoWith("a", "b"), func(rc *reconcile.Config, pc *Config) {
				rc.Review.Require, rc.Review.State = true, t.TempDir()+"/reviews.json"
				pc.MergeWait = c.wait
			})
			h.mustCycle()
			h.pushReviewed(1, "a-32", map[string]string{fakes.StandFile("a"): resized("a", "cx32")})
			h.forge.MergeLate(1, h.src.Head())
			h.mustCycle()
			if h.eng.UpsOf("local_a_dev") != c.ups {
				t.Errorf("%d ups, want %d: %+v", h.eng.UpsOf("local_a_dev"), c.ups, h.statusOf(t, "local_a_dev"))
			}
		})
	}
}

// TestAReviewOnTopOfAnUnreviewedChange: a change pushed around review and held is not carried
// through by a reviewed pull request of the same stand merged on top of it; the held change says
// which approval covers only the later step.
func TestAReviewOnTopOfAnUnreviewedChange(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), func(c *reconcile.Config, _ *Config) {
		c.Review.Require, c.Review.State = true, t.TempDir()+"/reviews.json"
	})
	h.mustCycle()
	h.src.Commit(map[string]string{fakes.StandFile("a"): resized("a", "cx32")})
	h.mustCycle()
	h.mergeReviewed(1, "a-42", map[string]string{fakes.StandFile("a"): resized("a", "cx42")})
	h.mustCycle()
	st := h.statusOf(t, "local_a_dev")
	if h.eng.UpsOf("local_a_dev") != 1 || st.Reason != reason.Unreviewed || !strings.Contains(st.Message, "#1 approved its change from what main held then") {
		t.Errorf("a reviewed change on top of an unreviewed one: %d ups, %s %q", h.eng.UpsOf("local_a_dev"), st.Reason, st.Message)
	}
}

// TestReviewedWalksEachPlannedChangeOnce: planned changes of one stand by many approved, merged pull
// requests, in layers where every print of a layer leads to every print of the next and none to
// the print asked for: the walk goes on from each print once and reads each pull request's reviews
// once, however many paths there are (4^10 here), so a writer opening pull requests cannot make the
// gate spin.
func TestReviewedWalksEachPlannedChangeOnce(t *testing.T) {
	const layers, width = 10, 4
	f := fakes.NewForge()
	pl := New(Config{Branch: "main", MergeWait: -1}, f, nil, f, nil)
	pl.records = map[int64]plannedHead{}
	print := func(layer, i int) string { return fmt.Sprintf("p%d-%d", layer, i) }
	since := time.Now()
	n := int64(0)
	for l := range layers {
		for i := range width {
			for j := range width {
				from, to := print(l, i), print(l+1, j)
				if l == 0 {
					from = "applied"
				}
				n++
				head := fmt.Sprintf("head%d", n)
				pl.records[n] = plannedHead{Head: head, Author: "author", Changes: map[string]plannedChange{"local_a_dev": {From: from, Print: to, Since: since}}}
				f.Review(n, stands.Review{User: "rev", State: stands.Approved, Commit: head, Submitted: since.Add(time.Minute)})
				f.Merge(n, fmt.Sprintf("m%d", n))
			}
		}
	}
	got, w, err := pl.reviewed(context.Background(), stands.ReviewQuery{Stand: "local_a_dev", Transition: stands.Transition{From: "applied", To: "elsewhere"}})
	if err != nil || got.Reviewed {
		t.Fatalf("reviewed %+v, %v", got, err)
	}
	if prints := 1 + layers*width; w.visits > prints || f.ReviewReads > int(n) {
		t.Errorf("the walk went from %d prints (of %d) and read reviews %d times (for %d pull requests)", w.visits, prints, f.ReviewReads, n)
	}
}

// TestAReviewedFixOfABrokenStandCreatesIt: a stand main declares but cannot judge, never applied,
// fixed by a reviewed pull request: the plan's step starts where the stand is, with no stack (a
// create), so the merge creates it.
func TestAReviewedFixOfABrokenStandCreatesIt(t *testing.T) {
	files := repoWith("a", "b")
	files[fakes.StandFile("c")] = strings.Replace(fakes.StandYML("c", ""), "profile: small", "profile: huge", 1)
	h := newHarness(t, files, func(c *reconcile.Config, _ *Config) {
		c.Review.Require, c.Review.State = true, t.TempDir()+"/reviews.json"
	})
	h.mustCycle()
	if st := h.statusOf(t, "local_c_dev"); st.Reason != reason.Invalid || h.eng.UpsOf("local_c_dev") != 0 {
		t.Fatalf("the broken stand: %s %s, %d ups", st.Phase, st.Reason, h.eng.UpsOf("local_c_dev"))
	}
	h.mergeReviewed(1, "fix-c", map[string]string{fakes.StandFile("c"): fakes.StandYML("c", "")})
	h.mustCycle()
	if st := h.statusOf(t, "local_c_dev"); st.Phase != reason.Ready || h.eng.UpsOf("local_c_dev") != 1 {
		t.Errorf("the reviewed fix: %d ups, %s %s %q", h.eng.UpsOf("local_c_dev"), st.Phase, st.Reason, st.Message)
	}
}
