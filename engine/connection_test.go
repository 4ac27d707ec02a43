package engine

import (
	"encoding/json"
	"fmt"
	"maps"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testfs"
)

func TestConnectionRecordAndMask(t *testing.T) {
	r := &manifest.Rendered{Instances: []*manifest.RenderedInstance{
		{ConnectionName: "redis", Connection: json.RawMessage(`{"endpoint":"10.0.1.1","port":6379,"credentials":{"user":"admin","password":"pw","nested":{"token":"t"}},"url":"redis://admin:pw@10.0.1.1"}`)},
		{ConnectionName: "noconn"},
		{ConnectionName: "web", Connection: json.RawMessage(`{"endpoint":"203.0.113.5","api_key":"s3cr3t-value","tags":["a","s3cr3t-value"],"URL":"http://x","dsn":"redis://:s3cr3t-value@10.0.1.1/0","pin":123456789,"header":"Basic czNjcjN0LXZhbHVl"}`)},
	}}
	rec, err := ConnectionRecord("o_p_e", r)
	if err != nil {
		t.Fatal(err)
	}
	if string(rec) != `{"id_stand":"o_p_e","redis":{"endpoint":"10.0.1.1","port":6379,"credentials":{"user":"admin","password":"pw","nested":{"token":"t"}},"url":"redis://admin:pw@10.0.1.1"},"web":{"endpoint":"203.0.113.5","api_key":"s3cr3t-value","tags":["a","s3cr3t-value"],"URL":"http://x","dsn":"redis://:s3cr3t-value@10.0.1.1/0","pin":123456789,"header":"Basic czNjcjN0LXZhbHVl"}}` {
		t.Errorf("record %s", rec)
	}
	masked, err := MaskConnection(rec, []string{"s3cr3t-value", "123456789"})
	if err != nil {
		t.Fatal(err)
	}
	// Every value under credentials, every url (any case), any value holding a secret (a DSN, a
	// number, a base64 header); order kept.
	want := `{"id_stand":"o_p_e","redis":{"endpoint":"10.0.1.1","port":6379,"credentials":{"user":"***","password":"***","nested":{"token":"***"}},"url":"***"},"web":{"endpoint":"203.0.113.5","api_key":"***","tags":["a","***"],"URL":"***","dsn":"***","pin":"***","header":"***"}}`
	if string(masked) != want {
		t.Errorf("masked\n got: %s\nwant: %s", masked, want)
	}
}

// TestResultPrintsNoSecret: a result printed with any fmt verb, as a failing test or a careless log
// line would, does not show the connection record.
func TestResultPrintsNoSecret(t *testing.T) {
	r := &stands.Result{StandID: "s", Connection: stands.SecretJSON(`{"password":"pw-SENTINEL"}`)}
	for _, verb := range []string{"%v", "%+v", "%#v", "%s"} {
		if out := fmt.Sprintf(verb, r) + fmt.Sprintf(verb, *r) + fmt.Sprintf(verb, r.Connection); strings.Contains(out, "SENTINEL") {
			t.Errorf("%s shows the secret: %s", verb, out)
		}
	}
	if string(r.Connection) != `{"password":"pw-SENTINEL"}` {
		t.Error("the bytes themselves must stay usable")
	}
}

