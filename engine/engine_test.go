package engine

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto/optlist"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"

	"github.com/stands-engine/stands-reconciler/engine/cloud"
	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/fakecloud"
	"github.com/stands-engine/stands-reconciler/test/providertest"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/testfs"
)

// TestMain lets the test binary serve the provider: the engine runs it through the
// pulumi-resource-stands link, exactly as it runs the reconciler's own binary in production.
// It knows the fake second cloud too, which the engine's story also runs on.
func TestMain(m *testing.M) { providertest.Main(m, provider.WithCloud(fakecloud.Name, fakecloud.Open)) }

const hcloudToken = "hc-token-SENTINEL-7d2e"

var exampleSecrets = map[string]string{
	"SECRET_REGISTRY_PASSWORD": "reg-SENTINEL-pass",
	"SECRET_KV_PASSWORD":       "kv-SENTINEL-pass",
}

// syncBuffer collects the engine's log records across its goroutines.
type syncBuffer = testenv.Buffer

type fixture struct {
	*testenv.Hetzner                   // nil on the fake cloud
	fake             *fakecloud.Server // nil on Hetzner
	cloud            cloud.Cloud       // the project, opened as the engine opens it
	eng              *Engine
	backend          string
	logs             *syncBuffer
}

// newFixture: the real Pulumi CLI with a file:// backend, a simulated Hetzner project, and an engine
// serving the provider from this test binary, in servers-only mode (the simulated servers are not
// machines).
func newFixture(t *testing.T) *fixture {
	return newFixtureWith(t, func(c *Config) { c.SkipNodes = true })
}

// newFixtureWith is newFixture with the engine's configuration tuned and the simulator's options.
func newFixtureWith(t *testing.T, tune func(*Config), opts ...hcloudsim.Option) *fixture {
	t.Helper()
	h := testenv.StartHetzner(t, hcloudToken, opts...)
	return startEngine(t, &fixture{Hetzner: h}, func(c *Config) { c.CloudEndpoint = h.Endpoint; tune(c) })
}

// newFixtureOn is newFixture on the cloud named: Hetzner's (hcloudsim) or the fake second cloud,
// with the engine's configuration tuned by each of tune.
func newFixtureOn(t *testing.T, name string, tune ...func(*Config)) *fixture {
	t.Helper()
	all := func(c *Config) {
		c.SkipNodes = true
		for _, f := range tune {
			f(c)
		}
	}
	if name != fakecloud.Name {
		return newFixtureWith(t, all)
	}
	fc := fakecloud.Start(t, hcloudToken)
	return startEngine(t, &fixture{fake: fc}, func(c *Config) {
		c.Cloud, c.CloudEndpoint = fakecloud.Name, fc.URL
		c.Clouds = provider.Clouds{fakecloud.Name: fakecloud.Open}
		all(c)
	})
}

// clouds are the clouds the engine's tests of what it asks of a cloud run on: Hetzner's, through
// hcloudsim, and the fake second cloud no production code names, which keeps the seam true
// (docs/architecture.md#where-do-i-add). Tests of Hetzner's own behaviour (its faults, its hanging
// endpoint, its API's calls) run on hcloudsim alone.
var clouds = []string{provider.DefaultCloud, fakecloud.Name}

// onEachCloud runs test once per cloud of clouds, each on a fixture of its own.
func onEachCloud(t *testing.T, test func(t *testing.T, f *fixture), tune ...func(*Config)) {
	for _, name := range clouds {
		t.Run(name, func(t *testing.T) { test(t, newFixtureOn(t, name, tune...)) })
	}
}

// startEngine makes f's engine: the real Pulumi CLI with a file:// backend, the provider served from
// this test binary.
func startEngine(t *testing.T, f *fixture, tune func(*Config)) *fixture {
	t.Helper()
	pl := testenv.NewPulumi(t)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f.logs = &syncBuffer{}
	cfg := Config{PulumiBin: pl.Bin, BackendURL: pl.BackendURL, Passphrase: pl.Passphrase, CloudToken: hcloudToken,
		ProviderBin: exe, WorkDir: t.TempDir(), Log: slog.New(slog.NewJSONHandler(f.logs, nil))}
	tune(&cfg)
	if f.eng, err = New(cfg); err != nil {
		t.Fatal(err)
	}
	if f.cloud, err = cfg.Clouds.Open(cfg.Cloud, hcloudToken, cfg.CloudEndpoint); err != nil {
		t.Fatal(err)
	}
	f.backend = strings.TrimPrefix(pl.BackendURL, "file://")
	return f
}

