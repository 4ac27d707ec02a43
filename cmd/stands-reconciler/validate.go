package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"time"

	"github.com/stands-engine/stands-reconciler/localrepo"
	"github.com/stands-engine/stands-reconciler/manifest"
)

const defaultOwner = "local"

func ownerFlag(c *settings, p *string, def string) {
	c.FS.StringVar(p, "owner", bound(c, "owner", "STANDS_OWNER", def), "owner of stands whose manifest names none ($STANDS_OWNER, $STAND__USER)")
}

func runValidate(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("validate", "validate [--owner NAME] PATH...\n\nPATH is a stand.yml, a stand folder or a whole stands repository.\nSecrets are read from SECRET_<NAME> environment variables.", std)
	conf := newSettings(fs, getenv)
	var owner string
	ownerFlag(conf, &owner, defaultOwner)
	roots := localrepo.Roots{}
	resourceFlag(fs, roots)
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	getenv = conf.Env()
	if fs.NArg() == 0 {
		fmt.Fprintln(std.err, "validate: give at least one PATH (a stand.yml, a stand folder or a repository)")
		return exitUsage
	}
	_, code := preflightPaths(ctx, fs.Args(), owner, roots, std, getenv)
	if code != exitOK {
		return code
	}
	return writeRecord(std, map[string]any{"operation": "validate", "status": "success"})
}

// preflightPaths validates every stand the paths name and prints the report on stderr.
func preflightPaths(ctx context.Context, paths []string, owner string, roots localrepo.Roots, std stdio, getenv env) ([]*resultAt, int) {
	targets, err := localrepo.Targets(paths)
	if err != nil {
		fmt.Fprintf(std.err, "validate: %v\n", err)
		return nil, exitError
	}
	src := manifest.EnvSource{Lookup: func(k string) (string, bool) {
		v := getenv(k)
		return v, v != ""
	}}
	var all []*resultAt
	problems, stands := 0, 0
	for _, t := range targets {
		fsys, err := roots.Repo(t.Root)
		if err != nil {
			fmt.Fprintf(std.err, "validate: %s: %v\n", t.Root, err)
			return nil, exitError
		}
		results, err := manifest.PreflightAll(ctx, fsys, t.Files, manifest.PreflightOptions{
			LoadOptions: manifest.LoadOptions{DefaultOwner: owner},
			Secrets:     src,
		})
		stands += len(t.Files)
		var rep *manifest.Report
		switch {
		case errors.As(err, &rep):
			for _, d := range rep.Diags {
				d.Pos.File = roots.Display(t.Root, d.Pos.File)
				fmt.Fprintf(std.err, "%s\n", d)
			}
			problems += len(rep.Diags)
		case err != nil:
			fmt.Fprintf(std.err, "validate: %v\n", err)
			return nil, exitError
		}
		for _, r := range results {
			all = append(all, &resultAt{root: t.Root, fsys: fsys, Result: r})
		}
		printWarnings(std, roots, t.Root, results)
		printLifetimes(std, roots, t.Root, fsys, results)
	}
	if ctx.Err() != nil {
		return nil, exitInterrupted
	}
	if problems > 0 {
		fmt.Fprintf(std.err, "validate: %d problem(s) in %d stand(s)\n", problems, stands)
		return nil, exitError
	}
	return all, exitOK
}

// printWarnings prints each warning once, although a base's is every stand's that uses it: the
// manifest loads, and should change.
func printWarnings(std stdio, roots localrepo.Roots, root string, results []*manifest.Result) {
	seen := map[manifest.Diagnostic]bool{}
	for _, r := range results {
		if r.Stand == nil {
			continue
		}
		for _, w := range r.Stand.Warnings {
			if !seen[w] {
				seen[w] = true
				w.Pos.File = roots.Display(root, w.Pos.File)
				fmt.Fprintf(std.err, "%s: warning: %s [%s]\n", w.Pos, w.Msg, w.Rule)
			}
		}
	}
}

// printLifetimes says when each stand ends, where the repository has a lifetime policy or the stand
// declares an expiry: an author sees the date a reviewer will.
func printLifetimes(std stdio, roots localrepo.Roots, root string, fsys fs.FS, results []*manifest.Result) {
	policy, rep := manifest.ReadLifetime(fsys)
	_, err := fs.Stat(fsys, manifest.LifetimeFile)
	now := time.Now()
	for _, r := range results {
		if r.Stand == nil || r.Stand.ID == "" || rep != nil || (err != nil && r.Stand.Expires.IsZero()) {
			continue
		}
		fmt.Fprintf(std.err, "%s: stand %s %s\n", roots.Display(root, r.File), r.Stand.ID, policy.Describe(r.Stand, now))
	}
}

type resultAt struct {
	root string
	fsys fs.FS // the repository at root, with the --resource roots
	*manifest.Result
}

// writeRecord prints one NDJSON result record on stdout, the Stands Engine's machine-readable contract (docs/stands-engine.md#output).
func writeRecord(std stdio, rec any) int {
	b, err := json.Marshal(rec)
	if err != nil {
		fmt.Fprintf(std.err, "encode result: %v\n", err)
		return exitError
	}
	fmt.Fprintf(std.out, "%s\n", b)
	return exitOK
}
