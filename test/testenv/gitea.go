package testenv

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
)

// Gitea is a running Gitea server with an admin user and an access token.
type Gitea struct {
	*localserver.Gitea
}

// StartGitea serves `gitea web` on ephemeral ports with its built-in SSH server, an admin user and a
// token, until the test ends. Its database is a copy of one `gitea migrate` and the admin commands
// made once per Gitea binary (giteaTemplate), not three Gitea commands at every start.
func StartGitea(t testing.TB) *Gitea {
	t.Helper()
	g, err := localserver.NewGitea(context.Background(), localserver.GiteaConfig{
		Bin: Binary(t, "gitea", "STANDS_GITEA_BIN"), StaticRoot: giteaStaticRoot(t), Dir: t.TempDir(),
		HTTPPort: FreePort(t), SSHPort: FreePort(t), AppName: "stands-test", Admin: "stands", Template: giteaTemplate(),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(g.Stop)
	return &Gitea{g}
}

// giteaTemplate is where StartGitea keeps the migrated database it copies.
func giteaTemplate() string { return filepath.Join(os.TempDir(), "stands-gitea-template") }

// Start serves `gitea web` again after Stop and waits until HTTP and SSH answer.
func (g *Gitea) Start(t testing.TB) {
	t.Helper()
	if err := g.Gitea.Start(); err != nil {
		t.Fatal(err)
	}
}

// Stop ends `gitea web`: the server is unreachable until Start.
func (g *Gitea) Stop(t testing.TB) {
	t.Helper()
	g.Gitea.Stop()
}

// giteaStaticRoot is Gitea's module folder (templates, options), recorded by `make tools`.
func giteaStaticRoot(t testing.TB) string {
	t.Helper()
	if p := os.Getenv("STANDS_GITEA_STATIC_ROOT"); p != "" {
		return p
	}
	rec := filepath.Join(RepoRoot(), "bin", "gitea.static-root")
	data, err := os.ReadFile(rec)
	if err != nil {
		Missing(t, "%s missing: run `make tools`", rec)
	}
	p := strings.TrimSpace(string(data))
	if _, err := os.Stat(filepath.Join(p, "options", "locale")); err != nil {
		Missing(t, "gitea static root %s has no options/locale: run `make tools`", p)
	}
	return p
}

// RandomHex is n random bytes in hex, for names and credentials a test makes up.
func RandomHex(n int) string { return localserver.RandomHex(n) }

// tail returns the last lines of log files, for failure messages.
func tail(files ...string) string { return localserver.Tail(files...) }
