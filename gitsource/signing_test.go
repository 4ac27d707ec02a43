package gitsource

import (
	"context"
	"fmt"
	"io/fs"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// signingKey makes an ed25519 key, written in OpenSSH's format to dir/name for git, and its signer.
func signingKey(t *testing.T, dir, name string) (ssh.Signer, string) {
	t.Helper()
	return testenv.NewSSHKey(t, dir, name)
}

// TestSignedCommits: with a key, the reconciler's removal commits carry an SSH signature git's own
// verify-commit accepts; its removal is the one whose head it signed, on a parent the tracked branch
// holds. Refused: the very same removal under its name and address but unsigned, or signed (by git,
// as an attacker would) with another key; its own removal onto a commit off the tracked branch. A
// rotated key counts while it is trusted, and no longer after.
func TestSignedCommits(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	gitAs(t, dir, "dev", "init", "--quiet", "--initial-branch=main", work)
	writeAndCommit(t, work, "dev", "stands/x/stand.yml", "stand: {project: x}\n", "add x")
	gitAs(t, work, "dev", "checkout", "--quiet", "-b", "side")
	side := writeAndCommit(t, work, "dev", "README", "side\n", "off main")
	gitAs(t, work, "dev", "checkout", "--quiet", "main")
	head := writeAndCommit(t, work, "dev", "README", "hello\n", "readme")

	key, _ := signingKey(t, dir, "reconciler")
	_, otherFile := signingKey(t, dir, "mallory")
	src := New("file://"+work, "main", WithSigner(key))
	ctx := context.Background()
	if _, err := src.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	branch := "stands-reconciler/expire/local_x_dev/20261231T180000Z"
	tip, err := src.PushRemoval(ctx, branch, head, "stands/x", "Remove stand x")
	if err != nil {
		t.Fatal(err)
	}
	allowed := filepath.Join(dir, "allowed_signers")
	line := DefaultIdentity.Email + " " + strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key.PublicKey()))) + "\n"
	if err := os.WriteFile(allowed, []byte(line), 0o600); err != nil {
		t.Fatal(err)
	}
	verify := func(commit string) error {
		cmd := exec.Command("git", "-c", "gpg.ssh.allowedSignersFile="+allowed, "verify-commit", commit)
		cmd.Dir = work
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("%w: %s", err, out)
		}
		return nil
	}
	if err := verify(tip); err != nil {
		t.Fatalf("git verify-commit refuses the reconciler's removal: %v", err)
	}
	if why, err := src.CheckRemoval(ctx, branch, tip, "stands/x"); err != nil || why != "" {
		t.Fatalf("its own signed removal refused: %q %v", why, err)
	}

	forge := func(signWith string) string {
		t.Helper()
		gitAs(t, work, "mallory", "checkout", "--quiet", "--detach", tip)
		args := []string{"-c", "gpg.format=ssh", "-c", "user.signingkey=" + signWith, "commit", "--quiet", "--amend", "--no-edit",
			"--author=" + DefaultIdentity.Name + " <" + DefaultIdentity.Email + ">"}
		if signWith != "" {
			args = append(args, "-S")
		}
		gitAs(t, work, "mallory", args...)
		c := gitAs(t, work, "mallory", "rev-parse", "HEAD")
		gitAs(t, work, "mallory", "push", "--quiet", "--force", ".", "HEAD:refs/heads/"+branch)
		gitAs(t, work, "mallory", "checkout", "--quiet", "main")
		return c
	}
	for _, c := range []struct {
		name, key, why string
	}{
		{"the same removal, unsigned", "", "it is not signed"},
		{"signed with another key", otherFile, "signed by a key the reconciler does not trust"},
	} {
		head := forge(c.key)
		if why, err := src.CheckRemoval(ctx, branch, head, "stands/x"); err != nil || !strings.Contains(why, c.why) {
			t.Errorf("%s: %q %v, want %q", c.name, why, err, c.why)
		}
		if verify(head) == nil {
			t.Errorf("%s: git verify-commit accepts it: its check of the reconciler's own proves nothing", c.name)
		}
	}

	// Its own removal, onto a commit the tracked branch does not hold.
	offMain := "stands-reconciler/expire/local_x_dev/20270101T000000Z"
	own, err := src.PushRemoval(ctx, offMain, side, "stands/x", "Remove stand x")
	if err != nil {
		t.Fatal(err)
	}
	if why, err := src.CheckRemoval(ctx, offMain, own, "stands/x"); err != nil || !strings.Contains(why, "is not on main's history") {
		t.Errorf("a removal off main: %q %v", why, err)
	}

	// A rotated key: trusted while listed, then not.
	next, _ := signingKey(t, dir, "next")
	gitAs(t, work, "t", "push", "--quiet", "--force", ".", tip+":refs/heads/"+branch)
	for _, c := range []struct {
		src  *Source
		want string
	}{
		{New("file://"+work, "main", WithSigner(next, key.PublicKey())), ""},
		{New("file://"+work, "main", WithSigner(next)), "signed by a key the reconciler does not trust"},
	} {
		if _, err := c.src.Fetch(ctx); err != nil {
			t.Fatal(err)
		}
		if why, err := c.src.CheckRemoval(ctx, branch, tip, "stands/x"); err != nil || !strings.Contains(why, c.want) || (c.want == "") != (why == "") {
			t.Errorf("the old key's removal, trusted %d key(s): %q %v, want %q", len(c.src.trusted), why, err, c.want)
		}
	}
}

// listed names the files of fsys.
func listed(fsys fs.FS) []string {
	var out []string
	_ = fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out = append(out, p)
		}
		return err
	})
	return out
}

// TestSignedStatusMarkSurvivesRestarts: the mark that the reconciler signed a status commit is kept
// in its work folder (made if missing: a local repository is read in place), so a restarted source
// finds a status branch rewritten without any signed commit and trusts none of its files.
func TestSignedStatusMarkSurvivesRestarts(t *testing.T) {
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	gitAs(t, dir, "dev", "init", "--quiet", "--initial-branch=main", work)
	writeAndCommit(t, work, "dev", "stands/x/stand.yml", "stand: {project: x}\n", "add x")
	key, _ := signingKey(t, dir, "reconciler")
	var logs testenv.Buffer
	opts := []Option{WithStatusBranch("stands-status"), WithSigner(key), WithWorkDir(filepath.Join(dir, "state", "git")),
		WithLogger(slog.New(slog.NewTextHandler(&logs, nil)))}
	ctx := context.Background()
	if _, err := New(work, "main", opts...).Publish(ctx, map[string][]byte{"status/local_x_dev.json": []byte("{}\n")}, "status"); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "level=WARN") {
		t.Errorf("a warning on the first signed status commit:\n%s", logs.String())
	}
	// Rewritten: the status branch is now a writer's unsigned commit.
	gitAs(t, work, "mallory", "checkout", "--quiet", "--orphan", "forged")
	writeAndCommit(t, work, "mallory", "status/local_x_dev.json", `{"declaredSince":"2020-01-01T00:00:00Z"}`+"\n", "status")
	gitAs(t, work, "mallory", "branch", "--quiet", "-f", "stands-status", "forged")
	gitAs(t, work, "mallory", "checkout", "--quiet", "main")
	files, err := New(work, "main", opts...).StatusFiles(ctx)
	if err != nil || len(listed(files)) != 0 {
		t.Errorf("after a restart, a rewritten status branch gives %v (%v), want nothing", listed(files), err)
	}
}
