package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/fakes"
)

// fakeChecker answers health checks from what the test sets, per stand project.
type fakeChecker struct {
	mu       sync.Mutex
	health   map[string]*stands.Health // by project; absent: healthy, one instance
	err      error
	checks   int
	restarts []string // project/instance
	// heals: a restart makes the instance healthy (otherwise it stays as it was).
	heals bool
	// hang: a restart returns only when its context ends (as over SSH to a server that stopped
	// answering), at restartEnded.
	hang         bool
	restartEnded time.Time
}

func newFakeChecker() *fakeChecker { return &fakeChecker{health: map[string]*stands.Health{}} }

func (c *fakeChecker) Health(_ context.Context, ref stands.StackRef) (*stands.Health, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.checks++
	if c.err != nil {
		return nil, c.err
	}
	h, ok := c.health[ref.Project]
	if !ok {
		return &stands.Health{Instances: []stands.InstanceHealth{{Instance: "web--front", Server: "s1", State: "active"}}}, nil
	}
	// A copy: the reconciler adds problems of its own.
	out := &stands.Health{Unreachable: slices.Clone(h.Unreachable)}
	for _, in := range h.Instances {
		in.Problems = slices.Clone(in.Problems)
		out.Instances = append(out.Instances, in)
	}
	return out, nil
}

func (c *fakeChecker) Restart(ctx context.Context, ref stands.StackRef, instance string) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.restarts = append(c.restarts, ref.Project+"/"+instance)
	if c.hang {
		c.mu.Unlock()
		<-ctx.Done()
		c.mu.Lock()
		c.restartEnded = time.Now()
		return fmt.Errorf("restart %s: %w", instance, ctx.Err())
	}
	if h, ok := c.health[ref.Project]; ok && c.heals {
		for i := range h.Instances {
			if h.Instances[i].Instance == instance {
				h.Instances[i].Problems = nil
			}
		}
	}
	return nil
}

func (c *fakeChecker) set(project string, h *stands.Health) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if h == nil {
		delete(c.health, project)
		return
	}
	c.health[project] = h
}

func stopped(instance string) *stands.Health {
	return &stands.Health{Instances: []stands.InstanceHealth{
		{Instance: instance, Server: "local-a-dev-main", State: "inactive/dead", Problems: []string{"unit inactive"}},
		{Instance: "kv--cache", Server: "local-a-dev-main", State: "active"},
	}}
}

func healthHarness(t *testing.T, tune func(*Config)) (*harness, *fakeChecker, *fakes.Forge) {
	chk, forge := newFakeChecker(), fakes.NewForge()
	h := newHarness(t, repoWith("a"), func(c *Config) {
		c.Health.Checker, c.Health.Interval, c.Forge, c.Health.Settle = chk, time.Minute, forge, time.Millisecond
		if tune != nil {
			tune(c)
		}
	})
	h.eng.NodesMode = "full"
	h.mustCycle()
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready {
		t.Fatalf("after the apply: %+v", st)
	}
	return h, chk, forge
}

// TestHealthDegradedOnceAndRecovered: an instance found down makes the stand Degraded, naming the
// instance and why, in its status file and STATUS.md and as a failing commit status on the applied
// commit; further checks finding the same make no status commit; recovery makes it Ready again.
// Nothing is applied or destroyed for it.
func TestHealthDegradedOnceAndRecovered(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	h, chk, forge := healthHarness(t, func(c *Config) { c.Metrics = reg })
	applied := h.src.statusOf(t, "local_a_dev").LastSuccessfulCommit
	ups, calls := h.eng.TotalUps(), h.eng.Calls

	h.r.HealthCycle(context.Background())
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready || st.Health != nil {
		t.Fatalf("healthy: %+v", st)
	}
	commits := h.src.Commits()

	chk.set("a", stopped("web--front"))
	h.r.HealthCycle(context.Background())
	st := h.src.statusOf(t, "local_a_dev")
	if st.Phase != reason.Degraded || st.Reason != reason.InstanceUnhealthy || st.Message != "web--front: unit inactive" ||
		st.Health == nil || len(st.Health.Instances) != 1 || st.Health.Instances[0].Instance != "web--front" {
		t.Fatalf("a unit stopped: %+v (health %+v)", st, st.Health)
	}
	if got := forge.Statuses[applied+" stands/local_a_dev"]; got != "failure: Degraded: web--front: unit inactive" {
		t.Errorf("commit status on the applied commit %s: %q", applied, got)
	}
	if md := string(h.src.Files["STATUS.md"].Data); !strings.Contains(md, "Degraded") || !strings.Contains(md, "web--front: unit inactive") {
		t.Errorf("STATUS.md does not show the degraded stand:\n%s", md)
	}
	if h.src.Commits() != commits+1 {
		t.Errorf("%d status commits for the stand becoming Degraded, want 1", h.src.Commits()-commits)
	}
	degraded := h.src.Commits()
	for range 5 {
		h.now = h.now.Add(time.Minute)
		h.r.HealthCycle(context.Background())
		h.mustCycle()
	}
	if n := h.src.Commits() - degraded; n != 0 {
		t.Errorf("a stand that stays Degraded made %d more status commits over 5 checks", n)
	}
	if h.eng.TotalUps() != ups || len(h.eng.Destroys) != 0 || h.eng.Calls != calls {
		t.Errorf("a Degraded stand was operated on: ups %d→%d, calls %d→%d, destroys %v", ups, h.eng.TotalUps(), calls, h.eng.Calls, h.eng.Destroys)
	}
	if len(chk.restarts) != 0 {
		t.Errorf("restarted without --heal: %v", chk.restarts)
	}
	if got := gauge(t, reg, "stands_health_checks_total", map[string]string{"result": "unhealthy"}); got != 6 {
		t.Errorf("stands_health_checks_total{result=unhealthy} = %v, want 6", got)
	}

	chk.set("a", nil)
	h.r.HealthCycle(context.Background())
	st = h.src.statusOf(t, "local_a_dev")
	if st.Phase != reason.Ready || st.Reason != reason.Recovered || st.Health != nil {
		t.Errorf("recovered: %+v", st)
	}
	if got := gauge(t, reg, "stands_stands", map[string]string{"phase": "Degraded"}); got != 0 {
		t.Errorf("stands_stands{phase=Degraded} = %v after the recovery", got)
	}
	if got := forge.Statuses[applied+" stands/local_a_dev"]; !strings.HasPrefix(got, "success: Ready") {
		t.Errorf("commit status after the recovery: %q", got)
	}
}

