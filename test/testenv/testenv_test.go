package testenv

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/go-git/go-billy/v5/memfs"
	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/config"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	githttp "github.com/go-git/go-git/v5/plumbing/transport/http"
	"github.com/go-git/go-git/v5/storage/memory"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// TestGitea starts Gitea, creates a repository through the Gitea SDK, pushes a commit with go-git over
// HTTP with the token and another over SSH with a key, and reads both back.
func TestGitea(t *testing.T) {
	g := StartGitea(t)
	api := g.API(t)
	r := g.CreateRepo(t, "stands")
	repo := r.Info
	httpAuth := g.HTTPAuth()
	sshAuth := g.SSHAuth(t) // an SSH key for the user, through the SDK too
	sshURL := g.SSHURL("stands")

	// Commit 1 over HTTP.
	r.Commit("stands/a/stand.yml", "stand: {project: a, env: dev}\n", "add stand a")

	// Commit 2 over SSH, from a clone made over SSH.
	clone, err := git.Clone(memory.NewStorage(), memfs.New(), &git.CloneOptions{URL: sshURL, Auth: sshAuth, ReferenceName: "refs/heads/main"})
	if err != nil {
		t.Fatalf("clone over SSH: %v", err)
	}
	CommitFile(t, clone, "stands/b/stand.yml", "stand: {project: b, env: dev}\n", "add stand b")
	if err := clone.Push(&git.PushOptions{Auth: sshAuth, RefSpecs: []config.RefSpec{"refs/heads/main:refs/heads/main"}}); err != nil {
		t.Fatalf("push over SSH: %v", err)
	}

	// Both read back: through the API, and by a fresh clone over HTTP. Gitea updates its view of a
	// repository from a queue after each push, so the API may lag the push by a moment.
	wait.NoError(t, "the API to show both commits", 30*time.Second, func() error {
		commits, _, err := api.ListRepoCommits(g.User, "stands", gitea.ListCommitOptions{SHA: "main"})
		if err == nil && len(commits) != 2 {
			err = fmt.Errorf("%d commits", len(commits))
		}
		return err
	}, wait.Every(200*time.Millisecond))
	for path, want := range map[string]string{"stands/a/stand.yml": "project: a", "stands/b/stand.yml": "project: b"} {
		data, _, err := api.GetFile(g.User, "stands", "main", path)
		if err != nil || !strings.Contains(string(data), want) {
			t.Errorf("API read of %s: %q %v", path, data, err)
		}
	}
	commits, _, err := api.ListRepoCommits(g.User, "stands", gitea.ListCommitOptions{SHA: "main"})
	if err != nil || len(commits) != 2 || !strings.HasPrefix(commits[0].RepoCommit.Message, "add stand b") {
		t.Fatalf("commits: %d %v\n%s", len(commits), err, tail(filepath.Join(g.Dir, "log", "gitea.log")))
	}
	fresh, err := git.Clone(memory.NewStorage(), memfs.New(), &git.CloneOptions{URL: repo.CloneURL, Auth: httpAuth, ReferenceName: "refs/heads/main"})
	if err != nil {
		t.Fatalf("clone over HTTP: %v", err)
	}
	head, _ := fresh.Head()
	c, err := fresh.CommitObject(head.Hash())
	if err != nil || c.Hash.String() != commits[0].SHA {
		t.Fatalf("HTTP clone head %v, API head %s: %v", c, commits[0].SHA, err)
	}
	if _, err := c.File("stands/a/stand.yml"); err != nil {
		t.Errorf("stand a missing from the HTTP clone: %v", err)
	}

	// A wrong token is refused, not ignored.
	bad := &githttp.BasicAuth{Username: g.User, Password: "wrong"}
	if _, err := git.Clone(memory.NewStorage(), memfs.New(), &git.CloneOptions{URL: repo.CloneURL, Auth: bad}); err == nil {
		t.Error("clone with a wrong token succeeded")
	}
}

