package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"errors"
	"io/fs"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestStandsEngineCommandLine is a repository written from the Stands Engine's guide (testdata/stands-engine: Mako
// templates, the app package in a resource root) taken through migrate, validate, create (servers
// only) and destroy with its command line (§7: `--env-file common.env --env-file stand.env
// --resource project-assets=DIR <command> <manifest>`), configured only by its
// variables (§2) — state in S3 under STAND__USER, the token, the passphrase, the configset folder,
// the connection file — against the real Pulumi CLI, an S3-compatible server and hcloudsim. Ours
// are set only for what the Stands Engine's world had no name for: the simulator's endpoint, the CLI's
// binary, servers only.
func TestStandsEngineCommandLine(t *testing.T) {
	s3 := testenv.StartS3(t, "stands-state")
	// The engine and the CLI read the S3 credentials from the process environment, where the Stands Engine's
	// names are exported: restored when the test ends.
	for _, k := range []string{"AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY"} {
		t.Setenv(k, "")
	}
	pl := testenv.NewPulumi(t)
	machines := &userDataOf{byName: map[string]string{}}
	h := testenv.StartHetzner(t, "seed-token-SENTINEL", hcloudsim.WithMachine(machines))
	dir := t.TempDir()
	out, configsets, keys := filepath.Join(dir, "output"), filepath.Join(dir, "configsets"), filepath.Join(dir, "keys")
	if err := os.Mkdir(keys, 0o700); err != nil {
		t.Fatal(err)
	}
	common := testenv.WriteFile(t, dir, "common.env", `# shared by the team
HCLOUD__TOKEN=`+h.Token+`
S3__ACCESS_KEY=seed-access
S3__SECRET_KEY=seed-secret-SENTINEL
S3__REGION=us-east-1
S3__ENDPOINT=`+s3.URL+`
S3__BUCKET=stands-state
STAND__PASSPHRASE=`+pl.Passphrase+`
OUTPUT__CONSOLE=true
OUTPUT__CONSOLE_SECRETS=false
OUTPUT__FILE=false
`)
	stand := testenv.WriteFile(t, dir, "devBack.env", `stand__user=alice
STAND__PATH_TO_CONFIGSET=`+configsets+`
STAND__PATH_TO_KEY=`+filepath.Join(keys, "devBack")+`
OUTPUT__FILE=true
OUTPUT__FILE_PATH=`+out+`
SECRET_REGISTRY_PASSWORD=`+exampleEnv["SECRET_REGISTRY_PASSWORD"]+`
SECRET_KV_PASSWORD='`+exampleEnv["SECRET_KV_PASSWORD"]+`'
`)
	ours := map[string]string{"STANDS_CLOUD_ENDPOINT": h.Endpoint, "STANDS_PULUMI_BIN": pl.Bin, "STANDS_NODES": "skip",
		"STANDS_STATE_DIR": filepath.Join(dir, "state"), "PULUMI_HOME": pl.Home}
	// A repository as the Stands Engine's users wrote them (testdata/stands-engine): Mako templates, the app
	// package in a --resource root (§6, §7).
	assets, repo := filepath.Join(dir, "resources"), filepath.Join(dir, "repo")
	if err := os.CopyFS(dir, os.DirFS("testdata/stands-engine")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	manifest := filepath.Join(repo, "stands/devback/stand.yml")
	global := []string{"--env-file", common, "--env-file", stand, "--resource", "project-assets=" + assets}
	seed := func(args ...string) result {
		t.Helper()
		r := runCLI(t, ctx, newRecorder(ours), append(global, args...)...)
		for _, leak := range []string{"SENTINEL", exampleEnv["SECRET_KV_PASSWORD"], h.Token, pl.Passphrase} {
			if strings.Contains(r.stdout+r.stderr, leak) {
				t.Errorf("%v shows a secret", args)
			}
		}
		return r
	}

	// Before migrate, the Mako templates do not validate: named, by file and line.
	if r := seed("validate", manifest); r.code != exitError || !strings.Contains(r.stderr, "cloud-init.yaml.mako") {
		t.Errorf("validate before migrate: exit %d\nstderr: %s", r.code, r.stderr)
	}
	// migrate: every template translated and proven by rendering it both ways.
	if r := seed("migrate", repo); r.code != 0 || !strings.Contains(r.stdout, `"proven":5`) || !strings.Contains(r.stdout, `"status":"success"`) {
		t.Fatalf("migrate: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if left, _ := filepath.Glob(filepath.Join(assets, "apps", "kv", "*.mako")); len(left) != 0 {
		t.Errorf("translated templates left: %v", left)
	}
	if r := seed("validate", manifest); r.code != 0 || r.stdout != `{"operation":"validate","status":"success"}`+"\n" {
		t.Fatalf("validate: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r := seed("create", manifest)
	if r.code != 0 {
		t.Fatalf("create: exit %d\nstderr: %s", r.code, r.stderr)
	}
	// One NDJSON record, id_stand first, credentials masked (§11).
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], `{"id_stand":"alice_shop_devback",`) ||
		!strings.Contains(lines[0], `"password":"***"`) {
		t.Errorf("create's stdout:\n%s", r.stdout)
	}
	if n := len(h.Servers(t)); n != 1 {
		t.Errorf("%d servers after create, want 1", n)
	}
	// The state under the user's prefix in the bucket (§2), the connection file and the configset
	// where the Stands Engine's variables put them.
	if keys := s3.Keys(t); !strings.Contains(strings.Join(keys, " "), "alice/.pulumi/stacks/shop/devback.json") {
		t.Errorf("no stack under alice/ in the bucket: %v", keys)
	}
	file := filepath.Join(out, "alice_shop_devback.json")
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("connection file: %v %v", st, err)
	}
	full, _ := os.ReadFile(file)
	var rec struct {
		Cache struct {
			Credentials struct{ Password string }
		}
	}
	if err := json.Unmarshal(full, &rec); err != nil || rec.Cache.Credentials.Password != exampleEnv["SECRET_KV_PASSWORD"] {
		t.Errorf("connection file (%v) lacks the real values:\n%s", err, full)
	}
	if _, err := os.Stat(filepath.Join(configsets, "alice_shop_devback")); err != nil {
		t.Errorf("no configset under STAND__PATH_TO_CONFIGSET: %v", err)
	}
	// STAND__PATH_TO_KEY (§3): no file at create, so a new key written there, 0600, the one both
	// servers' cloud-init authorizes.
	key, err := os.ReadFile(filepath.Join(keys, "devBack"))
	if st, _ := os.Stat(filepath.Join(keys, "devBack")); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("the stand's key file: %v", err)
	}
	signer, err := ssh.ParsePrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	pub := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(signer.PublicKey())))
	for _, name := range []string{"alice-shop-devback-main"} {
		if !strings.Contains(machines.userData(name), pub) {
			t.Errorf("%s's user data does not authorize the key file's key", name)
		}
	}
	// Another key at STAND__PATH_TO_KEY is refused: the servers authorize the first.
	other := filepath.Join(keys, "other")
	if err := os.WriteFile(other, []byte(otherKey(t)), 0o600); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, ctx, newRecorder(withVar(ours, "STAND__PATH_TO_KEY", other)), append(global, "create", manifest)...); r.code != exitError ||
		!strings.Contains(r.stderr, "holds another key than the stand's") {
		t.Errorf("create with another key: exit %d\nstderr: %s", r.code, r.stderr)
	}

	// OUTPUT__CONSOLE=false: nothing on stdout (the process's environment wins over the files).
	quiet := runCLI(t, ctx, newRecorder(withVar(ours, "OUTPUT__CONSOLE", "false")), append(global, "create", manifest)...)
	if quiet.code != 0 || quiet.stdout != "" {
		t.Errorf("create with OUTPUT__CONSOLE=false: exit %d, stdout %q\nstderr: %s", quiet.code, quiet.stdout, quiet.stderr)
	}

	// destroy as the guide writes it (§9): no --resource, no app or registry secrets; the stand's
	// identity is its own manifest's.
	noSecrets := testenv.WriteFile(t, dir, "destroy.env", strings.Join(slices.DeleteFunc(strings.Split(readFile(t, stand), "\n"),
		func(l string) bool { return strings.HasPrefix(l, "SECRET_") }), "\n"))
	if r := runCLI(t, ctx, newRecorder(ours), "--env-file", common, "--env-file", noSecrets, "destroy", manifest); r.code != 0 ||
		r.stdout != `{"changed":true,"id_stand":"alice_shop_devback","operation":"destroy","status":"success"}`+"\n" {
		t.Fatalf("destroy: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if n := len(h.Servers(t)); n != 0 {
		t.Errorf("%d servers after destroy", n)
	}
	if r := seed("destroy", manifest); r.code != 0 || !strings.Contains(r.stdout, `"changed":false`) {
		t.Errorf("a second destroy: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}

func readFile(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// userDataOf records each server's user data, as Hetzner keeps it.
type userDataOf struct {
	hcloudsim.RecordMachine
	mu     sync.Mutex
	byName map[string]string
}

func (m *userDataOf) Create(ctx context.Context, spec hcloudsim.MachineSpec) (string, error) {
	m.mu.Lock()
	m.byName[spec.Name] = spec.UserData
	m.mu.Unlock()
	return m.RecordMachine.Create(ctx, spec)
}

func (m *userDataOf) userData(name string) string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.byName[name]
}

func otherKey(t *testing.T) string {
	t.Helper()
	_, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	block, err := ssh.MarshalPrivateKey(priv, "other")
	if err != nil {
		t.Fatal(err)
	}
	return string(pem.EncodeToMemory(block))
}

func withVar(m map[string]string, k, v string) map[string]string {
	out := map[string]string{k: v}
	for k, v := range m {
		if _, ok := out[k]; !ok {
			out[k] = v
		}
	}
	return out
}

// --resource on the command line: where it is taken, what it refuses, and a root's file named by its
// path on disk in a diagnostic.
func TestResourceFlag(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	assets := filepath.Join(dir, "assets")
	if err := os.MkdirAll(filepath.Join(assets, "apps", "kv"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(assets, "apps", "kv", "app.yml"), []byte("name: kv\nbogus_key: 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	stand := filepath.Join(dir, "repo", "stands", "x", "stand.yml")
	if err := os.MkdirAll(filepath.Dir(stand), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(stand, []byte(strings.Replace(sharedTestStand, "PACKAGE", "resource://assets/apps/kv", 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"a root's file on disk", []string{"--resource", "assets=" + assets, "validate", stand}, exitError, filepath.Join(assets, "apps", "kv", "app.yml") + ":2:"},
		{"as the command's flag", []string{"validate", "--resource", "assets=" + assets, stand}, exitError, filepath.Join(assets, "apps", "kv", "app.yml") + ":2:"},
		{"no root", []string{"validate", stand}, exitError, `"assets": no such resource root`},
		{"a bad name", []string{"--resource", "Assets=" + assets, "validate", stand}, exitUsage, `"Assets": a root's name has lower-case letters`},
		{"not a folder", []string{"--resource", "assets=" + filepath.Join(dir, "nope"), "validate", stand}, exitUsage, "not a folder"},
		{"twice", []string{"--resource", "assets=" + assets, "--resource", "assets=" + dir, "validate", stand}, exitUsage, `"assets" is given twice`},
		{"a command without manifests", []string{"--resource", "assets=" + assets, "inventory"}, exitUsage, "--resource is for the commands that read manifests"},
	} {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, ctx, nil, c.args...)
			if r.code != c.code || !strings.Contains(r.stderr, c.want) {
				t.Errorf("exit %d (want %d), want %q in stderr:\n%s", r.code, c.code, c.want, r.stderr)
			}
		})
	}
}

const sharedTestStand = `stand:
  project: x
  env: dev
  users: {sudo: admin, app: app}
  ssh: {key_name_admin: k}
node_profiles:
  small: {location: hel1, type_serv: cx22, image: debian-12, network: n, cloud-init: ci.tmpl}
nodes:
  main: {profile: small, apps: [kv]}
apps:
  kv:
    package: PACKAGE
    instances:
      cache: {}
`

// migrate says what it leaves: a dry run writes nothing; a construct it cannot translate is named by
// file and line, its .mako kept and its .tmpl made so it does not validate; a translation that renders
// otherwise than Mako did is "not proven", with the line, and nothing is written, on every run; each is
// exit 1.
func TestMigrateReports(t *testing.T) {
	ctx := context.Background()
	seedCopy := func(t *testing.T, edit func(redisConf string) string) (repo, assets string) {
		dir := t.TempDir()
		if err := os.CopyFS(dir, os.DirFS("testdata/stands-engine")); err != nil {
			t.Fatal(err)
		}
		conf := filepath.Join(dir, "resources", "apps", "kv", "redis.conf.mako")
		if err := os.WriteFile(conf, []byte(edit(readFile(t, conf))), 0o644); err != nil {
			t.Fatal(err)
		}
		return filepath.Join(dir, "repo"), filepath.Join(dir, "resources")
	}
	migrate := func(repo, assets string, args ...string) result {
		return runCLI(t, ctx, nil, append([]string{"--resource", "project-assets=" + assets, "migrate"}, append(args, repo)...)...)
	}

	t.Run("dry run", func(t *testing.T) {
		repo, assets := seedCopy(t, func(s string) string { return s })
		before := tree(t, filepath.Dir(repo))
		r := migrate(repo, assets, "--dry-run")
		if r.code != 0 || !strings.Contains(r.stdout, `"status":"dry-run"`) || !strings.Contains(r.stderr, "would translate") {
			t.Errorf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
		}
		if after := tree(t, filepath.Dir(repo)); !maps.Equal(before, after) {
			t.Error("a dry run changed files")
		}
	})
	t.Run("left for a human", func(t *testing.T) {
		repo, assets := seedCopy(t, func(s string) string {
			return strings.Replace(s, "bind 0.0.0.0\n", "bind 0.0.0.0\nname ${instance.upper()}\n", 1)
		})
		r := migrate(repo, assets)
		conf := filepath.Join(assets, "apps", "kv", "redis.conf.mako")
		if r.code != exitError || !strings.Contains(r.stderr, conf+":4: the expression is not translated") || !strings.Contains(r.stdout, `"status":"incomplete"`) {
			t.Errorf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
		}
		if _, err := os.Stat(conf); err != nil {
			t.Errorf("the .mako with a construct left was removed: %v", err)
		}
		if v := runCLI(t, ctx, nil, "--resource", "project-assets="+assets, "validate", filepath.Join(repo, "stands/devback/stand.yml")); v.code != exitError {
			t.Errorf("the half-translated stand validates: exit %d\n%s", v.code, v.stderr)
		}
	})
	t.Run("a mapping iterated in the manifest's order", func(t *testing.T) {
		// extra_config's keys out of sorted order: Mako writes them as the YAML has them, and so must
		// the translation (a Go range would sort them: the proof would fail).
		repo, assets := seedCopy(t, func(s string) string { return s })
		manifest := filepath.Join(repo, "stands", "devback", "stand.yml")
		edited := strings.Replace(readFile(t, manifest), `            timeout: "0"`+"\n", `            timeout: "0"`+"\n"+`            appendfsync: everysec`+"\n", 1)
		if err := os.WriteFile(manifest, []byte(edited), 0o644); err != nil {
			t.Fatal(err)
		}
		r := migrate(repo, assets)
		if r.code != 0 || !strings.Contains(r.stdout, `"not_proven":0`) {
			t.Errorf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
		}
		out := filepath.Join(t.TempDir(), "out")
		if rr := runCLI(t, ctx, nil, "--resource", "project-assets="+assets, "render", "--out", out, manifest); rr.code != 0 {
			t.Fatalf("render: exit %d\n%s", rr.code, rr.stderr)
		}
		var conf string
		_ = filepath.WalkDir(out, func(p string, d fs.DirEntry, err error) error {
			if err == nil && d.Name() == "redis.conf" {
				conf = readFile(t, p)
			}
			return err
		})
		if !strings.Contains(conf, "tcp-keepalive 60\ntimeout 0\nappendfsync everysec\n") {
			t.Errorf("the rendered redis.conf does not keep the manifest's order:\n%s", conf)
		}
	})
	t.Run("renders otherwise", func(t *testing.T) {
		repo, assets := seedCopy(t, func(s string) string {
			return strings.Replace(s, "protected-mode yes\n", "protected-mode yes\n# persist ${preferences['persist']}\n", 1)
		})
		before := tree(t, filepath.Dir(repo))
		want := `not proven: resource:/project-assets/apps/kv/redis.conf.tmpl: stand local_shop_devback, line 4: Mako wrote "# persist False", the Go template writes "# persist false"`
		for run := range 2 { // and again: the same .mako, the same failure, never "success"
			r := migrate(repo, assets)
			if r.code != exitError || !strings.Contains(r.stderr, want) || !strings.Contains(r.stderr, "nothing written") || !strings.Contains(r.stdout, `"not_proven":1`) {
				t.Errorf("run %d: exit %d, want %q\nstdout %s\nstderr %s", run+1, r.code, want, r.stdout, r.stderr)
			}
			if after := tree(t, filepath.Dir(repo)); !maps.Equal(before, after) {
				t.Errorf("run %d: a migration whose proof failed changed files", run+1)
			}
		}
	})
}

// tree maps each file under dir to its content.
func tree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			out[p] = readFile(t, p)
		}
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The daemon takes none of the Stands Engine's configuration: --env-file is refused before anything runs, and
// a Stands Engine variable in its environment fails its start naming ours.
func TestDaemonRefusesStandsEngineConfiguration(t *testing.T) {
	ctx := context.Background()
	f := testenv.WriteFile(t, t.TempDir(), "x.env", "HCLOUD__TOKEN=s3cr3t-value\n")
	for _, cmd := range []string{"run", "reconcile", "config"} {
		r := runCLI(t, ctx, newRecorder(map[string]string{}), "--env-file", f, cmd, "--once")
		if r.code != exitUsage || !strings.Contains(r.stderr, "--env-file is for the one-shot commands") {
			t.Errorf("%s with --env-file: exit %d, stderr %s", cmd, r.code, r.stderr)
		}
	}
	env := newRecorder(map[string]string{"HCLOUD__TOKEN": "s3cr3t-value", "STAND__USER": "alice", "STANDS_REPO_URL": t.TempDir()})
	r := runCLI(t, ctx, env, "reconcile", "--once")
	for _, want := range []string{"$HCLOUD__TOKEN is the Stands Engine's", "reads $HCLOUD_TOKEN_FILE", "$STAND__USER is the Stands Engine's", "reads $STANDS_OWNER"} {
		if r.code != exitError || !strings.Contains(r.stderr, want) {
			t.Errorf("reconcile with Stands Engine variables: exit %d, want %q in\n%s", r.code, want, r.stderr)
		}
	}
	if strings.Contains(r.stdout+r.stderr, "s3cr3t") {
		t.Error("a Stands Engine variable's value was printed")
	}
}

// TestDotEnvIsRead: the Stands Engine's settings library read ./.env under the environment, so its
// users keep their settings there. A one-shot command in a folder with a .env reads it (the example's
// secrets there: validate passes; the same folder without it: the missing secret named), an --env-file
// wins over it and the process over both, a broken .env fails with its line, and the daemon never
// reads it.
func TestDotEnvIsRead(t *testing.T) {
	stand, err := filepath.Abs("../../examples/stands-repo/stands/two-node")
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	dir := t.TempDir()
	t.Chdir(dir)
	validate := func(env map[string]string, args ...string) result {
		t.Helper()
		return runCLI(t, ctx, newRecorder(env), append(args, "validate", stand)...)
	}
	if r := validate(nil); r.code != exitError || !strings.Contains(r.stderr, "SECRET_REGISTRY_PASSWORD") {
		t.Fatalf("without .env: exit %d\n%s", r.code, r.stderr)
	}
	var lines []string
	for k, v := range exampleEnv {
		lines = append(lines, k+"="+v)
	}
	slices.Sort(lines)
	testenv.WriteFile(t, dir, ".env", strings.Join(lines, "\n")+"\n")
	if r := validate(nil); r.code != 0 {
		t.Errorf("with the secrets in .env: exit %d\n%s", r.code, r.stderr)
	}
	// A value in .env that fails (a secret too short), overridden by an --env-file, then by the process.
	testenv.WriteFile(t, dir, ".env", strings.Join(lines, "\n")+"\nSECRET_KV_PASSWORD=x\n")
	if r := validate(nil); r.code != exitError || !strings.Contains(r.stderr, "kv-password") {
		t.Errorf("a short secret in .env: exit %d\n%s", r.code, r.stderr)
	}
	over := testenv.WriteFile(t, t.TempDir(), "over.env", "SECRET_KV_PASSWORD="+exampleEnv["SECRET_KV_PASSWORD"]+"\n")
	if r := validate(nil, "--env-file", over); r.code != 0 {
		t.Errorf("an --env-file over .env: exit %d\n%s", r.code, r.stderr)
	}
	if r := validate(map[string]string{"SECRET_KV_PASSWORD": exampleEnv["SECRET_KV_PASSWORD"]}); r.code != 0 {
		t.Errorf("the process over .env: exit %d\n%s", r.code, r.stderr)
	}
	testenv.WriteFile(t, dir, ".env", "SECRET_KV_PASSWORD=ok\nnot a line\n")
	if r := validate(nil); r.code != exitError || !strings.Contains(r.stderr, ".env:2") {
		t.Errorf("a broken .env: exit %d\n%s", r.code, r.stderr)
	}
	// The daemon refuses a Stands Engine variable in its environment; one in .env it never sees.
	testenv.WriteFile(t, dir, ".env", "HCLOUD__TOKEN=from-dotenv\n")
	if r := runCLI(t, ctx, newRecorder(nil), "config", "check"); strings.Contains(r.stdout+r.stderr, "HCLOUD__TOKEN") {
		t.Errorf("the daemon's configuration read .env:\n%s%s", r.stdout, r.stderr)
	}
	if r := runCLI(t, ctx, newRecorder(map[string]string{"HCLOUD__TOKEN": "from-env"}), "config", "check"); !strings.Contains(r.stdout+r.stderr, "$HCLOUD__TOKEN is the Stands Engine's") {
		t.Errorf("the control: the daemon's configuration does not refuse $HCLOUD__TOKEN in its environment:\n%s%s", r.stdout, r.stderr)
	}
}

// TestMigrateStandsEngineLayout: a tree laid out as the Stands Engine's guide has it — the stand in
// demo/stand/ with its cloud-init Mako template beside stand.yml, the app package in the --resource
// folder demo/resources, env files at the top and in stands/ — migrated with --out into this
// project's layout: the stand in stands/shop-devback/, the root folded into resources/project-assets/,
// its resource:// reference now a relative path, every template translated and proven, no env file
// copied (each named as left to the user), and the tree itself unchanged. The result validates. The
// same from the one stand folder, and from the manifest file.
func TestMigrateStandsEngineLayout(t *testing.T) {
	ctx := context.Background()
	build := func(t *testing.T) (tree, stand, assets string) {
		return guideTree(t, "HCLOUD__TOKEN=seed-SENTINEL\n", "STAND__USER=alice\n")
	}
	for _, c := range []struct{ name, arg string }{{"the whole tree", "."}, {"the stand's folder", "demo/stand"}, {"the manifest", "demo/stand/stand.yml"}} {
		t.Run(c.name, func(t *testing.T) {
			tree, _, assets := build(t)
			before := tree2(t, tree)
			out := filepath.Join(t.TempDir(), "new")
			r := runCLI(t, ctx, nil, "--resource", "project-assets="+assets, "migrate", "--out", out, filepath.Join(tree, c.arg))
			if r.code != 0 || !strings.Contains(r.stdout, `"status":"success"`) || !strings.Contains(r.stdout, `"not_proven":0`) {
				t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
			}
			if after := tree2(t, tree); !maps.Equal(before, after) {
				t.Errorf("the Stands Engine tree changed")
			}
			got := tree2(t, out)
			manifest := got["stands/shop-devback/stand.yml"]
			for _, want := range []string{"package: ../../resources/project-assets/apps/kv\n", "cloud-init: ./cloud-init.yaml.tmpl\n"} {
				if !strings.Contains(manifest, want) {
					t.Errorf("stands/shop-devback/stand.yml lacks %q:\n%s", want, manifest)
				}
			}
			for _, want := range []string{"stands/shop-devback/cloud-init.yaml.tmpl", "resources/project-assets/apps/kv/app.yml", "resources/project-assets/apps/kv/redis.conf.tmpl"} {
				if _, ok := got[want]; !ok {
					t.Errorf("no %s in the new repository: %v", want, slices.Sorted(maps.Keys(got)))
				}
			}
			for p, content := range got {
				if strings.HasSuffix(p, ".mako") || strings.HasSuffix(p, ".env") || strings.Contains(content, "SENTINEL") || strings.Contains(content, "resource://") {
					t.Errorf("the new repository has %s (a .mako, an env file, a secret or a resource:// reference)", p)
				}
			}
			if c.arg == "." && (!strings.Contains(r.stderr, "common.env: the launcher's settings") || !strings.Contains(r.stderr, "devBack.env: the launcher's settings")) {
				t.Errorf("the env files are not named as left to the user:\n%s", r.stderr)
			}
			if v := runCLI(t, ctx, nil, "validate", filepath.Join(out, "stands", "shop-devback")); v.code != 0 {
				t.Errorf("the migrated stand does not validate: exit %d\n%s", v.code, v.stderr)
			}
		})
	}
	t.Run("dry run", func(t *testing.T) {
		tree, _, assets := build(t)
		before := tree2(t, tree)
		out := filepath.Join(t.TempDir(), "new")
		r := runCLI(t, ctx, nil, "--resource", "project-assets="+assets, "migrate", "--dry-run", "--out", out, tree)
		// Each of the five templates once, though the root lies inside the tree.
		if r.code != 0 || !strings.Contains(r.stdout, `"status":"dry-run","templates":5,`) || !strings.Contains(r.stderr, "resource://project-assets/apps/kv → ../../resources/project-assets/apps/kv") {
			t.Errorf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
		}
		if _, err := os.Stat(out); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("a dry run made %s: %v", out, err)
		}
		if after := tree2(t, tree); !maps.Equal(before, after) {
			t.Errorf("a dry run changed the tree")
		}
	})
	t.Run("two manifests named otherwise in one folder, sharing a base", func(t *testing.T) {
		// demo/devBack.yml and demo/prod.yml, from_dep_manifest: ./common.yml holding the profiles
		// and the cloud-init template beside it: each stand gets its own folder, the base and the
		// template stay, and every path still reaches them.
		tree, stand, assets := build(t)
		manifest := readFile(t, filepath.Join(stand, "stand.yml"))
		from, to := strings.Index(manifest, "node_profiles:"), strings.Index(manifest, "nodes:")
		testenv.WriteFile(t, stand, "common.yml", manifest[from:to])
		dev := manifest[:from] + "from_dep_manifest: ./common.yml\n\n" + manifest[to:]
		testenv.WriteFile(t, stand, "devBack.yml", dev)
		testenv.WriteFile(t, stand, "prod.yml", strings.Replace(dev, "env: devback", "env: prod", 1))
		if err := os.Remove(filepath.Join(stand, "stand.yml")); err != nil {
			t.Fatal(err)
		}
		out := filepath.Join(t.TempDir(), "new")
		r := runCLI(t, ctx, nil, "--resource", "project-assets="+assets, "migrate", "--out", out, tree)
		if r.code != 0 || !strings.Contains(r.stdout, `"not_proven":0`) {
			t.Fatalf("exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
		}
		got := tree2(t, out)
		for _, want := range []string{"stands/shop-devback/stand.yml", "stands/shop-prod/stand.yml", "demo/stand/common.yml", "demo/stand/cloud-init.yaml.tmpl"} {
			if _, ok := got[want]; !ok {
				t.Errorf("no %s: %v", want, slices.Sorted(maps.Keys(got)))
			}
		}
		if m := got["stands/shop-prod/stand.yml"]; !strings.Contains(m, "from_dep_manifest: ../../demo/stand/common.yml\n") {
			t.Errorf("the base is not reached from the new place:\n%s", m)
		}
		if v := runCLI(t, ctx, nil, "validate", out); v.code != 0 {
			t.Errorf("the migrated repository does not validate: exit %d\n%s", v.code, v.stderr)
		}
	})
	t.Run("without --out", func(t *testing.T) {
		tree, _, assets := build(t)
		r := runCLI(t, ctx, nil, "--resource", "project-assets="+assets, "migrate", tree)
		if r.code != exitUsage || !strings.Contains(r.stderr, "give --out DIR") {
			t.Errorf("exit %d\n%s", r.code, r.stderr)
		}
	})
}

// tree2 maps each file under dir to its content, by its slash-separated path under dir.
func tree2(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	for p, content := range tree(t, dir) {
		r, _ := filepath.Rel(dir, p)
		out[filepath.ToSlash(r)] = content
	}
	return out
}

// guideTree lays a Stands Engine tree out as its guide does: the stand in demo/stand/ (its cloud-init
// Mako template beside stand.yml), the app package in the --resource folder demo/resources, and the
// env files common.env and stands/devBack.env holding what is given.
func guideTree(t *testing.T, common, stand string) (tree, standDir, assets string) {
	t.Helper()
	tree = t.TempDir()
	standDir, assets = filepath.Join(tree, "demo", "stand"), filepath.Join(tree, "demo", "resources")
	if err := os.CopyFS(standDir, os.DirFS("testdata/stands-engine/repo/stands/devback")); err != nil {
		t.Fatal(err)
	}
	if err := os.CopyFS(assets, os.DirFS("testdata/stands-engine/resources")); err != nil {
		t.Fatal(err)
	}
	testenv.WriteFile(t, tree, "common.env", common)
	if err := os.Mkdir(filepath.Join(tree, "stands"), 0o755); err != nil {
		t.Fatal(err)
	}
	testenv.WriteFile(t, filepath.Join(tree, "stands"), "devBack.env", stand)
	return tree, standDir, assets
}

// TestStandsEngineGuideToTheDaemon is docs/migrating.md's procedure end to end, with the real Pulumi
// CLI and hcloudsim: a tree in the guide's layout whose stand already runs under a stack of the Stands
// Engine's form (hcloud's servers, no ownership mark, the server unlabelled); migrate --out into a new
// repository; adopt there with the guide's env files; then the daemon's cycle (reconcile --once) on that
// repository, as a Git repository, finds the stand Ready — the same server id throughout, no delete.
func TestStandsEngineGuideToTheDaemon(t *testing.T) {
	pl := testenv.NewPulumi(t)
	h := testenv.StartHetzner(t, "guide-token-SENTINEL")
	state := t.TempDir()
	backend := "file://" + filepath.Join(state, "pulumi", "alice")
	tree, _, assets := guideTree(t, "HCLOUD__TOKEN="+h.Token+"\nSTAND__PASSPHRASE="+pl.Passphrase+"\n",
		"STAND__USER=alice\nSECRET_REGISTRY_PASSWORD="+exampleEnv["SECRET_REGISTRY_PASSWORD"]+"\nSECRET_KV_PASSWORD="+exampleEnv["SECRET_KV_PASSWORD"]+"\n")
	envFiles := []string{"--env-file", filepath.Join(tree, "common.env"), "--env-file", filepath.Join(tree, "stands", "devBack.env")}
	// Ours only where the Stands Engine's world had no name: the simulator, the CLI, servers only, and
	// the state in a folder (S3 in production).
	ours := map[string]string{"STANDS_CLOUD_ENDPOINT": h.Endpoint, "STANDS_PULUMI_BIN": pl.Bin, "STANDS_NODES": "skip",
		"STANDS_STATE_DIR": state, "PULUMI_HOME": pl.Home, "STANDS_BACKEND_URL": backend}
	ctx := context.Background()
	cli := func(args ...string) result {
		t.Helper()
		return runCLI(t, ctx, newRecorder(ours), append(envFiles, args...)...)
	}

	// The Stands Engine's stand: made here, then given the old engine's form.
	repo := filepath.Join(t.TempDir(), "stands-repo")
	if r := runCLI(t, ctx, nil, "--resource", "project-assets="+assets, "migrate", "--out", repo, tree); r.code != 0 {
		t.Fatalf("migrate: exit %d\n%s", r.code, r.stderr)
	}
	manifest := filepath.Join(repo, "stands", "shop-devback", "stand.yml")
	if r := cli("apply", manifest); r.code != 0 {
		t.Fatalf("the stand's first apply: exit %d\n%s", r.code, r.stderr)
	}
	srv := standsEngineForm(t, h, filepath.Join(state, "pulumi", "alice", ".pulumi", "stacks", "shop", "devback.json"), "alice-shop-devback-main")

	// The procedure: adopt from the new repository, then the daemon's cycle on it.
	g, err := git.PlainInitWithOptions(repo, &git.PlainInitOptions{InitOptions: git.InitOptions{DefaultBranch: plumbing.Main}})
	if err != nil {
		t.Fatal(err)
	}
	testenv.CommitAll(t, g, repo, "the Stands Engine's stands, migrated", nil)
	if r := cli("adopt", manifest); r.code != 0 || !strings.Contains(r.stdout, `"status":"success"`) {
		t.Fatalf("adopt: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	daemon := merged(ours, map[string]string{"HCLOUD_TOKEN": h.Token, "STANDS_PASSPHRASE": pl.Passphrase, "STANDS_OWNER": "alice",
		"SECRET_REGISTRY_PASSWORD": exampleEnv["SECRET_REGISTRY_PASSWORD"], "SECRET_KV_PASSWORD": exampleEnv["SECRET_KV_PASSWORD"]})
	r := runCLI(t, ctx, newRecorder(daemon), "reconcile", "--once", "--repo", repo, "--drift-interval", "0", "--require-review=false")
	if r.code != 0 || !strings.Contains(r.stdout, `"alice_shop_devback":"Ready"`) {
		t.Fatalf("the daemon's cycle after adopt: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	lr := &localStandsRepo{t: t, dir: repo, repo: g}
	if s := lr.status("alice_shop_devback"); s.Phase != reason.Ready || len(s.Nodes) != 1 || s.Nodes[0].ServerID != srv.ID {
		t.Errorf("status after the procedure: %+v (the server was %d)", s, srv.ID)
	}
	if all := h.Servers(t); len(all) != 1 || all["alice-shop-devback-main"].ID != srv.ID {
		t.Errorf("servers after the procedure: %v (was id %d)", all, srv.ID)
	}
	for _, c := range h.Sim.Calls() {
		if c.Method == http.MethodDelete {
			t.Errorf("Hetzner got a delete: %s", c.Path)
		}
	}
}