// The cloud as the story on each cloud reads it.

// servers are the project's servers by name, as the cloud's API shows them.
func (f *fixture) servers(t *testing.T) map[string]*cloud.Server {
	t.Helper()
	all, err := f.cloud.Servers(context.Background(), nil)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]*cloud.Server{}
	for _, s := range all {
		out[s.Name] = s
	}
	return out
}

// userData is what a server was created with, which no API shows: the simulator's or the fake's record.
func (f *fixture) userData(id int64) string {
	if f.fake != nil {
		return f.fake.UserData(id)
	}
	return f.Machine.Servers()[id].UserData
}

// writes counts the cloud's calls that changed something.
func (f *fixture) writes() int {
	if f.fake != nil {
		return f.fake.Writes()
	}
	return f.Sim.Writes("")
}

// deletes counts the cloud's deletes, of servers or anything else.
func (f *fixture) deletes() int {
	if f.fake != nil {
		return f.fake.Deletes()
	}
	n := 0
	for _, c := range f.Sim.Calls() {
		if c.Method == http.MethodDelete {
			n++
		}
	}
	return n
}

// running says whether the server is on.
func (f *fixture) running(t *testing.T, id int64) bool {
	t.Helper()
	if f.fake != nil {
		return f.fake.On(id)
	}
	s, _, err := f.Client.Server.GetByID(context.Background(), id)
	if err != nil {
		t.Fatal(err)
	}
	return s != nil && s.Status == hcloud.ServerStatusRunning
}

// load validates a stand of the example repository (optionally overlaid) and computes its hash.
func load(t *testing.T, fsys fs.FS, file string) stands.Input {
	t.Helper()
	return loadWith(t, fsys, file, exampleSecrets)
}

// loadWith is load with the given SECRET_* values.
func loadWith(t *testing.T, fsys fs.FS, file string, secrets map[string]string) stands.Input {
	t.Helper()
	res, err := manifest.Preflight(context.Background(), fsys, file, manifest.PreflightOptions{
		LoadOptions: manifest.LoadOptions{DefaultOwner: "demo"},
		Secrets:     manifest.EnvSource{Lookup: func(k string) (string, bool) { v, ok := secrets[k]; return v, ok }},
	})
	if err != nil {
		t.Fatalf("preflight: %v", err)
	}
	h, err := manifest.SpecHash(fsys, res.Stand, res.Secrets, "stands-test-passphrase")
	if err != nil {
		t.Fatal(err)
	}
	return stands.Input{FS: fsys, Stand: res.Stand, Secrets: res.Secrets, SpecHash: h}
}

