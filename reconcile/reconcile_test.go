package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/fakes"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

type harness struct {
	t   *testing.T
	src *fakeSource
	eng *fakeEngine
	sec *fakeSecrets
	r   *Reconciler
	now time.Time
}

func newHarness(t *testing.T, stands map[string]string, tune func(*Config)) *harness {
	h := &harness{t: t, src: newFakeSource(t, stands), eng: fakes.NewEngine(), sec: fakes.NewSecrets(), now: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)}
	cfg := Config{Owner: "local", Passphrase: "pass", Now: func() time.Time { return h.now }, BackoffBase: time.Minute}
	if tune != nil {
		tune(&cfg)
	}
	h.r = New(cfg, h.src, h.eng, h.sec)
	return h
}

// cycle runs one cycle and waits for its operations and plans.
func (h *harness) cycle() error {
	h.t.Helper()
	return fakes.Cycle(h.t, h.r)
}

func (h *harness) mustCycle() {
	h.t.Helper()
	fakes.MustCycle(h.t, h.r)
}

func repoWith(ids ...string) map[string]string {
	m := map[string]string{}
	for _, id := range ids {
		m[fakes.StandFile(id)] = fakes.StandYML(id, "")
	}
	return m
}

func TestCreateThenNoop(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), nil)
	h.mustCycle()
	for _, id := range []string{"local_a_dev", "local_b_dev"} {
		if h.eng.UpsOf(id) != 1 {
			t.Errorf("%s: %d ups, want 1", id, h.eng.UpsOf(id))
		}
		st := h.src.statusOf(t, id)
		if st.Phase != reason.Ready || st.Reason != reason.Applied || st.SchemaVersion != SchemaVersion || len(st.Nodes) != 1 ||
			st.LastSuccessfulCommit != "h001" || st.File != "stands/"+strings.Split(id, "_")[1]+"/stand.yml" {
			t.Errorf("%s status: %+v", id, st)
		}
		if !strings.Contains(string(st.Connection), `"***"`) || strings.Contains(string(st.Connection), fakes.KVPassword) {
			t.Errorf("%s connection not masked: %s", id, st.Connection)
		}
		if !strings.Contains(h.sec.Connections[id], fakes.KVPassword) {
			t.Errorf("%s: the secret store holds %q, want the unmasked record", id, h.sec.Connections[id])
		}
	}
	commits := h.src.Commits()
	for range 3 {
		h.mustCycle()
	}
	if h.src.Commits() != commits || h.eng.TotalUps() != 2 {
		t.Errorf("no-op cycles made %d commits and %d ups", h.src.Commits()-commits, h.eng.TotalUps()-2)
	}
	// A restarted reconciler picks up the published statuses: no commit, no up.
	r2 := New(h.r.cfg, h.src, h.eng, h.sec)
	if err := r2.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	r2.Wait()
	if h.src.Commits() != commits || h.eng.TotalUps() != 2 {
		t.Errorf("restart made %d commits and %d ups", h.src.Commits()-commits, h.eng.TotalUps()-2)
	}
}

func TestOneChangeOfFive(t *testing.T) {
	h := newHarness(t, repoWith("a", "b", "c", "d", "e"), nil)
	h.mustCycle()
	h.src.Commit(map[string]string{fakes.StandFile("c"): strings.Replace(fakes.StandYML("c", ""), "cache: {}", "cache: {preferences: {port: 6390}}", 1)})
	h.mustCycle()
	if h.eng.TotalUps() != 6 || h.eng.UpsOf("local_c_dev") != 2 {
		t.Errorf("ups %v, want one more for c only", h.eng.Ups)
	}
	if st := h.src.statusOf(t, "local_c_dev"); st.LastSuccessfulCommit != "h002" || st.LastAttemptedCommit != "h002" {
		t.Errorf("c: %+v", st)
	}
	if st := h.src.statusOf(t, "local_a_dev"); st.LastSuccessfulCommit != "h001" {
		t.Errorf("a's status moved: %+v", st)
	}
}

