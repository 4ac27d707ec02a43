package stopsignal

import (
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestWait: what the wait for a command does at each turn, with the command, its signals and
// its Pulumi CLIs played by the test. A command that ends by itself keeps its code (an interrupted
// one the signal's); one that does not is stopped Grace after the signal, or at a second one;
// a Pulumi CLI running is waited for; and the daemon's commands are never stopped from outside,
// which is the case that shows the timing here can see a command that does not stop.
// busy is how late a process may be scheduled on a busy machine: seen up to 2.4 s in CI.
const busy = 3 * time.Second

func TestWait(t *testing.T) {
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
		{"interrupted, ends", true, []step{{sig: os.Interrupt}, {after: 50 * time.Millisecond, code: Interrupted}}, 0, 130, time.Second, ""},
		{"terminated, ends", true, []step{{sig: syscall.SIGTERM}, {after: 50 * time.Millisecond, code: Interrupted}}, 0, 143, time.Second, ""},
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
				result <- Command{Stoppable: c.stoppable, Stderr: &stderr, CLIs: func() int { return int(clis.Load()) }, Cancel: time.Second}.Wait(done, sigs, func() {})
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
				// The exit code and the words say which way it ended; the time only that it did not
				// hang, with room for a busy machine (CI's two cores run QEMU beside the tests).
				if code != c.want || took > c.within+busy || !strings.Contains(stderr.String(), c.says) {
					t.Errorf("exit %d after %s saying %q, want %d within %s saying %q", code, took, stderr.String(), c.want, c.within+busy, c.says)
				}
			case <-time.After(c.within + busy + 5*time.Second):
				t.Fatalf("still waiting %s after the start", c.within+busy+5*time.Second)
			}
		})
	}
}
