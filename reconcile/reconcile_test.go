package reconcile

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/testenv"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
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
	h := &harness{t: t, src: newFakeSource(t, stands), eng: newFakeEngine(), sec: newFakeSecrets(), now: time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)}
	cfg := Config{Owner: "local", Passphrase: "pass", Now: func() time.Time { return h.now }, BackoffBase: time.Minute}
	if tune != nil {
		tune(&cfg)
	}
	h.r = New(cfg, h.src, h.eng, h.sec)
	return h
}

// cycle runs one cycle and waits for its operations.
func (h *harness) cycle() error {
	h.t.Helper()
	err := h.r.Cycle(context.Background())
	h.r.Wait()
	return err
}

func (h *harness) mustCycle() {
	h.t.Helper()
	if err := h.cycle(); err != nil {
		h.t.Fatalf("cycle: %v", err)
	}
}

func repoWith(ids ...string) map[string]string {
	m := map[string]string{}
	for _, id := range ids {
		m[standFile(id)] = standYML(id, "")
	}
	return m
}

func TestCreateThenNoop(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), nil)
	h.mustCycle()
	for _, id := range []string{"local_a_dev", "local_b_dev"} {
		if h.eng.upsOf(id) != 1 {
			t.Errorf("%s: %d ups, want 1", id, h.eng.upsOf(id))
		}
		st := h.src.statusOf(t, id)
		if st.Phase != reason.Ready || st.Reason != reason.Applied || st.SchemaVersion != SchemaVersion || len(st.Nodes) != 1 ||
			st.LastSuccessfulCommit != "h001" || st.File != "stands/"+strings.Split(id, "_")[1]+"/stand.yml" {
			t.Errorf("%s status: %+v", id, st)
		}
		if !strings.Contains(string(st.Connection), `"***"`) || strings.Contains(string(st.Connection), kvPassword) {
			t.Errorf("%s connection not masked: %s", id, st.Connection)
		}
		if !strings.Contains(h.sec.connections[id], kvPassword) {
			t.Errorf("%s: the secret store holds %q, want the unmasked record", id, h.sec.connections[id])
		}
	}
	commits := h.src.commits()
	for range 3 {
		h.mustCycle()
	}
	if h.src.commits() != commits || h.eng.totalUps() != 2 {
		t.Errorf("no-op cycles made %d commits and %d ups", h.src.commits()-commits, h.eng.totalUps()-2)
	}
	// A restarted reconciler picks up the published statuses: no commit, no up.
	r2 := New(h.r.cfg, h.src, h.eng, h.sec)
	if err := r2.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	r2.Wait()
	if h.src.commits() != commits || h.eng.totalUps() != 2 {
		t.Errorf("restart made %d commits and %d ups", h.src.commits()-commits, h.eng.totalUps()-2)
	}
}

