package migrate

import (
	"context"
	"fmt"
	"io/fs"
	"maps"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/manifest"
)

// UsageError is a migration asked for in a way that cannot be carried out as given (a Stands Engine
// tree without a folder to write it to, or --out for a repository of this project's layout): the
// command says so and exits as it does for any misuse.
type UsageError struct{ Msg string }

func (e *UsageError) Error() string { return e.Msg }

// Options say what Run migrates, and where it reports.
type Options struct {
	Root   string            // the tree, repository or manifest to migrate
	Roots  map[string]string // its --resource roots, name → folder
	Out    string            // for a Stands Engine tree: the new or empty folder it is written to
	DryRun bool              // say what would change; write nothing
	Owner  string            // the owner a stand without one renders with, for the proofs
	// Report gets each line of the report as it is made: At ("file:line") is set for what is found
	// at a line of a file.
	Report func(Note)
	// Display shows a file's path (the command: relative to the working folder); nil shows it as
	// it is.
	Display func(file string) string
}

// Note is one line of a migration's report.
type Note struct{ At, Msg string }

// Outcome is what a migration did: the record the command prints, and whether anything is left.
type Outcome struct {
	Migration *Migration
	Proof     *Proof // nil on a dry run
	Left      []string
}

// Done reports whether nothing is left for a human.
func (o *Outcome) Done() bool {
	done := o.Migration.Problems() == 0
	if o.Proof != nil {
		done = done && len(o.Proof.Differs)+len(o.Proof.Unproven) == 0
	}
	return done
}

// Record is the result record of the migration.
func (o *Outcome) Record(dryRun bool) map[string]any {
	m := o.Migration
	rec := map[string]any{"operation": "migrate", "templates": len(m.Templates), "yaml_files": len(m.YAMLs), "problems": m.Problems()}
	if o.Proof != nil {
		rec["proven"], rec["not_proven"] = len(o.Proof.Proven), len(o.Proof.Differs)+len(o.Proof.Unproven)
	}
	switch {
	case dryRun:
		rec["status"] = "dry-run"
	case o.Done():
		rec["status"] = "success"
	default:
		rec["status"] = "incomplete"
	}
	return rec
}

// Run migrates o.Root (docs/migrating.md): a Stands Engine tree is first moved into this project's
// layout in o.Out, then every template is translated, proven by rendering both ways, and written
// only when none renders otherwise than its Mako template.
func Run(ctx context.Context, o Options) (*Outcome, error) {
	say := func(format string, args ...any) { o.Report(Note{Msg: fmt.Sprintf(format, args...)}) }
	root, err := filepath.Abs(o.Root)
	if err != nil {
		return nil, err
	}
	root, roots, left, err := moveLayout(o, root, say)
	if err != nil {
		return nil, err
	}
	m := &Migration{}
	err = m.Scan(root, "")
	for _, n := range slices.Sorted(maps.Keys(roots)) {
		if err == nil {
			err = m.Scan(roots[n], "resource:/"+n+"/")
		}
	}
	if err != nil {
		return nil, err
	}
	report(o, m)
	out := &Outcome{Migration: m, Left: left}
	if o.DryRun {
		return out, nil
	}
	out.Proof, err = proveAndWrite(ctx, o, m, root, roots, say)
	for _, s := range left {
		say("left to you: %s", s)
	}
	return out, err
}

