package main

import (
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestOperatorControls: on-call's controls on a running daemon, through `stands-reconciler ctl` and
// the committed .stands/pause, each counted in Pulumi processes: while paused or plan-only a new
// stand runs no `pulumi up` and its status says why and who; a retry attempts a failed stand at once,
// long before its backoff would.
func TestOperatorControls(t *testing.T) {
	h := testenv.StartHetzner(t, "controls-token")
	lr := newLocalStandsRepo(t)
	lr.commit(map[string]string{standPath("p"): plainStand("p")})
	d := newLocalDaemon(t, lr, h, "--poll-interval", "1s")
	d.start()
	d.waitStatus("local_p_dev", 3*time.Minute, func(s reconcile.Status) bool { return s.Phase == reason.Ready })
	ready := func(s reconcile.Status) bool { return s.Phase == reason.Ready }

	t.Run("pause through ctl, and resume", func(t *testing.T) {
		if r := d.ctl("pause", "incident", "7:", "Hetzner", "is", "slow"); r.code != 0 || !strings.Contains(r.stdout, `"paused":true`) {
			t.Fatalf("ctl pause: exit %d\n%s%s", r.code, r.stdout, r.stderr)
		}
		ups := d.ups()
		lr.commit(map[string]string{standPath("q"): plainStand("q")})
		s := d.waitStatus("local_q_dev", time.Minute, func(s reconcile.Status) bool { return s.Reason == reason.Paused })
		if s.Phase != reason.Blocked || !strings.Contains(s.Message, "paused by oncall-test as ") || !strings.Contains(s.Message, "incident 7: Hetzner is slow") ||
			!strings.Contains(s.Message, "create it") {
			t.Errorf("q while paused: %+v", s)
		}
		if md := d.statusFile("STATUS.md"); !strings.Contains(md, "**Paused** by `oncall-test as") {
			t.Errorf("STATUS.md while paused:\n%s", md)
		}
		cycles := d.cycles()
		d.waitFor("two more cycles", time.Minute, func() bool { return d.cycles() >= cycles+2 })
		if got := d.ups() - ups; got != 0 {
			t.Errorf("%d pulumi up while paused", got)
		}
		if r := d.ctl("resume"); r.code != 0 {
			t.Fatalf("ctl resume: %d %s", r.code, r.stderr)
		}
		d.waitStatus("local_q_dev", 2*time.Minute, ready)
		if !strings.Contains(d.log(), `"msg":"operator: pause","by":"oncall-test as root (uid 0) via the control socket"`) {
			t.Errorf("the pause is not logged with who asked")
		}
	})

	t.Run("a committed pause", func(t *testing.T) {
		ups := d.ups()
		lr.commit(map[string]string{reconcile.PauseFile: "release freeze until Monday\n", standPath("s"): plainStand("s")})
		s := d.waitStatus("local_s_dev", time.Minute, func(s reconcile.Status) bool { return s.Reason == reason.Paused })
		if !strings.Contains(s.Message, "paused by .stands/pause at ") || !strings.Contains(s.Message, "release freeze until Monday") {
			t.Errorf("s while paused by the repository: %+v", s)
		}
		if got := d.ups() - ups; got != 0 {
			t.Errorf("%d pulumi up while paused", got)
		}
		if r := d.ctl("resume"); r.code != 0 || !strings.Contains(r.stdout, `"paused":true`) {
			t.Errorf("a local resume lifted the committed pause: %s", r.stdout)
		}
		lr.commit(nil, reconcile.PauseFile)
		d.waitStatus("local_s_dev", 2*time.Minute, ready)
	})

	t.Run("plan-only through ctl", func(t *testing.T) {
		if r := d.ctl("plan-only", "on"); r.code != 0 || !strings.Contains(r.stdout, `"planOnly":true`) {
			t.Fatalf("ctl plan-only on: %d %s %s", r.code, r.stdout, r.stderr)
		}
		ups := d.ups()
		lr.commit(map[string]string{standPath("r"): plainStand("r")}, "stands/s")
		r := d.waitStatus("local_r_dev", time.Minute, func(s reconcile.Status) bool { return s.Reason == reason.PlanOnly })
		s := d.waitStatus("local_s_dev", time.Minute, func(s reconcile.Status) bool { return s.Reason == reason.PlanOnly })
		if !strings.Contains(r.Message, "plan-only mode: would create it") || !strings.Contains(s.Message, "plan-only mode: would destroy it") {
			t.Errorf("plan-only statuses: r %q, s %q", r.Message, s.Message)
		}
		if got := d.ups() - ups; got != 0 || serverDeletes(h) != 0 {
			t.Errorf("plan-only: %d pulumi up, %d server deletes", got, serverDeletes(h))
		}
		if r := d.ctl("plan-only", "off"); r.code != 0 {
			t.Fatalf("ctl plan-only off: %d %s", r.code, r.stderr)
		}
		d.waitStatus("local_r_dev", 2*time.Minute, ready)
		d.waitStatus("local_s_dev", 2*time.Minute, func(s reconcile.Status) bool { return s.Phase == reason.Destroyed })
	})

	t.Run("retry a failed stand now", func(t *testing.T) {
		// Its create fails once (Hetzner answers 503): Failed, with a next attempt 24–36 s later.
		h.Sim.Inject(hcloudsim.Fault{Method: http.MethodPost, Path: "/servers", Code: "unavailable"})
		lr.commit(map[string]string{standPath("f"): plainStand("f")})
		f := d.waitStatus("local_f_dev", 2*time.Minute, func(s reconcile.Status) bool { return s.Phase == reason.Failed })
		if f.NextAttempt == nil {
			t.Fatalf("a failed stand without a next attempt: %+v", f)
		}
		asked := time.Now()
		if r := d.ctl("retry", "local_f_dev"); r.code != 0 {
			t.Fatalf("ctl retry: %d %s", r.code, r.stderr)
		}
		s := d.waitStatus("local_f_dev", 2*time.Minute, ready)
		// The attempt's start, not its end: how long the apply takes is the machine's, not the retry's.
		if s.Timings == nil || !s.Timings.Started.Before(*f.NextAttempt) {
			t.Errorf("the attempt started at %+v, not before the backoff's next attempt %s: the retry did not hurry it", s.Timings, f.NextAttempt.Local().Format(time.TimeOnly))
		}
		if s.Operator == nil || s.Operator.Action != "retry" || !strings.Contains(s.Operator.By, "oncall-test as root (uid 0)") || s.Operator.At.Before(asked.Add(-time.Second)) {
			t.Errorf("the retry is not in the status: %+v", s.Operator)
		}
		if r := d.ctl("retry", "local_nope_dev"); r.code != exitError || !strings.Contains(r.stderr, "no such stand") {
			t.Errorf("retry of an unknown stand: %d %s", r.code, r.stderr)
		}
	})
	if code, _ := d.stop(syscall.SIGTERM, 2*time.Minute); code != 0 {
		t.Errorf("exit %d after SIGTERM", code)
	}
}
