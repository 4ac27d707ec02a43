package manifest

import (
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestMiniRepoIsValid guards the base the rule fixtures overlay: each fixture's errors must come from
// its own change.
func TestMiniRepoIsValid(t *testing.T) {
	results, err := preflightFS(t, miniRepo(t), testSecrets)
	if err != nil {
		t.Fatalf("mini repository has problems:\n%v", err)
	}
	if len(results) != 1 || results[0].Rendered == nil {
		t.Fatalf("want one rendered stand, got %d", len(results))
	}
}

// TestRules runs one fixture per validation rule: testdata/rules/<rule>--<case>.txtar overlays the
// mini repository and lists in its "want" section every diagnostic expected, as "file:line rule".
// The set must match exactly, so a fixture also proves the mistake causes no unrelated noise.
func TestRules(t *testing.T) {
	paths, err := filepath.Glob("testdata/rules/*.txtar")
	if err != nil {
		t.Fatal(err)
	}
	covered := map[string]bool{}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".txtar")
		rule, _, _ := strings.Cut(name, "--")
		covered[rule] = true
		t.Run(name, func(t *testing.T) {
			fsys, a := fixtureFS(t, p)
			want := strings.Fields(strings.ReplaceAll(a["want"], " ", "|"))
			if len(want) == 0 {
				t.Fatal("fixture has no want section")
			}
			_, err := preflightFS(t, fsys, testSecrets)
			var rep *Report
			if !errors.As(err, &rep) {
				t.Fatalf("want a *Report, got %v", err)
			}
			if !rep.Has(rule) {
				t.Errorf("no diagnostic of rule %q", rule)
			}
			var got []string
			for _, d := range rep.Diags {
				if d.Pos.File == "" || d.Pos.Line < 1 || d.Pos.Col < 1 {
					t.Errorf("diagnostic without file:line:col: %v", d)
				}
				got = append(got, fmt.Sprintf("%s:%d|%s", d.Pos.File, d.Pos.Line, d.Rule))
			}
			slices.Sort(got)
			got = slices.Compact(got)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("diagnostics differ\n got: %v\nwant: %v\nreport:\n%v", got, want, rep)
			}
			for v := range strings.SplitSeq(rep.Error(), "\n") {
				for _, s := range testSecrets {
					if strings.Contains(v, s) {
						t.Errorf("report shows a secret value: %s", v)
					}
				}
			}
		})
	}
	for _, r := range Rules {
		if !covered[r] {
			t.Errorf("rule %q has no fixture in testdata/rules", r)
		}
	}
}
