package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/go-git/go-git/v5/plumbing/transport"
	gitssh "github.com/go-git/go-git/v5/plumbing/transport/ssh"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/engine/manifest"
	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/internal/fswatch"
	"github.com/stands-engine/stands-reconciler/internal/logging"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/vault"
)

// daemonFlags configure `run` and `reconcile`.
type daemonFlags struct {
	engineFlags
	repo, branch, statusBranch, gitUser, gitName, gitEmail string
	listen, vaultMount, vaultPrefix                        string
	poll, drain, drift                                     time.Duration
	workers                                                int
	share                                                  float64
	massDestroy, driftApply, previews                      bool
}

func (f *daemonFlags) register(fs *flag.FlagSet, getenv env) {
	f.engineFlags.register(fs, getenv)
	def := func(k, d string) string {
		if v := getenv(k); v != "" {
			return v
		}
		return d
	}
	dur := func(k string, d time.Duration) time.Duration {
		if v, err := time.ParseDuration(getenv(k)); err == nil {
			return v
		}
		return d
	}
	fs.StringVar(&f.repo, "repo", getenv("STANDS_REPO_URL"), "the stands repository: https://…/org/stands.git, ssh://git@…/org/stands.git or a local path ($STANDS_REPO_URL)")
	fs.StringVar(&f.branch, "branch", def("STANDS_BRANCH", "main"), "the tracked branch ($STANDS_BRANCH)")
	fs.StringVar(&f.statusBranch, "status-branch", getenv("STANDS_STATUS_BRANCH"), "branch status is committed to (default: the tracked branch; stands-status for a local path) ($STANDS_STATUS_BRANCH)")
	fs.StringVar(&f.gitUser, "git-user", def("STANDS_GIT_USER", "stands-reconciler"), "user name for HTTP(S) token authentication ($STANDS_GIT_USER); the token is $STANDS_GIT_TOKEN or $STANDS_GIT_TOKEN_FILE")
	fs.StringVar(&f.gitName, "git-name", def("STANDS_GIT_NAME", gitsource.DefaultIdentity.Name), "author name of status commits ($STANDS_GIT_NAME)")
	fs.StringVar(&f.gitEmail, "git-email", def("STANDS_GIT_EMAIL", gitsource.DefaultIdentity.Email), "author email of status commits ($STANDS_GIT_EMAIL)")
	fs.StringVar(&f.listen, "listen", def("STANDS_LISTEN", "127.0.0.1:8080"), "address of the webhook, /healthz and /readyz listener; empty: none ($STANDS_LISTEN)")
	fs.StringVar(&f.vaultMount, "vault-mount", def("STANDS_VAULT_MOUNT", "secret"), "KV v2 mount of the stands' secrets ($STANDS_VAULT_MOUNT)")
	fs.StringVar(&f.vaultPrefix, "vault-prefix", def("STANDS_VAULT_PREFIX", "stands"), "path prefix of the stands' secrets in the mount ($STANDS_VAULT_PREFIX)")
	fs.DurationVar(&f.poll, "poll-interval", dur("STANDS_POLL_INTERVAL", 30*time.Second), "time between polls, jittered ±10% ($STANDS_POLL_INTERVAL)")
	fs.DurationVar(&f.drain, "drain-timeout", dur("STANDS_DRAIN_TIMEOUT", 10*time.Minute), "on SIGTERM, how long running operations may finish before they are cancelled ($STANDS_DRAIN_TIMEOUT)")
	fs.DurationVar(&f.drift, "drift-interval", dur("STANDS_DRIFT_INTERVAL", 6*time.Hour), "how often a Ready stand is checked for drift (pulumi preview --refresh); 0: never ($STANDS_DRIFT_INTERVAL)")
	fs.BoolVar(&f.driftApply, "drift-apply", getenv("STANDS_DRIFT_APPLY") == "true", "apply a drifted stand again instead of only reporting Drifted ($STANDS_DRIFT_APPLY=true)")
	fs.IntVar(&f.workers, "workers", 4, "operations at once (one per stand at a time)")
	fs.Float64Var(&f.share, "max-destroy-share", 0.5, "refuse to destroy more than this share of stands in one cycle (one is always allowed)")
	fs.BoolVar(&f.previews, "previews", getenv("STANDS_PREVIEWS") != "false", "plan open pull requests into the tracked branch: one comment each and the stands/plan commit status ($STANDS_PREVIEWS=false turns it off)")
	fs.BoolVar(&f.massDestroy, "allow-mass-destroy", false, "lift the share and last-stand guards for this run (protect still holds); prefer committing .stands/allow-destroy")
}

