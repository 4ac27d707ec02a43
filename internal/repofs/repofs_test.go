package repofs

import (
	"fmt"
	"io/fs"
	"testing"
	"testing/fstest"
)

// TestTreeIsAnFS holds Tree to io/fs's contract with its folder index: every folder lists what its
// files imply, sorted, and Stat, Open and ReadDir agree (fstest.TestFS).
func TestTreeIsAnFS(t *testing.T) {
	files := fstest.MapFS{
		"README.md":              {Data: []byte("r")},
		"stands/a/stand.yml":     {Data: []byte("a")},
		"stands/b/stand.yml":     {Data: []byte("b")},
		"stands/b/files/x.conf":  {Data: []byte("x")},
		"apps/kv/redis.conf.tpl": {Data: []byte("k")},
		"empty":                  {Mode: fs.ModeDir | 0o755},
	}
	tree := Tree(files, nil, nil)
	if err := fstest.TestFS(tree, "README.md", "stands/a/stand.yml", "stands/b/stand.yml", "stands/b/files/x.conf", "apps/kv/redis.conf.tpl", "empty"); err != nil {
		t.Fatal(err)
	}
	entries, err := fs.ReadDir(tree, "stands")
	if err != nil || len(entries) != 2 || entries[0].Name() != "a" || !entries[1].IsDir() {
		t.Errorf("stands/: %v %v", entries, err)
	}
	if _, err := fs.ReadDir(tree, "README.md"); err == nil {
		t.Error("a file read as a folder")
	}
	if _, err := fs.ReadDir(tree, "nowhere"); err == nil {
		t.Error("a missing folder read")
	}
}

// BenchmarkWalkTree walks a commit of n stands the way manifest.Discover does: Tree's folder index
// against the fstest.MapFS it replaced, which scans every file for each folder read.
func BenchmarkWalkTree(b *testing.B) {
	for _, n := range []int{1000, 10000} {
		files := fstest.MapFS{}
		for i := range n {
			files[fmt.Sprintf("stands/s%05d/stand.yml", i)] = &fstest.MapFile{Data: []byte("s")}
			files[fmt.Sprintf("status/local_s%05d_dev.json", i)] = &fstest.MapFile{Data: []byte("{}")}
		}
		for name, fsys := range map[string]fs.FS{"mapfs": files, "tree": Tree(files, nil, nil)} {
			b.Run(fmt.Sprintf("%s/%d", name, n), func(b *testing.B) {
				for b.Loop() {
					if err := fs.WalkDir(fsys, "stands", func(string, fs.DirEntry, error) error { return nil }); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
