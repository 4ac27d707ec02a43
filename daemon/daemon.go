// Package daemon is the running reconciler: it builds every part from Settings — the repository
// client and Gitea's API, the secret store (Vault, or local mode's files), the engine, the loop, the
// pull request plans, the replicas' leases — and serves the daemon's listeners (Gitea's webhook, the
// probes and /metrics, the operator controls' socket). Everything with a goroutine of its own is
// owned by the Daemon: Close stops them in the reverse order of their start and waits for each.
//
// The command line (cmd/stands-reconciler) parses flags into Settings, prints, and calls Open,
// Run or Once, and Close; every decision is here, where a test can reach it.
package daemon

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/expiry"
	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/internal/credential"
	"github.com/stands-engine/stands-reconciler/internal/sandbox"
	"github.com/stands-engine/stands-reconciler/internal/sdnotify"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/lease"
	"github.com/stands-engine/stands-reconciler/prplan"
	"github.com/stands-engine/stands-reconciler/reconcile"
)

// Daemon is a reconciler built from its settings, with its listeners open.
type Daemon struct {
	s       Settings
	env     Env
	log     *slog.Logger
	rec     *reconcile.Reconciler
	src     *gitsource.Source
	member  *lease.Member        // with Replicas
	metrics *prometheus.Registry // what /metrics serves
	forge   Forge                // WithForge's; nil: the settings' Gitea API
	closers []io.Closer
	// approvals is the tracked branch's protection's required approvals, as last read.
	approvals atomic.Int64
}

// Option tunes Open.
type Option func(*options)

type options struct {
	log   *slog.Logger
	serve bool
	forge Forge
}

// WithLogger is the logger of the daemon, its loop and its engine (default: none).
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithoutListeners builds the reconciler without its listeners and watchers: one cycle
// (`reconcile --once`) needs none.
func WithoutListeners() Option { return func(o *options) { o.serve = false } }

// WithForge is the code forge's API the daemon's parts use, instead of the Gitea API the settings
// name (a test's second forge).
func WithForge(f Forge) Option { return func(o *options) { o.forge = f } }

// Open checks the settings, builds the reconciler and everything it talks to, and opens the
// listeners: the webhook, probes and /metrics on Listen, the controls on their socket, and the
// watcher of a local repository. Nothing is reconciled until Run or Once. On an error, what was
// opened is closed again.
func Open(ctx context.Context, s Settings, env Env, origins Origins, opts ...Option) (_ *Daemon, err error) {
	o := options{log: slog.New(slog.DiscardHandler), serve: true}
	for _, opt := range opts {
		opt(&o)
	}
	if errs := s.Check(env, origins); len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	d := &Daemon{s: s, env: env, log: o.log, metrics: newRegistry(), forge: o.forge}
	defer func() {
		if err != nil {
			d.Close()
		}
	}()
	if err := d.build(ctx); err != nil {
		return nil, err
	}
	if o.serve {
		if err := d.listen(); err != nil {
			return nil, err
		}
	}
	return d, nil
}

// newRegistry is a registry of the process's own metrics (Go runtime, process), for the daemon's
// parts to register theirs on: each registers its own where it declares them.
func newRegistry() *prometheus.Registry {
	reg := prometheus.NewRegistry()
	reg.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return reg
}

