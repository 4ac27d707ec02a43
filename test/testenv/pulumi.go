package testenv

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Pulumi is a Pulumi CLI workspace for one test: a file:// backend and PULUMI_HOME in temporary
// folders, a fixed passphrase, no plugin downloads and no update checks.
type Pulumi struct {
	Bin        string // the pulumi binary
	BackendURL string // file://...
	Home       string // PULUMI_HOME
	Passphrase string
}

// NewPulumi prepares a workspace. The CLI is found as by Binary (STANDS_PULUMI_BIN, bin/pulumi, PATH).
func NewPulumi(t testing.TB) *Pulumi {
	t.Helper()
	bin := Binary(t, "pulumi", "STANDS_PULUMI_BIN")
	dir := t.TempDir()
	p := &Pulumi{
		Bin:        bin,
		BackendURL: "file://" + filepath.Join(dir, "state"),
		Home:       filepath.Join(dir, "home"),
		Passphrase: "stands-test-passphrase",
	}
	for _, d := range []string{filepath.Join(dir, "state"), p.Home} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// Env is the environment every Pulumi invocation of the test gets, the Automation API's included.
func (p *Pulumi) Env() map[string]string {
	return map[string]string{
		"PULUMI_BACKEND_URL":                          p.BackendURL,
		"PULUMI_HOME":                                 p.Home,
		"PULUMI_CONFIG_PASSPHRASE":                    p.Passphrase,
		"PULUMI_DISABLE_AUTOMATIC_PLUGIN_ACQUISITION": "true",
		"PULUMI_SKIP_UPDATE_CHECK":                    "true",
		"PULUMI_AUTOMATION_API_SKIP_VERSION_CHECK":    "false",
		"PATH": filepath.Dir(p.Bin) + string(os.PathListSeparator) + os.Getenv("PATH"),
	}
}

// Run runs the CLI in dir with the workspace's environment and returns its stdout; a failure fails
// the test with stderr.
func (p *Pulumi) Run(t testing.TB, dir string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, p.Bin, append([]string{"--non-interactive"}, args...)...)
	cmd.Dir = dir
	cmd.Env = os.Environ()
	for k, v := range p.Env() {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("pulumi %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	return stdout.String()
}
