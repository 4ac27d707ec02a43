package prplan

import (
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/test/fakes"
)

// TestPlanShowsLifetimes: a change of stand.expires or of the lifetime policy changes no server, and
// still gets a plan that shows it (reviewed like any change); a new stand shows its end; an expiry
// beyond the maximum fails the plan with file and line; one already past is said to be.
func TestPlanShowsLifetimes(t *testing.T) {
	soon := time.Now().Add(48 * time.Hour).UTC().Truncate(time.Hour)
	later := soon.Add(24 * time.Hour)
	files := repoWith("a")
	files[fakes.StandFile("a")] = fakes.StandYML("a", "  expires: "+soon.Format(time.RFC3339))
	files[manifest.LifetimeFile] = "maximum: 30d\n"
	h := newHarness(t, files, nil)
	f := h.forge
	h.mustCycle()
	base := h.files()
	previews := h.eng.Previews

	f.Open(1, "extend", base, map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  expires: "+later.Format(time.RFC3339))}, true)
	f.Open(2, "new", base, map[string]string{fakes.StandFile("b"): fakes.StandYML("b", "  expires: "+later.Format(time.RFC3339))}, true)
	f.Open(3, "too-far", base, map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  expires: "+soon.Add(60*24*time.Hour).Format(time.RFC3339))}, true)
	f.Open(4, "policy", base, map[string]string{manifest.LifetimeFile: "maximum: 60d\ndefault: 3d\n"}, true)
	f.Open(5, "past", base, map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  expires: 2026-01-01T00:00:00Z")}, true)
	h.mustCycle()

	day := func(t time.Time) string { return t.Format("2006-01-02 15:04 UTC") }
	for _, c := range []struct {
		pr     int64
		head   string
		status string
		want   []string
	}{
		{1, "extend", "success: 1 lifetime change(s)", []string{"changes no server; it changes when stands end", "#### Lifetimes",
			"| stand | end on `main` | end once merged |",
			"| `local_a_dev` | `" + day(soon) + "` | `" + day(later) + "` |"}},
		{2, "new", "success: 1 lifetime change(s), 1 create", []string{"| `local_b_dev` | `not declared` | `" + day(later) + "` |"}},
		{3, "too-far", "failure: 1 invalid", []string{"stands/a/stand.yml:5:12", "is more than 30d from now, the repository's maximum"}},
		{4, "policy", "success: lifetime policy changed", []string{"lifetime policy `.stands/lifetime.yml`: `maximum: 30d → 60d`",
			"`default: none → 3d`"}},
		{5, "past", "success: 1 lifetime change(s)", []string{"`2026-01-01 00:00 UTC` (already past: it is expired once merged)"}},
	} {
		if st := f.Status(c.head, PlanContext); !strings.HasPrefix(st, c.status) {
			t.Errorf("#%d: stands/plan %q, want %q", c.pr, st, c.status)
		}
		for _, w := range c.want {
			if cm := f.Comment(c.pr); !strings.Contains(cm, w) {
				t.Errorf("#%d: comment lacks %q:\n%s", c.pr, w, cm)
			}
		}
	}
	if got := h.eng.Previews - previews; got != 1 {
		t.Errorf("%d previews; want 1 (the new stand's): a lifetime changes no server", got)
	}
}