// build makes the reconciler and everything it talks to.
func (d *Daemon) build(ctx context.Context) error {
	s, env := &d.s, d.env
	name, holder := replicaNames(s.ReplicaID)
	if s.Replicas {
		d.log = d.log.With("replica", holder)
	}
	log := d.log
	hcloudToken, err := credential.Watch(env, "HCLOUD_TOKEN", log)
	if err != nil {
		return err
	}
	d.own(hcloudToken)
	// One logger for the loop and the engine: two handlers on one writer would each lock only itself.
	eng, pass, err := engine.FromSettings(s.Engine, env, s.Engine.Owner, log, func(c *engine.Config) {
		c.CloudTokenFunc, c.LeaseCheck, c.Metrics = hcloudToken.Value, d.leaseCheck(), d.metrics
	})
	if err != nil {
		return err
	}
	d.own(eng) // a postgres:// backend's connection pool
	if s.Replicas {
		if d.member, err = d.joinReplicas(ctx, eng, name, holder); err != nil {
			return err
		}
	}
	gitToken, err := credential.Watch(env, "STANDS_GIT_TOKEN", log)
	if err != nil {
		return err
	}
	d.own(gitToken)
	if d.src, err = s.source(env, gitToken, log); err != nil {
		return err
	}
	sec, closer, err := s.secrets(env, log)
	if err != nil {
		return err
	}
	if closer != nil {
		d.own(closer)
	}
	cfg := reconcile.Config{Owner: s.Engine.Owner, Passphrase: pass, Workers: s.Workers, MaxDestroyShare: s.MaxDestroyShare,
		AllowMassDestroy: s.AllowMassDestroy, DriftInterval: s.Drift, DriftApply: s.DriftApply, Log: log,
		Branch: s.Branch, StatusBranch: d.src.StatusBranch(), OperationTimeout: s.OperationTimeout, Controls: reconcile.ControlsConfig{PlanOnly: s.PlanOnly},
		NodesMode: eng.NodesMode(), StatusDelay: s.StatusDelay, SecretRefresh: s.SecretRefresh,
		Metrics: d.metrics, Prices: reconcile.PricesConfig{Pricer: eng},
		Health: reconcile.HealthConfig{Interval: s.HealthInterval, Heal: s.Heal, Limit: s.HealLimit}}
	if eng.NodesMode() == engine.NodesFull {
		cfg.Health.Checker = eng
	}
	if d.member != nil {
		cfg.Replicas = d.member
	}
	if cfg.Controls.State, err = s.stateFile("controls.json"); err != nil {
		return err
	}
	forge := d.forge
	if forge == nil {
		forge = s.forge(gitToken, log)
	}
	if err := d.forgeParts(&cfg, forge, eng, sec); err != nil {
		return err
	}
	d.rec = reconcile.New(cfg, d.src, eng, sec)
	if forge != nil {
		w := newProtectionWatch(forge, s.Branch, log, d.metrics, d.rec.SetSafeguards, d.approvals.Store)
		d.own(goAsLongAs(w.run))
	}
	return nil
}

// forgeParts sets what the loop does with Gitea's API (nil: none): commit statuses, the pull
// request plans, and the review gate (docs/pr-workflow.md#apply-only-what-was-reviewed).
func (d *Daemon) forgeParts(cfg *reconcile.Config, forge Forge, eng *engine.Engine, sec reconcile.Secrets) error {
	s, log := &d.s, d.log
	var err error
	if cfg.Review.State, err = s.stateFile("reviews.json"); err != nil {
		return err
	}
	if d.member != nil {
		// Every replica gates its own stands' changes against the same authorisations.
		cfg.Review.Store = seeded{d.member.Document(reviewDocument), cfg.Review.State}
	}
	if forge != nil {
		cfg.Forge = forge
		if s.Previews {
			planner, err := d.plans(forge, eng, sec, *cfg)
			if err != nil {
				return err
			}
			cfg.Plans, cfg.Review.Reviews = planner, planner
		}
		cfg.Expiries = expiry.New(expiry.Config{Branch: s.Branch, Log: log,
			Merging: func(id, by string) error { return d.rec.ApproveRemoval(id, by) }, Merged: func(id string) { d.rec.ConfirmRemoval(id) },
			Unmerged: func(id string) { d.rec.RevokeRemoval(id) }}, forge, d.src)
	}
	switch {
	case !s.RequireReview:
		log.Info("no review gate: changes are applied as they land (--require-review=false)")
	case forge == nil:
		// Check refused a local repository and a missing token; what is left is an API that
		// cannot be used. The gate never turns itself off.
		return errors.New("--require-review: the review gate needs Gitea's API, which cannot be used (the log says why): " +
			"fix it, or run without the gate: --require-review=false (STANDS_REQUIRE_REVIEW=false)")
	case !s.Previews:
		cfg.Review.Require = true
		log.Warn("--previews=false: no plan can be reviewed, so only ctl approve lets a change through (or --require-review=false)")
	default:
		cfg.Review.Require = true
	}
	return nil
}