func TestBrokenStandFailsAlone(t *testing.T) {
	files := repoWith("a", "b")
	files[fakes.StandFile("b")] = strings.Replace(files[fakes.StandFile("b")], "profile: small", "profile: huge", 1)
	h := newHarness(t, files, nil)
	h.mustCycle()
	if h.eng.UpsOf("local_a_dev") != 1 || h.eng.UpsOf("local_b_dev") != 0 {
		t.Errorf("ups %v", h.eng.Ups)
	}
	st := h.src.statusOf(t, "local_b_dev")
	if st.Phase != reason.Failed || st.Reason != reason.Invalid || !strings.Contains(st.Message, "stands/b/stand.yml:") || !strings.Contains(st.Message, "huge") {
		t.Errorf("b: %+v", st)
	}
	// Fixing it applies it.
	h.src.Commit(repoWith("b"))
	h.mustCycle()
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Ready {
		t.Errorf("b after the fix: %+v", st)
	}
}

func TestRetriesThenStalled(t *testing.T) {
	h := newHarness(t, repoWith("a"), nil)
	for i := 1; i <= 3; i++ {
		h.eng.Fail["local_a_dev"] = errors.New("pulumi up local_a_dev: boom with " + fakes.KVPassword)
		h.mustCycle()
		st := h.src.statusOf(t, "local_a_dev")
		if strings.Contains(st.Message, fakes.KVPassword) {
			t.Fatalf("the status message shows the secret: %s", st.Message)
		}
		if i < 3 && (st.Phase != reason.Failed || st.Failures != i || st.NextAttempt == nil) {
			t.Fatalf("failure %d: %+v", i, st)
		}
		if i < 3 {
			h.mustCycle() // within the backoff: no attempt
			if h.eng.UpsOf("local_a_dev") != 0 {
				t.Fatal("retried within the backoff")
			}
			h.now = h.now.Add(10 * time.Minute)
		}
	}
	st := h.src.statusOf(t, "local_a_dev")
	if st.Phase != reason.Stalled || !strings.Contains(st.Message, "3 attempts failed") {
		t.Fatalf("after 3 failures: %+v", st)
	}
	h.now = h.now.Add(time.Hour)
	h.mustCycle()
	if h.eng.UpsOf("local_a_dev") != 0 {
		t.Fatal("a stalled stand was retried without a change")
	}
	h.src.Commit(map[string]string{fakes.StandFile("a"): strings.Replace(fakes.StandYML("a", ""), "cache: {}", "cache: {preferences: {port: 6390}}", 1)})
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready || h.eng.UpsOf("local_a_dev") != 1 {
		t.Errorf("after the input changed: %+v", st)
	}
}

func TestWaitingNeverStalls(t *testing.T) {
	h := newHarness(t, repoWith("a"), nil)
	for range 5 {
		h.eng.Fail["local_a_dev"] = reason.Wrap(reason.UpdateConflict, errors.New("pulumi up: another update is currently in progress"))
		h.mustCycle()
		h.now = h.now.Add(time.Hour)
	}
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Failed || st.Reason != reason.UpdateConflict || st.Failures != 0 {
		t.Fatalf("after 5 waiting errors: %+v", st)
	}
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready {
		t.Errorf("recovery: %+v", st)
	}
}

func TestSourceDownChangesNothing(t *testing.T) {
	// Without the share and last-stand guards: a source misread as empty must be stopped by the
	// fetch error alone.
	h := newHarness(t, repoWith("a", "b"), func(c *Config) { c.AllowMassDestroy = true })
	h.mustCycle()
	h.src.Down = true
	for range 3 {
		if err := h.cycle(); err == nil {
			t.Fatal("a cycle with the source down succeeded")
		}
	}
	if len(h.eng.Destroys) != 0 || h.r.Health().Source == nil {
		t.Errorf("destroys %v, health %+v", h.eng.Destroys, h.r.Health())
	}
	h.src.Down = false
	h.mustCycle()
	if h.r.Health().Source != nil || len(h.eng.Stacks) != 2 {
		t.Errorf("recovery: %+v, %d stacks", h.r.Health(), len(h.eng.Stacks))
	}
}

