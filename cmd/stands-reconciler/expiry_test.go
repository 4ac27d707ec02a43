package main

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"

	"github.com/stands-engine/stands-reconciler/expiry"
	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
)

// endingStand is a plain stand that ends at end.
func endingStand(p string, end time.Time) string {
	return strings.Replace(plainStand(p), "  env: dev\n", "  env: dev\n  expires: "+end.UTC().Format(time.RFC3339)+"\n", 1)
}

// TestStandsExpireThroughGit runs the lifetime of stands against real Gitea with ends minutes away
// (docs/lifetime.md): each stand's removal pull request is opened once, mentioning who set the end,
// also across a restart of the daemon; an extension on main closes it; without merge_at_expiry a
// stand past its end is Expired and stays, and its pull request closed unmerged destroys nothing;
// with it, the reconciler merges its own pull request at the end and destroys the stand after that
// merge commit.
func TestStandsExpireThroughGit(t *testing.T) {
	// Its servers are its own, and most of its four minutes wait for ends to come: beside the other
	// long one (TestReplicas) rather than before it.
	t.Parallel()
	e := newDaemonEnv(t, nil)
	api := e.gitea.API(t)
	e.gitea.CreateUser(t, "alice")
	start := time.Now().UTC().Truncate(time.Second)
	yEnd := start.Add(150 * time.Second)
	e.repo.ChangeBy("alice", "stands x and y end soon", map[string]string{
		manifest.LifetimeFile: "warn_before: 1h\nmaximum: 7d\n",
		standPath("x"):        endingStand("x", start.Add(20*time.Minute)),
		standPath("y"):        endingStand("y", yEnd),
		standPath("keep"):     plainStand("keep"),
		standPath("w"):        endingStand("w", start.Add(20*time.Minute)),
	})
	// Someone squats w's removal branch with a change of their own before the reconciler gets to it.
	e.repo.ChangeOn(expiry.Branch("local_w_dev", start.Add(20*time.Minute)), "not a removal", map[string]string{standPath("keep"): plainStand("other")})
	e.start()
	for _, id := range []string{"local_x_dev", "local_y_dev", "local_keep_dev", "local_w_dev"} {
		// Applied: on a busy machine y may be past its end (Expired) by the time it is seen.
		e.waitStatus(id, 3*time.Minute, func(s *reconcile.Status) bool { return s.Phase.Applied() })
	}

	pulls := func(id string) []*gitea.PullRequest {
		var out []*gitea.PullRequest
		prs, _, err := api.ListRepoPullRequests(e.repo.Info.Owner.UserName, e.repo.Info.Name, gitea.ListPullRequestsOptions{State: gitea.StateAll})
		if err != nil {
			t.Fatal(err)
		}
		for _, pr := range prs {
			// By title too: Gitea names a closed pull request's deleted branch otherwise.
			if pr.Head != nil && strings.HasPrefix(pr.Head.Ref, expiry.BranchPrefix+id+"/") || strings.HasPrefix(pr.Title, "Remove stand "+id+":") {
				out = append(out, pr)
			}
		}
		return out
	}
	onePull := func(id string) *gitea.PullRequest {
		var prs []*gitea.PullRequest
		e.waitFor("the removal pull request of "+id, 2*time.Minute, func() bool { prs = pulls(id); return len(prs) > 0 })
		if len(prs) != 1 {
			t.Fatalf("%s: %d removal pull requests, want 1", id, len(prs))
		}
		return prs[0]
	}

	var xPull, yPull *gitea.PullRequest
	e.run("a removal pull request opens once per stand, mentioning who set the end", func(t *testing.T) {
		xPull, yPull = onePull("local_x_dev"), onePull("local_y_dev")
		for _, pr := range []*gitea.PullRequest{xPull, yPull} {
			for _, want := range []string{"@alice, you set this end", "merging this pull request removes the stand", "a month",
				"unless this pull request is merged, the stand is `Expired` and stays"} {
				if !strings.Contains(pr.Body, want) {
					t.Errorf("#%d lacks %q:\n%s", pr.Index, want, pr.Body)
				}
			}
			if pr.Poster == nil || pr.Poster.UserName != e.gitUser || pr.Base.Ref != "main" {
				t.Errorf("#%d: opened by %+v into %s", pr.Index, pr.Poster, pr.Base.Ref)
			}
		}
		if yPull.Head.Ref != expiry.Branch("local_y_dev", yEnd) {
			t.Errorf("y's branch %s", yPull.Head.Ref)
		}
		// Looked at once the branch is two minutes old: until then it may be another replica's.
		e.waitLog("a branch with a removal's name is not the reconciler's removal", 1, 4*time.Minute)
		if pulls("local_w_dev") != nil {
			t.Error("a squatted removal branch got the reconciler's pull request")
		}
		if pulls("local_keep_dev") != nil {
			t.Error("a stand without an end got a removal pull request")
		}
		// The plans see it as any pull request: one destroy.
		e.waitFor("the plan of the removal", 2*time.Minute, func() bool {
			cs, _, _ := api.ListIssueComments(e.repo.Info.Owner.UserName, e.repo.Info.Name, yPull.Index, gitea.ListIssueCommentOptions{})
			for _, c := range cs {
				if strings.Contains(c.Body, "destroy") && strings.Contains(c.Body, "local_y_dev") {
					return true
				}
			}
			return false
		})
	})

	e.stop()
	e.start() // at the top level: a subtest's cleanup would stop it
	e.run("a restart opens no second one", func(t *testing.T) {
		e.waitLog("cycle planned", e.logCount("cycle planned")+5, time.Minute)
		for _, id := range []string{"local_x_dev", "local_y_dev"} {
			if n := len(pulls(id)); n != 1 {
				t.Errorf("%s: %d removal pull requests after a restart", id, n)
			}
		}
	})

	e.run("an extension on main closes it", func(t *testing.T) {
		e.repo.Change("x: extended", map[string]string{standPath("x"): endingStand("x", start.Add(3*time.Hour))})
		e.waitFor("x's pull request closed", 2*time.Minute, func() bool {
			pr, _, err := api.GetPullRequest(e.repo.Info.Owner.UserName, e.repo.Info.Name, xPull.Index)
			return err == nil && pr.State == gitea.StateClosed && !pr.HasMerged
		})
		cs, _, err := api.ListIssueComments(e.repo.Info.Owner.UserName, e.repo.Info.Name, xPull.Index, gitea.ListIssueCommentOptions{})
		if err != nil {
			t.Fatal(err)
		}
		said := false
		for _, c := range cs {
			said = said || strings.Contains(c.Body, "moved from") && strings.Contains(c.Body, "this removal is no longer due")
		}
		if !said {
			t.Errorf("the closing comment does not say why: %d comments", len(cs))
		}
		// Closed, then its branch deleted: a second call, so waited for on its own.
		e.waitFor("the branch of the closed removal deleted", time.Minute, func() bool {
			_, resp, _ := api.GetRepoBranch(e.repo.Info.Owner.UserName, e.repo.Info.Name, xPull.Head.Ref)
			return resp != nil && resp.StatusCode == http.StatusNotFound
		})
		e.waitLog("cycle planned", e.logCount("cycle planned")+3, time.Minute)
		if n := len(pulls("local_x_dev")); n != 1 {
			t.Errorf("x: %d removal pull requests after its extension (3 h away, warned 1 h before)", n)
		}
	})

	e.run("without merge_at_expiry: Expired, and a pull request closed unmerged destroys nothing", func(t *testing.T) {
		deletes := e.deletes()
		s := e.waitStatus("local_y_dev", time.Until(yEnd)+2*time.Minute, func(s *reconcile.Status) bool { return s.Phase == reason.Expired })
		if !strings.Contains(s.Message, "stands/y/stand.yml:4:12") {
			t.Errorf("y: %q", s.Message)
		}
		closed := gitea.StateClosed
		if _, _, err := api.EditPullRequest(e.repo.Info.Owner.UserName, e.repo.Info.Name, yPull.Index, gitea.EditPullRequestOption{State: &closed}); err != nil {
			t.Fatal(err)
		}
		e.waitLog("cycle planned", e.logCount("cycle planned")+5, time.Minute)
		if s := e.waitStatus("local_y_dev", time.Second, func(*reconcile.Status) bool { return true }); s.Phase != reason.Expired {
			t.Errorf("y after its pull request was closed: %s", s.Phase)
		}
		if got := e.deletes() - deletes; got != 0 {
			t.Errorf("%d servers deleted past an end without a commit removing the stand", got)
		}
		if n := len(pulls("local_y_dev")); n != 1 {
			t.Errorf("y: %d removal pull requests after one was declined", n)
		}
		if md := e.file("STATUS.md"); !strings.Contains(md, "`Expired`") || !strings.Contains(md, "Total monthly cost") {
			t.Errorf("STATUS.md:\n%s", md)
		}
	})

	e.run("with merge_at_expiry: merged at the end, then destroyed after the merge", func(t *testing.T) {
		zEnd := time.Now().UTC().Truncate(time.Second).Add(75 * time.Second)
		e.repo.Change("z ends soon, merged at its end", map[string]string{
			manifest.LifetimeFile: "warn_before: 1h\nmaximum: 7d\nmerge_at_expiry: true\n",
			standPath("z"):        endingStand("z", zEnd),
		})
		e.waitStatus("local_z_dev", 3*time.Minute, func(s *reconcile.Status) bool { return s.Phase == reason.Ready })
		pr := onePull("local_z_dev")
		if !strings.Contains(pr.Body, "the reconciler merges this pull request itself") {
			t.Errorf("#%d:\n%s", pr.Index, pr.Body)
		}
		var merged *gitea.PullRequest
		e.waitFor("z's pull request merged", time.Until(zEnd)+2*time.Minute, func() bool {
			p, _, err := api.GetPullRequest(e.repo.Info.Owner.UserName, e.repo.Info.Name, pr.Index)
			merged = p
			return err == nil && p.HasMerged
		})
		if merged.Merged == nil || merged.Merged.Before(zEnd) {
			t.Errorf("merged at %v, before the end %v", merged.Merged, zEnd)
		}
		s := e.waitStatus("local_z_dev", 3*time.Minute, func(s *reconcile.Status) bool { return s.Phase == reason.Destroyed })
		if merged.MergedCommitID == nil || s.LastSuccessfulCommit != *merged.MergedCommitID {
			t.Errorf("z destroyed at %s, not at the merge commit %v", s.LastSuccessfulCommit, merged.MergedCommitID)
		}
		for name := range e.hetzner.Servers(t) {
			if strings.HasPrefix(name, "local-z-dev") {
				t.Errorf("server %s of the removed stand is left", name)
			}
		}
		// y's pull request was declined: the opt-in opens no other and merges nothing of y's.
		if n := len(pulls("local_y_dev")); n != 1 {
			t.Errorf("y: %d removal pull requests", n)
		}
		if s := e.waitStatus("local_y_dev", time.Second, func(*reconcile.Status) bool { return true }); s.Phase != reason.Expired {
			t.Errorf("y: %s", s.Phase)
		}
	})

	// A writer puts a commit under the reconciler's name and address on its removal branch
	// (docs/operations.md#the-signing-key): unsigned, it is not the reconciler's, and the policy
	// merges nothing for it.
	e.run("a removal head under the reconciler's name, unsigned, is not merged", func(t *testing.T) {
		vEnd := time.Now().UTC().Truncate(time.Second).Add(75 * time.Second)
		e.repo.Change("v ends soon", map[string]string{standPath("v"): endingStand("v", vEnd)})
		e.waitStatus("local_v_dev", 3*time.Minute, func(s *reconcile.Status) bool { return s.Phase == reason.Ready })
		pr := onePull("local_v_dev")
		refused := e.logCount("removal pull request not merged: its head is not the reconciler's removal")
		e.repo.ChangeAs(gitsource.DefaultIdentity.Name, gitsource.DefaultIdentity.Email, pr.Head.Ref, "Remove stand local_v_dev", nil)
		deletes := e.deletes()
		e.waitLog("removal pull request not merged: its head is not the reconciler's removal", refused+1, time.Until(vEnd)+2*time.Minute)
		logs, err := e.allLogs()
		if err != nil || !strings.Contains(string(logs), "its head is not a commit of the reconciler's: it is not signed") {
			t.Errorf("the refusal does not say the head is unsigned (%v)", err)
		}
		e.waitStatus("local_v_dev", time.Minute, func(s *reconcile.Status) bool { return s.Phase == reason.Expired })
		if p, _, err := api.GetPullRequest(e.repo.Info.Owner.UserName, e.repo.Info.Name, pr.Index); err != nil || p.HasMerged {
			t.Errorf("#%d merged at a head the reconciler did not sign (%v)", pr.Index, err)
		}
		if got := e.deletes() - deletes; got != 0 {
			t.Errorf("%d servers deleted", got)
		}
	})
	e.stop()

	// With the review gate, a removal pull request is reviewed as any other (docs/pr-workflow.md#four-eyes):
	// a writer who pushed onto it and approves it has had nobody else look at their commit.
	e.start("--require-review=true")
	e.run("a writer who pushed onto a removal pull request approves it: held", func(t *testing.T) {
		add := e.repo.Change("u ends in twenty minutes", map[string]string{standPath("u"): endingStand("u", time.Now().Add(20*time.Minute))})
		e.waitStatus("local_u_dev", 2*time.Minute, func(s *reconcile.Status) bool { return s.Reason == reason.Unreviewed }) // its creation around review
		e.ctlApprove(t, "local_u_dev", add, "a stand for the removal's review")
		pr := onePull("local_u_dev")
		bob := e.gitea.CreateUser(t, "bob")
		e.repo.AddWriter(api, bob.Name)
		head := e.repo.ChangeByOn(bob.Name, pr.Head.Ref, "tidy the removal", nil)
		e.waitComment(pr.Index, head)
		if _, _, err := bob.Client(t, e.gitea).CreatePullReview(e.repo.Info.Owner.UserName, e.repo.Info.Name, pr.Index,
			gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, Body: "fine", CommitID: head}); err != nil {
			t.Fatal(err)
		}
		deletes := e.deletes()
		if err := e.repo.TryMerge(api, pr.Index); err != nil {
			t.Fatal(err)
		}
		st := e.waitStatus("local_u_dev", 2*time.Minute, func(s *reconcile.Status) bool { return s.Reason == reason.Unreviewed })
		if !strings.Contains(st.Message, "approved by bob, who") {
			t.Errorf("u's removal: %s %q, want it held for bob's own push", st.Phase, st.Message)
		}
		if got := e.deletes() - deletes; got != 0 {
			t.Errorf("%d servers deleted for a removal its pusher approved", got)
		}
	})
	e.stop()
}
