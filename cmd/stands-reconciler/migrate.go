package main

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"github.com/stands-engine/stands-reconciler/mako"
	"github.com/stands-engine/stands-reconciler/manifest"
)

// migrate turns a Stands Engine repository (and its --resource roots) into one of ours: each *.mako
// template becomes a *.tmpl Go template (package mako), each .mako reference and ${...} in a YAML
// file is rewritten, and every translated template a stand renders is rendered again the old way
// (python3 with Mako) with the same context, to prove the two write the same.

type templateChange struct {
	file, to string // on disk
	src, out string
	manifest string // the new template's path as manifests name it (repository- or resource-relative)
	problems []mako.Problem
}

type yamlChange struct {
	file     string
	out      string
	edits    []int // lines changed
	problems []mako.Problem
}

type migration struct {
	templates []*templateChange
	yamls     []*yamlChange
}

func (m *migration) problems() int {
	n := 0
	for _, t := range m.templates {
		n += len(t.problems)
	}
	for _, y := range m.yamls {
		n += len(y.problems)
	}
	return n
}

var makoRef = regexp.MustCompile(`\.mako\b`)

// planMigration reads the folder at dir, whose files manifests name under prefix ("" for the
// repository, resource:/NAME/ for a root).
func planMigration(m *migration, dir, prefix string) error {
	return filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if !d.Type().IsRegular() {
			return nil
		}
		rel, _ := filepath.Rel(dir, p)
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		switch ext := filepath.Ext(p); {
		case ext == ".mako":
			out, problems := mako.Convert(string(data))
			to := strings.TrimSuffix(p, ".mako") + ".tmpl"
			m.templates = append(m.templates, &templateChange{file: p, to: to, src: string(data), out: out, problems: problems,
				manifest: prefix + filepath.ToSlash(strings.TrimSuffix(rel, ".mako")+".tmpl")})
		case ext == ".yml" || ext == ".yaml":
			if y := yamlMigration(p, string(data)); y != nil {
				m.yamls = append(m.yamls, y)
			}
		}
		return nil
	})
}

// yamlMigration rewrites a YAML file's .mako references and its ${...} values, line by line (the
// file's layout and comments stay); nil when nothing changes.
func yamlMigration(file, src string) *yamlChange {
	y := &yamlChange{file: file}
	lines := strings.SplitAfter(src, "\n")
	for i, line := range lines {
		changed := makoRef.ReplaceAllString(line, ".tmpl")
		if strings.Contains(changed, "${") {
			var problems []mako.Problem
			changed, problems = mako.ConvertInline(changed, i+1)
			y.problems = append(y.problems, problems...)
		}
		if changed != line {
			y.edits = append(y.edits, i+1)
			lines[i] = changed
		}
	}
	if len(y.edits) == 0 && len(y.problems) == 0 {
		return nil
	}
	y.out = strings.Join(lines, "")
	return y
}

// write applies the migration: new templates (never over a different file), YAML rewritten, and
// each translated .mako removed — kept beside its .tmpl when something in it is left for a human.
func (m *migration) write() error {
	for _, t := range m.templates {
		if old, err := os.ReadFile(t.to); err == nil && string(old) != t.out {
			return fmt.Errorf("%s exists and differs from the translation of %s: move it away first", t.to, t.file)
		}
	}
	for _, t := range m.templates {
		if err := os.WriteFile(t.to, []byte(t.out), 0o644); err != nil {
			return err
		}
	}
	for _, y := range m.yamls {
		if err := os.WriteFile(y.file, []byte(y.out), 0o644); err != nil {
			return err
		}
	}
	for _, t := range m.templates {
		if len(t.problems) == 0 {
			if err := os.Remove(t.file); err != nil {
				return err
			}
		}
	}
	return nil
}

func runMigrate(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("migrate", "migrate [--dry-run] [--owner NAME] [--resource NAME=PATH]... REPO\n\nTurns a Stands Engine repository into one of ours: *.mako templates become *.tmpl Go templates,\n.mako references and ${...} in YAML files are rewritten, and each translated template is rendered\nboth ways with the same context (python3 with Mako) to prove it. What is not translated is reported\nwith file:line and left for a human; exit 1 then.", std)
	conf := newSettings(fs, getenv)
	var owner string
	ownerFlag(conf, &owner)
	roots := resourceRoots{}
	resourceFlag(fs, roots)
	dry := fs.Bool("dry-run", false, "say what would change; write nothing")
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(std.err, "migrate: give the repository's folder")
		return exitUsage
	}
	root, err := filepath.Abs(fs.Arg(0))
	if err == nil && !isDir(filepath.Join(root, manifest.StandsDir)) {
		err = fmt.Errorf("%s has no %s/ folder: give the repository's root", fs.Arg(0), manifest.StandsDir)
	}
	m := &migration{}
	if err == nil {
		err = planMigration(m, root, "")
	}
	for _, n := range slices.Sorted(maps.Keys(roots)) {
		if err == nil {
			err = planMigration(m, roots[n], "resource:/"+n+"/")
		}
	}
	if err != nil {
		fmt.Fprintf(std.err, "migrate: %v\n", err)
		return exitError
	}
	m.report(std, *dry)
	if *dry {
		return migrateRecord(std, m, nil, true)
	}
	if err := m.write(); err != nil {
		fmt.Fprintf(std.err, "migrate: %v\n", err)
		return exitError
	}
	proof := m.prove(ctx, root, roots, owner, std)
	return migrateRecord(std, m, proof, false)
}

