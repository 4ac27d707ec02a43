// Package testenv starts the real servers integration tests talk to — Gitea and the Pulumi CLI built by
// `make tools` — on 127.0.0.1 with ephemeral ports and temporary folders, waits until they answer, and
// stops them when the test ends.
//
// Under CI=true a missing binary fails the test with the command that builds it; elsewhere the test is
// skipped, so `go test ./...` stays usable before `make tools` has run.
package testenv

import (
	"context"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/localserver"
)

// RepoRoot is the repository's top folder (where go.mod and bin/ are).
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// InCI reports whether tests run in CI, where nothing may be skipped for want of a tool.
func InCI() bool {
	ci, _ := strconv.ParseBool(os.Getenv("CI"))
	return ci
}

// Missing stops a test that cannot find what it needs: a failure in CI, a skip elsewhere.
func Missing(t testing.TB, format string, args ...any) {
	t.Helper()
	if InCI() {
		t.Fatalf(format, args...)
	}
	t.Skipf(format, args...)
}

// NeedsServer skips a test under -short (`make check`, the fast loop): it runs a real server or
// tool (Gitea, Vault, PostgreSQL, the Pulumi CLI, sshd, a registry), which `make test` and CI run.
func NeedsServer(t testing.TB, what string) {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs %s: make test runs it, make check (-short) does not", what)
	}
}

// Binary finds a tool built by `make tools`: $STANDS_<NAME>_BIN, then bin/<name> in the repository,
// then PATH. Under -short the test is skipped (NeedsServer).
func Binary(t testing.TB, name, envVar string) string {
	t.Helper()
	NeedsServer(t, name)
	if p := os.Getenv(envVar); p != "" {
		if _, err := os.Stat(p); err == nil {
			return p
		}
		Missing(t, "%s=%s does not exist; run `make tools`", envVar, p)
	}
	p := filepath.Join(RepoRoot(), "bin", name)
	if _, err := os.Stat(p); err == nil {
		return p
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	Missing(t, "%s not found in bin/ or PATH: run `make tools` (it builds bin/%s from tools/%s)", name, name, name)
	return ""
}

// FreePort returns a TCP port on 127.0.0.1 that was free a moment ago, below the ephemeral range.
func FreePort(t testing.TB) int {
	t.Helper()
	port, err := localserver.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	return port
}

// Logger is a text logger into the test's log, for servers a test runs in-process.
func Logger(t testing.TB) *slog.Logger { return slog.New(slog.NewTextHandler(testWriter{t}, nil)) }

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

// WriteFile writes content to dir/name (mode 0600) and returns its path.
func WriteFile(t testing.TB, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// Context is the test's context, ended margin before the test binary's -timeout: a long scenario
// then fails with the step it was on and has margin left to stop its servers and VMs, instead of a
// fixed deadline of its own that a busy machine outruns while the binary still had time.
func Context(t testing.TB, margin time.Duration) context.Context {
	type deadliner interface{ Deadline() (time.Time, bool) }
	ctx := t.Context()
	d, ok := t.(deadliner)
	if !ok {
		return ctx
	}
	end, ok := d.Deadline()
	if !ok {
		return ctx
	}
	ctx, cancel := context.WithDeadline(ctx, end.Add(-margin))
	t.Cleanup(cancel)
	return ctx
}
