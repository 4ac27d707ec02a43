package engine

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/blang/semver"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
	"github.com/pulumi/pulumi/sdk/v3/go/auto"
)

// cli runs the Pulumi CLI as the Automation API's own command does, but with an explicit
// environment: the Automation API starts every CLI with os.Environ() and plugins inherit the
// CLI's, so the daemon's credentials (the Vault token, the Git token, the webhook secret,
// SECRET_*) would reach every Pulumi process and the provider. Only what the CLI, the backend and
// the provider need goes in (childEnv), plus what the engine sets for the operation.
type cli struct {
	bin     string
	version semver.Version
	env     func() []string
	// hold, when set, is called with each started CLI's context, arguments and pid; the function it
	// returns is called once the CLI has ended (lock holder records, holder.go).
	hold func(ctx context.Context, args []string, pid int) func()
	log  *slog.Logger
	// metrics counts the CLIs started and fenced (nil: not counted).
	metrics *metrics
	// keptLogs is where the Pulumi logs of a CLI that failed are kept (keepLogs).
	keptLogs string
}

var _ auto.PulumiCommand = cli{}

func (c cli) Version() semver.Version { return c.version }

func (c cli) Run(ctx context.Context, workdir string, stdin io.Reader, stdout, stderr []io.Writer, extra []string, args ...string) (string, string, int, error) {
	if !slices.Contains(args, "--non-interactive") {
		args = append([]string{"--non-interactive"}, args...) // fail rather than prompt
	}
	cmd := exec.CommandContext(ctx, c.bin, args...)
	cmd.Dir, cmd.Stdin = workdir, stdin
	cmd.Env = append(append(c.env(), extra...), "PULUMI_AUTOMATION_API=true")
	var out, errOut bytes.Buffer
	cmd.Stdout = io.MultiWriter(append(stdout, &out)...)
	cmd.Stderr = io.MultiWriter(append(stderr, &errOut)...)
	// Interrupted first, so the CLI cancels its providers, writes its checkpoint and lets its lock
	// go; killed if it has not ended CancelGrace later. Its own process group keeps a terminal's
	// Ctrl-C, meant for the daemon's drain, from interrupting it at once, and lets the kill take the
	// plugins it started with it.
	// Pdeathsig: a CLI outliving its daemon (kill -9) would go on applying outside any lease. The
	// kernel sends it when the forking thread ends, and Go ends a thread only under a goroutine that
	// locked it: no goroutine of the daemon calls runtime.LockOSThread.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error {
		if err := cmd.Process.Signal(os.Interrupt); err != nil {
			return cmd.Process.Kill()
		}
		return nil
	}
	cmd.WaitDelay = CancelGrace
	c.metrics.started(args)
	running.Add(1)
	defer running.Add(-1)
	err := cmd.Start()
	if err == nil {
		release := func() {}
		if c.hold != nil {
			release = c.hold(ctx, args, cmd.Process.Pid)
		}
		done := make(chan struct{})
		fenced(ctx, cmd.Process.Pid, done, c.log, c.metrics)
		err = cmd.Wait()
		close(done)
		if ctx.Err() != nil {
			// Whatever the CLI left of its group (a plugin of a CLI that had to be killed).
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
		release()
		if err != nil && workdir != "" && c.keptLogs != "" {
			keepLogs(workdir, c.keptLogs)
		}
	}
	code := -2 // the Automation API's "unknown"
	var exit *exec.ExitError
	switch {
	case err == nil:
		code = 0
	case errors.As(err, &exit):
		code = exit.ExitCode()
	}
	return out.String(), errOut.String(), code, err
}

// running counts the Pulumi CLIs this process has started and not yet seen end.
var running atomic.Int32

// CLIsRunning is how many Pulumi CLIs this process runs now, whatever engine started them: a
// command stopped while one runs must wait for it to write its checkpoint and let its lock go.
func CLIsRunning() int { return int(running.Load()) }

// CancelGrace is how long an interrupted Pulumi CLI has to cancel its providers' calls, write its
// checkpoint and let its lock go before it is killed. The daemon's stop takes up to --drain-timeout
// plus this: deploy/stands-reconciler.service's TimeoutStopSec is larger than both.
const CancelGrace = 30 * time.Second

// metrics are the engine's, for /metrics, declared and registered on Config.Metrics here: a new one
// is one more field and its line in newMetrics. A nil *metrics counts nothing (a CLI made by a test).
type metrics struct {
	cliInvocations *prometheus.CounterVec // by command
	fencedKills    prometheus.Counter     // CLIs killed because their stand's lease was about to expire (fence.go)
}

func newMetrics(reg prometheus.Registerer) *metrics {
	f := promauto.With(reg)
	return &metrics{
		cliInvocations: f.NewCounterVec(prometheus.CounterOpts{Name: "stands_pulumi_cli_invocations_total",
			Help: "Pulumi CLI processes started, by command (up, preview, refresh, destroy, stack, config, …)."}, []string{"command"}),
		fencedKills: f.NewCounter(prometheus.CounterOpts{Name: "stands_pulumi_cli_fenced_kills_total",
			Help: "Pulumi CLI processes killed, with their process group, because their stand's lease was about to expire."}),
	}
}

func (m *metrics) started(args []string) {
	if m != nil {
		m.cliInvocations.WithLabelValues(commandOf(args)).Inc()
	}
}

func (m *metrics) fenced() {
	if m != nil {
		m.fencedKills.Inc()
	}
}

// commandOf is a CLI command line's first word that is no flag.
func commandOf(args []string) string {
	for _, a := range args {
		if !strings.HasPrefix(a, "-") {
			return a
		}
	}
	return "none"
}

// childEnv is the environment every Pulumi process starts from: the system's basics, proxies and
// certificates, the S3 backend's AWS_* settings, and the PULUMI_* settings of the operator, but
// none of the credentials only the daemon needs. The engine adds its own (the backend URL, the
// passphrase, the provider's token) for each operation.
func childEnv(bin string) []string {
	keep := func(k string) bool {
		switch k {
		case "HOME", "USER", "LOGNAME", "LANG", "LC_ALL", "TZ", "TMPDIR", "SSL_CERT_FILE", "SSL_CERT_DIR",
			"HTTP_PROXY", "HTTPS_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "no_proxy":
			return true
		case "PULUMI_ACCESS_TOKEN", "PULUMI_CONFIG_PASSPHRASE", "PULUMI_CONFIG_PASSPHRASE_FILE":
			return false // the engine sets its own passphrase; a Pulumi Cloud token is never needed
		}
		return strings.HasPrefix(k, "PULUMI_") || strings.HasPrefix(k, "AWS_")
	}
	var env []string
	path := filepath.Dir(bin) // plugins and the language host are found next to the CLI first
	for _, kv := range os.Environ() {
		k, v, _ := strings.Cut(kv, "=")
		switch {
		case k == "PATH":
			path += string(os.PathListSeparator) + v
		case keep(k):
			env = append(env, kv)
		}
	}
	return append(env, "PATH="+path)
}
