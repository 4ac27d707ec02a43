package prplan

import (
	"bytes"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/test/fakes"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// hostilePRs try to read kv-password back through a pull request's plan, one channel each. Every
// one renders the real value on the merged path (TestHostileTemplatesSeeTheSecretWhenMerged).
var hostilePRs = []struct {
	name   string
	change map[string]string
	guess  bool // reads no secret: writes a guess that equals production's configuration
}{
	{"hex in a file destination", map[string]string{"apps/kv/app.yml": kvApp(`dest: '/x/{{ printf "%x" .preferences.password }}/redis.conf'`, "")}, false},
	{"base64 in a file destination", map[string]string{"apps/kv/app.yml": kvApp(`dest: "/x/{{ b64enc .preferences.password }}/redis.conf"`, "")}, false},
	{"fragments in destinations", map[string]string{"apps/kv/app.yml": kvApp(`dest: "/x/{{ slice .preferences.password 0 3 }}/{{ slice .preferences.password 3 6 }}/redis.conf"`, "")}, false},
	{"length as a port", map[string]string{"apps/kv/app.yml": kvApp("", `ports: ['{{ len .preferences.password | printf "10%02d" }}/tcp']`)}, false},
	{"a template error quoting it", map[string]string{"apps/kv/redis.conf.tmpl": "requirepass {{ index .preferences .preferences.password }}\n"}, false},
	{"a number that is not one", map[string]string{"apps/kv/redis.conf.tmpl": "port {{ .preferences.password | printf \"%d\" }}\n"}, false},
	{"a guess deciding the image", map[string]string{"apps/kv/app.yml": strings.Replace(kvApp("", ""), `"{{ .preferences.image }}"`,
		`'registry.example.test/{{ if eq .preferences.password "kv-s3cret-value" }}right{{ else }}wrong{{ end }}:1'`, 1)}, false},
	{"a guess deciding the configuration", map[string]string{"apps/kv/redis.conf.tmpl": `{{ if eq .preferences.password "kv-s3cret-value" }}requirepass {{ .preferences.password }}{{ end }}` + "\n"}, false},
	{"a guess equal to production", guessed(), true},
}

// guessed is the example's kv package with every use of the password replaced by a guess of it: the
// configuration is production's exactly when the guess is right.
func guessed() map[string]string {
	out := map[string]string{}
	for _, f := range []string{"redis.conf.tmpl", "connection.json.tmpl", "hooks/ping.sh.tmpl"} {
		data, err := os.ReadFile(testenv.RepoRoot() + "/examples/stands-repo/apps/kv/" + f)
		if err != nil {
			panic(err)
		}
		out["apps/kv/"+f] = strings.ReplaceAll(string(data), ".preferences.password", `"`+fakes.KVPassword+`"`)
	}
	return out
}

// kvApp is the example's apps/kv/app.yml with the file's destination or the role's ports replaced.
func kvApp(dest, ports string) string {
	if dest == "" {
		dest = `dest: "/home/{{ .user_app }}/stands/{{ .instance }}/redis.conf"`
	}
	if ports == "" {
		ports = `ports: ["{{ .preferences.port }}/tcp"]`
	}
	return fmt.Sprintf(`images:
  - "{{ .preferences.image }}"
roles:
  server:
    zone: internal
    %s
files:
  - src: redis.conf.tmpl
    %s
    mode: "0600"
pod: pod.yaml.tmpl
connection: connection.json.tmpl
`, ports, dest)
}

// TestPreviewIsBlindToSecrets: whatever a pull request's templates do with a secret, its plan (the
// comment, every commit status, the logs, the status files) is the same byte for byte whatever the
// secret's value is, holds no form of it, and the previews were never given it.
func TestPreviewIsBlindToSecrets(t *testing.T) {
	for _, tc := range hostilePRs {
		t.Run(tc.name, func(t *testing.T) {
			var seen [2]string
			for i, secret := range []string{fakes.KVPassword, "zq-0ther-v4lue-x"} {
				out, previewed := planUnder(t, secret, tc.change)
				for _, form := range secretForms(secret) {
					if strings.Contains(out, form) {
						t.Errorf("secret %q shows as %q in what the plan published:\n%s", secret, form, out)
					}
				}
				for _, v := range previewed {
					if v == secret {
						t.Errorf("a preview was given the secret's value")
					}
				}
				seen[i] = out
			}
			if seen[0] != seen[1] {
				t.Errorf("the plan depends on the secret's value:\n--- one secret:\n%s\n--- another:\n%s", seen[0], seen[1])
			}
			if !strings.Contains(seen[0], "local_a_dev") {
				t.Errorf("the plan does not show the changed stand:\n%s", seen[0])
			}
		})
	}
}

// planUnder applies stand a with kv-password = secret, plans the pull request, and returns all the
// plan published (comment, commit statuses, the logs of the planning cycle, status files) and
// the secret values its previews were given.
func planUnder(t *testing.T, secret string, change map[string]string) (string, []string) {
	var logs bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	h := newHarness(t, repoWith("a"), func(c *reconcile.Config, p *Config) { c.Log, p.Log = log, log })
	f := h.forge
	h.sec.Values["kv-password"] = secret
	h.mustCycle()
	if !strings.Contains(h.sec.Connections["local_a_dev"], secret) {
		t.Fatalf("the tracked branch's apply did not get the secret: %q", h.sec.Connections["local_a_dev"])
	}
	published := len(h.src.Published)
	logs.Reset() // the planning cycle's logs only
	f.Open(1, "head1", h.files(), change, true)
	h.mustCycle()
	var b strings.Builder
	b.WriteString(f.Comment(1))
	for _, name := range []string{PlanContext} {
		fmt.Fprintf(&b, "\nstatus %s: %s\n", name, f.Status("head1", name))
	}
	for _, line := range strings.Split(logs.String(), "\n") {
		// time and the durations change from run to run; the messages and values do not
		if i := strings.Index(line, `"level"`); i > 0 {
			line = line[i:]
		}
		b.WriteString(line + "\n")
	}
	for _, commit := range h.src.Published[published:] {
		for p, data := range commit {
			fmt.Fprintf(&b, "published %s:\n%s\n", p, data)
		}
	}
	return b.String(), h.eng.PreviewSecrets
}

// secretForms are the ways a value could be smuggled out: whole, encoded, or in fragments.
func secretForms(v string) []string {
	forms := []string{v, hex.EncodeToString([]byte(v)), base64.StdEncoding.EncodeToString([]byte(v)), strings.ToUpper(hex.EncodeToString([]byte(v)))}
	for i := 0; i+3 <= len(v); i += 3 {
		forms = append(forms, "/"+v[i:i+3]+"/")
	}
	return forms
}

// TestHostileTemplatesSeeTheSecretWhenMerged is the positive control of TestPreviewIsBlindToSecrets:
// on the merged path each hostile template renders with the real value, so the plan really had
// something to hide.
func TestHostileTemplatesSeeTheSecretWhenMerged(t *testing.T) {
	for _, tc := range hostilePRs {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, repoWith("a"), nil)
			main := h.files()
			head := h.files()
			for p, c := range tc.change {
				head[p] = &fstest.MapFile{Data: []byte(c)}
			}
			render := func(files fstest.MapFS, placeholders bool) string {
				res, _ := manifest.PreflightAll(t.Context(), files, []string{fakes.StandFile("a")}, manifest.PreflightOptions{
					LoadOptions: manifest.LoadOptions{DefaultOwner: "local"}, Secrets: h.sec, KeepGoing: true})
				if len(res) != 1 || res[0].Stand == nil {
					t.Fatalf("stand not loaded: %+v", res)
				}
				secrets := res[0].Secrets
				if placeholders {
					secrets = manifest.PlaceholderSecrets(res[0].Stand, 0)
				}
				out, err := manifest.Render(files, res[0].Stand, secrets, manifest.PreflightAddresses(res[0].Stand))
				if err != nil {
					return "error: " + err.Error()
				}
				return digest(out.Instances)
			}
			if tc.guess {
				// Production's configuration and the guess are the same: Pulumi would see no change.
				if render(main, false) != render(head, false) {
					t.Error("the guess does not reproduce production's configuration: the case tests nothing")
				}
				return
			}

			if render(head, false) == render(head, true) {
				t.Error("the template renders the same with the real secret as with its placeholder: it could not leak it")
			}
		})
	}
}

