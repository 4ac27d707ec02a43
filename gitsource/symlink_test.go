package gitsource

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/testfs"
)

// TestSymlinksJudgedAlike: a repository with links (and a file over the size limit) — a template linked to a file outside it, a stand
// folder linked to another — gets the same verdict from the command line's view (a folder on disk)
// and the daemon's (a commit): the same diagnostics, and the outside file read by neither.
func TestSymlinksJudgedAlike(t *testing.T) {
	dir := t.TempDir()
	base, err := testfs.Dir(filepath.Join(testenv.RepoRoot(), "examples", "stands-repo"))
	if err != nil {
		t.Fatal(err)
	}
	if err := testfs.WriteDir(dir, base); err != nil {
		t.Fatal(err)
	}
	outside := filepath.Join(t.TempDir(), "shadow")
	if err := os.WriteFile(outside, []byte("root:OUTSIDE-SENTINEL:19000:0:99999:7:::\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	single, err := os.ReadFile(filepath.Join(dir, "stands/single/stand.yml"))
	if err != nil {
		t.Fatal(err)
	}
	evil := strings.Replace(strings.Replace(string(single), "env: single", "env: evil", 1), "../../bases/cloud-init.yaml.tmpl", "evil.tmpl", 1)
	for p, data := range map[string]string{"stands/evil/stand.yml": evil} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	for link, target := range map[string]string{"stands/evil/evil.tmpl": outside, "stands/linked": "single"} {
		if err := os.Symlink(target, filepath.Join(dir, link)); err != nil {
			t.Fatal(err)
		}
	}
	// A file over the limit, which neither view reads.
	if err := os.WriteFile(filepath.Join(dir, "apps", "big.bin"), make([]byte, repofs.MaxFileSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	r := initMain(t, dir)
	commitAll(t, r, "stands with links")
	snap, err := New(dir, "main", WithStatusBranch("stands-status")).Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	secrets := manifest.EnvSource{Lookup: func(k string) (string, bool) {
		return map[string]string{"SECRET_REGISTRY_PASSWORD": "registry-pw", "SECRET_KV_PASSWORD": "kv-password"}[k], true
	}}
	judge := func(view string, fsys fs.FS) []string {
		files, err := manifest.Discover(fsys)
		if err != nil {
			t.Fatalf("%s: discover: %v", view, err)
		}
		results, err := manifest.PreflightAll(context.Background(), fsys, files, manifest.PreflightOptions{Secrets: secrets, LoadOptions: manifest.LoadOptions{DefaultOwner: "local"}})
		var rep *manifest.Report
		if err != nil && !errors.As(err, &rep) {
			t.Fatalf("%s: %v", view, err)
		}
		out := []string{fmt.Sprint(files)}
		if rep != nil {
			for _, d := range rep.Diags {
				if strings.Contains(d.Msg, "OUTSIDE-SENTINEL") {
					t.Errorf("%s read the file outside the repository: %v", view, d)
				}
				out = append(out, fmt.Sprintf("%s [%s]", d.Pos, d.Rule))
			}
		}
		for _, res := range results {
			out = append(out, fmt.Sprintf("%s valid=%v", res.File, res.Err == nil))
		}
		slices.Sort(out[1:])
		return out
	}
	cli, daemon := judge("command line", repofs.Dir(dir)), judge("daemon", snap.Files)
	if !slices.Equal(cli, daemon) {
		t.Errorf("verdicts differ\ncommand line: %q\ndaemon:       %q", cli, daemon)
	}
	for view, fsys := range map[string]fs.FS{"command line": repofs.Dir(dir), "daemon": snap.Files} {
		if _, err := fs.ReadFile(fsys, "apps/big.bin"); !errors.Is(err, repofs.ErrTooLarge) || !strings.Contains(err.Error(), "apps/big.bin") {
			t.Errorf("%s: a file over the limit: %v", view, err)
		}
	}
	for _, want := range []string{"stands/linked:1:1 [symlink]", "stands/linked valid=false", "stands/evil/stand.yml valid=false", "stands/single/stand.yml valid=true"} {
		if !slices.Contains(cli, want) {
			t.Errorf("no %q in the verdict %q", want, cli)
		}
	}
}

// TestTreeSizeBounded: a commit whose files hold more than a snapshot may is refused whole, as an
// error of the fetch (which changes nothing), not read into memory.
func TestTreeSizeBounded(t *testing.T) {
	dir := t.TempDir()
	r := initMain(t, dir)
	for i := range 4 {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("f%d", i)), make([]byte, 600), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	commitAll(t, r, "files")
	// 4 files of 600 bytes do not fit in 2,000 bytes
	if _, err := New(dir, "main", WithStatusBranch("stands-status"), withMaxTreeSize(2000)).Fetch(context.Background()); !errors.Is(err, stands.ErrTooLarge) {
		t.Fatalf("a commit over the limit: %v", err)
	}
	if _, err := New(dir, "main", WithStatusBranch("stands-status"), withMaxTreeSize(2400)).Fetch(context.Background()); err != nil {
		t.Fatalf("a commit at the limit: %v", err)
	}
}

// initMain makes a repository in dir whose HEAD is main, as the reconciler's local repositories are.
func initMain(t *testing.T, dir string) *git.Repository {
	t.Helper()
	r, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := r.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, plumbing.NewBranchReferenceName("main"))); err != nil {
		t.Fatal(err)
	}
	return r
}

// commitAll commits every file of the work tree, links as links.
func commitAll(t *testing.T, r *git.Repository, msg string) {
	t.Helper()
	wt, err := r.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	if err := wt.AddGlob("."); err != nil {
		t.Fatal(err)
	}
	if _, err := wt.Commit(msg, &git.CommitOptions{Author: &object.Signature{Name: "dev", Email: "dev@example.test", When: time.Now()}}); err != nil {
		t.Fatal(err)
	}
}
