package gitsource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unicode"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"slices"

	"code.gitea.io/sdk/gitea"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

func TestPublishToGitea(t *testing.T) {
	g := testenv.StartGitea(t)
	ctx := context.Background()
	token := WithToken(g.User, func() (string, error) { return g.Token, nil })

	t.Run("tracked branch", func(t *testing.T) {
		p := g.CreateRepo(t, "tracked")
		human := p.Commit("stands/a/stand.yml", "stand: {project: a, env: dev}\n", "add a")
		src := New(p.Info.CloneURL, "main", token)
		if _, err := src.Fetch(ctx); err != nil {
			t.Fatal(err)
		}
		files := map[string][]byte{"status/local_a_dev.json": []byte(`{"phase":"Ready"}` + "\n"), "STATUS.md": []byte("| a | Ready |\n")}
		c1, err := src.Publish(ctx, files, "status: a Ready")
		if err != nil || c1 == "" {
			t.Fatalf("first publish: %q %v", c1, err)
		}
		snap, err := src.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if snap.Commit != c1 || snap.Source != human || snap.Message != "add a" {
			t.Errorf("after our status commit: commit %s source %s (%q), want %s and source %s", snap.Commit, snap.Source, snap.Message, c1, human)
		}
		if got := read(t, snap, "status/local_a_dev.json"); got != string(files["status/local_a_dev.json"]) {
			t.Errorf("status file reads %q", got)
		}
		read(t, snap, "stands/a/stand.yml")
		if c, err := src.Publish(ctx, files, "status: again"); err != nil || c != "" {
			t.Errorf("unchanged status made commit %q (%v)", c, err)
		}
		// A human editing status is not the reconciler; the reconciler touching a stand is not status.
		edited := p.Commit("status/local_a_dev.json", `{"phase":"Failed"}`, "hand edit")
		if snap, _ := src.Fetch(ctx); snap.Source != edited {
			t.Errorf("a human's status edit: source %s, want %s", snap.Source, edited)
		}
		if _, err := src.Publish(ctx, map[string][]byte{"stands/a/stand.yml": nil}, "no"); err == nil {
			t.Error("publishing outside status/ was accepted")
		}
	})

	t.Run("starting the copy afresh", func(t *testing.T) {
		// Every fetch on a new in-memory copy: own commits are still recognised, publishing still works.
		p := g.CreateRepo(t, "reclone")
		human := p.Commit("stands/a/stand.yml", "stand: {project: a, env: dev}\n", "add a")
		src := New(p.Info.CloneURL, "main", token, WithRecloneEvery(1))
		for i := range 3 {
			if _, err := src.Publish(ctx, map[string][]byte{"STATUS.md": []byte(fmt.Sprintf("round %d\n", i))}, "status"); err != nil {
				t.Fatal(err)
			}
			snap, err := src.Fetch(ctx)
			if err != nil || snap.Source != human {
				t.Fatalf("round %d: source %v (%v), want %s", i, snap, err, human)
			}
		}
	})

	t.Run("concurrent writers", func(t *testing.T) {
		// Two reconcilers (or a reconciler and a human) pushing at once: every write lands, the
		// loser of each race recreates its commit on top of the winner's.
		p := g.CreateRepo(t, "race")
		p.Commit("README.md", "stands\n", "init")
		var wg sync.WaitGroup
		errs := make(chan error, 20)
		for w := range 2 {
			src := New(p.Info.CloneURL, "main", token, WithPushRetries(20))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for i := range 5 {
					name := fmt.Sprintf("status/w%d-%d.json", w, i)
					if _, err := src.Publish(ctx, map[string][]byte{name: []byte("{}\n")}, "status "+name); err != nil {
						errs <- err
					}
				}
			}()
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Error(err)
		}
		snap, err := New(p.Info.CloneURL, "main", token).Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		entries, _ := fs.ReadDir(snap.Files, "status")
		if len(entries) != 10 {
			t.Errorf("%d status files landed, want 10", len(entries))
		}
		read(t, snap, "README.md")
	})

	t.Run("status branch", func(t *testing.T) {
		p := g.CreateRepo(t, "statusbranch")
		head := p.Commit("stands/a/stand.yml", "stand: {project: a, env: dev}\n", "add a")
		src := New(p.Info.CloneURL, "main", token, WithStatusBranch("stands-status"))
		if c, err := src.Publish(ctx, map[string][]byte{"STATUS.md": []byte("x\n")}, "status"); err != nil || c == "" {
			t.Fatalf("publish to a new status branch: %q %v", c, err)
		}
		if snap, err := src.Fetch(ctx); err != nil || snap.Commit != head {
			t.Fatalf("the tracked branch moved: %+v %v", snap, err)
		}
		st, err := New(p.Info.CloneURL, "stands-status", token).Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.Stat(st.Files, "stands/a/stand.yml"); err == nil {
			t.Error("the orphan status branch carries the stands")
		}
		read(t, st, "STATUS.md")
	})

	// Status files feed decisions after a restart, and any writer can push to the status branch
	// (status_trust.go): what a commit the reconciler did not sign changed there is ignored,
	// logged, and put back by its next status commit. The forger uses the reconciler's own name.
	t.Run("status files a writer pushed", func(t *testing.T) {
		p := g.CreateRepo(t, "forged-status")
		p.Commit("stands/a/stand.yml", "stand: {project: a, env: dev}\n", "add a")
		key, _ := signingKey(t, t.TempDir(), "reconciler")
		var logs testenv.Buffer
		opts := []Option{token, WithStatusBranch("stands-status"), WithSigner(key), WithLogger(slog.New(slog.NewTextHandler(&logs, nil))),
			WithIdentity(Identity{Name: "stands-reconciler", Email: "stands-reconciler@example.test"})}
		src := New(p.Info.CloneURL, "main", opts...)
		a := "status/local_a_dev.json"
		ours := `{"phase":"Ready","declaredSince":"2026-12-01T09:00:00Z"}` + "\n"
		if _, err := src.Publish(ctx, map[string][]byte{a: []byte(ours), "STATUS.md": []byte("| a | Ready |\n")}, "status: a Ready"); err != nil {
			t.Fatal(err)
		}
		forged := p.ChangeByOn("stands-reconciler", "stands-status", "status: a Ready", map[string]string{
			a: `{"phase":"Ready","declaredSince":"2020-01-01T00:00:00Z"}` + "\n", "status/local_z_dev.json": `{"phase":"Ready"}` + "\n"})

		restarted := New(p.Info.CloneURL, "main", opts...)
		files, err := restarted.StatusFiles(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got, err := fs.ReadFile(files, a); err != nil || string(got) != ours {
			t.Errorf("a's status after the forged push reads %q (%v), want the reconciler's %q", got, err, ours)
		}
		if _, err := fs.Stat(files, "status/local_z_dev.json"); err == nil {
			t.Error("a status file only the forger wrote is read")
		}
		if !strings.Contains(logs.String(), "status files changed by a commit the reconciler did not make are ignored") || !strings.Contains(logs.String(), forged[:12]) {
			t.Errorf("the forged commit %s is not reported:\n%s", forged[:12], logs.String())
		}

		c, err := restarted.Publish(ctx, map[string][]byte{"STATUS.md": []byte("| a | Ready | later |\n")}, "status: summary")
		if err != nil {
			t.Fatal(err)
		}
		st, err := New(p.Info.CloneURL, "stands-status", token).Fetch(ctx)
		if err != nil || st.Commit != c {
			t.Fatalf("the status branch after the next status commit: %+v %v", st, err)
		}
		if got := read(t, st, a); got != ours {
			t.Errorf("a's status not put back: %q", got)
		}
		if _, err := fs.Stat(st.Files, "status/local_z_dev.json"); err == nil {
			t.Error("the forger's status file is still there")
		}
		if !strings.Contains(st.Message, "Put back as the reconciler wrote them") || !strings.Contains(st.Message, a) {
			t.Errorf("the status commit that puts them back says %q", st.Message)
		}

		// Rewritten without any signed status commit: nothing is trusted.
		orphan := p.ChangeOn("stands-status-2", "rewritten", map[string]string{a: `{"phase":"Ready"}` + "\n"})
		p.ForcePush("stands-status", orphan)
		if files, err := restarted.StatusFiles(ctx); err != nil || len(listed(files)) != 0 {
			t.Errorf("a rewritten status branch gives %v (%v), want nothing", listed(files), err)
		}
	})

	t.Run("refused push", func(t *testing.T) {
		p := g.CreateRepo(t, "refused")
		p.Commit("README.md", "x\n", "init")
		src := New(p.Info.CloneURL, "main", WithToken(g.User, func() (string, error) { return "wrong", nil }))
		_, err := src.Publish(ctx, map[string][]byte{"STATUS.md": []byte("y\n")}, "status")
		if err == nil || errors.Is(err, errRace) {
			t.Fatalf("publish with a bad token: %v", err)
		}
	})
}

