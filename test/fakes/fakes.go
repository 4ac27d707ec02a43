package fakes

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
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
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/testfs"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// Package fakes holds the fakes the loop's and the pull request plans' unit tests drive them with:
// a repository, an engine (applies, destroys, previews), a secret store and Gitea's API, each
// recording what it was asked. The integration tests drive the same code with the real servers
// (cmd/stands-reconciler, bench).
//
// It is test scaffolding: no package but tests may import it (test/archtest checks).

const KVPassword = "kv-s3cret-value"

// Source is a repository whose commits are made by the test; Publish writes status files in
// place without moving Source, as an own commit does.
type Source struct {
	Mu        sync.Mutex
	Files     fstest.MapFS
	N         int // commits, human and own
	Humans    int // human commits: Source is h<humans>
	Down      bool
	Fetches   int
	Published []map[string][]byte
	gone      map[string]bool   // commits a Reset left off the history
	log       []stands.LogEntry // the human commits, oldest first, by Source's name
}

func NewSource(t *testing.T, stands map[string]string) *Source {
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
	s := &Source{Files: base}
	s.Commit(stands)
	return s
}

// commit writes files ("" removes) as a new human commit.
func (s *Source) Commit(files map[string]string) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	e := stands.LogEntry{Author: "dev", Subject: "change"}
	for p, c := range files {
		e.Paths = append(e.Paths, p)
		if c == "" {
			delete(s.Files, p)
		} else {
			s.Files[p] = &fstest.MapFile{Data: []byte(c)}
		}
	}
	s.N++
	s.Humans++
	e.Commit = fmt.Sprintf("h%03d", s.Humans)
	s.log = append(s.log, e)
}

// FirstParents lists the human commits from tip back, as gitsource.Source.FirstParents does: to
// since, or through the first commit that wrote the file added.
func (s *Source) FirstParents(_ context.Context, tip, since, added string, max int) ([]stands.LogEntry, bool, error) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	addedAt := slices.IndexFunc(s.log, func(e stands.LogEntry) bool { return slices.Contains(e.Paths, added) })
	var out []stands.LogEntry
	for i := len(s.log) - 1; i >= 0 && len(out) < max; i-- {
		e := s.log[i]
		switch {
		case e.Commit > tip:
			continue
		case since != "" && e.Commit == since:
			return out, true, nil
		}
		out = append(out, e)
		if since == "" && i == addedAt {
			return out, true, nil
		}
	}
	return out, len(out) < max, nil
}

// Head is the commit a fetch reads now.
func (s *Source) Head() string {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return fmt.Sprintf("c%03d", s.N)
}

// Reset moves the branch back to commit (as Head named it), with files as they were there,
// leaving its later commits off the branch's history: a reset or force-push.
func (s *Source) Reset(commit string, files fstest.MapFS) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if s.gone == nil {
		s.gone = map[string]bool{}
	}
	var n int
	fmt.Sscanf(commit, "c%03d", &n)
	for i := n + 1; i <= s.N; i++ {
		s.gone[fmt.Sprintf("c%03d", i)] = true
	}
	s.Files = maps.Clone(files)
	s.N++ // the reset's tip is a commit of its own, as a pushed revert of history would be
	s.Humans++
}

// OnFirstParents: every commit up to tip, but those a Reset left off the history.
func (s *Source) OnFirstParents(_ context.Context, tip, commit string) (bool, error) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return commit <= tip && !s.gone[commit], nil
}

func (s *Source) Fetch(context.Context) (*stands.Snapshot, error) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	s.Fetches++
	if s.Down {
		return nil, fmt.Errorf("%w: connection refused", gitsource.ErrUnavailable)
	}
	return &stands.Snapshot{Commit: fmt.Sprintf("c%03d", s.N), Source: fmt.Sprintf("h%03d", s.Humans), Files: maps.Clone(s.Files)}, nil
}

func (s *Source) StatusFiles(context.Context) (fs.FS, error) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if s.Down {
		return nil, fmt.Errorf("%w: connection refused", gitsource.ErrUnavailable)
	}
	return maps.Clone(s.Files), nil
}

