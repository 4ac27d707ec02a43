package compat

import (
	"maps"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

func TestReadEnvFile(t *testing.T) {
	p := testenv.WriteFile(t, t.TempDir(), "ok.env", `# the Stands Engine's guide (docs/stands-engine.md#configuration)
HCLOUD__TOKEN=tok-1
export STAND__USER = alice
hcloud__token=tok-2
SECRET_KV_PASSWORD='literal \n # not a comment'
SECRET_REG="line1\nline2 \"q\" # kept" # a comment
BARE=value # a comment
EMPTY=

`)
	got, err := readEnvFile(p)
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{
		"HCLOUD__TOKEN":      "tok-2", // names case-insensitive: the later line wins
		"STAND__USER":        "alice",
		"SECRET_KV_PASSWORD": `literal \n # not a comment`,
		"SECRET_REG":         "line1\nline2 \"q\" # kept",
		"BARE":               "value",
		"EMPTY":              "",
	}
	if !maps.Equal(got, want) {
		t.Errorf("got  %q\nwant %q", got, want)
	}
}

func TestReadEnvFileErrors(t *testing.T) {
	dir := t.TempDir()
	for _, c := range []struct{ name, content, want string }{
		{"no-equals", "HCLOUD__TOKEN\n", "no-equals.env:1: want KEY=VALUE"},
		{"bad-key", "\n\nBAD-KEY=s3cr3t-value\n", "bad-key.env:3: want KEY=VALUE"},
		{"open-single", "A=1\nSECRET_X='s3cr3t-value\n", "open-single.env:2: SECRET_X: a single-quoted value must end with its quote"},
		{"open-double", "SECRET_X=\"s3cr3t-value\n", "open-double.env:1: SECRET_X: a double-quoted value must end with its quote"},
		{"after-quote", "SECRET_X=\"a\"s3cr3t-value\n", "after-quote.env:1: SECRET_X: text after the closing quote"},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := readEnvFile(testenv.WriteFile(t, dir, c.name+".env", c.content))
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Fatalf("err = %v, want %q", err, c.want)
			}
			if strings.Contains(err.Error(), "s3cr3t") {
				t.Errorf("the error shows the value: %v", err)
			}
		})
	}
	if _, err := readEnvFile(filepath.Join(dir, "missing.env")); err == nil || !strings.Contains(err.Error(), "--env-file") {
		t.Errorf("a missing file: %v", err)
	}
}

// The order of the layers: the process's environment over the files, a later file over an earlier
// one, a variable of ours over the Stands Engine's, and ours given as a file (KEY_FILE) keeping the Stands Engine's
// away (credential.Read would refuse both).
func TestStandsEngineEnvLayers(t *testing.T) {
	dir := t.TempDir()
	common := testenv.WriteFile(t, dir, "common.env", "HCLOUD__TOKEN=from-common\nSTAND__USER=alice\nSTAND__PASSPHRASE=pass-common\nSECRET_A=a-common\n")
	stand := testenv.WriteFile(t, dir, "stand.env", "hcloud__token=from-stand\nSECRET_A=a-stand\nSTAND__PATH_TO_CONFIGSET=/tmp/cs\n")
	process := map[string]string{"STANDS_PASSPHRASE_FILE": "/run/credentials/passphrase", "Stand__User": "ignored: folded by ProcessEnv only"}
	e, err := New(func(k string) string { return process[k] }, []string{common, stand})
	if err != nil {
		t.Fatal(err)
	}
	for k, want := range map[string]string{
		"HCLOUD_TOKEN":         "from-stand", // the Stands Engine's, from the later file
		"HCLOUD__TOKEN":        "from-stand",
		"SECRET_A":             "a-stand",
		"STANDS_OWNER":         "alice",
		"STANDS_PASSPHRASE":    "", // the process gives it as a file
		"STANDS_CONFIGSET_DIR": "/tmp/cs",
		"STANDS_BACKEND_URL":   "", // no S3__BUCKET: the default backend
	} {
		if got := e.Get(k); got != want {
			t.Errorf("%s = %q, want %q", k, got, want)
		}
	}
	process["HCLOUD_TOKEN"] = "ours-from-the-process"
	process["SECRET_A"] = "a-process"
	if got := e.Get("HCLOUD_TOKEN"); got != "ours-from-the-process" {
		t.Errorf("HCLOUD_TOKEN = %q: ours in the process loses", got)
	}
	if got := e.Get("SECRET_A"); got != "a-process" {
		t.Errorf("SECRET_A = %q: the process loses to a file", got)
	}
	folded := ProcessEnv([]string{"hcloud__Token=any-case", "PATH=/bin"}, func(string) string { return "" })
	if got := folded("HCLOUD__TOKEN"); got != "any-case" {
		t.Errorf("a Stands Engine variable in another case: %q", got)
	}
	if got := folded("path"); got != "" {
		t.Errorf("ours are not folded: %q", got)
	}
}

