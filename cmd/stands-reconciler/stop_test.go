package main

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestStopDuringApply: SIGTERM while an apply waits on Hetzner. The daemon drains for
// --drain-timeout, then interrupts Pulumi, which cancels its provider, writes its checkpoint and
// lets its lock go; the daemon commits the stand's Canceled status and exits 0 within the drain
// timeout plus engine.CancelGrace. The backend then holds no lock, no holder record and no pending
// operation, the next start recovers nothing, and the stand becomes Ready with one server.
func TestStopDuringApply(t *testing.T) {
	// Every Hetzner action takes 40 s: the apply is still waiting on its server's when the signal comes.
	h := testenv.StartHetzner(t, "stop-token", hcloudsim.WithActionDelay(40*time.Second))
	lr := newLocalStandsRepo(t)
	lr.commit(map[string]string{standPath("p"): plainStand("p")})
	const drain = 3 * time.Second
	d := newLocalDaemon(t, lr, h, "--poll-interval", "2s", "--drain-timeout", drain.String())
	d.start()
	d.waitCreate()
	time.Sleep(time.Second)
	code, took := d.stop(syscall.SIGTERM, drain+engine.CancelGrace+30*time.Second)
	t.Logf("SIGTERM during an apply: exit %d after %s (drain timeout %s, cancel grace %s)", code, took.Round(100*time.Millisecond), drain, engine.CancelGrace)
	if code != 0 {
		t.Errorf("exit %d, want 0: the final status was committed", code)
	}
	if took > drain+engine.CancelGrace+5*time.Second {
		t.Errorf("stopping took %s, more than the drain timeout and the cancel grace", took)
	}
	log := d.log()
	for _, want := range []string{"cancelling running operations", "the drain timeout passed", "reconciler stopped"} {
		if !strings.Contains(log, want) {
			t.Errorf("the log does not say %q", want)
		}
	}
	if s := d.waitStatus("local_p_dev", time.Second, func(reconcile.Status) bool { return true }); s.Phase != reason.Failed || s.Reason != reason.Canceled {
		t.Errorf("the committed status after the stop: %+v", s)
	}

	// The backend as the next start finds it: no lock, no holder record, no pending operation.
	backend := filepath.Join(d.state, "pulumi", "local")
	var locks, holders []string
	_ = filepath.WalkDir(backend, func(p string, e os.DirEntry, err error) error {
		if err == nil && !e.IsDir() {
			switch {
			case strings.Contains(p, "/.pulumi/locks/"):
				locks = append(locks, p)
			case strings.Contains(p, "/.stands/holders/"):
				holders = append(holders, p)
			}
		}
		return nil
	})
	if len(locks)+len(holders) != 0 {
		t.Errorf("left behind: locks %v, holder records %v", locks, holders)
	}
	if n := pendingOperations(t, filepath.Join(backend, ".pulumi", "stacks", "p", "dev.json")); n != 0 {
		t.Errorf("%d pending operations in the checkpoint", n)
	}
	if ws, _ := os.ReadDir(filepath.Join(d.state, "workspaces")); len(ws) != 0 {
		t.Errorf("%d workspace folders left", len(ws))
	}

	d.start("--drain-timeout", "2m")
	d.waitStatus("local_p_dev", 3*time.Minute, func(s reconcile.Status) bool { return s.Phase == reason.Ready })
	for _, recovery := range []string{"removed a stale stack lock", "pending operation left by an interrupted run"} {
		if strings.Contains(d.log(), recovery) {
			t.Errorf("the next start had to recover: %q", recovery)
		}
	}
	if n := len(h.Servers(t)); n != 1 {
		t.Errorf("%d servers after the restart, want 1", n)
	}
	if code, _ := d.stop(syscall.SIGTERM, 2*time.Minute); code != 0 {
		t.Errorf("exit %d after an idle SIGTERM", code)
	}
}
