package testenv

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
)

// Registry is Debian's docker-registry on 127.0.0.1 with an htpasswd login, over plain HTTP: see
// localserver.Registry.
type Registry struct {
	*localserver.Registry
}

// StartRegistry serves a registry that refuses anonymous pulls and pushes, until the test ends.
func StartRegistry(t testing.TB) *Registry {
	t.Helper()
	r, err := localserver.NewRegistry(context.Background(), Binary(t, "docker-registry", "STANDS_REGISTRY_BIN"), t.TempDir(),
		"robot", "reg-"+RandomHex(8))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Stop)
	return &Registry{r}
}

// PushBinary pushes the static binary as an image of its own (localserver.Registry.PushBinary) and
// returns the reference.
func (r *Registry) PushBinary(t testing.TB, binary, repo, tag string) string {
	t.Helper()
	ref, err := r.Registry.PushBinary(context.Background(), binary, repo, tag)
	if err != nil {
		t.Fatal(err)
	}
	return ref
}

// BuildStatic builds a Go package of this module as a static linux/amd64 binary and returns its path.
func BuildStatic(t testing.TB, pkg string) string {
	t.Helper()
	out := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags=-s -w", "-o", out, pkg)
	cmd.Dir = RepoRoot()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", pkg, err, msg)
	}
	return out
}