// TestHealthNodeUnreachable: a server SSH does not reach makes the stand Degraded NodeUnreachable;
// it is neither applied again nor destroyed, healed or not.
func TestHealthNodeUnreachable(t *testing.T) {
	h, chk, _ := healthHarness(t, func(c *Config) { c.Health.Heal = true })
	ups := h.eng.TotalUps()
	chk.set("a", &stands.Health{Unreachable: []stands.UnreachableNode{{Server: "local-a-dev-main", Error: "dial tcp: i/o timeout"}}})
	for range 3 {
		h.now = h.now.Add(time.Minute)
		h.r.HealthCycle(context.Background())
		h.mustCycle()
	}
	st := h.src.statusOf(t, "local_a_dev")
	if st.Phase != reason.Degraded || st.Reason != reason.NodeUnreachable || st.Message != "local-a-dev-main: unreachable over SSH" {
		t.Errorf("unreachable: %+v", st)
	}
	if h.eng.TotalUps() != ups || len(h.eng.Destroys) != 0 || len(chk.restarts) != 0 || h.eng.Repairs != 0 {
		t.Errorf("an unreachable node was acted on: ups %d→%d, destroys %v, restarts %v, repairs %d", ups, h.eng.TotalUps(), h.eng.Destroys, chk.restarts, h.eng.Repairs)
	}
}

// TestHealRestartsThenApplies: with --heal an unhealthy instance is restarted, and a restart that
// helps returns the stand to Ready; one that does not makes the next cycle apply the stand again,
// reading its instances back; every step is in the status.
func TestHealRestartsThenApplies(t *testing.T) {
	t.Run("a restart heals", func(t *testing.T) {
		h, chk, _ := healthHarness(t, func(c *Config) { c.Health.Heal = true })
		chk.heals = true
		chk.set("a", stopped("web--front"))
		h.r.HealthCycle(context.Background())
		st := h.src.statusOf(t, "local_a_dev")
		if !slices.Equal(chk.restarts, []string{"a/web--front"}) || st.Phase != reason.Ready || st.Reason != reason.Recovered {
			t.Errorf("restarts %v, status %+v", chk.restarts, st)
		}
		if len(st.Healing) != 1 || st.Healing[0].Instance != "web--front" || st.Healing[0].Action != "restart" || st.Healing[0].Result != "restarted" {
			t.Errorf("healing steps: %+v", st.Healing)
		}
		if h.eng.Repairs != 0 {
			t.Errorf("applied again after a restart that helped")
		}
	})
	t.Run("a restart does not help", func(t *testing.T) {
		h, chk, _ := healthHarness(t, func(c *Config) { c.Health.Heal = true })
		chk.set("a", stopped("web--front"))
		h.r.HealthCycle(context.Background())
		if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Degraded || len(st.Healing) != 2 || st.Healing[1].Action != "apply" {
			t.Fatalf("after the restart: %+v, healing %+v", st, st.Healing)
		}
		h.mustCycle()
		if h.eng.Repairs != 1 {
			t.Fatalf("repairing applies: %d, want 1", h.eng.Repairs)
		}
		chk.set("a", nil) // the apply brought it back
		if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready || st.Reason != reason.Applied {
			t.Errorf("after the repairing apply: %+v", st)
		}
		h.mustCycle()
		if h.eng.Repairs != 1 {
			t.Errorf("applied again twice for one heal")
		}
	})
}

