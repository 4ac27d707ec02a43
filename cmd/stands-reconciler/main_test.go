package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/engine/configset"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/testfs"
)

// exampleEnv resolves the example repository's secrets.
var exampleEnv = map[string]string{
	"SECRET_REGISTRY_PASSWORD": "example-registry-password",
	"SECRET_KV_PASSWORD":       "example-kv-password",
	// the mini repository's
	"SECRET_REG_PASS": "registry-pass-value",
	"SECRET_KV_PASS":  "kv-pass-value",
}

type result struct {
	code           int
	stdout, stderr string
}

// recorder is an environment that remembers which variables were read.
type recorder struct {
	mu   sync.Mutex
	vars map[string]string
	read map[string]bool
}

func newRecorder(vars map[string]string) *recorder {
	return &recorder{vars: vars, read: map[string]bool{}}
}

func (r *recorder) getenv(k string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.read[k] = true
	return r.vars[k]
}

func runCLI(t *testing.T, ctx context.Context, env *recorder, args ...string) result {
	t.Helper()
	var out, errb bytes.Buffer
	if env == nil {
		env = newRecorder(exampleEnv)
	}
	code := run(ctx, args, &out, &errb, env.getenv)
	return result{code, out.String(), errb.String()}
}

// repoFromArchive writes the mini repository with an archive applied to a temporary folder.
func repoFromArchive(t *testing.T, archive string) string {
	t.Helper()
	base, err := testfs.Dir("../../manifest/testdata/minirepo")
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := testfs.Overlay(base, testfs.Parse(archive))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := testfs.WriteDir(dir, fsys); err != nil {
		t.Fatal(err)
	}
	return dir
}

func TestCommandLine(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name       string
		args       []string
		code       int
		stdoutHas  string
		stderrHas  string
		stdoutNone bool
	}{
		{name: "version", args: []string{"--version"}, code: 0, stdoutHas: "stands-reconciler "},
		{name: "help", args: []string{"--help"}, code: 0, stdoutHas: "Commands:"},
		{name: "validate help", args: []string{"validate", "--help"}, code: 0, stdoutHas: "-owner"},
		{name: "no command", args: nil, code: 2, stderrHas: "Usage:", stdoutNone: true},
		{name: "unknown command", args: []string{"deploy"}, code: 2, stderrHas: `unknown command "deploy"`, stdoutNone: true},
		{name: "unknown flag", args: []string{"--nope"}, code: 2, stderrHas: "flag provided but not defined", stdoutNone: true},
		{name: "validate unknown flag", args: []string{"validate", "--nope", "x"}, code: 2, stdoutNone: true},
		{name: "validate without path", args: []string{"validate"}, code: 2, stderrHas: "at least one PATH", stdoutNone: true},
		{name: "validate missing path", args: []string{"validate", "does/not/exist"}, code: 1, stderrHas: "does/not/exist", stdoutNone: true},
		{name: "validate repository", args: []string{"validate", "../../examples/stands-repo"}, code: 0},
		{name: "validate one stand.yml", args: []string{"validate", "../../examples/stands-repo/stands/two-node/stand.yml"}, code: 0},
		{name: "validate a stand folder", args: []string{"validate", "../../examples/stands-repo/stands/staging"}, code: 0},
		{name: "validate several paths", args: []string{"validate", "../../examples/stands-repo/stands/single", "../../examples/stands-repo/stands/staging/stand.yml"}, code: 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, ctx, nil, c.args...)
			if r.code != c.code {
				t.Fatalf("exit %d, want %d\nstdout: %s\nstderr: %s", r.code, c.code, r.stdout, r.stderr)
			}
			if !strings.Contains(r.stdout, c.stdoutHas) {
				t.Errorf("stdout lacks %q:\n%s", c.stdoutHas, r.stdout)
			}
			if !strings.Contains(r.stderr, c.stderrHas) {
				t.Errorf("stderr lacks %q:\n%s", c.stderrHas, r.stderr)
			}
			if c.stdoutNone && r.stdout != "" {
				t.Errorf("stdout must stay empty on failure, got %q", r.stdout)
			}
			if c.code == 0 && len(c.args) > 0 && c.args[0] == "validate" && !strings.HasPrefix(c.args[1], "-") {
				if r.stdout != `{"operation":"validate","status":"success"}`+"\n" {
					t.Errorf("stdout = %q, want the one success record", r.stdout)
				}
				if r.stderr != "" {
					t.Errorf("stderr on success: %q", r.stderr)
				}
			}
		})
	}
}

