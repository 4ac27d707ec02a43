//go:build e2e

package engine

import (
	"context"
	"encoding/json"
	"fmt"
	"io/fs"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/go-git/go-git/v5"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"
	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/engine/node"
	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// healthOnNodes is issue 24's story on the applied two-node stand, on the VMs TestNodesE2E boots:
// the health check (no Pulumi process) and the reads of a refresh see a unit stopped by hand and an
// app dead behind a live unit; a restart heals it.
func healthOnNodes(t *testing.T, ctx context.Context, f *fixture, stand stands.Input, webSSH *ssh.Client, webUnit string) {
	ref := stands.StackRef{Project: stand.Stand.Project, Env: stand.Stand.Env}
	opts := HealthOptions{Hooks: true}

	// Healthy as applied: both instances active, their ports listening in their pods, their hooks
	// (both declared probes) answering.
	t0 := time.Now()
	h, err := f.eng.HealthWith(ctx, ref, opts)
	if err != nil || !h.Healthy() || len(h.Instances) != 2 {
		t.Fatalf("health after the apply: %+v, %v", h, err)
	}
	t.Logf("health check of two nodes, hooks included: %v", time.Since(t0).Round(time.Millisecond))

	// A unit stopped by hand: the check names the instance and why; the other one is fine.
	run(t, webSSH, appCmd("systemctl --user stop "+node.Quote(webUnit)))
	h, err = f.eng.HealthWith(ctx, ref, opts)
	if err != nil {
		t.Fatal(err)
	}
	if p := problemsOf(h, "web--front"); !slices.ContainsFunc(p, notActive) || len(problemsOf(h, "kv--cache")) != 0 {
		t.Errorf("health with web--front stopped: %+v", h)
	}

	// A refresh reads the instance back: the drift check lists it as an update, and says why.
	logStart := len(f.logs.String())
	drift, err := f.eng.Drift(ctx, stand)
	if err != nil {
		t.Fatalf("drift check: %v", err)
	}
	t.Logf("drift check with web--front stopped: %+v", drift.Steps)
	if !drift.Changed || !slices.ContainsFunc(drift.Steps, func(s stands.Step) bool {
		return s.Kind == "instance" && s.Instance == "web--front" && s.Op == "update" && strings.Contains(s.Changed, "drift") && notActive(s.Drift)
	}) || slices.ContainsFunc(drift.Steps, func(s stands.Step) bool { return s.Instance == "kv--cache" || s.Op != "update" }) {
		t.Errorf("drift check with web--front stopped: %+v", drift.Steps)
	}
	if log := f.logs.String()[logStart:]; !strings.Contains(log, "web--front: unit failed") && !strings.Contains(log, "web--front: unit inactive") {
		t.Errorf("the drift check's log does not say what drifted:\n%s", excerpt(log, "drift", 3000))
	}

	// Started again: healthy, and nothing drifted.
	run(t, webSSH, appCmd("systemctl --user start "+node.Quote(webUnit)))
	h = waitHealthy(t, ctx, f, ref, opts)
	if drift, err := f.eng.Drift(ctx, stand); err != nil || drift.Changed {
		t.Errorf("drift check after the start: %+v, %v", drift, err)
	}

	// The app's container stopped behind its unit: whatever the unit makes of it, the check sees
	// the instance unhealthy; Restart (a heal's first step) brings it back.
	restarts := restartsOf(h, "web--front")
	run(t, webSSH, appCmd("podman stop -t 2 front-web >/dev/null"))
	h, err = f.eng.HealthWith(ctx, ref, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("health with the app's container stopped: %+v", h.Instances)
	// Seen either way the reconciler judges: a problem now, or systemd restarted the unit since.
	if len(problemsOf(h, "web--front")) == 0 && restartsOf(h, "web--front") <= restarts {
		t.Errorf("the app's container stopped, and the check sees no problem: %+v", h)
	}
	if err := f.eng.Restart(ctx, ref, "web--front"); err != nil {
		t.Fatalf("restart: %v", err)
	}
	waitHealthy(t, ctx, f, ref, opts)

	// A heal's second step: a forced apply that repairs reads the instances back first, so the
	// stopped unit is an update, which starts it; the other instance is left alone.
	run(t, webSSH, appCmd("systemctl --user stop "+node.Quote(webUnit)))
	repair := stand
	repair.Repair = true
	res, err := f.eng.Apply(ctx, repair, true)
	if err != nil {
		t.Fatalf("repairing apply: %v\n%s", err, tailLog(f.logs.String()))
	}
	if res.Changes["update"] != 1 {
		t.Errorf("repairing apply: changes %v, want 1 update (web--front)", res.Changes)
	}
	waitHealthy(t, ctx, f, ref, opts)
	if drift, err := f.eng.Drift(ctx, stand); err != nil || drift.Changed {
		t.Errorf("drift check after the repair: %+v, %v", drift, err)
	}
}

// waitHealthy waits for the stand to be healthy: a restarted app takes a moment to listen.
func waitHealthy(t *testing.T, ctx context.Context, f *fixture, ref stands.StackRef, opts HealthOptions) *stands.Health {
	t.Helper()
	var h *stands.Health
	wait.NoError(t, "the stand healthy", 2*time.Minute, func() error {
		var err error
		if h, err = f.eng.HealthWith(ctx, ref, opts); err != nil {
			return err
		}
		if !h.Healthy() {
			return fmt.Errorf("not healthy: %+v", h)
		}
		return nil
	}, wait.Every(3*time.Second))
	return h
}

// notActive is a problem saying a unit stopped by hand is not running. After a stop systemd calls
// the podman-kube@ template's instance failed (seen with Debian 12's Podman 4.3: its service
// container ends by a signal); a unit whose process exits cleanly is inactive.
func notActive(p string) bool { return p == "unit failed" || p == "unit inactive" }

func restartsOf(h *stands.Health, instance string) int {
	for _, in := range h.Instances {
		if in.Instance == instance {
			return in.Restarts
		}
	}
	return -1
}

func problemsOf(h *stands.Health, instance string) []string {
	for _, in := range h.Instances {
		if in.Instance == instance {
			return in.Problems
		}
	}
	return []string{"instance not in the health check"}
}

// unreachableHealth: with web powered off the check reports it unreachable and db's instance
// healthy; a refresh leaves web's resources as they were (no delete, no replacement planned).
func unreachableHealth(t *testing.T, ctx context.Context, f *fixture, stand stands.Input) {
	ref := stands.StackRef{Project: stand.Stand.Project, Env: stand.Stand.Env}
	h, err := f.eng.HealthWith(ctx, ref, HealthOptions{Wait: 10 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if len(h.Unreachable) != 1 || h.Unreachable[0].Server != "demo-demo-two-node-web" || len(problemsOf(h, "kv--cache")) != 0 {
		t.Errorf("health with web powered off: %+v", h)
	}
	drift, err := f.eng.Drift(ctx, stand)
	if err != nil {
		t.Fatalf("drift check with web powered off: %v", err)
	}
	t.Logf("drift check with web powered off: %+v", drift.Steps)
	if slices.ContainsFunc(drift.Steps, func(s stands.Step) bool { return s.Op != "update" }) {
		t.Errorf("a refresh with web unreachable plans to delete or replace: %+v", drift.Steps)
	}
}

// healthLoopOnNodes runs the reconciler itself on the applied stand — a local Git repository holding
// it, the real engine as both its engine and its health checker — and stops a unit by hand: the
// stand is Degraded within one --health-interval, naming the instance, with one status commit however
// many checks find it so; started by hand it is Ready again. A second reconciler with --heal restarts
// the unit itself.
func healthLoopOnNodes(t *testing.T, ctx context.Context, f *fixture, repo editableRepo, secrets map[string]string, stand stands.Input, webSSH *ssh.Client, webUnit string) {
	dir := t.TempDir()
	files := map[string]string{}
	for _, p := range []string{"bases/common.yml", "stands/two-node/stand.yml"} {
		files[p] = repo.get(p)
	}
	testenv.CommitAll(t, testenv.InitStandsRepo(t, dir), dir, "the two-node stand", files)
	for k, v := range secrets { // local mode: SECRET_<NAME> from the environment
		t.Setenv(k, v)
	}
	const interval = 20 * time.Second
	src := gitsource.New(dir, "main", gitsource.WithStatusBranch("stands-status"))
	start := func(heal bool) (*reconcile.Reconciler, context.CancelFunc) {
		// The passphrase is loadWith's: the same spec hash.
		r := reconcile.New(reconcile.Config{Owner: "demo", Passphrase: "stands-test-passphrase", NodesMode: NodesFull, Log: testenv.Logger(t),
			Health:       reconcile.HealthConfig{Checker: f.eng, Interval: interval, Heal: heal, Settle: 5 * time.Second},
			StatusBranch: "stands-status"}, src, f.eng, nil)
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); r.Run(rctx, 5*time.Second) }()
		return r, func() { cancel(); <-done; r.Wait() }
	}
	id := stand.Stand.ID
	// waitFor waits for a status that ok accepts, logging each other status it passes through.
	waitFor := func(r *reconcile.Reconciler, what string, within time.Duration, ok func(*reconcile.Status) bool) (reconcile.Status, time.Duration) {
		t.Helper()
		t0, seen := time.Now(), ""
		st := wait.Value(t, id+" "+what, within, func() (*reconcile.Status, bool) {
			st := r.Status(id)
			if st == nil {
				return nil, false
			}
			if now := fmt.Sprintf("%s/%s %q", st.Phase, st.Reason, st.Message); now != seen && !ok(st) {
				t.Logf("waiting for %s, %v: %s", what, time.Since(t0).Round(time.Second), now)
				seen = now
			}
			return st, ok(st)
		}, wait.Every(time.Second))
		return *st, time.Since(t0)
	}
	waitPhase := func(r *reconcile.Reconciler, phase reason.Phase, within time.Duration) (reconcile.Status, time.Duration) {
		t.Helper()
		return waitFor(r, string(phase), within, func(st *reconcile.Status) bool { return st.Phase == phase })
	}

	r, stop := start(false)
	waitPhase(r, reason.Ready, 5*time.Minute) // its outputs read: the engine above applied it
	// "Within one interval" is one interval (jittered by up to 10%) and the check that ends it; a
	// check over SSH to a VM under TCG takes seconds when the machine is idle and a minute when CI
	// runs its other steps beside it, so the bound is one interval and what one check takes now.
	t1 := time.Now()
	if _, err := f.eng.Health(ctx, stands.StackRef{Project: stand.Stand.Project, Env: stand.Stand.Env}); err != nil {
		t.Fatalf("health check: %v", err)
	}
	check := time.Since(t1)
	bound := interval + interval/10 + 2*check + 10*time.Second
	run(t, webSSH, appCmd("systemctl --user stop "+node.Quote(webUnit)))
	// A check under way while the unit stopped may find it "deactivating" first; the stopped unit is
	// what the next check must find.
	st, took := waitFor(r, "Degraded with web--front stopped", bound+2*time.Minute, func(st *reconcile.Status) bool {
		m, ok := strings.CutPrefix(st.Message, "web--front: ")
		return st.Phase == reason.Degraded && ok && notActive(m)
	})
	t.Logf("Degraded %v after the unit was stopped (interval %v, a check %v): %s", took.Round(time.Second), interval, check.Round(time.Second), st.Message)
	if took > bound {
		t.Errorf("Degraded %v after the stop, more than one interval (%v) and a check (%v)", took, interval, check)
	}
	if st.Reason != reason.InstanceUnhealthy {
		t.Errorf("degraded status: %s %q", st.Reason, st.Message)
	}
	// The check's status commit follows its status: counted from once it is there.
	wait.For(t, "the Degraded status committed", 2*time.Minute, func() bool {
		snap, err := gitsource.New(dir, "stands-status").Fetch(ctx)
		if err != nil {
			return false
		}
		data, err := fs.ReadFile(snap.Files, stands.StatusPath(id))
		var committed reconcile.Status
		return err == nil && json.Unmarshal(data, &committed) == nil && committed.Phase == reason.Degraded
	}, wait.Every(time.Second))
	commits := branchCommits(t, dir, "stands-status")
	time.Sleep(2*interval + 10*time.Second) // two more checks find the same
	if n := branchCommits(t, dir, "stands-status") - commits; n != 0 {
		t.Errorf("a stand that stays Degraded made %d more status commits over two checks", n)
	}
	run(t, webSSH, appCmd("systemctl --user start "+node.Quote(webUnit)))
	if st, took = waitPhase(r, reason.Ready, bound+2*time.Minute); st.Reason != reason.Recovered {
		t.Errorf("after the start: %s %q", st.Reason, st.Message)
	}
	t.Logf("Ready %v after the unit was started", took.Round(time.Second))
	stop()

	// --heal: the reconciler restarts the unit itself.
	r, stop = start(true)
	defer stop()
	waitPhase(r, reason.Ready, 5*time.Minute)
	since := activeSince(t, webSSH, webUnit)
	run(t, webSSH, appCmd("systemctl --user stop "+node.Quote(webUnit)))
	// A restart that the next check still finds unhealthy (the app not listening yet on a loaded
	// machine) is followed by an apply; the restart is what this shows.
	st, took = waitFor(r, "healed", bound+5*time.Minute, func(st *reconcile.Status) bool { return st.Phase == reason.Ready && len(st.Healing) > 0 })
	if !slices.ContainsFunc(st.Healing, func(s reconcile.HealStep) bool {
		return s.Instance == "web--front" && s.Action == "restart" && s.Result == "restarted"
	}) {
		t.Errorf("heal steps: %+v", st.Healing)
	}
	t.Logf("healed %v after the stop", took.Round(time.Second))
	if out := run(t, webSSH, appCmd("systemctl --user is-active "+node.Quote(webUnit)+" || true")); out != "active" || activeSince(t, webSSH, webUnit) == since {
		t.Errorf("after the heal the unit is %q", out)
	}
}

// branchCommits counts the commits of a branch of the repository at dir.
func branchCommits(t *testing.T, dir, branch string) int {
	t.Helper()
	repo, err := git.PlainOpen(dir)
	if err != nil {
		t.Fatal(err)
	}
	ref, err := repo.Reference(plumbing.NewBranchReferenceName(branch), true)
	if err != nil {
		return 0
	}
	iter, err := repo.Log(&git.LogOptions{From: ref.Hash()})
	if err != nil {
		t.Fatal(err)
	}
	n := 0
	_ = iter.ForEach(func(*object.Commit) error { n++; return nil })
	return n
}
