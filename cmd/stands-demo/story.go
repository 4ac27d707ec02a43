package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"sort"
	"strings"
	"time"

	"code.gitea.io/sdk/gitea"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
	"github.com/stands-engine/stands-reconciler/prplan"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/safeguard"
	"github.com/stands-engine/stands-reconciler/stands"
)

// The stand the pull request adds: one server with the kv store, from the example's shared base.
const (
	newStandPath = "stands/review/stand.yml"
	newStandID   = owner + "_demo_review"
	newStand     = `# A stand to review a feature on: one server with the key-value store, from the shared base.
from_dep_manifest: ../../bases/common.yml
stand:
  project: demo
  env: review
nodes:
  main:
    profile: small
    apps: [kv]
apps:
  kv:
    instances:
      cache:
        preferences:
          port: 6379
`
)

// story tells what happens, step by step; each expectation is printed with its verdict, and under
// `check` the first one that fails ends the story.
type story struct {
	d      *demo
	out    io.Writer
	strict bool
	failed []string
	pr     int64 // the pull request adding the stand
}

// errExpectation: a step did not turn out as the story says (check only).
var errExpectation = errors.New("expectation failed")

func (s *story) expect(ok bool, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if ok {
		fmt.Fprintf(s.out, "    ok    %s\n", what)
		return nil
	}
	fmt.Fprintf(s.out, "    FAIL  %s\n", what)
	s.failed = append(s.failed, what)
	if s.strict {
		return fmt.Errorf("%w: %s", errExpectation, what)
	}
	return nil
}

func (s *story) step(n int, title string) { fmt.Fprintf(s.out, "\n%d. %s\n", n, title) }

// tell runs the story's steps in order.
func (s *story) tell(ctx context.Context) error {
	for _, step := range []func(context.Context) error{s.exampleStandsComeUp, s.pullRequestIsPlanned, s.reviewerMerges, s.mergeIsApplied, s.howItLooks,
		s.markupStaysText} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	return nil
}

func (s *story) exampleStandsComeUp(ctx context.Context) error {
	if s.d.p.full {
		s.step(1, "The reconciler applies the example stands: QEMU VMs behind hcloudsim, set up over SSH, the kv store under Podman (minutes per VM under TCG)")
	} else {
		s.step(1, "The reconciler applies the example stands (a server each in hcloudsim, through the real Pulumi CLI)")
	}
	entries, err := os.ReadDir(s.d.p.examples + "/stands")
	if err != nil {
		return err
	}
	want := len(entries)
	// One of them names another owner (stand.owner: qa): this reconciler leaves it alone, Blocked.
	settled := func(all map[string]*reconcile.Status) bool {
		for _, st := range all {
			if st.Phase != reason.Ready && st.Reason != reason.OtherOwner {
				return false
			}
		}
		return len(all) >= want
	}
	statuses, err := s.d.waitStatuses(ctx, s.out, s.d.applyTime(10*time.Minute), settled)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ready, others []string
	for _, id := range sortedKeys(statuses) {
		if statuses[id].Phase == reason.Ready {
			ready = append(ready, id)
		} else if statuses[id].Reason == reason.OtherOwner && statuses[id].Phase == reason.Blocked {
			others = append(others, id)
		}
	}
	if err := s.expect(len(ready) == want-1 && len(others) == 1, "%d of the %d example stands Ready, each with a status commit: %s", len(ready), want, strings.Join(ready, ", ")); err != nil {
		return err
	}
	if err := s.expect(len(others) == 1, "the stand of another owner left alone, Blocked (%s): %s", reason.OtherOwner, strings.Join(others, ", ")); err != nil {
		return err
	}
	md, _ := s.d.file("STATUS.md")
	ids := sortedKeys(statuses)
	if err := s.expect(md != "" && containsAll(md, ids...), "STATUS.md lists %s", strings.Join(ids, ", ")); err != nil {
		return err
	}
	// main is protected as docs/pr-workflow.md says, and the reconciler reads so (its first read may
	// meet Gitea still settling the new repository: it reads again within 15 s).
	var metrics string
	var missing []string
	_ = poll(ctx, time.Minute, func() bool {
		metrics, _ = s.d.get("/metrics")
		missing = nil
		for _, name := range safeguard.Names {
			if !strings.Contains(metrics, fmt.Sprintf("stands_branch_safeguard_missing{safeguard=%q} 0", name)) {
				missing = append(missing, name)
			}
		}
		return len(missing) == 0 && strings.Contains(metrics, "stands_branch_protection_read 1")
	})
	md, _ = s.d.file("STATUS.md")
	return s.expect(len(missing) == 0 && strings.Contains(metrics, "stands_branch_protection_read 1") && !strings.Contains(md, "The protection of"),
		"the reconciler finds every safeguard in main's protection, read whole (missing or unknown: %v)", missing)
}

