package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"

	"io"

	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/internal/control"
	"github.com/stands-engine/stands-reconciler/internal/credential"
	"github.com/stands-engine/stands-reconciler/internal/httpapi"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/vault"
)

// daemonFlags configure `run` and `reconcile`.
type daemonFlags struct {
	engineFlags
	repo, branch, statusBranch, gitUser, gitName, gitEmail    string
	listen, vaultAddr, vaultRoleID, vaultMount, vaultPrefix   string
	giteaURL, knownHosts, controlSocket, replicaID            string
	poll, drain, drift, opTimeout, statusDelay, secretRefresh time.Duration
	healthInterval, leaseTTL, leaseGrace                      time.Duration
	workers, healLimit                                        int
	share                                                     float64
	massDestroy, driftApply, previews, planOnly, heal         bool
	replicas                                                  bool
}

func (f *daemonFlags) register(c *settings) {
	f.engineFlags.register(c)
	fs := c.fs
	fs.StringVar(&f.repo, "repo", bound(c, "repo", "STANDS_REPO_URL", ""), "the stands repository: https://…/org/stands.git, ssh://git@…/org/stands.git or a local path ($STANDS_REPO_URL)")
	fs.StringVar(&f.branch, "branch", bound(c, "branch", "STANDS_BRANCH", "main"), "the tracked branch ($STANDS_BRANCH)")
	fs.StringVar(&f.statusBranch, "status-branch", bound(c, "status-branch", "STANDS_STATUS_BRANCH", ""), "branch status is committed to (default: the tracked branch; stands-status for a local path) ($STANDS_STATUS_BRANCH)")
	fs.StringVar(&f.gitUser, "git-user", bound(c, "git-user", "STANDS_GIT_USER", "stands-reconciler"), "user name for HTTP(S) token authentication ($STANDS_GIT_USER); the token is $STANDS_GIT_TOKEN or $STANDS_GIT_TOKEN_FILE")
	fs.StringVar(&f.gitName, "git-name", bound(c, "git-name", "STANDS_GIT_NAME", gitsource.DefaultIdentity.Name), "author name of status commits ($STANDS_GIT_NAME)")
	fs.StringVar(&f.knownHosts, "git-known-hosts", bound(c, "git-known-hosts", "STANDS_GIT_KNOWN_HOSTS", ""), "OpenSSH known_hosts file pinning an ssh:// repository's host keys; the key is $STANDS_GIT_SSH_KEY_FILE ($STANDS_GIT_KNOWN_HOSTS)")
	fs.StringVar(&f.giteaURL, "gitea-url", bound(c, "gitea-url", "STANDS_GITEA_URL", ""), "Gitea API of the repository, for commit statuses and pull request plans (default: an http(s) repository's own) ($STANDS_GITEA_URL)")
	fs.StringVar(&f.gitEmail, "git-email", bound(c, "git-email", "STANDS_GIT_EMAIL", gitsource.DefaultIdentity.Email), "author email of status commits ($STANDS_GIT_EMAIL)")
	fs.StringVar(&f.listen, "listen", bound(c, "listen", "STANDS_LISTEN", "127.0.0.1:8080"), "address of the webhook, /healthz and /readyz listener; empty: none ($STANDS_LISTEN)")
	fs.StringVar(&f.vaultAddr, "vault-addr", bound(c, "vault-addr", "VAULT_ADDR", ""), "Vault's address; empty: local mode, !secret values from SECRET_<NAME>_FILE files ($VAULT_ADDR)")
	fs.StringVar(&f.vaultRoleID, "vault-role-id", bound(c, "vault-role-id", "VAULT_ROLE_ID", ""), "AppRole role id; its secret id is $VAULT_SECRET_ID_FILE; empty: a token, $VAULT_TOKEN_FILE ($VAULT_ROLE_ID)")
	fs.StringVar(&f.vaultMount, "vault-mount", bound(c, "vault-mount", "STANDS_VAULT_MOUNT", "secret"), "KV v2 mount of the stands' secrets ($STANDS_VAULT_MOUNT)")
	fs.StringVar(&f.vaultPrefix, "vault-prefix", bound(c, "vault-prefix", "STANDS_VAULT_PREFIX", "stands"), "path prefix of the stands' secrets in the mount ($STANDS_VAULT_PREFIX)")
	fs.DurationVar(&f.poll, "poll-interval", bound(c, "poll-interval", "STANDS_POLL_INTERVAL", 30*time.Second), "time between polls, jittered ±10% ($STANDS_POLL_INTERVAL)")
	fs.DurationVar(&f.drain, "drain-timeout", bound(c, "drain-timeout", "STANDS_DRAIN_TIMEOUT", 10*time.Minute), "on SIGTERM, how long running operations may finish before they are cancelled ($STANDS_DRAIN_TIMEOUT)")
	fs.DurationVar(&f.opTimeout, "operation-timeout", bound(c, "operation-timeout", "STANDS_OPERATION_TIMEOUT", reconcile.DefaultOperationTimeout), "how long one apply, drift check or destroy may run before Pulumi is interrupted and the stand fails with Timeout, tried again later ($STANDS_OPERATION_TIMEOUT)")
	fs.DurationVar(&f.drift, "drift-interval", bound(c, "drift-interval", "STANDS_DRIFT_INTERVAL", 6*time.Hour), "how often a Ready stand is checked for drift (pulumi preview --refresh); 0: never ($STANDS_DRIFT_INTERVAL)")
	fs.DurationVar(&f.statusDelay, "status-delay", bound(c, "status-delay", "STANDS_STATUS_DELAY", 3*time.Second), "status changes within this long of the first go into one status commit; 0: a commit per change ($STANDS_STATUS_DELAY)")
	fs.DurationVar(&f.secretRefresh, "secret-refresh", bound(c, "secret-refresh", "STANDS_SECRET_REFRESH", 5*time.Minute), "how long the stands of an unchanged commit are not judged again: their secrets are read again after it, or at the next commit; 0: every poll ($STANDS_SECRET_REFRESH)")
	fs.DurationVar(&f.healthInterval, "health-interval", bound(c, "health-interval", "STANDS_HEALTH_INTERVAL", reconcile.DefaultHealthInterval), "how often every applied stand's instances are checked on its servers over SSH (unit, restarts, ports in the pod, probe hooks; no Pulumi): a failure makes it Degraded; 0: never; servers-only mode: never ($STANDS_HEALTH_INTERVAL)")
	fs.BoolVar(&f.heal, "heal", bound(c, "heal", "STANDS_HEAL", false), "restart an instance the health check finds unhealthy, and apply the stand again when that does not help ($STANDS_HEAL=true)")
	fs.IntVar(&f.healLimit, "heal-limit", bound(c, "heal-limit", "STANDS_HEAL_LIMIT", reconcile.DefaultHealLimit), "heals of one instance in an hour; past it a flapping instance is left Degraded for a human ($STANDS_HEAL_LIMIT)")
	fs.BoolVar(&f.driftApply, "drift-apply", bound(c, "drift-apply", "STANDS_DRIFT_APPLY", false), "apply a drifted stand again instead of only reporting Drifted ($STANDS_DRIFT_APPLY=true)")
	fs.IntVar(&f.workers, "workers", bound(c, "workers", "STANDS_WORKERS", 4), "operations at once (one per stand at a time) ($STANDS_WORKERS)")
	fs.Float64Var(&f.share, "max-destroy-share", bound(c, "max-destroy-share", "STANDS_MAX_DESTROY_SHARE", 0.5), "refuse to destroy more than this share of stands in one cycle (one is always allowed) ($STANDS_MAX_DESTROY_SHARE)")
	fs.BoolVar(&f.previews, "previews", bound(c, "previews", "STANDS_PREVIEWS", true), "plan open pull requests into the tracked branch: one comment each and the stands/plan commit status ($STANDS_PREVIEWS=false turns it off)")
	fs.BoolVar(&f.planOnly, "plan-only", bound(c, "plan-only", "STANDS_PLAN_ONLY", false), "decide and report in each stand's status what would be applied or destroyed, and apply nothing ($STANDS_PLAN_ONLY=true)")
	fs.StringVar(&f.controlSocket, "control-socket", bound(c, "control-socket", "STANDS_CONTROL_SOCKET", ""), "the operator controls' Unix socket (stands-reconciler ctl; default <state-dir>/control.sock; \"none\": no controls) ($STANDS_CONTROL_SOCKET)")
	fs.BoolVar(&f.replicas, "replicas", bound(c, "replicas", "STANDS_REPLICAS", false), "run as one of several reconcilers on one repository and one postgres:// backend: each stand is operated by the replica holding its lease, one replica commits status and plans pull requests (docs/operations.md#several-replicas) ($STANDS_REPLICAS=true)")
	fs.StringVar(&f.replicaID, "replica-id", bound(c, "replica-id", "STANDS_REPLICA_ID", ""), "with --replicas, this replica's name in logs, metrics and leases (default: the host name); each start adds a suffix of its own ($STANDS_REPLICA_ID)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", bound(c, "lease-ttl", "STANDS_LEASE_TTL", 30*time.Second), "with --replicas, how long a stand's lease lasts unrenewed: a replica that dies loses its stands after this, plus --lease-grace ($STANDS_LEASE_TTL)")
	fs.DurationVar(&f.leaseGrace, "lease-grace", bound(c, "lease-grace", "STANDS_LEASE_GRACE", 10*time.Second), "with --replicas, how long an expired lease stays unclaimed: longer than a replica takes to stop its Pulumi processes ($STANDS_LEASE_GRACE)")
	fs.BoolVar(&f.massDestroy, "allow-mass-destroy", false, "lift the share and last-stand guards for this run (protect still holds); prefer committing .stands/allow-destroy")
}

