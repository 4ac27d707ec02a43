package main

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// fakePulumi is an executable at <dir>/bin/pulumi, for commands that only check for the CLI.
func fakePulumi(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "bin", "pulumi")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("#!/bin/sh\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return p
}

// configRow is the value and origin `config check` prints for a setting ("" when absent).
func configRow(out, setting string) (value, origin string) {
	m := regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(setting) + `\s+(\S+)\s+(.+)$`).FindStringSubmatch(out)
	if m == nil {
		return "", ""
	}
	return m[1], strings.TrimSpace(m[2])
}

// TestConfigLayer: a flag wins over its variable, which wins over the --config file, which wins
// over the default; `config check` shows each value with its origin and every secret as *** with
// the file it is read from, never its value.
func TestConfigLayer(t *testing.T) {
	ctx := context.Background()
	file := filepath.Join("testdata", "config", "daemon.yml")
	vars := map[string]string{"STANDS_CONFIG": file, "STANDS_WORKERS": "5", "STANDS_PULUMI_BIN": fakePulumi(t), "STANDS_STATE_DIR": t.TempDir()}
	r := runCLI(t, ctx, newRecorder(vars), "config", "check", "--drift-interval", "1h")
	if r.code != exitOK {
		t.Fatalf("config check: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
	}
	t.Logf("config check:\n%s", r.stdout)
	for setting, want := range map[string][2]string{
		"drift-interval": {"1h0m0s", "--drift-interval"}, // flag over file
		"workers":        {"5", "$STANDS_WORKERS"},       // variable over file
		"poll-interval":  {"45s", file + ":4"},           // file over default
		"owner":          {"platform", file + ":3"},
		"plan-only":      {"true", file + ":7"},
		"branch":         {"main", "default"},
		"config":         {file, "$STANDS_CONFIG"},
	} {
		if v, o := configRow(r.stdout, setting); v != want[0] || o != want[1] {
			t.Errorf("%s: %q from %q, want %q from %q", setting, v, o, want[0], want[1])
		}
	}
	for name, file := range map[string]string{"passphrase": "passphrase.txt", "hcloud-token": "hcloud-token.txt"} {
		if v, o := configRow(r.stdout, "credential "+name); v != "***" || !strings.Contains(o, filepath.Join("testdata", "config", file)) {
			t.Errorf("credential %s: %q from %q", name, v, o)
		}
	}
	if v, o := configRow(r.stdout, "credential git-token"); v != "-" || o != "not set" {
		t.Errorf("credential git-token: %q from %q", v, o)
	}
	if strings.Contains(r.stdout+r.stderr, "SENTINEL") {
		t.Errorf("config check printed a secret:\n%s%s", r.stdout, r.stderr)
	}
	// One file serves every command: a one-shot command takes its own settings from it and leaves
	// the daemon's alone.
	repo := t.TempDir()
	testenv.InitStandsRepo(t, repo)
	if err := os.MkdirAll(filepath.Join(repo, "stands", "p"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(repo, "stands", "p", "stand.yml"), []byte(testenv.PlainStand("p")), 0o644); err != nil {
		t.Fatal(err)
	}
	if r := runCLI(t, ctx, newRecorder(vars), "render", "--out", t.TempDir(), repo); r.code != exitOK || !strings.Contains(r.stdout, `"id_stand":"platform_p_dev"`) {
		t.Errorf("render with the daemon's config file (owner: platform): exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
	// --help shows the static defaults: nothing of the file or the environment.
	h := runCLI(t, ctx, newRecorder(vars), "run", "--help")
	if h.code != exitOK || strings.Contains(h.stdout, "45s") || strings.Contains(h.stdout, "platform") || !strings.Contains(h.stdout, "30s") {
		t.Errorf("help shows a configured value:\n%s", h.stdout)
	}
}

// TestConfigRefusals: what is missing or wrong fails `config check` and the daemon's start alike,
// naming the setting and where its value came from; a secret given as a value, in the file or in the
// daemon's environment, is refused without being repeated.
func TestConfigRefusals(t *testing.T) {
	ctx := context.Background()
	dir := filepath.Join("testdata", "config")
	creds := map[string]string{"STANDS_PASSPHRASE_FILE": filepath.Join(dir, "passphrase.txt"), "HCLOUD_TOKEN_FILE": filepath.Join(dir, "hcloud-token.txt")}
	for _, c := range []struct {
		name string
		vars map[string]string
		args []string
		want []string // in stderr
	}{
		{"nothing configured", nil, nil, []string{"--repo is required", "credential passphrase is required", "credential hcloud-token is required"}},
		{"a duration without a unit", map[string]string{"STANDS_CONFIG": filepath.Join(dir, "bad-duration.yml")}, nil, []string{"bad-duration.yml:2: poll-interval:"}},
		{"a typo", map[string]string{"STANDS_CONFIG": filepath.Join(dir, "unknown.yml")}, nil, []string{`unknown.yml:2: unknown setting "pol-interval"`}},
		{"a secret as a value", map[string]string{"STANDS_CONFIG": filepath.Join(dir, "secret-value.yml")}, nil, []string{`secret-value.yml:2: unknown setting "hcloud-token"; secrets go under credentials:`}},
		{"an unknown credential", nil, []string{"--config", filepath.Join(dir, "unknown-credential.yml")}, []string{`unknown-credential.yml:2: unknown credential "hetzner"`}},
		{"a list", map[string]string{"STANDS_CONFIG": filepath.Join(dir, "list.yml")}, nil, []string{"list.yml:1: workers: want a single value"}},
		{"a missing config file", map[string]string{"STANDS_CONFIG": filepath.Join(dir, "absent.yml")}, nil, []string{"read --config"}},
		{"a secret in the daemon's environment", map[string]string{"HCLOUD_TOKEN": "hc-env-SENTINEL"}, []string{"--repo", "/tmp/r"},
			[]string{"$HCLOUD_TOKEN is set: the daemon takes secrets from files only: set $HCLOUD_TOKEN_FILE"}},
		{"no workers", creds, []string{"--repo", "/tmp/r", "--workers", "0"}, []string{"--workers (from --workers): 0: want at least 1"}},
		{"a share above one", merged(creds, map[string]string{"STANDS_MAX_DESTROY_SHARE": "1.5"}), []string{"--repo", "/tmp/r"},
			[]string{"--max-destroy-share (from $STANDS_MAX_DESTROY_SHARE): 1.5: want a share from 0 to 1"}},
		{"a bad log level", creds, []string{"--repo", "/tmp/r", "--log-level", "loud"}, []string{"--log-level=loud"}},
		{"replicas on a file backend", merged(creds, map[string]string{"STANDS_REPLICAS": "true"}), []string{"--repo", "/tmp/r"},
			[]string{"--replicas (from $STANDS_REPLICAS): needs a postgres:// --backend"}},
		{"replicas with a short lease", creds, []string{"--repo", "/tmp/r", "--replicas", "--backend", "postgres://stands@127.0.0.1/stands", "--lease-ttl", "1s", "--lease-grace", "0s"},
			[]string{"--lease-ttl (from --lease-ttl): want 2s or more", "--lease-grace (from --lease-grace): want 1s or more"}},
		{"a database password in the backend URL", creds, []string{"--repo", "/tmp/r", "--backend", "postgres://stands:db-SENTINEL@127.0.0.1/stands"},
			[]string{"--backend (from --backend): holds a password"}},
	} {
		t.Run(c.name, func(t *testing.T) {
			vars := merged(map[string]string{"STANDS_PULUMI_BIN": fakePulumi(t), "STANDS_STATE_DIR": t.TempDir()}, c.vars)
			for _, cmd := range [][]string{{"config", "check"}, {"run"}} {
				r := runCLI(t, ctx, newRecorder(vars), append(cmd, c.args...)...)
				if r.code != exitError {
					t.Errorf("%s: exit %d, want 1\n%s", cmd[0], r.code, r.stderr)
				}
				for _, w := range c.want {
					if !strings.Contains(r.stderr, w) {
						t.Errorf("%s: stderr does not say %q:\n%s", cmd[0], w, r.stderr)
					}
				}
				if strings.Contains(r.stdout+r.stderr, "SENTINEL") {
					t.Errorf("%s repeated a secret:\n%s%s", cmd[0], r.stdout, r.stderr)
				}
			}
		})
	}
}

// TestOneShotTakesSecretsFromTheEnvironment: the one-shot commands keep the Stands Engine's way, a
// secret's value in the environment; the daemon refuses it (TestConfigRefusals).
func TestOneShotTakesSecretsFromTheEnvironment(t *testing.T) {
	vars := map[string]string{"STANDS_PASSPHRASE": "pass-phrase", "HCLOUD_TOKEN": "hc-token", "STANDS_PULUMI_BIN": fakePulumi(t), "STANDS_STATE_DIR": t.TempDir()}
	r := runCLI(t, context.Background(), newRecorder(vars), "reconcile", "--once", "--repo", t.TempDir())
	if strings.Contains(r.stderr, "files only") || strings.Contains(r.stderr, "is required") {
		t.Errorf("reconcile --once refused the environment's secrets:\n%s", r.stderr)
	}
}

// merged is a copy of a with b's entries over it.
func merged(a, b map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range []map[string]string{a, b} {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// TestReplicasNotForOnce: one cycle cannot keep leases; `reconcile --once --replicas` says to use run.
func TestReplicasNotForOnce(t *testing.T) {
	r := runCLI(t, context.Background(), newRecorder(nil), "reconcile", "--once", "--replicas", "--repo", "/tmp/r")
	if r.code != exitUsage || !strings.Contains(r.stderr, "--replicas is for `stands-reconciler run`") {
		t.Errorf("exit %d: %s", r.code, r.stderr)
	}
}
