package manifest

import (
	"context"
	"encoding/hex"
	"errors"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stands-engine/stands-reconciler/test/testfs"
)

// TestMessagesNeverQuoteOutputThatSawASecret: a diagnostic about rendered output names the place
// and the rule; the value is shown only when the render saw no secret's real value (a plan's
// placeholders). Each case's template writes the secret as hex, which no redactor can know.
func TestMessagesNeverQuoteOutputThatSawASecret(t *testing.T) {
	const secret = "kv-s3cret-value"
	hexed := hex.EncodeToString([]byte(secret))
	kvApp := func(dest, pod string) map[string]string {
		return map[string]string{"apps/kv/app.yml": `images: ["{{ .preferences.image }}"]
roles:
  server:
    zone: internal
    ports: ["{{ .preferences.port }}/tcp"]
files:
  - src: redis.conf.tmpl
    dest: '` + dest + `'
  - src: redis.conf.tmpl
    dest: '/x/{{ printf "%x" .preferences.password }}'
pod: ` + pod + `
`, "apps/kv/bad-pod.yaml.tmpl": "apiVersion: v1\nkind: Pod\nmetadata: {name: '{{ printf \"%x\" .preferences.password }}'\n"}
	}
	cases := []struct {
		name, rule string
		change     map[string]string
	}{
		{"a destination that is not clean", RuleUploadDest, kvApp(`/x/{{ printf "%x" .preferences.password }}/`, "pod.yaml.tmpl")},
		{"a destination used twice", RuleUploadDest, kvApp(`/x/{{ printf "%x" .preferences.password }}`, "pod.yaml.tmpl")},
		{"Pod YAML that does not parse", RulePodYAML, kvApp("/x/redis.conf", "bad-pod.yaml.tmpl")},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			base, err := testfs.Dir("../examples/stands-repo")
			if err != nil {
				t.Fatal(err)
			}
			for p, c := range tc.change {
				base[p] = &fstest.MapFile{Data: []byte(c)}
			}
			file := "stands/single/stand.yml"
			for _, src := range []struct {
				name  string
				src   SecretSource
				shows bool
			}{{"real secrets", mapSource(map[string]string{"SECRET_KV_PASSWORD": secret, "SECRET_REGISTRY_PASSWORD": "registry-pw"}), false},
				{"placeholders", PlaceholderSource{}, true}} {
				res, err := Preflight(context.Background(), base, file, PreflightOptions{LoadOptions: LoadOptions{DefaultOwner: "local"}, Secrets: src.src})
				if err == nil || res.Err == nil || !res.Err.Has(tc.rule) {
					t.Fatalf("%s: want a %s problem, got %v", src.name, tc.rule, err)
				}
				text := res.Err.Error()
				if strings.Contains(text, hexed) {
					t.Errorf("%s: the report quotes the secret's hex:\n%s", src.name, text)
				}
				if hidden := strings.Contains(text, "not shown"); hidden == src.shows {
					t.Errorf("%s: the report hides what was rendered: %v, want %v:\n%s", src.name, hidden, !src.shows, text)
				}
			}
		})
	}
}

// TestShortSecrets: a secret shorter than MinSecretLength fails its stand by name (never by value);
// !secret-plain takes a short value that is no secret, which messages may show.
func TestShortSecrets(t *testing.T) {
	base, err := testfs.Dir("../examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	file := "stands/single/stand.yml"
	src := mapSource(map[string]string{"SECRET_KV_PASSWORD": "pw9", "SECRET_REGISTRY_PASSWORD": "registry-pw"})
	_, err = Preflight(context.Background(), base, file, PreflightOptions{LoadOptions: LoadOptions{DefaultOwner: "local"}, Secrets: src})
	if err == nil || !strings.Contains(err.Error(), "secret kv-password (apps.kv.instances.cache.preferences.password) is shorter than 6") || strings.Contains(err.Error(), "pw9") {
		t.Errorf("short secret: %v", err)
	}
	for _, p := range []string{"bases/common.yml", file} {
		data, _ := base.ReadFile(p)
		base[p] = &fstest.MapFile{Data: []byte(strings.ReplaceAll(string(data), "!secret kv-password", "!secret-plain kv-password"))}
	}
	res, err := Preflight(context.Background(), base, file, PreflightOptions{LoadOptions: LoadOptions{DefaultOwner: "local"}, Secrets: src})
	if err != nil {
		t.Fatalf("!secret-plain: %v", err)
	}
	if v, _ := res.Secrets.Value(SecretRef{Path: "kv-password", Field: "value", Plain: true}); v != "pw9" || res.Secrets.Scrub("user pw9") != "user pw9" {
		t.Errorf("!secret-plain value %q, scrubbed %q", v, res.Secrets.Scrub("user pw9"))
	}
}

// TestNoDoubleDashInAppOrInstanceNames: <app>--<instance> must name one instance only, so neither
// part may hold "--" (app a--b's instance c and app a's instance b--c would share a unit).
func TestNoDoubleDashInAppOrInstanceNames(t *testing.T) {
	base, err := testfs.Dir("../examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	file := "stands/single/stand.yml"
	data, _ := base.ReadFile(file)
	base[file] = &fstest.MapFile{Data: []byte(strings.Replace(string(data), "      cache:", "      b--c:", 1))}
	_, err = Preflight(context.Background(), base, file, PreflightOptions{LoadOptions: LoadOptions{DefaultOwner: "local"},
		Secrets: mapSource(map[string]string{"SECRET_KV_PASSWORD": "kv-password", "SECRET_REGISTRY_PASSWORD": "registry-pw"})})
	var rep *Report
	if !errors.As(err, &rep) || !rep.Has(RuleIDPart) || !strings.Contains(err.Error(), `instance name "b--c" must not hold "--"`) {
		t.Errorf("want an id-part problem for b--c, got %v", err)
	}
}

// TestATabSaysTab: YAML forbids tabs in indentation and yaml.v3 says so in words a user does not
// connect to a tab ("found character that cannot start any token"), or a line early. The diagnostic
// names the tab and points at it; a tab elsewhere is no error, and other syntax errors say nothing of
// tabs.
func TestATabSaysTab(t *testing.T) {
	for _, c := range []struct {
		name, doc string
		line, col int // 0: no error
		tab       bool
	}{
		{"a key indented by a tab", "a:\n\tb: 1\n", 2, 1, true},
		{"a tab after spaces", "a:\n  b: 1\n  \tc: 2\n", 3, 3, true},
		{"a tab in a value", "a: \"x\ty\"\nb: 1\t# comment\n", 0, 0, false},
		{"a list not closed", "a: [1, 2\nb: 3\n", 2, 1, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, diags := parseYAML("s.yml", []byte(c.doc), false)
			if c.line == 0 {
				if len(diags) != 0 {
					t.Fatalf("diagnostics for a valid document: %v", diags)
				}
				return
			}
			if len(diags) != 1 {
				t.Fatalf("want one diagnostic, got %v", diags)
			}
			d := diags[0]
			if d.Pos.Line != c.line || c.tab && d.Pos.Col != c.col {
				t.Errorf("at %d:%d, want %d:%d (%s)", d.Pos.Line, d.Pos.Col, c.line, c.col, d.Msg)
			}
			if got := strings.Contains(d.Msg, "tab"); got != c.tab {
				t.Errorf("message %q: says tab %v, want %v", d.Msg, got, c.tab)
			}
		})
	}
}
