package daemon

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/stands-engine/stands-reconciler/compat"
	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/internal/credential"
	"github.com/stands-engine/stands-reconciler/internal/layered"
	"github.com/stands-engine/stands-reconciler/internal/logging"
)

// Settings are everything the daemon is built from, as plain values: the flags, variables and
// config file keys of docs/operations.md. Secrets are never settings: each is read from Env by the
// credential rule (Credentials).
type Settings struct {
	Engine            engine.Settings
	LogLevel          string
	LogFormat         string
	Repo, Branch      string
	StatusBranch      string
	GitUser           string // for HTTP(S) token authentication
	GitName, GitEmail string // the status commits' author
	GitKnownHosts     string // pins an ssh:// repository's host keys
	// SigningKeysTrusted: public keys rotated out whose signatures of the reconciler's commits
	// still count (signing.go).
	SigningKeysTrusted string
	GiteaURL           string // "": an http(s) repository's own
	Listen             string // the webhook, probes and /metrics; "": none
	MetricsListen      string // the probes and /metrics on a listener of their own; "": on Listen
	VaultAddr          string // "": local mode, secrets from SECRET_<NAME>_FILE files
	VaultRoleID        string // "": a token
	VaultMount         string
	VaultPrefix        string
	ControlSocket      string // "": <state-dir>/control.sock; "none": no controls
	Poll               time.Duration
	Drain              time.Duration
	Drift              time.Duration
	OperationTimeout   time.Duration
	StatusDelay        time.Duration
	SecretRefresh      time.Duration
	HealthInterval     time.Duration
	Workers            int
	PlanWorkers        int // pull requests planned at once
	PlanBudget         time.Duration
	PlanRenderCPU      time.Duration
	HealLimit          int
	MaxDestroyShare    float64
	AllowMassDestroy   bool
	DriftApply         bool
	Previews           bool
	RequireReview      bool // apply only reviewed changes (docs/pr-workflow.md#apply-only-what-was-reviewed)
	// RequiredApprovals is how many approvals that count a change needs at least; main's protection
	// may ask more (docs/pr-workflow.md#four-eyes).
	RequiredApprovals int
	PlanOnly          bool
	Heal              bool
	// Replicas: one of several reconcilers on one postgres:// backend (docs/replicas.md).
	Replicas   bool
	ReplicaID  string
	LeaseTTL   time.Duration
	LeaseGrace time.Duration
	// FilesOnly: secrets from files only, never from the environment, which /proc/<pid>/environ
	// shows and children inherit: `run` and `config check`. `reconcile --once` takes SECRET_<NAME>
	// as the one-shot commands do.
	FilesOnly bool
}

// Env reads the environment: the process's, with the config file's credential files as KEY_FILE.
type Env func(string) string

// Credential is a secret setting: KEY or KEY_FILE in the environment, or credentials.<Name> in
// the config file.
type Credential = layered.Credential

// Credentials are the daemon's secrets.
var Credentials = []Credential{
	{Key: "HCLOUD_TOKEN", Name: "hcloud-token"},
	{Key: "STANDS_PASSPHRASE", Name: "passphrase"},
	{Key: "STANDS_GIT_TOKEN", Name: "git-token"},
	{Key: "STANDS_GIT_SSH_KEY", Name: "git-ssh-key"},
	{Key: "STANDS_WEBHOOK_SECRET", Name: "webhook-secret"},
	{Key: "VAULT_TOKEN", Name: "vault-token"},
	{Key: "VAULT_SECRET_ID", Name: "vault-secret-id"},
	{Key: "STANDS_DB_PASSWORD", Name: "db-password"}, // a postgres:// backend's; never in its URL
	{Key: "STANDS_SIGNING_KEY", Name: "signing-key"}, // signs the reconciler's commits (signing.go)
}

// CredentialByKey is the credential read from KEY.
func CredentialByKey(key string) (Credential, bool) {
	i := slices.IndexFunc(Credentials, func(c Credential) bool { return c.Key == key })
	if i < 0 {
		return Credential{}, false
	}
	return Credentials[i], true
}

// Origins says where each setting came from, for the errors that name it: a flag, a variable, a
// config file's line, or the default.
type Origins interface {
	Setting(name string) string     // "--repo", "$STANDS_REPO_URL", "daemon.yml:3", "default"
	Credential(c Credential) string // "$HCLOUD_TOKEN_FILE (/path)"; "" when not set
}

