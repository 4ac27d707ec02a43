package migrate

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/stands-engine/stands-reconciler/manifest"
)

// Layout moves a tree laid out as the Stands Engine's guide has it — a stand's folder anywhere
// (demo/stand/stand.yml, its cloud-init template beside it), shared packages in --resource folders,
// env files beside them — into this project's: each stand's folder under stands/<project>-<env>/
// with its manifest named stand.yml, each resource root under resources/<name>/, the rest of the
// tree where it was, and every path a YAML file names rewritten to where its target went
// (resource://NAME/… becomes a relative path: the daemon has no roots). Env files are not copied:
// they hold the launcher's settings and secrets, which stay out of a repository.
type Layout struct {
	Files map[string]string // output path (slash-separated, under the output folder) → file on disk
	Edits map[string][]byte // output path → its content with the paths it names rewritten
	Steps []string          // what the move does, in order
	Left  []string          // what is left to the user
}

// pathKeys are the YAML keys whose values are paths relative to their file (manifest.md): bases,
// cloud-init templates and app packages in manifests; an app's files, Pod, connection template and
// hook in app.yml.
var pathLine = regexp.MustCompile(`^(\s*(?:-\s+)?(?:from_dep_manifest|cloud-init|package|src|pod|connection)\s*:\s*)(["']?)([^"'#\s][^"'#]*?)(["']?)(\s*(?:#.*)?)$`)

// envFile is a file of the launcher's settings.
func envFile(name string) bool { return name == ".env" || strings.HasSuffix(name, ".env") }

// moved is a folder on disk and the output folder it goes to.
type moved struct{ from, to string }

// PlanLayout plans the move of the tree at src (a folder, or one manifest file) and the resource
// roots (name → folder) into this project's layout.
func PlanLayout(src string, roots map[string]string) (*Layout, error) {
	tree, manifests, whole, err := findTree(src)
	if err != nil {
		return nil, err
	}
	l := &Layout{Files: map[string]string{}, Edits: map[string][]byte{}}
	pl := &placement{tree: tree}
	names, err := l.placeStands(pl, manifests, whole)
	if err != nil {
		return nil, err
	}
	for _, n := range slices.Sorted(maps.Keys(roots)) {
		dir, err := filepath.Abs(roots[n])
		if err != nil {
			return nil, err
		}
		pl.folders = append(pl.folders, moved{from: dir, to: "resources/" + n})
		l.step("resource root %s (%s) → resources/%s/", n, roots[n], n)
	}
	files, err := l.collect(append([]string{tree}, rootsDirs(pl.folders)...))
	if err != nil {
		return nil, err
	}
	for _, p := range files {
		to, _ := pl.out(p)
		if prev, dup := l.Files[to]; dup && prev != p {
			return nil, fmt.Errorf("%s and %s would both be %s", prev, p, to)
		}
		l.Files[to] = p
		if ext := filepath.Ext(p); ext == ".yml" || ext == ".yaml" {
			if edited, changed, err := l.rewrite(p, to, roots, pl.out); err != nil {
				return nil, err
			} else if changed {
				l.Edits[to] = edited
			}
		}
	}
	for _, name := range names {
		l.left("%s/%s: its servers exist under the Stands Engine's stack: adopt it, so that none is recreated "+
			"(stands-reconciler --env-file … adopt %s/%s/%s; docs/migrating.md, Stacks: adopt)", manifest.StandsDir, name, manifest.StandsDir, name, manifest.StandFile)
	}
	l.left("the new folder is a repository of this project's layout: put it under Git and push it where the daemon reads it; " +
		"a stand without stand.owner takes the daemon's --owner, which is STAND__USER's value (docs/operations.md)")
	return l, nil
}

// findTree is the tree src is (a folder, or the folder of one manifest file), its Stands Engine
// manifests, and whether src named the whole folder.
func findTree(src string) (string, []string, bool, error) {
	src, err := filepath.Abs(src)
	if err != nil {
		return "", nil, false, err
	}
	st, err := os.Stat(src)
	if err != nil {
		return "", nil, false, err
	}
	tree, manifests := filepath.Dir(src), []string{src}
	if st.IsDir() {
		tree = src
		if manifests, err = findManifests(src); err != nil {
			return "", nil, false, err
		}
	}
	if len(manifests) == 0 {
		return "", nil, false, fmt.Errorf("%s holds no Stands Engine manifest (a YAML file whose stand: names a project and an env)", src)
	}
	return tree, manifests, st.IsDir(), nil
}

