package prplan

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/sandbox"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/test/fakes"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// bombStands is a pull request's change adding n stands whose template never ends: each render
// of one runs until its CPU limit stops it.
func bombStands(t *testing.T, h *harness, n int) map[string]string {
	change := map[string]string{
		"apps/bomb/app.yml":       "images: [\"registry.example.test/bomb:1\"]\nfiles:\n  - src: bomb.tmpl\n    dest: /tmp/bomb\npod: pod.yaml.tmpl\n",
		"apps/bomb/bomb.tmpl":     bombs["cpu"],
		"apps/bomb/pod.yaml.tmpl": podOf(t, h),
	}
	for i := range n {
		id := fmt.Sprintf("bomb%d", i)
		change[fakes.StandFile(id)] = strings.Replace(fakes.StandYML(id, ""), "apps: [kv]", "apps: [kv, bomb]", 1) +
			"  bomb:\n    package: ../../apps/bomb\n    instances:\n      x: {}\n"
	}
	return change
}

// countingSandbox is testSandbox counting the children it starts.
func countingSandbox(t *testing.T, lim sandbox.Limits, started *atomic.Int32) Sandbox {
	run := testSandbox(t, lim)
	return func(ctx context.Context, job string, cpu time.Duration, w func(io.Writer) error, r func(io.Reader) error) (time.Duration, error) {
		started.Add(1)
		return run(ctx, job, cpu, w, r)
	}
}

// TestPlanBudget: a head whose plan passes its budget — the CPU time of its renders, all its stands
// together, or its wall time — fails naming the budget, and is not planned again until a push; a
// push gets a budget of its own.
func TestPlanBudget(t *testing.T) {
	for _, c := range []struct {
		name   string
		budget Budget
		change func(t *testing.T, h *harness) map[string]string
		gate   bool // previews wait until the test ends
		want   string
	}{
		{"render CPU", Budget{Wall: time.Minute, RenderCPU: 3 * time.Second}, func(t *testing.T, h *harness) map[string]string { return bombStands(t, h, 6) },
			false, "failure: not planned: over the plan's budget of 3s render CPU time; push a new commit to try again"},
		{"wall time", Budget{Wall: 2 * time.Second, RenderCPU: time.Minute}, func(*testing.T, *harness) map[string]string {
			return map[string]string{fakes.StandFile("a"): resized("a", "cx32")}
		}, true, "failure: not planned: over the plan's budget of 2s wall time; push a new commit to try again"},
	} {
		t.Run(c.name, func(t *testing.T) {
			var started atomic.Int32
			h := newHarness(t, repoWith("a"), func(_ *reconcile.Config, p *Config) {
				p.Budget = c.budget
				p.Sandbox = countingSandbox(t, sandbox.Limits{CPU: 2 * time.Second, Memory: 512 << 20, Wall: 30 * time.Second}, &started)
			})
			f := h.forge
			h.mustCycle()
			if c.gate {
				_, release := gatePreviews(h)
				defer release()
			}
			before := started.Load()
			f.Open(1, "head1", h.files(), c.change(t, h), true)
			start := time.Now()
			h.mustCycle()
			took := time.Since(start)
			if st := f.Status("head1", PlanContext); st != c.want {
				t.Errorf("stands/plan %q, want %q", st, c.want)
			}
			t.Logf("%s: over its budget after %s", c.name, took.Round(100*time.Millisecond))
			children := started.Load()
			// Render CPU accrues slowly on a busy machine: that the budget ended the plan shows in
			// the stands it never rendered, not in the wall time.
			if c.budget.RenderCPU < time.Minute && children-before >= 6 {
				t.Errorf("%d render children for 6 stands: the render CPU budget stopped nothing", children-before)
			}
			if c.budget.Wall < time.Minute && took > 30*time.Second {
				t.Errorf("the plan ended %s after it started", took)
			}
			h.mustCycle()
			if n := started.Load() - children; n != 0 || f.Status("head1", PlanContext) != c.want {
				t.Errorf("the next cycle started %d render children, and stands/plan is %q: the head was planned again", n, f.Status("head1", PlanContext))
			}
		})
	}
}

