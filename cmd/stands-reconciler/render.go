package main

import (
	"context"
	"fmt"
	"path/filepath"

	"github.com/stands-engine/stands-reconciler/engine/configset"
	"github.com/stands-engine/stands-reconciler/localrepo"
)

// writeConfigset writes one stand's rendered files (a variable: tests make it fail part-way).
var writeConfigset = configset.Write

func runRender(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("render", "render [--owner NAME] [--out DIR] PATH...\n\nValidates like 'validate', then writes each stand's rendered files, made with reserved\ntest addresses (RFC 5737), to DIR/<stand-id>/ (folders 0700, files 0600: they hold secrets).", std)
	conf := newSettings(fs, getenv)
	var owner, out string
	ownerFlag(conf, &owner, defaultOwner)
	fs.StringVar(&out, "out", "_render", "folder to write rendered stands into")
	roots := localrepo.Roots{}
	resourceFlag(fs, roots)
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	getenv = conf.Env()
	if fs.NArg() == 0 {
		fmt.Fprintln(std.err, "render: give at least one PATH (a stand.yml, a stand folder or a repository)")
		return exitUsage
	}
	results, code := preflightPaths(ctx, fs.Args(), owner, roots, std, getenv)
	if code != exitOK {
		return code
	}
	// Every stand is written before any record is printed: stdout has a success record only when the
	// command succeeds (the Stands Engine's contract: docs/stands-engine.md#output), and Ctrl-C between stands stops it with 130.
	records := make([]map[string]any, 0, len(results))
	for _, r := range results {
		if ctx.Err() != nil {
			fmt.Fprintln(std.err, "render: interrupted")
			return exitInterrupted
		}
		dir, err := writeConfigset(out, r.Rendered)
		if err != nil {
			fmt.Fprintf(std.err, "render: %v\n", err)
			return exitError
		}
		abs, _ := filepath.Abs(dir)
		records = append(records, map[string]any{"operation": "render", "status": "success", "id_stand": r.Stand.ID, "path": abs})
	}
	for _, rec := range records {
		if code := writeRecord(std, rec); code != exitOK {
			return code
		}
	}
	return exitOK
}
