package archtest

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestSeamsAreWhereTheDocsSay holds docs/architecture.md's "Where do I add…" for a second cloud and
// a second forge to the imports: Hetzner's package is made only by the provider (Clouds.Open), the
// Gitea SDK is imported only by gitsource, Gitea's webhook headers are named in one file, and every
// file the list names exists.
func TestSeamsAreWhereTheDocsSay(t *testing.T) {
	importers := map[string][]string{}
	out := string(output(t, goCmd(t, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")))
	for line := range strings.SplitSeq(strings.TrimSpace(out), "\n") {
		fields := strings.Fields(line)
		for _, imp := range fields[1:] {
			importers[imp] = append(importers[imp], strings.TrimPrefix(fields[0], module+"/"))
		}
	}
	product := func(pkgs []string) []string {
		return slices.DeleteFunc(slices.Clone(pkgs), func(p string) bool {
			return strings.HasPrefix(p, "test/") || strings.HasPrefix(p, "hcloudsim") || p == "cmd/hcloudsim" || p == "cmd/stands-demo" ||
				p == "internal/localserver" // runs Gitea for the demo and the tests
		})
	}
	if got := product(importers[module+"/engine/cloud/hetzner"]); !slices.Equal(got, []string{"engine/provider"}) {
		t.Errorf("engine/cloud/hetzner is imported by %v: a cloud's client is made in provider.Clouds.Open alone", got)
	}
	var sdk []string
	for imp, by := range importers {
		if strings.HasPrefix(imp, "code.gitea.io/sdk/") {
			sdk = append(sdk, product(by)...)
		}
	}
	if slices.Sort(sdk); !slices.Equal(slices.Compact(sdk), []string{"gitsource"}) {
		t.Errorf("the Gitea SDK is imported by %v: Gitea's API is read in gitsource alone", sdk)
	}
	root := testenv.RepoRoot()
	var headers []string
	for _, f := range trackedText(t, root) {
		if !strings.HasSuffix(f, ".go") || strings.HasSuffix(f, "_test.go") || strings.HasPrefix(f, "test/") {
			continue
		}
		if data, _ := os.ReadFile(filepath.Join(root, f)); strings.Contains(string(data), `"X-Gitea-`) {
			headers = append(headers, f)
		}
	}
	if !slices.Equal(headers, []string{"gitsource/webhook.go"}) {
		t.Errorf("Gitea's webhook headers are named in %v, not gitsource/webhook.go alone", headers)
	}
	arch, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, where, _ := strings.Cut(string(arch), "## Where do I add")
	named := 0
	for _, f := range []string{"engine/provider/provider.go", "engine/provider/server.go", "daemon/forge.go", "daemon/source.go", "gitsource/webhook.go"} {
		if !strings.Contains(where, "`"+f+"`") {
			t.Errorf("docs/architecture.md's Where do I add… does not name %s", f)
		}
		if _, err := os.Stat(filepath.Join(root, f)); err != nil {
			t.Error(err)
		}
		named++
	}
	if named == 0 {
		t.Fatal("checked no file")
	}
}
