package prplan

import (
	"encoding/json"
	"maps"
	"testing"
	"testing/fstest"
	"time"

	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/fakes"
)

var (
	_ Forge             = (*fakes.Forge)(nil)
	_ Refs              = (*fakes.Forge)(nil)
	_ Previewer         = (*fakes.Engine)(nil)
	_ reconcile.Plans   = (*Planner)(nil)
	_ reconcile.Forge   = (*fakes.Forge)(nil)
	_ reconcile.Secrets = (*fakes.Secrets)(nil)
)

// harness runs the loop (package reconcile) on the fakes with this package's plans attached, as the
// daemon does: the fake Gitea's open pull requests are planned after each cycle.
type harness struct {
	t     *testing.T
	src   *fakes.Source
	eng   *fakes.Engine
	sec   *fakes.Secrets
	forge *fakes.Forge
	cfg   reconcile.Config
	plc   Config
	r     *reconcile.Reconciler
	pl    *Planner
}

func newHarness(t *testing.T, files map[string]string, tune func(*reconcile.Config, *Config)) *harness {
	h := &harness{t: t, src: fakes.NewSource(t, files), eng: fakes.NewEngine(), sec: fakes.NewSecrets(), forge: fakes.NewForge()}
	now := time.Date(2026, 11, 30, 8, 0, 0, 0, time.UTC)
	h.cfg = reconcile.Config{Owner: "local", Passphrase: "pass", Now: func() time.Time { return now }, BackoffBase: time.Minute,
		Branch: "main", StatusBranch: "main", Forge: h.forge}
	h.plc = Config{Branch: "main", Passphrase: "pass", MergeWait: 50 * time.Millisecond}
	if tune != nil {
		tune(&h.cfg, &h.plc)
	}
	h.start()
	return h
}

// newPreviewHarness is a harness on the given stands with the fake Gitea it plans for.
func newPreviewHarness(t *testing.T, ids ...string) (*harness, *fakes.Forge) {
	h := newHarness(t, repoWith(ids...), nil)
	return h, h.forge
}

// start makes the reconciler and its plans from the configurations, at the harness's start and at
// each restart. The plans take the loop's destroy guards, as the daemon gives them.
func (h *harness) start() {
	h.plc.Guards = judge.Guards{Owner: h.cfg.Owner, MaxDestroyShare: h.cfg.MaxDestroyShare, AllowMassDestroy: h.cfg.AllowMassDestroy}
	h.pl = New(h.plc, h.forge, h.eng, h.forge, h.sec)
	h.cfg.Plans = h.pl
	if h.cfg.Review.Require {
		h.cfg.Review.Reviews = h.pl
	}
	h.r = reconcile.New(h.cfg, h.src, h.eng, h.sec)
}

// mustCycle runs one cycle and waits for its operations and plans.
func (h *harness) mustCycle() {
	h.t.Helper()
	fakes.MustCycle(h.t, h.r)
}

func (h *harness) files() fstest.MapFS {
	h.src.Mu.Lock()
	defer h.src.Mu.Unlock()
	return maps.Clone(h.src.Files)
}

// statusOf is a stand's status file as the loop published it.
func (h *harness) statusOf(t *testing.T, id string) reconcile.Status {
	t.Helper()
	data, ok := h.src.StatusFile(stands.StatusPath(id))
	if !ok {
		t.Fatalf("no status file for %s", id)
	}
	var st reconcile.Status
	if err := json.Unmarshal(data, &st); err != nil {
		t.Fatal(err)
	}
	return st
}

func repoWith(ids ...string) map[string]string {
	m := map[string]string{}
	for _, id := range ids {
		m[fakes.StandFile(id)] = fakes.StandYML(id, "")
	}
	return m
}
