package main

import (
	"bytes"
	"os"
	"os/exec"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestCommandsStopOnSignal: validate, busy in a template that never ends, exits 130 within 2 s of
// SIGINT, 143 of SIGTERM and 129 of SIGHUP, saying why, and leaves no process behind.
func TestCommandsStopOnSignal(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		sig  syscall.Signal
		code int
		says string
	}{
		{syscall.SIGINT, 130, "did not end within 1.5s of SIGINT"},
		{syscall.SIGTERM, 143, "did not end within 1.5s of SIGTERM"},
		// A terminal's hangup (an SSH session lost): a one-shot command stops as at SIGTERM; only
		// the daemon reloads at it (TestReloadDuringApply).
		{syscall.SIGHUP, 129, "did not end within 1.5s of SIGHUP"},
	} {
		t.Run(c.sig.String(), func(t *testing.T) {
			marker := "STANDS_TEST_STOP=" + testenv.RandomHex(8) // finds whatever the command started
			cmd := exec.Command(exe, "validate", "testdata/endless/stands/endless")
			cmd.Env = append(os.Environ(), runMainEnv+"=1", marker)
			var stderr bytes.Buffer
			cmd.Stderr = &stderr
			if err := cmd.Start(); err != nil {
				t.Fatal(err)
			}
			time.Sleep(time.Second) // into the template: it never ends
			if err := cmd.Process.Signal(c.sig); err != nil {
				t.Fatal(err)
			}
			sent := time.Now()
			exited := make(chan error, 1)
			go func() { exited <- cmd.Wait() }()
			select {
			case <-exited:
			case <-time.After(10 * time.Second):
				testenv.KillTree(cmd.Process.Pid)
				<-exited
				t.Fatalf("validate did not end within 10 s of %s:\n%s", c.sig, stderr.String())
			}
			took := time.Since(sent)
			t.Logf("%s: exit %d after %s", c.sig, cmd.ProcessState.ExitCode(), took.Round(10*time.Millisecond))
			if code := cmd.ProcessState.ExitCode(); code != c.code || took > 2*time.Second || !strings.Contains(stderr.String(), c.says) {
				t.Errorf("exit %d after %s, want %d within 2s saying %q:\n%s", code, took, c.code, c.says, stderr.String())
			}
			if left := testenv.ProcessesWithEnv(marker); len(left) > 0 {
				t.Errorf("processes left: %v", left)
			}
		})
	}
}

// TestStopOnSignal: what the wait for a command does at each turn, with the command, its signals and
// its Pulumi CLIs played by the test. A command that ends by itself keeps its code (an interrupted
// one the signal's); one that does not is stopped stopGrace after the signal, or at a second one;
// a Pulumi CLI running is waited for; and the daemon's commands are never stopped from outside,
// which is the case that shows the timing here can see a command that does not stop.
func TestStopOnSignal(t *testing.T) {
	type step struct {
		after time.Duration
		sig   os.Signal // sent, or
		code  int       // the command ends with it (when sig is nil), or
		clis  int       // Pulumi CLIs running from now on (when both are zero)
	}
	for _, c := range []struct {
		name      string
		stoppable bool
		steps     []step
		clis      int
		want      int // exit; -1: still waiting 3 s after the last step
		within    time.Duration
		says      string
	}{
		{"ends by itself", true, []step{{after: 10 * time.Millisecond, code: 1}}, 0, 1, time.Second, ""},
		{"interrupted, ends", true, []step{{sig: os.Interrupt}, {after: 50 * time.Millisecond, code: exitInterrupted}}, 0, 130, time.Second, ""},
		{"terminated, ends", true, []step{{sig: syscall.SIGTERM}, {after: 50 * time.Millisecond, code: exitInterrupted}}, 0, 143, time.Second, ""},
		{"signalled, never ends", true, []step{{sig: syscall.SIGTERM}}, 0, 143, 2 * time.Second, "did not end within 1.5s of SIGTERM"},
		{"a second signal", true, []step{{sig: os.Interrupt}, {after: 100 * time.Millisecond, sig: os.Interrupt}}, 0, 130, time.Second, "stopped at a second SIGINT"},
		{"Pulumi running, then done", true, []step{{sig: os.Interrupt}, {after: 2500 * time.Millisecond, clis: -1}}, 1, 130, 5 * time.Second, "waiting for Pulumi"},
		{"Pulumi running, a second signal", true, []step{{sig: os.Interrupt}, {after: 2 * time.Second, sig: syscall.SIGTERM}}, 1, 130, 2500 * time.Millisecond, "1 Pulumi CLI killed mid-operation"},
		{"the daemon drains", false, []step{{sig: syscall.SIGTERM}, {after: 100 * time.Millisecond, sig: syscall.SIGTERM}}, 0, -1, 0, ""},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			done, sigs := make(chan int, 1), make(chan os.Signal, 4)
			var clis atomic.Int32
			clis.Store(int32(c.clis))
			var stderr testenv.Buffer
			result := make(chan int, 1)
			start := time.Now()
			go func() {
				result <- stopOnSignal(done, sigs, func() {}, c.stoppable, &stderr, func() int { return int(clis.Load()) })
			}()
			for _, s := range c.steps {
				time.Sleep(s.after)
				switch {
				case s.sig != nil:
					sigs <- s.sig
				case s.code != 0:
					done <- s.code
				default:
					clis.Add(int32(s.clis))
				}
			}
			if c.want < 0 {
				select {
				case code := <-result:
					t.Fatalf("stopped with %d: the daemon's commands stop by their drain only", code)
				case <-time.After(3 * time.Second):
					return
				}
			}
			select {
			case code := <-result:
				took := time.Since(start)
				if code != c.want || took > c.within || !strings.Contains(stderr.String(), c.says) {
					t.Errorf("exit %d after %s saying %q, want %d within %s saying %q", code, took, stderr.String(), c.want, c.within, c.says)
				}
			case <-time.After(c.within + 5*time.Second):
				t.Fatalf("still waiting %s after the start", c.within+5*time.Second)
			}
		})
	}
}
