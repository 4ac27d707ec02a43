package main

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"code.gitea.io/sdk/gitea"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/prplan"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/safeguard"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/testfs"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// TestPullRequestPlans: the daemon, as a bot user with write access, plans pull requests against
// real Gitea, the real Pulumi CLI, hcloudsim and the Vault stand-in: one comment per pull request
// with servers and monthly cost, edited in place; stands/plan on each head; validation errors with
// file and line; the destroy guard's refusal; nothing created by previews; and Gitea's branch
// protection requiring stands/plan, with the bot in the push allow-list so status still lands on
// the protected main.
func TestPullRequestPlans(t *testing.T) {
	e := newDaemonEnv(t, map[string]int{"a": 6300, "b": 6301})
	admin := e.gitea.API(t)
	bot := e.gitea.CreateUser(t, "stands-bot")
	dev := e.gitea.CreateUser(t, "dev")
	e.repo.AddWriter(admin, bot.Name)
	e.repo.AddWriter(admin, dev.Name)
	e.gitUser, e.gitToken = bot.Name, bot.Token
	e.secrets["bot token"], e.secrets["dev token"] = bot.Token, dev.Token
	owner, repo := e.repo.Info.Owner.UserName, e.repo.Info.Name

	// Branch protection as the README documents it: stands/plan required, pushes to main only by the bot.
	if _, _, err := admin.CreateBranchProtection(owner, repo, gitea.CreateBranchProtectionOption{RuleName: "main", BranchName: "main",
		EnablePush: true, EnablePushWhitelist: true, PushWhitelistUsernames: []string{bot.Name},
		EnableStatusCheck: true, StatusCheckContexts: []string{prplan.PlanContext}}); err != nil {
		t.Fatalf("branch protection: %v", err)
	}
	// Stands reach main through pull requests only now; the first two are there already.
	e.start()
	for _, id := range []string{"local_a_dev", "local_b_dev"} {
		e.waitStatus(id, 4*time.Minute, func(s *reconcile.Status) bool { return s.Phase == reason.Ready })
	}
	// After its cycles, /metrics shows the stands by phase and the Pulumi processes by command.
	var metrics string
	e.waitFor("/metrics to show the two stands Ready", time.Minute, func() bool {
		metrics = e.metrics()
		return strings.Contains(metrics, `stands_stands{phase="Ready"} 2`) && strings.Contains(metrics, `stands_pulumi_cli_invocations_total{command="up"}`) &&
			strings.Contains(metrics, "stands_cycle_duration_seconds_count") && strings.Contains(metrics, `stands_dependency_up{dependency="source"} 1`)
	})
	// Every metric the shipped alert rules use is one the daemon serves (TestReplicas: those of
	// --replicas).
	alertMetricsServed(t, metrics, func(name string) bool { return !replicaMetric(name) })
	// The protection above has two safeguards of six. The daemon reads it with the bot's token (a
	// writer's): what Gitea shows writers, the rest unknown and said so; config check with the
	// admin's token reads the whole rule and names each missing safeguard.
	e.run("the missing safeguards are reported", func(t *testing.T) {
		var status string
		e.waitFor("STATUS.md to name the missing safeguard", time.Minute, func() bool {
			s := e.file("STATUS.md")
			status = s
			return strings.Contains(s, "**The protection of `main` lacks** `required-approvals`:") && strings.Contains(s, "is not fully known")
		})
		// This daemon runs with --require-review=false (newDaemonEnv) until the restart below.
		if !strings.Contains(status, "> **No review gate**: every change landing on `main` is applied, reviewed or not") {
			t.Errorf("STATUS.md of a daemon without its review gate does not say so:\n%s", status)
		}
		t.Logf("STATUS.md:\n%s", status[:min(len(status), 700)])
		// The watch logs each safeguard after handing them to the loop, whose cycle wrote STATUS.md.
		e.waitFor("the log to name 1 missing and 4 unknown safeguards", time.Minute, func() bool {
			return e.logCount("branch protection lacks a safeguard") >= 1 && e.logCount("branch protection safeguard not known") >= 4
		})
		if e.logCount("branch protection lacks a safeguard") != 1 || e.logCount("branch protection safeguard not known") != 4 {
			t.Errorf("the log names %d missing and %d unknown safeguards, want 1 and 4", e.logCount("branch protection lacks a safeguard"),
				e.logCount("branch protection safeguard not known"))
		}
		body := e.metrics()
		for _, want := range []string{`stands_branch_safeguard_missing{safeguard="required-approvals"} 1`,
			`stands_branch_safeguard_missing{safeguard="plan-required"} 0`, "stands_branch_protection_read 0", "\nstands_review_gate 0\n"} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		adminToken := filepath.Join(t.TempDir(), "admin-token")
		if err := os.WriteFile(adminToken, []byte(e.gitea.Token), 0o600); err != nil {
			t.Fatal(err)
		}
		exe, err := os.Executable()
		if err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(exe, "config", "check", "--repo", e.repo.Info.CloneURL)
		cmd.Env = append(slices.Clone(e.environ), "STANDS_GIT_TOKEN_FILE="+adminToken, "STANDS_GIT_USER="+e.gitea.User)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("config check: %v\n%s", err, out)
		}
		t.Logf("config check with the admin's token:\n%s", out[bytes.Index(out, []byte("SAFEGUARD")):])
		for _, name := range safeguard.Names {
			warned := strings.Contains(string(out), "config: warning: the protection of main lacks "+name+":")
			if want := name != "plan-required" && name != "direct-push-restricted"; warned != want {
				t.Errorf("config check warns of %s: %v, want %v\n%s", name, warned, want, out)
			}
		}
	})
	backend := filepath.Join(e.stateDir(), "pulumi", "local", ".pulumi", "stacks")
	stacksBefore := listFiles(t, backend)
	writesBefore := e.hetzner.Sim.Writes("")
	devAPI := dev.Client(t, e.gitea)

	var addPR int64
	var addHead string
	e.run("a pull request adding a stand", func(t *testing.T) {
		head := e.repo.ChangeOn("add-c", "add stand c", map[string]string{standPath("c"): daemonStand("c", 6302)})
		addPR = e.repo.Open(devAPI, "add-c", "Add stand c")
		c := e.waitComment(addPR, head)
		for _, want := range []string{"`local_c_dev`", "create `local-c-dev-main` (`cx22`, `hel1`)", "Monthly cost change: `+"} {
			if !strings.Contains(c, want) {
				t.Errorf("comment lacks %q:\n%s", want, c)
			}
		}
		if strings.Contains(c, "local_a_dev") {
			t.Errorf("an unchanged stand is in the plan:\n%s", c)
		}
		if st := e.planStatus(head); st.State != gitea.StatusSuccess || !strings.Contains(st.Description, "1 create") {
			t.Errorf("stands/plan: %+v", st)
		}
		// A push to the pull request edits the same comment.
		head2 := e.repo.ChangeOn("add-c", "c on another port, and d", map[string]string{standPath("c"): daemonStand("c", 6312), standPath("d"): daemonStand("d", 6313)})
		c = e.waitComment(addPR, head2)
		if !strings.Contains(c, "local_d_dev") {
			t.Errorf("the edited comment lacks the new stand:\n%s", c)
		}
		if n := e.planComments(addPR); n != 1 {
			t.Errorf("%d plan comments after a push, want 1", n)
		}
		addHead = head2
	})

	var brokenPR int64
	e.run("a pull request with a broken stand.yml", func(t *testing.T) {
		head := e.repo.ChangeOn("break-b", "b on a profile that does not exist",
			map[string]string{standPath("b"): strings.Replace(daemonStand("b", 6301), "profile: small", "profile: huge", 1)})
		brokenPR = e.repo.Open(devAPI, "break-b", "Break b")
		c := e.waitComment(brokenPR, head)
		if !strings.Contains(c, "stands/b/stand.yml:") || !strings.Contains(c, "huge") {
			t.Errorf("comment lacks the error with file and line:\n%s", c)
		}
		if st := e.planStatus(head); st.State != gitea.StatusFailure {
			t.Errorf("stands/plan: %+v", st)
		}
		if err := e.repo.TryMerge(devAPI, brokenPR); err == nil {
			t.Fatal("a pull request whose plan failed was merged")
		}
	})

	e.run("a pull request removing every stand", func(t *testing.T) {
		head := e.repo.ChangeOn("remove-all", "remove every stand", nil, "stands")
		pr := e.repo.Open(devAPI, "remove-all", "Remove everything")
		c := e.waitComment(pr, head)
		if !strings.Contains(c, "WouldRemoveAllStands") || !strings.Contains(c, ".stands/allow-destroy") {
			t.Errorf("comment lacks the guard's refusal:\n%s", c)
		}
		if st := e.planStatus(head); st.State != gitea.StatusFailure {
			t.Errorf("stands/plan: %+v", st)
		}
	})

	var hostilePR int64
	var hostileHead string
	e.run("a hostile pull request reads no secret", func(t *testing.T) {
		change := map[string]string{
			// The password's hex in a file destination (the validate report printed it), and a
			// configuration that guesses it: Pulumi's comparison with production would tell.
			"apps/kv/app.yml":         strings.Replace(e.file("apps/kv/app.yml"), `dest: "/home/{{ .user_app }}/stands/{{ .instance }}/redis.conf"`, `dest: '/x/{{ printf "%x" .preferences.password }}/redis.conf'`, 1),
			"apps/kv/redis.conf.tmpl": "requirepass {{ if eq .preferences.password \"guess\" }}right{{ else }}{{ slice .preferences.password 0 4 }}{{ end }}\n",
		}
		head := e.repo.ChangeOn("hostile", "read the password back", change)
		hostilePR, hostileHead = e.repo.Open(devAPI, "hostile", "Hostile"), head
		c := e.waitComment(hostilePR, head)
		if !strings.Contains(c, "local_a_dev") || !strings.Contains(c, "local_b_dev") {
			t.Errorf("the plan lacks the stands the change touches:\n%s", c)
		}
		// Positive control: on the merged path the same templates render the real value.
		files, err := testfs.Dir(filepath.Join(testenv.RepoRoot(), "examples", "stands-repo"))
		if err != nil {
			t.Fatal(err)
		}
		for p, v := range change {
			files[p] = &fstest.MapFile{Data: []byte(v)}
		}
		files[standPath("a")] = &fstest.MapFile{Data: []byte(daemonStand("a", 6300))}
		lookup := func(name string) (string, bool) {
			v, ok := map[string]string{"SECRET_KV_PASSWORD": e.secrets["kv-password"], "SECRET_REGISTRY_PASSWORD": "registry-pw"}[name]
			return v, ok
		}
		res, _ := manifest.PreflightAll(t.Context(), files, []string{standPath("a")}, manifest.PreflightOptions{LoadOptions: manifest.LoadOptions{DefaultOwner: "local"}, Secrets: manifest.EnvSource{Lookup: lookup}})
		if len(res) != 1 || res[0].Rendered == nil || len(res[0].Rendered.Instances) == 0 ||
			!strings.Contains(res[0].Rendered.Instances[0].Files[0].Dest, hex.EncodeToString([]byte(e.secrets["kv-password"]))) {
			t.Errorf("the hostile template does not see the secret on the merged path: %+v %v", res, res[0].Err)
		}
	})

	var bombPR int64
	e.run("a template bomb and an oversized file", func(t *testing.T) {
		rss := func() int64 { return testenv.ProcStatus(t, e.cmd.Process.Pid, "VmHWM") }
		testenv.ResetPeakRSS(t, e.cmd.Process.Pid)
		before := rss()
		head := e.repo.ChangeOn("bomb", "a template that never ends, a file too large", map[string]string{
			"apps/kv/redis.conf.tmpl": `{{ $x := "aaaaaaaa" }}{{ range 1000000000 }}{{ $x = printf "%s%s" $x $x }}{{ end }}` + "\n",
			standPath("c"):            "# " + strings.Repeat("#", 2<<20)})
		start := time.Now()
		bombPR = e.repo.Open(devAPI, "bomb", "Bomb")
		c := e.waitComment(bombPR, head)
		took := time.Since(start)
		for _, want := range []string{"rendering this stand was stopped: sandbox limit reached", "stands/c/stand.yml"} {
			if !strings.Contains(c, want) {
				t.Errorf("the plan lacks %q:\n%s", want, c)
			}
		}
		if st := e.planStatus(head); st.State != gitea.StatusFailure {
			t.Errorf("stands/plan: %+v", st)
		}
		grew := rss() - before
		if grew > 50<<20 {
			t.Errorf("the daemon's peak RSS grew by %d MiB while planning the bomb", grew>>20)
		}
		t.Logf("the bomb was planned in %s; the daemon's peak RSS grew by %d MiB", took.Round(time.Second), grew>>20)
	})

	e.run("an AGit pull request by a reader gets no plan", func(t *testing.T) {
		reader := e.gitea.CreateUser(t, "reader")
		e.repo.AddReader(admin, reader.Name)
		head := e.repo.PushAGit(reader, "sneaky", map[string]string{standPath("e"): daemonStand("e", 6330)})
		st := e.planStatus(head)
		if st.State != gitea.StatusFailure || !strings.Contains(st.Description, "not the tip of a branch") {
			t.Errorf("stands/plan of an AGit head: %+v", st)
		}
		prs, _, err := admin.ListRepoPullRequests(owner, repo, gitea.ListPullRequestsOptions{State: gitea.StateOpen})
		if err != nil {
			t.Fatal(err)
		}
		found := false
		for _, pr := range prs {
			if pr.Head != nil && pr.Head.Sha == head {
				found = true
				if n := e.planComments(pr.Index); n != 0 {
					t.Errorf("%d plan comments on the AGit pull request", n)
				}
			}
		}
		if !found {
			t.Errorf("the AGit push opened no pull request")
		}
	})

	e.run("previews create nothing", func(t *testing.T) {
		if after := listFiles(t, backend); strings.Join(after, ",") != strings.Join(stacksBefore, ",") {
			t.Errorf("stacks before the previews %v, after %v", stacksBefore, after)
		}
		if n := e.hetzner.Sim.Writes("") - writesBefore; n != 0 {
			t.Errorf("%d Hetzner write calls during the previews", n)
		}
	})

	e.run("branch protection lets a fixed pull request through", func(t *testing.T) {
		head := e.repo.ChangeOn("break-b", "b fixed", map[string]string{standPath("b"): daemonStand("b", 6321)})
		e.waitComment(brokenPR, head)
		if st := e.planStatus(head); st.State != gitea.StatusSuccess {
			t.Fatalf("stands/plan after the fix: %+v", st)
		}
		if err := e.repo.TryMerge(devAPI, brokenPR); err != nil {
			t.Fatalf("merge after the plan succeeded: %v", err)
		}
		// The bot's status commits still land on the protected main.
		e.waitStatus("local_b_dev", 3*time.Minute, func(s *reconcile.Status) bool {
			return s.Phase == reason.Ready && s.Timings != nil && s.Reason == reason.Applied && strings.Contains(e.file(standPath("b")), "6321")
		})
	})

	// The fix of b merged above moved main. The hostile pull request edits the kv app b runs: its plan
	// is made again on the merge, after stands/plan said why it is pending. The pull request adding c
	// and d is untouched by the move: no new status, no new plan.
	e.run("main moves: the plans it changes are made again", func(t *testing.T) {
		pr, _, err := admin.GetPullRequest(owner, repo, brokenPR)
		if err != nil || pr.MergedCommitID == nil {
			t.Fatalf("the merged pull request: %v", err)
		}
		merge := *pr.MergedCommitID
		c := e.waitComment(hostilePR, merge)
		if !strings.Contains(c, "merged into `main` at `"+merge[:12]) || !strings.Contains(c, "local_b_dev") {
			t.Errorf("the plan is not of the merge into the moved main:\n%s", c)
		}
		// The comment comes first, stands/plan right after it.
		var pending, final *gitea.Status
		wait.NoError(t, "stands/plan of the hostile head to go pending before its new plan", 30*time.Second, func() error {
			statuses, _, err := admin.ListStatuses(owner, repo, hostileHead, gitea.ListStatusesOption{})
			if err != nil {
				return err
			}
			for _, s := range statuses {
				switch {
				case s.Context != prplan.PlanContext:
				case s.State == gitea.StatusPending && s.Description == "main moved; planning again":
					pending = s
				case s.State != gitea.StatusPending && (final == nil || s.ID > final.ID):
					final = s
				}
			}
			if pending == nil || final == nil || final.ID < pending.ID {
				return fmt.Errorf("pending %+v, final %+v", pending, final)
			}
			return nil
		}, wait.Every(200*time.Millisecond))
		t.Logf("main merged at %s; the hostile plan pending at %s, planned again at %s", pr.Merged, pending.Created, final.Created)
		if c := e.waitComment(addPR, addHead); strings.Contains(c, merge[:12]) {
			t.Errorf("a pull request the move does not touch was planned again:\n%s", c)
		}
		statuses, _, err := admin.ListStatuses(owner, repo, addHead, gitea.ListStatusesOption{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range statuses {
			if s.Context == prplan.PlanContext && pr.Merged != nil && s.Created.After(*pr.Merged) {
				t.Errorf("stands/plan of a pull request the move does not touch changed after the move: %s %q", s.State, s.Description)
			}
		}
	})

	// With --require-review, and this test's protection, which keeps an approval through later
	// pushes: the author pushes after the approval and merges. The change is held, no Pulumi up
	// runs for it, the merge commit's stands/<id> says why, and ctl approve releases it.
	e.stop()
	e.start("--require-review=true")
	e.run("an unreviewed merge is held until ctl approve", func(t *testing.T) {
		e.waitFor("STATUS.md and /metrics to show the review gate on", time.Minute, func() bool {
			return strings.Contains(e.metrics(), "\nstands_review_gate 1\n") && !strings.Contains(e.file("STATUS.md"), "No review gate")
		})
		head1 := e.repo.ChangeOn("weak", "a on 6341", map[string]string{standPath("a"): daemonStand("a", 6341)})
		pr := e.repo.Open(devAPI, "weak", "Move a")
		e.waitComment(pr, head1)
		if _, _, err := admin.CreatePullReview(owner, repo, pr, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, Body: "6341 is fine"}); err != nil {
			t.Fatal(err)
		}
		head2 := e.repo.ChangeOn("weak", "a on 6342, after the approval", map[string]string{standPath("a"): daemonStand("a", 6342)})
		e.waitComment(pr, head2)
		if st := e.planStatus(head2); st.State != gitea.StatusSuccess {
			t.Fatalf("stands/plan of the pushed head: %+v", st)
		}
		ups := e.ups()
		if err := e.repo.TryMerge(devAPI, pr); err != nil {
			t.Fatalf("this test's protection refused the merge: %v", err)
		}
		merged, _, err := admin.GetPullRequest(owner, repo, pr)
		if err != nil || merged.MergedCommitID == nil {
			t.Fatalf("the merged pull request: %v", err)
		}
		commit := *merged.MergedCommitID
		st := e.waitStatus("local_a_dev", 2*time.Minute, func(s *reconcile.Status) bool { return s.Reason == reason.Unreviewed })
		if st.Phase != reason.Blocked || !strings.Contains(st.Message, "another head") || !strings.Contains(st.Message, "ctl approve local_a_dev "+commit[:12]) {
			t.Errorf("the held change's status: %s %q", st.Phase, st.Message)
		}
		// The commit status is set after the status is recorded, by a call of its own.
		var statuses []*gitea.Status
		e.waitFor("the merge commit's stands/local_a_dev to say the change is unreviewed", time.Minute, func() bool {
			statuses, _, _ = admin.ListStatuses(owner, repo, commit, gitea.ListStatusesOption{})
			for _, s := range statuses {
				if s.Context == "stands/local_a_dev" && s.State == gitea.StatusFailure && strings.HasPrefix(s.Description, "not applied: unreviewed change") {
					return true
				}
			}
			return false
		})
		e.waitLog("cycle planned", e.logCount("cycle planned")+3, time.Minute) // three more cycles
		if n := e.ups() - ups; n != 0 {
			t.Fatalf("%d pulumi up for an unreviewed change", n)
		}
		e.ctlApprove(t, "local_a_dev", commit, "")
	})

	// Four eyes (docs/pr-workflow.md#four-eyes), on real Gitea and the bot's writer token: a writer
	// who pushed onto the pull request, a reader and a writer who then asked for changes approve
	// it; merged, b's change is held, naming each. A later pull request of a that a writer who
	// pushed nothing approved lets a through.
	var second *testenv.User
	var pr2 int64
	var merge2 string
	e.run("four eyes: only a second writer's approval counts", func(t *testing.T) {
		var pusher, viewer *testenv.User
		pusher, viewer, second = e.gitea.CreateUser(t, "pusher"), e.gitea.CreateUser(t, "viewer"), e.gitea.CreateUser(t, "second")
		e.repo.AddWriter(admin, pusher.Name)
		e.repo.AddWriter(admin, second.Name)
		e.repo.AddReader(admin, viewer.Name)
		e.repo.ChangeOn("eyes", "b on 6343", map[string]string{standPath("b"): daemonStand("b", 6343)})
		pr := e.repo.Open(devAPI, "eyes", "Move b to 6343")
		pushed, _, err := pusher.Client(t, e.gitea).CreateFile(owner, repo, "eyes.txt", gitea.CreateFileOptions{
			FileOptions: gitea.FileOptions{Message: "a note", BranchName: "eyes"}, Content: base64.StdEncoding.EncodeToString([]byte("looked\n"))})
		if err != nil {
			t.Fatal(err)
		}
		head := pushed.Commit.SHA
		e.waitComment(pr, head)
		if st := e.planStatus(head); st.State != gitea.StatusSuccess {
			t.Fatalf("stands/plan of the pushed head: %+v", st)
		}
		review := func(u *testenv.User, state gitea.ReviewStateType) {
			t.Helper()
			if _, _, err := u.Client(t, e.gitea).CreatePullReview(owner, repo, pr, gitea.CreatePullReviewOptions{State: state, Body: "four eyes", CommitID: head}); err != nil {
				t.Fatalf("%s %s: %v", u.Name, state, err)
			}
		}
		review(viewer, gitea.ReviewStateApproved)
		review(pusher, gitea.ReviewStateApproved)
		review(second, gitea.ReviewStateApproved)
		review(second, gitea.ReviewStateRequestChanges)
		ups := e.ups()
		if err := e.repo.TryMerge(devAPI, pr); err != nil {
			t.Fatalf("this test's protection refused the merge: %v", err)
		}
		st := e.waitStatus("local_b_dev", 2*time.Minute, func(s *reconcile.Status) bool {
			return s.Reason == reason.Unreviewed && strings.Contains(s.Message, "changes requested by second")
		})
		for _, why := range []string{"approved by pusher, who pushed to it", "approved by viewer, whose approval is not official", "changes requested by second"} {
			if !strings.Contains(st.Message, why) {
				t.Errorf("the held change's status does not say %q: %s %q", why, st.Phase, st.Message)
			}
		}
		if st.Phase != reason.Blocked {
			t.Errorf("the change approved by no second writer: %s %s", st.Phase, st.Reason)
		}
		e.waitLog("cycle planned", e.logCount("cycle planned")+2, time.Minute)
		if n := e.ups() - ups; n != 0 {
			t.Fatalf("%d pulumi up for a change no second writer approved", n)
		}

		head2 := e.repo.ChangeOn("eyes-2", "a on 6344", map[string]string{standPath("a"): daemonStand("a", 6344)})
		pr2 = e.repo.Open(devAPI, "eyes-2", "Move a to 6344")
		e.waitComment(pr2, head2)
		if st := e.planStatus(head2); st.State != gitea.StatusSuccess {
			t.Fatalf("stands/plan of %s: %+v", head2[:12], st)
		}
		if _, _, err := second.Client(t, e.gitea).CreatePullReview(owner, repo, pr2, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, Body: "fine", CommitID: head2}); err != nil {
			t.Fatal(err)
		}
		if err := e.repo.TryMerge(devAPI, pr2); err != nil {
			t.Fatalf("the merge: %v", err)
		}
		merged, _, err := admin.GetPullRequest(owner, repo, pr2)
		if err != nil || merged.MergedCommitID == nil {
			t.Fatalf("the merged pull request: %v", err)
		}
		merge2 = *merged.MergedCommitID
		st = e.waitStatus("local_a_dev", 3*time.Minute, func(s *reconcile.Status) bool {
			return s.Phase == reason.Ready && s.LastSuccessfulCommit == merge2
		})
		want := []reconcile.AuthorisedPR{{Number: pr2, Approvers: []string{second.Name}, Head: head2, Merge: merge2}}
		if st.Authorised == nil || !reflect.DeepEqual(st.Authorised.PullRequests, want) {
			t.Errorf("the status names what let the change through as %+v, want %+v", st.Authorised, want)
		}
		if md := e.file("STATUS.md"); !strings.Contains(md, fmt.Sprintf("`#%d by %s`", pr2, second.Name)) {
			t.Errorf("STATUS.md does not name #%d and its approver:\n%s", pr2, md)
		}
		if e.ups() == ups {
			t.Error("a change a second writer approved was not applied")
		}
	})

	// One transition, once (docs/pr-workflow.md#one-transition-once), by a writer whom main's
	// protection no longer stops: a revert pushed around review is held, though a review let its
	// content through before, until ctl approve; a pull request approved and closed without a merge
	// authorises its change for nobody; main reset to the merge of the approved pull request above is
	// held too, since that approval was used by its apply.
	e.run("an approval lets its change through once", func(t *testing.T) {
		if merge2 == "" {
			t.Fatal("the four-eyes part merged no pull request to go back to: see its failure above")
		}
		if _, err := admin.DeleteBranchProtection(owner, repo, "main"); err != nil {
			t.Fatal(err)
		}
		held := func(commit, why string) {
			t.Helper()
			st := e.waitStatus("local_a_dev", 2*time.Minute, func(s *reconcile.Status) bool {
				return s.Reason == reason.Unreviewed && strings.Contains(s.Message, commit[:12])
			})
			if st.Phase != reason.Blocked || !strings.Contains(st.Message, why) {
				t.Errorf("the change at %s: %s %s %q, want it held saying %q", commit[:12], st.Phase, st.Reason, st.Message, why)
			}
		}
		revert := e.repo.Change("a back on 6342, around review", map[string]string{standPath("a"): daemonStand("a", 6342)})
		held(revert, "no reviewed change leads to it")
		e.ctlApprove(t, "local_a_dev", revert, "the revert of incident 7")

		// ctl approve releases the whole change from what is applied: it lists the commits, and
		// refuses two until --all says the operator looked at both.
		one := e.repo.Change("a on 6347, around review", map[string]string{standPath("a"): daemonStand("a", 6347)})
		e.repo.Change("the lifetime policy, which changes no stand's content", map[string]string{manifest.LifetimeFile: "warn_before: 24h\n"})
		two := e.repo.Change("a on 6348, around review", map[string]string{standPath("a"): daemonStand("a", 6348)})
		held(two, "no reviewed change leads to it")
		before := e.ups()
		r := runCLI(t, t.Context(), newRecorder(map[string]string{"STANDS_CONTROL_SOCKET": filepath.Join(e.state, "control.sock"), "SUDO_USER": "oncall"}),
			"ctl", "approve", "local_a_dev", two[:12], "looked", "at", "the", "last")
		if r.code == exitOK || !strings.Contains(r.stderr, "is made of 2 commits") || !strings.Contains(r.stderr, one[:12]) || !strings.Contains(r.stderr, two[:12]) {
			t.Errorf("ctl approve of a change of two commits, without --all: %d\n%s", r.code, r.stderr)
		}
		e.waitLog("cycle planned", e.logCount("cycle planned")+2, time.Minute)
		if e.ups() != before {
			t.Error("a refused ctl approve applied the change")
		}
		e.ctlApprove(t, "local_a_dev", two, "looked at both", "--all")

		head3 := e.repo.ChangeOn("closed", "a on 6346", map[string]string{standPath("a"): daemonStand("a", 6346)})
		pr3 := e.repo.Open(devAPI, "closed", "Move a to 6346")
		e.waitComment(pr3, head3)
		if _, _, err := second.Client(t, e.gitea).CreatePullReview(owner, repo, pr3, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, Body: "fine", CommitID: head3}); err != nil {
			t.Fatal(err)
		}
		closed := gitea.StateClosed
		if _, _, err := admin.EditPullRequest(owner, repo, pr3, gitea.EditPullRequestOption{State: &closed}); err != nil {
			t.Fatal(err)
		}
		ups := e.ups()
		pushed := e.repo.Change("a on 6346, as the closed pull request had it", map[string]string{standPath("a"): daemonStand("a", 6346)})
		held(pushed, fmt.Sprintf("#%d is not merged", pr3))

		e.repo.ForcePush("main", merge2)
		held(merge2, fmt.Sprintf("#%d was applied already", pr2))
		e.waitLog("cycle planned", e.logCount("cycle planned")+2, time.Minute)
		if n := e.ups() - ups; n != 0 {
			t.Errorf("%d pulumi up for changes no unused approval let through", n)
		}

		// A lifetime policy pushed around review (docs/lifetime.md#only-reviewed-ends-take-effect):
		// every stand would end a minute after it was first seen, and be removed at its end. It
		// takes no effect, and says so on the commit, in STATUS.md and in the log.
		policy := e.repo.Change("every stand ends in a minute, around review", map[string]string{manifest.LifetimeFile: "default: 1m\nmerge_at_expiry: true\n"})
		e.waitFor("STATUS.md to say the policy is not in force", 2*time.Minute, func() bool {
			return strings.Contains(e.file("STATUS.md"), "**Lifetime policy change not in force**: `.stands/lifetime.yml` at `"+policy[:12]+"` was not reviewed")
		})
		for _, id := range []string{"local_a_dev", "local_b_dev"} {
			if st := e.waitStatus(id, time.Minute, func(*reconcile.Status) bool { return true }); st.Expires != nil || st.Phase == reason.Expired {
				t.Errorf("%s ends at %v (%s) under a policy no review let through", id, st.Expires, st.Phase)
			}
		}
		var lifetime []string
		statuses, _, err := admin.ListStatuses(owner, repo, policy, gitea.ListStatusesOption{})
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range statuses {
			if s.Context == reconcile.LifetimeContext {
				lifetime = append(lifetime, string(s.State)+": "+s.Description)
			}
		}
		if !slices.Contains(lifetime, "failure: not in force: unreviewed change of the lifetime policy") {
			t.Errorf("%s on the policy's commit: %q", reconcile.LifetimeContext, lifetime)
		}
		if e.logCount("lifetime change not in force: not reviewed") == 0 {
			t.Error("the daemon's log does not say the policy is held")
		}
	})

	e.stop()

	e.run("no secret in comments or commit statuses", func(t *testing.T) {
		haystacks := map[string]string{}
		for _, pr := range []int64{addPR, brokenPR, 3, hostilePR, bombPR} {
			comments, _, err := admin.ListIssueComments(owner, repo, pr, gitea.ListIssueCommentOptions{})
			if err != nil {
				t.Fatal(err)
			}
			for _, c := range comments {
				haystacks[fmt.Sprintf("comment %d on #%d", c.ID, pr)] = c.Body
			}
		}
		for _, sha := range e.allCommits() {
			statuses, _, err := admin.ListStatuses(owner, repo, sha, gitea.ListStatusesOption{})
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range statuses {
				haystacks[fmt.Sprintf("status %s on %s", s.Context, sha[:12])] = s.Description + " " + s.TargetURL
			}
		}
		log, err := os.ReadFile(e.logFile)
		if err != nil {
			t.Fatal(err)
		}
		haystacks["the daemon's log"] = string(log)
		// Every Pulumi process the daemon started: no secret on a command line or in an environment
		// (the CLI reads the passphrase, the provider the Hetzner token, from files).
		argv, err := os.ReadFile(e.counts)
		if err != nil || len(argv) == 0 {
			t.Fatalf("no Pulumi process recorded: %v", err)
		}
		haystacks["the Pulumi processes' command lines"] = string(argv)
		env, err := os.ReadFile(e.counts + ".env")
		if err != nil || !strings.Contains(string(env), "PULUMI_HOME=") {
			t.Fatalf("no Pulumi environment recorded: %v", err)
		}
		for _, f := range scanSecrets(map[string]string{"the Pulumi processes' environments": string(env)}, e.secrets) {
			t.Errorf("secret found: %s", f)
		}
		if len(haystacks) < 8 {
			t.Fatalf("only %d comments and statuses found", len(haystacks))
		}
		control := map[string]string{"control": "x" + base64.StdEncoding.EncodeToString([]byte(e.secrets["kv-password"])) + url.QueryEscape(e.secrets["kv-password"])}
		if len(scanSecrets(control, map[string]string{"kv": e.secrets["kv-password"]})) != 1 {
			t.Fatal("the scan finds nothing in its positive control")
		}
		for _, f := range scanSecrets(haystacks, e.secrets) {
			t.Errorf("secret found: %s", f)
		}
		var contexts []string
		for k := range haystacks {
			if strings.HasPrefix(k, "status stands/local_") {
				contexts = append(contexts, k)
			}
		}
		sort.Strings(contexts)
		if len(contexts) == 0 {
			t.Errorf("no stands/<stand-id> commit status on any commit")
		}
	})
}

