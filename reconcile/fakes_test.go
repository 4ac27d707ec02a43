package reconcile

import (
	"encoding/json"
	"testing"

	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/fakes"
)

// The unit tests drive the loop with the fakes of test/fakes; the integration tests in
// cmd/stands-reconciler drive it with real Gitea, Pulumi, hcloudsim and Vault.

var (
	_ Source  = (*fakes.Source)(nil)
	_ Engine  = (*fakes.Engine)(nil)
	_ Secrets = (*fakes.Secrets)(nil)
	_ Forge   = (*fakes.Forge)(nil)
)

type (
	fakeEngine  = fakes.Engine
	fakeSecrets = fakes.Secrets
)

// fakeSource is the fake repository, read as the loop's status files.
type fakeSource struct{ *fakes.Source }

func newFakeSource(t *testing.T, files map[string]string) *fakeSource {
	return &fakeSource{fakes.NewSource(t, files)}
}

func (s *fakeSource) statusOf(t *testing.T, id string) Status {
	t.Helper()
	data, ok := s.StatusFile(stands.StatusPath(id))
	if !ok {
		t.Fatalf("no status file for %s", id)
	}
	var st Status
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

// newForgeHarness is a harness whose loop sets commit statuses on the fake Gitea.
func newForgeHarness(t *testing.T, ids ...string) (*harness, *fakes.Forge) {
	f := fakes.NewForge()
	h := newHarness(t, repoWith(ids...), func(c *Config) {
		c.Branch, c.StatusBranch, c.Forge = "main", "main", f
	})
	return h, f
}
