package gitsource

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
)

// gitAs runs git in dir as the given author.
func gitAs(t *testing.T, dir, who string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME="+who, "GIT_AUTHOR_EMAIL="+who+"@example.test", "GIT_COMMITTER_NAME="+who,
		"GIT_COMMITTER_EMAIL="+who+"@example.test")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %v: %v\n%s", args, err, out)
	}
	return strings.TrimSpace(string(out))
}

func writeAndCommit(t *testing.T, dir, who, file, content, msg string) string {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, file)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	gitAs(t, dir, who, "add", file)
	gitAs(t, dir, who, "commit", "--quiet", "-m", msg)
	return gitAs(t, dir, who, "rev-parse", "HEAD")
}

// TestRemovalBranch: who last set a stand's end is the author of the commit that changed
// stand.expires, also when a merge brought it and when later commits touched the file otherwise; the
// removal branch is pushed once and never moved; a head someone else pushed on it, or one that also
// changes another file under the reconciler's name, is refused before any merge.
func TestRemovalBranch(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	gitAs(t, dir, "dev", "init", "--quiet", "--initial-branch=main", work)
	stand := "stands/x/stand.yml"
	writeAndCommit(t, work, "dev", stand, "stand:\n  project: x\n  expires: 2026-12-24T18:00:00Z\n", "add x")
	writeAndCommit(t, work, "bob", "README", "hello\n", "readme")
	gitAs(t, work, "carol", "checkout", "--quiet", "-b", "extend")
	carol := writeAndCommit(t, work, "carol", stand, "stand:\n  project: x\n  expires: 2026-12-31T18:00:00Z\n", "extend x")
	gitAs(t, work, "merger", "checkout", "--quiet", "main")
	writeAndCommit(t, work, "erin", "stands/x/notes.txt", "notes\n", "notes")
	gitAs(t, work, "merger", "merge", "--quiet", "--no-ff", "-m", "merge extend", "extend")
	head := writeAndCommit(t, work, "dave", stand, "# x\nstand:\n  project: x\n  expires: 2026-12-31T18:00:00Z\n", "a comment")

	src := New("file://"+work, "main")
	ctx := context.Background()
	if _, err := src.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	a, err := src.LastSet(ctx, head, stand, func(data []byte) string { return manifest.ExpiresKey(stand, data) })
	if err != nil || a.Commit != carol || a.Name != "carol" || a.Email != "carol@example.test" {
		t.Errorf("LastSet = %+v, %v; want carol's %s", a, err, carol)
	}
	added, err := src.LastSet(ctx, head, stand, func(data []byte) string { return strings.Repeat("x", min(1, len(data))) })
	if err != nil || added.Name != "dev" {
		t.Errorf("the commit that added the stand: %+v, %v", added, err)
	}

	branch := "stands-reconciler/expire/local_x_dev/20261231T180000Z"
	tip, err := src.PushRemoval(ctx, branch, head, "stands/x", "Remove stand x")
	if err != nil {
		t.Fatal(err)
	}
	if files := gitAs(t, work, "t", "ls-tree", "-r", "--name-only", tip); strings.Contains(files, "stands/x/") || !strings.Contains(files, "README") {
		t.Errorf("the removal's tree:\n%s", files)
	}
	if why, err := src.CheckRemoval(ctx, branch, tip, "stands/x"); err != nil || why != "" {
		t.Errorf("its own removal refused: %q %v", why, err)
	}
	if _, err := src.PushRemoval(ctx, branch, head, "stands/x", "again"); !errors.Is(err, stands.ErrBranchExists) {
		t.Errorf("a second push: %v, want ErrBranchExists", err)
	}
	if got := gitAs(t, work, "t", "rev-parse", branch); got != tip {
		t.Errorf("the branch moved to %s", got)
	}

	// Someone with write access pushes on the branch.
	gitAs(t, work, "mallory", "checkout", "--quiet", branch)
	other := writeAndCommit(t, work, "mallory", "stands/y/stand.yml", "stand: {project: y}\n", "and y")
	if why, _ := src.CheckRemoval(ctx, branch, other, "stands/x"); !strings.Contains(why, "not a commit of the reconciler's") {
		t.Errorf("another author's head: %q", why)
	}
	// Under the reconciler's name, on its removal: the change beyond the folder is what is refused.
	gitAs(t, work, "t", "reset", "--quiet", "--hard", tip)
	writeAndCommitAs(t, work, "stands/y/stand.yml", "stand: {project: y}\n")
	gitAs(t, work, "t", "commit", "--quiet", "--amend", "--no-edit", "--author=stands-reconciler <stands-reconciler@localhost>")
	spoof := gitAs(t, work, "t", "rev-parse", "HEAD")
	if why, _ := src.CheckRemoval(ctx, branch, spoof, "stands/x"); !strings.Contains(why, "changes stands/y/stand.yml") {
		t.Errorf("a spoofed removal that adds a stand: %q", why)
	}
	if why, _ := src.CheckRemoval(ctx, branch, tip, "stands/x"); why != "the branch is not at the pull request's head" {
		t.Errorf("a head the branch is no longer at: %q", why)
	}
	if _, err := src.PushRemoval(ctx, "stands-reconciler/expire/bad/1", head, "status", "x"); err == nil {
		t.Error("a removal of the status folder was pushed")
	}
}

