package manifest

import (
	"strings"
	"testing"
	"testing/fstest"
	"time"
)

func TestParseLifetime(t *testing.T) {
	for _, c := range []struct {
		in   string
		want time.Duration
	}{
		{"7d", 7 * 24 * time.Hour},
		{"36h", 36 * time.Hour},
		{"1w2d", 9 * 24 * time.Hour},
		{"1d12h30m", 36*time.Hour + 30*time.Minute},
		{"5m", 5 * time.Minute},
		{"", 0}, {"0d", 0}, {"7", 0}, {"d", 0}, {"12h1d", 0}, {"1h1h", 0}, {"10s", 0}, {"1.5d", 0}, {"-1d", 0}, {"99999d", 0},
	} {
		got, err := ParseLifetime(c.in)
		if got != c.want || (err == nil) != (c.want > 0) {
			t.Errorf("ParseLifetime(%q) = %v, %v; want %v", c.in, got, err, c.want)
		}
		if c.want > 0 {
			if back, _ := ParseLifetime(FormatLifetime(got)); back != got {
				t.Errorf("FormatLifetime(%v) = %q does not read back", got, FormatLifetime(got))
			}
		}
	}
}

// TestExpiryOf: what a stand declares wins; the default counts from when the stand was first seen;
// protect and required leave no default.
func TestExpiryOf(t *testing.T) {
	declared := time.Date(2026, 12, 24, 18, 0, 0, 0, time.UTC)
	since := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	week := 7 * 24 * time.Hour
	for _, c := range []struct {
		name   string
		policy Lifetime
		stand  Stand
		since  time.Time
		want   time.Time
		by     string
	}{
		{"declared", Lifetime{Default: week}, Stand{Expires: declared}, since, declared, ByManifest},
		{"default from first sight", Lifetime{Default: week}, Stand{}, since, since.Add(week), ByDefault},
		{"default not yet seen", Lifetime{Default: week}, Stand{}, time.Time{}, time.Time{}, ""},
		{"no policy", Lifetime{}, Stand{}, since, time.Time{}, ""},
		{"protected", Lifetime{Default: week}, Stand{Protect: true}, since, time.Time{}, ""},
		{"required leaves no default", Lifetime{Default: week, Required: true}, Stand{}, since, time.Time{}, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			got := c.policy.ExpiryOf(&c.stand, c.since)
			if !got.At.Equal(c.want) || got.By != c.by {
				t.Errorf("ExpiryOf = %v by %q; want %v by %q", got.At, got.By, c.want, c.by)
			}
		})
	}
}

// TestLifetimeWithinMaximum: an expiry inside the maximum passes, the same one judged later than
// the maximum allows is refused, so the check reads the clock it is given.
func TestLifetimeWithinMaximum(t *testing.T) {
	repo := miniRepo(t)
	stand := "stands/a/stand.yml"
	changed := edit(t, repo, stand, "  owner: t\n", "  owner: t\n  expires: 2026-12-24T18:00:00+03:00\n")
	changed[LifetimeFile] = "maximum: 30d\nwarn_before: 2h\nmerge_at_expiry: true\n"
	files := with(repo, changed)
	for _, c := range []struct {
		now time.Time
		ok  bool
	}{
		{time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), true},
		{time.Date(2026, 11, 20, 0, 0, 0, 0, time.UTC), false},
	} {
		results, err := PreflightAll(t.Context(), files, []string{stand}, PreflightOptions{Secrets: mapSource(testSecrets), Now: c.now})
		if (err == nil) != c.ok {
			t.Fatalf("at %v: err %v, want ok %v", c.now, err, c.ok)
		}
		if !c.ok && !strings.Contains(err.Error(), "the latest it may be now is 2026-12-20T00:00:00Z") {
			t.Errorf("the refusal names no latest date: %v", err)
		}
		if got := results[0].Stand.Expires; !got.Equal(time.Date(2026, 12, 24, 15, 0, 0, 0, time.UTC)) {
			t.Errorf("Expires = %v", got)
		}
	}
	l, rep := ReadLifetime(files)
	if rep != nil || l.Maximum != 30*24*time.Hour || l.Warn() != 2*time.Hour || !l.MergeAtExpiry || l.Required {
		t.Errorf("ReadLifetime = %+v, %v", l, rep)
	}
}

// TestPolicyPrint: the review gate compares policies by what they say. A comment, an order or a
// default written out is the same policy; every setting that changes when a stand ends is another.
func TestPolicyPrint(t *testing.T) {
	print := func(text string) string {
		if text == "-" {
			return ReadPolicy(fstest.MapFS{}).Print()
		}
		return ReadPolicy(fstest.MapFS{LifetimeFile: {Data: []byte(text)}}).Print()
	}
	for _, c := range []struct{ a, b string }{
		{"-", ""},
		{"-", "# no settings\n"},
		{"-", "warn_before: 24h\nmerge_at_expiry: false\n"},
		{"default: 7d\nmaximum: 30d\n", "maximum: 30d # a month\ndefault: 1w\n"},
	} {
		if print(c.a) != print(c.b) {
			t.Errorf("%q prints %q, %q prints %q: want one print", c.a, print(c.a), c.b, print(c.b))
		}
	}
	seen := map[string]string{}
	for _, text := range []string{"-", "default: 7d\n", "default: 1h\n", "maximum: 7d\n", "required: true\n",
		"warn_before: 1h\n", "merge_at_expiry: true\n", "default: seven days\n", "default: 7 days\n"} {
		p := print(text)
		if other, ok := seen[p]; ok {
			t.Errorf("%q and %q both print %q", text, other, p)
		}
		seen[p] = text
	}
	if p := print("default: seven days\n"); !strings.HasPrefix(p, "invalid ") {
		t.Errorf("a policy with a mistake prints %q", p)
	}
}
