package main

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/safeguard"
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

// privateConfig is a copy of testdata/config whose credential files only their owner reads, as
// config check wants them (Git keeps them 0644).
func privateConfig(t *testing.T) string {
	t.Helper()
	src, dir := filepath.Join("testdata", "config"), t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, err := os.ReadFile(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, e.Name()), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	return dir
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
	dir := privateConfig(t)
	file := filepath.Join(dir, "daemon.yml")
	// No token for the API: the review gate is off, by the operator's word (TestConfigRefusals).
	vars := map[string]string{"STANDS_CONFIG": file, "STANDS_WORKERS": "5", "STANDS_PULUMI_BIN": fakePulumi(t), "STANDS_STATE_DIR": t.TempDir(), "STANDS_REQUIRE_REVIEW": "false"}
	r := runCLI(t, ctx, newRecorder(vars), "config", "check", "--drift-interval", "1h", "--unit", filepath.Join(testenv.RepoRoot(), "deploy", "stands-reconciler.service"))
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
		if v, o := configRow(r.stdout, "credential "+name); v != "***" || !strings.Contains(o, filepath.Join(dir, file)) {
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
	dir := privateConfig(t)
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
		{"metrics on the webhook's address", creds, []string{"--repo", "/tmp/r", "--listen", "127.0.0.1:9", "--metrics-listen", "127.0.0.1:9"},
			[]string{"--metrics-listen (from --metrics-listen): 127.0.0.1:9 is --listen's address"}},
		{"the review gate without Gitea's API", creds, []string{"--repo", "/tmp/r"},
			[]string{"--require-review (from default): the review gate cannot run: no Gitea API to read reviews in: a local or SSH repository without --gitea-url; " +
				"give the daemon Gitea's API (an https repository or --gitea-url, and STANDS_GIT_TOKEN), or run without the gate: --require-review=false"}},
		{"the review gate without a token", creds, []string{"--repo", "https://gitea.example.test/o/r.git", "--require-review"},
			[]string{"--require-review (from --require-review): the review gate cannot run: no STANDS_GIT_TOKEN for the Gitea API"}},
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

// TestConfigCheckRefusesWhatFailsLater: what the daemon would start with and fail on hours later,
// or run with unsafely, fails config check naming the setting, where it is set and the fix: an
// empty or unreadable credential file (the start refuses those too), one other users can read,
// and a drain the unit's TimeoutStopSec cuts short. Each case's control, the same setup put
// right, says ok.
func TestConfigCheckRefusesWhatFailsLater(t *testing.T) {
	ctx := context.Background()
	units := filepath.Join(testenv.RepoRoot(), "daemon", "testdata", "unit")
	for _, c := range []struct {
		name       string
		file, mode string // a credentials.git-token file's content and mode in the config folder
		args       []string
		want       string
		startToo   bool // run refuses it as well
		fixed      func(dir string) []string
	}{
		{name: "an empty credential file", file: "\n", mode: "0600", startToo: true,
			want: "credential git-token from {dir}/daemon.yml:11 ({dir}/git-token) is empty, and these settings use it: write the git-token into it"},
		{name: "an unreadable credential file", file: "<dir>", mode: "0600", startToo: true,
			want: "credential git-token from {dir}/daemon.yml:11 ({dir}/git-token): read STANDS_GIT_TOKEN_FILE: read {dir}/git-token: is a directory: make it readable by the daemon's user"},
		{name: "a credential file its group reads", file: "gt-SENTINEL", mode: "0640",
			want: "credential git-token from {dir}/daemon.yml:11 ({dir}/git-token) is readable by its group (mode 0640): chmod 600 {dir}/git-token"},
		{name: "a credential file every user reads", file: "gt-SENTINEL", mode: "0644",
			want: "credential git-token from {dir}/daemon.yml:11 ({dir}/git-token) is readable by its group and every user (mode 0644)"},
		// The unit's drop-in beside it raises its 5min to 20min 30s.
		{name: "a drain the unit cuts short", file: "gt-SENTINEL", mode: "0600", args: []string{"--unit", filepath.Join(units, "short.service"), "--drain-timeout", "20m"},
			want: "--drain-timeout (from --drain-timeout): 20m0s, but TimeoutStopSec=20m30s (" + filepath.Join(units, "short.service.d", "10-longer.conf") + ":3) has systemd kill the daemon first, " +
				"Pulumi mid-apply with it: a stop takes the drain plus 1m30s (Pulumi's cancel, the last status commit); lower --drain-timeout to 19m0s or less, or raise TimeoutStopSec to 21m30s or more"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := privateConfig(t)
			yml := filepath.Join(dir, "daemon.yml")
			data, err := os.ReadFile(yml)
			if err != nil {
				t.Fatal(err)
			}
			// The unit gives every credential a file, empty where unused: a file backend's
			// database password stays empty, and each control passes with it.
			if err := os.WriteFile(yml, append(data, "  git-token: git-token\n  db-password: db-password\n"...), 0o600); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, "db-password"), nil, 0o600); err != nil {
				t.Fatal(err)
			}
			token := filepath.Join(dir, "git-token")
			write := func(content string, mode os.FileMode) {
				t.Helper()
				os.RemoveAll(token)
				if content == "<dir>" {
					if err := os.Mkdir(token, 0o700); err != nil {
						t.Fatal(err)
					}
					return
				}
				if err := os.WriteFile(token, []byte(content), 0o600); err != nil {
					t.Fatal(err)
				}
				if err := os.Chmod(token, mode); err != nil {
					t.Fatal(err)
				}
			}
			var mode os.FileMode
			if _, err := fmt.Sscanf(c.mode, "%o", &mode); err != nil {
				t.Fatal(err)
			}
			write(c.file, mode)
			vars := map[string]string{"STANDS_CONFIG": yml, "STANDS_PULUMI_BIN": fakePulumi(t), "STANDS_STATE_DIR": t.TempDir()}
			want := strings.ReplaceAll(c.want, "{dir}", dir)
			r := runCLI(t, ctx, newRecorder(vars), append([]string{"config", "check"}, c.args...)...)
			if r.code != exitError || !strings.Contains(r.stderr, "config: "+want) {
				t.Errorf("config check: exit %d, want 1 saying %q:\n%s", r.code, want, r.stderr)
			}
			if strings.Contains(r.stdout+r.stderr, "SENTINEL") {
				t.Errorf("config check repeated a secret:\n%s%s", r.stdout, r.stderr)
			}
			if c.startToo {
				if r := runCLI(t, ctx, newRecorder(vars), "run"); r.code != exitError || !strings.Contains(r.stderr, "run: "+want) {
					t.Errorf("run: exit %d, want 1 saying %q:\n%s", r.code, want, r.stderr)
				}
			}
			// The control: put right, config check is content.
			write("gt-SENTINEL", 0o600)
			args := c.args
			if len(args) > 0 {
				args = []string{"--unit", filepath.Join(units, "short.service"), "--drain-timeout", "19m"}
			}
			if r := runCLI(t, ctx, newRecorder(vars), append([]string{"config", "check"}, args...)...); r.code != exitOK || !strings.Contains(r.stderr, "config: ok") {
				t.Errorf("the control, put right: exit %d\n%s", r.code, r.stderr)
			}
		})
	}
}

