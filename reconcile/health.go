package reconcile

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Checker looks at applied stands on their servers, without Pulumi: what the live health check and
// a heal's restart use (engine.Health, engine.Restart).
type Checker interface {
	Health(ctx context.Context, ref stands.StackRef) (*stands.Health, error)
	Restart(ctx context.Context, ref stands.StackRef, instance string) error
}

// Defaults of the health check.
const (
	DefaultHealthInterval = 2 * time.Minute
	DefaultHealLimit      = 3 // heals of one instance in an hour
	defaultHealSettle     = 15 * time.Second
	healthTimeout         = 3 * time.Minute // one stand's check, hooks included
	healthParallel        = 8               // stands checked at once: SSH sessions, not Pulumi runs
	maxHealSteps          = 10              // heal steps a status keeps
)

// HealthFinding is what the live health check found on a Degraded stand: places and states, never
// a value, and nothing that changes from one check to the next while the stand stays as it is (no
// time, no counter), so a stand that stays Degraded makes one status commit.
type HealthFinding struct {
	Instances   []UnhealthyInstance `json:"instances,omitempty"`
	Unreachable []string            `json:"unreachable,omitempty"` // servers SSH did not reach
}

// UnhealthyInstance is one instance the check found wrong, and how.
type UnhealthyInstance struct {
	Instance string   `json:"instance"`
	Server   string   `json:"server"`
	Problems []string `json:"problems"`
}

// HealStep is one thing --heal did.
type HealStep struct {
	Instance string    `json:"instance"`
	Action   string    `json:"action"` // restart, apply (the stand applied again, its instances read back), none (the hourly limit)
	At       time.Time `json:"at"`
	Result   string    `json:"result"`
}

// healBook is what the health check and --heal remember of each stand between checks: systemd's
// restart counts at the last check, the heals of the last hour, and a repair asked of the next
// cycle. Its lock is a leaf: taken under the loop's (decide) or alone, and nothing is called while it
// is held.
type healBook struct {
	limit int // heals of one instance in an hour (Config.Health.Limit)

	mu       leafMutex
	restarts map[string]map[string]int         // by stand, by instance
	heals    map[string]map[string][]time.Time // by stand, by instance
	repair   map[string]bool                   // by stand
}

func newHealBook(limit int) *healBook {
	return &healBook{limit: limit, restarts: map[string]map[string]int{}, heals: map[string]map[string][]time.Time{}, repair: map[string]bool{}}
}

// restartedBySystemd turns a restart count that grew since the last check into a problem: a unit
// that crashed and was restarted by Restart= is active again by the next check, and would
// otherwise pass.
func (hb *healBook) restartedBySystemd(id string, h *stands.Health) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	counts := hb.restarts[id]
	if counts == nil {
		counts = map[string]int{}
		hb.restarts[id] = counts
	}
	for i, in := range h.Instances {
		prev, seen := counts[in.Instance]
		counts[in.Instance] = in.Restarts
		if seen && in.Restarts > prev && len(in.Problems) == 0 {
			h.Instances[i].Problems = append(h.Instances[i].Problems, "unit restarted by systemd since the last check")
		}
	}
}

// mayHeal counts a heal of an instance when the last hour's are under the limit; otherwise it
// says how many there were.
func (hb *healBook) mayHeal(id, instance string, now time.Time) (bool, int) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	var recent []time.Time
	for _, at := range hb.heals[id][instance] {
		if now.Sub(at) < time.Hour {
			recent = append(recent, at)
		}
	}
	if hb.heals[id] == nil {
		hb.heals[id] = map[string][]time.Time{}
	}
	if len(recent) < hb.limit {
		hb.heals[id][instance] = append(recent, now)
		return true, len(recent)
	}
	hb.heals[id][instance] = recent
	return false, len(recent)
}

// askRepair asks the next cycle to apply the stand again; takeRepair is the cycle taking the ask.
func (hb *healBook) askRepair(id string) {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	hb.repair[id] = true
}

func (hb *healBook) takeRepair(id string) bool {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	asked := hb.repair[id]
	delete(hb.repair, id)
	return asked
}

