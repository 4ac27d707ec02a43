package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/test/wait"
)

// TestServersEndWithTheirTest: the servers a test starts (Gitea, Vault, PostgreSQL, sshd, a daemon
// of its own) end when the test binary is killed, where no cleanup of the test runs: a CI run
// stopped or timed out leaves nothing running. The test runs itself again as that binary, reads the
// servers' pids it writes, kills it with SIGKILL and waits for every one of them to end.
func TestServersEndWithTheirTest(t *testing.T) {
	if out := os.Getenv("STANDS_HELPER_SERVERS_PIDS"); out != "" {
		serveUntilKilled(t, out)
		return
	}
	NeedsServer(t, "Gitea, Vault, PostgreSQL and sshd")
	pidFile := filepath.Join(t.TempDir(), "pids")
	cmd := exec.Command(os.Args[0], "-test.run=^TestServersEndWithTheirTest$", "-test.timeout=10m")
	// Its folders under one of this test's, removed with it (a killed test removes none of its own).
	tmp, err := os.MkdirTemp("", "srv")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o711); err != nil { // PostgreSQL runs as a user of its own under root
		t.Fatal(err)
	}
	cmd.Env = append(os.Environ(), "STANDS_HELPER_SERVERS_PIDS="+pidFile, "TMPDIR="+tmp)
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	data := wait.Value(t, "the servers to start", 5*time.Minute, func() ([]byte, bool) {
		data, err := os.ReadFile(pidFile)
		return data, err == nil
	}, wait.Every(100*time.Millisecond), wait.Unless(func() error {
		select {
		case err := <-exited:
			exited <- err
			return fmt.Errorf("the test binary exited (%v):\n%s", err, out.String())
		default:
			return nil
		}
	}))
	var pids []int
	for _, f := range strings.Fields(string(data)) {
		name, pid, _ := strings.Cut(f, "=")
		n, err := strconv.Atoi(pid)
		if err != nil || !Running(n) {
			t.Fatalf("%s: pid %q does not run", name, pid)
		}
		pids = append(pids, n)
	}
	if len(pids) != 5 {
		t.Fatalf("pids: %q", data)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-exited
	WaitGone(t, pids, 30*time.Second)
}

// serveUntilKilled starts the servers, writes their pids to file (name=pid, space-separated) and
// waits to be killed.
func serveUntilKilled(t *testing.T, file string) {
	g := StartGitea(t)
	v := StartVault(t)
	pg := StartPostgres(t)
	s := StartSSHD(t)
	daemon := exec.Command("sleep", "600")
	EndsWithTest(daemon)
	if err := daemon.Start(); err != nil {
		t.Fatal(err)
	}
	pids := fmt.Sprintf("gitea=%d vault=%d postgres=%d sshd=%d daemon=%d", g.Pid(), v.Pid(), pg.Pid(), s.cmd.Process.Pid, daemon.Process.Pid)
	if err := os.WriteFile(file+".tmp", []byte(pids), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(file+".tmp", file); err != nil {
		t.Fatal(err)
	}
	time.Sleep(10 * time.Minute)
	t.Error("not killed")
}