// moveLayout moves a tree in the Stands Engine's layout into this project's, in the folder o.Out
// (nothing on a dry run), resource roots included (the daemon has none), and returns the
// repository to translate, its roots, and what is left to the user. A repository of this
// project's layout is returned as it is.
func moveLayout(o Options, root string, say func(string, ...any)) (string, map[string]string, []string, error) {
	if ourLayout(root) {
		if o.Out != "" {
			return "", nil, nil, &UsageError{"--out is for a Stands Engine tree; this repository is translated where it is"}
		}
		return root, o.Roots, nil, nil
	}
	if o.Out == "" {
		return "", nil, nil, &UsageError{o.Root + " is not a repository of this project's layout (stands/<name>/stand.yml): give --out DIR, a new folder to write it to in that layout"}
	}
	lay, err := PlanLayout(root, o.Roots)
	if err != nil {
		return "", nil, nil, err
	}
	for _, s := range lay.Steps {
		say("%s", s)
	}
	if o.DryRun {
		for _, s := range lay.Left {
			say("left to you: %s", s)
		}
		// The templates as they are, to say what would change: each once, a root inside the tree
		// with the tree.
		outside := map[string]string{}
		for n, dir := range o.Roots {
			if r, err := filepath.Rel(root, dir); err != nil || r == ".." || strings.HasPrefix(r, "../") {
				outside[n] = dir
			}
		}
		return root, outside, lay.Left, nil
	}
	if err := lay.Write(o.Out); err != nil {
		return "", nil, nil, err
	}
	if root, err = filepath.Abs(o.Out); err != nil {
		return "", nil, nil, err
	}
	say("written to %s in this project's layout; translating its templates there", o.Out)
	return root, map[string]string{}, lay.Left, nil // the roots are in resources/ now
}

// proveAndWrite proves the translations on the repository as the migration would leave it, and
// writes them only when none renders otherwise than its Mako template.
func proveAndWrite(ctx context.Context, o Options, m *Migration, root string, roots map[string]string, say func(string, ...any)) (*Proof, error) {
	proof := m.Prove(ctx, func() (fs.FS, error) {
		rs := map[string]fs.FS{}
		for n, dir := range roots {
			rs[n] = repofs.Dir(dir)
		}
		return m.Overlaid(repofs.Dir(root), rs)
	}, o.Owner)
	for _, n := range proof.Notes {
		say("%s", n)
	}
	for _, s := range proof.Proven {
		say("proven: %s renders as its Mako template did", s)
	}
	for _, s := range append(proof.Differs, proof.Unproven...) {
		say("not proven: %s", s)
	}
	if len(proof.Differs) > 0 {
		// A translation that renders otherwise is wrong where nothing said so: nothing is written,
		// and a run again finds the same .mako files and says the same.
		say("nothing written: a translation renders otherwise than its Mako template; " +
			"rewrite that template in a form that converts, or write its .tmpl by hand and remove the .mako")
		return proof, nil
	}
	return proof, m.Write(proof.Proven)
}

// report says what changes and what is left, each with file and line.
func report(o Options, m *Migration) {
	display := o.Display
	if display == nil {
		display = func(f string) string { return f }
	}
	at := func(file string, line int) string { return fmt.Sprintf("%s:%d", display(file), line) }
	verb := "translated"
	if o.DryRun {
		verb = "would translate"
	}
	for _, t := range m.Templates {
		o.Report(Note{Msg: fmt.Sprintf("%s %s → %s", verb, display(t.File), filepath.Base(t.To))})
		for _, p := range t.Problems {
			o.Report(Note{At: at(t.File, p.Line), Msg: p.Msg + " [mako]"})
		}
	}
	for _, y := range m.YAMLs {
		for _, l := range y.Edits {
			o.Report(Note{At: at(y.File, l), Msg: ".mako reference or ${…} rewritten"})
		}
		for _, p := range y.Problems {
			o.Report(Note{At: at(y.File, p.Line), Msg: p.Msg + " [mako]"})
		}
	}
}

// ourLayout: a repository of this project's layout, with at least one stands/<name>/stand.yml (a
// Stands Engine tree may have a stands/ folder of env files).
func ourLayout(root string) bool {
	found, _ := filepath.Glob(filepath.Join(root, manifest.StandsDir, "*", manifest.StandFile))
	deeper, _ := filepath.Glob(filepath.Join(root, manifest.StandsDir, "*", "*", manifest.StandFile))
	return len(found)+len(deeper) > 0
}
