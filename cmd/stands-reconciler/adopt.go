package main

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/localrepo"
)

// runAdopt takes over a stand whose stack the Stands Engine made (engine.Adopt): its servers become
// the reconciler's with their ids, nothing is deleted in Hetzner, the old state is archived.
func runAdopt(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("adopt", "adopt [flags] [--dry-run] PATH\n\nPATH is the stand's stand.yml or folder: its stack (same backend, project and env) was made by the\nStands Engine. Its servers must be the manifest's nodes as they are (name, type, image, location);\nthey get the reconciler's labels and move into its stack without being recreated. The old state is\nkept in <state-dir>/adopted/. Give the stand's key (--key-file, STAND__PATH_TO_KEY) for its nodes.", std)
	conf := newSettings(fs, getenv)
	var ef engineFlags
	ef.register(conf)
	roots := localrepo.Roots{}
	resourceFlag(fs, roots)
	keyFile := fs.String("key-file", bound(conf, "key-file", "STANDS_SSH_KEY_PATH", ""), "the stand's SSH private key, which its servers authorize ($STANDS_SSH_KEY_PATH, $STAND__PATH_TO_KEY)")
	dry := fs.Bool("dry-run", false, "check and say what would happen; change nothing")
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	getenv = conf.Env()
	if fs.NArg() != 1 {
		fmt.Fprintln(std.err, "adopt: give exactly one PATH")
		return exitUsage
	}
	eng, in, code := standInput(ctx, "adopt", fs.Arg(0), &ef, roots, *keyFile, std, getenv)
	if code != exitOK {
		return code
	}
	stateDir, err := filepath.Abs(ef.s.StateDir)
	if err != nil {
		fmt.Fprintf(std.err, "adopt: %v\n", err)
		return exitError
	}
	a, err := eng.Adopt(ctx, in, filepath.Join(stateDir, "adopted"), *dry)
	if err != nil {
		fail(std, "adopt", scrubbed{err, in.Secrets})
		if errors.Is(err, engine.ErrNotAdoptable) || errors.Is(err, engine.ErrNoStack) {
			fmt.Fprintln(std.err, "adopt: nothing was changed")
		}
		return exitError
	}
	status := "success"
	if *dry {
		status = "dry-run"
	}
	return writeRecord(std, map[string]any{"id_stand": a.StandID, "operation": "adopt", "status": status, "servers": a.Servers, "new_nodes": a.New, "archive": a.Archive})
}