func (s *story) pullRequestIsPlanned(ctx context.Context) error {
	s.step(2, "An engineer opens a pull request adding the stand "+newStandID)
	head, err := s.d.push(ctx, "main", "add-review-stand", "Add a stand to review the checkout feature on", map[string][]byte{newStandPath: []byte(newStand)})
	if err != nil {
		return err
	}
	pr, _, err := s.d.api.CreatePullRequest(adminName, repoName, gitea.CreatePullRequestOption{Head: "add-review-stand", Base: "main",
		Title: "Add a stand to review the checkout feature on", Body: "A one-server stand with the key-value store, for a week."})
	if err != nil {
		return fmt.Errorf("open the pull request: %w", err)
	}
	s.pr = pr.Index
	fmt.Fprintf(s.out, "  %s\n  the reconciler plans it (a preview, no secret read) and comments:\n", pr.HTMLURL)
	comment, err := s.d.waitPlanComment(ctx, pr.Index, head, 5*time.Minute)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	for _, line := range strings.Split(strings.TrimSpace(comment), "\n") {
		if !strings.HasPrefix(line, "<!--") {
			fmt.Fprintf(s.out, "  │ %s\n", line)
		}
	}
	if err := s.expect(strings.Contains(comment, "`"+newStandID+"`"), "the plan comment names the new stand %s", newStandID); err != nil {
		return err
	}
	if err := s.expect(strings.Contains(comment, "Monthly cost change: `+"), "the plan comment gives its cost"); err != nil {
		return err
	}
	state, err := s.d.waitCommitStatus(ctx, head, prplan.PlanContext, time.Minute)
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	return s.expect(state == gitea.StatusSuccess, "commit status %s on %s: %s", prplan.PlanContext, head[:12], state)
}

