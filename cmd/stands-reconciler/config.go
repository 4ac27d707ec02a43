package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/url"
	"path/filepath"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/credential"
	"github.com/stands-engine/stands-reconciler/internal/logging"
)

func runConfig(ctx context.Context, args []string, std stdio, getenv env) int {
	if len(args) == 0 || args[0] != "check" {
		fmt.Fprintln(std.err, "config: the one subcommand is `config check [flags of run]`")
		return exitUsage
	}
	fs := newFlags("config check", "config check [flags of run]\n\nPrints the daemon's effective configuration — every setting, its value and where it came from (flag,\nvariable, --config file or default), every secret as *** with the file it is read from — and exits 1\nnaming each setting that is missing or wrong, as `run` would refuse to start.", std)
	conf := newSettings(fs, getenv)
	conf.filesOnly = true
	var f daemonFlags
	f.register(conf)
	done, code := parseFlags(conf, args[1:], std)
	if done && code != exitError {
		return code
	}
	var problems []error
	if done { // the layer itself refused a value; show what it could read anyway
		problems = append(problems, errors.New("see the error above"))
	} else {
		problems = f.check(conf, conf.env())
	}
	printConfig(std, conf)
	for _, p := range problems {
		fmt.Fprintf(std.err, "config: %v\n", p)
	}
	if len(problems) > 0 {
		fmt.Fprintf(std.err, "config: %d problem(s); `run` would not start\n", len(problems))
		return exitError
	}
	fmt.Fprintln(std.err, "config: ok")
	return exitOK
}