// plans plans the open pull requests into the tracked branch with the loop's destroy guards,
// rendering their stands in the sandbox: this binary re-executed under limits.
func (d *Daemon) plans(forge Forge, eng *engine.Engine, sec reconcile.Secrets, loop reconcile.Config) (*prplan.Planner, error) {
	state, err := d.s.stateFile("previews.json")
	if err != nil {
		return nil, err
	}
	exe, err := sandbox.Executable()
	if err != nil {
		return nil, err
	}
	var store prplan.HeadStore
	if d.member != nil {
		store = seeded{d.member.Document(plansDocument), state} // the leader plans; every replica's gate reads them
	}
	return prplan.New(prplan.Config{Branch: loop.Branch, Passphrase: loop.Passphrase, StateFile: state, Store: store, Log: d.log, Metrics: d.metrics,
		Guards:  judge.Guards{Owner: loop.Owner, MaxDestroyShare: loop.MaxDestroyShare, AllowMassDestroy: loop.AllowMassDestroy},
		Workers: d.s.PlanWorkers, Budget: prplan.Budget{Wall: d.s.PlanBudget, RenderCPU: d.s.PlanRenderCPU},
		RequiredApprovals: func() int { return max(d.s.RequiredApprovals, int(d.approvals.Load())) }, ReviewStatus: d.s.RequireReview, // plans are made only with a forge, where the gate follows the setting
		SecretRefresh: d.s.SecretRefresh,
		Sandbox: func(ctx context.Context, job string, cpu time.Duration, write func(io.Writer) error, read func(io.Reader) error) (time.Duration, error) {
			lim := sandbox.DefaultLimits
			if cpu > 0 && cpu < lim.CPU {
				lim.CPU = cpu // what is left of the pull request's budget
			}
			return sandbox.Run(ctx, exe, job, lim, write, read)
		}}, forge, eng, d.src, sec), nil
}

// Reconciler is the loop the daemon runs.
func (d *Daemon) Reconciler() *reconcile.Reconciler { return d.rec }

// Run reconciles every poll interval (and on every webhook or change of a local repository) until
// ctx ends. The operations it started run on: Shutdown lets them finish.
func (d *Daemon) Run(ctx context.Context) {
	s := &d.s
	d.log.Info("reconciler started", "repo", gitsource.RedactURL(s.Repo), "branch", s.Branch, "status_branch", d.src.StatusBranch(),
		"poll_interval", s.Poll, "owner", s.Engine.Owner, "workers", s.Workers)
	d.notify("READY=1")
	if wd := sdnotify.WatchdogInterval(); wd > 0 {
		// Fed while the loop makes progress, through the drain too: a frozen process, or a cycle
		// that has not ended in wedgedAfter, misses it and systemd restarts the daemon; a long
		// apply, beside the loop, does not.
		d.own(goAsLongAs(func(ctx context.Context) {
			if err := sdnotify.Watchdog(ctx, wd, func() bool { return d.rec.InCycleFor() < wedgedAfter }); err != nil {
				d.log.Warn("systemd watchdog not fed", "err", err)
			}
		}))
		d.log.Info("systemd watchdog", "interval", wd, "wedged_after", wedgedAfter)
	}
	d.rec.Run(ctx, s.Poll)
}

// Shutdown drains, after Run: the running operations finish for the drain timeout, or until ctx ends
// (a second signal), and are cancelled then. A drain that had to cancel is still a clean stop (their
// statuses say Canceled, and they run again after the next start): the error is only final statuses
// that could not be committed, which the next start commits.
func (d *Daemon) Shutdown(ctx context.Context) error {
	d.notify("STOPPING=1")
	d.log.Info("stopping: letting running operations finish; a second SIGTERM or SIGINT cancels them now", "drain_timeout", d.s.Drain)
	ctx, cancel := context.WithTimeoutCause(ctx, d.s.Drain, errDrainTimeout)
	defer cancel()
	return d.rec.Shutdown(ctx)
}

