package prplan

import (
	"io/fs"
	"slices"
	"testing"
	"testing/fstest"
)

func tree(files map[string]string) fstest.MapFS {
	m := fstest.MapFS{}
	for p, c := range files {
		m[p] = &fstest.MapFile{Data: []byte(c)}
	}
	return m
}

// TestMergeTrees: a unit one side changed comes from that side; a stand folder both sides changed
// is a conflict, whichever files of it each changed; another file both changed is listed apart, with
// the head's side in theirs; the reconciler's status files never conflict.
func TestMergeTrees(t *testing.T) {
	base := map[string]string{
		"stands/a/stand.yml": "a", "stands/a/app.tmpl": "t", "stands/b/stand.yml": "b", "stands/c/stand.yml": "c",
		"bases/common.yml": "common", "README.md": "readme", "STATUS.md": "status", "status/a.json": "{}",
	}
	with := func(change map[string]string) map[string]string {
		out := map[string]string{}
		for p, c := range base {
			out[p] = c
		}
		for p, c := range change {
			if c == "" {
				delete(out, p)
			} else {
				out[p] = c
			}
		}
		return out
	}
	cases := []struct {
		name         string
		main, head   map[string]string
		want         map[string]string
		folders, pat []string
	}{
		{name: "head changes a stand, main another",
			main: with(map[string]string{"stands/b/stand.yml": "b2"}), head: with(map[string]string{"stands/a/stand.yml": "a2"}),
			want: with(map[string]string{"stands/a/stand.yml": "a2", "stands/b/stand.yml": "b2"})},
		{name: "head removes a stand main left, main adds one",
			main: with(map[string]string{"stands/d/stand.yml": "d"}), head: with(map[string]string{"stands/c/stand.yml": ""}),
			want: with(map[string]string{"stands/d/stand.yml": "d", "stands/c/stand.yml": ""})},
		{name: "both change one stand's folder, different files",
			main: with(map[string]string{"stands/a/app.tmpl": "t2"}), head: with(map[string]string{"stands/a/stand.yml": "a2"}),
			want: with(map[string]string{"stands/a/app.tmpl": "t2"}), folders: []string{"stands/a"}},
		{name: "head removes a stand main changed",
			main: with(map[string]string{"stands/c/stand.yml": "c2"}), head: with(map[string]string{"stands/c/stand.yml": ""}),
			want: with(map[string]string{"stands/c/stand.yml": "c2"}), folders: []string{"stands/c"}},
		{name: "both make the same change",
			main: with(map[string]string{"stands/a/stand.yml": "a2"}), head: with(map[string]string{"stands/a/stand.yml": "a2", "stands/b/stand.yml": "b3"}),
			want: with(map[string]string{"stands/a/stand.yml": "a2", "stands/b/stand.yml": "b3"})},
		{name: "both change a shared file",
			main: with(map[string]string{"bases/common.yml": "m", "STATUS.md": "status 2"}), head: with(map[string]string{"bases/common.yml": "h", "STATUS.md": "old"}),
			want: with(map[string]string{"bases/common.yml": "m", "STATUS.md": "status 2"}), pat: []string{"bases/common.yml"}},
		{name: "both add the same new stand differently",
			main: with(map[string]string{"stands/n/stand.yml": "n1"}), head: with(map[string]string{"stands/n/stand.yml": "n2", "stands/n/x": "x"}),
			want: with(map[string]string{"stands/n/stand.yml": "n1"}), folders: []string{"stands/n"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			m, err := mergeTrees(tree(base), tree(tc.main), tree(tc.head))
			if err != nil {
				t.Fatal(err)
			}
			if got := read(t, m.tree); !mapsEqual(got, tc.want) {
				t.Errorf("merged tree:\n got %v\nwant %v", got, tc.want)
			}
			if !slices.Equal(m.folders, tc.folders) || !slices.Equal(m.paths, tc.pat) {
				t.Errorf("conflicts: folders %q paths %q, want %q %q", m.folders, m.paths, tc.folders, tc.pat)
			}
			if len(tc.pat) > 0 {
				got := read(t, m.theirs)
				for _, p := range tc.pat {
					if got[p] != tc.head[p] {
						t.Errorf("theirs holds %q at %s, want the head's %q", got[p], p, tc.head[p])
					}
				}
			}
		})
	}
}

func read(t *testing.T, fsys fs.FS) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := fs.WalkDir(fsys, ".", func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, p)
		out[p] = string(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}
