package main

import (
	"cmp"
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/internal/credential"
	"github.com/stands-engine/stands-reconciler/internal/httpapi"
	"github.com/stands-engine/stands-reconciler/internal/sandbox"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/lease"
	"github.com/stands-engine/stands-reconciler/prplan"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
)

// wiring is what the daemon runs on. Everything with a goroutine of its own (credential watchers,
// the Vault login's renewal, the HTTP listener, the repository watcher) is owned here and closed in
// the reverse order of its opening, each Close waiting for its goroutines.
type wiring struct {
	rec     *reconcile.Reconciler
	src     *gitsource.Source
	member  *lease.Member        // with --replicas
	metrics *prometheus.Registry // what /metrics serves
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
	w := &wiring{log: log, stderr: std.err, metrics: httpapi.NewRegistry()}
	defer func() {
		if err != nil {
			w.Close()
		}
	}()
	name, holder := replicaNames(f.replicaID)
	if f.replicas {
		log = log.With("replica", holder)
		w.log = log
	}
	hcloudToken, err := credential.Watch(getenv, "HCLOUD_TOKEN", log)
	if err != nil {
		return nil, err
	}
	w.own(hcloudToken)
	// One logger for the loop and the engine: two handlers on one writer would each lock only itself.
	eng, pass, err := f.engine(std, getenv, f.owner, func(c *engine.Config) {
		c.HcloudTokenFunc, c.Log, c.LeaseCheck = hcloudToken.Value, log, w.leaseCheck(f)
	})
	if err != nil {
		return nil, err
	}
	w.own(eng) // a postgres:// backend's connection pool
	if f.replicas {
		if w.member, err = joinReplicas(eng, name, holder, f, log, w.own); err != nil {
			return nil, err
		}
	}
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
	if w.member != nil {
		cfg.Replicas = w.member
	}
	if cfg.ControlState, err = filepath.Abs(filepath.Join(f.stateDir, "controls.json")); err != nil {
		return nil, err
	}
	if forge := f.forge(gitToken, log); forge != nil {
		cfg.Forge = forge
		if f.previews {
			if cfg.Plans, err = f.plans(forge, eng, w.src, sec, log, cfg, w.metrics); err != nil {
				return nil, err
			}
		}
	}
	w.rec = reconcile.New(cfg, w.src, eng, sec)
	w.metrics.MustRegister(append(engine.Metrics(), w.rec.Metrics())...)
	if w.member != nil {
		w.metrics.MustRegister(w.member.Collectors()...)
	}
	return w, nil
}

// plans plans the open pull requests into the tracked branch, rendering them in the sandbox (this
// binary re-executed under limits), with the loop's destroy guards.
func (f *daemonFlags) plans(forge *gitsource.Gitea, eng *engine.Engine, refs prplan.Refs, sec reconcile.Secrets, log *slog.Logger, loop reconcile.Config, reg prometheus.Registerer) (*prplan.Planner, error) {
	state, err := filepath.Abs(filepath.Join(f.stateDir, "previews.json"))
	if err != nil {
		return nil, err
	}
	exe, err := sandbox.Executable()
	if err != nil {
		return nil, err
	}
	return prplan.New(prplan.Config{Branch: f.branch, Passphrase: loop.Passphrase, StateFile: state, Log: log, Metrics: reg,
		Guards: judge.Guards{Owner: loop.Owner, MaxDestroyShare: loop.MaxDestroyShare, AllowMassDestroy: loop.AllowMassDestroy},
		Sandbox: func(ctx context.Context, job string, write func(io.Writer) error, read func(io.Reader) error) error {
			return sandbox.Run(ctx, exe, job, sandbox.DefaultLimits, write, read)
		}}, forge, eng, refs, sec), nil
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

// replicaNames are the replica's name, by which the stands are shared out (--replica-id, the host's
// by default), and the holder name of this process: the name and a suffix of its own, so a replica
// restarted before its leases expired never takes them as its own while a stack lock of its
// previous life may still carry their tokens.
func replicaNames(id string) (name, holder string) {
	if id == "" {
		id, _ = os.Hostname()
	}
	name = cmp.Or(id, "replica")
	return name, name + "." + strings.ToLower(rand.Text()[:6])
}

// leaseCheck is, with --replicas, how the engine judges a stack lock taken under a lease: abandoned
// once the stand's lease has another token. The member is joined before any operation runs.
func (w *wiring) leaseCheck(f *daemonFlags) engine.LeaseCheck {
	if !f.replicas {
		return nil
	}
	return func(ctx context.Context, ref stands.StackRef, token int64) (bool, error) {
		return w.member.TokenLive(ctx, ref.Stand(f.owner), token) // a stand's lease is named by its id
	}
}

// joinReplicas makes this reconciler a member of the replicas on the backend's database, for as
// long as the wiring is open: its Close gives every lease up (the drain has ended what ran under
// them) and leaves, after the loop's drain.
func joinReplicas(eng *engine.Engine, name, holder string, f *daemonFlags, log *slog.Logger, own func(io.Closer)) (*lease.Member, error) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	db, err := eng.OpenStateDB(ctx)
	if err != nil {
		return nil, fmt.Errorf("--replicas: %w", err)
	}
	own(db)
	// The member's rounds, a cycle's claims, status writes and the leader's reads: a few at a time.
	db.SetMaxOpenConns(4)
	store, err := lease.New(ctx, db, holder, lease.WithName(name), lease.WithTTL(f.leaseTTL), lease.WithGrace(f.leaseGrace))
	if err != nil {
		return nil, fmt.Errorf("--replicas: %w", err)
	}
	m := lease.NewMember(store, lease.WithLogger(log))
	run := goAsLongAs(m.Run)
	own(closerFunc(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		err := m.ReleaseAll(ctx)
		run.Close()
		return err
	}))
	log.Info("joined the replicas", "lease_ttl", f.leaseTTL, "lease_grace", f.leaseGrace)
	return m, nil
}

type closerFunc func() error

func (c closerFunc) Close() error { return c() }
