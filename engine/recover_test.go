package engine

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// deadPID is the pid of a process of this host that has ended.
func deadPID(t *testing.T) int {
	t.Helper()
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	return dead.Process.Pid
}

// plantLock writes a lock file of ref into a file:// backend at dir, as the diy backend writes it,
// and returns its path.
func plantLock(t *testing.T, dir string, ref stands.StackRef, pid int, host string, at time.Time) string {
	t.Helper()
	lockDir := filepath.Join(dir, filepath.FromSlash(lockPrefix(ref)))
	if err := os.MkdirAll(lockDir, 0o755); err != nil {
		t.Fatal(err)
	}
	lock := filepath.Join(lockDir, "a.json")
	body := fmt.Sprintf(`{"pid":%d,"username":"u","hostname":%q,"timestamp":%q}`, pid, host, at.Format(time.RFC3339Nano))
	if err := os.WriteFile(lock, []byte(body), 0o600); err != nil {
		t.Fatal(err)
	}
	return lock
}

// TestClearStaleLocks covers each kind of lock a stack can carry.
func TestClearStaleLocks(t *testing.T) {
	host, _ := os.Hostname()
	dead := deadPID(t)
	// Killed and not reaped: a zombie, as a killed Pulumi CLI is until init gets to it.
	killed := exec.Command("sleep", "60")
	if err := killed.Start(); err != nil {
		t.Fatal(err)
	}
	if err := killed.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = killed.Wait() })
	wait.For(t, "the killed process to become a zombie", 10*time.Second, func() bool { return zombie(killed.Process.Pid) }, wait.Every(10*time.Millisecond))
	recent, old := time.Now().Add(-time.Minute), time.Now().Add(-3*time.Hour)
	cases := []struct {
		name    string
		pid     int
		host    string
		at      time.Time
		lease   time.Duration
		want    error
		removed bool
	}{
		{"dead process of this host", dead, host, recent, 0, nil, true},
		{"killed process of this host, not yet reaped", killed.Process.Pid, host, recent, 0, nil, true},
		{"live process of this host", os.Getpid(), host, old, time.Hour, ErrUpdateInProgress, false},
		{"another host, no lease", 1, "elsewhere", old, 0, ErrLockedElsewhere, false},
		{"another host within the lease", 1, "elsewhere", recent, time.Hour, ErrLockedElsewhere, false},
		{"another host past the lease", 1, "elsewhere", old, time.Hour, nil, true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			ref := stands.StackRef{Project: "demo", Env: "x"}
			lock := plantLock(t, dir, ref, c.pid, c.host, c.at)
			e := &Engine{cfg: Config{BackendURL: "file://" + dir, LockLease: c.lease}}
			err := e.clearStaleLocks(context.Background(), ref, slog.New(slog.DiscardHandler))
			if !errors.Is(err, c.want) || (c.want == nil && err != nil) {
				t.Fatalf("err %v, want %v", err, c.want)
			}
			if _, statErr := os.Stat(lock); os.IsNotExist(statErr) != c.removed {
				t.Errorf("lock removed: %v, want %v", os.IsNotExist(statErr), c.removed)
			}
		})
	}
}

// TestSavedElsewhere: a CLI that failed to load a checkpoint another update was saving waits as an
// update conflict; one that failed on a checkpoint that is still unreadable fails as it did.
func TestSavedElsewhere(t *testing.T) {
	loadErr := errors.New("pulumi up demo_demo_x: failed to run update: exit status 1\nstderr: error: failed to load checkpoint: EOF")
	for _, c := range []struct {
		name       string
		checkpoint string // "" for none
		err        error
		want       reason.Reason
	}{
		{"checkpoint whole again", `{"version":3,"checkpoint":{}}`, loadErr, reason.UpdateConflict},
		{"checkpoint still empty", " ", loadErr, reason.Failure},
		{"no checkpoint", "", loadErr, reason.Failure},
		{"another failure", `{"version":3,"checkpoint":{}}`, errors.New("pulumi up demo_demo_x: exit status 1"), reason.Failure},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if c.checkpoint != "" {
				stacks := filepath.Join(dir, ".pulumi", "stacks", "demo")
				if err := os.MkdirAll(stacks, 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(filepath.Join(stacks, "x.json"), []byte(c.checkpoint), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			e := &Engine{cfg: Config{BackendURL: "file://" + dir}}
			err := e.savedElsewhere(context.Background(), stands.StackRef{Project: "demo", Env: "x"}, c.err)
			if got := Classify(err); got != c.want || !errors.Is(err, c.err) {
				t.Errorf("%v: classified %s, want %s", err, got, c.want)
			}
		})
	}
}
