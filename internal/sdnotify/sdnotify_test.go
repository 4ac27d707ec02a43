package sdnotify

import (
	"context"
	"os"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// listen is a notify socket as systemd opens one, and what it receives.
func listen(t *testing.T) <-chan string {
	t.Helper()
	path, got := testenv.NotifySocket(t)
	t.Setenv("NOTIFY_SOCKET", path)
	return got
}

func TestNotify(t *testing.T) {
	t.Setenv("NOTIFY_SOCKET", "")
	if sent, err := Notify("READY=1"); sent || err != nil {
		t.Errorf("outside systemd: sent %v, %v", sent, err)
	}
	got := listen(t)
	if sent, err := Notify("READY=1"); !sent || err != nil {
		t.Fatalf("sent %v, %v", sent, err)
	}
	select {
	case s := <-got:
		if s != "READY=1" {
			t.Errorf("systemd got %q", s)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("nothing reached the socket")
	}
}

func TestWatchdogInterval(t *testing.T) {
	for _, c := range []struct {
		usec, pid string
		want      time.Duration
	}{
		{"", "", 0},
		{"60000000", "", time.Minute},
		{"60000000", strconv.Itoa(os.Getpid()), time.Minute},
		{"60000000", "1", 0}, // another process's
		{"nonsense", "", 0},
	} {
		t.Setenv("WATCHDOG_USEC", c.usec)
		t.Setenv("WATCHDOG_PID", c.pid)
		if got := WatchdogInterval(); got != c.want {
			t.Errorf("WATCHDOG_USEC=%q WATCHDOG_PID=%q: %v, want %v", c.usec, c.pid, got, c.want)
		}
	}
}

// TestWatchdogPingsOnlyWhileHealthy: pings every third of the interval while healthy, none while
// not (the loop wedged), and again once it is.
func TestWatchdogPingsOnlyWhileHealthy(t *testing.T) {
	got := listen(t)
	var healthy atomic.Bool
	healthy.Store(true)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Watchdog(ctx, 300*time.Millisecond, healthy.Load) }()
	count := func(d time.Duration) int {
		n := 0
		for deadline := time.After(d); ; {
			select {
			case s := <-got:
				if s != "WATCHDOG=1" {
					t.Errorf("systemd got %q", s)
				}
				n++
			case <-deadline:
				return n
			}
		}
	}
	if n := count(time.Second); n < 2 {
		t.Errorf("%d pings in 1 s at a 300 ms watchdog while healthy", n)
	}
	healthy.Store(false)
	time.Sleep(150 * time.Millisecond) // a ping under way
	for len(got) > 0 {
		<-got
	}
	if n := count(time.Second); n != 0 {
		t.Errorf("%d pings in 1 s while the loop is wedged", n)
	}
	healthy.Store(true)
	if n := count(time.Second); n < 2 {
		t.Errorf("%d pings in 1 s once healthy again", n)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("watchdog: %v", err)
	}
}