// TestPreviewSaysMayChangeOnlyWhereASecretDecides: a plan stays exact where no secret decides
// (servers, a non-secret preference, an untouched instance) and says "may" only for an edited
// template that reads a secret; a secret that does not exist fails the plan by name.
func TestPreviewSaysMayChangeOnlyWhereASecretDecides(t *testing.T) {
	instance := func(prefs string) string {
		return strings.Replace(fakes.StandYML("a", ""), "      cache: {}", "      cache:\n        preferences:\n"+prefs, 1)
	}
	cases := []struct {
		name         string
		change       map[string]string
		want, unwant []string
		state        string
	}{
		{"server type only", map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "node_profiles:\n  small:\n    type_serv: cx32")},
			[]string{"replace `local-a-dev-main`"}, []string{"kv--cache", "may", "images of", "node of"}, "success"},
		{"a non-secret preference", map[string]string{fakes.StandFile("a"): instance("          maxmemory: 128mb\n")},
			[]string{"update instance `kv--cache` on `main` (restarts it)"}, []string{"may"}, "success"},
		{"an edited template that reads the secret", map[string]string{"apps/kv/redis.conf.tmpl": "requirepass {{ .preferences.password }}\n"},
			[]string{"update instance `kv--cache` on `main` (may restart it"}, []string{"(restarts it)", "images of"}, "success"},
		{"a secret that does not exist", map[string]string{fakes.StandFile("a"): instance("          password: !secret no-such-secret\n")},
			[]string{"invalid", "no-such-secret"}, []string{"kv--cache"}, "failure"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			h, f := newPreviewHarness(t, "a")
			h.mustCycle()
			f.Open(1, "head1", h.files(), tc.change, true)
			h.mustCycle()
			c := f.Comment(1)
			for _, w := range tc.want {
				if !strings.Contains(c, w) {
					t.Errorf("the plan lacks %q:\n%s", w, c)
				}
			}
			for _, w := range tc.unwant {
				if strings.Contains(c, w) {
					t.Errorf("the plan has %q:\n%s", w, c)
				}
			}
			if st := f.Status("head1", PlanContext); !strings.HasPrefix(st, tc.state) {
				t.Errorf("stands/plan: %q, want %s", st, tc.state)
			}
		})
	}
}

