package manifest

import (
	"context"
	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stands-engine/stands-reconciler/test/testfs"
)

// testSecrets are the values the fixtures' secrets resolve to.
var testSecrets = map[string]string{
	"SECRET_REG_PASS": "registry-pass-value",
	"SECRET_KV_PASS":  "kv-pass-value",
}

func mapSource(m map[string]string) EnvSource {
	return EnvSource{Lookup: func(k string) (string, bool) { v, ok := m[k]; return v, ok }}
}

func miniRepo(t testing.TB) fstest.MapFS {
	t.Helper()
	fsys, err := testfs.Dir("testdata/minirepo")
	if err != nil {
		t.Fatal(err)
	}
	return fsys
}

// fixture overlays the archive at path on the mini repository.
func fixture(t testing.TB, path string) (fstest.MapFS, testfs.Archive) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	a := testfs.Parse(string(data))
	fsys, err := testfs.Overlay(miniRepo(t), a)
	if err != nil {
		t.Fatal(err)
	}
	return fsys, a
}

// fixtureFS is fixture with the archive's "symlinks" section ("path -> target" per line) made into
// links and its "large" section ("path bytes") into files over the size limit, as a commit of the
// daemon holds them (internal/repofs).
func fixtureFS(t testing.TB, path string) (fs.FS, testfs.Archive) {
	t.Helper()
	files, a := fixture(t, path)
	links := map[string]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(a["symlinks"]), "\n") {
		if p, target, ok := strings.Cut(line, " -> "); ok {
			links[strings.TrimSpace(p)] = strings.TrimSpace(target)
		}
	}
	large := map[string]int64{}
	for line := range strings.SplitSeq(strings.TrimSpace(a["large"]), "\n") {
		if p, size, ok := strings.Cut(line, " "); ok {
			n, err := strconv.ParseInt(strings.TrimSpace(size), 10, 64)
			if err != nil {
				t.Fatalf("large: %v", err)
			}
			large[p] = n
		}
	}
	return repofs.Tree(files, links, large), a
}

func preflightFS(t testing.TB, fsys fs.FS, secrets map[string]string) ([]*Result, error) {
	t.Helper()
	files, err := Discover(fsys)
	if err != nil {
		t.Fatal(err)
	}
	return PreflightAll(context.Background(), fsys, files, PreflightOptions{Secrets: mapSource(secrets)})
}
