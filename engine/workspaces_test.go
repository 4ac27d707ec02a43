package engine

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stands-engine/stands-reconciler/stands"
)

// TestNoWorkspaceLeft: every operation removes the workspace folders it made, and none is made in
// the system's temporary folder (the Automation API's default leaves one per call, forever).
func TestNoWorkspaceLeft(t *testing.T) {
	tmp := t.TempDir()
	t.Setenv("TMPDIR", tmp)
	f := newFixture(t)
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/single/stand.yml")
	if _, err := f.eng.Inventory(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.PreviewNew(ctx, stand); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.Apply(ctx, stand, false); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.Preview(ctx, stand); err != nil {
		t.Fatal(err)
	}
	if _, err := f.eng.Destroy(ctx, stands.StackRef{Project: "demo", Env: "single"}); err != nil {
		t.Fatal(err)
	}
	left, _ := filepath.Glob(filepath.Join(f.eng.cfg.WorkDir, "workspaces", "*"))
	leaked, _ := filepath.Glob(filepath.Join(tmp, "pulumi_auto*"))
	if len(left) != 0 || len(leaked) != 0 {
		t.Errorf("workspace folders left: %v; in the temporary folder: %v", left, leaked)
	}
}

// TestOrphanWorkspacesRemoved: a start removes the workspace folders (and the credential files in
// them) of processes that ended without removing them, and of an older version's naming; those of
// this process and of a process still running stay.
func TestOrphanWorkspacesRemoved(t *testing.T) {
	ended := exec.Command("true")
	if err := ended.Run(); err != nil {
		t.Fatal(err)
	}
	work := t.TempDir()
	base := filepath.Join(work, "workspaces")
	names := map[string]bool{ // name → stays
		fmt.Sprintf("ws-%d-1", os.Getpid()):             true,
		"ws-1-2":                                        true, // init runs
		fmt.Sprintf("ws-%d-3", ended.Process.Pid):       false,
		"ws-4242424":                                    false, // an older version's
		fmt.Sprintf("ws-%d-5", ended.Process.Pid) + "x": false,
	}
	for name := range names {
		if _, err := secretFile(filepath.Join(base, name), "passphrase", "left-behind"); err != nil {
			t.Fatal(err)
		}
	}
	removeOrphanWorkspaces(work, slog.New(slog.DiscardHandler))
	for name, stays := range names {
		_, err := os.Stat(filepath.Join(base, name))
		if got := err == nil; got != stays {
			t.Errorf("%s: there %v, want %v", name, got, stays)
		}
	}
}
