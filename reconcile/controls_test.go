package reconcile

import (
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/test/fakes"
)

// portChange is a commit changing stand p's spec: only a pause or plan-only stands between it and
// a pulumi up.
func portChange(p string, port int) map[string]string {
	return map[string]string{fakes.StandFile(p): strings.Replace(fakes.StandYML(p, ""), "cache: {}", "cache: {preferences: {port: "+strconv.Itoa(port)+"}}", 1)}
}

func (h *harness) statusMD() string {
	h.src.Mu.Lock()
	defer h.src.Mu.Unlock()
	if f := h.src.Files["STATUS.md"]; f != nil {
		return string(f.Data)
	}
	return ""
}

// TestPause: while .stands/pause is committed, or the local switch is on, nothing is applied,
// destroyed or checked; the stands with work waiting say so, and STATUS.md names who paused and why.
// The local pause survives a restart. Resumed, the waiting work is done.
func TestPause(t *testing.T) {
	for _, c := range []struct {
		name   string
		pause  func(h *harness)
		resume func(h *harness)
		want   string // in the held stands' messages
	}{
		{"committed", func(h *harness) {
			h.src.Commit(map[string]string{PauseFile: "incident 42: Hetzner is degraded\nmore text\n"})
		},
			func(h *harness) { h.src.Commit(map[string]string{PauseFile: ""}) }, "paused by .stands/pause at h00"},
		{"local", func(h *harness) {
			if err := h.r.Pause("alice (uid 1000)", "incident 42: Hetzner is degraded"); err != nil {
				t.Fatal(err)
			}
		}, func(h *harness) {
			if err := h.r.Resume("alice (uid 1000)"); err != nil {
				t.Fatal(err)
			}
		}, "paused by alice (uid 1000)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			state := filepath.Join(t.TempDir(), "controls.json")
			h := newHarness(t, repoWith("a", "b", "c"), func(cfg *Config) {
				cfg.Controls.State, cfg.DriftInterval, cfg.AllowMassDestroy = state, time.Hour, true
			})
			h.mustCycle()
			h.now = h.now.Add(2 * time.Hour) // drift checks due
			c.pause(h)
			h.src.Commit(portChange("a", 6391))
			h.src.Commit(map[string]string{fakes.StandFile("b"): ""})
			ups, drifts := h.eng.TotalUps(), h.eng.Drifts
			h.mustCycle()
			if c.name == "local" { // a restart keeps the local pause
				h.r = New(h.r.cfg, h.src, h.eng, h.sec)
				h.mustCycle()
			}
			if got := h.eng.TotalUps() - ups; got != 0 {
				t.Errorf("%d pulumi up while paused", got)
			}
			if len(h.eng.Destroys) != 0 || h.eng.Drifts != drifts {
				t.Errorf("while paused: destroys %v, %d drift checks", h.eng.Destroys, h.eng.Drifts-drifts)
			}
			for id, would := range map[string]string{"local_a_dev": "apply it", "local_b_dev": "destroy it"} {
				st := h.src.statusOf(t, id)
				if st.Phase != reason.Blocked || st.Reason != reason.Paused || !strings.Contains(st.Message, c.want) ||
					!strings.Contains(st.Message, "incident 42: Hetzner is degraded;") || !strings.Contains(st.Message, would) {
					t.Errorf("%s while paused: %+v", id, st)
				}
			}
			if st := h.src.statusOf(t, "local_c_dev"); st.Phase != reason.Ready {
				t.Errorf("c, which has nothing to do, while paused: %+v", st)
			}
			if md := h.statusMD(); !strings.Contains(md, "> **Paused** by") || !strings.Contains(md, "incident 42") {
				t.Errorf("STATUS.md while paused:\n%s", md)
			}
			if v := h.r.Controls(); !v.Paused {
				t.Errorf("controls while paused: %+v", v)
			}
			commits := h.src.Commits()
			h.mustCycle()
			if h.src.Commits() != commits {
				t.Error("a second paused cycle committed again")
			}

			c.resume(h)
			h.mustCycle()
			if h.eng.UpsOf("local_a_dev") != 2 || len(h.eng.Destroys) != 1 {
				t.Errorf("after the resume: ups %v, destroys %v", h.eng.Ups, h.eng.Destroys)
			}
			if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready {
				t.Errorf("a after the resume: %+v", st)
			}
			if md := h.statusMD(); strings.Contains(md, "Paused") {
				t.Errorf("STATUS.md after the resume:\n%s", md)
			}
		})
	}
	t.Run("controls file unreadable: starts paused", func(t *testing.T) {
		state := filepath.Join(t.TempDir(), "controls.json")
		if err := os.WriteFile(state, []byte("{not json"), 0o600); err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, repoWith("a"), func(cfg *Config) { cfg.Controls.State = state })
		h.mustCycle()
		if h.eng.TotalUps() != 0 {
			t.Errorf("%d ups with the controls unreadable", h.eng.TotalUps())
		}
		if st := h.src.statusOf(t, "local_a_dev"); st.Reason != reason.Paused || !strings.Contains(st.Message, "could not be read") {
			t.Errorf("a: %+v", st)
		}
	})
}