func (s *Source) Publish(_ context.Context, files map[string][]byte, _ string) (string, error) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	if s.Down {
		return "", fmt.Errorf("%w: connection refused", gitsource.ErrUnavailable)
	}
	s.Published = append(s.Published, files)
	for p, d := range files {
		if d == nil {
			delete(s.Files, p) // as gitsource: nil removes the file
			continue
		}
		s.Files[p] = &fstest.MapFile{Data: d}
	}
	s.N++
	return fmt.Sprintf("c%03d", s.N), nil
}

func (s *Source) Commits() int {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	return len(s.Published)
}

// StatusFile is the content of a file of the repository, false when there is none.
func (s *Source) StatusFile(path string) ([]byte, bool) {
	s.Mu.Lock()
	defer s.Mu.Unlock()
	f, ok := s.Files[path]
	if !ok {
		return nil, false
	}
	return f.Data, true
}

// ErrNoStack is what a preview of a stand without a stack fails with.
var ErrNoStack = errors.New("the stand has no stack yet")

// Engine keeps stacks in memory and counts `pulumi up`s.
type Engine struct {
	Mu             sync.Mutex
	Stacks         map[string]stands.StackInfo
	Ups            map[string]int
	Destroys       []string
	Drifts         int
	Fail           map[string]error // next Apply/Destroy of a stand fails with it
	Drifted        map[string]bool
	InventoryUp    error
	InventoryRead  func()        // when set, Inventory calls it once it read the stacks, before it returns them
	Gate           chan struct{} // when set, Apply waits on it
	Running        int
	MaxRunning     int
	Previews       int
	PreviewSecrets []string          // every secret value a preview was given
	Configs        map[string]string // stand → its instances' configuration at the last apply
	// previewGate, when set, holds every Preview until it is closed; each says so on previewing.
	PreviewGate   chan struct{}
	PreviewsEnded []time.Time     // when held previews ended by their context
	Hang          map[string]bool // stands whose operations never return by themselves
	Previewing    chan string
	Calls         int    // Apply calls, observes included
	NodesMode     string // of its applies ("skipped" when unset)
	Repairs       int    // forced applies that read the instances back (stands.Input.Repair)
}

func NewEngine() *Engine {
	return &Engine{Stacks: map[string]stands.StackInfo{}, Ups: map[string]int{}, Fail: map[string]error{}, Drifted: map[string]bool{}, Configs: map[string]string{}}
}

func (e *Engine) Inventory(context.Context) ([]stands.StackInfo, error) {
	e.Mu.Lock()
	if e.InventoryUp != nil {
		defer e.Mu.Unlock()
		return nil, e.InventoryUp
	}
	var out []stands.StackInfo
	for _, s := range e.Stacks {
		out = append(out, s)
	}
	hook := e.InventoryRead
	e.Mu.Unlock()
	if hook != nil {
		hook()
	}
	return out, nil
}

