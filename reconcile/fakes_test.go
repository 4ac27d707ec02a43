package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"sync"
	"testing"
	"testing/fstest"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/engine/manifest"
	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/internal/testenv"
	"github.com/stands-engine/stands-reconciler/internal/testfs"
)

// The unit tests drive the loop with fakes of its three small interfaces; the integration test in
// cmd/stands-reconciler drives it with real Gitea, Pulumi, hcloudsim and the Vault stand-in.

const kvPassword = "kv-s3cret-value"

// fakeSource is a repository whose commits are made by the test; Publish writes status files in
// place without moving Source, as an own commit does.
type fakeSource struct {
	mu        sync.Mutex
	files     fstest.MapFS
	n         int // commits, human and own
	humans    int // human commits: Source is h<humans>
	down      bool
	fetches   int
	published []map[string][]byte
}

var _ Source = (*fakeSource)(nil)

func newFakeSource(t *testing.T, stands map[string]string) *fakeSource {
	t.Helper()
	base, err := testfs.Dir(testenv.RepoRoot() + "/examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	for p := range base {
		if len(p) > 7 && p[:7] == "stands/" {
			delete(base, p)
		}
	}
	s := &fakeSource{files: base}
	s.commit(stands)
	return s
}

// commit writes files ("" removes) as a new human commit.
func (s *fakeSource) commit(files map[string]string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for p, c := range files {
		if c == "" {
			delete(s.files, p)
		} else {
			s.files[p] = &fstest.MapFile{Data: []byte(c)}
		}
	}
	s.n++
	s.humans++
}

func (s *fakeSource) Fetch(context.Context) (*gitsource.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fetches++
	if s.down {
		return nil, fmt.Errorf("%w: connection refused", gitsource.ErrUnavailable)
	}
	return &gitsource.Snapshot{Commit: fmt.Sprintf("c%03d", s.n), Source: fmt.Sprintf("h%03d", s.humans), Files: maps.Clone(s.files)}, nil
}

func (s *fakeSource) StatusFiles(context.Context) (fs.FS, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return nil, fmt.Errorf("%w: connection refused", gitsource.ErrUnavailable)
	}
	return maps.Clone(s.files), nil
}

func (s *fakeSource) Publish(_ context.Context, files map[string][]byte, _ string) (string, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.down {
		return "", fmt.Errorf("%w: connection refused", gitsource.ErrUnavailable)
	}
	s.published = append(s.published, files)
	for p, d := range files {
		s.files[p] = &fstest.MapFile{Data: d}
	}
	s.n++
	return fmt.Sprintf("c%03d", s.n), nil
}

func (s *fakeSource) commits() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.published)
}

