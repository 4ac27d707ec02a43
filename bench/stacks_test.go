//go:build bench

package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Real creates take seconds each here, so of the 1,000 stacks three are made by the daemon through
// the Pulumi CLI, and the others are copies of the first, renamed: every place the CLI writes the
// project's name (stack name, URNs, the stand id, the server name and labels) and the spec hash the
// copy's own manifest has. The copy of the first made under the second's name is then compared with
// the second as the CLI made it (formOf), and the CLI lists and decrypts the copies.

// mapSecrets resolves !secret from a map, as Vault holds them.
type mapSecrets map[string]string

func (m mapSecrets) Secret(_ context.Context, ref manifest.SecretRef) (string, error) {
	v, ok := m[ref.Path]
	if !ok {
		return "", fmt.Errorf("%w: %s", manifest.ErrSecretNotFound, ref.Path)
	}
	return v, nil
}

// judgeAll loads every stand as the reconciler does, from the repository's files: the inputs it would
// hand the engine, with their spec hashes.
func judgeAll(t *testing.T, files map[string]string, passphrase string) map[string]stands.Input {
	t.Helper()
	fsys := fstest.MapFS{}
	for p, c := range files {
		fsys[p] = &fstest.MapFile{Data: []byte(c)}
	}
	paths, err := manifest.Discover(fsys)
	if err != nil {
		t.Fatal(err)
	}
	results, err := manifest.PreflightAll(context.Background(), fsys, paths, manifest.PreflightOptions{
		LoadOptions: manifest.LoadOptions{DefaultOwner: "local"}, Secrets: mapSecrets(secretValues), KeepGoing: true})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]stands.Input{}
	for _, r := range results {
		if r.Err != nil {
			t.Fatalf("%s: %v", r.File, r.Err)
		}
		h, err := manifest.SpecHash(fsys, r.Stand, r.Secrets, passphrase)
		if err != nil {
			t.Fatal(err)
		}
		out[r.Stand.ID] = stands.Input{FS: fsys, Stand: r.Stand, Secrets: r.Secrets, SpecHash: h}
	}
	return out
}

// digests are what a stack records of its stand's manifest: the spec hash, and the print the
// review gate compares (judge.Print: the spec with its secrets as placeholders). A copy has its own.
type digests struct{ spec, print string }

// specHashes is every stand's digests, by stand id.
func specHashes(t *testing.T, files map[string]string, passphrase string) map[string]digests {
	t.Helper()
	out := map[string]digests{}
	for id, in := range judgeAll(t, files, passphrase) {
		p, err := judge.Print(&in, passphrase)
		if err != nil {
			t.Fatal(err)
		}
		out[id] = digests{spec: in.SpecHash, print: p}
	}
	return out
}

// renamer rewrites a stack's or a status file's bytes from one project to another. Ciphertext is
// base64, whose alphabet has no '_', '-' or ':', so the patterns below never match inside it.
func renamer(from, to string, fromHash, toHash digests) *strings.Replacer {
	return strings.NewReplacer(
		"organization/"+from+"/", "organization/"+to+"/",
		"::"+from+"::", "::"+to+"::",
		"::"+from+"-", "::"+to+"-", // the stack resource, <project>-<env>
		"local_"+from+"_", "local_"+to+"_",
		"local-"+from+"-", "local-"+to+"-",
		`"`+from+`"`, `"`+to+`"`,
		"/"+from+"/", "/"+to+"/",
		fromHash.spec, toHash.spec,
		fromHash.print, toHash.print)
}

func stackFile(state, project string) string {
	return filepath.Join(backendDir(state), ".pulumi", "stacks", project, "dev.json")
}

// cloneStack writes the copy of the template's stack file and newest history entry under project,
// and returns the copy's bytes.
func cloneStack(t *testing.T, state, tmpl, project string, tmplHash, hash digests) []byte {
	t.Helper()
	r := renamer(tmpl, project, tmplHash, hash)
	data, err := os.ReadFile(stackFile(state, tmpl))
	if err != nil {
		t.Fatal(err)
	}
	out := []byte(r.Replace(string(data)))
	writeFile(t, stackFile(state, project), out)
	hist := filepath.Join(backendDir(state), ".pulumi", "history", tmpl, "dev")
	entries, err := os.ReadDir(hist)
	if err != nil {
		t.Fatal(err)
	}
	var newest string
	for _, e := range entries {
		if strings.HasSuffix(e.Name(), ".history.json") && e.Name() > newest {
			newest = e.Name()
		}
	}
	if newest != "" {
		h, err := os.ReadFile(filepath.Join(hist, newest))
		if err != nil {
			t.Fatal(err)
		}
		writeFile(t, filepath.Join(backendDir(state), ".pulumi", "history", project, "dev", newest), []byte(r.Replace(string(h))))
	}
	return out
}

// cloneStatus is the template's status file for the copy: renamed, and naming the copy's state.
func cloneStatus(t *testing.T, status []byte, tmpl, project string, tmplHash, hash digests, stack []byte) []byte {
	t.Helper()
	var m map[string]any
	if err := json.Unmarshal([]byte(renamer(tmpl, project, tmplHash, hash).Replace(string(status))), &m); err != nil {
		t.Fatal(err)
	}
	m["stateDigest"] = engine.StateDigestOf(stack)
	out, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(out, '\n')
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
}

