package main

import (
	"context"
	"encoding/json"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	vaultapi "github.com/hashicorp/vault/api"

	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestReconcileOnceLocalRepository: `reconcile --once` on a repository on disk in local mode (secrets
// from SECRET_<NAME>, no Vault): the stand is created, its status goes to the stands-status branch
// (the checked-out main is not moved), the full connection record to a 0600 file, and a second run
// commits nothing. A broken stand then fails alone, with file and line, and the exit code says so.
func TestReconcileOnceLocalRepository(t *testing.T) {
	pl := testenv.NewPulumi(t)
	h := testenv.StartHetzner(t, "once-token")
	lr := newLocalStandsRepo(t)
	dir, repo, commit, statusHead, statusOf := lr.dir, lr.repo, lr.commit, lr.statusHead, lr.status
	mainHead := commit(map[string]string{standPath("a"): daemonStand("a", 6300)})
	state := t.TempDir()
	vars := map[string]string{"HCLOUD_TOKEN": h.Token, "STANDS_CLOUD_ENDPOINT": h.Endpoint, "STANDS_PASSPHRASE": pl.Passphrase, "STANDS_NODES": "skip",
		"STANDS_PULUMI_BIN": pl.Bin, "STANDS_STATE_DIR": state}
	for k, v := range exampleEnv {
		vars[k] = v
	}
	once := func() result {
		t.Helper()
		return runCLI(t, context.Background(), newRecorder(vars), "reconcile", "--once", "--repo", dir, "--drift-interval", "0", "--require-review=false")
	}
	r := once()
	if r.code != 0 || !strings.Contains(r.stdout, `"stands":{"local_a_dev":"Ready"}`) {
		t.Fatalf("reconcile --once: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if s := statusOf("local_a_dev"); s.Phase != reason.Ready || s.LastSuccessfulCommit != mainHead || len(s.Nodes) != 1 {
		t.Errorf("status: %+v", s)
	}
	if ref, _ := repo.Reference(plumbing.NewBranchReferenceName("main"), true); ref.Hash().String() != mainHead {
		t.Error("main moved")
	}
	conn := filepath.Join(state, "connections", "local_a_dev.json")
	if st, err := os.Stat(conn); err != nil || st.Mode().Perm() != 0o600 {
		t.Errorf("connection file: %v %v", st, err)
	}
	if data, _ := os.ReadFile(conn); !strings.Contains(string(data), exampleEnv["SECRET_KV_PASSWORD"]) {
		t.Errorf("the connection file is not the full record:\n%s", data)
	}
	if strings.Contains(r.stderr, exampleEnv["SECRET_KV_PASSWORD"]) || strings.Contains(r.stdout, exampleEnv["SECRET_KV_PASSWORD"]) {
		t.Error("the run printed a secret")
	}
	before := statusHead()
	if r := once(); r.code != 0 || statusHead() != before {
		t.Errorf("second run: exit %d, status branch moved: %v\n%s", r.code, statusHead() != before, r.stderr)
	}

	commit(map[string]string{standPath("b"): strings.Replace(daemonStand("b", 6301), "profile: small", "profile: huge", 1)})
	r = once()
	if r.code != exitError || !strings.Contains(r.stdout, `"status":"failure"`) || !strings.Contains(r.stdout, `"local_a_dev":"Ready"`) {
		t.Fatalf("with a broken stand: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if s := statusOf("local_b_dev"); s.Phase != reason.Failed || !strings.Contains(s.Message, "stands/b/stand.yml:") {
		t.Errorf("broken stand: %+v", s)
	}
}

// localStandsRepo is a Git repository on disk for `reconcile --once`: the example's bases and app
// packages on main, and the stands a test commits.
type localStandsRepo struct {
	t    *testing.T
	dir  string
	repo *git.Repository
}

func newLocalStandsRepo(t *testing.T) *localStandsRepo {
	t.Helper()
	dir := t.TempDir()
	return &localStandsRepo{t: t, dir: dir, repo: testenv.InitStandsRepo(t, dir)}
}

// commit writes files, removes the paths in remove and commits everything on main.
func (l *localStandsRepo) commit(files map[string]string, remove ...string) string {
	l.t.Helper()
	return testenv.CommitAll(l.t, l.repo, l.dir, "change", files, remove...)
}

// statusHead is the head of the stands-status branch, where `reconcile --once` on a local
// repository commits its status.
func (l *localStandsRepo) statusHead() string {
	ref, err := l.repo.Reference(plumbing.NewBranchReferenceName("stands-status"), true)
	if err != nil {
		l.t.Fatalf("status branch: %v", err)
	}
	return ref.Hash().String()
}

// status reads a stand's committed status file.
func (l *localStandsRepo) status(id string) reconcile.Status {
	t := l.t
	t.Helper()
	snap, err := gitsource.New(l.dir, "stands-status").Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	data, err := fs.ReadFile(snap.Files, stands.StatusPath(id))
	if err != nil {
		t.Fatal(err)
	}
	var s reconcile.Status
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return s
}

// TestReconcileOnceVaultTokenPastMaxTTL: a Vault token past its max TTL is an outage, not bad input.
// `reconcile --once` with it applies and destroys nothing — a changed stand and a removed one wait,
// saying VaultUnavailable — and the next run, with a new token in the same file, catches up. The
// tokens carry only the policy the docs give operators.
func TestReconcileOnceVaultTokenPastMaxTTL(t *testing.T) {
	pl := testenv.NewPulumi(t)
	h := testenv.StartHetzner(t, "once-token")
	v := testenv.StartVault(t)
	lr := newLocalStandsRepo(t)
	ctx := context.Background()
	admin := v.Client(t)
	if err := admin.Sys().PutPolicyWithContext(ctx, "stands-reconciler", testenv.ReconcilerPolicy(t)); err != nil {
		t.Fatal(err)
	}
	for name, env := range map[string]string{"kv-password": "SECRET_KV_PASSWORD", "registry-password": "SECRET_REGISTRY_PASSWORD"} {
		if _, err := admin.KVv2("secret").Put(ctx, "stands/"+name, map[string]any{"value": exampleEnv[env]}); err != nil {
			t.Fatal(err)
		}
	}
	token := func(ttl, maxTTL string) string {
		s, err := admin.Auth().Token().CreateWithContext(ctx, &vaultapi.TokenCreateRequest{
			Policies: []string{"stands-reconciler"}, NoDefaultPolicy: true, TTL: ttl, ExplicitMaxTTL: maxTTL})
		if err != nil {
			t.Fatal(err)
		}
		return s.Auth.ClientToken
	}
	tokenFile := filepath.Join(t.TempDir(), "vault-token")
	setToken := func(tok string) {
		t.Helper()
		if err := os.WriteFile(tokenFile+".new", []byte(tok+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tokenFile+".new", tokenFile); err != nil {
			t.Fatal(err)
		}
	}
	wrapper, counts := testenv.CountingPulumi(t, pl.Bin)
	vars := map[string]string{"HCLOUD_TOKEN": h.Token, "STANDS_CLOUD_ENDPOINT": h.Endpoint, "STANDS_PASSPHRASE": pl.Passphrase, "STANDS_NODES": "skip",
		"STANDS_PULUMI_BIN": wrapper, "STANDS_STATE_DIR": t.TempDir(), "VAULT_ADDR": v.Addr, "VAULT_TOKEN_FILE": tokenFile}
	once := func(want int) result {
		t.Helper()
		r := runCLI(t, ctx, newRecorder(vars), "reconcile", "--once", "--repo", lr.dir, "--drift-interval", "0", "--require-review=false")
		if r.code != want {
			t.Fatalf("reconcile --once: exit %d, want %d\nstdout: %s\nstderr: %s", r.code, want, r.stdout, r.stderr)
		}
		return r
	}

	setToken(token("1h", ""))
	lr.commit(map[string]string{standPath("a"): daemonStand("a", 6300), standPath("b"): daemonStand("b", 6301), standPath("p"): plainStand("p")})
	once(exitOK)
	for _, id := range []string{"local_a_dev", "local_b_dev", "local_p_dev"} {
		if s := lr.status(id); s.Phase != reason.Ready {
			t.Fatalf("%s before the outage: %+v", id, s)
		}
	}
	servers := len(h.Servers(t))

	changed := lr.commit(map[string]string{standPath("a"): daemonStand("a", 6399)}, "stands/b")
	expiring := token("1s", "2s")
	setToken(expiring)
	time.Sleep(2500 * time.Millisecond)
	ups, deletes := testenv.CountUps(counts), serverDeletes(h)
	r := once(exitOK)
	if s := lr.status("local_a_dev"); s.Reason != reason.VaultUnavailable || s.LastSuccessfulCommit == changed {
		t.Errorf("the changed stand with a token past its max TTL: %+v", s)
	}
	// Only the hold stands in the way of b's destroy: one destroy per cycle is always allowed, and p,
	// which needs no secret, keeps the guard against removing every stand out of it.
	if s := lr.status("local_b_dev"); s.Phase != reason.Blocked || s.Reason != reason.VaultUnavailable {
		t.Errorf("the removed stand with a token past its max TTL: %+v, want Blocked by VaultUnavailable", s)
	}
	if s := lr.status("local_p_dev"); s.Phase != reason.Ready {
		t.Errorf("p, which needs no secret, with a token past its max TTL: %+v", s)
	}
	if !strings.Contains(r.stderr, "refuses the reconciler's token") {
		t.Errorf("the log does not say Vault refuses the token:\n%s", r.stderr)
	}
	if got := testenv.CountUps(counts) - ups; got != 0 {
		t.Errorf("%d pulumi up with a token past its max TTL", got)
	}
	if got, n := serverDeletes(h)-deletes, len(h.Servers(t)); got != 0 || n != servers {
		t.Errorf("%d server deletions, %d servers of %d left, with a token past its max TTL", got, n, servers)
	}
	if strings.Contains(r.stdout+r.stderr, expiring) {
		t.Error("the run printed the token")
	}

	setToken(token("1h", ""))
	once(exitOK)
	if s := lr.status("local_a_dev"); s.Phase != reason.Ready || s.LastSuccessfulCommit != changed {
		t.Errorf("the changed stand with a new token: %+v", s)
	}
	if s := lr.status("local_b_dev"); s.Phase != reason.Destroyed || s.LastSuccessfulCommit != changed {
		t.Errorf("the removed stand with a new token: %+v", s)
	}
	if got := serverDeletes(h) - deletes; got != 1 {
		t.Errorf("%d server deletions after the new token, want 1 (b's)", got)
	}
}