// TestOneShotTakesSecretsFromTheEnvironment: the one-shot commands keep the Stands Engine's way, a
// secret's value in the environment; the daemon refuses it (TestConfigRefusals).
func TestOneShotTakesSecretsFromTheEnvironment(t *testing.T) {
	vars := map[string]string{"STANDS_PASSPHRASE": "pass-phrase", "HCLOUD_TOKEN": "hc-token", "STANDS_PULUMI_BIN": fakePulumi(t), "STANDS_STATE_DIR": t.TempDir()}
	r := runCLI(t, context.Background(), newRecorder(vars), "reconcile", "--once", "--repo", t.TempDir(), "--require-review=false")
	if strings.Contains(r.stderr, "files only") || strings.Contains(r.stderr, "is required") {
		t.Errorf("reconcile --once refused the environment's secrets:\n%s", r.stderr)
	}
}

// merged is a copy of the maps, a later one's entries over an earlier one's.
func merged(ms ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range ms {
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

// TestConfigCheckNamesMissingSafeguards: `config check` against a real Gitea repository whose main
// has no protection warns of each of the six safeguards by name, and still says ok (the daemon runs
// without them, and says so). Without its review gate it warns; without a token for the API it
// refuses, unless the gate is off by the operator's word.
func TestConfigCheckNamesMissingSafeguards(t *testing.T) {
	g := testenv.StartGitea(t)
	repo := g.CreateRepo(t, "unprotected")
	repo.Commit("README.md", "stands\n", "first")
	repo.WaitBranch(g.API(t), "main")
	dir := privateConfig(t)
	token := filepath.Join(t.TempDir(), "git-token")
	if err := os.WriteFile(token, []byte(g.Token), 0o600); err != nil {
		t.Fatal(err)
	}
	vars := map[string]string{"STANDS_PASSPHRASE_FILE": filepath.Join(dir, "passphrase.txt"), "HCLOUD_TOKEN_FILE": filepath.Join(dir, "hcloud-token.txt"),
		"STANDS_PULUMI_BIN": fakePulumi(t), "STANDS_STATE_DIR": t.TempDir(), "STANDS_GIT_TOKEN_FILE": token, "STANDS_GIT_USER": g.User}
	r := runCLI(t, context.Background(), newRecorder(vars), "config", "check", "--repo", repo.Info.CloneURL)
	if r.code != exitOK || !strings.Contains(r.stderr, "config: ok") {
		t.Fatalf("config check: exit %d\n%s", r.code, r.stderr)
	}
	for _, name := range safeguard.Names {
		if !strings.Contains(r.stderr, "config: warning: the protection of main lacks "+name+": no protection rule applies to main") {
			t.Errorf("config check does not name %s:\n%s", name, r.stderr)
		}
	}
	// A daemon without its review gate says so: switched off, or with no token for the API.
	const ungated = "config: warning: no review gate: every change landing on main is applied, reviewed or not"
	if strings.Contains(r.stderr, ungated) {
		t.Errorf("config check with the Gitea API and a token warns of no review gate:\n%s", r.stderr)
	}
	for why, args := range map[string][]string{"--require-review=false": {"--require-review=false"}, "no STANDS_GIT_TOKEN for the Gitea API": nil} {
		v := maps.Clone(vars)
		if args == nil {
			delete(v, "STANDS_GIT_TOKEN_FILE")
		}
		r := runCLI(t, context.Background(), newRecorder(v), append([]string{"config", "check", "--repo", repo.Info.CloneURL}, args...)...)
		if !strings.Contains(r.stderr, ungated+" ("+why+")") {
			t.Errorf("config check with %s: exit %d, no warning of it:\n%s", why, r.code, r.stderr)
		}
		// Off by the operator's word it runs; off for want of a token it does not start.
		if refused := strings.Contains(r.stderr, "the review gate cannot run: "+why); refused != (args == nil) || (r.code == exitOK) == refused {
			t.Errorf("config check with %s: exit %d, refused %v:\n%s", why, r.code, refused, r.stderr)
		}
	}
}

// TestRenamedSettingsStillWork: a setting renamed keeps its old flag, variable and config key for a
// release: each sets the new setting, `config check` names the old name as the origin, and stderr
// says it is deprecated and what to use. The new name wins where both are given, saying nothing.
func TestRenamedSettingsStillWork(t *testing.T) {
	ctx := context.Background()
	dir := privateConfig(t)
	old := filepath.Join(dir, "old.yml")
	data, err := os.ReadFile(filepath.Join(dir, "daemon.yml"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(old, append(data, "hcloud-endpoint: http://127.0.0.1:1/file\n"...), 0o600); err != nil {
		t.Fatal(err)
	}
	base := map[string]string{"STANDS_PULUMI_BIN": fakePulumi(t), "STANDS_STATE_DIR": t.TempDir(), "STANDS_CONFIG": filepath.Join(dir, "daemon.yml"), "STANDS_REQUIRE_REVIEW": "false"}
	with := func(kv ...string) map[string]string {
		vars := maps.Clone(base)
		for i := 0; i < len(kv); i += 2 {
			vars[kv[i]] = kv[i+1]
		}
		return vars
	}
	cases := []struct {
		name             string
		vars             map[string]string
		args             []string
		value, origin    string
		deprecated, want string // stderr holds want ("" when nothing is deprecated)
	}{
		{"old variable", with("HCLOUD_ENDPOINT", "http://127.0.0.1:1/var"), nil, "http://127.0.0.1:1/var", "$HCLOUD_ENDPOINT",
			"$HCLOUD_ENDPOINT is deprecated", "use $STANDS_CLOUD_ENDPOINT"},
		{"old flag", base, []string{"--hcloud-endpoint", "http://127.0.0.1:1/flag"}, "http://127.0.0.1:1/flag", "--hcloud-endpoint",
			"--hcloud-endpoint is deprecated", "use --cloud-endpoint"},
		{"old config key", with("STANDS_CONFIG", old), nil, "http://127.0.0.1:1/file", old + ":11",
			old + ":11: hcloud-endpoint is deprecated", "use cloud-endpoint"},
		{"the new name wins", with("HCLOUD_ENDPOINT", "http://127.0.0.1:1/old", "STANDS_CLOUD_ENDPOINT", "http://127.0.0.1:1/new"), nil,
			"http://127.0.0.1:1/new", "$STANDS_CLOUD_ENDPOINT", "", ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := runCLI(t, ctx, newRecorder(c.vars), append([]string{"config", "check"}, c.args...)...)
			if r.code != exitOK {
				t.Fatalf("config check: exit %d\n%s\n%s", r.code, r.stdout, r.stderr)
			}
			if v, o := configRow(r.stdout, "cloud-endpoint"); v != c.value || o != c.origin {
				t.Errorf("cloud-endpoint: %q from %q, want %q from %q", v, o, c.value, c.origin)
			}
			switch {
			case c.deprecated == "" && strings.Contains(r.stderr, "deprecated"):
				t.Errorf("a deprecation said where none was used:\n%s", r.stderr)
			case c.deprecated != "" && (!strings.Contains(r.stderr, c.deprecated) || !strings.Contains(r.stderr, c.want)):
				t.Errorf("stderr does not say %q and %q:\n%s", c.deprecated, c.want, r.stderr)
			}
		})
	}
	// A cloud this build does not know is refused by name.
	r := runCLI(t, ctx, newRecorder(with("STANDS_CLOUD", "elsewhere")), "config", "check")
	if r.code == exitOK || !strings.Contains(r.stdout+r.stderr, `--cloud (from $STANDS_CLOUD): "elsewhere": this build knows hetzner`) {
		t.Errorf("an unknown cloud: exit %d\n%s%s", r.code, r.stdout, r.stderr)
	}
}
