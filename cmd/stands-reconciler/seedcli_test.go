package main

import (
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"encoding/json"
	"encoding/pem"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/internal/testenv"
	"github.com/stands-engine/stands-reconciler/internal/testfs"
)

// TestSeedCommandLine runs the Stands Engine's command line as its guide writes it (§7: `--env-file
// common.env --env-file stand.env --resource project-assets=DIR <validate|create|destroy>
// <manifest>`, the app packages and bases in the resource root), configured only by its
// variables (§2) — state in S3 under STAND__USER, the token, the passphrase, the configset folder,
// the connection file — against the real Pulumi CLI, an S3-compatible server and hcloudsim. Ours
// are set only for what the seed's world had no name for: the simulator's endpoint, the CLI's
// binary, servers only.
func TestSeedCommandLine(t *testing.T) {
	s3 := testenv.StartS3(t, "stands-state")
	// The engine and the CLI read the S3 credentials from the process environment, where the seed's
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
	common := writeEnvFile(t, dir, "common.env", `# shared by the team
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
	stand := writeEnvFile(t, dir, "devBack.env", `stand__user=alice
STAND__PATH_TO_CONFIGSET=`+configsets+`
STAND__PATH_TO_KEY=`+filepath.Join(keys, "devBack")+`
OUTPUT__FILE=true
OUTPUT__FILE_PATH=`+out+`
SECRET_REGISTRY_PASSWORD=`+exampleEnv["SECRET_REGISTRY_PASSWORD"]+`
SECRET_KV_PASSWORD='`+exampleEnv["SECRET_KV_PASSWORD"]+`'
`)
	ours := map[string]string{"HCLOUD_ENDPOINT": h.Endpoint, "STANDS_PULUMI_BIN": pl.Bin, "STANDS_NODES": "skip",
		"STANDS_STATE_DIR": filepath.Join(dir, "state"), "PULUMI_HOME": pl.Home}
	// The app packages and bases outside the repository, as a --resource root (§6, §7).
	assets, repo := filepath.Join(dir, "resources"), filepath.Join(dir, "repo")
	ex, err := testfs.Dir("../../examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range ex {
		to := ""
		switch {
		case strings.HasPrefix(name, "apps/"), strings.HasPrefix(name, "bases/"):
			to = filepath.Join(assets, name)
		case name == "stands/two-node/stand.yml":
			to = filepath.Join(repo, name)
			f.Data = []byte(strings.NewReplacer("../../bases/", "resource://project-assets/bases/", "../../apps/", "resource://project-assets/apps/").Replace(string(f.Data)))
		default:
			continue
		}
		err := os.MkdirAll(filepath.Dir(to), 0o755)
		if err == nil {
			err = os.WriteFile(to, f.Data, 0o644)
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	ctx := context.Background()
	manifest := filepath.Join(repo, "stands/two-node/stand.yml")
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

	if r := seed("validate", manifest); r.code != 0 || r.stdout != `{"operation":"validate","status":"success"}`+"\n" {
		t.Fatalf("validate: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	r := seed("create", manifest)
	if r.code != 0 {
		t.Fatalf("create: exit %d\nstderr: %s", r.code, r.stderr)
	}
	// One NDJSON record, id_stand first, credentials masked (§11).
	if lines := strings.Split(strings.TrimSuffix(r.stdout, "\n"), "\n"); len(lines) != 1 || !strings.HasPrefix(lines[0], `{"id_stand":"alice_demo_two-node",`) ||
		!strings.Contains(lines[0], `"password":"***"`) {
		t.Errorf("create's stdout:\n%s", r.stdout)
	}
	if n := len(h.Servers(t)); n != 2 {
		t.Errorf("%d servers after create, want 2", n)
	}
	// The state under the user's prefix in the bucket (§2), the connection file and the configset
	// where the seed's variables put them.
	if keys := s3.Keys(t); !strings.Contains(strings.Join(keys, " "), "alice/.pulumi/stacks/demo/two-node.json") {
		t.Errorf("no stack under alice/ in the bucket: %v", keys)
	}
	file := filepath.Join(out, "alice_demo_two-node.json")
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
	if _, err := os.Stat(filepath.Join(configsets, "alice_demo_two-node")); err != nil {
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
	for _, name := range []string{"alice-demo-two-node-db", "alice-demo-two-node-web"} {
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

	// Without the root, the stand's identity cannot be read: destroy refuses, naming it.
	if r := runCLI(t, ctx, newRecorder(ours), "--env-file", common, "--env-file", stand, "destroy", manifest); r.code != exitError ||
		!strings.Contains(r.stderr, `"project-assets": no such resource root`) {
		t.Errorf("destroy without --resource: exit %d\nstderr: %s", r.code, r.stderr)
	}
	if r := seed("destroy", manifest); r.code != 0 || r.stdout != `{"changed":true,"id_stand":"alice_demo_two-node","operation":"destroy","status":"success"}`+"\n" {
		t.Fatalf("destroy: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if n := len(h.Servers(t)); n != 0 {
		t.Errorf("%d servers after destroy", n)
	}
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