func TestOneChangeOfFive(t *testing.T) {
	h := newHarness(t, repoWith("a", "b", "c", "d", "e"), nil)
	h.mustCycle()
	h.src.commit(map[string]string{standFile("c"): strings.Replace(standYML("c", ""), "cache: {}", "cache: {preferences: {port: 6390}}", 1)})
	h.mustCycle()
	if h.eng.totalUps() != 6 || h.eng.upsOf("local_c_dev") != 2 {
		t.Errorf("ups %v, want one more for c only", h.eng.ups)
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
	files[standFile("b")] = strings.Replace(files[standFile("b")], "profile: small", "profile: huge", 1)
	h := newHarness(t, files, nil)
	h.mustCycle()
	if h.eng.upsOf("local_a_dev") != 1 || h.eng.upsOf("local_b_dev") != 0 {
		t.Errorf("ups %v", h.eng.ups)
	}
	st := h.src.statusOf(t, "local_b_dev")
	if st.Phase != reason.Failed || st.Reason != reason.Invalid || !strings.Contains(st.Message, "stands/b/stand.yml:") || !strings.Contains(st.Message, "huge") {
		t.Errorf("b: %+v", st)
	}
	// Fixing it applies it.
	h.src.commit(repoWith("b"))
	h.mustCycle()
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Ready {
		t.Errorf("b after the fix: %+v", st)
	}
}

func TestRetriesThenStalled(t *testing.T) {
	h := newHarness(t, repoWith("a"), nil)
	for i := 1; i <= 3; i++ {
		h.eng.fail["local_a_dev"] = errors.New("pulumi up local_a_dev: boom with " + kvPassword)
		h.mustCycle()
		st := h.src.statusOf(t, "local_a_dev")
		if strings.Contains(st.Message, kvPassword) {
			t.Fatalf("the status message shows the secret: %s", st.Message)
		}
		if i < 3 && (st.Phase != reason.Failed || st.Failures != i || st.NextAttempt == nil) {
			t.Fatalf("failure %d: %+v", i, st)
		}
		if i < 3 {
			h.mustCycle() // within the backoff: no attempt
			if h.eng.upsOf("local_a_dev") != 0 {
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
	if h.eng.upsOf("local_a_dev") != 0 {
		t.Fatal("a stalled stand was retried without a change")
	}
	h.src.commit(map[string]string{standFile("a"): strings.Replace(standYML("a", ""), "cache: {}", "cache: {preferences: {port: 6390}}", 1)})
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready || h.eng.upsOf("local_a_dev") != 1 {
		t.Errorf("after the input changed: %+v", st)
	}
}

func TestWaitingNeverStalls(t *testing.T) {
	h := newHarness(t, repoWith("a"), nil)
	for range 5 {
		h.eng.fail["local_a_dev"] = reason.Wrap(reason.UpdateConflict, errors.New("pulumi up: another update is currently in progress"))
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
	h.src.down = true
	for range 3 {
		if err := h.cycle(); err == nil {
			t.Fatal("a cycle with the source down succeeded")
		}
	}
	if len(h.eng.destroys) != 0 || h.r.Health().Source == nil {
		t.Errorf("destroys %v, health %+v", h.eng.destroys, h.r.Health())
	}
	h.src.down = false
	h.mustCycle()
	if h.r.Health().Source != nil || len(h.eng.stacks) != 2 {
		t.Errorf("recovery: %+v, %d stacks", h.r.Health(), len(h.eng.stacks))
	}
}

func TestVaultDownAppliesNothing(t *testing.T) {
	var logs testenv.Buffer
	h := newHarness(t, repoWith("a", "b", "c"), func(c *Config) { c.Log = slog.New(slog.NewTextHandler(&logs, nil)) })
	h.mustCycle()
	h.sec.setDown(true)
	h.src.commit(map[string]string{standFile("a"): standYML("a", "  protect: true"), standFile("c"): ""})
	h.mustCycle()
	if h.eng.totalUps() != 3 || len(h.eng.destroys) != 0 {
		t.Fatalf("with Vault down: ups %v destroys %v", h.eng.ups, h.eng.destroys)
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
	h.sec.setDown(false)
	h.mustCycle()
	if down, again := strings.Count(logs.String(), "secret store unavailable"), strings.Count(logs.String(), "secret store answers again"); down != 5 || again != 1 {
		t.Errorf("20 cycles without Vault logged %d warnings (want 5: cycles 1-3, 10, 20) and %d recoveries (want 1):\n%s", down, again, logs.String())
	}
	if h.eng.upsOf("local_a_dev") != 2 || len(h.eng.destroys) != 1 {
		t.Errorf("recovery: ups %v destroys %v", h.eng.ups, h.eng.destroys)
	}
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Ready {
		t.Errorf("b after recovery: %+v", st)
	}
}

func TestDestroyGuards(t *testing.T) {
	h := newHarness(t, repoWith("a", "b", "c"), nil)
	h.mustCycle()
	h.src.commit(map[string]string{standFile("c"): ""})
	h.mustCycle()
	if st := h.src.statusOf(t, "local_c_dev"); st.Phase != reason.Destroyed || len(st.Nodes) != 0 || st.Connection != nil {
		t.Fatalf("c: %+v", st)
	}
	h.src.commit(map[string]string{standFile("a"): "", standFile("b"): ""})
	h.mustCycle()
	if len(h.eng.destroys) != 1 {
		t.Fatalf("removing all stands destroyed %v", h.eng.destroys)
	}
	st := h.src.statusOf(t, "local_a_dev")
	if st.Phase != reason.Blocked || st.Reason != "WouldRemoveAllStands" || !strings.Contains(st.Message, AllowDestroyFile) {
		t.Errorf("a: %+v", st)
	}
	h.src.commit(map[string]string{AllowDestroyFile: "# approved by ops\nlocal_a_dev\nlocal_b_dev\n"})
	h.mustCycle()
	if len(h.eng.destroys) != 3 {
		t.Errorf("with the override: destroys %v", h.eng.destroys)
	}
}

func TestUnreadableManifestHoldsDestroys(t *testing.T) {
	h := newHarness(t, repoWith("a", "b", "c"), nil)
	h.mustCycle()
	h.src.commit(map[string]string{standFile("c"): "stand: [\n", standFile("b"): ""})
	h.mustCycle()
	if len(h.eng.destroys) != 0 {
		t.Fatalf("destroyed %v while a manifest was unreadable", h.eng.destroys)
	}
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Blocked || !strings.Contains(st.Message, "stands/c/stand.yml") {
		t.Errorf("b: %+v", st)
	}
	if md := string(h.src.files["STATUS.md"].Data); !strings.Contains(md, "could not be read") {
		t.Errorf("STATUS.md:\n%s", md)
	}
}

func TestDriftCheck(t *testing.T) {
	h := newHarness(t, repoWith("a"), func(c *Config) { c.DriftInterval = time.Hour })
	h.mustCycle()
	h.mustCycle()
	if h.eng.drifts != 0 {
		t.Fatal("drift checked before the interval")
	}
	h.eng.drifted["local_a_dev"] = true
	h.now = h.now.Add(61 * time.Minute)
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Drifted || h.eng.upsOf("local_a_dev") != 1 {
		t.Fatalf("after drift: %+v ups %d", st, h.eng.upsOf("local_a_dev"))
	}
	// Configured to repair: the next check applies.
	h.r.cfg.DriftApply = true
	h.now = h.now.Add(61 * time.Minute)
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready || h.eng.upsOf("local_a_dev") != 2 {
		t.Errorf("drift repaired: %+v ups %d", st, h.eng.upsOf("local_a_dev"))
	}
}

func TestWorkerPoolBound(t *testing.T) {
	ids := []string{"a", "b", "c", "d", "e", "f"}
	h := newHarness(t, repoWith(ids...), func(c *Config) { c.Workers = 2 })
	h.eng.gate = make(chan struct{})
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	// A second cycle while all operations run starts none twice.
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	for range ids {
		h.eng.gate <- struct{}{}
	}
	h.r.Wait()
	if h.eng.maxRunning != 2 || h.eng.totalUps() != len(ids) {
		t.Errorf("max running %d (want 2), ups %v", h.eng.maxRunning, h.eng.ups)
	}
	if st := h.src.statusOf(t, "local_f_dev"); st.Phase != reason.Ready {
		t.Errorf("f: %+v", st)
	}
}

func TestSuspendAndOtherOwner(t *testing.T) {
	files := repoWith("a")
	files[standFile("s")] = standYML("s", "  suspend: true")
	files[standFile("o")] = standYML("o", "  owner: team2")
	h := newHarness(t, files, nil)
	h.mustCycle()
	if h.eng.totalUps() != 1 {
		t.Errorf("ups %v", h.eng.ups)
	}
	if st := h.src.statusOf(t, "local_s_dev"); st.Phase != reason.Suspended {
		t.Errorf("suspended: %+v", st)
	}
	if st := h.src.statusOf(t, "team2_o_dev"); st.Phase != reason.Blocked || st.Reason != reason.OtherOwner {
		t.Errorf("other owner: %+v", st)
	}
}

func TestDrain(t *testing.T) {
	t.Run("running operations finish", func(t *testing.T) {
		h := newHarness(t, repoWith("a"), nil)
		h.eng.gate = make(chan struct{})
		if err := h.r.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		go func() {
			time.Sleep(100 * time.Millisecond)
			h.eng.gate <- struct{}{}
		}()
		if err := h.r.Drain(time.Minute); err != nil {
			t.Fatalf("drain: %v", err)
		}
		if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready {
			t.Errorf("after the drain: %+v", st)
		}
	})
	t.Run("cancelled at the timeout", func(t *testing.T) {
		h := newHarness(t, repoWith("a"), nil)
		h.eng.gate = make(chan struct{}) // never opens
		if err := h.r.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		// Cancelled, and its status committed: a clean stop (the daemon exits 0).
		if err := h.r.Drain(200 * time.Millisecond); err != nil {
			t.Fatalf("a drain that cancelled and committed: %v", err)
		}
		st := h.src.statusOf(t, "local_a_dev")
		if st.Phase != reason.Failed || st.Reason != reason.Canceled {
			t.Errorf("the final status was not committed: %+v", st)
		}
	})
	t.Run("a second signal cancels at once", func(t *testing.T) {
		h := newHarness(t, repoWith("a"), nil)
		h.eng.gate = make(chan struct{}) // never opens
		if err := h.r.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		time.AfterFunc(100*time.Millisecond, h.r.Abort)
		start := time.Now()
		if err := h.r.Drain(time.Hour); err != nil {
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
		h.eng.gate = make(chan struct{}) // never opens
		if err := h.r.Cycle(context.Background()); err != nil {
			t.Fatal(err)
		}
		h.src.mu.Lock()
		h.src.down = true
		h.src.mu.Unlock()
		if err := h.r.Drain(200 * time.Millisecond); err == nil {
			t.Fatal("a drain whose final statuses were not committed reported success")
		}
	})
}

func TestMissingSecretFailsTheStandByName(t *testing.T) {
	h := newHarness(t, repoWith("a"), nil)
	delete(h.sec.values, "kv-password")
	h.mustCycle()
	st := h.src.statusOf(t, "local_a_dev")
	if st.Phase != reason.Failed || st.Reason != reason.Invalid || !strings.Contains(st.Message, "kv-password") || h.eng.totalUps() != 0 {
		t.Fatalf("missing secret: %+v, ups %d", st, h.eng.totalUps())
	}
	if h.r.Health().Secrets != nil {
		t.Error("a missing secret is not an unavailable secret store")
	}
}

func TestRemovedStandWithoutStack(t *testing.T) {
	files := repoWith("a", "b")
	files[standFile("b")] = strings.Replace(files[standFile("b")], "profile: small", "profile: huge", 1)
	h := newHarness(t, files, nil)
	h.mustCycle()
	h.src.commit(map[string]string{standFile("b"): ""})
	h.mustCycle()
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Destroyed || !strings.Contains(st.Message, "no stack") {
		t.Errorf("b: %+v", st)
	}
	if len(h.eng.destroys) != 0 {
		t.Errorf("destroys %v", h.eng.destroys)
	}
}

// TestQueuedDestroyOfARestoredStand: a destroy waiting for a worker is dropped when the stand comes
// back to the repository meanwhile (an accidental removal reverted).
func TestQueuedDestroyOfARestoredStand(t *testing.T) {
	h := newHarness(t, repoWith("a", "b", "c"), func(c *Config) { c.Workers = 1 })
	h.mustCycle()
	h.eng.gate = make(chan struct{})
	ctx := context.Background()
	h.src.commit(map[string]string{standFile("a"): strings.Replace(standYML("a", ""), "cache: {}", "cache: {preferences: {port: 6390}}", 1)})
	if err := h.r.Cycle(ctx); err != nil { // a's apply holds the only worker
		t.Fatal(err)
	}
	// Only once it does: a destroy started next could otherwise take the worker first.
	waitUntil(t, "a's apply holds the worker", func() bool {
		h.eng.mu.Lock()
		defer h.eng.mu.Unlock()
		return h.eng.running == 1
	})
	removed := h.src.files[standFile("c")].Data
	h.src.commit(map[string]string{standFile("c"): ""})
	if err := h.r.Cycle(ctx); err != nil { // c's destroy waits for the worker
		t.Fatal(err)
	}
	if st := h.r.Status("local_c_dev"); st == nil || st.Phase != reason.Progressing || st.Reason != reason.Destroying {
		t.Fatalf("c's destroy was not queued: %+v", st) // else "not destroyed" below proves nothing
	}
	h.src.commit(map[string]string{standFile("c"): string(removed)})
	if err := h.r.Cycle(ctx); err != nil {
		t.Fatal(err)
	}
	h.eng.gate <- struct{}{}
	h.r.Wait()
	h.eng.gate = nil
	h.mustCycle()
	if len(h.eng.destroys) != 0 {
		t.Fatalf("a restored stand was destroyed: %v", h.eng.destroys)
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
	h.eng.touch("local_a_dev") // a run it did not see end: its status no longer names the state
	h.eng.fail["local_a_dev"] = reason.Wrap(reason.UpdateConflict, errors.New("read stack: another update is currently in progress"))
	h.mustCycle()
	commits, calls := h.src.commits(), h.eng.calls
	for range 3 {
		h.mustCycle()
	}
	if h.eng.calls != calls || h.src.commits() != commits {
		t.Errorf("within the backoff: %d engine calls, %d commits", h.eng.calls-calls, h.src.commits()-commits)
	}
	h.now = h.now.Add(time.Hour)
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready || h.eng.calls != calls+1 {
		t.Errorf("after the backoff: %+v, %d calls", st, h.eng.calls-calls)
	}
}

// TestForeignStackIsLeftAlone: a stack without the reconciler's mark that no stand declares is
// neither judged nor touched, and does not stop the cycle.
func TestForeignStackIsLeftAlone(t *testing.T) {
	h := newHarness(t, repoWith("a"), func(c *Config) { c.AllowMassDestroy = true })
	h.eng.stacks["local_x_dev"] = stands.StackInfo{Project: "x", Env: "dev", Known: true}
	h.mustCycle()
	h.mustCycle()
	if len(h.eng.destroys) != 0 || h.r.Status("local_x_dev") != nil {
		t.Errorf("a foreign stack was touched: destroys %v, status %+v", h.eng.destroys, h.r.Status("local_x_dev"))
	}
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready {
		t.Errorf("a: %+v", st)
	}
}

// TestNoCycleStartsOnAStandBeforeItsOutcome: while an apply's connection record is being stored,
// the stand is still running: a cycle on a newer commit starts nothing on it, and the commit status
// of the apply is the outcome of that apply, not "pending" of the next.
func TestNoCycleStartsOnAStandBeforeItsOutcome(t *testing.T) {
	h, f := newPreviewHarness(t, "a")
	h.mustCycle()
	gate := make(chan struct{})
	h.sec.mu.Lock()
	h.sec.writing = gate
	h.sec.mu.Unlock()
	port := func(p int) map[string]string {
		return map[string]string{standFile("a"): strings.Replace(standYML("a", ""), "cache: {}", fmt.Sprintf("cache: {preferences: {port: %d}}", p), 1)}
	}
	h.src.commit(port(6390)) // h002
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	waitUntil(t, "the apply of h002 stores its connection record", func() bool {
		h.sec.mu.Lock()
		blocked := h.sec.blocked
		h.sec.mu.Unlock()
		return blocked == 1 && h.eng.upsOf("local_a_dev") == 2
	})
	h.src.commit(port(6391)) // h003, while h002's record is being stored
	if err := h.r.Cycle(context.Background()); err != nil {
		t.Fatal(err)
	}
	if got := f.status("h003", "stands/local_a_dev"); got != "" {
		t.Errorf("an apply of h003 started before h002's outcome: %q", got)
	}
	close(gate)
	h.r.Wait()
	if got := f.status("h002", "stands/local_a_dev"); !strings.HasPrefix(got, "success: Ready") {
		t.Errorf("stands/local_a_dev on h002: %q", got)
	}
	h.sec.mu.Lock()
	h.sec.writing = nil
	h.sec.mu.Unlock()
	h.mustCycle()
	if got := f.status("h003", "stands/local_a_dev"); !strings.HasPrefix(got, "success: Ready") || h.eng.upsOf("local_a_dev") != 3 {
		t.Errorf("h003 afterwards: %q, %d ups", got, h.eng.upsOf("local_a_dev"))
	}
}

// TestRenamedManifestIsNotARemoval: stand.yml renamed to stand.yaml is a stand that fails with the
// reason, not one that left the repository (one destroy per cycle is always allowed, so only this
// stands between the rename and a destroy).
func TestRenamedManifestIsNotARemoval(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), nil)
	h.mustCycle()
	h.src.commit(map[string]string{standFile("b"): "", "stands/b/stand.yaml": standYML("b", "")})
	h.mustCycle()
	if len(h.eng.destroys) != 0 {
		t.Fatalf("a renamed manifest destroyed its stand: %v", h.eng.destroys)
	}
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Failed || st.Reason != reason.Invalid || !strings.Contains(st.Message, "must be named stand.yml") {
		t.Errorf("b: %+v", st)
	}
}

// waitUntil polls cond for up to 10 s, failing the test with what it waited for.
func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	waitWithin(t, 10*time.Second, time.Millisecond, what, cond)
}

// waitWithin checks cond every poll until it holds, failing the test after within.
func waitWithin(t *testing.T, within, poll time.Duration, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(within); !cond(); time.Sleep(poll) {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", within, what)
		}
	}
}

// TestOperationTimeout: an operation that hangs (a Hetzner endpoint that never answers) ends at
// --operation-timeout with Timeout, a Waiting reason tried again later, while the other stands are
// applied, and the health the /readyz endpoint reports says why.
func TestOperationTimeout(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), func(c *Config) { c.OperationTimeout, c.Workers = 300*time.Millisecond, 2 })
	h.eng.hang = map[string]bool{"local_a_dev": true}
	start := time.Now()
	h.mustCycle()
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("the cycle's operations took %s", took)
	}
	a, b := h.src.statusOf(t, "local_a_dev"), h.src.statusOf(t, "local_b_dev")
	if a.Phase != reason.Failed || a.Reason != reason.Timeout || !strings.Contains(a.Message, "took longer than --operation-timeout 300ms") || a.NextAttempt == nil {
		t.Errorf("a: %s %s %q next %v", a.Phase, a.Reason, a.Message, a.NextAttempt)
	}
	if b.Phase != reason.Ready || h.eng.upsOf("local_b_dev") != 1 {
		t.Errorf("b: %s, %d ups", b.Phase, h.eng.upsOf("local_b_dev"))
	}
	if hl := h.r.Health(); hl.Timeout == nil || !strings.Contains(hl.Timeout.Error(), "apply of local_a_dev took longer than 300ms") {
		t.Errorf("health: %v", hl.Timeout)
	}
}
