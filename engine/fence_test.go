package engine

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
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
	data := wait.Value(t, "the CLI to start", 10*time.Second, func() ([]byte, bool) {
		data, err := os.ReadFile(file)
		return data, err == nil
	}, wait.Every(20*time.Millisecond))
	var out []int
	for _, f := range strings.Fields(string(data)) {
		pid, _ := strconv.Atoi(f)
		out = append(out, pid)
	}
	return out
}

// TestFenceKillsTheProcessGroup: when an operation's fence closes, its CLI and what the CLI started
// die at once, though they ignore the interrupt (the ordinary cancel would wait CancelGrace, 30 s).
func TestFenceKillsTheProcessGroup(t *testing.T) {
	bin, pidFile := stubbornCLI(t)
	c := cli{bin: bin, env: os.Environ}
	stop := make(chan struct{})
	ctx := stands.WithFence(context.Background(), stands.Fence{Token: 3, Stop: stop})
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
	testenv.WaitGone(t, pids, 5*time.Second)
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
	testenv.WaitGone(t, pids[:1], 5*time.Second)
}

// TestFenceEndsTheProvider: with the real Pulumi CLI and provider, a fence closing while a server
// create waits on Hetzner's action ends the provider too — the CLI starts it in a process group of
// its own, so the group kill alone would leave it creating servers and polling actions for minutes
// (the SDK's health check of its engine) — and Hetzner hears nothing from the stand afterwards.
func TestFenceEndsTheProvider(t *testing.T) {
	f := newFixtureWith(t, func(c *Config) { c.SkipNodes = true }, hcloudsim.WithActionDelay(time.Minute))
	stand := load(t, examples(t, ""), "stands/two-node/stand.yml")
	stop := make(chan struct{})
	done := make(chan error, 1)
	go func() {
		_, err := f.eng.Apply(stands.WithFence(context.Background(), stands.Fence{Token: 7, Stop: stop}), stand, false)
		done <- err
	}()
	wait.For(t, "a server create", 2*time.Minute, func() bool { return created(f.Sim.Calls()) }, wait.Every(20*time.Millisecond),
		wait.Unless(func() error {
			select {
			case err := <-done:
				return fmt.Errorf("the apply ended before any server create: %v", err)
			default:
				return nil
			}
		}))
	procs := testenv.ProcessesWithEnv(f.eng.cfg.WorkDir) // the CLI and the provider it started
	if !slices.ContainsFunc(procs, func(pid int) bool {
		cmdline, _ := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "cmdline"))
		argv0, _, _ := strings.Cut(string(cmdline), "\x00")
		return filepath.Base(argv0) == provider.BinaryName
	}) {
		t.Fatalf("no provider among the apply's processes %v", procs)
	}
	close(stop)
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("the apply succeeded though its fence closed")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the apply still runs 10 s after its fence closed")
	}
	testenv.WaitGone(t, procs, 5*time.Second)
	// A call the simulator read before the kill is logged once it has answered: counted from when
	// the log has been still for a moment.
	last := -1
	wait.For(t, "the simulator's call log to settle", 10*time.Second, func() bool {
		n := len(f.Sim.Calls())
		settled := n == last
		last = n
		return settled
	}, wait.Every(500*time.Millisecond))
	calls := last
	time.Sleep(3 * time.Second) // hcloud-go polls a running action every few hundred milliseconds
	if after := f.Sim.Calls()[calls:]; len(after) > 0 {
		t.Errorf("Hetzner got %d calls after the fence closed, the first %s %s", len(after), after[0].Method, after[0].Path)
	}
}

func created(calls []hcloudsim.Call) bool {
	for _, c := range calls {
		if c.Method == "POST" && c.Path == "/servers" {
			return true
		}
	}
	return false
}
