package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/stands-engine/stands-reconciler/daemon"
	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/internal/logging"
	"github.com/stands-engine/stands-reconciler/prplan"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
)

// daemonFlags configure `run`, `reconcile --once`, `config check` and `ctl`: the daemon's
// settings.
type daemonFlags struct{ s daemon.Settings }

func (f *daemonFlags) register(c *settings) {
	registerEngine(c, &f.s.Engine, &f.s.LogLevel, &f.s.LogFormat, defaultOwner)
	fs := c.FS
	fs.StringVar(&f.s.Repo, "repo", bound(c, "repo", "STANDS_REPO_URL", ""), "the stands repository: https://…/org/stands.git, ssh://git@…/org/stands.git or a local path ($STANDS_REPO_URL)")
	fs.StringVar(&f.s.Branch, "branch", bound(c, "branch", "STANDS_BRANCH", "main"), "the tracked branch ($STANDS_BRANCH)")
	fs.StringVar(&f.s.StatusBranch, "status-branch", bound(c, "status-branch", "STANDS_STATUS_BRANCH", ""), "branch status is committed to (default: the tracked branch; stands-status for a local path) ($STANDS_STATUS_BRANCH)")
	fs.StringVar(&f.s.GitUser, "git-user", bound(c, "git-user", "STANDS_GIT_USER", "stands-reconciler"), "user name for HTTP(S) token authentication ($STANDS_GIT_USER); the token is $STANDS_GIT_TOKEN or $STANDS_GIT_TOKEN_FILE")
	fs.StringVar(&f.s.GitName, "git-name", bound(c, "git-name", "STANDS_GIT_NAME", gitsource.DefaultIdentity.Name), "author name of status commits ($STANDS_GIT_NAME)")
	fs.StringVar(&f.s.GitKnownHosts, "git-known-hosts", bound(c, "git-known-hosts", "STANDS_GIT_KNOWN_HOSTS", ""), "OpenSSH known_hosts file pinning an ssh:// repository's host keys; the key is $STANDS_GIT_SSH_KEY_FILE ($STANDS_GIT_KNOWN_HOSTS)")
	fs.StringVar(&f.s.SigningKeysTrusted, "signing-keys-trusted", bound(c, "signing-keys-trusted", "STANDS_SIGNING_KEYS_TRUSTED", ""), "public keys (authorized_keys format) rotated out whose signatures of the reconciler's commits still count; the key it signs with is $STANDS_SIGNING_KEY_FILE, else <state-dir>/signing-key ($STANDS_SIGNING_KEYS_TRUSTED)")
	fs.StringVar(&f.s.GiteaURL, "gitea-url", bound(c, "gitea-url", "STANDS_GITEA_URL", ""), "Gitea API of the repository, for commit statuses and pull request plans (default: an http(s) repository's own) ($STANDS_GITEA_URL)")
	fs.StringVar(&f.s.GitEmail, "git-email", bound(c, "git-email", "STANDS_GIT_EMAIL", gitsource.DefaultIdentity.Email), "author email of status commits ($STANDS_GIT_EMAIL)")
	fs.StringVar(&f.s.Listen, "listen", bound(c, "listen", "STANDS_LISTEN", "127.0.0.1:8080"), "address of the webhook, /healthz and /readyz listener; empty: none ($STANDS_LISTEN)")
	fs.StringVar(&f.s.MetricsListen, "metrics-listen", bound(c, "metrics-listen", "STANDS_METRICS_LISTEN", ""), "address of a listener of their own for /metrics, /healthz and /readyz, which --listen then leaves to the webhook; empty: on --listen ($STANDS_METRICS_LISTEN)")
	fs.StringVar(&f.s.VaultAddr, "vault-addr", bound(c, "vault-addr", "VAULT_ADDR", ""), "Vault's address; empty: local mode, !secret values from SECRET_<NAME>_FILE files ($VAULT_ADDR)")
	fs.StringVar(&f.s.VaultRoleID, "vault-role-id", bound(c, "vault-role-id", "VAULT_ROLE_ID", ""), "AppRole role id; its secret id is $VAULT_SECRET_ID_FILE; empty: a token, $VAULT_TOKEN_FILE ($VAULT_ROLE_ID)")
	fs.StringVar(&f.s.VaultMount, "vault-mount", bound(c, "vault-mount", "STANDS_VAULT_MOUNT", "secret"), "KV v2 mount of the stands' secrets ($STANDS_VAULT_MOUNT)")
	fs.StringVar(&f.s.VaultPrefix, "vault-prefix", bound(c, "vault-prefix", "STANDS_VAULT_PREFIX", "stands"), "path prefix of the stands' secrets in the mount ($STANDS_VAULT_PREFIX)")
	fs.DurationVar(&f.s.Poll, "poll-interval", bound(c, "poll-interval", "STANDS_POLL_INTERVAL", 30*time.Second), "time between polls, jittered ±10% ($STANDS_POLL_INTERVAL)")
	fs.DurationVar(&f.s.Drain, "drain-timeout", bound(c, "drain-timeout", "STANDS_DRAIN_TIMEOUT", 10*time.Minute), "on SIGTERM, how long running operations may finish before they are cancelled ($STANDS_DRAIN_TIMEOUT)")
	fs.DurationVar(&f.s.OperationTimeout, "operation-timeout", bound(c, "operation-timeout", "STANDS_OPERATION_TIMEOUT", reconcile.DefaultOperationTimeout), "how long one apply, drift check or destroy may run before Pulumi is interrupted and the stand fails with Timeout, tried again later ($STANDS_OPERATION_TIMEOUT)")
	fs.DurationVar(&f.s.Drift, "drift-interval", bound(c, "drift-interval", "STANDS_DRIFT_INTERVAL", 6*time.Hour), "how often a Ready stand is checked for drift (pulumi preview --refresh); 0: never ($STANDS_DRIFT_INTERVAL)")
	fs.DurationVar(&f.s.StatusDelay, "status-delay", bound(c, "status-delay", "STANDS_STATUS_DELAY", 3*time.Second), "status changes within this long of the first go into one status commit; 0: a commit per change ($STANDS_STATUS_DELAY)")
	fs.DurationVar(&f.s.SecretRefresh, "secret-refresh", bound(c, "secret-refresh", "STANDS_SECRET_REFRESH", 5*time.Minute), "how long a stand whose files no commit changed is not judged again: its secrets are read again after it, at a commit changing it, or at ctl retry; 0: every poll ($STANDS_SECRET_REFRESH)")
	fs.DurationVar(&f.s.HealthInterval, "health-interval", bound(c, "health-interval", "STANDS_HEALTH_INTERVAL", reconcile.DefaultHealthInterval), "how often every applied stand's instances are checked on its servers over SSH (unit, restarts, ports in the pod, probe hooks; no Pulumi): a failure makes it Degraded; 0: never; servers-only mode: never ($STANDS_HEALTH_INTERVAL)")
	fs.BoolVar(&f.s.Heal, "heal", bound(c, "heal", "STANDS_HEAL", false), "restart an instance the health check finds unhealthy, and apply the stand again when that does not help ($STANDS_HEAL=true)")
	fs.IntVar(&f.s.HealLimit, "heal-limit", bound(c, "heal-limit", "STANDS_HEAL_LIMIT", reconcile.DefaultHealLimit), "heals of one instance in an hour; past it a flapping instance is left Degraded for a human ($STANDS_HEAL_LIMIT)")
	fs.BoolVar(&f.s.DriftApply, "drift-apply", bound(c, "drift-apply", "STANDS_DRIFT_APPLY", false), "apply a drifted stand again instead of only reporting Drifted ($STANDS_DRIFT_APPLY=true)")
	fs.IntVar(&f.s.Workers, "workers", bound(c, "workers", "STANDS_WORKERS", 4), "operations at once (one per stand at a time) ($STANDS_WORKERS)")
	fs.Float64Var(&f.s.MaxDestroyShare, "max-destroy-share", bound(c, "max-destroy-share", "STANDS_MAX_DESTROY_SHARE", 0.5), "refuse to destroy more than this share of stands in one cycle (one is always allowed) ($STANDS_MAX_DESTROY_SHARE)")
	fs.BoolVar(&f.s.Previews, "previews", bound(c, "previews", "STANDS_PREVIEWS", true), "plan open pull requests into the tracked branch: one comment each and the stands/plan commit status ($STANDS_PREVIEWS=false turns it off)")
	fs.IntVar(&f.s.PlanWorkers, "plan-workers", bound(c, "plan-workers", "STANDS_PLAN_WORKERS", prplan.DefaultWorkers), "pull requests planned at once: one at its budget holds one worker, not the others ($STANDS_PLAN_WORKERS)")
	fs.DurationVar(&f.s.PlanBudget, "plan-budget", bound(c, "plan-budget", "STANDS_PLAN_BUDGET", prplan.DefaultBudget.Wall), "how long one pull request head's plan may take, all its stands together; past it the plan fails and the head waits for a push ($STANDS_PLAN_BUDGET)")
	fs.DurationVar(&f.s.PlanRenderCPU, "plan-render-cpu", bound(c, "plan-render-cpu", "STANDS_PLAN_RENDER_CPU", prplan.DefaultBudget.RenderCPU), "the CPU time one pull request head's templates may take to render, all its stands together; past it the plan fails and the head waits for a push ($STANDS_PLAN_RENDER_CPU)")
	fs.BoolVar(&f.s.RequireReview, "require-review", bound(c, "require-review", "STANDS_REQUIRE_REVIEW", true), "apply a change of a stand only when a pull request's plan showed it and a second person who may write approved it there (or ctl approve); with a Gitea API only; false: apply whatever lands on the tracked branch ($STANDS_REQUIRE_REVIEW=false)")
	fs.IntVar(&f.s.RequiredApprovals, "required-approvals", bound(c, "required-approvals", "STANDS_REQUIRED_APPROVALS", 1), "with --require-review, the approvals a change needs at least, each by a writer who took no part in it; the tracked branch's protection may ask more (docs/pr-workflow.md#four-eyes) ($STANDS_REQUIRED_APPROVALS)")
	fs.BoolVar(&f.s.PlanOnly, "plan-only", bound(c, "plan-only", "STANDS_PLAN_ONLY", false), "decide and report in each stand's status what would be applied or destroyed, and apply nothing ($STANDS_PLAN_ONLY=true)")
	fs.StringVar(&f.s.ControlSocket, "control-socket", bound(c, "control-socket", "STANDS_CONTROL_SOCKET", ""), "the operator controls' Unix socket (stands-reconciler ctl; default <state-dir>/control.sock; \"none\": no controls) ($STANDS_CONTROL_SOCKET)")
	fs.BoolVar(&f.s.Replicas, "replicas", bound(c, "replicas", "STANDS_REPLICAS", false), "run as one of several reconcilers on one repository and one postgres:// backend: each stand is operated by the replica holding its lease, one replica commits status and plans pull requests (docs/replicas.md) ($STANDS_REPLICAS=true)")
	fs.StringVar(&f.s.ReplicaID, "replica-id", bound(c, "replica-id", "STANDS_REPLICA_ID", ""), "with --replicas, this replica's name in logs, metrics and leases (default: the host name); each start adds a suffix of its own ($STANDS_REPLICA_ID)")
	fs.DurationVar(&f.s.LeaseTTL, "lease-ttl", bound(c, "lease-ttl", "STANDS_LEASE_TTL", 30*time.Second), "with --replicas, how long a stand's lease lasts unrenewed: a replica that dies loses its stands after this, plus --lease-grace ($STANDS_LEASE_TTL)")
	fs.DurationVar(&f.s.LeaseGrace, "lease-grace", bound(c, "lease-grace", "STANDS_LEASE_GRACE", 10*time.Second), "with --replicas, how long an expired lease stays unclaimed: longer than a replica takes to stop its Pulumi processes ($STANDS_LEASE_GRACE)")
	fs.BoolVar(&f.s.AllowMassDestroy, "allow-mass-destroy", false, "lift the share and last-stand guards for this run (protect still holds); prefer committing .stands/allow-destroy")
}

