package manifest

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/fstest"
)

// TestBrokenStandFailsAlone: one broken stand does not stop the others from rendering, and its own
// result says what is wrong.
func TestBrokenStandFailsAlone(t *testing.T) {
	fsys := miniRepo(t)
	good := string(fsys["stands/a/stand.yml"].Data)
	fsys["stands/b/stand.yml"] = &fstest.MapFile{Data: []byte(strings.Replace(strings.Replace(good, "env: a", "env: b", 1), "profile: p", "profile: nope", 1))}
	results, err := preflightFS(t, fsys, testSecrets)
	var rep *Report
	if !errors.As(err, &rep) || len(rep.Diags) != 1 {
		t.Fatalf("want a report of one problem, got %v", err)
	}
	if len(results) != 2 {
		t.Fatalf("want 2 results, got %d", len(results))
	}
	a, b := results[0], results[1]
	if a.Err != nil || a.Rendered == nil {
		t.Errorf("stand a: err %v, rendered %v; want it rendered", a.Err, a.Rendered != nil)
	}
	if b.Err == nil || !b.Err.Has(RuleRefProfile) || b.Rendered != nil {
		t.Errorf("stand b: err %v, rendered %v; want a ref-profile error and nothing rendered", b.Err, b.Rendered != nil)
	}
}

// failingSource is a secret store that is down.
type failingSource struct{}

func (failingSource) Secret(context.Context, SecretRef) (string, error) {
	return "", errors.New("vault: connection refused")
}

// TestSecretSourceDown: an unavailable source is not a validation problem of the stand (the
// reconciler waits and retries instead of failing stands).
func TestSecretSourceDown(t *testing.T) {
	_, err := PreflightAll(context.Background(), miniRepo(t), []string{"stands/a/stand.yml"}, PreflightOptions{Secrets: failingSource{}})
	var rep *Report
	if err == nil || errors.As(err, &rep) {
		t.Fatalf("want a plain error, got %T %v", err, err)
	}
}

func TestParseSecretRef(t *testing.T) {
	cases := []struct {
		in      string
		want    SecretRef
		env     string
		wantErr bool
	}{
		{in: "registry-password", want: SecretRef{Path: "registry-password", Field: "value"}, env: "SECRET_REGISTRY_PASSWORD"},
		{in: "db/main#user", want: SecretRef{Path: "db/main", Field: "user"}, env: "SECRET_DB_MAIN__USER"},
		{in: "db/main.v2#value", want: SecretRef{Path: "db/main.v2", Field: "value"}, env: "SECRET_DB_MAIN_V2"},
		{in: "../escape", wantErr: true},
		{in: "a/../../b", wantErr: true},
		{in: "/abs", wantErr: true},
		{in: "a//b", wantErr: true},
		{in: "a#", wantErr: true},
		{in: "", wantErr: true},
		{in: "sp ace", wantErr: true},
	}
	for _, c := range cases {
		got, err := ParseSecretRef(c.in)
		if (err != nil) != c.wantErr {
			t.Errorf("%q: err %v, want error %v", c.in, err, c.wantErr)
			continue
		}
		if err == nil && (got != c.want || EnvName(got) != c.env) {
			t.Errorf("%q: got %+v (%s), want %+v (%s)", c.in, got, EnvName(got), c.want, c.env)
		}
	}
}

func TestRedactor(t *testing.T) {
	r := &redactor{}
	r.add(`pa"ss\word-long`)
	r.add("abc") // too short to redact without destroying messages
	for _, msg := range []string{
		`value pa"ss\word-long here`,
		`quoted "pa\"ss\\word-long"`,
		"yaml.v3 truncation `pa\"ss\\w...`",
		"yaml.v3 truncation pa\"ss\\w...",
	} {
		got := r.scrub(msg)
		if strings.Contains(got, `pa"ss`) || strings.Contains(got, `pa\"ss`) {
			t.Errorf("scrub(%q) = %q", msg, got)
		}
	}
	if got := r.scrub("abc at line 3"); got != "abc at line 3" {
		t.Errorf("short value redacted: %q", got)
	}
}