func (s *fakeSource) statusOf(t *testing.T, id string) Status {
	t.Helper()
	s.mu.Lock()
	defer s.mu.Unlock()
	f, ok := s.files["status/"+id+".json"]
	if !ok {
		t.Fatalf("no status file for %s", id)
	}
	var st Status
	if err := json.Unmarshal(f.Data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// fakeEngine keeps stacks in memory and counts `pulumi up`s.
type fakeEngine struct {
	mu          sync.Mutex
	stacks      map[string]engine.StackInfo
	ups         map[string]int
	destroys    []string
	drifts      int
	fail        map[string]error // next Apply/Destroy of a stand fails with it
	drifted     map[string]bool
	inventoryUp error
	gate        chan struct{} // when set, Apply waits on it
	running     int
	maxRunning  int
}

var _ Engine = (*fakeEngine)(nil)

func newFakeEngine() *fakeEngine {
	return &fakeEngine{stacks: map[string]engine.StackInfo{}, ups: map[string]int{}, fail: map[string]error{}, drifted: map[string]bool{}}
}

func (e *fakeEngine) Inventory(context.Context) ([]engine.StackInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inventoryUp != nil {
		return nil, e.inventoryUp
	}
	var out []engine.StackInfo
	for _, s := range e.stacks {
		out = append(out, s)
	}
	return out, nil
}

func (e *fakeEngine) enter(ctx context.Context, id string) error {
	e.mu.Lock()
	e.running++
	e.maxRunning = max(e.maxRunning, e.running)
	gate := e.gate
	err := e.fail[id]
	delete(e.fail, id)
	e.mu.Unlock()
	if gate != nil {
		select {
		case <-gate:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return err
}

func (e *fakeEngine) leave() {
	e.mu.Lock()
	e.running--
	e.mu.Unlock()
}

func (e *fakeEngine) Apply(ctx context.Context, in engine.Stand, force bool) (*engine.Result, error) {
	s := in.Stand
	if err := e.enter(ctx, s.ID); err != nil {
		e.leave()
		return nil, err
	}
	defer e.leave()
	e.mu.Lock()
	defer e.mu.Unlock()
	res := &engine.Result{StandID: s.ID, Operation: "apply", SpecHash: in.SpecHash, NodesMode: engine.NodesSkipped,
		Nodes: []engine.Node{{Name: "main", ServerName: s.Owner + "-" + s.Project + "-" + s.Env + "-main", ServerID: 1, PublicIPv4: "203.0.113.10", PrivateIP: "10.0.1.2"}}}
	cur, ok := e.stacks[s.ID]
	if !ok || cur.SpecHash != in.SpecHash || cur.Protect != s.Protect || force {
		e.ups[s.ID]++
		res.Changed = true
		res.Changes = map[string]int{"create": 1}
		e.stacks[s.ID] = engine.StackInfo{Project: s.Project, Env: s.Env, StandID: s.ID, Owned: true, SpecHash: in.SpecHash, Protect: s.Protect, Known: true}
	}
	pw, _ := in.Secrets.Value(manifest.SecretRef{Path: "kv-password", Field: "value"})
	res.Connection = engine.SecretJSON(fmt.Sprintf(`{"id_stand":%q,"kv":{"host":"203.0.113.10","password":%q}}`, s.ID, pw))
	masked, err := engine.MaskConnection(json.RawMessage(res.Connection), in.Secrets.Values())
	res.Masked = masked
	return res, err
}

func (e *fakeEngine) Drift(_ context.Context, in engine.Stand) (*engine.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.drifts++
	res := &engine.Result{StandID: in.Stand.ID, Operation: "drift", Changed: e.drifted[in.Stand.ID]}
	if res.Changed {
		res.Changes = map[string]int{"create": 1}
	}
	return res, nil
}

func (e *fakeEngine) Destroy(ctx context.Context, ref engine.StackRef) (*engine.Result, error) {
	id := "local_" + ref.Project + "_" + ref.Env
	if err := e.enter(ctx, id); err != nil {
		e.leave()
		return nil, err
	}
	defer e.leave()
	e.mu.Lock()
	defer e.mu.Unlock()
	delete(e.stacks, id)
	e.destroys = append(e.destroys, id)
	return &engine.Result{StandID: id, Operation: "destroy", Changed: true, Changes: map[string]int{"delete": 1}}, nil
}

func (e *fakeEngine) upsOf(id string) int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.ups[id]
}

func (e *fakeEngine) totalUps() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	n := 0
	for _, v := range e.ups {
		n += v
	}
	return n
}

// fakeSecrets is a KV store that can be down.
type fakeSecrets struct {
	mu          sync.Mutex
	values      map[string]string
	down        bool
	connections map[string]string
}

var _ Secrets = (*fakeSecrets)(nil)

var errVaultDown = errors.New("vault is unavailable: dial tcp 127.0.0.1:8200: connection refused")

func newFakeSecrets() *fakeSecrets {
	return &fakeSecrets{values: map[string]string{"kv-password": kvPassword, "registry-password": "reg-s3cret-value"}, connections: map[string]string{}}
}

func (f *fakeSecrets) Secret(_ context.Context, ref manifest.SecretRef) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return "", errVaultDown
	}
	v, ok := f.values[ref.Path]
	if !ok {
		return "", fmt.Errorf("%w: secret/%s", manifest.ErrSecretNotFound, ref.Path)
	}
	return v, nil
}

func (f *fakeSecrets) WriteConnection(_ context.Context, id string, record json.RawMessage) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.down {
		return errVaultDown
	}
	f.connections[id] = string(record)
	return nil
}

func (f *fakeSecrets) setDown(down bool) {
	f.mu.Lock()
	f.down = down
	f.mu.Unlock()
}

// standYML is a one-node stand of project p on the example base.
func standYML(p, extra string) string {
	return fmt.Sprintf(`from_dep_manifest: ../../bases/common.yml
stand:
  project: %s
  env: dev
%s
nodes:
  main:
    profile: small
    apps: [kv]
apps:
  kv:
    instances:
      cache: {}
`, p, extra)
}

func standFile(p string) string { return "stands/" + p + "/stand.yml" }