func runDaemon(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("run", "run [flags]\n\nReconciles the stands repository until SIGTERM: polls it (and answers Gitea's push webhook on POST /webhook,\nsigned with the webhook secret), applies and destroys stands, and commits their status.\nSecrets come from files only: HCLOUD_TOKEN_FILE, STANDS_PASSPHRASE_FILE, STANDS_GIT_TOKEN_FILE, STANDS_WEBHOOK_SECRET_FILE,\nVAULT_TOKEN_FILE or VAULT_SECRET_ID_FILE (with --vault-role-id), or the files credentials: names in --config.\nWithout --vault-addr, !secret values come from SECRET_<NAME>_FILE files (local mode).", std)
	conf := newSettings(fs, getenv)
	conf.FilesOnly = true // an environment is readable in /proc/<pid>/environ: the daemon's holds no secret
	var f daemonFlags
	f.register(conf)
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	return runOpen(ctx, &f, conf, false, std)
}

func runReconcile(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("reconcile", "reconcile --once [flags]\n\nOne reconciliation of the stands repository, waiting for its operations; the flags and settings of run apply.", std)
	conf := newSettings(fs, getenv)
	var f daemonFlags
	f.register(conf)
	once := fs.Bool("once", false, "run one cycle and exit (required: `run` is the daemon)")
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	if !*once {
		fmt.Fprintln(std.err, "reconcile: give --once, or use `stands-reconciler run` for the daemon")
		return exitUsage
	}
	if f.s.Replicas {
		// One cycle cannot hold leases for long: it would take stands from the replicas and leave.
		fmt.Fprintln(std.err, "reconcile: --replicas is for `stands-reconciler run`; one cycle works alone")
		return exitUsage
	}
	return runOpen(ctx, &f, conf, true, std)
}