func TestVaultDownAppliesNothing(t *testing.T) {
	var logs testenv.Buffer
	h := newHarness(t, repoWith("a", "b", "c"), func(c *Config) { c.Log = slog.New(slog.NewTextHandler(&logs, nil)) })
	h.mustCycle()
	h.sec.SetDown(true)
	h.src.Commit(map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  protect: true"), fakes.StandFile("c"): ""})
	h.mustCycle()
	if h.eng.TotalUps() != 3 || len(h.eng.Destroys) != 0 {
		t.Fatalf("with Vault down: ups %v destroys %v", h.eng.Ups, h.eng.Destroys)
	}
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Progressing || st.Reason != reason.VaultUnavailable || !strings.Contains(st.Message, "vault is unavailable") {
		t.Errorf("a: %+v", st)
	}
	if st := h.src.statusOf(t, "local_c_dev"); st.Phase != reason.Blocked || st.Reason != reason.VaultUnavailable {
		t.Errorf("c: %+v", st)
	}
	if h.r.Health().Secrets == nil {
		t.Error("health does not show Vault down")
	}
	// An outage of 20 cycles: logged at its start and every tenth cycle, and at its end.
	for range 19 {
		h.now = h.now.Add(10 * time.Minute) // past --secret-refresh: each cycle asks the store again
		h.mustCycle()
	}
	h.sec.SetDown(false)
	h.mustCycle()
	if down, again := strings.Count(logs.String(), "secret store unavailable"), strings.Count(logs.String(), "secret store answers again"); down != 5 || again != 1 {
		t.Errorf("20 cycles without Vault logged %d warnings (want 5: cycles 1-3, 10, 20) and %d recoveries (want 1):\n%s", down, again, logs.String())
	}
	if h.eng.UpsOf("local_a_dev") != 2 || len(h.eng.Destroys) != 1 {
		t.Errorf("recovery: ups %v destroys %v", h.eng.Ups, h.eng.Destroys)
	}
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Ready {
		t.Errorf("b after recovery: %+v", st)
	}
}

func TestDestroyGuards(t *testing.T) {
	h := newHarness(t, repoWith("a", "b", "c"), nil)
	h.mustCycle()
	h.src.Commit(map[string]string{fakes.StandFile("c"): ""})
	h.mustCycle()
	if st := h.src.statusOf(t, "local_c_dev"); st.Phase != reason.Destroyed || len(st.Nodes) != 0 || st.Connection != nil {
		t.Fatalf("c: %+v", st)
	}
	h.src.Commit(map[string]string{fakes.StandFile("a"): "", fakes.StandFile("b"): ""})
	h.mustCycle()
	if len(h.eng.Destroys) != 1 {
		t.Fatalf("removing all stands destroyed %v", h.eng.Destroys)
	}
	st := h.src.statusOf(t, "local_a_dev")
	if st.Phase != reason.Blocked || st.Reason != "WouldRemoveAllStands" || !strings.Contains(st.Message, judge.AllowDestroyFile) {
		t.Errorf("a: %+v", st)
	}
	h.src.Commit(map[string]string{judge.AllowDestroyFile: "# approved by ops\nlocal_a_dev\nlocal_b_dev\n"})
	h.mustCycle()
	if len(h.eng.Destroys) != 3 {
		t.Errorf("with the override: destroys %v", h.eng.Destroys)
	}
}

func TestUnreadableManifestHoldsDestroys(t *testing.T) {
	h := newHarness(t, repoWith("a", "b", "c"), nil)
	h.mustCycle()
	h.src.Commit(map[string]string{fakes.StandFile("c"): "stand: [\n", fakes.StandFile("b"): ""})
	h.mustCycle()
	if len(h.eng.Destroys) != 0 {
		t.Fatalf("destroyed %v while a manifest was unreadable", h.eng.Destroys)
	}
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Blocked || !strings.Contains(st.Message, "stands/c/stand.yml") {
		t.Errorf("b: %+v", st)
	}
	if md := string(h.src.Files["STATUS.md"].Data); !strings.Contains(md, "could not be read") {
		t.Errorf("STATUS.md:\n%s", md)
	}
}

func TestDriftCheck(t *testing.T) {
	h := newHarness(t, repoWith("a"), func(c *Config) { c.DriftInterval = time.Hour })
	h.mustCycle()
	h.mustCycle()
	if h.eng.Drifts != 0 {
		t.Fatal("drift checked before the interval")
	}
	h.eng.Drifted["local_a_dev"] = true
	h.now = h.now.Add(61 * time.Minute)
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Drifted || h.eng.UpsOf("local_a_dev") != 1 {
		t.Fatalf("after drift: %+v ups %d", st, h.eng.UpsOf("local_a_dev"))
	}
	// Configured to repair: the next check applies.
	h.r.cfg.DriftApply = true
	h.now = h.now.Add(61 * time.Minute)
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready || h.eng.UpsOf("local_a_dev") != 2 {
		t.Errorf("drift repaired: %+v ups %d", st, h.eng.UpsOf("local_a_dev"))
	}
}

func TestWorkerPoolBound(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e", "f"}
	h := newHarness(t, repoWith(ids...), func(c *Config) { c.Workers = 2 })
	h.eng.Gate = make(chan struct{})
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	// Both workers at work before any is let go: on a busy machine the second may reach its apply
	// after the first finished, and the bound would not be what is measured.
	wait.For(t, "both workers applying", 10*time.Second, func() bool {
		h.eng.Mu.Lock()
		defer h.eng.Mu.Unlock()
		return h.eng.Running >= 2
	})
	// A second cycle while all operations run starts none twice.
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range ids {
		h.eng.Gate <- struct{}{}
	}
	h.r.Wait()
	if h.eng.MaxRunning != 2 || h.eng.TotalUps() != len(ids) {
		t.Errorf("max running %d (want 2), ups %v", h.eng.MaxRunning, h.eng.Ups)
	}
	if st := h.src.statusOf(t, "local_f_dev"); st.Phase != reason.Ready {
		t.Errorf("f: %+v", st)
	}
}

func TestSuspendAndOtherOwner(t *testing.T) {
	files := repoWith("a")
	files[fakes.StandFile("s")] = fakes.StandYML("s", "  suspend: true")
	files[fakes.StandFile("o")] = fakes.StandYML("o", "  owner: team2")
	reg := prometheus.NewPedanticRegistry()
	h := newHarness(t, files, func(c *Config) { c.Metrics = reg })
	h.mustCycle()
	// Another owner's stand is Blocked, and counted apart: the Blocked alert leaves it out
	// (deploy/alerts.yml), and sees every other reason that blocks, at 0.
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	blocked := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			if f.GetName() == "stands_blocked" {
				blocked[m.GetLabel()[0].GetValue()] = m.GetGauge().GetValue()
			}
		}
	}
	if blocked["OtherOwner"] != 1 || len(blocked) < 5 || blocked["Protected"] != 0 {
		t.Errorf("stands_blocked by reason: %v, want OtherOwner 1 and every other reason 0", blocked)
	}
	if h.eng.TotalUps() != 1 {
		t.Errorf("ups %v", h.eng.Ups)
	}
	if st := h.src.statusOf(t, "local_s_dev"); st.Phase != reason.Suspended {
		t.Errorf("suspended: %+v", st)
	}
	if st := h.src.statusOf(t, "team2_o_dev"); st.Phase != reason.Blocked || st.Reason != reason.OtherOwner {
		t.Errorf("other owner: %+v", st)
	}
}