func (s *story) reviewerMerges(ctx context.Context) error {
	s.step(3, "The reviewer approves it, pushes a fix onto it and approves again; the reconciler says that approval is of their own change (main requires a green stands/review), so a second reviewer approves and the merge goes through")
	rc, err := s.d.reviewer.Client(s.d.gitea)
	if err != nil {
		return err
	}
	// Without the approval, Gitea refuses: main's protection, not the story's order, keeps an
	// unreviewed change out (stands/review is pending until an approval counts, and Gitea may say
	// either).
	_, early := s.d.merge(ctx, s.d.reviewer, s.pr)
	if err := s.expect(refusedUnapproved(early), "without an approval the merge is refused (%v)", errOr(early, "it was merged")); err != nil {
		return err
	}
	approve := func(user *localserver.User, head string) error {
		c, err := user.Client(s.d.gitea)
		if err != nil {
			return err
		}
		if _, _, err := c.CreatePullReview(adminName, repoName, s.pr, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved,
			Body: "The plan creates one cx22 server and nothing else: approved.", CommitID: head}); err != nil {
			return fmt.Errorf("approve as %s: %w", user.Name, err)
		}
		return nil
	}
	pr, _, err := rc.GetPullRequest(adminName, repoName, s.pr)
	if err != nil {
		return err
	}
	if err := approve(s.d.reviewer, pr.Head.Sha); err != nil {
		return err
	}
	// The reviewer pushes a fix onto the author's pull request: Gitea dismisses the approval (it was
	// of the old head), and the reviewer approves again, now their own change.
	head, err := s.d.pushAs(ctx, s.d.reviewer, "add-review-stand", "add-review-stand", "Say what the stand is for",
		map[string][]byte{newStandPath: []byte("# The checkout feature's review stand.\n" + newStand)})
	if err != nil {
		return err
	}
	if _, err := s.d.waitPlanComment(ctx, s.pr, head, 5*time.Minute); err != nil {
		return err
	}
	if err := approve(s.d.reviewer, head); err != nil {
		return err
	}
	state, desc, err := s.d.waitReview(ctx, head, func(state gitea.StatusState, desc string) bool {
		return strings.Contains(desc, "who pushed to it") || strings.Contains(desc, "who authored")
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	fmt.Fprintf(s.out, "  %s on %s: %s %q\n", prplan.ReviewContext, head[:12], state, desc)
	if err := s.expect(state == gitea.StatusPending && strings.Contains(desc, "approved by "+reviewerName+", who"),
		"the reconciler says the reviewer's approval is of their own change"); err != nil {
		return err
	}
	_, own := s.d.merge(ctx, s.d.reviewer, s.pr)
	if err := s.expect(errors.Is(own, errMergeRefused), "with only that approval, the merge is refused (%v)", errOr(own, "it was merged")); err != nil {
		return err
	}
	if err := approve(s.d.lead, head); err != nil {
		return err
	}
	state, desc, err = s.d.waitReview(ctx, head, func(state gitea.StatusState, _ string) bool { return state == gitea.StatusSuccess })
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	if err := s.expect(state == gitea.StatusSuccess && strings.Contains(desc, leadName),
		"%s approves: %s %s %q", leadName, prplan.ReviewContext, state, desc); err != nil {
		return err
	}
	merged, err := s.d.merge(ctx, s.d.reviewer, s.pr)
	if err := s.expect(err == nil && merged != "", "the merge is accepted (%v)", errOr(err, "merge commit "+short(merged))); err != nil {
		return err
	}
	s.d.mergeCommit = merged
	return nil
}

// refusedUnapproved says whether Gitea refused a merge for want of an approval, or of the green
// stands/review that stands for one.
func refusedUnapproved(err error) bool {
	why := strings.ToLower(errOr(err, ""))
	return errors.Is(err, errMergeRefused) && (strings.Contains(why, "approv") || strings.Contains(why, "status check"))
}

// waitReview waits for stands/review on head to be what done says, for up to two minutes, and
// returns it as it was last read.
func (d *demo) waitReview(ctx context.Context, head string, done func(gitea.StatusState, string) bool) (gitea.StatusState, string, error) {
	var state gitea.StatusState
	var desc string
	err := poll(ctx, 2*time.Minute, func() bool {
		cs, _, err := d.api.GetCombinedStatus(adminName, repoName, head)
		if err != nil {
			return false
		}
		for _, st := range cs.Statuses {
			if st.Context == prplan.ReviewContext {
				state, desc = st.State, st.Description
			}
		}
		return state != "" && done(state, desc)
	})
	return state, desc, err
}

func (s *story) mergeIsApplied(ctx context.Context) error {
	s.step(4, "The reconciler applies the merge and reports back in Git")
	if s.d.mergeCommit == "" {
		return s.expect(false, "a merge to apply")
	}
	all, err := s.d.waitStatuses(ctx, s.out, s.d.applyTime(5*time.Minute), func(all map[string]*reconcile.Status) bool {
		st := all[newStandID]
		return st != nil && st.Phase == reason.Ready && st.LastSuccessfulCommit == s.d.mergeCommit
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	st := all[newStandID]
	seen := "no status"
	if st != nil {
		seen = fmt.Sprintf("%s: %s", st.Phase, st.Message)
	}
	if err := s.expect(st != nil && st.Phase == reason.Ready && st.LastSuccessfulCommit == s.d.mergeCommit,
		"%s Ready at the merge commit %s (%s)", newStandID, short(s.d.mergeCommit), seen); err != nil {
		return err
	}
	author, err := s.d.lastAuthor(stands.StatusPath(newStandID))
	if err := s.expect(err == nil && author == botName, "its status commit is the bot's (author %q)", author); err != nil {
		return err
	}
	md, _ := s.d.file("STATUS.md")
	if err := s.expect(strings.Contains(md, newStandID), "STATUS.md lists %s", newStandID); err != nil {
		return err
	}
	metrics, _ := s.d.get("/metrics")
	if err := s.expect(strings.Contains(metrics, `stands_stands{phase="Ready"} 3`), "/metrics: 3 stands Ready"); err != nil {
		return err
	}
	leaks, err := s.d.secretsShown(all)
	if err != nil {
		return err
	}
	return s.expect(len(leaks) == 0, "no secret of the example's in a status file, STATUS.md, a commit message or the reconciler's log%s", strings.Join(leaks, ""))
}

func (s *story) howItLooks(ctx context.Context) error {
	s.step(5, "How it looks to the reviewer: the pages rendered in headless chromium, logged in as "+reviewerName)
	pages, err := s.d.render(ctx, []map[string]string{
		{"name": "plan-comment", "path": fmt.Sprintf("%s/%s/pulls/%d", adminName, repoName, s.pr), "marker": "Stands plan for"},
		{"name": "status-md", "path": adminName + "/" + repoName + "/src/branch/" + statusBranch + "/STATUS.md", "marker": newStandID},
	})
	if errors.Is(err, errNoBrowser) && !s.strict {
		fmt.Fprintf(s.out, "  skipped: %v\n", err)
		return nil
	}
	if err := s.expect(err == nil && len(pages) == 2, "the browser rendered the pull request and STATUS.md (%v)", errOr(err, "ok")); err != nil {
		return err
	}
	plan, status := pages[0], pages[1]
	for _, p := range pages {
		fmt.Fprintf(s.out, "  %s → %s\n", p.URL, p.Screenshot)
		if err := s.expect(p.Found && !p.RawMarkdown, "%s: the reconciler's Markdown rendered, none left as text", p.Name); err != nil {
			return err
		}
		if err := s.expect(p.Styled, "%s: with Gitea's stylesheet, as a reviewer sees it", p.Name); err != nil {
			return err
		}
	}
	planRow, costCol := tableCell(plan.Tables, newStandID, "monthly cost")
	if err := s.expect(costCol >= 0 && strings.HasPrefix(planRow[costCol], "+"), "plan comment: a table whose row %s has a monthly cost (%q)", newStandID, cell(planRow, costCol)); err != nil {
		return err
	}
	statusRow, phaseCol := tableCell(status.Tables, newStandID, "phase")
	if err := s.expect(phaseCol >= 0 && statusRow[phaseCol] == string(reason.Ready), "STATUS.md: a table whose row %s says %s (%q)", newStandID, reason.Ready, cell(statusRow, phaseCol)); err != nil {
		return err
	}
	var broken []string
	for _, p := range pages {
		for _, l := range p.Links {
			if l.Status < 200 || l.Status >= 400 {
				broken = append(broken, fmt.Sprintf("%s (%d)", l.Href, l.Status))
			}
		}
	}
	return s.expect(len(status.Links) > 0 && len(broken) == 0, "every link of theirs resolves (%d links; broken: %v)", len(plan.Links)+len(status.Links), broken)
}

// hostileFolder names a stand's folder as an author could, to make the plan comment's list of
// warnings, which names the file, into markup: a <details> that would fold away what follows, an
// image, a link. The reconciler shows it as text (docs/architecture.md#rendering).
const hostileFolder = "stands/x`<details><summary>nothing to see</summary>`<img src=x>[ok](https://example.test)"

// markupStaysText opens a pull request whose author tries to hide the removal of the stand the
// story added, with markup in a folder's name, and reads its plan in the browser: every row shown,
// the name as text, no element the reconciler did not write. The pull request is closed unmerged.
func (s *story) markupStaysText(ctx context.Context) error {
	s.step(6, "An author tries to hide a removal in the plan with markup in a folder's name")
	oldForm := strings.Replace(newStand, "env: review", "env: hostile", 1) + "users:\n  sudo: admin\n  app: app\n" // a warning names the file
	head, err := s.d.push(ctx, "main", "hide-a-removal", "Tidy up", map[string][]byte{newStandPath: nil, hostileFolder + "/stand.yml": []byte(oldForm)})
	if err != nil {
		return err
	}
	pr, _, err := s.d.api.CreatePullRequest(adminName, repoName, gitea.CreatePullRequestOption{Head: "hide-a-removal", Base: "main", Title: "Tidy up"})
	if err != nil {
		return fmt.Errorf("open the pull request: %w", err)
	}
	defer func() {
		closed := gitea.StateClosed
		_, _, _ = s.d.api.EditPullRequest(adminName, repoName, pr.Index, gitea.EditPullRequestOption{State: &closed})
	}()
	if _, err := s.d.waitPlanComment(ctx, pr.Index, head, 5*time.Minute); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	pages, err := s.d.render(ctx, []map[string]string{{"name": "hostile-plan", "path": fmt.Sprintf("%s/%s/pulls/%d", adminName, repoName, pr.Index), "marker": "Stands plan for"}})
	if errors.Is(err, errNoBrowser) && !s.strict {
		fmt.Fprintf(s.out, "  skipped: %v\n", err)
		return nil
	}
	if err := s.expect(err == nil && len(pages) == 1 && pages[0].Found, "the browser rendered the plan (%v)", errOr(err, "ok")); err != nil {
		return err
	}
	plan := pages[0]
	row, planCol := tableCell(plan.Tables, newStandID, "plan")
	if err := s.expect(planCol >= 0 && strings.Contains(row[planCol], "destroy"), "the removal of %s is a row of the plan (%q)", newStandID, cell(row, planCol)); err != nil {
		return err
	}
	if err := s.expect(strings.Contains(plan.Text, "<details><summary>nothing to see</summary>"), "the folder's name is shown as the text it is"); err != nil {
		return err
	}
	var foreign []string
	for _, e := range plan.Elements {
		if slices.Contains([]string{"details", "summary", "img", "script", "style", "iframe", "form", "input"}, e) {
			foreign = append(foreign, e)
		}
	}
	for _, l := range plan.Links {
		if !strings.HasPrefix(l.Href, s.d.gitea.URL) {
			foreign = append(foreign, "a link to "+l.Href)
		}
	}
	return s.expect(len(foreign) == 0, "no element the reconciler did not write (%v)", foreign)
}

// tableCell finds, in any of tables, the row starting with first and the column named col.
func tableCell(tables []renderedTable, first, col string) ([]string, int) {
	for _, t := range tables {
		if r, c := t.row(first), t.column(col); r != nil && c >= 0 && c < len(r) {
			return r, c
		}
	}
	return nil, -1
}

func cell(row []string, i int) string {
	if i < 0 || i >= len(row) {
		return ""
	}
	return row[i]
}

// secretsShown lists where a value the stands read from Vault appears although it must not: the
// status files (their connection records are masked), STATUS.md, the commit messages of main and of
// the status branch, and the reconciler's log. Values are matched whole, and never printed.
func (d *demo) secretsShown(all map[string]*reconcile.Status) ([]string, error) {
	secrets, err := exampleSecrets(d.p)
	if err != nil {
		return nil, err
	}
	places := map[string]string{}
	for id := range all {
		places[stands.StatusPath(id)], _ = d.file(stands.StatusPath(id))
	}
	places["STATUS.md"], _ = d.file("STATUS.md")
	for _, branch := range []string{"main", statusBranch} {
		commits, _, err := d.api.ListRepoCommits(adminName, repoName, gitea.ListCommitOptions{SHA: branch, ListOptions: gitea.ListOptions{PageSize: 50}})
		if err != nil {
			return nil, fmt.Errorf("list commits of %s: %w", branch, err)
		}
		for _, c := range commits {
			if c.RepoCommit != nil {
				places["commit "+short(c.SHA)] = c.RepoCommit.Message
			}
		}
	}
	places["the reconciler's log"], _ = readFile(d.p.join("stands-reconciler", "stands-reconciler.log"))
	var leaks []string
	for _, where := range sortedKeys(places) {
		for _, name := range sortedKeys(secrets) {
			if strings.Contains(places[where], secrets[name]) {
				leaks = append(leaks, fmt.Sprintf("; %s holds %s", where, name))
			}
		}
	}
	return leaks, nil
}

// get is a GET of the reconciler's listener.
func (d *demo) get(path string) (string, error) {
	resp, err := http.Get("http://" + d.listen + path)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	return string(body), err
}

// applyTime is how long applies of servers take at most: VMs under TCG boot in minutes where
// records take seconds.
func (d *demo) applyTime(servers time.Duration) time.Duration {
	if d.p.full {
		return 4 * servers
	}
	return servers
}

// waitStatuses polls the status files until done holds or timeout passes, printing each
// stand's phase as it changes and, in between, what the reconciler logs it is doing; it returns the
// last statuses read.
func (d *demo) waitStatuses(ctx context.Context, out io.Writer, timeout time.Duration, done func(map[string]*reconcile.Status) bool) (map[string]*reconcile.Status, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	seen := map[string]string{}
	t0 := time.Now()
	for {
		for _, l := range d.progress.next() {
			fmt.Fprintf(out, "  %6.1fs  %-24s             %s\n", time.Since(t0).Seconds(), l.Stand, oneLine(l.String()))
		}
		all := d.statuses()
		for _, id := range sortedKeys(all) {
			st := all[id]
			if now := string(st.Phase) + " " + st.Message; seen[id] != now {
				seen[id] = now
				fmt.Fprintf(out, "  %6.1fs  %-24s %-11s %s\n", time.Since(t0).Seconds(), id, st.Phase, oneLine(st.Message))
			}
		}
		if done(all) {
			return all, nil
		}
		select {
		case <-ctx.Done():
			return all, ctx.Err()
		case <-time.After(2 * time.Second):
		}
	}
}

// statuses reads every status file (none while Gitea does not answer).
func (d *demo) statuses() map[string]*reconcile.Status {
	out := map[string]*reconcile.Status{}
	entries, _, err := d.api.ListContents(adminName, repoName, statusBranch, "status")
	if err != nil {
		return out
	}
	for _, e := range entries {
		if !strings.HasSuffix(e.Name, ".json") {
			continue
		}
		data, err := d.file(e.Path)
		st := &reconcile.Status{}
		if err == nil && json.Unmarshal([]byte(data), st) == nil {
			out[st.ID] = st
		}
	}
	return out
}

// file is a file of the status branch's head.
func (d *demo) file(name string) (string, error) {
	data, _, err := d.api.GetFile(adminName, repoName, statusBranch, name)
	return string(data), err
}

// waitPlanComment waits for the reconciler's plan comment on pull request n for head.
func (d *demo) waitPlanComment(ctx context.Context, n int64, head string, timeout time.Duration) (string, error) {
	var body string
	err := poll(ctx, timeout, func() bool {
		comments, _, _ := d.api.ListIssueComments(adminName, repoName, n, gitea.ListIssueCommentOptions{})
		for _, c := range comments {
			if strings.Contains(c.Body, prplan.CommentMarker) && strings.Contains(c.Body, head[:12]) {
				body = c.Body
				return true
			}
		}
		return false
	})
	return body, err
}

// waitCommitStatus waits until the commit status context of ref is no longer pending.
func (d *demo) waitCommitStatus(ctx context.Context, ref, context string, timeout time.Duration) (gitea.StatusState, error) {
	var state gitea.StatusState
	err := poll(ctx, timeout, func() bool {
		cs, _, err := d.api.GetCombinedStatus(adminName, repoName, ref)
		if err != nil {
			return false
		}
		for _, st := range cs.Statuses {
			if st.Context == context {
				state = st.State
			}
		}
		return state != "" && state != gitea.StatusPending
	})
	return state, err
}

// merge merges pull request n as user once Gitea finds it mergeable; it returns the merge commit,
// or Gitea's reason for refusing.
func (d *demo) merge(ctx context.Context, user *localserver.User, n int64) (string, error) {
	c, err := user.Client(d.gitea)
	if err != nil {
		return "", err
	}
	if err := poll(ctx, time.Minute, func() bool {
		pr, _, err := c.GetPullRequest(adminName, repoName, n)
		return err == nil && pr.Mergeable
	}); err != nil {
		return "", fmt.Errorf("pull request %d is not mergeable: %w", n, err)
	}
	// The SDK's merge call drops Gitea's reason for a refusal: the story shows it.
	body, _ := json.Marshal(gitea.MergePullRequestOption{Style: gitea.MergeStyleMerge})
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%sapi/v1/repos/%s/%s/pulls/%d/merge", d.gitea.URL, adminName, repoName, n), bytes.NewReader(body))
	if err != nil {
		return "", err
	}
	req.Header.Set("Authorization", "token "+user.Token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	msg, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var apiErr struct{ Message string }
		_ = json.Unmarshal(msg, &apiErr)
		return "", fmt.Errorf("%w: %s: %s", errMergeRefused, resp.Status, apiErr.Message)
	}
	pr, _, err := c.GetPullRequest(adminName, repoName, n)
	if err != nil || pr.MergedCommitID == nil {
		return "", fmt.Errorf("merged pull request %d: %v", n, err)
	}
	return *pr.MergedCommitID, nil
}

// errMergeRefused: Gitea answered the merge with a refusal.
var errMergeRefused = errors.New("merge refused")

// lastAuthor is the author of the newest commit of the status branch touching path.
func (d *demo) lastAuthor(path string) (string, error) {
	commits, _, err := d.api.ListRepoCommits(adminName, repoName, gitea.ListCommitOptions{SHA: statusBranch, Path: path, ListOptions: gitea.ListOptions{PageSize: 1}})
	if err != nil {
		return "", err
	}
	if len(commits) == 0 || commits[0].RepoCommit == nil || commits[0].RepoCommit.Author == nil {
		return "", fmt.Errorf("no commit touches %s", path)
	}
	return commits[0].RepoCommit.Author.Name, nil
}

// where prints where to look, and keeps it in ACCESS.txt (0600: it holds the demo's passwords).
func (d *demo) where(out io.Writer, pr int64) error {
	repo := d.gitea.URL + adminName + "/" + repoName
	vms := ""
	if d.p.full {
		vms = "\nVM consoles  " + d.p.vmDir() + "/*/console.log"
	}
	text := fmt.Sprintf(`Gitea        %[1]s  (log in as %[2]s / %[3]s, or %[4]s / %[5]s)
repository   %[6]s
STATUS.md    %[6]s/src/branch/%[11]s/STATUS.md
pull request %[6]s/pulls/%[7]d
metrics      http://%[8]s/metrics
logs         %[9]s/*/*.log%[10]s
stop         make demo-down (or Ctrl-C here)
`, d.gitea.URL, adminName, d.gitea.Password, reviewerName, d.reviewer.Password, repo, pr, d.listen, d.p.root, vms, statusBranch)
	fmt.Fprintf(out, "\nWhere to look:\n%s", text)
	return os.WriteFile(d.p.join("ACCESS.txt"), []byte(text), 0o600)
}

func poll(ctx context.Context, timeout time.Duration, cond func() bool) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	for !cond() {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
	return nil
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}

func oneLine(s string) string {
	s = strings.Join(strings.Fields(s), " ")
	if len(s) > 90 {
		s = s[:87] + "…"
	}
	return s
}

func short(sha string) string { return sha[:min(12, len(sha))] }

func errOr(err error, ok string) string {
	if err != nil {
		return err.Error()
	}
	return ok
}