// runOpen opens the daemon from the settings (every problem with them printed, each on a line of its
// own) and runs it, or one cycle of it.
func runOpen(ctx context.Context, f *daemonFlags, conf *settings, once bool, std stdio) int {
	getenv := conf.Env()
	f.s.FilesOnly = conf.FilesOnly
	if errs := f.s.Check(daemon.Env(getenv), conf); len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintf(std.err, "run: %v\n", err)
		}
		return exitError
	}
	level := new(slog.LevelVar)
	level.Set(logging.Level(f.s.LogLevel))
	log := logging.NewLeveled(std.err, level, f.s.LogFormat)
	// What config check refuses but a start can live with is said, not refused: a restart must
	// not fail on a file's mode.
	unit, err := unitOf("")
	if err != nil {
		log.Warn("installed unit not read", "err", err)
	}
	for _, p := range f.s.Preflight(daemon.Env(getenv), conf, unit) {
		log.Warn("config check refuses this setting", "err", p)
	}
	opts := []daemon.Option{daemon.WithLogger(log)}
	if once {
		opts = append(opts, daemon.WithoutListeners())
	}
	d, err := daemon.Open(ctx, f.s, daemon.Env(getenv), conf, opts...)
	if err != nil {
		fmt.Fprintf(std.err, "run: %v\n", err)
		return exitError
	}
	if once {
		defer d.Close()
		return reconcileOnce(ctx, d, std)
	}
	// The drain outlives ctx (the first signal ends it) and ends at a second signal.
	drain, abort := context.WithCancelCause(context.WithoutCancel(ctx))
	stopped := make(chan struct{})
	go abortOnSecondSignal(ctx, abort, stopped)
	rctx, stopReloads := context.WithCancel(ctx)
	defer stopReloads()
	go (&reloader{conf: conf, level: level, log: log, d: d}).run(rctx, reloadSignals)
	d.Run(ctx)
	// Operations cancelled at the drain timeout still make a clean stop: exit 0 tells systemd so.
	// Only final statuses that could not be committed are an error (the next start commits them).
	code := exitOK
	if err := d.Shutdown(drain); err != nil {
		log.Warn("drain", "err", err)
		code = exitError
	}
	close(stopped)
	abort(nil)
	d.Close() // after the drain: credential watchers and the Vault login served it to the end
	log.Info("reconciler stopped")
	return code
}