// shutdownWithin is Shutdown with a drain timeout, as the daemon gives it.
func shutdownWithin(r *Reconciler, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	return r.Shutdown(ctx)
}

func TestDrain(t *testing.T) {
	t.Run("running operations finish", func(t *testing.T) {
		h := newHarness(t, repoWith("a"), nil)
		h.eng.Gate = make(chan struct{})
		if err := h.r.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(100 * time.Millisecond)
			h.eng.Gate <- struct{}{}
		}()
		if err := shutdownWithin(h.r, time.Minute); err != nil {
			t.Fatalf("drain: %v", err)
		}
		if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready {
			t.Errorf("after the drain: %+v", st)
		}
	})
	t.Run("cancelled at the timeout", func(t *testing.T) {
		h := newHarness(t, repoWith("a"), nil)
		h.eng.Gate = make(chan struct{}) // never opens
		if err := h.r.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Cancelled, and its status committed: a clean stop (the daemon exits 0).
		if err := shutdownWithin(h.r, 200*time.Millisecond); err != nil {
			t.Fatalf("a drain that cancelled and committed: %v", err)
		}
		st := h.src.statusOf(t, "local_a_dev")
		if st.Phase != reason.Failed || st.Reason != reason.Canceled {
			t.Errorf("the final status was not committed: %+v", st)
		}
	})
	t.Run("a second signal cancels at once", func(t *testing.T) {
		h := newHarness(t, repoWith("a"), nil)
		h.eng.Gate = make(chan struct{}) // never opens
		if err := h.r.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		ctx, abort := context.WithCancel(context.Background())
		time.AfterFunc(100*time.Millisecond, abort)
		start := time.Now()
		if err := h.r.Shutdown(ctx); err != nil {
			t.Fatalf("drain: %v", err)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("the drain waited %s after the abort", took)
		}
		if st := h.src.statusOf(t, "local_a_dev"); st.Reason != reason.Canceled {
			t.Errorf("status after the abort: %+v", st)
		}
	})
	t.Run("final statuses not committed", func(t *testing.T) {
		h := newHarness(t, repoWith("a"), nil)
		h.eng.Gate = make(chan struct{}) // never opens
		if err := h.r.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		h.src.Mu.Lock()
		h.src.Down = true
		h.src.Mu.Unlock()
		if err := shutdownWithin(h.r, 200*time.Millisecond); err == nil {
			t.Fatal("a drain whose final statuses were not committed reported success")
		}
	})
}