func runDaemon(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("run", "run [flags]\n\nReconciles the stands repository until SIGTERM: polls it (and answers Gitea's push webhook on POST /webhook,\nsigned with $STANDS_WEBHOOK_SECRET or $STANDS_WEBHOOK_SECRET_FILE), applies and destroys stands, and commits their status.\nSecrets: HCLOUD_TOKEN, STANDS_PASSPHRASE, STANDS_GIT_TOKEN, VAULT_TOKEN or VAULT_ROLE_ID+VAULT_SECRET_ID, each also as *_FILE.\nWithout VAULT_ADDR, !secret values come from SECRET_<NAME> (local mode).", std)
	var f daemonFlags
	f.register(fs, getenv)
	if done, code := parseFlags(fs, args, std); done {
		return code
	}
	return daemon(ctx, &f, false, std, getenv)
}

func runReconcile(ctx context.Context, args []string, std stdio, getenv env) int {
	fs := newFlags("reconcile", "reconcile --once [flags]\n\nOne reconciliation of the stands repository, waiting for its operations; the flags and settings of run apply.", std)
	var f daemonFlags
	f.register(fs, getenv)
	once := fs.Bool("once", false, "run one cycle and exit (required: `run` is the daemon)")
	if done, code := parseFlags(fs, args, std); done {
		return code
	}
	if !*once {
		fmt.Fprintln(std.err, "reconcile: give --once, or use `stands-reconciler run` for the daemon")
		return exitUsage
	}
	return daemon(ctx, &f, true, std, getenv)
}