// TestPlansInterleave: with two plan workers, a pull request at its budget (stands whose templates
// never end) does not hold an ordinary one opened after it: that one is planned while the first
// still renders. With one worker, the control, it waits for the first to end, which shows the test
// can see the wait.
func TestPlansInterleave(t *testing.T) {
	for _, c := range []struct {
		workers     int
		interleaved bool
	}{{2, true}, {1, false}} {
		t.Run(fmt.Sprintf("%d workers", c.workers), func(t *testing.T) {
			h := newHarness(t, repoWith("a"), func(_ *reconcile.Config, p *Config) {
				p.Workers = c.workers
				p.Budget = Budget{Wall: time.Minute, RenderCPU: 6 * time.Second}
				p.Sandbox = testSandbox(t, sandbox.Limits{CPU: 2 * time.Second, Memory: 512 << 20, Wall: 30 * time.Second})
			})
			f := h.forge
			h.mustCycle()
			f.Open(1, "hostile", h.files(), bombStands(t, h, 10), true)
			f.Open(2, "ordinary", h.files(), map[string]string{fakes.StandFile("a"): resized("a", "cx32")}, true)
			start := time.Now()
			ordinary := make(chan time.Duration, 1)
			go func() {
				err := wait.Until(context.Background(), time.Minute, func() error {
					if strings.HasPrefix(f.Status("ordinary", PlanContext), "success") {
						return nil
					}
					return errors.New("not planned")
				}, wait.Every(20*time.Millisecond))
				if err != nil {
					ordinary <- -1
					return
				}
				ordinary <- time.Since(start)
			}()
			h.mustCycle()
			hostile := time.Since(start)
			got := <-ordinary
			t.Logf("%d workers: the ordinary pull request planned after %s, the hostile one ended after %s (%s)", c.workers,
				got.Round(100*time.Millisecond), hostile.Round(100*time.Millisecond), f.Status("hostile", PlanContext))
			if !strings.Contains(f.Status("hostile", PlanContext), "render CPU time") {
				t.Errorf("the hostile pull request's stands/plan: %q", f.Status("hostile", PlanContext))
			}
			if got < 0 {
				t.Fatal("the ordinary pull request was not planned within a minute")
			}
			if waited := got > hostile-time.Second; waited == c.interleaved {
				t.Errorf("%d workers: the ordinary pull request planned after %s, the hostile one ended after %s: want it planned %s",
					c.workers, got, hostile, map[bool]string{true: "before the hostile one ends", false: "after (the control)"}[c.interleaved])
			}
		})
	}
}

// TestFailingPlansDoNotLoop: a plan that fails at once (Gitea unreachable) ends its task, and a
// worker coming free starts the pull requests still waiting, but no head gets a second task in the
// same cycle: the cycle's plans end, having listed the pull requests once per task at most.
func TestFailingPlansDoNotLoop(t *testing.T) {
	h := newHarness(t, repoWith("a"), func(_ *reconcile.Config, p *Config) { p.Workers = 1 })
	f := h.forge
	h.mustCycle()
	for n := range int64(3) {
		f.Open(n+1, fmt.Sprint("head", n+1), h.files(), map[string]string{fakes.StandFile("a"): resized("a", "cx32")}, true)
	}
	f.Mu.Lock()
	f.Down, f.Lists = true, 0
	f.Mu.Unlock()
	done := make(chan struct{})
	go func() {
		defer close(done)
		h.mustCycle()
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		f.Mu.Lock()
		lists := f.Lists
		f.Mu.Unlock()
		t.Fatalf("the cycle's plans did not end within 30 s; the pull requests were listed %d times", lists)
	}
	f.Mu.Lock()
	lists := f.Lists
	f.Mu.Unlock()
	if lists > 3 {
		t.Errorf("one cycle listed the pull requests %d times for 3 pull requests and 1 worker, want at most 3", lists)
	}
	for n := range 3 {
		if st := f.Status(fmt.Sprint("head", n+1), PlanContext); st != "" {
			t.Errorf("head%d: stands/plan %q while Gitea is down, want none", n+1, st)
		}
	}
}
