package reconcile

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/fakes"
)

// TestStatusShowsLifetimeAndCost: each stand's end and monthly cost are in its status file and in
// STATUS.md with the total; the repository's default counts from when the stand was first seen and
// stays put across a restart; an extension changes the end and applies nothing.
func TestStatusShowsLifetimeAndCost(t *testing.T) {
	files := repoWith("a", "b", "c")
	files[fakes.StandFile("a")] = fakes.StandYML("a", "  expires: 2026-12-24T18:00:00+03:00")
	files[fakes.StandFile("c")] = fakes.StandYML("c", "  protect: true")
	files[manifest.LifetimeFile] = "default: 3d\nmaximum: 30d\n"
	h := newHarness(t, files, func(c *Config) { c.Prices.Pricer = fakes.NewEngine() })
	first := h.now
	h.mustCycle()

	a, b, c := h.src.statusOf(t, "local_a_dev"), h.src.statusOf(t, "local_b_dev"), h.src.statusOf(t, "local_c_dev")
	if a.Expires == nil || !a.Expires.Equal(time.Date(2026, 12, 24, 15, 0, 0, 0, time.UTC)) || a.ExpiresBy != manifest.ByManifest {
		t.Errorf("a declares its end: %v by %q", a.Expires, a.ExpiresBy)
	}
	if b.Expires == nil || !b.Expires.Equal(first.Add(72*time.Hour)) || b.ExpiresBy != manifest.ByDefault || !b.DeclaredSince.Equal(first) {
		t.Errorf("b takes the default from %v: %v by %q since %v", first, b.Expires, b.ExpiresBy, b.DeclaredSince)
	}
	if c.Expires != nil || c.ExpiresBy != "" {
		t.Errorf("c is protected and never ends: %v by %q", c.Expires, c.ExpiresBy)
	}
	for _, st := range []Status{a, b, c} {
		if st.MonthlyCost == nil || *st.MonthlyCost != (Cost{Amount: 4.51, Currency: "EUR"}) {
			t.Errorf("%s costs %+v; want 4.51 EUR", st.ID, st.MonthlyCost)
		}
	}
	md := h.statusMD()
	for _, want := range []string{"| Ends | Monthly cost |", "`2026-12-24 15:00 UTC` | `4.51 EUR`", "`2026-12-03 08:00 UTC` (default) | `4.51 EUR`",
		"| never | `4.51 EUR`", "**Total monthly cost: `13.53 EUR`**"} {
		if !strings.Contains(md, want) {
			t.Errorf("STATUS.md lacks %q:\n%s", want, md)
		}
	}

	// A day later, restarted: b's default end stays where it was; no commit, no apply.
	h.now = h.now.Add(24 * time.Hour)
	commits, ups := h.src.Commits(), h.eng.TotalUps()
	h.r = New(h.r.cfg, h.src, h.eng, h.sec)
	h.mustCycle()
	if b := h.src.statusOf(t, "local_b_dev"); !b.Expires.Equal(first.Add(72*time.Hour)) || h.src.Commits() != commits || h.eng.TotalUps() != ups {
		t.Errorf("after a restart: b ends %v; %d commits, %d ups", b.Expires, h.src.Commits()-commits, h.eng.TotalUps()-ups)
	}

	// An extension is a new end and no apply.
	h.src.Commit(map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  expires: 2026-12-28T00:00:00Z")})
	h.mustCycle()
	if a := h.src.statusOf(t, "local_a_dev"); !a.Expires.Equal(time.Date(2026, 12, 28, 0, 0, 0, 0, time.UTC)) || a.Phase != reason.Ready {
		t.Errorf("after the extension: %v, %s", a.Expires, a.Phase)
	}
	if h.eng.TotalUps() != ups {
		t.Errorf("an extension applied: %d ups", h.eng.TotalUps()-ups)
	}
}

// TestLifetimeWithoutPrices: a cost the prices cannot tell is left out and counted as unknown.
func TestLifetimeWithoutPrices(t *testing.T) {
	h := newHarness(t, repoWith("a"), func(c *Config) { c.Prices.Pricer = failingPricer{} })
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.MonthlyCost != nil || st.Expires != nil {
		t.Errorf("cost %+v, end %v", st.MonthlyCost, st.Expires)
	}
	if md := h.statusMD(); strings.Contains(md, "Total monthly cost") {
		t.Errorf("a total without any price:\n%s", md)
	}
}

type failingPricer struct{}

func (failingPricer) Prices(context.Context) (stands.Prices, error) {
	return nil, errors.New("hetzner: 503 Service Unavailable")
}

// TestPastItsEndNothingIsDestroyed: a stand past its end is Expired in its status, STATUS.md and
// the phase gauge, cycle after cycle, and neither destroyed nor applied again; an extension makes it
// Ready, and only a commit removing it destroys it.
func TestPastItsEndNothingIsDestroyed(t *testing.T) {
	reg := prometheus.NewRegistry()
	files := repoWith("a", "b")
	files[fakes.StandFile("a")] = fakes.StandYML("a", "  expires: 2026-11-30T09:00:00Z")
	files[manifest.LifetimeFile] = "default: 2h\n"
	h := newHarness(t, files, func(c *Config) { c.Metrics = reg; c.Branch = "main" })
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready {
		t.Fatalf("before its end: %s", st.Phase)
	}
	ups := h.eng.TotalUps()
	for range 5 { // hours past both ends: a's declared one and b's default
		h.now = h.now.Add(time.Hour)
		h.mustCycle()
	}
	for id, want := range map[string]string{
		"local_a_dev": "ended at 2026-11-30 09:00 UTC (stand.expires, stands/a/stand.yml:5:12); it stays until a commit on main removes it",
		"local_b_dev": "ended at 2026-11-30 10:00 UTC (the repository's default lifetime, .stands/lifetime.yml:1:10)",
	} {
		if st := h.src.statusOf(t, id); st.Phase != reason.Expired || st.Reason != reason.Ended || !strings.Contains(st.Message, want) {
			t.Errorf("%s: %s %s %q; want Expired, %q", id, st.Phase, st.Reason, st.Message, want)
		}
	}
	if len(h.eng.Destroys) != 0 || h.eng.TotalUps() != ups {
		t.Errorf("past their ends: destroys %v, %d ups", h.eng.Destroys, h.eng.TotalUps()-ups)
	}
	if got := gauge(t, reg, "stands_stands", map[string]string{"phase": "Expired"}); got != 2 {
		t.Errorf("stands_stands{phase=Expired} = %v, want 2", got)
	}
	if md := h.statusMD(); !strings.Contains(md, "| `Expired` | `Expired` |") || !strings.Contains(md, "`2026-11-30 10:00 UTC` (default)") {
		t.Errorf("STATUS.md:\n%s", md)
	}

	// An extension: Ready again, nothing applied.
	h.src.Commit(map[string]string{fakes.StandFile("a"): fakes.StandYML("a", "  expires: 2026-12-30T09:00:00Z")})
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready || st.Reason != reason.UpToDate || h.eng.TotalUps() != ups {
		t.Errorf("extended: %s %s, %d ups", st.Phase, st.Reason, h.eng.TotalUps()-ups)
	}
	// A commit removing b: destroyed.
	h.src.Commit(map[string]string{fakes.StandFile("b"): ""})
	h.mustCycle()
	if len(h.eng.Destroys) != 1 || h.eng.Destroys[0] != "local_b_dev" {
		t.Errorf("destroys %v, want b's after the commit removing it", h.eng.Destroys)
	}
}

// TestARemovalMergedAtTheEndPassesTheGate: with the review gate on, the destroy of a stand whose
// removal pull request the reconciler merges under merge_at_expiry waits while the merge is under
// way (neither destroyed nor reported unreviewed), and goes through once it succeeded; another
// stand's removal in the same commit is held.
func TestARemovalMergedAtTheEndPassesTheGate(t *testing.T) {
	h := newHarness(t, repoWith("a", "b", "c", "d"), func(c *Config) {
		c.Review.Require, c.Review.State = true, t.TempDir()+"/reviews.json"
	})
	h.mustCycle() // the first import
	h.r.ApproveRemoval("local_a_dev", "merge_at_expiry (.stands/lifetime.yml:3:18): #7")
	h.src.Commit(map[string]string{fakes.StandFile("a"): "", fakes.StandFile("b"): ""})
	h.mustCycle() // the merge's push, before Gitea answered the merge
	if st := h.src.statusOf(t, "local_a_dev"); len(h.eng.Destroys) != 0 || st.Reason == reason.Unreviewed {
		t.Errorf("while its merge is under way: destroys %v, a %s %s", h.eng.Destroys, st.Phase, st.Reason)
	}
	h.r.ConfirmRemoval("local_a_dev")
	h.mustCycle()
	if len(h.eng.Destroys) != 1 || h.eng.Destroys[0] != "local_a_dev" {
		t.Errorf("destroys %v, want a's alone", h.eng.Destroys)
	}
	if st := h.src.statusOf(t, "local_b_dev"); st.Phase != reason.Blocked || st.Reason != reason.Unreviewed {
		t.Errorf("b, removed without a review: %s %s", st.Phase, st.Reason)
	}
}

// TestARemovalApprovalEnds: the lifetime policy's approval of a removal is taken back when its merge
// failed, and ends on its own 15 minutes on: neither lets a later removal around review through.
func TestARemovalApprovalEnds(t *testing.T) {
	for _, c := range []struct {
		name string
		end  func(h *harness)
	}{
		{"its merge failed", func(h *harness) { h.r.RevokeRemoval("local_a_dev") }},
		{"15 minutes on", func(h *harness) { h.now = h.now.Add(16 * time.Minute) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			h := newHarness(t, repoWith("a", "b", "c", "d"), func(cfg *Config) {
				cfg.Review.Require, cfg.Review.State = true, t.TempDir()+"/reviews.json"
			})
			h.mustCycle() // the first import
			h.r.ApproveRemoval("local_a_dev", "merge_at_expiry (.stands/lifetime.yml:3:18): #7")
			h.mustCycle()
			c.end(h)
			h.src.Commit(map[string]string{fakes.StandFile("a"): ""})
			h.mustCycle()
			if st := h.src.statusOf(t, "local_a_dev"); len(h.eng.Destroys) != 0 || st.Reason != reason.Unreviewed {
				t.Errorf("a removal around review after the approval ended: destroys %v, %s %s", h.eng.Destroys, st.Phase, st.Reason)
			}
		})
	}
}