func runDaemon(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("run", "run [flags]\n\nReconciles the stands repository until SIGTERM: polls it (and answers Gitea's push webhook on POST /webhook,\nsigned with the webhook secret), applies and destroys stands, and commits their status.\nSecrets come from files only: HCLOUD_TOKEN_FILE, STANDS_PASSPHRASE_FILE, STANDS_GIT_TOKEN_FILE, STANDS_WEBHOOK_SECRET_FILE,\nVAULT_TOKEN_FILE or VAULT_SECRET_ID_FILE (with --vault-role-id), or the files credentials: names in --config.\nWithout --vault-addr, !secret values come from SECRET_<NAME>_FILE files (local mode).", std)
	conf := newSettings(fs, getenv)
	conf.filesOnly = true // an environment is readable in /proc/<pid>/environ: the daemon's holds no secret
	var f daemonFlags
	f.register(conf)
	if done, code := parseFlags(conf, args, std); done {
		return code
	}
	return daemon(ctx, &f, conf, false, std)
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
	if f.replicas {
		// One cycle cannot hold leases for long: it would take stands from the replicas and leave.
		fmt.Fprintln(std.err, "reconcile: --replicas is for `stands-reconciler run`; one cycle works alone")
		return exitUsage
	}
	return daemon(ctx, &f, conf, true, std)
}

