package engine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/stands"
)

// execRecorder wraps a program in a script that records, at exec, its command line and the
// environment it was given (one pair of files per process, short-lived ones included), then
// becomes it. argv0 is the name the program is started under.
type execRecorder struct{ dir string }

func (r execRecorder) wrap(t *testing.T, path, real, argv0 string) {
	t.Helper()
	script := fmt.Sprintf("#!/bin/bash\nprintf '%%s\\n' \"$@\" > %[1]q/$$.%[2]s.argv\ncat /proc/$$/environ > %[1]q/$$.%[2]s.env\nexec -a %[3]q %[4]q \"$@\"\n",
		r.dir, filepath.Base(argv0), argv0, real)
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
}

// scan returns every recorded process (by name) and the places a needle was found.
func (r execRecorder) scan(t *testing.T, inArgv, inEnv map[string]string) (counts map[string]int, found []string) {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(r.dir, "*.*"))
	if err != nil {
		t.Fatal(err)
	}
	counts = map[string]int{}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		base := filepath.Base(f)
		needles := inEnv
		if strings.HasSuffix(base, ".argv") {
			needles = inArgv
			counts[strings.TrimSuffix(base[strings.Index(base, ".")+1:], ".argv")]++
		}
		for name, v := range needles {
			if strings.Contains(string(data), v) {
				found = append(found, fmt.Sprintf("%s in %s", name, base))
			}
		}
	}
	return counts, found
}

// TestNoCredentialInChildProcesses records every Pulumi CLI and provider process of an apply, a
// preview, a refresh and a destroy at exec: no command line and no environment holds the Hetzner
// token, the passphrase (both reach the children as files in the operation's workspace) or the
// daemon's own credentials, which the engine's process has. The control: a process given a sentinel
// on purpose is caught by the same scan.
func TestNoCredentialInChildProcesses(t *testing.T) {
	daemonOnly := map[string]string{"VAULT_TOKEN": "vault-token-SENTINEL", "STANDS_GIT_TOKEN": "git-token-SENTINEL",
		"STANDS_WEBHOOK_SECRET": "webhook-SENTINEL", "SECRET_KV_PASSWORD": "kv-env-SENTINEL", "VAULT_SECRET_ID": "secret-id-SENTINEL"}
	for k, v := range daemonOnly {
		t.Setenv(k, v)
	}
	rec := execRecorder{dir: t.TempDir()}
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	var pulumiWrapper string
	f := newFixtureWith(t, func(c *Config) {
		c.SkipNodes = true
		pulumiWrapper = filepath.Join(t.TempDir(), "bin", "pulumi")
		rec.wrap(t, pulumiWrapper, c.PulumiBin, "pulumi")
		c.PulumiBin = pulumiWrapper
		c.ProviderBin = filepath.Join(t.TempDir(), "provider")
		rec.wrap(t, c.ProviderBin, exe, provider.BinaryName)
	})
	ctx := context.Background()
	stand := load(t, examples(t, ""), "stands/single/stand.yml")
	if _, err := f.eng.Apply(ctx, stand, false); err != nil {
		t.Fatalf("apply: %v\n%s", err, f.logs)
	}
	if _, err := f.eng.Preview(ctx, stand); err != nil {
		t.Fatalf("preview: %v", err)
	}
	if _, err := f.eng.Refresh(ctx, stand); err != nil {
		t.Fatalf("refresh: %v", err)
	}
	if _, err := f.eng.Destroy(ctx, stands.StackRef{Project: stand.Stand.Project, Env: stand.Stand.Env}); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	credentials := map[string]string{"the Hetzner token": hcloudToken, "the passphrase": f.eng.cfg.Passphrase}
	inEnv := map[string]string{}
	for k, v := range daemonOnly {
		inEnv[k] = v
	}
	for k, v := range credentials {
		inEnv[k] = v
	}
	counts, found := rec.scan(t, credentials, inEnv)
	for _, where := range found {
		t.Errorf("found %s", where)
	}
	if counts["pulumi"] < 5 || counts[provider.BinaryName] < 2 {
		t.Errorf("processes recorded: %v; the wrappers were not used", counts)
	}
	t.Logf("processes recorded: %v", counts)

	// Control: the scan sees a sentinel a process is given on purpose, and a token in an argv.
	control := execRecorder{dir: t.TempDir()}
	wrapper := filepath.Join(t.TempDir(), "echo")
	control.wrap(t, wrapper, "/bin/echo", "echo")
	cmd := exec.Command(wrapper, hcloudToken)
	cmd.Env = []string{"VAULT_TOKEN=" + daemonOnly["VAULT_TOKEN"]}
	if err := cmd.Run(); err != nil {
		t.Fatal(err)
	}
	if _, found := control.scan(t, credentials, inEnv); len(found) != 2 {
		t.Errorf("the control found %v, want the token in argv and the Vault token in the environment", found)
	}
}
