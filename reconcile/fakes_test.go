package reconcile

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/internal/testenv"
	"github.com/stands-engine/stands-reconciler/internal/testfs"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
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

func (s *fakeSource) Fetch(context.Context) (*stands.Snapshot, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fetches++
	if s.down {
		return nil, fmt.Errorf("%w: connection refused", gitsource.ErrUnavailable)
	}
	return &stands.Snapshot{Commit: fmt.Sprintf("c%03d", s.n), Source: fmt.Sprintf("h%03d", s.humans), Files: maps.Clone(s.files)}, nil
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
	f, ok := s.files[stands.StatusPath(id)]
	if !ok {
		t.Fatalf("no status file for %s", id)
	}
	var st Status
	if err := json.Unmarshal(f.Data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// errNoStack is what a preview of a stand without a stack fails with.
var errNoStack = errors.New("the stand has no stack yet")

// fakeEngine keeps stacks in memory and counts `pulumi up`s.
type fakeEngine struct {
	mu             sync.Mutex
	stacks         map[string]stands.StackInfo
	ups            map[string]int
	destroys       []string
	drifts         int
	fail           map[string]error // next Apply/Destroy of a stand fails with it
	drifted        map[string]bool
	inventoryUp    error
	gate           chan struct{} // when set, Apply waits on it
	running        int
	maxRunning     int
	previews       int
	previewSecrets []string          // every secret value a preview was given
	configs        map[string]string // stand → its instances' configuration at the last apply
	// previewGate, when set, holds every Preview until it is closed; each says so on previewing.
	previewGate   chan struct{}
	previewsEnded []time.Time     // when held previews ended by their context
	hang          map[string]bool // stands whose operations never return by themselves
	previewing    chan string
	calls         int    // Apply calls, observes included
	nodesMode     string // of its applies ("skipped" when unset)
	repairs       int    // forced applies that read the instances back (stands.Input.Repair)
}

var _ Engine = (*fakeEngine)(nil)

func newFakeEngine() *fakeEngine {
	return &fakeEngine{stacks: map[string]stands.StackInfo{}, ups: map[string]int{}, fail: map[string]error{}, drifted: map[string]bool{}, configs: map[string]string{}}
}

func (e *fakeEngine) Inventory(context.Context) ([]stands.StackInfo, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inventoryUp != nil {
		return nil, e.inventoryUp
	}
	var out []stands.StackInfo
	for _, s := range e.stacks {
		out = append(out, s)
	}
	return out, nil
}

func (e *fakeEngine) enter(ctx context.Context, id string) error {
	e.mu.Lock()
	e.calls++
	e.running++
	e.maxRunning = max(e.maxRunning, e.running)
	gate := e.gate
	err := e.fail[id]
	delete(e.fail, id)
	hangs := e.hang[id]
	e.mu.Unlock()
	if hangs { // as a call to an endpoint that never answers: only the context ends it
		<-ctx.Done()
		return fmt.Errorf("pulumi up %s: %w", id, ctx.Err())
	}
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

func (e *fakeEngine) Apply(ctx context.Context, in stands.Input, force bool) (*stands.Result, error) {
	s := in.Stand
	if err := e.enter(ctx, s.ID); err != nil {
		e.leave()
		return nil, err
	}
	defer e.leave()
	e.mu.Lock()
	defer e.mu.Unlock()
	mode := cmp.Or(e.nodesMode, "skipped")
	if in.Repair && force {
		e.repairs++
	}
	res := &stands.Result{StandID: s.ID, Operation: "apply", SpecHash: in.SpecHash, NodesMode: mode,
		Nodes: []stands.Node{{Name: "main", ServerName: s.Owner + "-" + s.Project + "-" + s.Env + "-main", ServerID: 1, PublicIPv4: "203.0.113.10", PrivateIP: "10.0.1.2"}}}
	cur, ok := e.stacks[s.ID]
	if !ok || cur.SpecHash != in.SpecHash || cur.Protect != s.Protect || force {
		e.ups[s.ID]++
		res.Changed = true
		res.Changes = map[string]int{"create": 1}
		// Every update writes a new state file, so a new digest; reads leave it.
		e.stacks[s.ID] = stands.StackInfo{Project: s.Project, Env: s.Env, StandID: s.ID, Owned: true, SpecHash: in.SpecHash, Protect: s.Protect, Known: true,
			NodesMode: mode, StateDigest: fmt.Sprintf("%s-%d", s.ID, e.ups[s.ID])}
	}
	res.StateDigest = e.stacks[s.ID].StateDigest
	e.configs[s.ID] = configOf(in)
	pw, _ := in.Secrets.Value(manifest.SecretRef{Path: "kv-password", Field: "value"})
	res.Connection = stands.SecretJSON(fmt.Sprintf(`{"id_stand":%q,"kv":{"host":"203.0.113.10","password":%q,"spec":%q}}`, s.ID, pw, in.SpecHash))
	// Masked as the engine masks it: every resolved secret value replaced (the loop must never see
	// the clear record anywhere but in Secrets.WriteConnection).
	res.Masked = json.RawMessage(fmt.Sprintf(`{"id_stand":%q,"kv":{"host":"203.0.113.10","password":"***"}}`, s.ID))
	return res, nil
}

func (e *fakeEngine) Drift(_ context.Context, in stands.Input) (*stands.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.drifts++
	res := &stands.Result{StandID: in.Stand.ID, Operation: "drift", Changed: e.drifted[in.Stand.ID]}
	if res.Changed {
		res.Changes = map[string]int{"create": 1}
	}
	return res, nil
}

func (e *fakeEngine) Destroy(ctx context.Context, ref stands.StackRef) (*stands.Result, error) {
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
	return &stands.Result{StandID: id, Operation: "destroy", Changed: true, Changes: map[string]int{"delete": 1}}, nil
}

// touch rewrites a stand's state file as a run the reconciler did not see would: a new digest.
func (e *fakeEngine) touch(id string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	st := e.stacks[id]
	st.StateDigest += "+"
	e.stacks[id] = st
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
	writing     chan struct{} // when set, WriteConnection waits on it
	blocked     int           // WriteConnection calls waiting on writing
	reads       int           // Secret calls
}

var _ Secrets = (*fakeSecrets)(nil)

var errVaultDown = errors.New("vault is unavailable: dial tcp 127.0.0.1:8200: connection refused")

func newFakeSecrets() *fakeSecrets {
	return &fakeSecrets{values: map[string]string{"kv-password": kvPassword, "registry-password": "reg-s3cret-value"}, connections: map[string]string{}}
}

func (f *fakeSecrets) Secret(_ context.Context, ref manifest.SecretRef) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.reads++
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
	gate := f.writing
	if gate != nil {
		f.blocked++
	}
	f.mu.Unlock()
	if gate != nil {
		<-gate
	}
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

// Planner side of the fake engine: previews count, never change the stacks.
func (e *fakeEngine) Preview(ctx context.Context, in stands.Input) (*stands.Result, error) {
	if err := e.hold(ctx, in); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.previews++
	cur, ok := e.stacks[in.Stand.ID]
	if !ok {
		return nil, errNoStack
	}
	e.previewSecrets = append(e.previewSecrets, in.Secrets.Values()...)
	res := &stands.Result{StandID: in.Stand.ID, Operation: "preview"}
	if cur.SpecHash != in.SpecHash {
		res.Changed = true
		// As Pulumi compares a plan's placeholders with the production values: every secret-fed
		// input differs.
		res.Steps = []stands.Step{{Op: "replace", Node: "main", ServerName: serverName(in), ServerType: "cx32", OldServerType: "cx22", Location: "hel1", OldLocation: "hel1"},
			{Op: "update", Kind: "images", Node: "main", Changed: "registries"}}
		if cur.Protect { // as the engine: a protected stand's replacement is refused
			res.Protected = "server " + serverName(in) + " would be replaced (serverType changed)"
		}
		if configOf(in) != e.configs[in.Stand.ID] {
			res.Steps = append(res.Steps, stands.Step{Op: "update", Kind: "instance", Node: "main", Instance: "kv--cache", Changed: "configHash,spec"})
		}
	}
	return res, nil
}

// hold waits on previewGate when the test set one, or until ctx ends (as a CLI interrupted).
func (e *fakeEngine) hold(ctx context.Context, in stands.Input) error {
	e.mu.Lock()
	gate, started := e.previewGate, e.previewing
	e.mu.Unlock()
	if gate == nil {
		return nil
	}
	started <- in.Stand.ID
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		e.mu.Lock()
		e.previewsEnded = append(e.previewsEnded, time.Now())
		e.mu.Unlock()
		return fmt.Errorf("preview %s: %w", in.Stand.ID, ctx.Err())
	}
}

// configOf is what Pulumi compares for an instance: its rendered configuration.
func configOf(in stands.Input) string {
	out, err := manifest.Render(in.FS, in.Stand, in.Secrets, manifest.PreflightAddresses(in.Stand))
	if err != nil {
		return "error"
	}
	return digest(out.Instances)
}

func (e *fakeEngine) PreviewNew(ctx context.Context, in stands.Input) (*stands.Result, error) {
	if err := e.hold(ctx, in); err != nil {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.previews++
	e.previewSecrets = append(e.previewSecrets, in.Secrets.Values()...)
	return &stands.Result{StandID: in.Stand.ID, Operation: "preview", Changed: true,
		Steps: []stands.Step{{Op: "create", Node: "main", ServerName: serverName(in), ServerType: "cx22", Location: "hel1"}}}, nil
}

func (e *fakeEngine) Prices(context.Context) (stands.Prices, error) {
	return stands.Prices{"cx22": {"hel1": {Monthly: 4.51, Currency: "EUR"}}, "cx32": {"hel1": {Monthly: 8.09, Currency: "EUR"}}}, nil
}

func (e *fakeEngine) StandServers(_ context.Context, id string) ([]stands.Server, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.stacks[id]; !ok {
		return nil, nil
	}
	return []stands.Server{{Name: strings.ReplaceAll(id, "_", "-") + "-main", ServerType: "cx22", Location: "hel1"}}, nil
}

func serverName(in stands.Input) string {
	return in.Stand.Owner + "-" + in.Stand.Project + "-" + in.Stand.Env + "-main"
}

// fakeForge is Gitea's API: pull requests, comments by marker, commit statuses.
type fakeForge struct {
	mu       sync.Mutex
	prs      []stands.PullRequest
	heads    map[string]fstest.MapFS // ref → files
	comments map[int64]string
	edits    int
	statuses map[string]string // sha + " " + context → state: description
	tips     map[string]string // branch → commit
	fetches  int               // FetchRef calls
	tooLarge bool              // every head is over the snapshot's size limit
}

var (
	_ Forge     = (*fakeForge)(nil)
	_ RefSource = (*fakeForge)(nil)
	_ Planner   = (*fakeEngine)(nil)
)

func newFakeForge() *fakeForge {
	return &fakeForge{heads: map[string]fstest.MapFS{}, comments: map[int64]string{}, statuses: map[string]string{}, tips: map[string]string{}}
}

// open opens (or moves the head of) pull request n with files changed from base ("" removes).
func (f *fakeForge) open(n int64, head string, base fstest.MapFS, change map[string]string, sameRepo bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	files := maps.Clone(base)
	for p, c := range change {
		if c == "" {
			delete(files, p)
		} else {
			files[p] = &fstest.MapFile{Data: []byte(c)}
		}
	}
	pr := stands.PullRequest{Index: n, HeadSHA: head, HeadRef: fmt.Sprintf("pr-%d", n), SameRepo: sameRepo, URL: fmt.Sprintf("http://gitea/pulls/%d", n)}
	f.heads[pr.Ref()] = files
	f.tips[pr.HeadRef] = head
	for i := range f.prs {
		if f.prs[i].Index == n {
			f.prs[i] = pr
			return
		}
	}
	f.prs = append(f.prs, pr)
}

// agit makes pull request n's head no branch's tip, as an AGit pull request's is.
func (f *fakeForge) agit(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.tips, fmt.Sprintf("pr-%d", n))
}

func (f *fakeForge) BranchTip(_ context.Context, branch string) (string, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.tips[branch], nil
}

func (f *fakeForge) close(n int64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.prs = slices.DeleteFunc(f.prs, func(p stands.PullRequest) bool { return p.Index == n })
}

func (f *fakeForge) PullRequests(context.Context, string) ([]stands.PullRequest, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.prs), nil
}

func (f *fakeForge) FetchRef(_ context.Context, ref string) (*stands.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fetches++
	files, ok := f.heads[ref]
	if !ok {
		return nil, fmt.Errorf("no ref %s", ref)
	}
	if f.tooLarge {
		return nil, fmt.Errorf("fetch %s: %w: the commit's files hold more than 64 MiB", ref, stands.ErrTooLarge)
	}
	return &stands.Snapshot{Commit: ref, Source: ref, Files: maps.Clone(files)}, nil
}

func (f *fakeForge) UpsertComment(_ context.Context, n int64, marker, body string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if !strings.Contains(body, marker) {
		return fmt.Errorf("comment without the marker")
	}
	if old, ok := f.comments[n]; ok && old != body {
		f.edits++
	}
	f.comments[n] = body
	return nil
}

func (f *fakeForge) SetStatus(_ context.Context, sha, name string, state stands.CommitState, description, _ string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.statuses[sha+" "+name] = string(state) + ": " + description
	return nil
}

func (f *fakeForge) FileURL(branch, path string) string {
	return "http://gitea/src/branch/" + branch + "/" + path
}

func (f *fakeForge) status(sha, name string) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.statuses[sha+" "+name]
}

func (f *fakeForge) comment(n int64) string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.comments[n]
}

// waitRunning waits until n operations are inside the engine.
func (e *fakeEngine) waitRunning(t *testing.T, n int) {
	t.Helper()
	waitUntil(t, fmt.Sprintf("%d operations in the engine", n), func() bool {
		e.mu.Lock()
		defer e.mu.Unlock()
		return e.running == n
	})
}
