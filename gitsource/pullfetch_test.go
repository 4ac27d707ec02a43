package gitsource

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/format/packfile"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestFetchPullLeavesLargeFilesOnTheServer: a pull request's file over 1 MiB is listed in its
// snapshot but never fetched (a partial fetch), so a head's size does not reach the daemon's
// memory; what the head brought is gone from disk once read. The control fetches without the
// filter: the same head is refused by its object's size, which shows the filter is what keeps it
// out and that the check before indexing fires.
func TestFetchPullLeavesLargeFilesOnTheServer(t *testing.T) {
	g, p := largeFileRepo(t, "big", map[string]string{"stands/a/stand.yml": "stand: {project: a, env: qa}\n"})
	tip := p.Commit("stands/b/stand.yml", "stand: {project: b, env: dev}\n", "add b")
	idx := p.Open(g.API(t), "big", "a large file")
	ref := stands.PullRequest{Index: idx}.Ref()
	dir := t.TempDir()
	lim := PullLimits{Pack: 64 << 20, Object: 2 << 20, Objects: 1000, Total: 64 << 20}
	src := New(p.Info.CloneURL, "main", WithToken(g.User, func() (string, error) { return g.Token, nil }), WithWorkDir(dir), WithPullLimits(lim))
	ctx := context.Background()
	if _, err := src.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	h, _, err := src.FetchPull(ctx, ref, tip)
	if err != nil {
		t.Fatalf("a head with a 5 MiB file: %v", err)
	}
	if _, err := fs.Stat(h.Files, "apps/blob.bin"); err != nil {
		t.Errorf("the large file is not listed: %v", err)
	}
	if _, err := fs.ReadFile(h.Files, "apps/blob.bin"); !errors.Is(err, repofs.ErrTooLarge) {
		t.Errorf("reading the large file: %v, want %v", err, repofs.ErrTooLarge)
	}
	if got := read(t, h, "stands/a/stand.yml"); !strings.Contains(got, "env: qa") {
		t.Errorf("the head's stand: %q", got)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, pullDirPrefix+"*")); len(left) > 0 {
		t.Errorf("the head's objects stay on disk: %v", left)
	}

	control := New(p.Info.CloneURL, "main", WithToken(g.User, func() (string, error) { return g.Token, nil }), WithWorkDir(dir), WithPullLimits(lim), withLargeBlobs())
	if _, err := control.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	_, _, err = control.FetchPull(ctx, ref, tip)
	if !errors.Is(err, stands.ErrTooLarge) || !strings.Contains(err.Error(), "a Git object of 5 MiB, over 2 MiB") {
		t.Errorf("the control, without the filter: %v, want the 5 MiB object refused", err)
	}
	if left, _ := filepath.Glob(filepath.Join(dir, pullDirPrefix+"*")); len(left) > 0 {
		t.Errorf("a refused head's objects stay on disk: %v", left)
	}
}

// largeFileRepo is a repository on a new Gitea whose main holds stand a, and a commit on branch
// (main itself, or a new branch) adding apps/blob.bin, 5 MiB of random bytes, and more.
func largeFileRepo(t *testing.T, branch string, more map[string]string) (*testenv.Gitea, *testenv.Repo) {
	t.Helper()
	g := testenv.StartGitea(t)
	p := g.CreateRepo(t, "stands")
	p.Commit("stands/a/stand.yml", "stand: {project: a, env: dev}\n", "add a")
	big := make([]byte, 5<<20)
	_, _ = rand.Read(big)
	files := map[string]string{"apps/blob.bin": string(big)}
	maps.Copy(files, more)
	p.ChangeOn(branch, "a large file", files)
	return g, p
}

// TestPullDirLeftByAKilledDaemon: the folders of heads being read when the daemon was killed are
// removed at the first read after a start, and nothing else in the folder is.
func TestPullDirLeftByAKilledDaemon(t *testing.T) {
	dir := t.TempDir()
	for _, d := range []string{pullDirPrefix + "123/git/objects", "other"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	s := New("https://gitea.example.test/o/r.git", "main", WithWorkDir(dir))
	if got := s.pullDir(); got != dir {
		t.Fatalf("pullDir %q", got)
	}
	if _, err := os.Stat(filepath.Join(dir, pullDirPrefix+"123")); !os.IsNotExist(err) {
		t.Errorf("a killed daemon's pull request folder stays: %v", err)
	}
	if _, err := os.Stat(filepath.Join(dir, "other")); err != nil {
		t.Errorf("another folder was removed: %v", err)
	}
}

// packOf encodes blobs into a pack, as a server sends it.
func packOf(t *testing.T, blobs ...[]byte) []byte {
	st := memory.NewStorage()
	var hashes []plumbing.Hash
	for _, b := range blobs {
		o := st.NewEncodedObject()
		o.SetType(plumbing.BlobObject)
		w, _ := o.Writer()
		_, _ = w.Write(b)
		_ = w.Close()
		h, err := st.SetEncodedObject(o)
		if err != nil {
			t.Fatal(err)
		}
		hashes = append(hashes, h)
	}
	var buf bytes.Buffer
	if _, err := packfile.NewEncoder(&buf, st, false).Encode(hashes, 10); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

// TestVetPack: a pack is refused by the sizes its headers give, before anything is indexed: 20 MiB
// of zeros arrive as a few kilobytes.
func TestVetPack(t *testing.T) {
	lim := PullLimits{Object: 8 << 20, Objects: 3, Total: 10 << 20}
	zeros := make([]byte, 20<<20)
	for _, c := range []struct {
		name  string
		blobs [][]byte
		want  string // "" accepts
	}{
		{"small objects", [][]byte{[]byte("a"), []byte("b")}, ""},
		{"one object over the limit", [][]byte{zeros}, "a Git object of 20 MiB, over 8 MiB"},
		{"too many objects", [][]byte{[]byte("a"), []byte("b"), []byte("c"), []byte("d")}, "4 Git objects, over 3"},
		{"too much in all", [][]byte{zeros[:6<<20], append(zeros[:6<<20:6<<20], 1)}, "Git objects hold over 10 MiB"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pack := packOf(t, c.blobs...)
			err := vetPack(bytes.NewReader(pack), lim)
			switch {
			case c.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case c.want != "" && (!errors.Is(err, stands.ErrTooLarge) || !strings.Contains(err.Error(), c.want)):
				t.Errorf("a pack of %d bytes: %v, want %q", len(pack), err, c.want)
			}
		})
	}
}

// TestDeltaTarget: a delta's result size is its second varint, whatever the base's size.
func TestDeltaTarget(t *testing.T) {
	for _, c := range []struct {
		in   []byte
		want int64
		ok   bool
	}{
		{[]byte{0x05, 0x07}, 7, true},
		{[]byte{0x80, 0x01, 0x80, 0x80, 0x80, 0x01}, 1 << 21, true}, // base 128, result 2 MiB
		{[]byte{0x05}, 0, false},
		{[]byte{0x80}, 0, false},
	} {
		got, err := deltaTarget(c.in)
		if (err == nil) != c.ok || got != c.want {
			t.Errorf("deltaTarget(%x) = %d, %v; want %d, ok %v", c.in, got, err, c.want, c.ok)
		}
	}
}
