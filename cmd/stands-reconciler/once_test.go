package main

import (
	"context"
	"encoding/json"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/internal/testenv"
	"github.com/stands-engine/stands-reconciler/internal/testfs"
	"github.com/stands-engine/stands-reconciler/reconcile"
)

// TestReconcileOnceLocalRepository: `reconcile --once` on a repository on disk in local mode (secrets
// from SECRET_<NAME>, no Vault): the stand is created, its status goes to the stands-status branch
// (the checked-out main is not moved), the full connection record to a 0600 file, and a second run
// commits nothing. A broken stand then fails alone, with file and line, and the exit code says so.
func TestReconcileOnceLocalRepository(t *testing.T) {
	pl := testenv.NewPulumi(t)
	h := testenv.StartHetzner(t, "once-token")
	dir := t.TempDir()
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, plumbing.NewBranchReferenceName("main"))); err != nil {
		t.Fatal(err)
	}
	base, err := testfs.Dir(filepath.Join(testenv.RepoRoot(), "examples", "stands-repo"))
	if err != nil {
		t.Fatal(err)
	}
	for p := range base {
		if strings.HasPrefix(p, "stands/") {
			delete(base, p)
		}
	}
	if err := testfs.WriteDir(dir, base); err != nil {
		t.Fatal(err)
	}
	commit := func(files map[string]string) string {
		t.Helper()
		for p, c := range files {
			if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, p), []byte(c), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		wt, _ := repo.Worktree()
		if err := wt.AddGlob("."); err != nil {
			t.Fatal(err)
		}
		hash, err := wt.Commit("change", &git.CommitOptions{Author: &object.Signature{Name: "dev", Email: "dev@example.test", When: time.Now()}})
		if err != nil {
			t.Fatal(err)
		}
		return hash.String()
	}
	mainHead := commit(map[string]string{standPath("a"): daemonStand("a", 6300)})
	state := t.TempDir()
	vars := map[string]string{"HCLOUD_TOKEN": h.Token, "HCLOUD_ENDPOINT": h.Endpoint, "STANDS_PASSPHRASE": pl.Passphrase, "STANDS_NODES": "skip",
		"STANDS_PULUMI_BIN": pl.Bin, "STANDS_STATE_DIR": state}
	for k, v := range exampleEnv {
		vars[k] = v
	}
	once := func() result {
		t.Helper()
		return runCLI(t, context.Background(), newRecorder(vars), "reconcile", "--once", "--repo", dir, "--drift-interval", "0")
	}
	statusHead := func() string {
		ref, err := repo.Reference(plumbing.NewBranchReferenceName("stands-status"), true)
		if err != nil {
			t.Fatalf("status branch: %v", err)
		}
		return ref.Hash().String()
	}
	statusOf := func(id string) reconcile.Status {
		t.Helper()
		snap, err := gitsource.New(dir, "stands-status").Fetch(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		data, err := fs.ReadFile(snap.Files, "status/"+id+".json")
		if err != nil {
			t.Fatal(err)
		}
		var s reconcile.Status
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatal(err)
		}
		return s
	}

	r := once()
	if r.code != 0 || !strings.Contains(r.stdout, `"stands":{"local_a_dev":"Ready"}`) {
		t.Fatalf("reconcile --once: exit %d\nstdout: %s\nstderr: %s", r.code, r.stdout, r.stderr)
	}
	if s := statusOf("local_a_dev"); s.Phase != reconcile.Ready || s.LastSuccessfulCommit != mainHead || len(s.Nodes) != 1 {
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
	if s := statusOf("local_b_dev"); s.Phase != reconcile.Failed || !strings.Contains(s.Message, "stands/b/stand.yml:") {
		t.Errorf("broken stand: %+v", s)
	}
}

// TestCredentialFileRotation: a credential given as *_FILE is read again when the file is replaced,
// as systemd and secret managers do (write elsewhere, rename over).
func TestCredentialFileRotation(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "token")
	if err := os.WriteFile(file, []byte("first\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	c, err := newCredential(ctx, newRecorder(map[string]string{"T_FILE": file}).getenv, "T", slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	if v, err := c.Value(); v != "first" || err != nil {
		t.Fatalf("value %q %v", v, err)
	}
	tmp := filepath.Join(dir, ".token.new")
	if err := os.WriteFile(tmp, []byte("second\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, file); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		if v, _ := c.Value(); v == "second" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the rotated credential was not read again")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if _, err := newCredential(ctx, newRecorder(map[string]string{"T_FILE": filepath.Join(dir, "missing")}).getenv, "T", slog.New(slog.DiscardHandler)); err == nil || !strings.Contains(err.Error(), "T_FILE") {
		t.Errorf("a missing credential file: %v", err)
	}
}