func TestMissingSecretFailsTheStandByName(t *testing.T) {
	h := newHarness(t, repoWith("a"), nil)
	delete(h.sec.Values, "kv-password")
	h.mustCycle()
	st := h.src.statusOf(t, "local_a_dev")
	if st.Phase != reason.Failed || st.Reason != reason.Invalid || !strings.Contains(st.Message, "kv-password") || h.eng.TotalUps() != 0 {
		t.Fatalf("missing secret: %+v, ups %d", st, h.eng.TotalUps())
	}
	if h.r.Health().Secrets != nil {
		t.Error("a missing secret is not an unavailable secret store")
	}
}

func TestRemovedStandWithoutStack(t *testing.T) {
	files := repoWith("a", "b")
	files[fakes.StandFile("b")] = strings.Replace(files[fakes.StandFile("b")], "profile: small", "profile: huge", 1)
	h := newHarness(t, files, nil)
	h.mustCycle()
	h.src.Commit(map[string]string{fakes.StandFile("b"): ""})
	h.mustCycle()
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Destroyed || !strings.Contains(st.Message, "no stack") {
		t.Errorf("b: %+v", st)
	}
	if len(h.eng.Destroys) != 0 {
		t.Errorf("destroys %v", h.eng.Destroys)
	}
}

// TestQueuedDestroyOfARestoredStand: a destroy waiting for a worker is dropped when the stand comes
// back to the repository meanwhile (an accidental removal reverted).
func TestQueuedDestroyOfARestoredStand(t *testing.T) {
	h := newHarness(t, repoWith("a", "b", "c"), func(c *Config) { c.Workers = 1 })
	h.mustCycle()
	h.eng.Gate = make(chan struct{})
	ctx := context.Background()
	h.src.Commit(map[string]string{fakes.StandFile("a"): strings.Replace(fakes.StandYML("a", ""), "cache: {}", "cache: {preferences: {port: 6390}}", 1)})
	if err := h.r.Cycle(ctx); err != nil { // a's apply holds the only worker
		t.Fatal(err)
	}
	// Only once it does: a destroy started next could otherwise take the worker first.
	wait.For(t, "a's apply holds the worker", 10*time.Second, func() bool {
		h.eng.Mu.Lock()
		defer h.eng.Mu.Unlock()
		return h.eng.Running == 1
	})
	removed := h.src.Files[fakes.StandFile("c")].Data
	h.src.Commit(map[string]string{fakes.StandFile("c"): ""})
	if err := h.r.Cycle(ctx); err != nil { // c's destroy waits for the worker
		t.Fatal(err)
	}
	if st := h.r.Status("local_c_dev"); st == nil || st.Phase != reason.Progressing || st.Reason != reason.Destroying {
		t.Fatalf("c's destroy was not queued: %+v", st) // else "not destroyed" below proves nothing
	}
	h.src.Commit(map[string]string{fakes.StandFile("c"): string(removed)})
	if err := h.r.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	h.eng.Gate <- struct{}{}
	h.r.Wait()
	h.eng.Gate = nil
	h.mustCycle()
	if len(h.eng.Destroys) != 0 {
		t.Fatalf("a restored stand was destroyed: %v", h.eng.Destroys)
	}
	if st := h.src.statusOf(t, "local_c_dev"); st.Phase != reason.Ready {
		t.Errorf("c: %+v", st)
	}
}

