package manifest

import (
	"errors"
	"strings"
	"testing"
)

// legacyForm turns the mini repository's stand (the Stands Engine's form) into the old one: users and ssh at the
// top level, same lines.
func legacyForm(t *testing.T, seed string) string {
	t.Helper()
	old := "  users:\n    sudo: admin\n    app: app\n  ssh:\n    key_name_admin: k\n"
	if !strings.Contains(seed, old) {
		t.Fatal("the mini repository's stand.yml is not in the Stands Engine's form")
	}
	return strings.Replace(seed, old, "users:\n  sudo: admin\n  app: app\nssh:\n  key_name_admin: k\n", 1)
}

// TestLegacyTopLevelAccounts: the old top-level users and ssh still load, with a deprecation warning
// that has file, line and column, into the same stand with the same spec hash; both places at once
// is an error; a base in one form merges with a stand in the other.
func TestLegacyTopLevelAccounts(t *testing.T) {
	base := miniRepo(t)
	seed := string(base["stands/a/stand.yml"].Data)
	legacy := with(base, map[string]string{"stands/a/stand.yml": legacyForm(t, seed)})

	s, err := Load(legacy, "stands/a/stand.yml", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Users != (Users{Sudo: "admin", App: "app"}) || s.SSH.KeyNameAdmin != "k" {
		t.Errorf("old form read as %+v %+v", s.Users, s.SSH)
	}
	if len(s.Warnings) != 2 {
		t.Fatalf("warnings: %v", s.Warnings)
	}
	for _, w := range s.Warnings {
		if w.Rule != RuleDeprecated || w.Pos.File != "stands/a/stand.yml" || w.Pos.Line < 1 || w.Pos.Col < 1 || !strings.Contains(w.Msg, "under stand:") {
			t.Errorf("warning %v", w)
		}
	}
	if s, err := Load(base, "stands/a/stand.yml", LoadOptions{}); err != nil || len(s.Warnings) != 0 {
		t.Errorf("the Stands Engine's form: %v, warnings %v", err, s.Warnings)
	}
	secrets := map[string]string{"SECRET_KV_PASS": "kv-value", "SECRET_REG_PASS": "reg-value"}
	if a, b := hashOf(t, base, secrets, "p"), hashOf(t, legacy, secrets, "p"); a != b {
		t.Errorf("the two forms hash differently: %s %s", a, b)
	}

	both := with(base, map[string]string{"stands/a/stand.yml": seed + "users:\n  sudo: root2\n  app: app2\n"})
	_, err = Load(both, "stands/a/stand.yml", LoadOptions{})
	var rep *Report
	if !errors.As(err, &rep) || !rep.Has(RuleSyntax) || !strings.Contains(rep.Error(), "given twice") {
		t.Errorf("both forms: %v", err)
	}

	// A base in the old form, the stand in the Stands Engine's overriding one user: deep merge as ever.
	mixed := with(base, map[string]string{
		"bases/acc.yml":      "users:\n  sudo: admin\n  app: app\nssh:\n  key_name_admin: k\n",
		"stands/a/stand.yml": "from_dep_manifest: ../../bases/acc.yml\n" + strings.Replace(seed, "    app: app\n", "    app: svc\n", 1),
	})
	mixed["stands/a/stand.yml"].Data = []byte(strings.Replace(string(mixed["stands/a/stand.yml"].Data), "    sudo: admin\n", "", 1))
	s, err = Load(mixed, "stands/a/stand.yml", LoadOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s.Users != (Users{Sudo: "admin", App: "svc"}) || len(s.Warnings) != 2 || s.Warnings[0].Pos.File != "bases/acc.yml" {
		t.Errorf("mixed forms: %+v, warnings %v", s.Users, s.Warnings)
	}
}

// TestBaseParsedOnce: the stands of one judgement merging a base share its parsed tree and their
// app packages, and each still gets the warnings parsing the base gave and the reads loading the
// package made.
func TestBaseParsedOnce(t *testing.T) {
	base := miniRepo(t)
	seed := string(base["stands/a/stand.yml"].Data)
	stand := func(env string) string {
		s := "from_dep_manifest: ../../bases/acc.yml\n" + strings.Replace(seed, "  users:\n    sudo: admin\n    app: app\n  ssh:\n    key_name_admin: k\n", "", 1)
		return strings.Replace(s, "env: ", "env: "+env, 1)
	}
	repo := with(base, map[string]string{
		"bases/acc.yml":      "users:\n  sudo: admin\n  app: app\nssh:\n  key_name_admin: k\n",
		"stands/a/stand.yml": stand("a"),
		"stands/b/stand.yml": stand("b"),
	})
	results, err := PreflightAll(t.Context(), repo, []string{"stands/a/stand.yml", "stands/b/stand.yml"}, PreflightOptions{
		LoadOptions: LoadOptions{DefaultOwner: "o"}, Secrets: mapSource(map[string]string{"SECRET_KV_PASS": "kv-value", "SECRET_REG_PASS": "reg-value"})})
	if err != nil {
		t.Fatal(err)
	}
	a, b := results[0].Stand, results[1].Stand
	if a.ID == b.ID {
		t.Fatalf("both stands are %s", a.ID)
	}
	for _, s := range []*Stand{a, b} {
		if len(s.Warnings) != 2 || s.Warnings[0].Pos.File != "bases/acc.yml" || s.SSH.KeyNameAdmin != "k" {
			t.Errorf("%s: ssh %+v, warnings %v", s.ID, s.SSH, s.Warnings)
		}
	}
	if a.root.get("stand").get("ssh") != b.root.get("stand").get("ssh") {
		t.Error("each stand holds a tree of its own of the base")
	}
	if len(a.Apps) == 0 || a.Apps[0].Package == nil || a.Apps[0].Package != b.Apps[0].Package {
		t.Error("each stand holds an app package of its own")
	}
	for _, r := range results {
		if r.Reads.Len() != results[0].Reads.Len() {
			t.Errorf("%s made %d reads, %s %d: the package's reads are each stand's", r.File, r.Reads.Len(), results[0].File, results[0].Reads.Len())
		}
	}
}
