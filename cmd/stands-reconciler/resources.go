package main

import (
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/manifest"
)

// resourceRoots are --resource NAME=PATH (the Stands Engine's flag): folders outside the stands
// repository that manifests reach as resource://NAME/PATH, for the one-shot commands that read
// manifests only. The daemon has none: its repository never reaches outside itself.
type resourceRoots map[string]string // name → absolute folder

// resourceCommands read manifests, and so take --resource.
var resourceCommands = []string{"validate", "render", "preview", "apply", "create", "destroy", "migrate", "adopt"}

func (r resourceRoots) String() string {
	var out []string
	for _, n := range slices.Sorted(maps.Keys(r)) {
		out = append(out, n+"="+r[n])
	}
	return strings.Join(out, ",")
}

func (r resourceRoots) Set(v string) error {
	name, dir, ok := strings.Cut(v, "=")
	if !ok || dir == "" {
		return fmt.Errorf("%q: want NAME=PATH", v)
	}
	if !manifest.ValidResourceName(name) {
		return fmt.Errorf("%q: a root's name has lower-case letters, digits, '.', '_' and '-'", name)
	}
	if _, dup := r[name]; dup {
		return fmt.Errorf("%q is given twice", name)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if st, err := os.Stat(abs); err != nil || !st.IsDir() {
		return fmt.Errorf("%s=%s: not a folder", name, dir)
	}
	r[name] = abs
	return nil
}

// resourceFlag registers --resource on a command that reads manifests.
func resourceFlag(fs *flag.FlagSet, r resourceRoots) {
	fs.Var(r, "resource", "NAME=PATH: a folder outside the repository that manifests reach as resource://NAME/PATH (repeatable; docs/migrating.md)")
}

// repo is the repository at root as the command reads it: with the roots when there are any. Each
// root is read as the repository is (repofs: no symbolic link followed).
func (r resourceRoots) repo(root string) (fs.FS, error) {
	if len(r) == 0 {
		return repofs.Dir(root), nil
	}
	roots := map[string]fs.FS{}
	for n, dir := range r {
		roots[n] = repofs.Dir(dir)
	}
	return manifest.WithResources(repofs.Dir(root), roots)
}

// display shows a file of the repository at root, or of a root, as a path on disk: relative to the
// working directory when that is shorter.
func (r resourceRoots) display(root, file string) string {
	if name, rel, ok := manifest.ResourcePath(file); ok && r[name] != "" {
		root, file = r[name], rel
	}
	return display(root, file)
}
