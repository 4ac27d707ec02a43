package main

import (
	"context"
	"fmt"
	iofs "io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/localrepo"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/migrate"
)

func runMigrate(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("migrate", "migrate [--dry-run] [--owner NAME] [--resource NAME=PATH]... [--out DIR] PATH\n\nTurns a Stands Engine tree (with --out: into a new repository of this project's layout) or repository into one of ours: *.mako templates become *.tmpl Go templates,\n.mako references and ${...} in YAML files are rewritten, and each translated template is rendered\nboth ways with the same context (python3 with Mako) to prove it. What is not translated is reported\nwith file:line and left for a human; exit 1 then.", std)
	conf := newSettings(fs, getenv)
	var owner string
	ownerFlag(conf, &owner, defaultOwner)
	roots := localrepo.Roots{}
	resourceFlag(fs, roots)
	dry := fs.Bool("dry-run", false, "say what would change; write nothing")
	outDir := fs.String("out", "", "for a Stands Engine tree (a stand folder, a tree of them, or one manifest): the folder, new or empty, the repository is written to in this project's layout; the tree is not changed")
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	if fs.NArg() != 1 {
		fmt.Fprintln(std.err, "migrate: give the repository's folder")
		return exitUsage
	}
	root, err := filepath.Abs(fs.Arg(0))
	if err != nil {
		fmt.Fprintf(std.err, "migrate: %v\n", err)
		return exitError
	}
	root, roots, left, code := moveLayout(std, fs.Arg(0), root, roots, *outDir, *dry)
	if code != exitOK {
		return code
	}
	defer func() {
		if *dry {
			return
		}
		for _, s := range left {
			fmt.Fprintf(std.err, "migrate: left to you: %s\n", s)
		}
	}()
	m := &migrate.Migration{}
	err = m.Scan(root, "")
	for _, n := range slices.Sorted(maps.Keys(roots)) {
		if err == nil {
			err = m.Scan(roots[n], "resource:/"+n+"/")
		}
	}
	if err != nil {
		fmt.Fprintf(std.err, "migrate: %v\n", err)
		return exitError
	}
	reportMigration(std, m, *dry)
	if *dry {
		return migrateRecord(std, m, nil, true)
	}
	return proveAndWrite(ctx, std, m, root, roots, owner)
}

// moveLayout moves a tree in the Stands Engine's layout into this project's, in the folder out
// (nothing with dry), resource roots included (the daemon has none), and returns the repository to
// translate, its roots, and what is left to the user. A repository of this project's layout is
// returned as it is.
func moveLayout(std stdio, arg, root string, roots localrepo.Roots, out string, dry bool) (string, localrepo.Roots, []string, int) {
	if ourLayout(root) {
		if out != "" {
			fmt.Fprintln(std.err, "migrate: --out is for a Stands Engine tree; this repository is translated where it is")
			return "", nil, nil, exitUsage
		}
		return root, roots, nil, exitOK
	}
	if out == "" {
		fmt.Fprintf(std.err, "migrate: %s is not a repository of this project's layout (stands/<name>/stand.yml): give --out DIR, a new folder to write it to in that layout\n", arg)
		return "", nil, nil, exitUsage
	}
	lay, err := migrate.PlanLayout(root, roots)
	if err != nil {
		fmt.Fprintf(std.err, "migrate: %v\n", err)
		return "", nil, nil, exitError
	}
	for _, s := range lay.Steps {
		fmt.Fprintf(std.err, "migrate: %s\n", s)
	}
	if dry {
		for _, s := range lay.Left {
			fmt.Fprintf(std.err, "migrate: left to you: %s\n", s)
		}
		// The templates as they are, to say what would change: each once, a root inside the tree
		// with the tree.
		outside := localrepo.Roots{}
		for n, dir := range roots {
			if r, err := filepath.Rel(root, dir); err != nil || r == ".." || strings.HasPrefix(r, "../") {
				outside[n] = dir
			}
		}
		return root, outside, lay.Left, exitOK
	}
	if err := lay.Write(out); err != nil {
		fmt.Fprintf(std.err, "migrate: %v\n", err)
		return "", nil, nil, exitError
	}
	if root, err = filepath.Abs(out); err != nil {
		fmt.Fprintf(std.err, "migrate: %v\n", err)
		return "", nil, nil, exitError
	}
	fmt.Fprintf(std.err, "migrate: written to %s in this project's layout; translating its templates there\n", out)
	return root, localrepo.Roots{}, lay.Left, exitOK // the roots are in resources/ now
}

