package engine

import (
	"context"
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
