package main

import (
	"context"
	"io"
	"log/slog"
	"path/filepath"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/internal/credential"
	"github.com/stands-engine/stands-reconciler/internal/sandbox"
	"github.com/stands-engine/stands-reconciler/reconcile"
)

// wiring is what the daemon runs on. Everything with a goroutine of its own (credential watchers,
// the Vault login's renewal, the HTTP listener, the repository watcher) is owned here and closed in
// the reverse order of its opening, each Close waiting for its goroutines.
type wiring struct {
	rec     *reconcile.Reconciler
	src     *gitsource.Source
	log     *slog.Logger
	stderr  io.Writer
	closers []io.Closer
}

func (w *wiring) own(c io.Closer) { w.closers = append(w.closers, c) }

// Close closes what it owns, newest first.
func (w *wiring) Close() error {
	for i := len(w.closers) - 1; i >= 0; i-- {
		if err := w.closers[i].Close(); err != nil {
			w.log.Warn("close", "err", err)
		}
	}
	w.closers = nil
	return nil
}

// wire builds the reconciler and everything it talks to from the flags and the environment.
func wire(f *daemonFlags, std stdio, getenv env, filesOnly bool, log *slog.Logger) (_ *wiring, err error) {
	w := &wiring{log: log, stderr: std.err}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	hcloudToken, err := credential.Watch(getenv, "HCLOUD_TOKEN", log)
	if err != nil {
		return nil, err
	}
	w.own(hcloudToken)
	// One logger for the loop and the engine: two handlers on one writer would each lock only itself.
	eng, pass, err := f.engine(std, getenv, f.owner, func(c *engine.Config) { c.HcloudTokenFunc, c.Log = hcloudToken.Value, log })
	if err != nil {
		return nil, err
	}
	w.own(eng) // a postgres:// backend's connection pool
	gitToken, err := credential.Watch(getenv, "STANDS_GIT_TOKEN", log)
	if err != nil {
		return nil, err
	}
	w.own(gitToken)
	if w.src, err = f.source(getenv, gitToken, log); err != nil {
		return nil, err
	}
	sec, closer, err := f.secrets(getenv, filesOnly, log)
	if err != nil {
		return nil, err
	}
	if closer != nil {
		w.own(closer)
	}
	cfg := reconcile.Config{Owner: f.owner, Passphrase: pass, Workers: f.workers, MaxDestroyShare: f.share,
		AllowMassDestroy: f.massDestroy, DriftInterval: f.drift, DriftApply: f.driftApply, Log: log,
		Branch: f.branch, StatusBranch: w.src.StatusBranch(), OperationTimeout: f.opTimeout, PlanOnly: f.planOnly,
		NodesMode: eng.NodesMode(), StatusDelay: f.statusDelay, SecretRefresh: f.secretRefresh,
		HealthInterval: f.healthInterval, Heal: f.heal, HealLimit: f.healLimit}
	if eng.NodesMode() == engine.NodesFull {
		cfg.Checker = eng
	}
	if cfg.ControlState, err = filepath.Abs(filepath.Join(f.stateDir, "controls.json")); err != nil {
		return nil, err
	}
	if forge := f.forge(gitToken, log); forge != nil {
		cfg.Forge = forge
		if f.previews {
			cfg.Planner, cfg.Refs = eng, w.src
			if cfg.PreviewState, err = filepath.Abs(filepath.Join(f.stateDir, "previews.json")); err != nil {
				return nil, err
			}
			exe, err := sandbox.Executable()
			if err != nil {
				return nil, err
			}
			cfg.Sandbox = func(ctx context.Context, job string, write func(io.Writer) error, read func(io.Reader) error) error {
				return sandbox.Run(ctx, exe, job, sandbox.DefaultLimits, write, read)
			}
		}
	}
	w.rec = reconcile.New(cfg, w.src, eng, sec)
	return w, nil
}

// goroutine is a function running until Close, which ends its context and waits for it to return.
type goroutine struct {
	stop context.CancelFunc
	done chan struct{}
}

func goAsLongAs(fn func(ctx context.Context)) *goroutine {
	ctx, stop := context.WithCancel(context.Background())
	g := &goroutine{stop: stop, done: make(chan struct{})}
	go func() {
		defer close(g.done)
		fn(ctx)
	}()
	return g
}

func (g *goroutine) Close() error {
	g.stop()
	<-g.done
	return nil
}