// report prints what changes and what is left, each with file:line.
func (m *migration) report(std stdio, dry bool) {
	verb := "translated"
	if dry {
		verb = "would translate"
	}
	for _, t := range m.templates {
		fmt.Fprintf(std.err, "migrate: %s %s → %s\n", verb, display("", t.file), filepath.Base(t.to))
		for _, p := range t.problems {
			fmt.Fprintf(std.err, "%s:%d: %s [mako]\n", display("", t.file), p.Line, p.Msg)
		}
	}
	for _, y := range m.yamls {
		for _, l := range y.edits {
			fmt.Fprintf(std.err, "%s:%d: .mako reference or ${…} rewritten\n", display("", y.file), l)
		}
		for _, p := range y.problems {
			fmt.Fprintf(std.err, "%s:%d: %s [mako]\n", display("", y.file), p.Line, p.Msg)
		}
	}
}

// proof is what rendering both ways showed.
type proof struct {
	proven   []string // templates every render of which matched
	differs  []string // template: where the first render that differed did
	unproven []string // template: why it could not be proven
}

// prove renders every stand with placeholder secrets and test addresses, and each translated
// template it renders again with the same context through Mako.
func (m *migration) prove(ctx context.Context, root string, roots resourceRoots, owner string, std stdio) *proof {
	pr := &proof{}
	byPath := map[string]*templateChange{}
	for _, t := range m.templates {
		if len(t.problems) == 0 {
			byPath[t.manifest] = t
		}
	}
	python, err := mako.FindPython()
	fsys, ferr := roots.repo(root)
	var files []string
	if ferr == nil {
		files, ferr = manifest.Discover(fsys)
	}
	if err == nil {
		err = ferr
	}
	seen := map[string]bool{}
	for _, file := range files {
		st, lerr := manifest.Load(fsys, file, manifest.LoadOptions{DefaultOwner: owner})
		if lerr != nil {
			fmt.Fprintf(std.err, "migrate: %s does not load yet, its templates are not proven:\n%v\n", file, lerr)
			continue
		}
		_, _ = manifest.RenderObserved(fsys, st, manifest.PlaceholderSecrets(st, 0), manifest.PreflightAddresses(st), func(p string, c map[string]any, out []byte) {
			t := byPath[p]
			if t == nil || err != nil || slices.Contains(pr.differs, p) {
				return
			}
			seen[p] = true
			old, rerr := mako.Render(ctx, python, t.src, c)
			if rerr != nil {
				pr.differs = append(pr.differs, fmt.Sprintf("%s: Mako fails on it (stand %s): %v", p, st.ID, rerr))
				return
			}
			if line, ok := sameOutput(old, out); !ok {
				pr.differs = append(pr.differs, fmt.Sprintf("%s: stand %s, line %d: %s", p, st.ID, line, firstDiff(old, out, line)))
			}
		})
	}
	for _, p := range slices.Sorted(maps.Keys(byPath)) {
		switch {
		case err != nil:
			pr.unproven = append(pr.unproven, p+": "+err.Error())
		case !seen[p]:
			pr.unproven = append(pr.unproven, p+": no stand renders it")
		case !slices.ContainsFunc(pr.differs, func(d string) bool { return strings.HasPrefix(d, p+":") }):
			pr.proven = append(pr.proven, p)
		}
	}
	for _, s := range pr.proven {
		fmt.Fprintf(std.err, "migrate: proven: %s renders as its Mako template did\n", s)
	}
	for _, s := range append(pr.differs, pr.unproven...) {
		fmt.Fprintf(std.err, "migrate: not proven: %s\n", s)
	}
	return pr
}

// sameOutput compares two renders; when they differ, it returns the first line that does.
func sameOutput(a, b []byte) (int, bool) {
	if bytes.Equal(a, b) {
		return 0, true
	}
	al, bl := strings.Split(string(a), "\n"), strings.Split(string(b), "\n")
	for i := 0; i < len(al) || i < len(bl); i++ {
		if i >= len(al) || i >= len(bl) || al[i] != bl[i] {
			return i + 1, false
		}
	}
	return len(al), false
}

func firstDiff(a, b []byte, line int) string {
	get := func(s []byte) string {
		ls := strings.Split(string(s), "\n")
		if line-1 < len(ls) {
			return ls[line-1]
		}
		return "(nothing)"
	}
	return fmt.Sprintf("Mako wrote %q, the Go template writes %q", get(a), get(b))
}

// migrateRecord prints the result record; exit 1 when anything is left for a human.
func migrateRecord(std stdio, m *migration, pr *proof, dry bool) int {
	rec := map[string]any{"operation": "migrate", "templates": len(m.templates), "yaml_files": len(m.yamls), "problems": m.problems()}
	ok := m.problems() == 0
	if pr != nil {
		rec["proven"], rec["not_proven"] = len(pr.proven), len(pr.differs)+len(pr.unproven)
		ok = ok && len(pr.differs)+len(pr.unproven) == 0
	}
	rec["status"] = "success"
	if dry {
		rec["status"] = "dry-run"
	} else if !ok {
		rec["status"] = "incomplete"
	}
	if code := writeRecord(std, rec); code != exitOK {
		return code
	}
	if !ok {
		return exitError
	}
	return exitOK
}