// TestValidateReportsEveryMistake: several independent mistakes in several files come out in one
// report, each with file:line, exit 1 and nothing on stdout.
func TestValidateReportsEveryMistake(t *testing.T) {
	data, err := os.ReadFile("testdata/multi.txtar")
	if err != nil {
		t.Fatal(err)
	}
	dir := repoFromArchive(t, string(data))
	r := runCLI(t, context.Background(), nil, "validate", dir)
	if r.code != 1 {
		t.Fatalf("exit %d, want 1\n%s", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q, want nothing", r.stdout)
	}
	want := strings.Split(strings.TrimSpace(testfs.Parse(string(data))["want"]), "\n")
	lines := strings.Split(strings.TrimSpace(r.stderr), "\n")
	for _, w := range want {
		loc, rule, _ := strings.Cut(w, " ")
		prefix := filepath.Join(dir, filepath.FromSlash(loc)) + ":"
		found := false
		for _, l := range lines {
			if strings.HasPrefix(l, prefix) && strings.HasSuffix(l, "["+rule+"]") {
				found = true
			}
		}
		if !found {
			t.Errorf("no %s [%s] in the report:\n%s", loc, rule, r.stderr)
		}
	}
	if got, wantN := len(lines), len(want)+1; got != wantN {
		t.Errorf("report has %d lines, want %d (one per mistake and a summary):\n%s", got, wantN, r.stderr)
	}
	if !strings.Contains(lines[len(lines)-1], "problem(s) in 3 stand(s)") {
		t.Errorf("summary line = %q", lines[len(lines)-1])
	}
}

// TestSecretNeverPrinted puts a sentinel secret where naive error messages would echo it: in values
// that fail to render or fail the checks of rendered output. The report names the problem, never the
// value; the control case proves the value was read and reaches the rendered files.
func TestSecretNeverPrinted(t *testing.T) {
	const sentinel = `s3nt1nel-Q7wz"{[:`
	app := "apps/kv/app.yml"
	appYML, err := os.ReadFile("../../manifest/testdata/minirepo/" + app)
	if err != nil {
		t.Fatal(err)
	}
	withApp := func(old, new string) string {
		if !strings.Contains(string(appYML), old) {
			t.Fatalf("app.yml has no %q", old)
		}
		return "-- " + app + " --\n" + strings.Replace(string(appYML), old, new, 1)
	}
	cases := []struct {
		name    string
		archive string
		rule    string
	}{
		{"upload destination that echoes itself", withApp(`dest: "/home/{{ .user_app }}/{{ .instance }}/kv.conf"`, `dest: "/home/../{{ .preferences.password }}"`), "upload-dest"},
		{"role port", withApp(`ports: ["{{ .preferences.port }}"]`, `ports: ["{{ .preferences.password }}"]`), "port"},
		{"image reference", withApp(`"registry.test/kv:{{ .preferences.port }}"`, `"registry.test/kv:{{ .preferences.password }}"`), "image"},
		{"hostPort in Pod YAML", "-- apps/kv/pod.yaml.tmpl --\napiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec:\n  containers:\n    - {name: kv, image: i, ports: [{hostPort: {{ json .preferences.password }}}]}\n", "pod-yaml"},
		{"Pod YAML broken by the value", "-- apps/kv/pod.yaml.tmpl --\napiVersion: v1\nkind: Pod\nmetadata: {name: {{ .preferences.password }}}\n", "pod-yaml"},
		{"connection JSON broken by the value", "-- apps/kv/connection.json.tmpl --\n{\"password\": \"{{ .preferences.password }}\"}\n", "connection"},
		{"template function given the value", "-- apps/kv/kv.conf.tmpl --\n{{ index .preferences.password 99 }}\n", "render"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := repoFromArchive(t, c.archive)
			env := newRecorder(map[string]string{"SECRET_REG_PASS": "registry-pass-value", "SECRET_KV_PASS": sentinel})
			r := runCLI(t, context.Background(), env, "validate", dir)
			if r.code != 1 || !strings.Contains(r.stderr, "["+c.rule+"]") {
				t.Fatalf("exit %d, want 1 with a [%s] diagnostic:\n%s", r.code, c.rule, r.stderr)
			}
			if !env.read["SECRET_KV_PASS"] {
				t.Fatal("the secret was never read")
			}
			for _, leak := range []string{sentinel, sentinel[:7]} {
				if strings.Contains(r.stdout+r.stderr, leak) {
					t.Errorf("output shows the secret (%q):\n%s", leak, r.stderr)
				}
			}
		})
	}
	t.Run("control: the value reaches the rendered files", func(t *testing.T) {
		dir := repoFromArchive(t, "")
		out := t.TempDir()
		env := newRecorder(map[string]string{"SECRET_REG_PASS": "registry-pass-value", "SECRET_KV_PASS": sentinel})
		r := runCLI(t, context.Background(), env, "render", "--out", out, dir)
		if r.code != 0 {
			t.Fatalf("render: exit %d\n%s", r.code, r.stderr)
		}
		conf, err := os.ReadFile(filepath.Join(out, "t_mini_a", "kv--one", "files", "home", "app", "one", "kv.conf"))
		if err != nil || !strings.Contains(string(conf), "pass "+sentinel+"\n") {
			t.Fatalf("rendered kv.conf does not carry the secret: %v\n%s", err, conf)
		}
		if strings.Contains(r.stdout+r.stderr, sentinel) {
			t.Errorf("render printed the secret")
		}
	})
}

