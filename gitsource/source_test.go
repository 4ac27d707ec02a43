package gitsource

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

func read(t *testing.T, s *stands.Snapshot, name string) string {
	t.Helper()
	data, err := fs.ReadFile(s.Files, name)
	if err != nil {
		t.Fatalf("%s not in snapshot %s: %v", name, s.Commit, err)
	}
	return string(data)
}

func TestFetchOverHTTPAndSSH(t *testing.T) {
	g := testenv.StartGitea(t)
	p := g.CreateRepo(t, "stands")
	first := p.Commit("stands/a/stand.yml", "stand: {project: a, env: dev}\n", "add a")
	ctx := context.Background()

	httpSrc := New(p.Info.CloneURL, "main", WithToken(g.User, func() (string, error) { return g.Token, nil }))
	snap, err := httpSrc.Fetch(ctx)
	if err != nil || snap.Commit != first || !strings.Contains(read(t, snap, "stands/a/stand.yml"), "project: a") {
		t.Fatalf("first fetch: %+v %v", snap, err)
	}
	second := p.Commit("stands/b/stand.yml", "stand: {project: b, env: dev}\n", "add b")
	snap2, err := httpSrc.Fetch(ctx)
	if err != nil || snap2.Commit != second || snap2.Message != "add b" || snap2.Author != "dev@example.test" {
		t.Fatalf("second fetch: %+v %v", snap2, err)
	}
	read(t, snap2, "stands/b/stand.yml")
	if _, err := fs.ReadFile(snap.Files, "stands/b/stand.yml"); err == nil {
		t.Error("an older snapshot changed under its reader")
	}

	sshSrc := New(g.SSHURL("stands"), "main", WithAuth(g.SSHAuth(t)))
	snap3, err := sshSrc.Fetch(ctx)
	if err != nil || snap3.Commit != second {
		t.Fatalf("fetch over SSH: %+v %v", snap3, err)
	}
}

// TestFailedFetchKeepsLastSnapshot: a refused fetch (a rotated-away token) keeps the last good
// snapshot and marks the source unavailable; the next good fetch recovers.
func TestFailedFetchKeepsLastSnapshot(t *testing.T) {
	g := testenv.StartGitea(t)
	p := g.CreateRepo(t, "stands")
	repo := p.Info
	head := p.Commit("stands/a/stand.yml", "stand: {project: a, env: dev}\n", "add a")
	var token atomic.Value
	token.Store(g.Token)
	src := New(repo.CloneURL, "main", WithToken(g.User, func() (string, error) { return token.Load().(string), nil }))
	ctx := context.Background()
	if _, err := src.Fetch(ctx); err != nil {
		t.Fatal(err)
	}
	token.Store("wrong")
	snap, err := src.Fetch(ctx)
	if !errors.Is(err, ErrUnavailable) || snap == nil || snap.Commit != head {
		t.Fatalf("failed fetch: %+v %v", snap, err)
	}
	if last, ok := src.Latest(); ok || last.Commit != head {
		t.Fatalf("Latest after a failure: available %v, %+v", ok, last)
	}
	if strings.Contains(err.Error(), g.Token) {
		t.Error("the error shows the token")
	}
	token.Store(g.Token)
	if _, err := src.Fetch(ctx); err != nil {
		t.Fatalf("recovery: %v", err)
	}
	if _, ok := src.Latest(); !ok {
		t.Error("still unavailable after recovery")
	}
}

func TestWebhook(t *testing.T) {
	secret := []byte("hook-secret")
	var polls atomic.Int32
	srv := httptest.NewServer(WebhookHandler(func() []byte { return secret }, func() { polls.Add(1) }))
	defer srv.Close()
	body := `{"ref":"refs/heads/main"}`
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(body))
	good := hex.EncodeToString(mac.Sum(nil))
	for _, c := range []struct {
		name, sig string
		status    int
		polls     int32
	}{
		{"good signature", good, http.StatusAccepted, 1},
		{"bad signature", strings.Repeat("0", 64), http.StatusUnauthorized, 1},
		{"missing signature", "", http.StatusUnauthorized, 1},
		{"not hex", "zz", http.StatusUnauthorized, 1},
	} {
		req, _ := http.NewRequest(http.MethodPost, srv.URL, strings.NewReader(body))
		if c.sig != "" {
			req.Header.Set("X-Gitea-Signature", c.sig)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status || polls.Load() != c.polls {
			t.Errorf("%s: status %d polls %d, want %d %d", c.name, resp.StatusCode, polls.Load(), c.status, c.polls)
		}
	}
}

// TestStatusPushIsCompareAndSwap: a status commit is pushed only over the head it was built on. A
// branch force-pushed back to an ancestor meanwhile refuses it (a lost race, tried again on the
// fresh head) instead of taking it as a fast-forward that would restore the rewound commits.
func TestStatusPushIsCompareAndSwap(t *testing.T) {
	dir := t.TempDir()
	bare := filepath.Join(dir, "stands.git")
	work := filepath.Join(dir, "work")
	git := func(in string, args ...string) string {
		t.Helper()
		cmd := exec.Command("git", args...)
		cmd.Dir = in
		cmd.Env = append(os.Environ(), "GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.test", "GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.test")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	git(dir, "init", "--quiet", "--bare", "--initial-branch=main", bare)
	git(dir, "clone", "--quiet", bare, work)
	for _, name := range []string{"a", "b"} {
		if err := os.WriteFile(filepath.Join(work, name), []byte(name), 0o644); err != nil {
			t.Fatal(err)
		}
		git(work, "add", name)
		git(work, "commit", "--quiet", "-m", name)
	}
	git(work, "push", "--quiet", "origin", "HEAD:main")
	a, b := git(work, "rev-parse", "HEAD~1"), git(work, "rev-parse", "HEAD")

	store := &remoteStore{url: "file://" + bare}
	base, err := store.fetch(context.Background(), nil, "main")
	if err != nil || base == nil || base.String() != b {
		t.Fatalf("fetch: %v %v", base, err)
	}
	repo := store.repo()
	head, err := repo.CommitObject(*base)
	if err != nil {
		t.Fatal(err)
	}
	sig := object.Signature{Name: "t", Email: "t@example.test", When: time.Now()}
	obj := repo.Storer.NewEncodedObject()
	if err := (&object.Commit{Author: sig, Committer: sig, Message: "status", TreeHash: head.TreeHash, ParentHashes: []plumbing.Hash{*base}}).Encode(obj); err != nil {
		t.Fatal(err)
	}
	status, err := repo.Storer.SetEncodedObject(obj)
	if err != nil {
		t.Fatal(err)
	}
	git(work, "push", "--quiet", "--force", "origin", a+":main") // the rewind, between fetch and push
	err = store.push(context.Background(), nil, "main", base, status)
	if !errors.Is(err, errRace) {
		t.Errorf("push over a rewound branch: %v, want a lost race", err)
	}
	if got := git(bare, "rev-parse", "main"); got != a {
		t.Errorf("main is %s after the push, want the rewound %s", got, a)
	}
	// The control: over the head it was built on, the same push goes through.
	git(work, "push", "--quiet", "--force", "origin", b+":main")
	if err := store.push(context.Background(), nil, "main", base, status); err != nil {
		t.Fatalf("push over its own base: %v", err)
	}
	if got := git(bare, "rev-parse", "main"); got != status.String() {
		t.Errorf("main is %s, want the status commit", got)
	}
}