func (e *Engine) enter(ctx context.Context, id string) error {
	e.Mu.Lock()
	e.Calls++
	e.Running++
	e.MaxRunning = max(e.MaxRunning, e.Running)
	gate := e.Gate
	err := e.Fail[id]
	delete(e.Fail, id)
	hangs := e.Hang[id]
	e.Mu.Unlock()
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

func (e *Engine) leave() {
	e.Mu.Lock()
	e.Running--
	e.Mu.Unlock()
}

func (e *Engine) Apply(ctx context.Context, in stands.Input, force bool) (*stands.Result, error) {
	s := in.Stand
	if err := e.enter(ctx, s.ID); err != nil {
		e.leave()
		return nil, err
	}
	defer e.leave()
	e.Mu.Lock()
	defer e.Mu.Unlock()
	mode := cmp.Or(e.NodesMode, "skipped")
	if in.Repair && force {
		e.Repairs++
	}
	res := &stands.Result{StandID: s.ID, Operation: "apply", SpecHash: in.SpecHash, NodesMode: mode,
		Nodes: []stands.Node{{Name: "main", ServerName: s.Owner + "-" + s.Project + "-" + s.Env + "-main", ServerID: 1, PublicIPv4: "203.0.113.10", PrivateIP: "10.0.1.2"}}}
	cur, ok := e.Stacks[s.ID]
	if !ok || cur.SpecHash != in.SpecHash || cur.Protect != s.Protect || force {
		e.Ups[s.ID]++
		res.Changed = true
		res.Changes = map[string]int{"create": 1}
		// Every update writes a new state file, so a new digest; reads leave it.
		e.Stacks[s.ID] = stands.StackInfo{Project: s.Project, Env: s.Env, StandID: s.ID, Owned: true, SpecHash: in.SpecHash, Print: in.Print, Protect: s.Protect, Known: true,
			NodesMode: mode, StateDigest: fmt.Sprintf("%s-%d", s.ID, e.Ups[s.ID])}
	}
	res.StateDigest = e.Stacks[s.ID].StateDigest
	e.Configs[s.ID] = configOf(in)
	pw, _ := in.Secrets.Value(manifest.SecretRef{Path: "kv-password", Field: "value"})
	res.Connection = stands.SecretJSON(fmt.Sprintf(`{"id_stand":%q,"kv":{"host":"203.0.113.10","password":%q,"spec":%q}}`, s.ID, pw, in.SpecHash))
	// Masked as the engine masks it: every resolved secret value replaced (the loop must never see
	// the clear record anywhere but in Secrets.WriteConnection).
	res.Masked = json.RawMessage(fmt.Sprintf(`{"id_stand":%q,"kv":{"host":"203.0.113.10","password":"***"}}`, s.ID))
	return res, nil
}

func (e *Engine) Drift(_ context.Context, in stands.Input) (*stands.Result, error) {
	e.Mu.Lock()
	defer e.Mu.Unlock()
	e.Drifts++
	res := &stands.Result{StandID: in.Stand.ID, Operation: "drift", Changed: e.Drifted[in.Stand.ID]}
	if res.Changed {
		res.Changes = map[string]int{"create": 1}
	}
	return res, nil
}

func (e *Engine) Destroy(ctx context.Context, ref stands.StackRef) (*stands.Result, error) {
	id := "local_" + ref.Project + "_" + ref.Env
	if err := e.enter(ctx, id); err != nil {
		e.leave()
		return nil, err
	}
	defer e.leave()
	e.Mu.Lock()
	defer e.Mu.Unlock()
	delete(e.Stacks, id)
	e.Destroys = append(e.Destroys, id)
	return &stands.Result{StandID: id, Operation: "destroy", Changed: true, Changes: map[string]int{"delete": 1}}, nil
}

// touch rewrites a stand's state file as a run the reconciler did not see would: a new digest.
func (e *Engine) Touch(id string) {
	e.Mu.Lock()
	defer e.Mu.Unlock()
	st := e.Stacks[id]
	st.StateDigest += "+"
	e.Stacks[id] = st
}

func (e *Engine) UpsOf(id string) int {
	e.Mu.Lock()
	defer e.Mu.Unlock()
	return e.Ups[id]
}

func (e *Engine) TotalUps() int {
	e.Mu.Lock()
	defer e.Mu.Unlock()
	n := 0
	for _, v := range e.Ups {
		n += v
	}
	return n
}

// Secrets is a KV store that can be down.
type Secrets struct {
	Mu          sync.Mutex
	Values      map[string]string
	Down        bool
	Connections map[string]string
	Writing     chan struct{} // when set, WriteConnection waits on it
	Blocked     int           // WriteConnection calls waiting on writing
	Reads       int           // Secret calls
	Reading     chan struct{} // when set, Secret waits on it
}

var ErrVaultDown = errors.New("vault is unavailable: dial tcp 127.0.0.1:8200: connection refused")

func NewSecrets() *Secrets {
	return &Secrets{Values: map[string]string{"kv-password": KVPassword, "registry-password": "reg-s3cret-value"}, Connections: map[string]string{}}
}

func (f *Secrets) Secret(_ context.Context, ref manifest.SecretRef) (string, error) {
	f.Mu.Lock()
	gate := f.Reading
	f.Mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Reads++
	if f.Down {
		return "", ErrVaultDown
	}
	v, ok := f.Values[ref.Path]
	if !ok {
		return "", fmt.Errorf("%w: secret/%s", manifest.ErrSecretNotFound, ref.Path)
	}
	return v, nil
}

func (f *Secrets) WriteConnection(_ context.Context, id string, record json.RawMessage) error {
	f.Mu.Lock()
	gate := f.Writing
	if gate != nil {
		f.Blocked++
	}
	f.Mu.Unlock()
	if gate != nil {
		<-gate
	}
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Down {
		return ErrVaultDown
	}
	f.Connections[id] = string(record)
	return nil
}

func (f *Secrets) SetDown(down bool) {
	f.Mu.Lock()
	f.Down = down
	f.Mu.Unlock()
}

// StandYML is a one-node stand of project p on the example base.
func StandYML(p, extra string) string {
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

func StandFile(p string) string { return "stands/" + p + "/stand.yml" }

// Planner side of the fake engine: previews count, never change the stacks.
func (e *Engine) Preview(ctx context.Context, in stands.Input) (*stands.Result, error) {
	if err := e.hold(ctx, in); err != nil {
		return nil, err
	}
	e.Mu.Lock()
	defer e.Mu.Unlock()
	e.Previews++
	cur, ok := e.Stacks[in.Stand.ID]
	if !ok {
		return nil, ErrNoStack
	}
	e.PreviewSecrets = append(e.PreviewSecrets, in.Secrets.Values()...)
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
		if configOf(in) != e.Configs[in.Stand.ID] {
			res.Steps = append(res.Steps, stands.Step{Op: "update", Kind: "instance", Node: "main", Instance: "kv--cache", Changed: "configHash,spec"})
		}
	}
	return res, nil
}

// hold waits on previewGate when the test set one, or until ctx ends (as a CLI interrupted).
func (e *Engine) hold(ctx context.Context, in stands.Input) error {
	e.Mu.Lock()
	gate, started := e.PreviewGate, e.Previewing
	e.Mu.Unlock()
	if gate == nil {
		return nil
	}
	started <- in.Stand.ID
	select {
	case <-gate:
		return nil
	case <-ctx.Done():
		e.Mu.Lock()
		e.PreviewsEnded = append(e.PreviewsEnded, time.Now())
		e.Mu.Unlock()
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

func (e *Engine) PreviewNew(ctx context.Context, in stands.Input) (*stands.Result, error) {
	if err := e.hold(ctx, in); err != nil {
		return nil, err
	}
	e.Mu.Lock()
	defer e.Mu.Unlock()
	e.Previews++
	e.PreviewSecrets = append(e.PreviewSecrets, in.Secrets.Values()...)
	return &stands.Result{StandID: in.Stand.ID, Operation: "preview", Changed: true,
		Steps: []stands.Step{{Op: "create", Node: "main", ServerName: serverName(in), ServerType: "cx22", Location: "hel1"}}}, nil
}

func (e *Engine) Prices(context.Context) (stands.Prices, error) {
	return stands.Prices{"cx22": {"hel1": {Monthly: 4.51, Currency: "EUR"}}, "cx32": {"hel1": {Monthly: 8.09, Currency: "EUR"}}}, nil
}

func (e *Engine) StandServers(_ context.Context, id string) ([]stands.Server, error) {
	e.Mu.Lock()
	defer e.Mu.Unlock()
	if _, ok := e.Stacks[id]; !ok {
		return nil, nil
	}
	return []stands.Server{{Name: strings.ReplaceAll(id, "_", "-") + "-main", ServerType: "cx22", Location: "hel1"}}, nil
}

func serverName(in stands.Input) string {
	return in.Stand.Owner + "-" + in.Stand.Project + "-" + in.Stand.Env + "-main"
}

// Forge is Gitea's API: pull requests, comments by marker, commit statuses.
type Forge struct {
	Mu    sync.Mutex
	Prs   []stands.PullRequest
	Heads map[string]fstest.MapFS // ref → files
	Bases map[string]fstest.MapFS // ref → the files its branch was cut from (the merge base)
	// InBranch marks refs whose head the tracked branch already holds, as after a merge: their merge
	// base is the head itself.
	InBranch    map[string]bool
	Comments    map[int64]string
	Edits       int
	Statuses    map[string]string // sha + " " + context → state: description
	Tips        map[string]string // branch → commit
	Fetches     int               // FetchPull calls
	Lists       int               // PullRequests calls
	Down        bool              // branch lookups fail, as with Gitea unreachable
	TooLarge    bool              // every head is over the snapshot's size limit
	Reviewed    map[int64][]stands.Review
	ReviewReads int // Reviews calls
	// Pushers names who pushed to a pull request besides its author; Readers the users who may
	// only read the repository (everyone else may write).
	Pushers map[int64][]string
	Readers map[string]bool
	// Unrecorded are the pull requests whose last push Gitea has not recorded: their commits as
	// listed do not reach the head.
	Unrecorded map[int64]bool
	Merges     map[int64]string // merged pull requests' merge commits
	late       map[int64]string // MergeLate's
}

func NewForge() *Forge {
	return &Forge{Heads: map[string]fstest.MapFS{}, Bases: map[string]fstest.MapFS{}, InBranch: map[string]bool{}, Comments: map[int64]string{}, Statuses: map[string]string{}, Tips: map[string]string{}}
}

// Open opens (or moves the head of) pull request n with files changed from base ("" removes): its
// branch was cut from base, which is the merge base of its head and the tracked branch.
func (f *Forge) Open(n int64, head string, base fstest.MapFS, change map[string]string, sameRepo bool) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	files := maps.Clone(base)
	for p, c := range change {
		if c == "" {
			delete(files, p)
		} else {
			files[p] = &fstest.MapFile{Data: []byte(c)}
		}
	}
	pr := stands.PullRequest{Index: n, Author: "author", HeadSHA: head, HeadRef: fmt.Sprintf("pr-%d", n), SameRepo: sameRepo, URL: fmt.Sprintf("http://gitea/pulls/%d", n)}
	f.Heads[pr.Ref()] = files
	f.Bases[pr.Ref()] = maps.Clone(base)
	f.Tips[pr.HeadRef] = head
	for i := range f.Prs {
		if f.Prs[i].Index == n {
			f.Prs[i] = pr
			return
		}
	}
	f.Prs = append(f.Prs, pr)
}

// agit makes pull request n's head no branch's tip, as an AGit pull request's is.
func (f *Forge) Agit(n int64) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	delete(f.Tips, fmt.Sprintf("pr-%d", n))
}

func (f *Forge) BranchTip(_ context.Context, branch string) (string, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Down {
		return "", fmt.Errorf("look up branch %s: connection refused", branch)
	}
	return f.Tips[branch], nil
}

// Merge closes pull request n as merged by commit (Source.Head after the test made the merge).
func (f *Forge) Merge(n int64, commit string) {
	f.Close(n)
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Merges == nil {
		f.Merges = map[int64]string{}
	}
	f.Merges[n] = commit
}

// MergeLate merges pull request n by commit as Gitea may: the first question after it answers open
// and not merged, and the next ones merged.
func (f *Forge) MergeLate(n int64, commit string) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.late == nil {
		f.late = map[int64]string{}
	}
	f.late[n] = commit
}

