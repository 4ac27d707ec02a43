package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// localDaemon is `run` in a process of its own on a repository on disk, in local mode (no Vault:
// its stands need no secret), servers only, against hcloudsim and the real Pulumi CLI behind a
// counting wrapper. Secrets reach it as files, as under systemd.
type localDaemon struct {
	t       *testing.T
	lr      *localStandsRepo
	h       *testenv.Hetzner
	pl      *testenv.Pulumi
	state   string // --state-dir
	tmp     string // its TMPDIR: nothing may pile up there
	counts  string // one line per Pulumi CLI process
	logFile string
	listen  string
	socket  string
	env     []string
	args    []string
	cmd     *exec.Cmd
	exited  chan error
}

// newLocalDaemon prepares the daemon (not started) with the given extra flags.
func newLocalDaemon(t *testing.T, lr *localStandsRepo, h *testenv.Hetzner, extra ...string) *localDaemon {
	t.Helper()
	pl := testenv.NewPulumi(t)
	dir := t.TempDir()
	d := &localDaemon{t: t, lr: lr, h: h, pl: pl, state: filepath.Join(dir, "state"), tmp: filepath.Join(dir, "tmp"),
		listen: fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))}
	// A socket path must stay under 108 bytes: the test's temporary folders can be long.
	sockDir, err := os.MkdirTemp("", "sr-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(sockDir) })
	d.socket = filepath.Join(sockDir, "control.sock")
	if err := os.MkdirAll(d.tmp, 0o700); err != nil {
		t.Fatal(err)
	}
	wrapper, counts := testenv.CountingPulumi(t, pl.Bin)
	d.counts = counts
	secret := func(name, value string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(value+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	d.env = []string{runMainEnv + "=1", "PATH=" + filepath.Dir(wrapper) + ":" + os.Getenv("PATH"), "HOME=" + dir, "TMPDIR=" + d.tmp,
		"STANDS_STATE_DIR=" + d.state, "STANDS_CLOUD_ENDPOINT=" + h.Endpoint, "STANDS_NODES=skip", "LOG_LEVEL=debug",
		"HCLOUD_TOKEN_FILE=" + secret("hcloud-token", h.Token), "STANDS_PASSPHRASE_FILE=" + secret("passphrase", pl.Passphrase),
		"STANDS_CONTROL_SOCKET=" + d.socket}
	d.args = append([]string{"run", "--repo", lr.dir, "--listen", d.listen, "--drift-interval", "0", "--require-review=false"}, extra...)
	return d
}

// start runs the daemon; extra flags come after the ones newLocalDaemon was given.
func (d *localDaemon) start(extra ...string) {
	t := d.t
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe, append(append([]string{}, d.args...), extra...)...)
	cmd.Env = d.env
	d.logFile = filepath.Join(t.TempDir(), "daemon.log")
	d.cmd, d.exited = cmd, startLogged(t, cmd, d.logFile)
	t.Cleanup(func() {
		if d.cmd == cmd {
			testenv.KillTree(cmd.Process.Pid)
			<-d.exited
		}
		if t.Failed() {
			data, _ := os.ReadFile(d.logFile)
			t.Logf("daemon log (last 8000 bytes):\n%s", data[max(0, len(data)-8000):])
		}
	})
}

// stop signals the daemon and waits for it: its exit code and how long it took.
func (d *localDaemon) stop(sig syscall.Signal, within time.Duration) (int, time.Duration) {
	t := d.t
	t.Helper()
	start := time.Now()
	if err := d.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-d.exited:
		d.cmd = nil
		var exit *exec.ExitError
		switch {
		case err == nil:
			return 0, time.Since(start)
		case errors.As(err, &exit):
			return exit.ExitCode(), time.Since(start)
		}
		t.Fatalf("daemon: %v", err)
	case <-time.After(within):
		t.Fatalf("the daemon did not stop within %s of %v", within, sig)
	}
	return -1, 0
}

// ctl runs `stands-reconciler ctl ARGS` against the daemon, in this process.
func (d *localDaemon) ctl(args ...string) result {
	d.t.Helper()
	return runCLI(d.t, context.Background(), newRecorder(map[string]string{"STANDS_CONTROL_SOCKET": d.socket, "SUDO_USER": "oncall-test"}), append([]string{"ctl"}, args...)...)
}

func (d *localDaemon) waitFor(what string, timeout time.Duration, cond func() bool) {
	d.t.Helper()
	waitWhileRunning(d.t, d.exited, what, timeout, 100*time.Millisecond, cond)
}

// statusFile reads a file of the stands-status branch ("" when absent).
func (d *localDaemon) statusFile(name string) string {
	return snapshotFile(gitsource.New(d.lr.dir, "stands-status"), name)
}

// waitStatus waits until the stand's committed status satisfies cond, and returns it.
func (d *localDaemon) waitStatus(id string, timeout time.Duration, cond func(reconcile.Status) bool) reconcile.Status {
	d.t.Helper()
	var s reconcile.Status
	d.waitFor("the status of "+id, timeout, func() bool {
		data := d.statusFile(stands.StatusPath(id))
		s = reconcile.Status{}
		return data != "" && json.Unmarshal([]byte(data), &s) == nil && cond(s)
	})
	return s
}

// processes counts the Pulumi CLI processes started so far.
func (d *localDaemon) processes() int { return testenv.CountProcesses(d.counts) }

func (d *localDaemon) ups() int { return testenv.CountUps(d.counts) }

func (d *localDaemon) log() string {
	data, _ := os.ReadFile(d.logFile)
	return string(data)
}

// get fetches a path of the daemon's listener ("" while it does not answer).
func (d *localDaemon) get(path string) string { return testenv.Get(d.listen, path) }

// cycles is how many cycles the daemon has completed, by its /readyz.
func (d *localDaemon) cycles() int { return testenv.Cycles(d.listen) }

// waitCreate waits until a server create of the daemon's reached Hetzner: an apply is under way.
func (d *localDaemon) waitCreate() {
	d.t.Helper()
	d.waitFor("the server's create to reach Hetzner", 2*time.Minute, func() bool {
		for _, c := range d.h.Sim.Calls() {
			if c.Method == http.MethodPost && c.Path == "/servers" {
				return true
			}
		}
		return false
	})
}

// locks are the stack locks left in the daemon's file backend.
func (d *localDaemon) locks() []string {
	var locks []string
	_ = filepath.WalkDir(filepath.Join(d.state, "pulumi"), func(p string, e os.DirEntry, err error) error {
		if err == nil && strings.Contains(p, "/.pulumi/locks/") && !e.IsDir() {
			locks = append(locks, p)
		}
		return nil
	})
	return locks
}

// startLogged starts cmd, its output into logFile, ended with the test at the latest; the channel
// gets its Wait's error.
func startLogged(t *testing.T, cmd *exec.Cmd, logFile string) chan error {
	t.Helper()
	logf, err := os.Create(logFile)
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	testenv.EndsWithTest(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait(); logf.Close() }()
	return exited
}
