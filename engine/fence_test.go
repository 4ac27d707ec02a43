package engine

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stubbornCLI is a "Pulumi CLI" that ignores the interrupt and starts a child that does too (a
// plugin), writing both pids to pids: only a kill of the process group ends them.
func stubbornCLI(t *testing.T) (bin, pids string) {
	t.Helper()
	dir := t.TempDir()
	pids = filepath.Join(dir, "pids")
	bin = filepath.Join(dir, "pulumi")
	script := "#!/bin/sh\ntrap '' INT TERM\n(trap '' INT TERM; sleep 600) &\necho $$ $! > " + pids + ".tmp\nmv " + pids + ".tmp " + pids + "\nwait\n"
	if err := os.WriteFile(bin, []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	return bin, pids
}

func readPids(t *testing.T, file string) []int {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		if data, err := os.ReadFile(file); err == nil {
			var out []int
			for _, f := range strings.Fields(string(data)) {
				pid, _ := strconv.Atoi(f)
				out = append(out, pid)
			}
			return out
		}
		if time.Now().After(deadline) {
			t.Fatal("the CLI did not start")
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func waitGone(t *testing.T, pids []int, within time.Duration) {
	t.Helper()
	deadline := time.Now().Add(within)
	for _, pid := range pids {
		for alive(pid) {
			if time.Now().After(deadline) {
				t.Fatalf("pid %d still runs %v later", pid, within)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// TestFenceKillsTheProcessGroup: when an operation's fence closes, its CLI and what the CLI started
// die at once, though they ignore the interrupt (the ordinary cancel would wait CancelGrace, 30 s).
func TestFenceKillsTheProcessGroup(t *testing.T) {
	bin, pidFile := stubbornCLI(t)
	c := cli{bin: bin, env: os.Environ}
	stop := make(chan struct{})
	ctx := WithFence(context.Background(), Fence{Token: 3, Stop: stop})
	done := make(chan error, 1)
	go func() { _, _, _, err := c.Run(ctx, "", nil, nil, nil, nil, "up"); done <- err }()
	pids := readPids(t, pidFile)
	select {
	case err := <-done:
		t.Fatalf("the CLI ended before the fence: %v", err)
	case <-time.After(300 * time.Millisecond):
	}
	close(stop)
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the CLI still runs 5 s after its fence closed")
	}
	waitGone(t, pids, 5*time.Second)
}

// TestCLIDiesWithItsDaemon: a daemon killed with -9 leaves no Pulumi CLI behind (it would go on
// applying outside any lease). The daemon is this test binary run again as this test.
func TestCLIDiesWithItsDaemon(t *testing.T) {
	if bin := os.Getenv("STANDS_HELPER_DAEMON_CLI"); bin != "" {
		// This process is the daemon: it runs the CLI until it is killed.
		c := cli{bin: bin, env: os.Environ}
		_, _, _, _ = c.Run(context.Background(), "", nil, nil, nil, nil, "up")
		return
	}
	bin, pidFile := stubbornCLI(t)
	cmd := exec.Command(os.Args[0], "-test.run=^TestCLIDiesWithItsDaemon$")
	cmd.Env = append(os.Environ(), "STANDS_HELPER_DAEMON_CLI="+bin)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	pids := readPids(t, pidFile)
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	// The CLI dies with its daemon; its child, a plugin, is the CLI's to end and is not checked here.
	waitGone(t, pids[:1], 5*time.Second)
}