// TestHealNotInPlanOnly: plan-only acts on no server: a Degraded stand is reported, not restarted.
func TestHealNotInPlanOnly(t *testing.T) {
	h, chk, _ := healthHarness(t, func(c *Config) { c.Health.Heal = true })
	if err := h.r.SetPlanOnly(true, "test"); err != nil {
		t.Fatal(err)
	}
	chk.set("a", stopped("web--front"))
	h.r.HealthCycle(context.Background())
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Degraded || len(chk.restarts) != 0 || len(st.Healing) != 0 {
		t.Errorf("plan-only: status %+v, restarts %v", st, chk.restarts)
	}
}

// TestHealLimit: a flapping instance is healed at most HealLimit times an hour, the limit recorded
// once; an hour later it is healed again.
func TestHealLimit(t *testing.T) {
	h, chk, _ := healthHarness(t, func(c *Config) { c.Health.Heal, c.Health.Limit = true, 2 })
	chk.heals = true
	flap := func() {
		chk.set("a", stopped("web--front"))
		h.now = h.now.Add(5 * time.Minute)
		h.r.HealthCycle(context.Background())
	}
	for range 4 {
		flap()
	}
	if len(chk.restarts) != 2 {
		t.Errorf("%d restarts within the hour, want 2 (the limit)", len(chk.restarts))
	}
	st := h.src.statusOf(t, "local_a_dev")
	limits := 0
	for _, s := range st.Healing {
		if s.Action == "none" {
			limits++
		}
	}
	if st.Phase != reason.Degraded || limits != 1 {
		t.Errorf("status %+v, healing %+v: want Degraded and the limit recorded once", st, st.Healing)
	}
	h.now = h.now.Add(time.Hour)
	flap()
	if len(chk.restarts) != 3 {
		t.Errorf("an hour later: %d restarts, want 3", len(chk.restarts))
	}
}

// TestHealthRestartCount: a unit restarted by systemd between two checks is a problem at the
// second, though it is active again.
func TestHealthRestartCount(t *testing.T) {
	h, chk, _ := healthHarness(t, nil)
	active := func(n int) *stands.Health {
		return &stands.Health{Instances: []stands.InstanceHealth{{Instance: "web--front", Server: "s1", State: "active", Restarts: n}}}
	}
	chk.set("a", active(1))
	h.r.HealthCycle(context.Background())
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready {
		t.Fatalf("first check: %+v", st)
	}
	chk.set("a", active(3))
	h.r.HealthCycle(context.Background())
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Degraded || st.Message != "web--front: unit restarted by systemd since the last check" {
		t.Errorf("restarted between checks: %+v", st)
	}
	h.r.HealthCycle(context.Background())
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready {
		t.Errorf("no restart since: %+v", st)
	}
}

// TestHealthNotWhenItCannotJudge: no check while paused, none of a servers-only stand; a check
// that could not be made (the state unreadable) changes nothing.
func TestHealthNotWhenItCannotJudge(t *testing.T) {
	h, chk, _ := healthHarness(t, nil)
	chk.err = errors.New("the Pulumi backend is unavailable")
	h.r.HealthCycle(context.Background())
	if st := h.src.statusOf(t, "local_a_dev"); st.Phase != reason.Ready {
		t.Errorf("a check not made changed the status: %+v", st)
	}
	chk.err = nil
	if err := h.r.Pause("test", "maintenance"); err != nil {
		t.Fatal(err)
	}
	before := chk.checks
	h.r.HealthCycle(context.Background())
	if chk.checks != before {
		t.Errorf("checked while paused")
	}

	skipped := newHarness(t, repoWith("a"), func(c *Config) { c.Health.Checker, c.Health.Interval = chk, time.Minute })
	skipped.mustCycle()
	before = chk.checks
	skipped.r.HealthCycle(context.Background())
	if chk.checks != before {
		t.Errorf("a servers-only stand was checked")
	}
}

// TestHealthStatusHasNoSecret: a problem text is kept as the check gives it (places only); the
// status file of a Degraded stand holds no secret value, and its JSON names the finding.
func TestHealthStatusHasNoSecret(t *testing.T) {
	h, chk, _ := healthHarness(t, nil)
	chk.set("a", stopped("web--front"))
	h.r.HealthCycle(context.Background())
	data := h.src.Files["status/local_a_dev.json"].Data
	if strings.Contains(string(data), fakes.KVPassword) {
		t.Error("a secret is in the status file")
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(data, &raw); err != nil || raw["health"] == nil {
		t.Errorf("status JSON: %s", data)
	}
}