func listFiles(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	err := filepath.Walk(dir, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && !strings.HasSuffix(p, ".bak") {
			rel, _ := filepath.Rel(dir, p)
			out = append(out, rel)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(out)
	return out
}

// waitComment waits for the plan comment of pull request n to be about head.
func (e *daemonEnv) waitComment(n int64, head string) string {
	e.t.Helper()
	var body string
	e.waitFor(fmt.Sprintf("the plan comment on #%d for %s", n, head[:12]), 3*time.Minute, func() bool {
		comments, _, err := e.gitea.API(e.t).ListIssueComments(e.repo.Info.Owner.UserName, e.repo.Info.Name, n, gitea.ListIssueCommentOptions{})
		if err != nil {
			return false
		}
		for _, c := range comments {
			if strings.Contains(c.Body, prplan.CommentMarker) && strings.Contains(c.Body, head[:12]) {
				body = c.Body
				return true
			}
		}
		return false
	})
	return body
}

func (e *daemonEnv) planComments(n int64) int {
	comments, _, err := e.gitea.API(e.t).ListIssueComments(e.repo.Info.Owner.UserName, e.repo.Info.Name, n, gitea.ListIssueCommentOptions{})
	if err != nil {
		e.t.Fatal(err)
	}
	count := 0
	for _, c := range comments {
		if strings.Contains(c.Body, prplan.CommentMarker) {
			count++
		}
	}
	return count
}

// metrics is what the daemon serves on /metrics now, "" when it does not answer.
func (e *daemonEnv) metrics() string {
	resp, err := http.Get("http://" + e.listen + "/metrics")
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return string(body)
}

// ctlApprove releases stand id's change held at commit with ctl approve, as on-call would, giving
// why ("" gives none: the deprecated form, which warns), and waits for it applied: Ready at commit,
// after a pulumi up, its status naming the operator and the reason.
func (e *daemonEnv) ctlApprove(t *testing.T, id, commit, why string, flags ...string) {
	t.Helper()
	ups := e.ups()
	args := append([]string{"ctl", "approve", id, commit[:12]}, flags...)
	if why != "" {
		args = append(args, strings.Fields(why)...)
	}
	r := runCLI(t, t.Context(), newRecorder(map[string]string{"STANDS_CONTROL_SOCKET": filepath.Join(e.state, "control.sock"), "SUDO_USER": "oncall"}), args...)
	if r.code != exitOK {
		t.Fatalf("ctl approve: %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	if warned := strings.Contains(r.stderr, "approve without a REASON is deprecated"); warned != (why == "") {
		t.Errorf("ctl approve %q warned %v of the missing reason: %s", why, warned, r.stderr)
	}
	st := e.waitStatus(id, 3*time.Minute, func(s *reconcile.Status) bool { return s.Phase == reason.Ready && s.LastSuccessfulCommit == commit })
	if e.ups() == ups {
		t.Errorf("ctl approve of %s applied nothing", id)
	}
	if a := st.Authorised; a == nil || a.Operator == nil || !strings.HasPrefix(a.Operator.By, "oncall as ") || a.Operator.Reason != why {
		t.Errorf("%s's status names what let its change through as %+v", id, a)
	}
}

// planStatus is the final stands/plan status of a commit (waiting while it is pending).
func (e *daemonEnv) planStatus(sha string) *gitea.Status {
	e.t.Helper()
	var newest *gitea.Status
	wait.NoError(e.t, "a final stands/plan on "+sha[:12], time.Minute, func() error {
		statuses, _, err := e.gitea.API(e.t).ListStatuses(e.repo.Info.Owner.UserName, e.repo.Info.Name, sha, gitea.ListStatusesOption{})
		if err != nil {
			return err
		}
		newest = nil
		var seen []string
		for _, s := range statuses {
			seen = append(seen, fmt.Sprintf("%d %s %s %q", s.ID, s.Context, s.State, s.Description))
			if s.Context == prplan.PlanContext && (newest == nil || s.ID > newest.ID) {
				newest = s
			}
		}
		if newest == nil || newest.State == gitea.StatusPending {
			return fmt.Errorf("statuses %v", seen)
		}
		return nil
	}, wait.Every(250*time.Millisecond))
	return newest
}

// allCommits lists every commit of every branch.
func (e *daemonEnv) allCommits() []string {
	var out []string
	for _, c := range e.commits() {
		out = append(out, c.Hash.String())
	}
	return out
}

func (e *daemonEnv) stateDir() string { return e.state }

// alertMetricsServed checks that every metric deploy/alerts.yml uses, of those want picks, is in
// metrics (a /metrics page).
func alertMetricsServed(t *testing.T, metrics string, want func(name string) bool) {
	t.Helper()
	rules, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "deploy", "alerts.yml"))
	if err != nil {
		t.Fatal(err)
	}
	checked := 0
	for _, name := range regexp.MustCompile(`\bstands_[a-z_]+`).FindAllString(string(rules), -1) {
		if !want(name) {
			continue
		}
		checked++
		if !strings.Contains(metrics, "\n"+name) && !strings.Contains(metrics, "# TYPE "+name) {
			t.Errorf("deploy/alerts.yml uses %s, which /metrics does not serve", name)
		}
	}
	if checked < 2 {
		t.Errorf("deploy/alerts.yml names %d metrics to check", checked)
	}
}

// replicaMetric says whether a metric is served with --replicas only.
func replicaMetric(name string) bool {
	return strings.HasPrefix(name, "stands_lease") || strings.HasPrefix(name, "stands_replica")
}
