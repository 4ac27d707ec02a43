package manifest

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stands-engine/stands-reconciler/test/testfs"
)

const fuzzSentinel = "zq9-SENTINEL-41c7e"

// FuzzPreflight feeds arbitrary stand.yml text through the whole preflight. Whatever the input: no
// panic, every diagnostic has file:line, no secret value in the report, and a stand that loads hashes
// the same twice.
func FuzzPreflight(f *testing.F) {
	// Every source of seeds must give some: a moved fixture would otherwise leave the corpus silently
	// empty and the target fuzzing from nothing.
	examples := globSome(f, "../examples/stands-repo/stands/*/stand.yml")
	for _, p := range append(examples, "testdata/minirepo/stands/a/stand.yml") {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatalf("seed %s: %v", p, err)
		}
		f.Add(data)
	}
	added := 0
	for _, p := range globSome(f, "testdata/rules/*.txtar") {
		data, err := os.ReadFile(p)
		if err != nil {
			f.Fatalf("seed %s: %v", p, err)
		}
		if s, ok := testfs.Parse(string(data))["stands/a/stand.yml"]; ok {
			f.Add([]byte(s))
			added++
		}
	}
	if added == 0 {
		f.Fatal("no rule fixture gave a seed: testdata/rules/*.txtar have no stands/a/stand.yml")
	}
	base := miniRepo(f)
	secrets := map[string]string{"SECRET_KV_PASS": fuzzSentinel, "SECRET_REG_PASS": fuzzSentinel + "-reg"}
	f.Fuzz(func(t *testing.T, data []byte) {
		fsys := fstest.MapFS{}
		for k, v := range base {
			fsys[k] = v
		}
		fsys["stands/a/stand.yml"] = &fstest.MapFile{Data: data}
		results, err := PreflightAll(context.Background(), fsys, []string{"stands/a/stand.yml"}, PreflightOptions{Secrets: mapSource(secrets)})
		var rep *Report
		if err != nil && !errors.As(err, &rep) {
			t.Fatalf("want nil or *Report, got %T: %v", err, err)
		}
		if rep != nil {
			for _, d := range rep.Diags {
				if d.Pos.File == "" || d.Pos.Line < 1 || d.Pos.Col < 1 {
					t.Fatalf("diagnostic without file:line: %#v", d)
				}
			}
			if !bytes.Contains(bytes.ToLower(data), []byte("sentinel")) && !bytes.Contains(data, []byte(fuzzSentinel[:truncated])) {
				if msg := rep.Error(); strings.Contains(msg, fuzzSentinel) || strings.Contains(msg, fuzzSentinel[:truncated]) {
					t.Fatalf("report shows a secret:\n%s", msg)
				}
			}
		}
		if err == nil {
			r := results[0]
			h1, err1 := SpecHash(fsys, r.Stand, r.Secrets, "p")
			h2, err2 := SpecHash(fsys, r.Stand, r.Secrets, "p")
			if err1 != nil || err2 != nil || h1 != h2 {
				t.Fatalf("spec hash not deterministic: %s %v / %s %v", h1, err1, h2, err2)
			}
		}
	})
}

// globSome is filepath.Glob that fails the test when nothing matches.
func globSome(tb testing.TB, pattern string) []string {
	tb.Helper()
	paths, err := filepath.Glob(pattern)
	if err != nil || len(paths) == 0 {
		tb.Fatalf("seed corpus: %q matches nothing (err %v)", pattern, err)
	}
	return paths
}
