package engine

import (
	"context"
	"errors"
	"net/http"
	"os"
	"strings"
	"testing"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// OldEngineStack turns the stand's stack into one as the Stands Engine left it: its servers are the
// hcloud provider's, no ownership mark, and the servers carry none of the reconciler's labels.
func oldEngineStack(t *testing.T, f *fixture, ref stands.StackRef) {
	t.Helper()
	ctx := context.Background()
	st, err := f.eng.stack(ctx, ref, func(*pulumi.Context) error { return nil }, false)
	if err != nil {
		t.Fatal(err)
	}
	dep, err := st.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old := strings.NewReplacer("stands:index:Server", "hcloud:index/server:Server", "pulumi:providers:stands", "pulumi:providers:hcloud",
		`"ownedBy"`, `"madeBy"`).Replace(string(dep.Deployment))
	dep.Deployment = []byte(old)
	if err := st.Import(ctx, dep); err != nil {
		t.Fatal(err)
	}
	for _, srv := range f.Servers(t) {
		if _, _, err := f.Client.Server.Update(ctx, srv, hcloud.ServerUpdateOpts{Labels: map[string]string{"made-by": "stands-engine"}}); err != nil {
			t.Fatal(err)
		}
	}
}

// TestAdopt: an old-engine stack is refused by apply; adopt takes its servers over with their ids,
// deleting nothing in Hetzner and keeping the old state in an archive; a dry run changes nothing; a
// server the manifest would replace is refused.
func TestAdopt(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/two-node/stand.yml")
	if _, err := f.eng.Apply(ctx, stand, false); err != nil {
		t.Fatal(err)
	}
	ref := stands.StackRef{Project: "demo", Env: "two-node"}
	oldEngineStack(t, f, ref)
	before := map[string]int64{}
	for name, srv := range f.Servers(t) {
		before[name] = srv.ID
	}
	if _, err := f.eng.Apply(ctx, stand, false); Classify(err) != reason.NotOwned {
		t.Fatalf("apply over the old engine's stack: %v", err)
	}
	archives := t.TempDir()

	// A manifest that would replace a server: refused, nothing changed.
	bigger := load(t, examples(t, "-- stands/two-node/stand.yml --\n"+strings.Replace(readExample(t, "stands/two-node/stand.yml"),
		"from_dep_manifest: ../../bases/common.yml\n", "from_dep_manifest: ../../bases/common.yml\nnode_profiles:\n  small:\n    type_serv: cx32\n", 1)), "stands/two-node/stand.yml")
	if _, err := f.eng.Adopt(ctx, bigger, archives, false); !errors.Is(err, ErrNotAdoptable) || !strings.Contains(err.Error(), "type cx22, the manifest's node db says cx32") {
		t.Fatalf("adopt with another server type: %v", err)
	}
	// A dry run says what it would do and changes nothing.
	writes := f.Sim.Writes("/servers")
	plan, err := f.eng.Adopt(ctx, stand, archives, true)
	if err != nil || len(plan.Servers) != 2 || plan.Archive != "" {
		t.Fatalf("dry run: %+v %v", plan, err)
	}
	if n := f.Sim.Writes("/servers"); n != writes {
		t.Errorf("the dry run wrote to Hetzner: %d calls", n-writes)
	}
	if entries, _ := os.ReadDir(archives); len(entries) != 0 {
		t.Errorf("the dry run archived: %v", entries)
	}

	a, err := f.eng.Adopt(ctx, stand, archives, false)
	if err != nil {
		t.Fatalf("adopt: %v\n%s", err, f.logs.String())
	}
	for name, srv := range f.Servers(t) {
		if before[name] != srv.ID || srv.Labels["stands.dev/managed-by"] != "stands-reconciler" || srv.Labels["made-by"] != "stands-engine" {
			t.Errorf("%s after the adoption: id %d (was %d), labels %v", name, srv.ID, before[name], srv.Labels)
		}
	}
	if len(f.Servers(t)) != 2 {
		t.Errorf("servers after the adoption: %v", f.Servers(t))
	}
	for _, c := range f.Sim.Calls() {
		if c.Method == http.MethodDelete {
			t.Errorf("Hetzner got a delete: %s %s", c.Method, c.Path)
		}
	}
	st, err := os.Stat(a.Archive)
	data, _ := os.ReadFile(a.Archive)
	if err != nil || st.Mode().Perm() != 0o600 || !strings.Contains(string(data), "hcloud:index/server:Server") {
		t.Errorf("archive %s: %v, mode %v", a.Archive, err, st)
	}
	// Ours now: an apply has nothing to do; adopting again is refused.
	if res, err := f.eng.Apply(ctx, stand, false); err != nil || res.Changed {
		t.Errorf("apply after the adoption: %+v %v", res, err)
	}
	if _, err := f.eng.Adopt(ctx, stand, archives, true); !errors.Is(err, ErrNotAdoptable) {
		t.Errorf("adopting an adopted stack: %v", err)
	}
}

func readExample(t *testing.T, name string) string {
	t.Helper()
	data, err := os.ReadFile("../examples/stands-repo/" + name)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}