// abortOnSecondSignal ends the drain, and so cancels the running operations, at a second SIGTERM or
// SIGINT, once the first has begun it.
func abortOnSecondSignal(ctx context.Context, abort context.CancelCauseFunc, stopped <-chan struct{}) {
	select {
	case <-ctx.Done():
	case <-stopped:
		return
	}
	force := make(chan os.Signal, 1)
	signal.Notify(force, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(force)
	select {
	case <-force:
		abort(errSecondSignal)
	case <-stopped:
	}
}

var errSecondSignal = errors.New("a second signal")

// reconcileOnce is `reconcile --once`: one cycle, its operations awaited, a record of every stand's
// phase on stdout; a stand that failed makes the exit code 1.
func reconcileOnce(ctx context.Context, d *daemon.Daemon, std stdio) int {
	statuses, err := d.Once(ctx)
	if err != nil {
		fmt.Fprintf(std.err, "run: %v\n", err)
		return exitError
	}
	code, phases := exitOK, map[string]string{}
	for id, s := range statuses {
		phases[id] = string(s.Phase)
		if s.Phase == reason.Failed || s.Phase == reason.Stalled {
			code = exitError
		}
	}
	status := "success"
	if code != exitOK {
		status = "failure"
	}
	if c := writeRecord(std, map[string]any{"operation": "reconcile", "status": status, "stands": phases}); c != exitOK {
		return c
	}
	return code
}