// TestStatusRecordIsNoFunctionOfASecret: connection templates that derive a record's values or keys
// from a secret in many ways. The record a status shows (PublicConnection, then MaskConnection) is
// byte-identical under two different values of the secret, while the real record differs (the
// control: the value reached the template); a key or a shape the secret decides fails validation,
// naming the template.
func TestStatusRecordIsNoFunctionOfASecret(t *testing.T) {
	base, err := testfs.Dir("../examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	const standFile, tmpl = "stands/single/stand.yml", "apps/kv/connection.json.tmpl"
	values := []map[string]string{
		{"SECRET_KV_PASSWORD": "kv-first-value-1234", "SECRET_REGISTRY_PASSWORD": "registry-pw-1"},
		{"SECRET_KV_PASSWORD": "Zq-the-second-one-with-more", "SECRET_REGISTRY_PASSWORD": "registry-pw-2"},
	}
	const pw = ".preferences.password"
	cases := []struct {
		name, template string
		shape          bool // validation refuses it: a secret decides the record's shape
	}{
		{name: "as it is", template: `{"v": {{ json ` + pw + ` }}}`},
		{name: "base64", template: `{"v": {{ b64enc ` + pw + ` | json }}}`},
		{name: "hex", template: `{"v": {{ printf "%x" ` + pw + ` | json }}}`},
		{name: "a fragment", template: `{"v": {{ slice ` + pw + ` 0 3 | json }}}`},
		{name: "its length", template: `{"v": {{ len ` + pw + ` }}}`},
		{name: "a character's code", template: `{"v": {{ index ` + pw + ` 0 }}}`},
		{name: "quoted in a DSN", template: `{"dsn": {{ printf "redis://:%s@h/0" ` + pw + ` | urlquery | json }}}`},
		{name: "a branch on a character", template: `{"v": {{ if eq (slice ` + pw + ` 0 1) "k" }}"k"{{ else }}"other"{{ end }}}`},
		{name: "a key on a branch", template: `{ {{ if eq (slice ` + pw + ` 0 1) "k" }}"k"{{ else }}"o"{{ end }}: 1}`},
		{name: "a branch on the length", template: `{"v": {{ if gt (len ` + pw + `) 20 }}"long"{{ else }}"short"{{ end }}}`},
		{name: "a key from it", template: `{ {{ json ` + pw + ` }}: 1}`, shape: true},
		{name: "a key from a fragment", template: `{ {{ slice ` + pw + ` 0 2 | json }}: 1}`, shape: true},
		{name: "items by its length", template: `{"v": [{{ if gt (len ` + pw + `) 26 }}1, {{ end }}2]}`, shape: true},
	}
	addr := manifest.PreflightAddresses
	var matchingLeaks []string // the assertion's control: the masking by value alone, as before
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			files := maps.Clone(base)
			files[tmpl] = &fstest.MapFile{Data: []byte(tc.template + "\n")}
			var shown, real, matched [2]string
			for i, v := range values {
				res, err := manifest.PreflightAll(t.Context(), files, []string{standFile}, manifest.PreflightOptions{
					LoadOptions: manifest.LoadOptions{DefaultOwner: "team"}, Secrets: manifest.EnvSource{Lookup: func(k string) (string, bool) { s, ok := v[k]; return s, ok }}})
				if err != nil && !tc.shape {
					t.Fatalf("validate: %v", err)
				}
				if tc.shape {
					if err == nil || !strings.Contains(err.Error(), tmpl) || !strings.Contains(err.Error(), "depends on a secret's value") {
						t.Fatalf("validation of a record a secret shapes: %v", err)
					}
					if strings.Contains(err.Error(), v["SECRET_KV_PASSWORD"][:2]+`"`) {
						t.Errorf("the error quotes the secret: %v", err)
					}
				}
				st := res[0].Stand
				r, err := manifest.Render(files, st, res[0].Secrets, addr(st))
				if err != nil {
					t.Fatal(err)
				}
				rec, err := ConnectionRecord(st.ID, r)
				if err != nil {
					t.Fatal(err)
				}
				real[i] = string(rec)
				byValue, err := MaskConnection(rec, res[0].Secrets.Values())
				if err != nil {
					t.Fatal(err)
				}
				matched[i] = string(byValue)
				pub, err := PublicConnection(files, st, addr(st))
				if err != nil {
					t.Fatal(err)
				}
				masked, err := MaskConnection(pub, res[0].Secrets.Values())
				if err != nil {
					t.Fatal(err)
				}
				shown[i] = string(masked)
			}
			if real[0] == real[1] {
				t.Fatalf("control: the real record does not depend on the secret: %s", real[0])
			}
			if shown[0] != shown[1] {
				t.Errorf("the status record depends on the secret:\n%s\n%s", shown[0], shown[1])
			}
			for _, v := range values {
				if strings.Contains(shown[0], v["SECRET_KV_PASSWORD"]) {
					t.Errorf("the status record shows the secret: %s", shown[0])
				}
			}
			if matched[0] != matched[1] {
				matchingLeaks = append(matchingLeaks, tc.name)
			}
			t.Logf("real %s → shown %s", real[0], shown[0])
		})
	}
	if len(matchingLeaks) < 6 {
		t.Errorf("control: masking by value lets only %v through; the cases do not test what they name", matchingLeaks)
	}
	t.Logf("masking by value alone would let through: %v", matchingLeaks)
}