// repairAsked says whether a repair waits for the stand, without taking it.
func (hb *healBook) repairAsked(id string) bool {
	hb.mu.Lock()
	defer hb.mu.Unlock()
	return hb.repair[id]
}

// runHealth checks the applied stands every Health.Interval (±10%) until ctx ends.
func (r *Reconciler) runHealth(ctx context.Context) {
	for waitJittered(ctx, r.cfg.Health.Interval, nil) {
		r.HealthCycle(ctx)
	}
}

// HealthCycle checks every applied stand that no operation holds, and heals what --heal allows. It
// returns when all checks (and restarts) are done; a heal's apply runs in a later cycle.
func (r *Reconciler) HealthCycle(ctx context.Context) {
	if r.cfg.Health.Checker == nil {
		return
	}
	type job struct {
		id  string
		ref stands.StackRef
	}
	var jobs []job
	r.mu.Lock()
	if r.sw.paused() == nil {
		for id, st := range r.stands {
			s := st.status
			if st.running || s == nil || (s.Phase != reason.Ready && s.Phase != reason.Degraded && s.Phase != reason.Expired) || s.NodesMode == "skipped" || st.ref.Project == "" || !r.claims.holds(id) {
				continue
			}
			st.running = true // no operation starts on it while it is looked at
			jobs = append(jobs, job{id, st.ref})
		}
	}
	r.mu.Unlock()
	sem := make(chan struct{}, healthParallel)
	var wg sync.WaitGroup
	for _, j := range jobs {
		r.ops.Add(1)
		wg.Go(func() {
			defer r.ops.Done()
			sem <- struct{}{}
			defer func() { <-sem }()
			r.checkStand(ctx, j.id, j.ref)
		})
	}
	wg.Wait()
	if len(jobs) > 0 {
		r.publishSoon(ctx)
	}
}

// checkStand checks one stand, records what it found and heals it when allowed.
func (r *Reconciler) checkStand(ctx context.Context, id string, ref stands.StackRef) {
	log := r.log.With("stand", id, "operation", "health")
	defer func() {
		r.mu.Lock()
		r.state(id).running = false
		r.mu.Unlock()
	}()
	// With replicas, under the stand's lease as an operation is: a restart over SSH must not go on
	// on servers another replica has taken over by then.
	ctx, unfence, _, err := r.fence(ctx, id)
	defer unfence()
	if err != nil {
		log.Debug("health check not made", "err", err)
		return
	}
	h, ok := r.check(ctx, id, ref, log)
	if !ok || !r.cfg.Health.Heal || h.Healthy() {
		return
	}
	r.mu.Lock()
	held := r.sw.holding() // plan-only acts on no server either
	r.mu.Unlock()
	if held {
		return
	}
	restarted := r.restartUnhealthy(ctx, id, ref, h, log)
	if len(restarted) == 0 {
		return
	}
	select {
	case <-ctx.Done():
		return
	case <-time.After(r.cfg.Health.Settle):
	}
	if h, ok = r.check(ctx, id, ref, log); !ok || h.Healthy() {
		return
	}
	r.scheduleRepair(id, restarted, h, log)
}

// check runs one health check and records it; false when it could not be made (the stand's state
// unreadable: nothing is concluded about its servers).
func (r *Reconciler) check(ctx context.Context, id string, ref stands.StackRef, log *slog.Logger) (*stands.Health, bool) {
	cctx, cancel := context.WithTimeout(ctx, healthTimeout)
	h, err := r.cfg.Health.Checker.Health(cctx, ref)
	cancel()
	if err != nil {
		r.metrics.healthCheck("error")
		log.Warn("health check not made", "err", err)
		return nil, false
	}
	result := "healthy"
	switch {
	case len(h.Unreachable) > 0:
		result = "unreachable"
	case !h.Healthy():
		result = "unhealthy"
	}
	r.metrics.healthCheck(result)
	r.heals.restartedBySystemd(id, h)
	r.mu.Lock()
	st := r.state(id)
	before := phaseOf(st.status)
	r.record(id, outcome{kind: outHealth, health: h})
	after := st.status
	r.mu.Unlock()
	if after == nil || phaseOf(after) == before {
		return h, true
	}
	if after.Phase == reason.Degraded {
		log.Warn("stand degraded", "reason", after.Reason, "message", after.Message, "unreachable", h.Unreachable)
	} else {
		log.Info("stand healthy again")
	}
	// On the last applied commit: the one whose status said Ready.
	r.setCommitStatus(ctx, after.LastSuccessfulCommit, "stands/"+id, commitState(after.Phase), string(after.Phase)+": "+after.Message, r.statusURL(id))
	return h, true
}