// TestGiteaFromATemplate: two servers started from one new template folder make it once (no
// half-made folder left), share the admin's token, which each accepts, and keep their own data.
func TestGiteaFromATemplate(t *testing.T) {
	tmpl := t.TempDir()
	start := func() *Gitea {
		g, err := localserver.NewGitea(context.Background(), localserver.GiteaConfig{
			Bin: Binary(t, "gitea", "STANDS_GITEA_BIN"), StaticRoot: giteaStaticRoot(t), Dir: t.TempDir(),
			HTTPPort: FreePort(t), SSHPort: FreePort(t), AppName: "stands-test", Admin: "stands", Template: tmpl,
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(g.Stop)
		return &Gitea{g}
	}
	a, b := start(), start()
	entries, err := os.ReadDir(tmpl)
	if err != nil || len(entries) != 1 || strings.HasPrefix(entries[0].Name(), "making-") {
		t.Fatalf("the template folder holds %v (%v), want one template", entries, err)
	}
	if a.Token != b.Token {
		t.Error("two servers of one template have different tokens: the second made its own")
	}
	a.CreateRepo(t, "only-on-a")
	for _, g := range []*Gitea{a, b} {
		if _, _, err := g.API(t).GetMyUserInfo(); err != nil {
			t.Errorf("%s refuses the template's token: %v", g.URL, err)
		}
	}
	if _, _, err := b.API(t).GetRepo(b.User, "only-on-a"); err == nil {
		t.Error("a repository made on one server shows on the other")
	}
}

// TestPulumi runs the CLI built by make tools against a file:// backend: it reports the version it
// was stamped with, and a stack created in the backend is listed back as JSON.
func TestPulumi(t *testing.T) {
	p := NewPulumi(t)
	if v := strings.TrimSpace(p.Run(t, t.TempDir(), "version")); !strings.HasPrefix(v, "v3.") {
		t.Fatalf("pulumi version = %q, want v3.x (is the binary stamped with -X ...version.Version?)", v)
	}
	proj := t.TempDir()
	if err := os.WriteFile(filepath.Join(proj, "Pulumi.yaml"), []byte("name: testenv\nruntime: yaml\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	p.Run(t, proj, "login", p.BackendURL)
	p.Run(t, proj, "stack", "init", "organization/testenv/dev")
	var stacks []struct {
		Name string `json:"name"`
	}
	out := p.Run(t, proj, "stack", "ls", "--all", "--json")
	if err := json.Unmarshal([]byte(out), &stacks); err != nil {
		t.Fatalf("stack ls: %v\n%s", err, out)
	}
	if len(stacks) != 1 || !strings.HasSuffix(stacks[0].Name, "dev") {
		t.Fatalf("stacks = %+v", stacks)
	}
	if _, err := os.Stat(filepath.Join(strings.TrimPrefix(p.BackendURL, "file://"), ".pulumi", "stacks", "testenv", "dev.json")); err != nil {
		t.Errorf("stack not in the file backend: %v", err)
	}
}

// TestRegistry: the registry refuses anonymous access and serves the image pushed with a login.
func TestRegistry(t *testing.T) {
	r := StartRegistry(t)
	ref := r.PushBinary(t, BuildStatic(t, "./cmd/stands-testapp"), "stands/testapp", "1")
	for _, c := range []struct {
		auth bool
		want int
	}{{false, http.StatusUnauthorized}, {true, http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodGet, "http://"+r.Addr+"/v2/stands/testapp/manifests/1", nil)
		req.Header.Set("Accept", "application/vnd.docker.distribution.manifest.v2+json, application/vnd.oci.image.manifest.v1+json")
		if c.auth {
			req.SetBasicAuth(r.User, r.Password)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.want {
			t.Errorf("%s with auth=%v: %d, want %d", ref, c.auth, resp.StatusCode, c.want)
		}
	}
}

// TestVault: the real Vault starts ready for KV v2, and keeps its data through `vault operator seal`
// and unseal, and through a restart, after which it is sealed until unsealed.
func TestVault(t *testing.T) {
	v := StartVault(t)
	ctx := context.Background()
	kv := v.Client(t).KVv2("secret")
	if _, err := kv.Put(ctx, "stands/x", map[string]any{"value": "kept"}); err != nil {
		t.Fatal(err)
	}
	read := func(when string) {
		t.Helper()
		if got, err := kv.Get(ctx, "stands/x"); err != nil || got.Data["value"] != "kept" {
			t.Fatalf("read %s: %+v %v", when, got, err)
		}
	}
	v.Seal(t)
	if _, err := kv.Get(ctx, "stands/x"); err == nil {
		t.Fatal("a sealed Vault answered a read")
	}
	v.Unseal(t)
	read("after unseal")
	v.Stop(t)
	if v.Healthy() {
		t.Fatal("a stopped Vault is healthy")
	}
	v.Start(t)
	if v.Healthy() {
		t.Fatal("a restarted Vault is unsealed before Unseal")
	}
	v.Unseal(t)
	read("after a restart")
	if !v.Healthy() {
		t.Fatal("an unsealed Vault is not healthy")
	}
}

// TestContextEndsBeforeTheBinary: a scenario's context ends its margin before the binary's -timeout
// (go test always sets one), so the scenario fails with its own words and still has time to clean up.
func TestContextEndsBeforeTheBinary(t *testing.T) {
	binary, limited := t.Deadline()
	got, ok := Context(t, 3*time.Minute).Deadline()
	if !limited { // -timeout 0: nothing to end before, and no deadline of its own either
		if ok {
			t.Errorf("no -timeout, and the context ends at %v", got)
		}
		return
	}
	if !ok || !got.Equal(binary.Add(-3*time.Minute)) {
		t.Errorf("the context's deadline %v (set %v); want 3m before the binary's %v", got, ok, binary)
	}
}

// TestChangeOnAfterARace: a push that lost a race with another writer's (main moved after the
// fetch) is recognised as one, and ChangeOn lands its change on top of the other's.
func TestChangeOnAfterARace(t *testing.T) {
	g := StartGitea(t)
	r := g.CreateRepo(t, "race")
	r.Commit("a.txt", "a", "first")
	local, err := git.Init(memory.NewStorage(), memfs.New())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := local.CreateRemote(&config.RemoteConfig{Name: "origin", URLs: []string{r.Info.CloneURL}}); err != nil {
		t.Fatal(err)
	}
	// A second clone of main, as another writer has it.
	if err := local.Fetch(&git.FetchOptions{Auth: r.auth, RefSpecs: []config.RefSpec{"+refs/heads/main:refs/remotes/origin/main"}}); err != nil {
		t.Fatal(err)
	}
	tip, err := local.Reference("refs/remotes/origin/main", true)
	if err != nil {
		t.Fatal(err)
	}
	if err := local.Storer.SetReference(plumbing.NewHashReference("refs/heads/master", tip.Hash())); err != nil {
		t.Fatal(err)
	}
	other := &Repo{Info: r.Info, t: t, local: local, auth: r.auth}
	other.Commit("b.txt", "b", "the other writer's")

	// r's clone still has main without b: a commit on top of it loses.
	wt, err := r.local.Worktree()
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, wt, "c.txt", "stale")
	if _, err := wt.Commit("stale", &git.CommitOptions{Author: &object.Signature{Name: "dev", Email: "dev@example.test", When: time.Now()}}); err != nil {
		t.Fatal(err)
	}
	err = r.local.Push(&git.PushOptions{Auth: r.auth, RefSpecs: []config.RefSpec{"refs/heads/master:refs/heads/main"}})
	if err == nil || !raced(err) {
		t.Fatalf("a push behind main: %v, want it seen as a lost race", err)
	}
	r.Commit("c.txt", "c", "c on top")
	// Read back from the server's main, as another clone fetches it.
	if err := local.Fetch(&git.FetchOptions{Auth: r.auth, RefSpecs: []config.RefSpec{"+refs/heads/main:refs/remotes/origin/main"}}); err != nil {
		t.Fatal(err)
	}
	tip, err = local.Reference("refs/remotes/origin/main", true)
	if err != nil {
		t.Fatal(err)
	}
	commit, err := local.CommitObject(tip.Hash())
	if err != nil {
		t.Fatal(err)
	}
	for file, want := range map[string]string{"a.txt": "a", "b.txt": "b", "c.txt": "c"} {
		f, err := commit.File(file)
		if err != nil {
			t.Errorf("%s on main: %v", file, err)
			continue
		}
		if got, _ := f.Contents(); got != want {
			t.Errorf("%s on main: %q, want %q", file, got, want)
		}
	}
}