func daemon(ctx context.Context, f *daemonFlags, once bool, std stdio, getenv env) int {
	log := logging.New(std.err, f.logLevel)
	fail := func(err error) int {
		fmt.Fprintf(std.err, "run: %v\n", err)
		return exitError
	}
	if f.repo == "" {
		fmt.Fprintln(std.err, "run: --repo (or $STANDS_REPO_URL) is required")
		return exitUsage
	}
	// Background work (credential watchers, Vault renewal) lives until the daemon returns, past the
	// signal: the drain still needs them.
	bg, stopBG := context.WithCancel(context.WithoutCancel(ctx))
	defer stopBG()
	hcloudToken, err := newCredential(bg, getenv, "HCLOUD_TOKEN", log)
	if err != nil {
		return fail(err)
	}
	// One logger for the loop and the engine: two handlers on one writer would each lock only itself.
	eng, pass, err := f.engine(std, getenv, f.owner, func(c *engine.Config) { c.HcloudTokenFunc, c.Log = hcloudToken.Value, log })
	if err != nil {
		return fail(err)
	}
	src, err := f.source(bg, getenv, log)
	if err != nil {
		return fail(err)
	}
	sec, err := f.secrets(bg, getenv, log)
	if err != nil {
		return fail(err)
	}
	cfg := reconcile.Config{Owner: f.owner, Passphrase: pass, Workers: f.workers, MaxDestroyShare: f.share,
		AllowMassDestroy: f.massDestroy, DriftInterval: f.drift, DriftApply: f.driftApply, Log: log,
		Branch: f.branch, StatusBranch: src.StatusBranch()}
	if forge := f.forge(bg, getenv, log); forge != nil {
		cfg.Forge = forge
		if f.previews {
			cfg.Planner, cfg.Refs = eng, src
		}
	}
	rec := reconcile.New(cfg, src, eng, sec)

	if once {
		err := rec.Cycle(ctx)
		// Wait for the operations; on SIGTERM give them the drain timeout, as the daemon does.
		done := make(chan struct{})
		go func() { rec.Wait(); close(done) }()
		select {
		case <-done:
		case <-ctx.Done():
			log.Info("stopping: letting running operations finish", "drain_timeout", f.drain)
		}
		if derr := rec.Drain(f.drain); err == nil {
			err = derr
		}
		if err != nil {
			return fail(err)
		}
		// The record lists every stand's phase; a stand that failed makes the exit code 1.
		code, phases := exitOK, map[string]string{}
		for id, s := range rec.Statuses() {
			phases[id] = string(s.Phase)
			if s.Phase == reconcile.Failed || s.Phase == reconcile.Stalled {
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

	var srv *http.Server
	if f.listen != "" {
		webhookSecret, err := newCredential(bg, getenv, "STANDS_WEBHOOK_SECRET", log)
		if err != nil {
			return fail(err)
		}
		if !webhookSecret.set() {
			log.Warn("no STANDS_WEBHOOK_SECRET: every webhook is refused (401); polling still works")
		}
		ln, err := net.Listen("tcp", f.listen)
		if err != nil {
			return fail(fmt.Errorf("listen on %s: %w", f.listen, err))
		}
		srv = &http.Server{Handler: handler(rec, webhookSecret, log), ReadHeaderTimeout: 10 * time.Second}
		go func() {
			if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
				log.Error("http listener stopped", "err", err)
			}
		}()
		log.Info("listening", "addr", ln.Addr().String(), "paths", "/webhook /healthz /readyz")
	}
	go func() {
		if err := src.Watch(bg, rec.Trigger); err != nil {
			log.Warn("watching the local repository failed; polling only", "err", err)
		}
	}()
	log.Info("reconciler started", "repo", gitsource.RedactURL(f.repo), "branch", f.branch, "status_branch", src.StatusBranch(),
		"poll_interval", f.poll, "owner", f.owner, "workers", f.workers)
	rec.Run(ctx, f.poll)
	log.Info("stopping: letting running operations finish", "drain_timeout", f.drain)
	code := exitOK
	if err := rec.Drain(f.drain); err != nil {
		log.Warn("drain", "err", err)
		code = exitInterrupted
	}
	if srv != nil {
		sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = srv.Shutdown(sctx)
		cancel()
	}
	log.Info("reconciler stopped")
	return code
}

// handler serves the webhook and the probes. /readyz is 503 until a cycle succeeded and while the
// repository, the secret store or the Pulumi backend is unreachable.
func handler(rec *reconcile.Reconciler, secret *credential, log *slog.Logger) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("POST /webhook", gitsource.WebhookHandler(func() []byte {
		v, _ := secret.Value()
		return []byte(v)
	}, func() {
		log.Info("webhook: polling now")
		rec.Trigger()
	}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, _ *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	mux.HandleFunc("GET /readyz", func(w http.ResponseWriter, _ *http.Request) {
		h := rec.Health()
		problems := map[string]string{}
		for name, err := range map[string]error{"source": h.Source, "secrets": h.Secrets, "backend": h.Backend} {
			if err != nil {
				problems[name] = err.Error()
			}
		}
		if h.Cycles == 0 && len(problems) == 0 {
			problems["cycle"] = "no cycle has completed yet"
		}
		w.Header().Set("Content-Type", "application/json")
		if len(problems) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"ready": len(problems) == 0, "problems": problems, "cycles": h.Cycles})
	})
	return mux
}

// source builds the repository client: a token (watched when it comes from a file) for HTTP(S), a
// key for SSH, nothing for a local path.
func (f *daemonFlags) source(ctx context.Context, getenv env, log *slog.Logger) (*gitsource.Source, error) {
	opts := []gitsource.Option{gitsource.WithIdentity(gitsource.Identity{Name: f.gitName, Email: f.gitEmail}), gitsource.WithLogger(log)}
	status := f.statusBranch
	switch {
	case strings.HasPrefix(f.repo, "http://"), strings.HasPrefix(f.repo, "https://"):
		tok, err := newCredential(ctx, getenv, "STANDS_GIT_TOKEN", log)
		if err != nil {
			return nil, err
		}
		if tok.set() {
			opts = append(opts, gitsource.WithToken(f.gitUser, tok.Value))
		}
	case strings.HasPrefix(f.repo, "ssh://"), strings.Contains(f.repo, "@") && !strings.Contains(f.repo, "://"):
		auth, err := sshAuth(getenv)
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
// or local repository has none (set STANDS_GITEA_URL to give an SSH repository its API).
func (f *daemonFlags) forge(ctx context.Context, getenv env, log *slog.Logger) reconcile.Forge {
	apiURL := getenv("STANDS_GITEA_URL")
	if apiURL == "" && (strings.HasPrefix(f.repo, "http://") || strings.HasPrefix(f.repo, "https://")) {
		apiURL = f.repo
	}
	if apiURL == "" {
		log.Info("no Gitea API: no commit statuses and no pull request plans")
		return nil
	}
	tok, err := newCredential(ctx, getenv, "STANDS_GIT_TOKEN", log)
	if err != nil || !tok.set() {
		log.Warn("no STANDS_GIT_TOKEN for the Gitea API: no commit statuses and no pull request plans", "err", err)
		return nil
	}
	g, err := gitsource.NewGitea(apiURL, tok.Value)
	if err != nil {
		log.Warn("no Gitea API", "err", err)
		return nil
	}
	return g
}

// sshAuth reads the key from $STANDS_GIT_SSH_KEY_FILE and pins host keys from
// $STANDS_GIT_KNOWN_HOSTS (an OpenSSH known_hosts file); there is no way to skip the host check.
func sshAuth(getenv env) (transport.AuthMethod, error) {
	keyFile, known := getenv("STANDS_GIT_SSH_KEY_FILE"), getenv("STANDS_GIT_KNOWN_HOSTS")
	if keyFile == "" || known == "" {
		return nil, errors.New("an ssh:// repository needs STANDS_GIT_SSH_KEY_FILE and STANDS_GIT_KNOWN_HOSTS")
	}
	auth, err := gitssh.NewPublicKeysFromFile("git", keyFile, "")
	if err != nil {
		return nil, fmt.Errorf("read STANDS_GIT_SSH_KEY_FILE: %w", err)
	}
	cb, err := gitssh.NewKnownHostsCallback(known)
	if err != nil {
		return nil, fmt.Errorf("read STANDS_GIT_KNOWN_HOSTS: %w", err)
	}
	auth.HostKeyCallback = cb
	return auth, nil
}

// secrets is Vault when VAULT_ADDR is set, else local mode: SECRET_<NAME> from the environment and
// connection records as 0600 files under <state-dir>/connections.
func (f *daemonFlags) secrets(ctx context.Context, getenv env, log *slog.Logger) (reconcile.Secrets, error) {
	addr := getenv("VAULT_ADDR")
	if addr == "" {
		dir, err := filepath.Abs(filepath.Join(f.stateDir, "connections"))
		if err != nil {
			return nil, err
		}
		log.Info("no VAULT_ADDR: secrets from SECRET_<NAME> variables, connection records in " + dir)
		return &localSecrets{EnvSource: manifest.EnvSource{Lookup: func(k string) (string, bool) {
			v := getenv(k)
			return v, v != ""
		}}, dir: dir}, nil
	}
	var auth vault.Auth
	switch {
	case getenv("VAULT_ROLE_ID") != "":
		if getenv("VAULT_SECRET_ID_FILE") == "" {
			return nil, errors.New("VAULT_ROLE_ID is set: the secret id must come from VAULT_SECRET_ID_FILE (read at each login)")
		}
		auth = vault.AppRole{RoleID: getenv("VAULT_ROLE_ID"), SecretIDFile: getenv("VAULT_SECRET_ID_FILE")}
	case getenv("VAULT_TOKEN_FILE") != "":
		auth = vault.TokenFile(getenv("VAULT_TOKEN_FILE"))
	case getenv("VAULT_TOKEN") != "":
		auth = vault.Token(getenv("VAULT_TOKEN"))
	default:
		return nil, errors.New("VAULT_ADDR is set but no VAULT_TOKEN, VAULT_TOKEN_FILE or VAULT_ROLE_ID+VAULT_SECRET_ID")
	}
	return &lazyVault{ctx: ctx, addr: addr, auth: auth, opts: []vault.Option{vault.WithMount(f.vaultMount), vault.WithPrefix(f.vaultPrefix), vault.WithLogger(log)}, log: log}, nil
}

// lazyVault logs in on first use and again after a failed login, so a Vault that is down when the
// daemon starts delays stands instead of stopping the daemon.
type lazyVault struct {
	ctx  context.Context
	addr string
	auth vault.Auth
	opts []vault.Option
	log  *slog.Logger

	mu sync.Mutex
	c  *vault.Client
}

func (l *lazyVault) client(ctx context.Context) (*vault.Client, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.c != nil {
		return l.c, nil
	}
	c, err := vault.New(ctx, l.addr, l.auth, l.opts...)
	if err != nil {
		return nil, err
	}
	l.c = c
	go c.KeepAlive(l.ctx)
	l.log.Info("logged in to vault", "addr", l.addr)
	return c, nil
}

func (l *lazyVault) Secret(ctx context.Context, ref manifest.SecretRef) (string, error) {
	c, err := l.client(ctx)
	if err != nil {
		return "", err
	}
	return c.Secret(ctx, ref)
}

func (l *lazyVault) WriteConnection(ctx context.Context, id string, record json.RawMessage) error {
	c, err := l.client(ctx)
	if err != nil {
		return err
	}
	return c.WriteConnection(ctx, id, record)
}

// localSecrets is local mode's secret store.
type localSecrets struct {
	manifest.EnvSource
	dir string
}

func (l *localSecrets) WriteConnection(_ context.Context, id string, record json.RawMessage) error {
	return writeConnectionFile(l.dir, &engine.Result{StandID: id, Connection: engine.SecretJSON(record)})
}

// credential is a secret setting from KEY or from the file named by KEY_FILE; the file is watched and
// read again when it changes, so a rotated credential needs no restart.
type credential struct {
	key  string
	file string
	log  *slog.Logger

	mu    sync.Mutex
	value string
	err   error
}

func newCredential(ctx context.Context, getenv env, key string, log *slog.Logger) (*credential, error) {
	c := &credential{key: key, value: getenv(key), file: getenv(key + "_FILE"), log: log}
	if c.file == "" {
		return c, nil
	}
	c.reload()
	if c.err != nil {
		return nil, c.err
	}
	err := fswatch.Start(ctx, []string{filepath.Dir(c.file)}, 100*time.Millisecond, c.reload, func(err error) {
		log.Warn("stopped watching a credential file; its last value stays in use", "setting", key+"_FILE", "err", err)
	})
	if err != nil {
		log.Warn("not watching a credential file; it is read at start only", "setting", key+"_FILE", "err", err)
	}
	return c, nil
}

func (c *credential) reload() {
	data, err := os.ReadFile(c.file)
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		c.err = fmt.Errorf("read %s_FILE: %w", c.key, err)
		return
	}
	v := strings.TrimSpace(string(data))
	if c.value != "" && v != c.value {
		c.log.Info("credential file changed; using the new value", "setting", c.key+"_FILE")
	}
	c.value, c.err = v, nil
}

func (c *credential) set() bool {
	v, err := c.Value()
	return err == nil && v != ""
}

// Value is the current value.
func (c *credential) Value() (string, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.value, c.err
}