// printConfig writes every setting with its value and origin, then every secret as *** with where
// it is read from.
func printConfig(std stdio, c *settings) {
	w := tabwriter.NewWriter(std.out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(w, "SETTING\tVALUE\tFROM")
	c.fs.VisitAll(func(fl *flag.Flag) {
		origin := c.origin[fl.Name]
		if origin == "" { // a flag of this run only (--allow-mass-destroy)
			origin = "default"
			c.fs.Visit(func(set *flag.Flag) {
				if set.Name == fl.Name {
					origin = "--" + fl.Name
				}
			})
		}
		if fl.Name == "config" {
			origin = "--config"
			if c.config == "" {
				origin = "$" + configVariable
				if c.getenv(configVariable) == "" {
					origin = "none"
				}
			}
			fmt.Fprintf(w, "%s\t%s\t%s\n", fl.Name, quoted(pathOf(c)), origin)
			return
		}
		fmt.Fprintf(w, "%s\t%s\t%s\n", fl.Name, quoted(logging.RedactPassword(fl.Value.String())), origin)
	})
	for _, s := range secretSettings {
		origin, value := c.secretOrigin(s), "***"
		if origin == "" {
			origin, value = "not set", "-"
		}
		fmt.Fprintf(w, "credential %s\t%s\t%s\n", s.name, value, origin)
	}
	_ = w.Flush()
}

func pathOf(c *settings) string {
	if c.file != nil {
		return c.file.path
	}
	return ""
}

func quoted(v string) string {
	if v == "" {
		return `""`
	}
	return v
}

// check reports every daemon setting that is missing or wrong, each naming the setting and where its
// value came from: the start refuses them all at once, and `config check` lists them. Secrets are
// read to check them, never shown.
func (f *daemonFlags) check(c *settings, getenv env) []error {
	var errs []error
	bad := func(name, format string, a ...any) {
		errs = append(errs, fmt.Errorf("--%s (from %s): %s", name, c.origin[name], fmt.Sprintf(format, a...)))
	}
	if f.repo == "" {
		errs = append(errs, errors.New("--repo is required ($STANDS_REPO_URL, or repo: in --config)"))
	} else if u, err := url.Parse(f.repo); err == nil && u.User != nil {
		if _, has := u.User.Password(); has {
			bad("repo", "holds a password: give the token in $STANDS_GIT_TOKEN_FILE (or credentials.git-token) and the user in --git-user")
		}
	}
	if !slices.Contains([]string{"full", "skip"}, f.nodes) {
		bad("nodes", "%q: want full or skip", f.nodes)
	}
	errs = append(errs, daemonSeedErrors(getenv)...)
	if err := f.checkLog(); err != nil {
		errs = append(errs, err)
	}
	for name, d := range map[string]time.Duration{"poll-interval": f.poll, "drain-timeout": f.drain, "operation-timeout": f.opTimeout} {
		if d <= 0 {
			bad(name, "want a duration above 0")
		}
	}
	if f.statusDelay < 0 || f.statusDelay > time.Minute {
		bad("status-delay", "want 0 to 1m: a status may not wait longer")
	}
	if f.secretRefresh < 0 {
		bad("secret-refresh", "want 0 (every poll) or more")
	}
	if f.drift < 0 {
		bad("drift-interval", "want 0 (never) or more")
	}
	if f.healthInterval < 0 || f.healthInterval > 0 && f.healthInterval < 10*time.Second {
		bad("health-interval", "want 0 (never) or 10s or more: each check opens an SSH connection to every server")
	}
	if f.healLimit < 1 {
		bad("heal-limit", "%d: want at least 1", f.healLimit)
	}
	if u, err := url.Parse(f.backend); err == nil {
		if _, ok := u.User.Password(); ok {
			bad("backend", "holds a password: remove it and set $STANDS_DB_PASSWORD_FILE (or credentials.db-password)")
		}
	}
	if f.lockLease < 0 {
		bad("lock-lease", "want 0 (never) or more")
	}
	if f.replicas {
		if u, err := url.Parse(f.backend); err != nil || u.Scheme != "postgres" {
			bad("replicas", "needs a postgres:// --backend: it holds the Pulumi state and the leases of every replica")
		}
		if f.leaseTTL < 2*time.Second {
			bad("lease-ttl", "want 2s or more: a lease is renewed every third of it")
		}
		if f.leaseGrace < time.Second {
			bad("lease-grace", "want 1s or more: the time a replica that lost a lease has to stop its Pulumi processes")
		}
		if strings.ContainsAny(f.replicaID, " \t\n/") {
			bad("replica-id", "%q: no spaces or slashes", f.replicaID)
		}
	}
	if f.workers < 1 {
		bad("workers", "%d: want at least 1", f.workers)
	}
	if f.share < 0 || f.share > 1 {
		bad("max-destroy-share", "%v: want a share from 0 to 1", f.share)
	}
	if f.listen != "" {
		if _, _, err := net.SplitHostPort(f.listen); err != nil {
			bad("listen", "%v", err)
		}
	}
	if p := f.socketPath(); len(p) > maxSocketPath {
		bad("control-socket", "%s is longer than the %d bytes a Unix socket path may have", p, maxSocketPath)
	}
	return append(errs, f.checkCredentials(c, getenv)...)
}

// checkCredentials reads every secret the settings need, and the Pulumi CLI's place.
func (f *daemonFlags) checkCredentials(c *settings, getenv env) []error {
	var errs []error
	for _, key := range []string{"STANDS_PASSPHRASE", "HCLOUD_TOKEN"} {
		s, _ := secretByKey(key)
		v, err := credential.Read(getenv, key)
		switch {
		case errors.Is(err, credential.ErrNotSet):
			from := "$" + key + "_FILE"
			if !c.filesOnly {
				from = "$" + key + ", " + from
			}
			errs = append(errs, fmt.Errorf("credential %s is required: %s, or credentials.%s in --config", s.name, from, s.name))
		case err != nil:
			errs = append(errs, err)
		case v == "":
			errs = append(errs, fmt.Errorf("credential %s from %s is empty", s.name, c.secretOrigin(s)))
		}
	}
	for _, key := range []string{"STANDS_GIT_TOKEN", "STANDS_WEBHOOK_SECRET", "STANDS_DB_PASSWORD"} {
		if _, err := credential.Read(getenv, key); err != nil && !errors.Is(err, credential.ErrNotSet) {
			errs = append(errs, err)
		}
	}
	if f.vaultAddr != "" {
		if _, err := vaultAuth(getenv, f.vaultRoleID); err != nil {
			errs = append(errs, err)
		}
		for _, key := range []string{"VAULT_TOKEN", "VAULT_SECRET_ID"} {
			if _, err := credential.Read(getenv, key); err != nil && !errors.Is(err, credential.ErrNotSet) {
				errs = append(errs, err)
			}
		}
	}
	if strings.HasPrefix(f.repo, "ssh://") || strings.Contains(f.repo, "@") && !strings.Contains(f.repo, "://") {
		if _, err := sshAuth(getenv, f.knownHosts); err != nil {
			errs = append(errs, err)
		}
	}
	if bin, err := f.pulumiBin(); err != nil {
		errs = append(errs, fmt.Errorf("--pulumi (from %s): %v", c.origin["pulumi"], err))
	} else if !exists(bin) {
		errs = append(errs, fmt.Errorf("--pulumi (from %s): no Pulumi CLI at %s", c.origin["pulumi"], bin))
	}
	return errs
}

// maxSocketPath is what sockaddr_un holds on Linux, less its terminating NUL.
const maxSocketPath = 107

// socketPath is the operator controls' socket: --control-socket, else <state-dir>/control.sock;
// "" when they are off.
func (f *daemonFlags) socketPath() string {
	switch f.controlSocket {
	case "none":
		return ""
	case "":
		p, err := filepath.Abs(filepath.Join(f.stateDir, "control.sock"))
		if err != nil {
			return filepath.Join(f.stateDir, "control.sock")
		}
		return p
	}
	return f.controlSocket
}