// TestPlanOnly: each stand's status says what would be created, applied or destroyed, nothing is;
// drift checks go on, and a drift is not repaired.
func TestPlanOnly(t *testing.T) {
	h := newHarness(t, repoWith("a", "b"), func(cfg *Config) { cfg.DriftInterval, cfg.DriftApply, cfg.AllowMassDestroy = time.Hour, true, true })
	h.mustCycle()
	if err := h.r.SetPlanOnly(true, "bob (uid 0)"); err != nil {
		t.Fatal(err)
	}
	h.src.Commit(repoWith("n"))
	h.src.Commit(portChange("a", 6392))
	h.src.Commit(map[string]string{fakes.StandFile("b"): ""})
	h.eng.Drifted["local_a_dev"] = true
	ups := h.eng.TotalUps()
	h.mustCycle()
	h.now = h.now.Add(2 * time.Hour)
	h.mustCycle()
	if got := h.eng.TotalUps() - ups; got != 0 || len(h.eng.Destroys) != 0 {
		t.Errorf("plan-only: %d ups, destroys %v", got, h.eng.Destroys)
	}
	for id, would := range map[string]string{"local_n_dev": "would create it", "local_a_dev": "would apply it", "local_b_dev": "would destroy it"} {
		st := h.src.statusOf(t, id)
		if st.Phase != reason.Blocked || st.Reason != reason.PlanOnly || !strings.Contains(st.Message, "plan-only mode: "+would) {
			t.Errorf("%s: %+v", id, st)
		}
	}
	if md := h.statusMD(); !strings.Contains(md, "> **Plan-only** (`bob (uid 0)` since") {
		t.Errorf("STATUS.md:\n%s", md)
	}
	// Off again: the reported work is done.
	if err := h.r.SetPlanOnly(false, "bob (uid 0)"); err != nil {
		t.Fatal(err)
	}
	h.mustCycle()
	if h.eng.UpsOf("local_n_dev") != 1 || h.eng.UpsOf("local_a_dev") != 2 || len(h.eng.Destroys) != 1 {
		t.Errorf("after plan-only: ups %v, destroys %v", h.eng.Ups, h.eng.Destroys)
	}

	// Drift checks run in plan-only mode; the drift is reported, not applied.
	h2 := newHarness(t, repoWith("a"), func(cfg *Config) { cfg.DriftInterval, cfg.DriftApply, cfg.Controls.PlanOnly = time.Hour, true, false })
	h2.mustCycle()
	h2.r.sw.configured = true // --plan-only, as if the daemon were started again with it
	h2.eng.Drifted["local_a_dev"] = true
	h2.now = h2.now.Add(2 * time.Hour)
	h2.mustCycle()
	if h2.eng.Drifts != 1 || h2.eng.UpsOf("local_a_dev") != 1 {
		t.Errorf("plan-only drift: %d checks, %d ups", h2.eng.Drifts, h2.eng.UpsOf("local_a_dev"))
	}
	if st := h2.src.statusOf(t, "local_a_dev"); st.Phase != reason.Drifted {
		t.Errorf("a drifted in plan-only mode: %+v", st)
	}
}

// TestRetry: a Stalled stand is not attempted again on its spec (the control), until an operator's
// retry, which its status records; a stand never seen is an error.
func TestRetry(t *testing.T) {
	h := newHarness(t, repoWith("a"), nil)
	for range 3 {
		h.eng.Mu.Lock()
		h.eng.Fail["local_a_dev"] = errors.New("exit status 1")
		h.eng.Mu.Unlock()
		h.mustCycle()
		h.now = h.now.Add(time.Hour)
	}
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Stalled {
		t.Fatalf("after three failures: %+v", st)
	}
	calls := h.eng.Calls
	h.mustCycle()
	if h.eng.Calls != calls {
		t.Fatalf("a Stalled stand was attempted again without a retry")
	}
	if err := h.r.Retry("local_a_dev", "carol (uid 0)"); err != nil {
		t.Fatal(err)
	}
	h.mustCycle()
	st := h.src.statusOf(t, "local_a_dev")
	if st.Phase != reason.Ready || h.eng.UpsOf("local_a_dev") != 1 {
		t.Errorf("after the retry: %+v, ups %d", st, h.eng.UpsOf("local_a_dev"))
	}
	if st.Operator == nil || st.Operator.Action != "retry" || st.Operator.By != "carol (uid 0)" {
		t.Errorf("the retry is not in the status: %+v", st.Operator)
	}
	if err := h.r.Retry("local_zz_dev", "carol"); !errors.Is(err, ErrUnknownStand) {
		t.Errorf("retry of an unknown stand: %v", err)
	}
}
