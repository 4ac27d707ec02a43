package main

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestAdoptCommand: a stand the Stands Engine made — its stack under the same backend, project and
// env, holding the hcloud provider's server, no ownership mark, the server without the reconciler's
// labels — is refused by the reconciler (Blocked, NotOwned); `adopt --dry-run` says what would happen
// and changes nothing; `adopt` takes the server over with its id, zero deletes in Hetzner's call log;
// the reconciler then reports the stand Ready.
func TestAdoptCommand(t *testing.T) {
	pl := testenv.NewPulumi(t)
	h := testenv.StartHetzner(t, "adopt-token")
	lr := newLocalStandsRepo(t)
	lr.commit(map[string]string{standPath("a"): daemonStand("a", 6300)})
	state := t.TempDir()
	vars := map[string]string{"HCLOUD_TOKEN": h.Token, "STANDS_CLOUD_ENDPOINT": h.Endpoint, "STANDS_PASSPHRASE": pl.Passphrase, "STANDS_NODES": "skip",
		"STANDS_PULUMI_BIN": pl.Bin, "STANDS_STATE_DIR": state,
		// the daemon's default backend, chosen for the one-shot commands, which have none
		"STANDS_OWNER": "local", "STANDS_BACKEND_URL": "file://" + filepath.Join(state, "pulumi", "local")}
	for k, v := range exampleEnv {
		vars[k] = v
	}
	ctx := context.Background()
	cli := func(args ...string) result { t.Helper(); return runCLI(t, ctx, newRecorder(vars), args...) }
	once := func() result {
		t.Helper()
		return cli("reconcile", "--once", "--repo", lr.dir, "--drift-interval", "0", "--require-review=false")
	}
	manifest := filepath.Join(lr.dir, standPath("a"))

	// The old engine's stand: made here, then given the old engine's form.
	if r := cli("apply", manifest); r.code != 0 {
		t.Fatalf("apply: exit %d\n%s", r.code, r.stderr)
	}
	srv := standsEngineForm(t, h, filepath.Join(state, "pulumi", "local", ".pulumi", "stacks", "a", "dev.json"), "local-a-dev-main")
	if r := once(); !strings.Contains(r.stdout, `"local_a_dev":"Blocked"`) || lr.status("local_a_dev").Reason != reason.Foreign {
		t.Fatalf("the reconciler over the old engine's stack: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}

	writes := h.Sim.Writes("/servers")
	r := cli("adopt", "--dry-run", manifest)
	if r.code != 0 || !strings.Contains(r.stdout, `"status":"dry-run"`) || !strings.Contains(r.stdout, `"name":"local-a-dev-main"`) || h.Sim.Writes("/servers") != writes {
		t.Fatalf("adopt --dry-run: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if r := cli("adopt", manifest); r.code != 0 || !strings.Contains(r.stdout, `"status":"success"`) || !strings.Contains(r.stdout, filepath.Join(state, "adopted")) {
		t.Fatalf("adopt: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if after := h.Servers(t)["local-a-dev-main"]; after == nil || after.ID != srv.ID || len(h.Servers(t)) != 1 {
		t.Errorf("after adopt: %v (was id %d)", h.Servers(t), srv.ID)
	}
	for _, c := range h.Sim.Calls() {
		if c.Method == http.MethodDelete {
			t.Errorf("Hetzner got a delete: %s", c.Path)
		}
	}
	if r := once(); r.code != 0 || !strings.Contains(r.stdout, `"local_a_dev":"Ready"`) {
		t.Fatalf("the reconciler after adopt: exit %d\nstdout %s\nstderr %s", r.code, r.stdout, r.stderr)
	}
	if s := lr.status("local_a_dev"); s.Phase != reason.Ready || len(s.Nodes) != 1 || s.Nodes[0].ServerID != srv.ID {
		t.Errorf("status after adopt: %+v", s)
	}
}

// standsEngineForm gives a stack this engine made the Stands Engine's form: the hcloud provider's
// servers, no ownership mark, the server unlabelled. It returns the server.
func standsEngineForm(t *testing.T, h *testenv.Hetzner, stack, server string) *hcloud.Server {
	t.Helper()
	data, err := os.ReadFile(stack)
	if err != nil {
		t.Fatal(err)
	}
	old := strings.NewReplacer("stands:index:Server", "hcloud:index/server:Server", "pulumi:providers:stands", "pulumi:providers:hcloud", `"ownedBy"`, `"madeBy"`).Replace(string(data))
	if err := os.WriteFile(stack, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	srv := h.Servers(t)[server]
	if srv == nil {
		t.Fatalf("servers: %v", h.Servers(t))
	}
	if _, _, err := h.Client.Server.Update(context.Background(), srv, hcloud.ServerUpdateOpts{Labels: map[string]string{}}); err != nil {
		t.Fatal(err)
	}
	return srv
}