func (f *Forge) Merged(_ context.Context, n int64) (string, bool, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	open := slices.ContainsFunc(f.Prs, func(p stands.PullRequest) bool { return p.Index == n })
	merge := f.Merges[n]
	if c, ok := f.late[n]; ok {
		delete(f.late, n)
		f.Prs = slices.DeleteFunc(f.Prs, func(p stands.PullRequest) bool { return p.Index == n })
		if f.Merges == nil {
			f.Merges = map[int64]string{}
		}
		f.Merges[n] = c
	}
	return merge, open, nil
}

// Close closes pull request n without a merge.
func (f *Forge) Close(n int64) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Prs = slices.DeleteFunc(f.Prs, func(p stands.PullRequest) bool { return p.Index == n })
}

func (f *Forge) PullRequests(context.Context, string) ([]stands.PullRequest, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Lists++
	return slices.Clone(f.Prs), nil
}

func (f *Forge) FetchPull(_ context.Context, ref, _ string) (head, base *stands.Snapshot, err error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Fetches++
	files, ok := f.Heads[ref]
	if !ok {
		return nil, nil, fmt.Errorf("no ref %s", ref)
	}
	if f.TooLarge {
		return nil, nil, fmt.Errorf("fetch %s: %w", ref, &stands.TooLarge{Limit: "the commit's files hold more than 64 MiB"})
	}
	head = &stands.Snapshot{Commit: ref, Source: ref, Files: maps.Clone(files)}
	if f.InBranch[ref] {
		return head, head, nil
	}
	return head, &stands.Snapshot{Commit: "base-of-" + ref, Source: "base-of-" + ref, Files: maps.Clone(f.Bases[ref])}, nil
}