// proveAndWrite proves the translations on the repository as the migration would leave it, and
// writes them only when none renders otherwise than its Mako template.
func proveAndWrite(ctx context.Context, std stdio, m *migrate.Migration, root string, roots localrepo.Roots, owner string) int {
	proof := m.Prove(ctx, func() (iofs.FS, error) {
		rs := map[string]iofs.FS{}
		for n, dir := range roots {
			rs[n] = repofs.Dir(dir)
		}
		return m.Overlaid(repofs.Dir(root), rs)
	}, owner)
	for _, n := range proof.Notes {
		fmt.Fprintf(std.err, "migrate: %s\n", n)
	}
	for _, s := range proof.Proven {
		fmt.Fprintf(std.err, "migrate: proven: %s renders as its Mako template did\n", s)
	}
	for _, s := range append(proof.Differs, proof.Unproven...) {
		fmt.Fprintf(std.err, "migrate: not proven: %s\n", s)
	}
	if len(proof.Differs) > 0 {
		// A translation that renders otherwise is wrong where nothing said so: nothing is written,
		// and a run again finds the same .mako files and says the same.
		fmt.Fprintln(std.err, "migrate: nothing written: a translation renders otherwise than its Mako template; "+
			"rewrite that template in a form that converts, or write its .tmpl by hand and remove the .mako")
		return migrateRecord(std, m, proof, false)
	}
	if err := m.Write(proof.Proven); err != nil {
		fmt.Fprintf(std.err, "migrate: %v\n", err)
		return exitError
	}
	return migrateRecord(std, m, proof, false)
}

// reportMigration prints what changes and what is left, each with file:line.
func reportMigration(std stdio, m *migrate.Migration, dry bool) {
	verb := "translated"
	if dry {
		verb = "would translate"
	}
	for _, t := range m.Templates {
		fmt.Fprintf(std.err, "migrate: %s %s → %s\n", verb, localrepo.Display("", t.File), filepath.Base(t.To))
		for _, p := range t.Problems {
			fmt.Fprintf(std.err, "%s:%d: %s [mako]\n", localrepo.Display("", t.File), p.Line, p.Msg)
		}
	}
	for _, y := range m.YAMLs {
		for _, l := range y.Edits {
			fmt.Fprintf(std.err, "%s:%d: .mako reference or ${…} rewritten\n", localrepo.Display("", y.File), l)
		}
		for _, p := range y.Problems {
			fmt.Fprintf(std.err, "%s:%d: %s [mako]\n", localrepo.Display("", y.File), p.Line, p.Msg)
		}
	}
}

// migrateRecord prints the result record; exit 1 when anything is left for a human.
func migrateRecord(std stdio, m *migrate.Migration, pr *migrate.Proof, dry bool) int {
	rec := map[string]any{"operation": "migrate", "templates": len(m.Templates), "yaml_files": len(m.YAMLs), "problems": m.Problems()}
	ok := m.Problems() == 0
	if pr != nil {
		rec["proven"], rec["not_proven"] = len(pr.Proven), len(pr.Differs)+len(pr.Unproven)
		ok = ok && len(pr.Differs)+len(pr.Unproven) == 0
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

// ourLayout: a repository of this project's layout, with at least one stands/<name>/stand.yml (a
// Stands Engine tree may have a stands/ folder of env files).
func ourLayout(root string) bool {
	found, _ := filepath.Glob(filepath.Join(root, manifest.StandsDir, "*", manifest.StandFile))
	deeper, _ := filepath.Glob(filepath.Join(root, manifest.StandsDir, "*", "*", manifest.StandFile))
	return len(found)+len(deeper) > 0
}
