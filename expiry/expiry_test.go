package expiry

import (
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/stands"
)

func TestBranchNames(t *testing.T) {
	end := time.Date(2026, 12, 24, 15, 4, 5, 0, time.UTC)
	ref := Branch("local_shop_dev", end)
	if ref != "stands-reconciler/expire/local_shop_dev/20261224T150405Z" {
		t.Errorf("Branch = %s", ref)
	}
	if id, at, ok := parseBranch(ref); !ok || id != "local_shop_dev" || !at.Equal(end) {
		t.Errorf("parseBranch(%s) = %s %v %v", ref, id, at, ok)
	}
	for _, bad := range []string{"feature/x", BranchPrefix + "local_shop_dev", BranchPrefix + "Local_Shop/20261224T150405Z",
		BranchPrefix + "local_shop_dev/tomorrow", BranchPrefix + "../main/20261224T150405Z"} {
		if _, _, ok := parseBranch(bad); ok {
			t.Errorf("parseBranch(%q) took it", bad)
		}
	}
}

// TestStaleSaysWhy: a pull request is due while its stand is declared with that end; a refused
// manifest leaves it; a moved end, a stand gone or no longer ending closes it.
func TestStaleSaysWhy(t *testing.T) {
	end := time.Date(2026, 12, 24, 15, 0, 0, 0, time.UTC)
	w := New(Config{Branch: "main"}, nil, nil)
	ref := Branch("o_p_e", end)
	for _, c := range []struct {
		name     string
		declared map[string]bool
		ends     []stands.Ending
		want     string
	}{
		{"due", map[string]bool{"o_p_e": true}, []stands.Ending{{ID: "o_p_e", End: end.Add(400 * time.Millisecond)}}, ""},
		{"refused manifest", map[string]bool{"o_p_e": false}, nil, ""},
		{"moved", map[string]bool{"o_p_e": true}, []stands.Ending{{ID: "o_p_e", End: end.Add(time.Hour)}}, "moved from `2026-12-24 15:00 UTC` to `2026-12-24 16:00 UTC`"},
		{"gone", map[string]bool{}, nil, "is no longer declared"},
		{"no end", map[string]bool{"o_p_e": true}, nil, "no longer ends"},
	} {
		e := stands.Endings{Commit: "0123456789abcdef", Declared: c.declared, Ends: c.ends}
		ends := map[string]stands.Ending{}
		for _, x := range c.ends {
			ends[x.ID] = x
		}
		got := string(w.stale(ref, e, ends))
		if (c.want == "") != (got == "") || !strings.Contains(got, c.want) {
			t.Errorf("%s: %q, want %q", c.name, got, c.want)
		}
	}
}

// TestBodyKeepsValuesInert: a mention only of a Gitea user name; a stand's id, a place and an
// author's name as written are shown, never read as markup or a mention.
func TestBodyKeepsValuesInert(t *testing.T) {
	end := stands.Ending{ID: "o_p_e", End: time.Date(2026, 12, 24, 15, 0, 0, 0, time.UTC), At: "stands/<b>x</b>/stand.yml:4:12", Cost: "8.09 EUR"}
	e := stands.Endings{Commit: "c", WarnBefore: time.Hour}
	for _, c := range []struct {
		by          stands.Author
		want, never string
	}{
		{stands.Author{Commit: "0123456789ab", Login: "alice"}, "@alice, you set this end (`0123456789ab`)", "@alice`"},
		{stands.Author{Commit: "0123456789ab", Name: "@everyone <img src=x>"}, "`@everyone <img src=x>` set this end", "@everyone <"},
		{stands.Author{Commit: "0123456789ab", Login: "bob smith"}, "`bob smith`, you set this end", "@bob"},
	} {
		b := string(body(end, e, c.by, "main"))
		if !strings.Contains(b, c.want) || strings.Contains(strings.ReplaceAll(b, "`"+c.by.Name+"`", ""), c.never) {
			t.Errorf("body lacks %q or holds %q:\n%s", c.want, c.never, b)
		}
		for _, w := range []string{"`stands/<b>x</b>/stand.yml:4:12`", "saving `8.09 EUR` a month", "`Expired` and stays"} {
			if !strings.Contains(b, w) {
				t.Errorf("body lacks %q:\n%s", w, b)
			}
		}
	}
}
