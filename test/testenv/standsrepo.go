package testenv

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	git "github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"

	"github.com/stands-engine/stands-reconciler/test/testfs"
)

// PlainStand is a one-server stand of project p, env dev, on the example's base and network, without
// apps or registries: it needs no secret, so it is judged even while Vault is down, and servers-only
// runs apply it anywhere hcloudsim runs (hcloudsim -example-project has its network and key).
func PlainStand(p string) string {
	return fmt.Sprintf(`stand:
  project: %s
  env: dev
  users:
    sudo: admin
    app: app
  ssh:
    key_name_admin: stands-admin
node_profiles:
  small:
    location: hel1
    type_serv: cx22
    image: debian-12
    network: stands-net
    cloud-init: ../../bases/cloud-init.yaml.tmpl
nodes:
  main:
    profile: small
    apps: []
`, p)
}

// InitStandsRepo makes dir a Git repository whose HEAD is main and whose work tree holds the example
// repository's bases and app packages, no stand: the test commits its stands into it.
func InitStandsRepo(t testing.TB, dir string) *git.Repository {
	t.Helper()
	repo, err := git.PlainInit(dir, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := repo.Storer.SetReference(plumbing.NewSymbolicReference(plumbing.HEAD, plumbing.NewBranchReferenceName("main"))); err != nil {
		t.Fatal(err)
	}
	base, err := testfs.Dir(filepath.Join(RepoRoot(), "examples", "stands-repo"))
	if err != nil {
		t.Fatal(err)
	}
	for p := range base {
		if strings.HasPrefix(p, "stands/") {
			delete(base, p)
		}
	}
	if err := testfs.WriteDir(dir, base); err != nil {
		t.Fatal(err)
	}
	return repo
}

// KVStand is a one-node stand of project p from the example's common base with the kv app, whose
// cache instance listens on port: it references the example's two secrets (kv-password,
// registry-password).
func KVStand(p string, port int) string {
	return fmt.Sprintf(`from_dep_manifest: ../../bases/common.yml
stand:
  project: %s
  env: dev
nodes:
  main:
    profile: small
    apps: [kv]
apps:
  kv:
    instances:
      cache:
        preferences:
          port: %d
`, p, port)
}