// placement says where each file on disk goes: stand folders and resource roots moved whole,
// manifests moved alone (their folder holds other manifests), the rest of the tree where it is.
type placement struct {
	tree    string
	folders []moved
	single  []moved
}

// out is where the file at p goes: the manifest moved alone, else the longest moved folder holding
// it, else its place in the tree; false outside all of them.
func (pl *placement) out(p string) (string, bool) {
	for _, s := range pl.single {
		if p == s.from {
			return s.to, true
		}
	}
	best := -1
	for i, f := range pl.folders {
		if within(f.from, p) && (best < 0 || len(f.from) > len(pl.folders[best].from)) {
			best = i
		}
	}
	if best >= 0 {
		return join(pl.folders[best].to, rel(pl.folders[best].from, p)), true
	}
	if within(pl.tree, p) {
		return rel(pl.tree, p), true
	}
	return "", false
}

// placeStands places each manifest's stand under stands/<project>-<env>/: its folder whole where it
// is the only manifest there (and not the tree itself, unless it is the only stand), else the
// manifest alone. It returns the stands' folder names, sorted.
func (l *Layout) placeStands(pl *placement, manifests []string, whole bool) ([]string, error) {
	perDir := map[string]int{}
	for _, m := range manifests {
		perDir[filepath.Dir(m)]++
	}
	names := map[string]string{}
	for _, m := range manifests {
		project, env, err := identity(m)
		if err != nil {
			return nil, err
		}
		name := strings.ToLower(project + "-" + env)
		if other, dup := names[name]; dup {
			return nil, fmt.Errorf("%s and %s are both stand %s/%s: one folder each is needed", other, m, project, env)
		}
		names[name] = m
		to := manifest.StandsDir + "/" + name
		if dir := filepath.Dir(m); perDir[dir] == 1 && (dir != pl.tree || !whole || len(manifests) == 1) {
			pl.folders = append(pl.folders, moved{from: dir, to: to})
			l.step("stand %s/%s: its folder %s → %s/", project, env, rel(pl.tree, dir), to)
			if filepath.Base(m) != manifest.StandFile {
				pl.single = append(pl.single, moved{from: m, to: to + "/" + manifest.StandFile})
			}
		} else {
			pl.single = append(pl.single, moved{from: m, to: to + "/" + manifest.StandFile})
			l.step("stand %s/%s: %s → %s/%s (its folder holds other stands: the files beside it stay)", project, env, rel(pl.tree, m), to, manifest.StandFile)
		}
	}
	return slices.Sorted(maps.Keys(names)), nil
}