// TestObserveBacksOff: reading a stand's outputs (its stack changed since its status was made,
// here behind a restarted reconciler's back) that fails is retried on the
// backoff, not every cycle, and so makes no commit per poll.
func TestObserveBacksOff(t *testing.T) {
	h := newHarness(t, repoWith("a"), nil)
	h.mustCycle()
	r2 := New(h.r.cfg, h.src, h.eng, h.sec)
	h.r = r2
	h.eng.Touch("local_a_dev") // a run it did not see end: its status no longer names the state
	h.eng.Fail["local_a_dev"] = reason.Wrap(reason.UpdateConflict, errors.New("read stack: another update is currently in progress"))
	h.mustCycle()
	commits, calls := h.src.Commits(), h.eng.Calls
	for range 3 {
		h.mustCycle()
	}
	if h.eng.Calls != calls || h.src.Commits() != commits {
		t.Errorf("within the backoff: %d engine calls, %d commits", h.eng.Calls-calls, h.src.Commits()-commits)
	}
	h.now = h.now.Add(time.Hour)
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready || h.eng.Calls != calls+1 {
		t.Errorf("after the backoff: %+v, %d calls", st, h.eng.Calls-calls)
	}
}

// TestForeignStackIsLeftAlone: a stack without the reconciler's mark that no stand declares is
// neither judged nor touched, and does not stop the cycle.
func TestForeignStackIsLeftAlone(t *testing.T) {
	h := newHarness(t, repoWith("a"), func(c *Config) { c.AllowMassDestroy = true })
	h.eng.Stacks["local_x_dev"] = stands.StackInfo{Project: "x", Env: "dev", Known: true}
	h.mustCycle()
	h.mustCycle()
	if len(h.eng.Destroys) != 0 || h.r.Status("local_x_dev") != nil {
		t.Errorf("a foreign stack was touched: destroys %v, status %+v", h.eng.Destroys, h.r.Status("local_x_dev"))
	}
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready {
		t.Errorf("a: %+v", st)
	}
}

// TestNoCycleStartsOnAStandBeforeItsOutcome: while an apply's connection record is being stored,
// the stand is still running: a cycle on a newer commit starts nothing on it, and the commit status
// of the apply is the outcome of that apply, not "pending" of the next.
func TestNoCycleStartsOnAStandBeforeItsOutcome(t *testing.T) {
	h, f := newForgeHarness(t, "a")
	h.mustCycle()
	gate := make(chan struct{})
	h.sec.Mu.Lock()
	h.sec.Writing = gate
	h.sec.Mu.Unlock()
	port := func(p int) map[string]string {
		return map[string]string{fakes.StandFile("a"): strings.Replace(fakes.StandYML("a", ""), "cache: {}", fmt.Sprintf("cache: {preferences: {port: %d}}", p), 1)}
	}
	h.src.Commit(port(6390)) // h002
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	wait.For(t, "the apply of h002 stores its connection record", 10*time.Second, func() bool {
		h.sec.Mu.Lock()
		blocked := h.sec.Blocked
		h.sec.Mu.Unlock()
		return blocked == 1 && h.eng.UpsOf("local_a_dev") == 2
	})
	h.src.Commit(port(6391)) // h003, while h002's record is being stored
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.Status("h003", "stands/local_a_dev"); got != "" {
		t.Errorf("an apply of h003 started before h002's outcome: %q", got)
	}
	close(gate)
	h.r.Wait()
	if got := f.Status("h002", "stands/local_a_dev"); !strings.HasPrefix(got, "success: Ready") {
		t.Errorf("stands/local_a_dev on h002: %q", got)
	}
	h.sec.Mu.Lock()
	h.sec.Writing = nil
	h.sec.Mu.Unlock()
	h.mustCycle()
	if got := f.Status("h003", "stands/local_a_dev"); !strings.HasPrefix(got, "success: Ready") || h.eng.UpsOf("local_a_dev") != 3 {
		t.Errorf("h003 afterwards: %q, %d ups", got, h.eng.UpsOf("local_a_dev"))
	}
}