// Check reports every setting that is missing or wrong, each naming the setting and where its
// value came from: the start refuses them all at once, and `config check` lists them. Secrets are
// read to check them, never shown.
func (s *Settings) Check(env Env, o Origins) []error {
	var errs []error
	bad := func(name, format string, a ...any) {
		errs = append(errs, fmt.Errorf("--%s (from %s): %s", name, o.Setting(name), fmt.Sprintf(format, a...)))
	}
	if s.Repo == "" {
		errs = append(errs, errors.New("--repo is required ($STANDS_REPO_URL, or repo: in --config)"))
	} else if err := checkRepoURL(s.Repo); err != nil {
		bad("repo", "%v", err)
	}
	if err := s.Engine.CheckCloud(); err != nil {
		bad("cloud", "%q: %v", s.Engine.Cloud, err)
	}
	if !slices.Contains(engine.NodesModes, s.Engine.Nodes) {
		bad("nodes", "%q: want full or skip", s.Engine.Nodes)
	}
	errs = append(errs, compat.DaemonErrors(env, credentialFileKey)...)
	if err := logging.Check(s.LogLevel, s.LogFormat); err != nil {
		errs = append(errs, err)
	}
	for name, d := range map[string]time.Duration{"poll-interval": s.Poll, "drain-timeout": s.Drain, "operation-timeout": s.OperationTimeout} {
		if d <= 0 {
			bad(name, "want a duration above 0")
		}
	}
	if s.StatusDelay < 0 || s.StatusDelay > time.Minute {
		bad("status-delay", "want 0 to 1m: a status may not wait longer")
	}
	if s.SecretRefresh < 0 {
		bad("secret-refresh", "want 0 (every poll) or more")
	}
	if s.Drift < 0 {
		bad("drift-interval", "want 0 (never) or more")
	}
	if s.HealthInterval < 0 || s.HealthInterval > 0 && s.HealthInterval < 10*time.Second {
		bad("health-interval", "want 0 (never) or 10s or more: each check opens an SSH connection to every server")
	}
	if s.HealLimit < 1 {
		bad("heal-limit", "%d: want at least 1", s.HealLimit)
	}
	if err := engine.CheckBackendURL(s.Engine.Backend); err != nil {
		bad("backend", "%v", err)
	}
	if s.Engine.LockLease < 0 {
		bad("lock-lease", "want 0 (never) or more")
	}
	s.checkReplicas(bad)
	s.checkWork(bad)
	if why := s.Ungated(env); s.RequireReview && why != "" {
		// A gate that turned itself off would apply every change unreviewed while the settings
		// say otherwise: it is on, or off by the operator's word.
		bad("require-review", "the review gate cannot run: %s; give the daemon Gitea's API (an https repository or --gitea-url, "+
			"and STANDS_GIT_TOKEN), or run without the gate: --require-review=false (STANDS_REQUIRE_REVIEW=false)", why)
	}
	if s.MaxDestroyShare < 0 || s.MaxDestroyShare > 1 {
		bad("max-destroy-share", "%v: want a share from 0 to 1", s.MaxDestroyShare)
	}
	for name, addr := range map[string]string{"listen": s.Listen, "metrics-listen": s.MetricsListen} {
		if _, _, err := net.SplitHostPort(addr); addr != "" && err != nil {
			bad(name, "%v", err)
		}
	}
	if s.MetricsListen != "" && s.MetricsListen == s.Listen {
		bad("metrics-listen", "%s is --listen's address: give the probes and /metrics another, or leave it empty to serve them on --listen", s.MetricsListen)
	}
	if p := s.SocketPath(); len(p) > maxSocketPath {
		bad("control-socket", "%s is longer than the %d bytes a Unix socket path may have", p, maxSocketPath)
	}
	return append(errs, s.checkCredentials(env, o)...)
}

// checkReplicas checks what --replicas needs.
func (s *Settings) checkReplicas(bad func(name, format string, a ...any)) {
	if !s.Replicas {
		return
	}
	if u, err := url.Parse(s.Engine.Backend); err != nil || u.Scheme != "postgres" {
		bad("replicas", "needs a postgres:// --backend: it holds the Pulumi state and the leases of every replica")
	}
	if s.LeaseTTL < 2*time.Second {
		bad("lease-ttl", "want 2s or more: a lease is renewed every third of it")
	}
	if s.LeaseGrace < time.Second {
		bad("lease-grace", "want 1s or more: the time a replica that lost a lease has to stop its Pulumi processes")
	}
	if strings.ContainsAny(s.ReplicaID, " \t\n/") {
		bad("replica-id", "%q: no spaces or slashes", s.ReplicaID)
	}
}

