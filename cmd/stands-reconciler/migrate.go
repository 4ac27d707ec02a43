package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/stands-engine/stands-reconciler/localrepo"
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
	out, err := migrate.Run(ctx, migrate.Options{Root: fs.Arg(0), Roots: roots, Out: *outDir, DryRun: *dry, Owner: owner,
		Display: func(f string) string { return localrepo.Display("", f) },
		Report: func(n migrate.Note) {
			if n.At != "" {
				fmt.Fprintf(std.err, "%s: %s\n", n.At, n.Msg)
				return
			}
			fmt.Fprintf(std.err, "migrate: %s\n", n.Msg)
		}})
	if err != nil {
		fmt.Fprintf(std.err, "migrate: %v\n", err)
		if errors.As(err, new(*migrate.UsageError)) {
			return exitUsage
		}
		return exitError
	}
	if code := writeRecord(std, out.Record(*dry)); code != exitOK {
		return code
	}
	if !out.Done() {
		return exitError // something is left for a human
	}
	return exitOK
}
