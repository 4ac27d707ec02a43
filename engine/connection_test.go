package engine

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
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