func examples(t *testing.T, archive string) fs.FS {
	t.Helper()
	base, err := testfs.Dir("../examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	fsys, err := testfs.Overlay(base, testfs.Parse(archive))
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

// TestApplyDestroyTwoNode is the engine's end-to-end story on the two-node example, on each cloud:
// Hetzner's (hcloudsim) and the fake second cloud (test/fakecloud), which proves the seam: the engine
// and its provider run on a cloud no production code names.
func TestApplyDestroyTwoNode(t *testing.T) {
	for _, c := range []struct{ name, currency string }{{provider.DefaultCloud, "EUR"}, {fakecloud.Name, "USD"}} {
		t.Run(c.name, func(t *testing.T) { applyDestroyTwoNode(t, newFixtureOn(t, c.name), c.currency) })
	}
}

func applyDestroyTwoNode(t *testing.T, f *fixture, currency string) {
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/two-node/stand.yml")

	// 0. Plans before the stand exists: its preview creates nothing, neither a stack nor a server.
	setup := f.writes() // the project's network and SSH key
	if _, err := f.eng.Preview(ctx, stand); !errors.Is(err, ErrNoStack) {
		t.Fatalf("preview of a stand without a stack: %v", err)
	}
	plan, err := f.eng.PreviewNew(ctx, stand)
	if err != nil {
		t.Fatalf("preview of a new stand: %v\n%s", err, f.logs)
	}
	want := []stands.Step{{Op: "create", Node: "db", ServerName: "demo-demo-two-node-db", ServerType: "cx22", Location: "hel1"},
		{Op: "create", Node: "web", ServerName: "demo-demo-two-node-web", ServerType: "cx22", Location: "hel1"}}
	sort.Slice(plan.Steps, func(i, j int) bool { return plan.Steps[i].Node < plan.Steps[j].Node })
	if !reflect.DeepEqual(plan.Steps, want) {
		t.Errorf("planned steps %+v, want %+v", plan.Steps, want)
	}
	if inv, err := f.eng.Inventory(ctx); err != nil || len(inv) != 0 {
		t.Errorf("the backend holds %d stacks after a preview (%v)", len(inv), err)
	}
	if n := f.writes() - setup; n != 0 {
		t.Errorf("the preview made %d cloud write calls", n)
	}
	prices, err := f.eng.Prices(ctx)
	if p, ok := prices.Of("cx22", "hel1"); err != nil || !ok || p.Monthly <= 0 || p.Currency != currency {
		t.Errorf("price of cx22 in hel1: %+v %v (%v)", p, ok, err)
	}

	// 1. Apply: two servers, named, labelled, in the network, with their cloud-init.
	res, err := f.eng.Apply(ctx, stand, false)
	if err != nil {
		t.Fatalf("apply: %v\nlogs:\n%s", err, f.logs)
	}
	if !res.Changed || res.Changes["create"] != 2 {
		t.Fatalf("first apply: changed %v, changes %v", res.Changed, res.Changes)
	}
	srvs := f.servers(t)
	if len(srvs) != 2 {
		t.Fatalf("%d servers, want 2: %v", len(srvs), srvs)
	}
	for _, node := range []string{"db", "web"} {
		s := srvs["demo-demo-two-node-"+node]
		if s == nil {
			t.Fatalf("no server for node %s: %v", node, srvs)
		}
		if s.Labels[provider.LabelManagedBy] != provider.ManagedByValue || s.Labels[provider.LabelStand] != "demo_demo_two-node" || s.Labels["stands.dev/node"] != node {
			t.Errorf("%s labels %v", s.Name, s.Labels)
		}
		if len(s.Private) != 1 || s.Type != "cx22" || s.Location != "hel1" {
			t.Errorf("%s: nets %v type %s location %s", s.Name, s.Private, s.Type, s.Location)
		}
		// The engine's part (the host key) and the stand's template; printed never: it holds a key.
		ud := f.userData(s.ID)
		if !strings.HasPrefix(ud, "Content-Type: multipart/mixed") || !strings.Contains(ud, "hostname: "+s.Name) ||
			!strings.Contains(ud, "10.0.0.0/16") || !strings.Contains(ud, "ssh_keys:\n  ed25519_private:") {
			t.Errorf("%s user data is not the host key part and the stand's cloud-init (%d bytes)", s.Name, len(ud))
		}
	}
	if len(res.Nodes) != 2 || res.Nodes[0].PrivateIP == "" || res.Nodes[0].PublicIPv4 == "" {
		t.Errorf("nodes %+v", res.Nodes)
	}
	if !strings.Contains(string(res.Connection), `"id_stand":"demo_demo_two-node"`) || !strings.Contains(string(res.Connection), exampleSecrets["SECRET_KV_PASSWORD"]) {
		t.Errorf("connection record %s", res.Connection)
	}
	if strings.Contains(string(res.Masked), "SENTINEL") || !strings.Contains(string(res.Masked), `"password":"***"`) {
		t.Errorf("masked connection %s", res.Masked)
	}

	// 2. Unchanged spec: no Pulumi run at all; forced: an up with zero changes and no Hetzner write.
	if res, err := f.eng.Apply(ctx, stand, false); err != nil || res.Changed {
		t.Fatalf("no-op apply: %v %+v", err, res)
	}
	writes := f.writes()
	res, err = f.eng.Apply(ctx, stand, true)
	if err != nil {
		t.Fatalf("forced apply: %v", err)
	}
	if res.Changed || res.Changes["same"] == 0 || res.Changes["create"]+res.Changes["update"]+res.Changes["replace"]+res.Changes["delete"] != 0 {
		t.Errorf("forced apply of an unchanged stand: %+v", res.Changes)
	}
	if got := f.writes(); got != writes {
		t.Errorf("forced apply made %d cloud write calls", got-writes)
	}

	// 3. One node on a bigger server type: exactly that server changes.
	bigger := load(t, examples(t, `-- stands/two-node/stand.yml --
from_dep_manifest: ../../bases/common.yml
stand:
  project: demo
  env: two-node
node_profiles:
  big:
    location: hel1
    type_serv: cx32
    image: debian-12
    network: stands-net
    cloud-init: ../../bases/cloud-init.yaml.tmpl
nodes:
  db:
    profile: small
    apps: [kv/cache]
  web:
    profile: big
    apps: [web/front]
apps:
  kv:
    instances:
      cache: {}
  web:
    package: ../../apps/web
    registry: local
    instances:
      front:
        preferences:
          image: registry.example.test/stands/web:1.4
          port: 8080
          backend_app: kv
          backend_instance: cache
          greeting: "Hello from the two-node stand"
`), "stands/two-node/stand.yml")
	plan, err = f.eng.Preview(ctx, bigger)
	if err != nil || len(plan.Steps) != 1 || plan.Steps[0] != (stands.Step{Op: "update", Node: "web", ServerName: "demo-demo-two-node-web",
		ServerType: "cx32", OldServerType: "cx22", Location: "hel1", OldLocation: "hel1", Changed: "serverType"}) {
		t.Errorf("preview of a bigger web server: %+v %v", plan, err)
	}
	if got, err := f.eng.StandServers(ctx, "demo_demo_two-node"); err != nil || len(got) != 2 || got[1] != (stands.Server{Name: "demo-demo-two-node-web", ServerType: "cx22", Location: "hel1"}) {
		t.Errorf("stand servers: %+v %v", got, err)
	}
	res, err = f.eng.Apply(ctx, bigger, false)
	if err != nil {
		t.Fatalf("apply with a bigger web server: %v\n%s", err, f.logs)
	}
	if res.Changes["update"] != 1 || res.Changes["same"] != 1 || len(res.Changes) != 2 {
		t.Errorf("changes %v, want exactly one server resized", res.Changes)
	}
	after := f.servers(t)
	if after["demo-demo-two-node-db"].ID != srvs["demo-demo-two-node-db"].ID {
		t.Error("the db server changed")
	}
	// Resized in place: the same server (its disk and addresses), the new type, running again.
	if w := after["demo-demo-two-node-web"]; w == nil || w.Type != "cx32" || w.ID != srvs["demo-demo-two-node-web"].ID || !f.running(t, w.ID) {
		t.Errorf("web server %+v", w)
	}

	// 4. Destroy: no servers, no stack; again: nothing to do. A server with the stand's labels
	// that no stack holds — what a create interrupted before the provider recorded it leaves — goes
	// too; another stand's does not.
	for name, standID := range map[string]string{"demo-demo-two-node-extra": "demo_demo_two-node", "demo-demo-other-main": "demo_demo_other"} {
		if _, err := f.cloud.CreateServer(ctx, cloud.CreateOptions{Name: name, Type: "cx22", Image: "debian-12", Location: "hel1",
			Labels: map[string]string{provider.LabelManagedBy: provider.ManagedByValue, provider.LabelStand: standID}}); err != nil {
			t.Fatal(err)
		}
	}
	ref := stands.StackRef{Project: "demo", Env: "two-node"}
	res, err = f.eng.Destroy(ctx, ref)
	if err != nil || res.StandID != "demo_demo_two-node" || res.Changes["delete"] != 2 {
		t.Fatalf("destroy: %v %+v", err, res)
	}
	if left := f.servers(t); len(left) != 1 || left["demo-demo-other-main"] == nil {
		t.Errorf("servers left after destroy: %v, want only another stand's", left)
	}
	if !strings.Contains(f.logs.String(), "deleted a server an interrupted create had left outside the stack") {
		t.Error("the swept server is not logged")
	}
	if _, err := os.Stat(filepath.Join(f.backend, ".pulumi", "stacks", "demo", "two-node.json")); !os.IsNotExist(err) {
		t.Errorf("stack file still there: %v", err)
	}
	if res, err := f.eng.Destroy(ctx, ref); err != nil || res.Changed {
		t.Fatalf("second destroy: %v %+v", err, res)
	}

	// 5. Secrets: the token, the user data and the private key never in logs or in plain text in
	// the backend.
	state := readTree(t, f.backend)
	for what, s := range map[string]string{"token": hcloudToken, "user data": "network-pre ordering removed", "private key": "OPENSSH PRIVATE KEY", "kv password": exampleSecrets["SECRET_KV_PASSWORD"]} {
		if strings.Contains(state, s) {
			t.Errorf("the %s is in the state files in plain text", what)
		}
		if strings.Contains(f.logs.String(), s) {
			t.Errorf("the %s is in the logs", what)
		}
	}
	if !strings.Contains(f.logs.String(), "resource step") {
		t.Errorf("no progress in the logs:\n%s", f.logs)
	}
}

func readTree(t *testing.T, dir string) string {
	t.Helper()
	var b strings.Builder
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		b.Write(data)
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestAdoptAndRefresh: a server left by a run that died after Hetzner created it is adopted, not
// duplicated; a server of someone else with the same name is refused; a server deleted out of band
// leaves the state on refresh and comes back on the next apply.
func TestAdoptAndRefresh(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/single/stand.yml")
	name := "demo-demo-single-main"
	create := func(labels map[string]string) *hcloud.Server {
		t.Helper()
		res, _, err := f.Client.Server.Create(ctx, hcloud.ServerCreateOpts{Name: name, ServerType: &hcloud.ServerType{Name: "cx22"},
			Image: &hcloud.Image{Name: "debian-12"}, Location: &hcloud.Location{Name: "hel1"}, Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		return res.Server
	}

	foreign := create(map[string]string{"team": "other"})
	if _, err := f.eng.Apply(ctx, stand, false); err == nil || !strings.Contains(err.Error(), "not managed by stands-reconciler") {
		t.Fatalf("apply over a foreign server: %v", err)
	}
	if _, _, err := f.Client.Server.DeleteWithResult(ctx, foreign); err != nil {
		t.Fatal(err)
	}

	orphan := create(map[string]string{provider.LabelManagedBy: provider.ManagedByValue, provider.LabelStand: "demo_demo_single"})
	res, err := f.eng.Apply(ctx, stand, false)
	if err != nil {
		t.Fatalf("apply with an orphan of ours: %v", err)
	}
	srvs := f.Servers(t)
	if len(srvs) != 1 || srvs[name].ID != orphan.ID || len(srvs[name].PrivateNet) != 1 {
		t.Fatalf("adoption: %d servers, %+v", len(srvs), srvs[name])
	}
	if res.Nodes[0].ServerID != orphan.ID {
		t.Errorf("stack records server %d, want the adopted %d", res.Nodes[0].ServerID, orphan.ID)
	}

	if res, err := f.eng.Drift(ctx, stand); err != nil || res.Changed {
		t.Fatalf("drift check of an unchanged stand: %v %+v", err, res)
	}
	if _, _, err := f.Client.Server.DeleteWithResult(ctx, srvs[name]); err != nil {
		t.Fatal(err)
	}
	// The drift check sees the deletion and changes nothing: the refresh below still has work.
	if res, err := f.eng.Drift(ctx, stand); err != nil || !res.Changed || res.Changes["create"] != 1 {
		t.Fatalf("drift check after an out-of-band delete: %v %+v", err, res)
	}
	if n := len(f.Servers(t)); n != 0 {
		t.Fatalf("the drift check created %d servers", n)
	}
	if res, err := f.eng.Refresh(ctx, stand); err != nil || res.Changes["refresh"] == 0 {
		t.Fatalf("refresh: %v %+v", err, res)
	}
	res, err = f.eng.Apply(ctx, stand, true)
	if err != nil || res.Changes["create"] != 1 {
		t.Fatalf("apply after an out-of-band delete: %v %+v", err, res)
	}
	if srvs := f.Servers(t); len(srvs) != 1 || srvs[name].ID == orphan.ID {
		t.Errorf("server not recreated: %+v", srvs)
	}

	// stand.protect is recorded by an apply (its spec hash does not change) and the engine itself
	// refuses the destroy.
	protected := stand
	s := *stand.Stand
	s.Protect = true
	protected.Stand = &s
	if res, err := f.eng.Apply(ctx, protected, false); err != nil || !res.Changed && res.Changes["same"] == 0 {
		t.Fatalf("apply with protect: %v %+v", err, res)
	}
	if _, err := f.eng.Destroy(ctx, stands.StackRef{Project: "demo", Env: "single"}); !errors.Is(err, ErrProtected) || Classify(err) != reason.Protected {
		t.Fatalf("destroy of a protected stand: %v", err)
	}
	if n := len(f.Servers(t)); n != 1 {
		t.Errorf("%d servers after a refused destroy", n)
	}
}

// TestOrphans: a server with our labels that no stack holds is reported; servers of applied stands
// and servers without our labels are not.
func TestOrphans(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	if _, err := f.eng.Apply(ctx, load(t, examples(t, ""), "stands/single/stand.yml"), false); err != nil {
		t.Fatal(err)
	}
	mk := func(name string, labels map[string]string) int64 {
		res, _, err := f.Client.Server.Create(ctx, hcloud.ServerCreateOpts{Name: name, ServerType: &hcloud.ServerType{Name: "cx22"},
			Image: &hcloud.Image{Name: "debian-12"}, Labels: labels})
		if err != nil {
			t.Fatal(err)
		}
		return res.Server.ID
	}
	orphan := mk("demo-gone-x-main", map[string]string{provider.LabelManagedBy: provider.ManagedByValue, provider.LabelStand: "demo_gone_x"})
	mk("someone-elses", map[string]string{"team": "other"})
	got, err := f.eng.Orphans(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0].ServerID != orphan || got[0].Stand != "demo_gone_x" {
		t.Fatalf("orphans %+v, want only server %d", got, orphan)
	}
	if n := len(f.Servers(t)); n != 3 {
		t.Errorf("%d servers: the report must delete nothing", n)
	}
}

// TestConcurrentApplies: two applies of one stand at once. The second waits its turn or ends as an
// UpdateConflict (a Waiting error, retried later); the state stays intact either way.
func TestConcurrentApplies(t *testing.T) { onEachCloud(t, concurrentApplies) }

func concurrentApplies(t *testing.T, f *fixture) {
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/two-node/stand.yml")
	errs := make(chan error, 2)
	for range 2 {
		go func() {
			_, err := f.eng.Apply(ctx, stand, true)
			errs <- err
		}()
	}
	ok := 0
	for range 2 {
		err := <-errs
		if err == nil {
			ok++
			continue
		}
		t.Logf("one apply ended with: %v", err)
		if c := Classify(err); c != reason.UpdateConflict || c.Kind() != reason.Waiting {
			t.Errorf("concurrent apply failed as %s/%s: %v", c, c.Kind(), err)
		}
	}
	if ok == 0 {
		t.Fatal("neither apply succeeded")
	}
	res, err := f.eng.Apply(ctx, stand, true)
	if err != nil || res.Changed {
		t.Fatalf("state after concurrent applies: %v %+v", err, res)
	}
	if n := len(f.servers(t)); n != 2 {
		t.Errorf("%d servers, want 2", n)
	}
}

// TestInventory: 200 owned stacks and a foreign one are listed with their marks and spec hashes
// without a Pulumi CLI process, counted by a wrapper that stands in for the CLI; the listing agrees
// with the CLI's own (`pulumi stack ls --all --json`) on every stack's name, resource count and
// last update, and a second inventory reads no stack file again until one changes.
func TestInventory(t *testing.T) {
	f := newFixture(t)
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/single/stand.yml")
	if _, err := f.eng.Apply(ctx, stand, false); err != nil {
		t.Fatal(err)
	}
	// 199 more owned stacks: copies of the real one under other names, as the backend lays them out.
	dir := filepath.Join(f.backend, ".pulumi", "stacks", "demo")
	orig, err := os.ReadFile(filepath.Join(dir, "single.json"))
	if err != nil {
		t.Fatal(err)
	}
	for i := range 199 {
		env := fmt.Sprintf("copy%03d", i)
		data := strings.ReplaceAll(string(orig), "demo/single", "demo/"+env)
		data = strings.ReplaceAll(data, "urn:pulumi:single::", "urn:pulumi:"+env+"::")
		if err := os.WriteFile(filepath.Join(dir, env+".json"), []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// A foreign stack: no mark, and servers of the hcloud provider as the old engine made them.
	foreign := strings.ReplaceAll(strings.ReplaceAll(string(orig), `"ownedBy"`, `"madeBy"`), "demo/single", "demo/foreign")
	foreign = strings.ReplaceAll(foreign, "stands:index:Server", "hcloud:index/server:Server")
	foreign = strings.ReplaceAll(foreign, "urn:pulumi:single::", "urn:pulumi:foreign::")
	if err := os.WriteFile(filepath.Join(dir, "foreign.json"), []byte(foreign), 0o600); err != nil {
		t.Fatal(err)
	}

	// Count CLI processes with a wrapper laid out as <root>/bin/pulumi.
	wrapRoot := t.TempDir()
	count := filepath.Join(wrapRoot, "count")
	if err := os.MkdirAll(filepath.Join(wrapRoot, "bin"), 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\necho \"$*\" >> %s\nexec %s \"$@\"\n", count, f.eng.cfg.PulumiBin)
	if err := os.WriteFile(filepath.Join(wrapRoot, "bin", "pulumi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := f.eng.cfg
	cfg.PulumiBin = filepath.Join(wrapRoot, "bin", "pulumi")
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(count); err != nil { // New ran `pulumi version`
		t.Fatal(err)
	}
	inv, err := eng.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	calls, _ := os.ReadFile(count)
	if n := strings.Count(string(calls), "\n"); n != 0 {
		t.Errorf("inventory ran the Pulumi CLI %d times:\n%s", n, calls)
	}
	agreesWithCLI(t, f.eng, inv)
	// A second listing reads only the files whose listed version (time, size) changed: one edited
	// with its size and time kept is not read again, which shows the cache is used; one rewritten is.
	p1 := filepath.Join(dir, "copy001.json")
	st1, err := os.Stat(p1)
	if err != nil {
		t.Fatal(err)
	}
	data1, _ := os.ReadFile(p1)
	edited := strings.Replace(string(data1), stand.SpecHash, strings.Repeat("0", len(stand.SpecHash)), 1)
	if err := os.WriteFile(p1, []byte(edited), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(p1, st1.ModTime(), st1.ModTime()); err != nil {
		t.Fatal(err)
	}
	again, err := eng.Inventory(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range again {
		if s.Env == "copy001" && s.SpecHash != stand.SpecHash {
			t.Errorf("an unchanged listing was read again: %q", s.SpecHash)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "copy000.json"), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := eng.Inventory(ctx); err == nil || !strings.Contains(err.Error(), "copy000.json") {
		t.Errorf("a rewritten stack file was not read again: %v", err)
	}
	owned, foreignSeen := 0, false
	for _, s := range inv {
		if s.Env == "single" && (s.LastOperation != "update" || s.LastResult != "succeeded") {
			t.Errorf("last result of the applied stack: %q/%q", s.LastOperation, s.LastResult)
		}
		switch {
		case s.Env == "foreign":
			foreignSeen = !s.Owned && s.Known
		case s.Owned && s.SpecHash == stand.SpecHash && s.StandID == "demo_demo_single" && s.Pending == 0 && !s.Locked:
			owned++
		}
	}
	if owned != 200 || !foreignSeen || len(inv) != 201 {
		t.Errorf("inventory: %d stacks, %d owned with the spec hash, foreign reported %v", len(inv), owned, foreignSeen)
	}
}

// TestForeignStackUntouched: a stack made by another tool under the same backend (here: one holding
// an hcloud provider's server, as the old engine's stacks do) is neither updated nor destroyed.
func TestForeignStackUntouched(t *testing.T) { onEachCloud(t, foreignStackUntouched) }

func foreignStackUntouched(t *testing.T, f *fixture) {
	ctx := context.Background()
	ref := stands.StackRef{Project: "demo", Env: "single"}
	st, err := f.eng.stack(ctx, ref, func(*pulumi.Context) error { return nil }, true)
	if err != nil {
		t.Fatal(err)
	}
	dep, err := st.Export(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var d map[string]any
	if err := json.Unmarshal(dep.Deployment, &d); err != nil {
		t.Fatal(err)
	}
	prov := "urn:pulumi:single::demo::pulumi:providers:hcloud::default"
	d["resources"] = []any{
		map[string]any{"urn": "urn:pulumi:single::demo::pulumi:pulumi:Stack::demo-single", "custom": false, "type": "pulumi:pulumi:Stack"},
		map[string]any{"urn": prov, "custom": true, "id": "b5d1", "type": "pulumi:providers:hcloud"},
		map[string]any{"urn": "urn:pulumi:single::demo::hcloud:index:Server::old", "custom": true, "id": "4242",
			"type": "hcloud:index:Server", "provider": prov + "::b5d1"},
	}
	raw, _ := json.Marshal(d)
	dep.Deployment = raw
	if err := st.Import(ctx, dep); err != nil {
		t.Fatalf("import a foreign deployment: %v", err)
	}
	stand := load(t, examples(t, ""), "stands/single/stand.yml")
	if _, err := f.eng.Apply(ctx, stand, false); Classify(err) != reason.NotOwned || Classify(err).Kind() != reason.Stalling {
		t.Fatalf("apply over a foreign stack: %v", err)
	}
	if _, err := f.eng.Destroy(ctx, ref); !errors.Is(err, ErrNotOwned) {
		t.Fatalf("destroy of a foreign stack: %v", err)
	}
	after, err := st.Export(ctx)
	if err != nil || !strings.Contains(string(after.Deployment), "hcloud:index:Server::old") {
		t.Fatalf("the foreign stack changed: %v", err)
	}
	if n := len(f.servers(t)); n != 0 {
		t.Errorf("%d servers created over a foreign stack", n)
	}
}

// agreesWithCLI compares an inventory with the CLI's listing of the same backend.
func agreesWithCLI(t *testing.T, e *Engine, inv []stands.StackInfo) {
	t.Helper()
	ctx := context.Background()
	_, opts, err := e.workspace(ctx)
	if err != nil {
		t.Fatal(err)
	}
	ws, err := auto.NewLocalWorkspace(ctx, opts...)
	if err != nil {
		t.Fatal(err)
	}
	list, err := ws.ListStacks(ctx, optlist.All())
	if err != nil {
		t.Fatal(err)
	}
	cli := map[string]string{}
	for _, s := range list {
		n := -1
		if s.ResourceCount != nil {
			n = *s.ResourceCount
		}
		last := ""
		if t, err := time.Parse(time.RFC3339, s.LastUpdate); err == nil {
			last = t.UTC().Format(time.RFC3339)
		}
		cli[s.Name] = fmt.Sprintf("%d resources, updated %s", n, last)
	}
	ours := map[string]string{}
	for _, s := range inv {
		ours["organization/"+s.Project+"/"+s.Env] = fmt.Sprintf("%d resources, updated %s", s.Resources, s.LastUpdate)
	}
	if !maps.Equal(cli, ours) {
		for name, v := range cli {
			if ours[name] != v {
				t.Errorf("%s: the CLI lists %q, the inventory %q", name, v, ours[name])
				break
			}
		}
		t.Errorf("inventory: %d stacks, the CLI's listing %d", len(ours), len(cli))
	}
}