func phaseOf(s *Status) string {
	if s == nil {
		return ""
	}
	return string(s.Phase) + "/" + string(s.Reason)
}

// restartUnhealthy restarts each unhealthy instance on a reachable server, within the hourly limit;
// it returns those it restarted.
func (r *Reconciler) restartUnhealthy(ctx context.Context, id string, ref stands.StackRef, h *stands.Health, log *slog.Logger) []string {
	var restarted []string
	for _, in := range h.Instances {
		if len(in.Problems) == 0 || !r.mayHeal(id, in.Instance) {
			continue
		}
		log.Info("healing: restarting the instance", "instance", in.Instance, "problems", strings.Join(in.Problems, "; "))
		cctx, cancel := context.WithTimeout(ctx, healthTimeout)
		err := r.cfg.Health.Checker.Restart(cctx, ref, in.Instance)
		cancel()
		if ctx.Err() != nil {
			// The stand's lease neared expiry or the reconciler stops: whether the unit restarted
			// is for the next check (this replica's or the next holder's) to find, not a heal step.
			log.Warn("healing: restart interrupted", "instance", in.Instance, "err", err)
			break
		}
		step := HealStep{Instance: in.Instance, Action: "restart", At: r.cfg.Now().UTC(), Result: "restarted"}
		if err != nil {
			// The error names the unit and its state; the unit's log, which may print what it was
			// configured with, stays in the reconciler's log.
			log.Warn("healing: restart failed", "instance", in.Instance, "err", err)
			step.Result = "restart failed"
		}
		r.metrics.heal("restart", map[bool]string{true: "ok", false: "failed"}[err == nil])
		r.healed(id, step)
		restarted = append(restarted, in.Instance)
	}
	return restarted
}

// scheduleRepair asks the next cycle to apply the stand again, reading its instances back, for the
// instances a restart did not heal.
func (r *Reconciler) scheduleRepair(id string, restarted []string, h *stands.Health, log *slog.Logger) {
	var still []string
	for _, in := range h.Instances {
		if len(in.Problems) > 0 && slices.Contains(restarted, in.Instance) && r.mayHeal(id, in.Instance) {
			still = append(still, in.Instance)
		}
	}
	if len(still) == 0 {
		return
	}
	if r.sw.holding() {
		return
	}
	r.heals.askRepair(id)
	log.Info("healing: a restart did not help; applying the stand again", "instances", strings.Join(still, ", "))
	for _, in := range still {
		r.healed(id, HealStep{Instance: in, Action: "apply", At: r.cfg.Now().UTC(), Result: "scheduled"})
	}
	r.metrics.heal("apply", "scheduled")
	r.Trigger()
}

// mayHeal reports whether an instance may be healed once more this hour, and records the limit in
// the status once when it may not (a flapping instance is left to a human).
func (r *Reconciler) mayHeal(id, instance string) bool {
	now := r.cfg.Now()
	ok, recent := r.heals.mayHeal(id, instance, now)
	if ok {
		return true
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if s := r.state(id).status; s != nil && len(s.Healing) > 0 {
		if last := s.Healing[len(s.Healing)-1]; last.Instance == instance && last.Action == "none" {
			return false
		}
	}
	r.metrics.heal("none", "limit")
	r.record(id, outcome{kind: outHealed, heal: &HealStep{Instance: instance, Action: "none", At: now.UTC(),
		Result: fmt.Sprintf("not healed: healed %d times in the last hour (--heal-limit); left to a human", recent)}})
	return false
}

func (r *Reconciler) healed(id string, step HealStep) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.record(id, outcome{kind: outHealed, heal: &step})
}