// formOf compares two JSON documents: it fails on any key or type that differs, and returns the
// paths of the leaf values that differ (array indices as []), each once.
func formOf(t *testing.T, what string, a, b []byte) []string {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatal(err)
	}
	diffs := map[string]bool{}
	var walk func(path string, x, y any)
	walk = func(path string, x, y any) {
		switch xv := x.(type) {
		case map[string]any:
			yv, ok := y.(map[string]any)
			if !ok {
				t.Errorf("%s: %s is an object in one and %T in the other", what, path, y)
				return
			}
			for k := range xv {
				if _, ok := yv[k]; !ok {
					t.Errorf("%s: %s.%s is only in the copy", what, path, k)
				}
			}
			for k := range yv {
				if _, ok := xv[k]; !ok {
					t.Errorf("%s: %s.%s is only in the CLI's", what, path, k)
					continue
				}
				walk(path+"."+k, xv[k], yv[k])
			}
		case []any:
			yv, ok := y.([]any)
			if !ok || len(xv) != len(yv) {
				t.Errorf("%s: %s: arrays of %d and %v", what, path, len(xv), y)
				return
			}
			// Resources are in the order they were registered, which concurrent registrations vary.
			byURN(xv)
			byURN(yv)
			for i := range xv {
				walk(path+"[]", xv[i], yv[i])
			}
		default:
			xs, _ := x.(string)
			ys, _ := y.(string)
			switch {
			case fmt.Sprintf("%T", x) != fmt.Sprintf("%T", y):
				t.Errorf("%s: %s is %T in the copy and %T in the CLI's", what, path, x, y)
			case xs != ys && providerRef.ReplaceAllString(xs, "") == providerRef.ReplaceAllString(ys, ""):
				diffs[path+" (provider id)"] = true
			case fmt.Sprint(x) != fmt.Sprint(y):
				diffs[path] = true
			}
		}
	}
	walk("", x, y)
	out := make([]string, 0, len(diffs))
	for p := range diffs {
		out = append(out, p)
	}
	sort.Strings(out)
	return out
}

// providerRef is the id part of a provider reference (URN::id).
var providerRef = regexp.MustCompile(`::[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$`)

// byURN sorts an array of resources by URN; other arrays keep their order.
func byURN(a []any) {
	urn := func(v any) (string, bool) {
		m, ok := v.(map[string]any)
		if !ok {
			return "", false
		}
		u, ok := m["urn"].(string)
		return u, ok
	}
	for _, v := range a {
		if _, ok := urn(v); !ok {
			return
		}
	}
	sort.SliceStable(a, func(i, j int) bool {
		ui, _ := urn(a[i])
		uj, _ := urn(a[j])
		return ui < uj
	})
}

// volatile says whether a leaf may differ between two stacks the CLI made of the same manifest:
// times, ciphertext, ids Hetzner or Pulumi gave, addresses, keys made per stack, and the public
// connection record, one string holding the servers' addresses.
func volatile(path string) bool {
	for _, s := range []string{"(provider id)", "time", "ciphertext", ".id", "serverId", "IPv4", "privateIP", "IP", "created", "modified",
		"salt", "Key", "started", "finished", "seconds", "stateDigest", "host", "endpoint", "fingerprint", "hostKey", "connectionPublic"} {
		if strings.Contains(path, s) {
			return true
		}
	}
	return false
}

// checkClones compares the copy of tmpl made under other's name with other as the CLI made it.
func checkClones(t *testing.T, state, tmpl, other string, hashes map[string]digests, tmplStatus, otherStatus []byte) (stackDiffs, statusDiffs []string) {
	t.Helper()
	dir := t.TempDir()
	copyState := filepath.Join(dir, "state")
	writeFile(t, stackFile(copyState, tmpl), must(os.ReadFile(stackFile(state, tmpl))))
	// History for cloneStack to copy.
	src := filepath.Join(backendDir(state), ".pulumi", "history", tmpl)
	if err := os.CopyFS(filepath.Join(backendDir(copyState), ".pulumi", "history", tmpl), os.DirFS(src)); err != nil {
		t.Fatal(err)
	}
	copied := cloneStack(t, copyState, tmpl, other, hashes["local_"+tmpl+"_dev"], hashes["local_"+other+"_dev"])
	real := must(os.ReadFile(stackFile(state, other)))
	stackDiffs = formOf(t, "stack file", copied, real)
	copiedStatus := cloneStatus(t, tmplStatus, tmpl, other, hashes["local_"+tmpl+"_dev"], hashes["local_"+other+"_dev"], copied)
	statusDiffs = formOf(t, "status file", copiedStatus, otherStatus)
	if d := os.Getenv("BENCH_KEEP"); d != "" {
		writeFile(t, filepath.Join(d, "copy.json"), copied)
		writeFile(t, filepath.Join(d, "real.json"), real)
		writeFile(t, filepath.Join(d, "copy-status.json"), copiedStatus)
		writeFile(t, filepath.Join(d, "real-status.json"), otherStatus)
	}
	for _, p := range slices.Concat(stackDiffs, statusDiffs) {
		if !volatile(p) {
			t.Errorf("the copy differs from the CLI's stack at %s, which two stacks of one manifest share", p)
		}
	}
	return stackDiffs, statusDiffs
}

// inventoryOf lists the backend as the engine does (no Pulumi process).
func inventoryOf(t *testing.T, eng *engine.Engine) []stands.StackInfo {
	t.Helper()
	inv, err := eng.Inventory(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return inv
}

// readStatus reads status/<id>.json of a snapshot's files.
func readStatus(files fs.FS, id string) []byte {
	data, _ := fs.ReadFile(files, stands.StatusPath(id))
	return data
}
