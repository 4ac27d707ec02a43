package reconcile

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

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
	h := newHarness(t, files, func(c *Config) { c.Prices = fakes.NewEngine() })
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
	h := newHarness(t, repoWith("a"), func(c *Config) { c.Prices = failingPricer{} })
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