func (f *Forge) UpsertComment(_ context.Context, n int64, marker string, markup mdtext.Markup) (time.Time, error) {
	body := string(markup)
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if !strings.Contains(body, marker) {
		return time.Time{}, fmt.Errorf("comment without the marker")
	}
	if old, ok := f.Comments[n]; ok && old != body {
		f.Edits++
	}
	f.Comments[n] = body
	return time.Now(), nil
}

func (f *Forge) SetStatus(_ context.Context, sha, name string, state stands.CommitState, description, _ string) error {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.Statuses[sha+" "+name] = string(state) + ": " + description
	return nil
}

// Review adds a review of pull request n.
func (f *Forge) Review(n int64, r stands.Review) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Reviewed == nil {
		f.Reviewed = map[int64][]stands.Review{}
	}
	f.Reviewed[n] = append(f.Reviewed[n], r)
}

func (f *Forge) Reviews(_ context.Context, n int64) ([]stands.Review, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	f.ReviewReads++
	return slices.Clone(f.Reviewed[n]), nil
}

// Push records user pushing to pull request n.
func (f *Forge) Push(n int64, user string) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Pushers == nil {
		f.Pushers = map[int64][]string{}
	}
	f.Pushers[n] = append(f.Pushers[n], user)
}

// Contributors: the pull request's author and who pushed to it; an error while its last push is
// Unrecorded.
func (f *Forge) Contributors(_ context.Context, n int64, head string) (stands.Contributors, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	if f.Unrecorded[n] {
		return nil, fmt.Errorf("pull request %d's commits as listed do not reach %s", n, head)
	}
	out := stands.Contributors{}
	for _, pr := range f.Prs {
		if pr.Index == n {
			out[pr.Author] = "opened it"
		}
	}
	for _, u := range f.Pushers[n] {
		out[u] = "pushed to it"
	}
	return out, nil
}