// collect lists the regular files under the folders given, once each, leaving out Git's and the
// Stands Engine's own folders, links and env files (said in Left).
func (l *Layout) collect(bases []string) ([]string, error) {
	var files []string
	for _, base := range bases {
		err := filepath.WalkDir(base, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() {
				if d.Name() == ".git" || d.Name() == ".stands-engine" {
					return filepath.SkipDir
				}
				return nil
			}
			if !d.Type().IsRegular() {
				l.left("%s: not a regular file (a link?): not copied", p)
				return nil
			}
			if envFile(d.Name()) {
				l.left("%s: the launcher's settings, and maybe secrets: not copied into the repository. "+
					"Give it to the one-shot commands with --env-file; the daemon takes its own (docs/operations.md)", p)
				return nil
			}
			if !slices.Contains(files, p) {
				files = append(files, p)
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
	}
	return files, nil
}

func rootsDirs(fs []moved) []string {
	var out []string
	for _, f := range fs {
		if strings.HasPrefix(f.to, "resources/") {
			out = append(out, f.from)
		}
	}
	return out
}

// rewrite rewrites the paths a YAML file names for its new place; line by line, its layout and
// comments kept.
func (l *Layout) rewrite(file, to string, roots map[string]string, out func(string) (string, bool)) ([]byte, bool, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, false, err
	}
	lines := strings.SplitAfter(string(data), "\n")
	changed := false
	for i, line := range lines {
		body := strings.TrimRight(line, "\r\n")
		m := pathLine.FindStringSubmatch(body)
		if m == nil || m[2] != m[4] {
			continue
		}
		ref := strings.TrimSpace(m[3])
		var target string
		switch {
		case strings.HasPrefix(ref, manifest.ResourceScheme):
			name, p, _ := strings.Cut(strings.TrimPrefix(ref, manifest.ResourceScheme), "/")
			dir, ok := roots[name]
			if !ok {
				l.left("%s:%d: %s names root %q, which was not given (--resource %s=PATH)", file, i+1, ref, name, name)
				continue
			}
			target = filepath.Join(dir, filepath.FromSlash(p))
		case filepath.IsAbs(ref) || strings.Contains(ref, "://") || strings.Contains(ref, "${") || strings.Contains(ref, "{{"):
			continue
		default:
			target = filepath.Join(filepath.Dir(file), filepath.FromSlash(ref))
		}
		target, _ = filepath.Abs(target)
		if _, err := os.Stat(target); err != nil {
			if strings.HasPrefix(ref, manifest.ResourceScheme) {
				l.left("%s:%d: %s does not exist in its root: the daemon cannot read resource:// references", file, i+1, ref)
			}
			continue // not a file of the tree (a preference named src, say): as written
		}
		dest, ok := out(target)
		if !ok {
			l.left("%s:%d: %s is outside what is migrated: copy it into the repository and name it from there", file, i+1, ref)
			continue
		}
		now, err := filepath.Rel(filepath.Dir(filepath.FromSlash(to)), filepath.FromSlash(dest))
		if err != nil {
			return nil, false, err
		}
		now = filepath.ToSlash(now)
		if !strings.HasPrefix(ref, manifest.ResourceScheme) && filepath.Clean(filepath.FromSlash(ref)) == filepath.FromSlash(now) {
			continue // the same place relative to the file: as written
		}
		if !strings.HasPrefix(now, ".") {
			now = "./" + now
		}
		lines[i] = m[1] + m[2] + now + m[4] + m[5] + line[len(body):]
		l.step("%s:%d: %s → %s", to, i+1, ref, now)
		changed = true
	}
	return []byte(strings.Join(lines, "")), changed, nil
}

// Write makes the output folder, which must not exist or be empty, and copies and writes the
// planned files into it.
func (l *Layout) Write(outDir string) error {
	if entries, err := os.ReadDir(outDir); err == nil && len(entries) > 0 {
		return fmt.Errorf("%s is not empty: give a new folder", outDir)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	for _, to := range slices.Sorted(maps.Keys(l.Files)) {
		from := l.Files[to]
		data, ok := l.Edits[to]
		if !ok {
			var err error
			if data, err = os.ReadFile(from); err != nil {
				return err
			}
		}
		st, err := os.Stat(from)
		if err != nil {
			return err
		}
		p := filepath.Join(outDir, filepath.FromSlash(to))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, data, st.Mode().Perm()); err != nil {
			return err
		}
	}
	return nil
}

// findManifests lists the Stands Engine manifests under dir: YAML files whose stand: names a project
// and an env.
func findManifests(dir string) ([]string, error) {
	var out []string
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == ".git" || d.Name() == ".stands-engine") {
			return filepath.SkipDir
		}
		if ext := filepath.Ext(p); d.Type().IsRegular() && (ext == ".yml" || ext == ".yaml") {
			if _, _, err := identity(p); err == nil {
				out = append(out, p)
			}
		}
		return nil
	})
	return out, err
}

// identity reads stand.project and stand.env of a manifest.
func identity(file string) (project, env string, err error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return "", "", err
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(data)).Decode(&doc); err != nil || len(doc.Content) == 0 {
		return "", "", fmt.Errorf("%s: not a YAML mapping", file)
	}
	get := func(n *yaml.Node, key string) *yaml.Node {
		if n == nil || n.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			if n.Content[i].Value == key {
				return n.Content[i+1]
			}
		}
		return nil
	}
	stand := get(doc.Content[0], "stand")
	p, e := get(stand, "project"), get(stand, "env")
	if p == nil || e == nil || p.Value == "" || e.Value == "" {
		return "", "", fmt.Errorf("%s: no stand.project and stand.env", file)
	}
	return p.Value, e.Value, nil
}

func (l *Layout) step(format string, a ...any) { l.Steps = append(l.Steps, fmt.Sprintf(format, a...)) }
func (l *Layout) left(format string, a ...any) { l.Left = append(l.Left, fmt.Sprintf(format, a...)) }

// within: p is dir or under it.
func within(dir, p string) bool {
	r, err := filepath.Rel(dir, p)
	return err == nil && r != ".." && !strings.HasPrefix(r, ".."+string(filepath.Separator)) && !filepath.IsAbs(r)
}

func rel(dir, p string) string {
	r, err := filepath.Rel(dir, p)
	if err != nil {
		return p
	}
	return filepath.ToSlash(r)
}

func join(dir, r string) string {
	if r == "." {
		return dir
	}
	return dir + "/" + r
}