func daemon(ctx context.Context, f *daemonFlags, conf *settings, once bool, std stdio) int {
	getenv := conf.env()
	if errs := f.check(conf, getenv); len(errs) > 0 {
		for _, err := range errs {
			fmt.Fprintf(std.err, "run: %v\n", err)
		}
		return exitError
	}
	log := f.logger(std.err)
	w, err := wire(f, std, getenv, conf.filesOnly, log)
	if err != nil {
		fmt.Fprintf(std.err, "run: %v\n", err)
		return exitError
	}
	if once {
		code := reconcileOnce(ctx, w.rec, f.drain, std, log)
		w.Close()
		return code
	}
	code := serve(ctx, w, f, getenv)
	// After the drain: credential watchers and the Vault login served it to the end.
	w.Close()
	log.Info("reconciler stopped")
	return code
}

// reconcileOnce is `reconcile --once`: one cycle, its operations awaited, a record of every stand's
// phase on stdout; a stand that failed makes the exit code 1.
func reconcileOnce(ctx context.Context, rec *reconcile.Reconciler, drain time.Duration, std stdio, log *slog.Logger) int {
	err := rec.Cycle(ctx)
	// Wait for the operations; on SIGTERM give them the drain timeout, as the daemon does.
	done := make(chan struct{})
	go func() { rec.Wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		log.Info("stopping: letting running operations finish", "drain_timeout", drain)
	}
	if derr := rec.Drain(drain); err == nil {
		err = derr
	}
	if err != nil {
		fmt.Fprintf(std.err, "run: %v\n", err)
		return exitError
	}
	code, phases := exitOK, map[string]string{}
	for id, s := range rec.Statuses() {
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

// serve is the daemon: the HTTP listener, the local repository's watcher and the loop until ctx
// ends, then the drain.
func serve(ctx context.Context, w *wiring, f *daemonFlags, getenv env) int {
	log := w.log
	if f.listen != "" {
		secret, err := credential.Watch(getenv, "STANDS_WEBHOOK_SECRET", log)
		if err != nil {
			fmt.Fprintf(w.stderr, "run: %v\n", err)
			return exitError
		}
		w.own(secret)
		if !secret.Set() {
			log.Warn("no STANDS_WEBHOOK_SECRET: every webhook is refused (401); polling still works")
		}
		srv, err := httpapi.Listen(f.listen, httpapi.Handler(w.rec, func() []byte {
			v, _ := secret.Value()
			return []byte(v)
		}, log, w.metrics), log)
		if err != nil {
			fmt.Fprintf(w.stderr, "run: %v\n", err)
			return exitError
		}
		w.own(srv)
		log.Info("listening", "addr", srv.Addr(), "paths", "/webhook /healthz /readyz /metrics")
	}
	if p := f.socketPath(); p != "" {
		ctl, err := control.Listen(p, w.rec, log)
		if err != nil {
			fmt.Fprintf(w.stderr, "run: %v\n", err)
			return exitError
		}
		w.own(ctl)
		log.Info("operator controls", "socket", p, "use", "stands-reconciler ctl --control-socket "+p+" status|pause|resume|plan-only|retry")
	}
	w.own(goAsLongAs(func(ctx context.Context) {
		if err := w.src.Watch(ctx, w.rec.Trigger); err != nil {
			log.Warn("watching the local repository failed; polling only", "err", err)
		}
	}))
	log.Info("reconciler started", "repo", gitsource.RedactURL(f.repo), "branch", f.branch, "status_branch", w.src.StatusBranch(),
		"poll_interval", f.poll, "owner", f.owner, "workers", f.workers)
	w.rec.Run(ctx, f.poll)
	log.Info("stopping: letting running operations finish; a second SIGTERM or SIGINT cancels them now", "drain_timeout", f.drain)
	force, drained := make(chan os.Signal, 1), make(chan struct{})
	signal.Notify(force, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(force)
	go func() {
		select {
		case <-force:
			w.rec.Abort()
		case <-drained:
		}
	}()
	defer close(drained)
	// Operations cancelled at the drain timeout still make a clean stop (their statuses say
	// Canceled; they run again after the next start): exit 0 tells systemd so. Only final statuses
	// that could not be committed are an error (they are committed at the next start).
	if err := w.rec.Drain(f.drain); err != nil {
		log.Warn("drain", "err", err)
		return exitError
	}
	return exitOK
}

// source builds the repository client: a token (watched when it comes from a file) for HTTP(S), a
// key for SSH, nothing for a local path.
func (f *daemonFlags) source(getenv env, gitToken *credential.Credential, log *slog.Logger) (*gitsource.Source, error) {
	opts := []gitsource.Option{gitsource.WithIdentity(gitsource.Identity{Name: f.gitName, Email: f.gitEmail}), gitsource.WithLogger(log)}
	status := f.statusBranch
	switch {
	case strings.HasPrefix(f.repo, "http://"), strings.HasPrefix(f.repo, "https://"):
		// No secret on a command line, which every user of the machine can read.
		if u, err := url.Parse(f.repo); err == nil && u.User != nil {
			if _, has := u.User.Password(); has {
				return nil, errors.New("--repo holds a password: give the token in STANDS_GIT_TOKEN_FILE (or STANDS_GIT_TOKEN) and the user in --git-user")
			}
		}
		if gitToken.Set() {
			opts = append(opts, gitsource.WithToken(f.gitUser, gitToken.Value))
		}
	case strings.HasPrefix(f.repo, "ssh://"), strings.Contains(f.repo, "@") && !strings.Contains(f.repo, "://"):
		auth, err := sshAuth(getenv, f.knownHosts)
		if err != nil {
			return nil, err
		}
		opts = append(opts, gitsource.WithAuth(auth))
	default: // a local repository: do not move the branch checked out in its work tree
		if status == "" {
			status = "stands-status"
		}
	}
	if status != "" {
		opts = append(opts, gitsource.WithStatusBranch(status))
	}
	return gitsource.New(f.repo, f.branch, opts...), nil
}

// forge is the Gitea API of an http(s) repository: commit statuses and pull request plans. An SSH
// or local repository has none (--gitea-url gives an SSH repository its API).
func (f *daemonFlags) forge(gitToken *credential.Credential, log *slog.Logger) *gitsource.Gitea {
	apiURL := f.giteaURL
	if apiURL == "" && (strings.HasPrefix(f.repo, "http://") || strings.HasPrefix(f.repo, "https://")) {
		apiURL = f.repo
	}
	if apiURL == "" {
		log.Info("no Gitea API: no commit statuses and no pull request plans")
		return nil
	}
	if !gitToken.Set() {
		log.Warn("no STANDS_GIT_TOKEN for the Gitea API: no commit statuses and no pull request plans")
		return nil
	}
	g, err := gitsource.NewGitea(apiURL, gitToken.Value)
	if err != nil {
		log.Warn("no Gitea API", "err", err)
		return nil
	}
	return g
}

// sshAuth reads the key from $STANDS_GIT_SSH_KEY_FILE (or credentials.git-ssh-key) and pins host
// keys from known (an OpenSSH known_hosts file); there is no way to skip the host check.
func sshAuth(getenv env, known string) (transport.AuthMethod, error) {
	keyFile := getenv("STANDS_GIT_SSH_KEY_FILE")
	if keyFile == "" || known == "" {
		return nil, errors.New("an ssh:// repository needs $STANDS_GIT_SSH_KEY_FILE (or credentials.git-ssh-key) and --git-known-hosts")
	}
	auth, err := gitssh.NewPublicKeysFromFile("git", keyFile, "")
	if err != nil {
		return nil, fmt.Errorf("read STANDS_GIT_SSH_KEY_FILE: %w", err)
	}
	cb, err := gitssh.NewKnownHostsCallback(known)
	if err != nil {
		return nil, fmt.Errorf("read --git-known-hosts: %w", err)
	}
	auth.HostKeyCallback = cb
	return auth, nil
}

// secrets is Vault when --vault-addr is set, else local mode: secrets from SECRET_<NAME> (the daemon:
// SECRET_<NAME>_FILE) and connection records as 0600 files under <state-dir>/connections. The
// closer, when not nil, ends the Vault login's renewal.
func (f *daemonFlags) secrets(getenv env, filesOnly bool, log *slog.Logger) (reconcile.Secrets, io.Closer, error) {
	addr := f.vaultAddr
	if addr == "" {
		dir, err := filepath.Abs(filepath.Join(f.stateDir, "connections"))
		if err != nil {
			return nil, nil, err
		}
		src := "SECRET_<NAME> variables"
		if filesOnly {
			src = "SECRET_<NAME>_FILE files"
		}
		log.Info("no Vault address: secrets from " + src + ", connection records in " + dir)
		return &localSecrets{SecretSource: localSource(getenv, filesOnly), dir: dir}, nil, nil
	}
	auth, err := vaultAuth(getenv, f.vaultRoleID)
	if err != nil {
		return nil, nil, err
	}
	s := vault.Open(addr, auth, log, vault.WithMount(f.vaultMount), vault.WithPrefix(f.vaultPrefix))
	return s, s, nil
}

// vaultAuth is AppRole when VAULT_ROLE_ID is set, else a token; the token and the secret id follow
// the credential rule (KEY or KEY_FILE, not both), and files are read again at each login.
func vaultAuth(getenv env, role string) (vault.Auth, error) {
	token, tokenFile, err := credential.Source(getenv, "VAULT_TOKEN")
	if err != nil {
		return nil, err
	}
	if role != "" {
		secretID, secretIDFile, err := credential.Source(getenv, "VAULT_SECRET_ID")
		switch {
		case err != nil:
			return nil, err
		case secretID != "" || secretIDFile == "":
			return nil, errors.New("--vault-role-id is set: the secret id must come from $VAULT_SECRET_ID_FILE or credentials.vault-secret-id (read at each login)")
		case token != "" || tokenFile != "":
			return nil, errors.New("both --vault-role-id and a Vault token are set: set one")
		}
		return vault.AppRole{RoleID: role, SecretIDFile: secretIDFile}, nil
	}
	switch {
	case tokenFile != "":
		return vault.TokenFile(tokenFile), nil
	case token != "":
		return vault.Token(token), nil
	}
	return nil, errors.New("--vault-addr is set but no Vault login: $VAULT_TOKEN_FILE (or credentials.vault-token), or --vault-role-id with $VAULT_SECRET_ID_FILE (or credentials.vault-secret-id)")
}

// localSecrets is local mode's secret store.
type localSecrets struct {
	manifest.SecretSource
	dir string
}

// localSource resolves !secret NAME from SECRET_<NAME>, or, with filesOnly (the daemon), from the file
// SECRET_<NAME>_FILE names: a value in the daemon's environment is refused, naming the variable.
func localSource(getenv env, filesOnly bool) manifest.SecretSource {
	if !filesOnly {
		return manifest.EnvSource{Lookup: func(k string) (string, bool) {
			v := getenv(k)
			return v, v != ""
		}}
	}
	return fileSecrets{getenv}
}

type fileSecrets struct{ getenv env }

func (s fileSecrets) Secret(_ context.Context, ref manifest.SecretRef) (string, error) {
	name := manifest.EnvName(ref)
	if s.getenv(name) != "" {
		return "", fmt.Errorf("%w: $%s is set, but the daemon takes secrets from files only: set $%s_FILE", manifest.ErrSecretNotFound, name, name)
	}
	file := s.getenv(name + "_FILE")
	if file == "" {
		return "", fmt.Errorf("%w: $%s_FILE is not set", manifest.ErrSecretNotFound, name)
	}
	v, err := credential.Read(s.getenv, name)
	if err != nil {
		return "", fmt.Errorf("%w: %v", manifest.ErrSecretNotFound, err)
	}
	return v, nil
}

func (s fileSecrets) SecretExists(ctx context.Context, ref manifest.SecretRef) error {
	_, err := s.Secret(ctx, ref)
	return err
}

func (l *localSecrets) WriteConnection(_ context.Context, id string, record json.RawMessage) error {
	return writeConnectionFile(l.dir, &stands.Result{StandID: id, Connection: stands.SecretJSON(record)})
}
