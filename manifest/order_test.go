package manifest

import (
	"strings"
	"testing"
	"testing/fstest"
)

// TestIterationKeepsTheManifestsOrder: a Python dict kept the order of its YAML, and the Stands
// Engine's templates iterated in it; Go's maps have none, and a range sorts. The iteration helpers of
// converted templates (iter, items, enumerate) follow the manifest's order — of preferences (nested
// too), apps, instances and nodes — and, the control, a plain range of the same mapping does not.
func TestIterationKeepsTheManifestsOrder(t *testing.T) {
	fsys := miniRepo(t)
	stand := string(fsys["stands/a/stand.yml"].Data)
	stand = strings.Replace(stand, "          port: 7000\n", "          port: 7000\n          labels:\n            zeta: z\n            alpha: a\n            mid: {b: 2, a: 1}\n", 1)
	fsys["stands/a/stand.yml"] = &fstest.MapFile{Data: []byte(stand)}
	fsys["apps/kv/kv.conf.tmpl"] = &fstest.MapFile{Data: []byte(`port {{ .preferences.port }}
pass {{ .preferences.password }}
items{{ range $k, $v := items .preferences.labels }} {{ $k }}{{ end }}
iter{{ range $k := iter .preferences.labels }} {{ $k }}{{ end }}
enumerate{{ range $i, $k := enumerate .preferences.labels }} {{ $i }}:{{ $k }}{{ end }}
nested{{ range $k := iter .preferences.labels.mid }} {{ $k }}{{ end }}
range{{ range $k, $v := .preferences.labels }} {{ $k }}{{ end }}
`)}
	st, err := Load(fsys, "stands/a/stand.yml", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var got string
	_, err = RenderObserved(fsys, st, PlaceholderSecrets(st, 0), PreflightAddresses(st), func(p string, _ map[string]any, _ func(map[string]any) []string, out []byte) {
		if p == "apps/kv/kv.conf.tmpl" {
			got = string(out)
		}
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"items zeta alpha mid\n", "iter zeta alpha mid\n", "enumerate 0:zeta 1:alpha 2:mid\n", "nested b a\n",
		"range alpha mid zeta\n"} { // the control: Go's own order
		if !strings.Contains(got, want) {
			t.Errorf("the render lacks %q:\n%s", want, got)
		}
	}
}