// TestPlansJudgeOnlyWhatChanged: a pull request's plan judges anew the stands its merge changes,
// keeping the others from the tracked branch's judgement; a commit on the tracked branch judges
// anew, for the plans, only the stands it touched (within SecretRefresh; with 0, every stand).
func TestPlansJudgeOnlyWhatChanged(t *testing.T) {
	for _, tc := range []struct {
		refresh time.Duration
		anew    string // the tracked branch's stands judged anew after a commit touching one
	}{{5 * time.Minute, "1"}, {0, "3"}} {
		var logs bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		h := newHarness(t, repoWith("a", "b", "c"), func(c *reconcile.Config, p *Config) { c.Log, p.Log, p.SecretRefresh = log, log, tc.refresh })
		h.mustCycle()
		h.forge.Open(1, "head1", h.files(), map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  protect: true")}, true)
		h.mustCycle()
		judged := func(msg string) string {
			t.Helper()
			var last string
			for line := range strings.Lines(logs.String()) {
				var rec struct {
					Msg   string
					Anew  json.Number `json:"judged_anew"`
					Count json.Number `json:"stands"`
				}
				if json.Unmarshal([]byte(line), &rec) == nil && rec.Msg == msg {
					last = string(rec.Anew) + " of " + string(rec.Count)
				}
			}
			logs.Reset()
			return last
		}
		if got := judged("pull request judged"); got != "1 of 3" {
			t.Errorf("refresh %s: the pull request judged anew %q stands, want its one of 3", tc.refresh, got)
		}
		h.src.Commit(map[string]string{fakes.StandFile("c"): fakes.StandYML("c", "") + "# a comment\n"})
		h.mustCycle()
		if got := judged("tracked branch judged for the plans"); got != tc.anew+" of 3" {
			t.Errorf("refresh %s: a commit touching one stand judged anew %q for the plans, want %s of 3", tc.refresh, got, tc.anew)
		}
		if !strings.Contains(h.forge.Comment(1), "local_a_dev") {
			t.Errorf("refresh %s: the plan does not show the changed stand:\n%s", tc.refresh, h.forge.Comment(1))
		}
	}
}

// TestPlansJudgeTheTrackedBranchAgainAfterTheRefresh: the tracked branch's judgement the plans keep
// at one commit is made again once SecretRefresh has passed (the secrets' existence checked again),
// not before.
func TestPlansJudgeTheTrackedBranchAgainAfterTheRefresh(t *testing.T) {
	for _, tc := range []struct {
		refresh time.Duration
		again   bool
	}{{time.Hour, false}, {time.Nanosecond, true}} {
		var logs bytes.Buffer
		log := slog.New(slog.NewJSONHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		h := newHarness(t, repoWith("a", "b"), func(c *reconcile.Config, p *Config) { c.Log, p.Log, p.SecretRefresh = log, log, tc.refresh })
		h.mustCycle()
		h.forge.Open(1, "head1", h.files(), map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  protect: true")}, true)
		h.mustCycle()
		if !strings.Contains(logs.String(), "tracked branch judged for the plans") {
			t.Fatalf("refresh %s: the first plan did not judge the tracked branch", tc.refresh)
		}
		logs.Reset()
		h.forge.Open(2, "head2", h.files(), map[string]string{fakes.StandFile("b"): fakes.StandYML("b", "  protect: true")}, true)
		h.mustCycle()
		if got := strings.Contains(logs.String(), "tracked branch judged for the plans"); got != tc.again {
			t.Errorf("refresh %s: a second plan at the same commit judged the tracked branch again: %t, want %t", tc.refresh, got, tc.again)
		}
		if !strings.Contains(h.forge.Comment(2), "local_b_dev") {
			t.Errorf("refresh %s: the second plan does not show its stand:\n%s", tc.refresh, h.forge.Comment(2))
		}
	}
}