// checkWork checks how much work runs at once, and how much a plan may take.
func (s *Settings) checkWork(bad func(name, format string, a ...any)) {
	if s.Workers < 1 {
		bad("workers", "%d: want at least 1", s.Workers)
	}
	if s.RequiredApprovals < 1 {
		bad("required-approvals", "%d: want at least 1: an approval by a second person is the review", s.RequiredApprovals)
	}
	if s.PlanWorkers < 1 {
		bad("plan-workers", "%d: want at least 1", s.PlanWorkers)
	}
	if s.PlanBudget < 10*time.Second {
		bad("plan-budget", "%s: want 10s or more: a plan runs Pulumi previews", s.PlanBudget)
	}
	if s.PlanRenderCPU < time.Second {
		bad("plan-render-cpu", "%s: want 1s or more", s.PlanRenderCPU)
	}
}

// checkOptional reads a credential the settings may go without: set, it must be readable, and not
// empty where used.
func checkOptional(env Env, o Origins, key string, used bool) error {
	c, _ := CredentialByKey(key)
	v, err := credential.Read(env, key)
	switch {
	case errors.Is(err, credential.ErrNotSet):
		return nil
	case err != nil:
		return fmt.Errorf("credential %s from %s: %w: make it readable by the daemon's user", c.Name, o.Credential(c), err)
	case v == "" && used:
		return fmt.Errorf("credential %s from %s is empty, and these settings use it: write the %s into it", c.Name, o.Credential(c), c.Name)
	}
	return nil
}

// credentialFileKey is the variable the daemon reads key from: a secret's, $KEY_FILE.
func credentialFileKey(key string) string {
	if _, secret := CredentialByKey(key); secret {
		return key + "_FILE"
	}
	return key
}

// checkCredentials reads every secret the settings need, and the Pulumi CLI's place.
func (s *Settings) checkCredentials(env Env, o Origins) []error {
	var errs []error
	for _, key := range []string{"STANDS_PASSPHRASE", "HCLOUD_TOKEN"} {
		c, _ := CredentialByKey(key)
		v, err := credential.Read(env, key)
		switch {
		case errors.Is(err, credential.ErrNotSet):
			from := "$" + key + "_FILE"
			if !s.FilesOnly {
				from = "$" + key + ", " + from
			}
			errs = append(errs, fmt.Errorf("credential %s is required: %s, or credentials.%s in --config", c.Name, from, c.Name))
		case err != nil:
			errs = append(errs, fmt.Errorf("credential %s from %s: %w: make it readable by the daemon's user", c.Name, o.Credential(c), err))
		case v == "":
			errs = append(errs, fmt.Errorf("credential %s from %s is empty: write the %s into it", c.Name, o.Credential(c), c.Name))
		}
	}
	// The optional credentials, and whether these settings use them: one they use fails when first
	// used if empty, hours after the start; the others may stay empty (the unit gives every one a file).
	optional := map[string]bool{"STANDS_GIT_TOKEN": repoKindOf(s.Repo) == httpRepo, "STANDS_WEBHOOK_SECRET": false, "STANDS_DB_PASSWORD": false, "STANDS_SIGNING_KEY": false}
	if s.VaultAddr != "" {
		if _, err := vaultAuth(env, s.VaultRoleID); err != nil {
			errs = append(errs, err)
		}
		optional["VAULT_TOKEN"], optional["VAULT_SECRET_ID"] = s.VaultRoleID == "", s.VaultRoleID != ""
	}
	for _, key := range slices.Sorted(maps.Keys(optional)) {
		if err := checkOptional(env, o, key, optional[key]); err != nil {
			errs = append(errs, err)
		}
	}
	if repoKindOf(s.Repo) == sshRepo {
		if _, err := sshAuth(env, s.GitKnownHosts); err != nil {
			errs = append(errs, err)
		}
	}
	if _, _, _, err := s.signing(env, false); err != nil {
		errs = append(errs, err)
	}
	if bin, err := s.Engine.PulumiBin(); err != nil {
		errs = append(errs, fmt.Errorf("--pulumi (from %s): %v", o.Setting("pulumi"), err))
	} else if _, err := os.Stat(bin); err != nil {
		errs = append(errs, fmt.Errorf("--pulumi (from %s): no Pulumi CLI at %s", o.Setting("pulumi"), bin))
	}
	return errs
}

// maxSocketPath is what sockaddr_un holds on Linux, less its terminating NUL.
const maxSocketPath = 107

// SocketPath is the operator controls' socket: --control-socket, else <state-dir>/control.sock;
// "" when they are off.
func (s *Settings) SocketPath() string {
	switch s.ControlSocket {
	case "none":
		return ""
	case "":
		p, err := filepath.Abs(filepath.Join(s.Engine.StateDir, "control.sock"))
		if err != nil {
			return filepath.Join(s.Engine.StateDir, "control.sock")
		}
		return p
	}
	return s.ControlSocket
}

// stateFile is a file of the daemon's state folder, by its absolute path.
func (s *Settings) stateFile(name string) (string, error) {
	return filepath.Abs(filepath.Join(s.Engine.StateDir, name))
}