// TestRenamedManifestIsNotARemoval: stand.yml renamed to stand.yaml is a stand that fails with the
// reason, not one that left the repository (one destroy per cycle is always allowed, so only this
// stands between the rename and a destroy).
func TestRenamedManifestIsNotARemoval(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), nil)
	h.mustCycle()
	h.src.Commit(map[string]string{fakes.StandFile("b"): "", "stands/b/stand.yaml": fakes.StandYML("b", "")})
	h.mustCycle()
	if len(h.eng.Destroys) != 0 {
		t.Fatalf("a renamed manifest destroyed its stand: %v", h.eng.Destroys)
	}
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Failed || st.Reason != reason.Invalid || !strings.Contains(st.Message, "must be named stand.yml") {
		t.Errorf("b: %+v", st)
	}
}

// TestOperationTimeout: an operation that hangs (a Hetzner endpoint that never answers) ends at
// --operation-timeout with Timeout, a Waiting reason tried again later, while the other stands are
// applied, and the health the /readyz endpoint reports says why.
func TestOperationTimeout(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), func(c *Config) { c.OperationTimeout, c.Workers = 300*time.Millisecond, 2 })
	h.eng.Hang = map[string]bool{"local_a_dev": true}
	start := time.Now()
	h.mustCycle()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the cycle's operations took %s", took)
	}
	a, b := h.src.statusOf(t, "local_a_dev"), h.src.statusOf(t, "local_b_dev")
	if a.Phase != reason.Failed || a.Reason != reason.Timeout || !strings.Contains(a.Message, "took longer than --operation-timeout 300ms") || a.NextAttempt == nil {
		t.Errorf("a: %s %s %q next %v", a.Phase, a.Reason, a.Message, a.NextAttempt)
	}
	if b.Phase != reason.Ready || h.eng.UpsOf("local_b_dev") != 1 {
		t.Errorf("b: %s, %d ups", b.Phase, h.eng.UpsOf("local_b_dev"))
	}
	if hl := h.r.Health(); hl.Timeout == nil || !strings.Contains(hl.Timeout.Error(), "apply of local_a_dev took longer than 300ms") {
		t.Errorf("health: %v", hl.Timeout)
	}
}

// TestStacksReadBeforeAnOperationEnds: the stacks are read while the stands are judged. A stand
// whose operation ends after its stack was read and before its judgement is held that cycle: the
// stack read is from before the operation's end, and deciding on it would apply the stand again.
func TestStacksReadBeforeAnOperationEnds(t *testing.T) {
	h := newHarness(t, repoWith("a"), nil)
	h.mustCycle()
	ctx := context.Background()
	h.eng.Gate = make(chan struct{})
	changed := strings.Replace(fakes.StandYML("a", ""), "cache: {}", "cache: {preferences: {port: 6390}}", 1)
	h.src.Commit(map[string]string{fakes.StandFile("a"): changed})
	if err := h.r.Cycle(ctx); err != nil { // a's apply starts and waits on the gate
		t.Fatal(err)
	}
	wait.For(t, "a's apply running", 10*time.Second, func() bool {
		h.eng.Mu.Lock()
		defer h.eng.Mu.Unlock()
		return h.eng.Running == 1
	})
	// The next cycle judges a anew (a commit touching it) and reads its secret only once a's
	// stack was read and its apply ended: the order the check exists for, made certain.
	h.src.Commit(map[string]string{fakes.StandFile("a"): changed + "# a comment\n"})
	reading := make(chan struct{})
	h.sec.Mu.Lock()
	h.sec.Reading = reading
	h.sec.Mu.Unlock()
	h.eng.Mu.Lock()
	h.eng.InventoryRead = func() {
		close(h.eng.Gate)
		err := wait.Until(ctx, 10*time.Second, func() error {
			if n := h.r.Controls().Running; n != 0 {
				return fmt.Errorf("%d operations running", n)
			}
			return nil
		})
		if err != nil {
			t.Errorf("a's apply did not end: %v", err)
		}
		close(reading)
	}
	h.eng.Mu.Unlock()
	h.eng.Mu.Lock()
	calls := h.eng.Calls // a's apply, running
	h.eng.Mu.Unlock()
	if err := h.r.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	h.r.Wait()
	h.eng.Mu.Lock()
	defer h.eng.Mu.Unlock()
	if n := h.eng.Calls - calls; n != 0 || h.eng.Ups["local_a_dev"] != 2 {
		t.Errorf("the cycle made %d engine calls, want none: a's stack was read before its apply ended", n)
	}
}
