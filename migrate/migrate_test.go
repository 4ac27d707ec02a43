package migrate

import (
	"context"
	"io/fs"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stands-engine/stands-reconciler/mako"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/testfs"
)

// TestProofCatches: a proof that cannot fail proves nothing. Each case gives a Mako template and a Go
// translation wrong in one way a converter could be — the order a mapping is iterated in, the
// whitespace a control line leaves, a filter dropped, a fault in a branch the stand's own values do
// not take — and the proof must report the template as differing, naming the first line that does
// (and the varied preferences that showed it); the right translation (Convert's) is proven.
func TestProofCatches(t *testing.T) {
	if _, err := mako.FindPython(); err != nil {
		testenv.Missing(t, "%v", err)
	}
	const file = "apps/kv/kv.conf.tmpl"
	for _, c := range []struct{ name, mako, wrong, line string }{
		{"the order of a mapping", "port ${preferences['port']}\n% for k, v in preferences['labels'].items():\n${k}=${v}\n% endfor\n",
			"port {{ .preferences.port }}\n{{ range $k, $v := .preferences.labels }}{{ $k }}={{ $v }}\n{{ end }}", "line 2"},
		{"the whitespace of a control line", "port ${preferences['port']}\n% if preferences['port'] > 1:\nbig\n% endif\nend\n",
			"port {{ .preferences.port }}\n{{ if gt .preferences.port 1 }}\nbig\n{{ end }}\nend\n", "line 2"},
		{"a filter", "port ${preferences['port']}\nnote ${preferences['note'] | h}\n",
			"port {{ .preferences.port }}\nnote {{ .preferences.note }}\n", "line 2"},
		// Wrong only where the stand's own values do not go: caught with its booleans negated.
		{"a branch its values do not take", "port ${preferences['port']}\n% if preferences['persist']:\nnote ${preferences['note'] | h}\n% endif\n",
			"port {{ .preferences.port }}\n{{ if .preferences.persist }}note {{ .preferences.note }}\n{{ end }}", "with its preferences varied: booleans negated, numbers plus one, strings with <&'\" added, line 2"},
	} {
		t.Run(c.name, func(t *testing.T) {
			right, problems := mako.Convert(c.mako)
			if len(problems) > 0 {
				t.Fatalf("the Mako template does not convert: %v", problems)
			}
			for _, tc := range []struct {
				out    string
				proven bool
			}{{c.wrong, false}, {right, true}} {
				m := &Migration{Templates: []*Template{{Manifest: file, Src: c.mako, Out: tc.out}}}
				pr := m.Prove(context.Background(), func() (fs.FS, error) { return repo(t, tc.out), nil }, "local")
				if tc.proven {
					if len(pr.Proven) != 1 || len(pr.Differs) != 0 {
						t.Errorf("the right translation: proven %v, differs %v, notes %v\n%s", pr.Proven, pr.Differs, pr.Notes, tc.out)
					}
					continue
				}
				if len(pr.Differs) != 1 || !strings.Contains(pr.Differs[0], file+": stand local_mini_a") || !strings.Contains(pr.Differs[0], c.line+":") || len(pr.Proven) != 0 {
					t.Errorf("the wrong translation: differs %v, proven %v, notes %v", pr.Differs, pr.Proven, pr.Notes)
				}
			}
		})
	}
}

// repo is the manifest package's mini repository, its kv.conf template being out, and preferences
// holding a mapping whose keys are not in sorted order and a value HTML escaping changes.
func repo(t *testing.T, out string) fs.FS {
	t.Helper()
	fsys, err := testfs.Dir("../manifest/testdata/minirepo")
	if err != nil {
		t.Fatal(err)
	}
	stand := strings.Replace(string(fsys["stands/a/stand.yml"].Data), "  owner: t\n", "", 1)
	stand = strings.Replace(stand, "          port: 7000\n", "          port: 7000\n          note: \"a <b> & c\"\n          persist: false\n          labels:\n            zeta: z\n            alpha: a\n", 1)
	fsys["stands/a/stand.yml"] = &fstest.MapFile{Data: []byte(stand)}
	fsys["apps/kv/kv.conf.tmpl"] = &fstest.MapFile{Data: []byte(out)}
	return fsys
}