// TestLocalRepository: a repository on disk is read and written in place (no clone, no git binary),
// and a commit to it wakes the watcher.
func TestLocalRepository(t *testing.T) {
	dir := t.TempDir()
	r := initMain(t, dir)
	commit := func(name string) string {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(name)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, name), []byte("x: 1\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		wt, _ := r.Worktree()
		if _, err := wt.Add(name); err != nil {
			t.Fatal(err)
		}
		h, err := wt.Commit("add "+name, &git.CommitOptions{Author: &object.Signature{Name: "dev", Email: "dev@example.test", When: time.Now()}})
		if err != nil {
			t.Fatal(err)
		}
		return h.String()
	}
	first := commit("stands/a/stand.yml")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	src := New(dir, "main", WithStatusBranch("stands-status"))
	var woken atomic.Int32
	done := make(chan error, 1)
	go func() { done <- src.Watch(ctx, func() { woken.Add(1) }) }()
	snap, err := src.Fetch(ctx)
	if err != nil || snap.Commit != first {
		t.Fatalf("fetch: %+v %v", snap, err)
	}
	if c, err := src.Publish(ctx, map[string][]byte{"STATUS.md": []byte("ok\n")}, "status"); err != nil || c == "" {
		t.Fatalf("publish: %q %v", c, err)
	}
	time.Sleep(300 * time.Millisecond) // let the watcher settle the publish's own events
	before := woken.Load()
	second := commit("stands/b/stand.yml")
	wait.For(t, "a commit to wake the watcher", 5*time.Second, func() bool { return woken.Load() != before }, wait.Every(20*time.Millisecond))
	if snap, _ := src.Fetch(ctx); snap.Commit != second {
		t.Errorf("fetch after commit: %s, want %s", snap.Commit, second)
	}
	if ref, err := r.Reference(plumbing.NewBranchReferenceName("stands-status"), true); err != nil || ref.Hash().IsZero() {
		t.Errorf("status branch: %v", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watch: %v", err)
	}
}

// TestPlanCommentIsOurOwn: a comment that someone else wrote with the plan's marker in it is never
// edited; the reconciler writes its own, and edits that one afterwards.
func TestPlanCommentIsOurOwn(t *testing.T) {
	g := testenv.StartGitea(t)
	repo := g.CreateRepo(t, "stands")
	repo.Change("init", map[string]string{"README.md": "stands\n"})
	repo.ChangeOn("change", "a change", map[string]string{"x.txt": "x\n"})
	api := g.API(t)
	idx := repo.Open(api, "change", "a change")
	mallory := g.CreateUser(t, "mallory")
	repo.AddWriter(api, mallory.Name) // anyone who can comment: the repository is private
	planted := "<!-- marker -->\nplanted by mallory"
	if _, _, err := mallory.Client(t, g).CreateIssueComment(repo.Info.Owner.UserName, repo.Info.Name, idx, gitea.CreateIssueCommentOption{Body: planted}); err != nil {
		t.Fatal(err)
	}
	forge, err := NewGitea(repo.Info.CloneURL, func() (string, error) { return g.Token, nil })
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for _, body := range []mdtext.Markup{"<!-- marker -->\nplan one", "<!-- marker -->\nplan two", "<!-- marker -->\nplan two"} {
		shown, err := forge.UpsertComment(ctx, idx, "<!-- marker -->", body)
		if err != nil {
			t.Fatal(err)
		}
		// A review right after the comment is never dated before it: the gate compares the two.
		review, _, err := mallory.Client(t, g).CreatePullReview(repo.Info.Owner.UserName, repo.Info.Name, idx,
			gitea.CreatePullReviewOptions{State: gitea.ReviewStateComment, Body: "seen"})
		if err != nil {
			t.Fatal(err)
		}
		if review.Submitted.Before(shown) {
			t.Errorf("a review submitted after the comment is dated %s, before the comment's %s", review.Submitted, shown)
		}
	}
	comments, _, err := api.ListIssueComments(repo.Info.Owner.UserName, repo.Info.Name, idx, gitea.ListIssueCommentOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, c := range comments {
		got = append(got, c.Poster.UserName+": "+c.Body)
	}
	want := []string{"mallory: " + planted, g.User + ": <!-- marker -->\nplan two"}
	if !slices.Equal(got, want) {
		t.Errorf("comments %q, want %q", got, want)
	}
}

// TestStatusDescriptionsAreText: Gitea shows a commit status description as text, so what the
// reconciler sets is one line a reader can trust: every character visible, at most 200 bytes,
// whatever a pull request put in it. Its control run, built with the escaping off, fails.
func TestStatusDescriptionsAreText(t *testing.T) {
	testenv.NeedsServer(t, "Gitea")
	g := testenv.StartGitea(t)
	repo := g.CreateRepo(t, "stands")
	commit := repo.Change("init", map[string]string{"README.md": "stands\n"})
	forge, err := NewGitea(repo.Info.CloneURL, func() (string, error) { return g.Token, nil })
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range testenv.HostileText(t) {
		name := fmt.Sprintf("stands/check-%d", i)
		if err := forge.SetStatus(context.Background(), commit, name, stands.StateFailure, "not planned: "+v, ""); err != nil {
			t.Fatal(err)
		}
		statuses, _, err := g.API(t).ListStatuses(repo.Info.Owner.UserName, repo.Info.Name, commit, gitea.ListStatusesOption{})
		if err != nil {
			t.Fatal(err)
		}
		k := slices.IndexFunc(statuses, func(s *gitea.Status) bool { return s.Context == name })
		if k < 0 {
			t.Fatalf("no status %s", name)
		}
		d := statuses[k].Description
		if j := strings.IndexFunc(d, func(r rune) bool { return !unicode.IsPrint(r) }); j >= 0 || len(d) > maxDescription {
			t.Errorf("the description set for %.60q is not one line of visible text (%d bytes): %q", v, len(d), d)
		}
	}
	testenv.ShowFailsWithTags(t, ".", "TestStatusDescriptionsAreText", "stands_inert_off", "is not one line of visible text")
}