// writeAndCommitAs stages a file for an amend.
func writeAndCommitAs(t *testing.T, dir, file, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(filepath.Join(dir, file)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, file), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	gitAs(t, dir, "t", "add", file)
}

// TestOnFirstParents: the branch's own history holds its commits and its merges, not the commits a
// merge brought in, and after a reset not what was reset away.
func TestOnFirstParents(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	gitAs(t, dir, "dev", "init", "--quiet", "--initial-branch=main", work)
	first := writeAndCommit(t, work, "dev", "a.txt", "a\n", "first")
	gitAs(t, work, "dev", "checkout", "--quiet", "-b", "topic")
	topic := writeAndCommit(t, work, "dev", "b.txt", "b\n", "topic")
	gitAs(t, work, "dev", "checkout", "--quiet", "main")
	writeAndCommit(t, work, "dev", "c.txt", "c\n", "on main")
	gitAs(t, work, "merger", "merge", "--quiet", "--no-ff", "-m", "merge topic", "topic")
	merge := gitAs(t, work, "merger", "rev-parse", "HEAD")
	tip := writeAndCommit(t, work, "dev", "d.txt", "d\n", "after")

	src := New("file://"+work, "main")
	ctx := context.Background()
	if _, err := src.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, tip, commit string
		want              bool
	}{
		{"the tip itself", tip, tip, true},
		{"a merge on the branch", tip, merge, true},
		{"the first commit", tip, first, true},
		{"a commit the merge brought in", tip, topic, false},
		{"a commit after the tip", merge, tip, false},
	} {
		if got, err := src.OnFirstParents(ctx, c.tip, c.commit); err != nil || got != c.want {
			t.Errorf("%s: %v %v, want %v", c.name, got, err, c.want)
		}
	}
	// What ctl approve lists: the branch's own commits with what each changes, back to since, or
	// through the commit that added a file.
	for _, c := range []struct {
		name, since, added string
		max                int
		want               string
		complete           bool
	}{
		{"back to the first", first, "", 50, "d.txt; b.txt; c.txt", true},
		{"through the one that added c.txt", "", "c.txt", 50, "d.txt; b.txt; c.txt", true},
		{"at most two", first, "", 2, "d.txt; b.txt", false},
	} {
		log, complete, err := src.FirstParents(ctx, tip, c.since, c.added, c.max)
		var got []string
		for _, e := range log {
			got = append(got, strings.Join(e.Paths, ","))
		}
		if err != nil || strings.Join(got, "; ") != c.want || complete != c.complete {
			t.Errorf("%s: %q complete %v (%v), want %q, %v", c.name, got, complete, err, c.want, c.complete)
		}
	}

	// A reset away from the merge, and a new commit where it was.
	gitAs(t, work, "dev", "reset", "--quiet", "--hard", first)
	reset := writeAndCommit(t, work, "dev", "e.txt", "e\n", "instead")
	if _, err := src.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	if got, err := src.OnFirstParents(ctx, reset, merge); err != nil || got {
		t.Errorf("a merge reset away: %v %v, want false", got, err)
	}
}