func TestStandsEngineBackendAndOutput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name    string
		vars    map[string]string
		backend string
		output  string
		err     string
	}{
		{name: "none", vars: map[string]string{}},
		{name: "s3, endpoint without scheme", vars: map[string]string{"S3__BUCKET": "state", "STAND__USER": "alice", "S3__REGION": "eu-1", "S3__ENDPOINT": "s3.example.test:9000"},
			backend: "s3://state/alice?endpoint=https%3A%2F%2Fs3.example.test%3A9000&region=eu-1&s3ForcePathStyle=true"},
		{name: "s3, endpoint with scheme", vars: map[string]string{"S3__BUCKET": "state", "STANDS_OWNER": "bob", "S3__ENDPOINT": "http://127.0.0.1:9000"},
			backend: "s3://state/bob?endpoint=http%3A%2F%2F127.0.0.1%3A9000&s3ForcePathStyle=true"},
		{name: "s3 without user", vars: map[string]string{"S3__BUCKET": "state"}, err: "$S3__BUCKET is set without $STAND__USER"},
		{name: "region without bucket", vars: map[string]string{"S3__REGION": "eu-1"}, err: "$S3__REGION is set without $S3__BUCKET"},
		{name: "file output", vars: map[string]string{"OUTPUT__FILE": "true", "OUTPUT__FILE_PATH": "/tmp/out"}, output: "/tmp/out"},
		{name: "file output off", vars: map[string]string{"OUTPUT__FILE": "false", "OUTPUT__FILE_PATH": "/tmp/out"}},
		{name: "file output without path", vars: map[string]string{"OUTPUT__FILE": "true"}, err: "$OUTPUT__FILE is true without $OUTPUT__FILE_PATH"},
		{name: "file output to a file", vars: map[string]string{"OUTPUT__FILE": "True", "OUTPUT__FILE_PATH": file}, err: "is not a folder"},
		{name: "file output, yes", vars: map[string]string{"OUTPUT__FILE": "YES", "OUTPUT__FILE_PATH": "/tmp/out"}, output: "/tmp/out"},
		{name: "not a bool", vars: map[string]string{"OUTPUT__CONSOLE": "yes please"}, err: "$OUTPUT__CONSOLE: want true or false"},
	} {
		t.Run(c.name, func(t *testing.T) {
			e, _ := New(func(k string) string { return c.vars[k] }, nil)
			err := e.Check()
			if c.err != "" {
				if err == nil || !strings.Contains(err.Error(), c.err) {
					t.Fatalf("err = %v, want %q", err, c.err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if got := e.Get(BackendVariable); got != c.backend {
				t.Errorf("backend = %q, want %q", got, c.backend)
			}
			if got := e.Get(OutputDirVariable); got != c.output {
				t.Errorf("output dir = %q, want %q", got, c.output)
			}
		})
	}
}

// The Stands Engine's switches reach our flags as Go's flag package reads them.
func TestStandsEngineBools(t *testing.T) {
	for v, want := range map[string]string{"on": "true", "Yes": "true", "1": "true", "OFF": "false", "n": "false", "False": "false"} {
		e, _ := New(func(k string) string { return map[string]string{"OUTPUT__CONSOLE": v}[k] }, nil)
		if err := e.Check(); err != nil {
			t.Errorf("%q: %v", v, err)
		}
		if got := e.Get("OUTPUT__CONSOLE"); got != want {
			t.Errorf("OUTPUT__CONSOLE=%s reads %q, want %q", v, got, want)
		}
	}
}

// The S3 backend's credentials reach the process environment, where the Pulumi CLI and the backend's
// reader take them; what the process already has is kept.
func TestExportStandsEngineEnv(t *testing.T) {
	f := testenv.WriteFile(t, t.TempDir(), "s3.env", "S3__ACCESS_KEY=ak-file\nS3__SECRET_KEY=sk-file\nPULUMI_SKIP_UPDATE_CHECK=true\nSECRET_X=not-exported\n")
	process := map[string]string{"AWS_ACCESS_KEY_ID": "ak-process"}
	e, err := New(func(k string) string { return process[k] }, []string{f})
	if err != nil {
		t.Fatal(err)
	}
	set := map[string]string{}
	if err := Export(e, func(k, v string) error { set[k] = v; return nil }); err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"AWS_SECRET_ACCESS_KEY": "sk-file", "PULUMI_SKIP_UPDATE_CHECK": "true"}
	if len(set) != len(want) || set["AWS_SECRET_ACCESS_KEY"] != want["AWS_SECRET_ACCESS_KEY"] || set["PULUMI_SKIP_UPDATE_CHECK"] != "true" {
		t.Errorf("exported %v, want %v", set, want)
	}
}
