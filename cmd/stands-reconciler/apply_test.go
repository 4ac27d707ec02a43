package main

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestMain lets the test binary serve the provider, as the real binary does when the Pulumi engine
// runs it as pulumi-resource-stands.
func TestMain(m *testing.M) {
	if code, ok := asChild(); ok {
		os.Exit(code)
	}
	if os.Getenv(runMainEnv) == "1" {
		if os.Getenv(leakEnv) != "" {
			startLeaking() // the soak's control (soak_test.go)
		}
		os.Exit(runMain())
	}
	os.Exit(m.Run())
}

// TestApplyPreviewDestroyCommands runs the one-shot commands against the real Pulumi CLI and a
// simulated Hetzner project, and checks the Stands Engine's stdout contract.
func TestApplyPreviewDestroyCommands(t *testing.T) {
	pl := testenv.NewPulumi(t)
	h := testenv.StartHetzner(t, "cli-token-SENTINEL")
	state := t.TempDir()
	vars := map[string]string{
		"HCLOUD_TOKEN": h.Token, "STANDS_CLOUD_ENDPOINT": h.Endpoint, "STANDS_PASSPHRASE": pl.Passphrase, "STANDS_NODES": "skip",
		"STANDS_PULUMI_BIN": pl.Bin, "STANDS_STATE_DIR": state, "STANDS_OWNER": "demo",
		"PULUMI_HOME": pl.Home, "STANDS_BACKEND_URL": "file://" + filepath.Join(state, "pulumi", "demo"),
	}
	for k, v := range exampleEnv {
		vars[k] = v
	}
	ctx := context.Background()
	stand := "../../examples/stands-repo/stands/two-node"
	run := func(args ...string) result {
		t.Helper()
		return runCLI(t, ctx, newRecorder(vars), args...)
	}

	r := run("preview", stand)
	if r.code != 0 || !strings.Contains(r.stdout, `"operation":"preview"`) || !strings.Contains(r.stdout, `"create":2`) {
		t.Fatalf("preview: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if n := len(h.Servers(t)); n != 0 {
		t.Fatalf("preview created %d servers", n)
	}

	out := t.TempDir()
	r = run("apply", "--output-dir", out, stand)
	if r.code != 0 {
		t.Fatalf("apply: exit %d\nstderr: %s", r.code, r.stderr)
	}
	srvs := h.Servers(t)
	want, err := os.ReadFile("testdata/apply-two-node.json")
	if err != nil {
		t.Fatal(err)
	}
	expected := strings.NewReplacer(
		"{{db.private}}", srvs["demo-demo-two-node-db"].PrivateNet[0].IP.String(),
		"{{web.public}}", srvs["demo-demo-two-node-web"].PublicNet.IPv4.IP.String(),
	).Replace(string(want))
	if r.stdout != expected {
		t.Errorf("apply record\n got: %s want: %s", r.stdout, expected)
	}
	for _, leak := range []string{"SENTINEL", exampleEnv["SECRET_KV_PASSWORD"], "PRIVATE KEY"} {
		if strings.Contains(r.stdout+r.stderr, leak) {
			t.Errorf("output shows %q", leak)
		}
	}
	file := filepath.Join(out, "demo_demo_two-node.json")
	st, err := os.Stat(file)
	if err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("connection file: %v %v", st, err)
	}
	full, _ := os.ReadFile(file)
	var rec map[string]map[string]any
	_ = json.Unmarshal(full, &rec)
	if rec["cache"]["credentials"].(map[string]any)["password"] != exampleEnv["SECRET_KV_PASSWORD"] {
		t.Errorf("connection file lacks the real values:\n%s", full)
	}

	r = run("apply", "--show-secrets", stand)
	if r.code != 0 || !strings.Contains(r.stdout, exampleEnv["SECRET_KV_PASSWORD"]) {
		t.Errorf("--show-secrets: exit %d, stdout %s", r.code, r.stdout)
	}

	r = run("inventory")
	if r.code != 0 || !strings.Contains(r.stdout, `"env":"two-node"`) || !strings.Contains(r.stdout, `"owned":true`) {
		t.Errorf("inventory: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}

	r = run("orphans")
	if r.code != 0 || r.stdout != `{"operation":"orphans","orphans":[],"status":"success"}`+"\n" {
		t.Errorf("orphans: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	// A server with our labels that no stack holds is reported, and left alone.
	orphan, _, err := h.Client.Server.Create(ctx, hcloud.ServerCreateOpts{Name: "demo-lost-x-main", ServerType: &hcloud.ServerType{Name: "cx22"},
		Image: &hcloud.Image{Name: "debian-12"}, Labels: map[string]string{provider.LabelManagedBy: provider.ManagedByValue, provider.LabelStand: "demo_lost_x"}})
	if err != nil {
		t.Fatal(err)
	}
	r = run("orphans")
	if r.code != 0 || !strings.Contains(r.stdout, fmt.Sprintf(`{"serverId":%d,"name":"demo-lost-x-main","stand":"demo_lost_x"`, orphan.Server.ID)) {
		t.Errorf("orphans with one: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if _, _, err := h.Client.Server.DeleteWithResult(ctx, orphan.Server); err != nil {
		t.Fatal(err)
	}

	r = run("destroy", "demo_demo_two-node")
	if r.code != 0 || r.stdout != `{"changed":true,"id_stand":"demo_demo_two-node","operation":"destroy","status":"success"}`+"\n" {
		t.Fatalf("destroy: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if n := len(h.Servers(t)); n != 0 {
		t.Errorf("%d servers after destroy", n)
	}
	// By path, without the manifest's secrets: nothing left to do, still success.
	noSecrets := map[string]string{}
	for k, v := range vars {
		if !strings.HasPrefix(k, "SECRET_") {
			noSecrets[k] = v
		}
	}
	r = runCLI(t, ctx, newRecorder(noSecrets), "destroy", stand)
	if r.code != 0 || !strings.Contains(r.stdout, `"changed":false`) {
		t.Errorf("second destroy: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
}

func TestEngineCommandErrors(t *testing.T) {
	ctx := context.Background()
	cases := []struct {
		name string
		vars map[string]string
		args []string
		code int
		msg  string
	}{
		{"no token", map[string]string{"STANDS_PASSPHRASE": "p", "STANDS_BACKEND_URL": "file:///nowhere"}, []string{"destroy", "a_b_c"}, 1, "HCLOUD_TOKEN"},
		{"no passphrase", map[string]string{"HCLOUD_TOKEN": "t", "STANDS_BACKEND_URL": "file:///nowhere"}, []string{"destroy", "a_b_c"}, 1, "STANDS_PASSPHRASE"},
		{"nothing set: the Stands Engine's names too", nil, []string{"destroy", "a_b_c"}, 1, "no passphrase: set $STAND__PASSPHRASE as for the Stands Engine, or $STANDS_PASSPHRASE"},
		{"bad id", nil, []string{"destroy", "not-an-id"}, 2, "neither a path nor a stand id"},
		{"nodes mode", map[string]string{"HCLOUD_TOKEN": "t", "STANDS_PASSPHRASE": "p", "STANDS_BACKEND_URL": "file:///nowhere"}, []string{"destroy", "--nodes", "some", "a_b_c"}, 1, "want full or skip"},
		{"several stands", merged(exampleEnv, map[string]string{"STANDS_OWNER": "demo"}), []string{"apply", "../../examples/stands-repo"}, 2, "give one stand"},
		{"no path", nil, []string{"apply"}, 2, "exactly one PATH"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, ctx, newRecorder(c.vars), c.args...)
			if r.code != c.code || !strings.Contains(r.stderr, c.msg) || r.stdout != "" {
				t.Errorf("exit %d (want %d), stdout %q, stderr: %s", r.code, c.code, r.stdout, r.stderr)
			}
		})
	}
}

// TestNoSilentDefaults: the one-shot commands that keep state choose neither its place nor its owner
// for the user. Without a backend each fails naming the Stands Engine's variables and ours, before
// anything is written (the state folder stays empty); a stand whose manifest names no owner fails
// naming $STAND__USER, and so does a command that needs an owner with none given. Each case set
// right (the last column) passes that check: the error is about what it names.
func TestNoSilentDefaults(t *testing.T) {
	ctx := context.Background()
	ownerless := "../../examples/stands-repo/stands/two-node" // the daemon's example: its owner is the daemon's
	creds := map[string]string{"HCLOUD_TOKEN": "t", "STANDS_PASSPHRASE": "p"}
	for _, c := range []struct {
		name  string
		vars  map[string]string
		args  []string
		msg   string
		fixed map[string]string // what makes this check pass
	}{
		{"destroy without a backend", creds, []string{"destroy", "a_b_c"}, "$S3__BUCKET", map[string]string{"STANDS_BACKEND_URL": "file:///nowhere"}},
		{"inventory without a backend", merged(creds, map[string]string{"STAND__USER": "alice"}), []string{"inventory"}, "--backend ($STANDS_BACKEND_URL)", map[string]string{"STANDS_BACKEND_URL": "file:///nowhere"}},
		{"apply without a backend", merged(exampleEnv, creds, map[string]string{"STANDS_OWNER": "demo"}), []string{"apply", ownerless}, "no state backend chosen", map[string]string{"STANDS_BACKEND_URL": "file:///nowhere"}},
		{"apply of a stand without an owner", merged(exampleEnv, creds, map[string]string{"STANDS_BACKEND_URL": "file:///nowhere"}), []string{"apply", ownerless}, "$STAND__USER", map[string]string{"STAND__USER": "alice"}},
		{"destroy by path without an owner", merged(creds, map[string]string{"STANDS_BACKEND_URL": "file:///nowhere"}), []string{"destroy", ownerless}, "$STAND__USER", map[string]string{"STANDS_OWNER": "alice"}},
		{"orphans without an owner", merged(creds, map[string]string{"STANDS_BACKEND_URL": "file:///nowhere"}), []string{"orphans"}, "no owner: give $STAND__USER", map[string]string{"STAND__USER": "alice"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			state := t.TempDir()
			vars := merged(c.vars, map[string]string{"STANDS_STATE_DIR": state, "STANDS_PULUMI_BIN": fakePulumi(t)})
			fixed := merged(c.fixed)
			for _, m := range []map[string]string{vars, fixed} {
				if m["STANDS_BACKEND_URL"] == "file:///nowhere" {
					m["STANDS_BACKEND_URL"] = "file://" + filepath.Join(t.TempDir(), "backend") // made by the command
				}
			}
			r := runCLI(t, ctx, newRecorder(vars), c.args...)
			if r.code != exitError || !strings.Contains(r.stderr, c.msg) || r.stdout != "" {
				t.Errorf("exit %d (want %d), stdout %q, stderr: %s", r.code, exitError, r.stdout, r.stderr)
			}
			if left, _ := os.ReadDir(state); len(left) != 0 {
				t.Errorf("the state folder holds %v after the refusal", left)
			}
			if again := runCLI(t, ctx, newRecorder(merged(vars, fixed)), c.args...); strings.Contains(again.stderr, c.msg) {
				t.Errorf("set right (%v), it still says %q:\n%s", fixed, c.msg, again.stderr)
			}
		})
	}
}