var errDrainTimeout = errors.New("the drain timeout passed")

// wedgedAfter is how long one cycle may run before the loop counts as wedged: a cycle's inventory has
// 5 min, each Gitea request 30 s; operations run beside it.
const wedgedAfter = 10 * time.Minute

// notify tells systemd the daemon's state (a unit of Type=notify); nothing outside systemd.
func (d *Daemon) notify(state string) {
	if _, err := sdnotify.Notify(state); err != nil {
		d.log.Warn("systemd not told", "state", state, "err", err)
	}
}

// SetPollInterval changes the poll interval of a running daemon (a reload).
func (d *Daemon) SetPollInterval(p time.Duration) { d.rec.SetInterval(p) }

// Once runs one cycle and waits for its operations (on ctx's end, for the drain timeout): what
// `reconcile --once` does. It returns every stand's status.
func (d *Daemon) Once(ctx context.Context) (map[string]reconcile.Status, error) {
	err := d.rec.Cycle(ctx)
	done := make(chan struct{})
	go func() { d.rec.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
	}
	if serr := d.Shutdown(context.WithoutCancel(ctx)); err == nil {
		err = serr
	}
	return d.rec.Statuses(), err
}

// Close stops everything the daemon owns, newest first, each waiting for its goroutines: after
// Run's drain, the credential watchers and the Vault login served it to the end.
func (d *Daemon) Close() error {
	for i := len(d.closers) - 1; i >= 0; i-- {
		if err := d.closers[i].Close(); err != nil {
			d.log.Warn("close", "err", err)
		}
	}
	d.closers = nil
	return nil
}

func (d *Daemon) own(c io.Closer) { d.closers = append(d.closers, c) }

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

type closerFunc func() error

func (c closerFunc) Close() error { return c() }

// serve opens a TCP listener on addr for h, owned by the daemon.
func (d *Daemon) serve(addr string, h http.Handler, paths string) error {
	srv, err := listenTCP(addr, h, d.log)
	if err != nil {
		return err
	}
	d.own(srv)
	d.log.Info("listening", "addr", srv.Addr(), "paths", paths)
	return nil
}

// listen opens the daemon's listeners: the webhook, probes and /metrics on Listen, the controls on
// their socket, and the watcher of a local repository.
func (d *Daemon) listen() error {
	log := d.log
	if d.s.Listen != "" {
		secret, err := credential.Watch(d.env, "STANDS_WEBHOOK_SECRET", log)
		if err != nil {
			return err
		}
		d.own(secret)
		if !secret.Set() {
			log.Warn("no STANDS_WEBHOOK_SECRET: every webhook is refused (401); polling still works")
		}
		value := func() []byte {
			v, _ := secret.Value()
			return []byte(v)
		}
		// With a listener of their own for the probes and /metrics, the one Gitea reaches serves the
		// webhook alone.
		mux, paths := http.NewServeMux(), "/webhook"
		addWebhook(mux, d.rec, value, log, d.metrics)
		if d.s.MetricsListen == "" {
			addProbes(mux, d.rec, log, d.metrics)
			paths += " /healthz /readyz /metrics"
		}
		if err := d.serve(d.s.Listen, mux, paths); err != nil {
			return err
		}
	}
	if d.s.MetricsListen != "" {
		mux := http.NewServeMux()
		addProbes(mux, d.rec, log, d.metrics)
		if err := d.serve(d.s.MetricsListen, mux, "/healthz /readyz /metrics"); err != nil {
			return err
		}
	}
	if p := d.s.SocketPath(); p != "" {
		ctl, err := listenControl(p, d.rec, log)
		if err != nil {
			return err
		}
		d.own(ctl)
		log.Info("operator controls", "socket", p, "use", "stands-reconciler ctl --control-socket "+p+" status|pause|resume|plan-only|retry")
	}
	d.own(goAsLongAs(func(ctx context.Context) {
		if err := d.src.Watch(ctx, d.rec.Trigger); err != nil {
			log.Warn("watching the local repository failed; polling only", "err", err)
		}
	}))
	return nil
}
