package layered

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLayers: a flag wins over its variable, which wins over the config file, which wins over the
// default; a renamed setting's old flag, variable and key set it with a warning, the new name first;
// the daemon's secrets come from files only.
func TestLayers(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "c.yml")
	if err := os.WriteFile(file, []byte("a: from-file\nb: from-file\nc: from-file\nold-e: from-old-key\ncredentials:\n  token: token.txt\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	creds := []Credential{{Key: "TOKEN", Name: "token"}}
	cases := []struct {
		name      string
		args      []string
		vars      map[string]string
		filesOnly bool
		want      map[string][2]string // setting → value, origin
		warned    []string
		err       string
	}{
		{name: "each layer", args: []string{"--a", "from-flag"}, vars: map[string]string{"B": "from-var", ConfigVariable: file},
			want: map[string][2]string{"a": {"from-flag", "--a"}, "b": {"from-var", "$B"}, "c": {"from-file", file + ":3"}, "d": {"default", "default"},
				"e": {"from-old-key", file + ":4"}, "config": {"", "$" + ConfigVariable}},
			warned: []string{file + ":4: old-e is deprecated: use e"}},
		{name: "old flag and variable", args: []string{"--old-e", "from-old-flag"}, vars: map[string]string{"OLD_F": "from-old-var"},
			want:   map[string][2]string{"e": {"from-old-flag", "--old-e"}, "f": {"from-old-var", "$OLD_F"}, "config": {"", "none"}},
			warned: []string{"$OLD_F is deprecated: use $F", "--old-e is deprecated: use --e"}},
		{name: "the new name first", vars: map[string]string{"OLD_F": "old", "F": "new"},
			want: map[string][2]string{"f": {"new", "$F"}}},
		{name: "a secret's value refused where files only", vars: map[string]string{"TOKEN": "x"}, filesOnly: true,
			err: "$TOKEN is set: the daemon takes secrets from files only"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := flag.NewFlagSet("t", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			s := New(fs, func(k string) string { return c.vars[k] }, creds, nil)
			s.FilesOnly = c.filesOnly
			values := map[string]*string{}
			for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
				values[n] = fs.String(n, Bound(s, n, strings.ToUpper(n), "default"), "")
			}
			s.Renamed("e", "old-e", "OLD_E")
			s.Renamed("f", "old-f", "OLD_F")
			if err := fs.Parse(c.args); err != nil {
				t.Fatal(err)
			}
			err := s.Resolve()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("Resolve: %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range c.want {
				got := ""
				if v := values[name]; v != nil {
					got = *v
				}
				if got != want[0] || s.Setting(name) != want[1] {
					t.Errorf("%s: %q from %q, want %q from %q", name, got, s.Setting(name), want[0], want[1])
				}
			}
			var warned []string
			for _, d := range s.Deprecated {
				warned = append(warned, strings.TrimSuffix(d, " (the old name works until the next release)"))
			}
			slices.Sort(warned)
			if !slices.Equal(warned, c.warned) {
				t.Errorf("warnings %q, want %q", warned, c.warned)
			}
		})
	}
}