func (f *Forge) CanWrite(_ context.Context, user string) (bool, error) {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return !f.Readers[user], nil
}

func (f *Forge) FileURL(branch, path string) string {
	return "http://gitea/src/branch/" + branch + "/" + path
}

func (f *Forge) Status(sha, name string) string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.Statuses[sha+" "+name]
}

func (f *Forge) Comment(n int64) string {
	f.Mu.Lock()
	defer f.Mu.Unlock()
	return f.Comments[n]
}

// WaitRunning waits until n operations are inside the engine.
func (e *Engine) WaitRunning(t *testing.T, n int) {
	t.Helper()
	wait.For(t, fmt.Sprintf("%d operations in the engine", n), 10*time.Second, func() bool {
		e.Mu.Lock()
		defer e.Mu.Unlock()
		return e.Running == n
	}, wait.Every(time.Millisecond))
}

// digest is what the fake engine compares an instance's configuration by.
func digest(v any) string {
	b, _ := json.Marshal(v)
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:])
}

// Loop is what a test cycles: the reconciler.
type Loop interface {
	Cycle(ctx context.Context) error
	Wait()
}

// Cycle runs one cycle of l and waits for its operations and plans.
func Cycle(t *testing.T, l Loop) error {
	t.Helper()
	err := l.Cycle(context.Background())
	l.Wait()
	return err
}

// MustCycle is Cycle, failing the test on an error.
func MustCycle(t *testing.T, l Loop) {
	t.Helper()
	if err := Cycle(t, l); err != nil {
		t.Fatalf("cycle: %v", err)
	}
}
