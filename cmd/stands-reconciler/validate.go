package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/manifest"
)

const defaultOwner = "local"

func ownerFlag(c *settings, p *string) {
	c.fs.StringVar(p, "owner", bound(c, "owner", "STANDS_OWNER", defaultOwner), "owner of stands whose manifest names none ($STANDS_OWNER)")
}

func runValidate(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("validate", "validate [--owner NAME] PATH...\n\nPATH is a stand.yml, a stand folder or a whole stands repository.\nSecrets are read from SECRET_<NAME> environment variables.", std)
	conf := newSettings(fs, getenv)
	var owner string
	ownerFlag(conf, &owner)
	roots := resourceRoots{}
	resourceFlag(fs, roots)
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	getenv = conf.env()
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

// target is a set of stands in one repository.
type target struct {
	root  string   // repository root on disk
	files []string // stand manifests, relative to root
}

// preflightPaths validates every stand the paths name and prints the report on stderr.
func preflightPaths(ctx context.Context, paths []string, owner string, roots resourceRoots, std stdio, getenv env) ([]*resultAt, int) {
	targets, err := resolveTargets(paths)
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
		fsys, err := roots.repo(t.root)
		if err != nil {
			fmt.Fprintf(std.err, "validate: %s: %v\n", t.root, err)
			return nil, exitError
		}
		results, err := manifest.PreflightAll(ctx, fsys, t.files, manifest.PreflightOptions{
			LoadOptions: manifest.LoadOptions{DefaultOwner: owner},
			Secrets:     src,
		})
		stands += len(t.files)
		var rep *manifest.Report
		switch {
		case errors.As(err, &rep):
			for _, d := range rep.Diags {
				d.Pos.File = roots.display(t.root, d.Pos.File)
				fmt.Fprintf(std.err, "%s\n", d)
			}
			problems += len(rep.Diags)
		case err != nil:
			fmt.Fprintf(std.err, "validate: %v\n", err)
			return nil, exitError
		}
		for _, r := range results {
			all = append(all, &resultAt{root: t.root, fsys: fsys, Result: r})
		}
		printWarnings(std, roots, t.root, results)
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
func printWarnings(std stdio, roots resourceRoots, root string, results []*manifest.Result) {
	seen := map[manifest.Diagnostic]bool{}
	for _, r := range results {
		if r.Stand == nil {
			continue
		}
		for _, w := range r.Stand.Warnings {
			if !seen[w] {
				seen[w] = true
				w.Pos.File = roots.display(root, w.Pos.File)
				fmt.Fprintf(std.err, "%s: warning: %s [%s]\n", w.Pos, w.Msg, w.Rule)
			}
		}
	}
}

type resultAt struct {
	root string
	fsys fs.FS // the repository at root, with the --resource roots
	*manifest.Result
}

// display shows a repository path relative to the working directory when that is shorter.
func display(root, file string) string {
	abs := filepath.Join(root, filepath.FromSlash(file))
	if wd, err := os.Getwd(); err == nil {
		if rel, err := filepath.Rel(wd, abs); err == nil && !strings.HasPrefix(rel, "..") {
			return rel
		}
	}
	return abs
}

// resolveTargets maps command-line paths to stands grouped by repository. A repository root is the
// nearest folder holding a stands/ folder or .git, so relative references (../../apps/x) resolve
// as they do for the reconciler.
func resolveTargets(paths []string) ([]target, error) {
	byRoot := map[string]*target{}
	var order []string
	for _, p := range paths {
		abs, err := filepath.Abs(p)
		if err != nil {
			return nil, err
		}
		st, err := os.Stat(abs)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", p, errors.Unwrap(err))
		}
		var files []string
		start := abs
		if !st.IsDir() {
			start = filepath.Dir(abs)
			files = []string{abs}
		}
		root := findRoot(start)
		if st.IsDir() {
			if abs == root {
				rel, err := manifest.Discover(repofs.Dir(root))
				if err != nil {
					return nil, fmt.Errorf("%s: %w", p, err)
				}
				for _, f := range rel {
					files = append(files, filepath.Join(root, filepath.FromSlash(f)))
				}
			} else {
				err := filepath.WalkDir(abs, func(q string, d fs.DirEntry, err error) error {
					if err == nil && !d.IsDir() && d.Name() == manifest.StandFile {
						files = append(files, q)
					}
					return err
				})
				if err != nil {
					return nil, fmt.Errorf("%s: %w", p, err)
				}
			}
			if len(files) == 0 {
				return nil, fmt.Errorf("%s: no %s found", p, manifest.StandFile)
			}
		}
		t := byRoot[root]
		if t == nil {
			t = &target{root: root}
			byRoot[root] = t
			order = append(order, root)
		}
		for _, f := range files {
			rel, err := filepath.Rel(root, f)
			if err != nil {
				return nil, err
			}
			rel = filepath.ToSlash(rel)
			if !slices.Contains(t.files, rel) {
				t.files = append(t.files, rel)
			}
		}
	}
	out := make([]target, 0, len(order))
	for _, r := range order {
		out = append(out, *byRoot[r])
	}
	return out, nil
}

func findRoot(dir string) string {
	for d := dir; ; {
		if isDir(filepath.Join(d, manifest.StandsDir)) || exists(filepath.Join(d, ".git")) {
			return d
		}
		parent := filepath.Dir(d)
		if parent == d {
			return string(filepath.Separator)
		}
		d = parent
	}
}

func isDir(p string) bool {
	st, err := os.Stat(p)
	return err == nil && st.IsDir()
}

func exists(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}

// writeRecord prints one NDJSON result record on stdout, the seed's machine-readable contract.
func writeRecord(std stdio, rec any) int {
	b, err := json.Marshal(rec)
	if err != nil {
		fmt.Fprintf(std.err, "encode result: %v\n", err)
		return exitError
	}
	fmt.Fprintf(std.out, "%s\n", b)
	return exitOK
}
