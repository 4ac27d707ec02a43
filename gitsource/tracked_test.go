package gitsource

import (
	"context"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
)

// TestTrackedBranchOnDisk: the tracked branch's objects are kept on disk in the work folder, a
// merged file over 1 MiB is listed but left on the server, a status commit is pushed over a tree
// that names it, and a restart fetches only what is new. The control fetches without the filter:
// the file then reaches the store, which shows the test sees what the filter keeps out.
func TestTrackedBranchOnDisk(t *testing.T) {
	g, p := largeFileRepo(t, "main", nil)
	token := WithToken(g.User, func() (string, error) { return g.Token, nil })
	ctx := context.Background()
	fetch := func(dir string, opts ...Option) *Source {
		t.Helper()
		src := New(p.Info.CloneURL, "main", append([]Option{token, WithWorkDir(dir)}, opts...)...)
		snap, err := src.Fetch(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := fs.Stat(snap.Files, "apps/blob.bin"); err != nil {
			t.Errorf("the large file is not listed: %v", err)
		}
		if got := read(t, snap, "stands/a/stand.yml"); !strings.Contains(got, "project: a") {
			t.Errorf("the stand: %q", got)
		}
		return src
	}

	dir := t.TempDir()
	src := fetch(dir)
	packs := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, trackedDir, "objects", "pack", "*.pack"))
		return len(m)
	}
	if n := packs(); n != 1 {
		t.Errorf("the first fetch left %d packs", n)
	}
	if _, err := src.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	if n := packs(); n != 1 {
		t.Errorf("a fetch of a branch that did not move brought %d packs", n-1)
	}
	snap, _ := src.Latest()
	if _, err := fs.ReadFile(snap.Files, "apps/blob.bin"); !errors.Is(err, repofs.ErrTooLarge) {
		t.Errorf("reading the large file: %v, want %v", err, repofs.ErrTooLarge)
	}
	if n := du(t, filepath.Join(dir, trackedDir)); n > 1<<20 {
		t.Errorf("the store holds %d KiB: the large file was fetched", n>>10)
	}
	// The status commit's tree names the blob the store does not have.
	commit, err := src.Publish(ctx, map[string][]byte{"status/a.yml": []byte("phase: Ready\n")}, "status")
	if err != nil || commit == "" {
		t.Fatalf("status commit over a tree with a blob left on the server: %q, %v", commit, err)
	}
	b, _, err := g.API(t).GetRepoBranch(p.Info.Owner.UserName, p.Info.Name, "main")
	if err != nil {
		t.Fatal(err)
	}
	if b.Commit.ID != commit {
		t.Errorf("main is at %s, want the status commit %s", b.Commit.ID, commit)
	}

	// A new commit brings one pack, and fetching again brings none.
	p.Commit("stands/c/stand.yml", "stand: {project: c, env: dev}\n", "add c")
	for range 2 {
		if _, err := src.Fetch(ctx); err != nil {
			t.Fatal(err)
		}
	}
	if n := packs(); n != 2 {
		t.Errorf("one new commit fetched twice: %d packs, want 2", n)
	}

	// A restart reads the store it left, and fetches only the next commit.
	before := packs()
	p.Commit("stands/b/stand.yml", "stand: {project: b, env: dev}\n", "add b")
	fetch(dir)
	if after := packs(); after != before+1 {
		t.Errorf("after a restart and one new commit: %d packs, want %d", after, before+1)
	}
	if n := du(t, filepath.Join(dir, trackedDir)); n > 1<<20 {
		t.Errorf("the store holds %d KiB after the restart", n>>10)
	}

	// A store that does not read as a repository (killed while it was started) is started afresh.
	broken := t.TempDir()
	if err := os.MkdirAll(filepath.Join(broken, trackedDir), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(broken, trackedDir, "config"), []byte("[core\x00"), 0o600); err != nil {
		t.Fatal(err)
	}
	fetch(broken)

	control := t.TempDir()
	fetch(control, withLargeBlobs())
	if n := du(t, filepath.Join(control, trackedDir)); n < 5<<20 {
		t.Errorf("the control, without the filter, holds only %d KiB: the test cannot see the large file", n>>10)
	}
}

// du is the bytes of the files under dir.
func du(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.WalkDir(dir, func(_ string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		info, err := d.Info()
		if err == nil {
			n += info.Size()
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