func TestRenderExamples(t *testing.T) {
	out := t.TempDir()
	r := runCLI(t, context.Background(), nil, "render", "--out", out, "../../examples/stands-repo")
	if r.code != 0 {
		t.Fatalf("exit %d\n%s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 3 {
		t.Fatalf("want 3 records, got:\n%s", r.stdout)
	}
	for _, l := range lines {
		var rec struct{ Operation, Status, IDStand, Path string }
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		var full map[string]string
		_ = json.Unmarshal([]byte(l), &full)
		if full["operation"] != "render" || full["status"] != "success" || full["id_stand"] == "" {
			t.Errorf("record %s", l)
		}
		if _, err := os.Stat(filepath.Join(full["path"], "nodes")); err != nil {
			t.Errorf("%s: %v", full["id_stand"], err)
		}
	}
}

func TestInterrupted(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	r := runCLI(t, ctx, nil, "validate", "../../examples/stands-repo")
	if r.code != 130 {
		t.Fatalf("exit %d, want 130\n%s", r.code, r.stderr)
	}
	if r.stdout != "" {
		t.Errorf("stdout = %q", r.stdout)
	}
}

// TestValidateWarnsOldForm: a stand with users and ssh at the top level (the old form) validates, and
// stderr says where and what to move; stdout is the success record alone.
func TestValidateWarnsOldForm(t *testing.T) {
	seed, err := os.ReadFile("../../manifest/testdata/minirepo/stands/a/stand.yml")
	if err != nil {
		t.Fatal(err)
	}
	old := strings.Replace(string(seed), "  users:\n    sudo: admin\n    app: app\n  ssh:\n    key_name_admin: k\n",
		"users:\n  sudo: admin\n  app: app\nssh:\n  key_name_admin: k\n", 1)
	if old == string(seed) {
		t.Fatal("the mini repository's stand is not in the Stands Engine's form")
	}
	dir := repoFromArchive(t, "-- stands/a/stand.yml --\n"+old)
	r := runCLI(t, context.Background(), newRecorder(map[string]string{"SECRET_KV_PASS": "kv-value", "SECRET_REG_PASS": "reg-value"}), "validate", dir)
	if r.code != 0 || r.stdout != `{"operation":"validate","status":"success"}`+"\n" {
		t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	for _, want := range []string{"stand.yml:5:1: warning: top-level users is the old form", "stand.yml:8:1: warning: top-level ssh", "[deprecated]"} {
		if !strings.Contains(r.stderr, want) {
			t.Errorf("stderr lacks %q:\n%s", want, r.stderr)
		}
	}
}

// TestFlagsAndHelp: help goes to stdout alone; flags after the paths work; "--" ends the flags; a bad
// flag is a usage error (2) on stderr.
func TestFlagsAndHelp(t *testing.T) {
	for _, cmd := range []string{"validate", "render", "apply", "run"} {
		r := runCLI(t, context.Background(), nil, cmd, "--help")
		if r.code != 0 || !strings.Contains(r.stdout, "Usage: stands-reconciler "+cmd) || r.stderr != "" {
			t.Errorf("%s --help: exit %d\nstdout %q\nstderr %q", cmd, r.code, r.stdout, r.stderr)
		}
	}
	out := t.TempDir()
	r := runCLI(t, context.Background(), nil, "render", "../../examples/stands-repo", "--out", out, "--owner", "local")
	if r.code != 0 || strings.Count(r.stdout, `"operation":"render"`) != 3 || !strings.Contains(r.stdout, out) {
		t.Errorf("render with flags after the path: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, "validate", "--", "--out")
	if r.code != exitError || !strings.Contains(r.stderr, "--out") {
		t.Errorf("validate -- --out: a path named --out, exit %d\n%s", r.code, r.stderr)
	}
	r = runCLI(t, context.Background(), nil, "validate", "../../examples/stands-repo", "--no-such-flag")
	if r.code != exitUsage || r.stdout != "" || !strings.Contains(r.stderr, "flag provided but not defined") || !strings.Contains(r.stderr, "Usage:") {
		t.Errorf("a bad flag after the path: exit %d\nstdout %q\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// TestRenderContract: a render that fails prints no success record, even for the stands it wrote
// before the failure; an interrupted one exits 130 with nothing on stdout.
func TestRenderContract(t *testing.T) {
	out := t.TempDir()
	// The first stand is written, then the second fails (a full disk, say).
	written := 0
	writeConfigset = func(root string, r *manifest.Rendered) (string, error) {
		if written++; written == 2 {
			return "", errors.New("no space left on device")
		}
		return configset.Write(root, r)
	}
	defer func() { writeConfigset = configset.Write }()
	r := runCLI(t, context.Background(), nil, "render", "--out", out, "../../examples/stands-repo")
	if _, err := os.Stat(filepath.Join(out, "local_demo_single")); r.code != exitError || r.stdout != "" || err != nil {
		t.Errorf("a render failing on its second stand: exit %d, first stand written: %v\nstdout %q\nstderr %s", r.code, err, r.stdout, r.stderr)
	}
	writeConfigset = configset.Write
	// Ctrl-C after the checks, while stands are written.
	ctx, cancel := context.WithCancel(context.Background())
	writeConfigset = func(root string, r *manifest.Rendered) (string, error) {
		cancel()
		return configset.Write(root, r)
	}
	r = runCLI(t, ctx, nil, "render", "--out", t.TempDir(), "../../examples/stands-repo")
	if r.code != exitInterrupted || r.stdout != "" {
		t.Errorf("interrupted render: exit %d\nstdout %q\nstderr %s", r.code, r.stdout, r.stderr)
	}
}

// TestRepoURLWithPasswordRefused: no secret is taken from a command line, which every user of the
// machine can read; the refusal does not repeat it.
func TestRepoURLWithPasswordRefused(t *testing.T) {
	vars := map[string]string{"STANDS_PASSPHRASE": "pass-phrase", "HCLOUD_TOKEN": "hc-token", "STANDS_STATE_DIR": t.TempDir()}
	r := runCLI(t, context.Background(), newRecorder(vars), "reconcile", "--once", "--pulumi", filepath.Join(testenv.RepoRoot(), "bin", "pulumi"),
		"--repo", "https://bot:pw-SENTINEL@127.0.0.1:1/stands.git")
	if r.code != 1 || !strings.Contains(r.stderr, "--repo (from --repo): holds a password") || strings.Contains(r.stderr+r.stdout, "SENTINEL") {
		t.Errorf("exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// TestEnvironmentLayer: a flag wins over its variable, which wins over the default; --help shows
// the static defaults, never a value of the environment; a variable that does not parse fails the
// start naming it.
func TestEnvironmentLayer(t *testing.T) {
	ctx := context.Background()
	vars := map[string]string{"STANDS_REPO_URL": "https://bot:tok-SENTINEL@127.0.0.1:1/stands.git", "STANDS_OWNER": "team-env"}
	r := runCLI(t, ctx, newRecorder(vars), "run", "--help")
	if r.code != 0 || strings.Contains(r.stdout+r.stderr, "SENTINEL") || strings.Contains(r.stdout, "team-env") || !strings.Contains(r.stdout, "$STANDS_REPO_URL") {
		t.Errorf("help shows the environment:\n%s", r.stdout)
	}
	for variable, value := range map[string]string{"STANDS_DRIFT_INTERVAL": "6", "STANDS_WORKERS": "many", "STANDS_PREVIEWS": "perhaps"} {
		r := runCLI(t, ctx, newRecorder(map[string]string{variable: value}), "reconcile", "--once")
		if r.code != 1 || !strings.Contains(r.stderr, "$"+variable) {
			t.Errorf("%s=%s: exit %d, stderr %q", variable, value, r.code, r.stderr)
		}
	}
	// The owner: the flag wins over the variable (a bad one, which validate would refuse), and the
	// variable is used when no flag is given.
	dir := repoFromArchive(t, "-- stands/a/stand.yml --\n"+strings.Replace(string(must(os.ReadFile("../../manifest/testdata/minirepo/stands/a/stand.yml"))), "  owner:", "  #owner:", 1))
	env := map[string]string{"STANDS_OWNER": "Env_Owner", "SECRET_KV_PASS": "kv-value", "SECRET_REG_PASS": "reg-value"}
	if r := runCLI(t, ctx, newRecorder(env), "validate", "--owner", "flag-owner", dir); r.code != 0 {
		t.Errorf("with --owner: exit %d\n%s", r.code, r.stderr)
	}
	if r := runCLI(t, ctx, newRecorder(env), "validate", dir); r.code != 1 || !strings.Contains(r.stderr, "Env_Owner") {
		t.Errorf("with $STANDS_OWNER alone: exit %d\n%s", r.code, r.stderr)
	}
}

// TestValidateSaysWhenStandsEnd: where the repository has a lifetime policy, validate says when each
// stand ends; past the maximum it fails with the line.
func TestValidateSaysWhenStandsEnd(t *testing.T) {
	seed, err := os.ReadFile("../../manifest/testdata/minirepo/stands/a/stand.yml")
	if err != nil {
		t.Fatal(err)
	}
	end := time.Now().Add(50 * time.Hour).UTC().Truncate(time.Hour)
	secrets := map[string]string{"SECRET_KV_PASS": "kv-value", "SECRET_REG_PASS": "reg-value"}
	for _, c := range []struct {
		name, policy, expires string
		code                  int
		want                  string
	}{
		{"declared", "maximum: 7d\n", end.Format(time.RFC3339), 0, "stand t_mini_a expires at " + end.Format(time.RFC3339) + ", in 2d"},
		{"the default", "default: 3d\n", "", 0, "stand t_mini_a expires 3d after the reconciler first sees it on the tracked branch"},
		{"beyond the maximum", "maximum: 1d\n", end.Format(time.RFC3339), 1, "stand.yml:5:12: stand.expires " + end.Format(time.RFC3339) + " is more than 1d from now"},
	} {
		t.Run(c.name, func(t *testing.T) {
			stand := string(seed)
			if c.expires != "" {
				stand = strings.Replace(stand, "  owner: t\n", "  owner: t\n  expires: "+c.expires+"\n", 1)
			}
			dir := repoFromArchive(t, "-- stands/a/stand.yml --\n"+stand+"-- .stands/lifetime.yml --\n"+c.policy)
			r := runCLI(t, context.Background(), newRecorder(secrets), "validate", dir)
			if r.code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d (want %d); stderr lacks %q:\n%s", r.code, c.code, c.want, r.stderr)
			}
		})
	}
}

// TestREADMEListsEveryCommand: the README's command list names every command the binary has, and
// ctl's actions; a command added without its line there fails here.
func TestREADMEListsEveryCommand(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, list, _ := strings.Cut(string(data), "## Commands\n")
	list, _, _ = strings.Cut(list, "\n## ")
	listed := map[string]bool{}
	for line := range strings.SplitSeq(list, "\n") {
		if f := strings.Fields(line); len(f) > 0 && strings.HasPrefix(line, "  ") && !strings.HasPrefix(line, "   ") {
			listed[f[0]] = true
		}
	}
	for _, c := range commands() {
		if !listed[c.name] {
			t.Errorf("README.md's Commands do not list %q", c.name)
		}
	}
	for _, action := range []string{"status", "pause", "resume", "plan-only", "retry", "approve"} {
		if !strings.Contains(list, action) {
			t.Errorf("README.md's Commands do not name ctl %s", action)
		}
	}
	if len(listed) < 10 {
		t.Fatalf("read %d commands from README.md", len(listed))
	}
}
