package prplan

import (
	"context"
	"fmt"
	"strconv"
	"sync"

	"github.com/stands-engine/stands-reconciler/diff"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/internal/statefile"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Plans run off the poll path: a cycle hands its judgement to the worker and goes on. A cycle that
// ends while the worker is busy leaves its job as the next one (a newer job replaces an older one
// waiting).

type job struct {
	main   *judge.Evaluation
	commit string
	actual []diff.Actual
	lead   func(context.Context) (context.Context, context.CancelFunc, bool)
}

type worker struct {
	mu      sync.Mutex
	running bool
	next    *job
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
}

// Schedule plans the open pull requests against main, the tracked branch's judgement at commit,
// and the stacks, now or after the plans running; it does not wait. lead is ctx while this
// reconciler leads (with replicas, holds the leader lease), cancelled when that ends, so a plan
// running then stops instead of commenting beside the next leader's; ok is false when it does not
// lead. Nil: it always leads.
func (pl *Planner) Schedule(main *judge.Evaluation, commit string, actual []diff.Actual, lead func(context.Context) (context.Context, context.CancelFunc, bool)) {
	if lead == nil {
		lead = func(ctx context.Context) (context.Context, context.CancelFunc, bool) { return ctx, func() {}, true }
	}
	j := job{main: main, commit: commit, actual: actual, lead: lead}
	w := &pl.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		w.next = &j
		return
	}
	w.running = true
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			if ctx, cancel, ok := j.lead(w.ctx); ok {
				pl.previews(ctx, j.main, j.commit, j.actual)
				cancel()
			}
			w.mu.Lock()
			if w.next == nil || w.ctx.Err() != nil {
				w.running, w.next = false, nil
				w.mu.Unlock()
				return
			}
			j, w.next = *w.next, nil
			w.mu.Unlock()
		}
	}()
}

// Wait waits for the plans running, and those scheduled after them, to finish.
func (pl *Planner) Wait() { pl.w.wg.Wait() }

// Stop cancels a running plan (plans only read; nothing is lost) and waits for it. No plan starts
// after it.
func (pl *Planner) Stop() {
	pl.w.cancel()
	pl.w.wg.Wait()
}

// maxPlanAttempts is how often one head is tried: failed plans, and plans a stop of the reconciler
// interrupted, count alike. Past it the head gets stands/plan failure until the next push.
const maxPlanAttempts = 3

// plannedHead is what is known of one pull request's head, kept in Config.StateFile across
// restarts.
type plannedHead struct {
	Head     string `json:"head"`
	Done     bool   `json:"done"`     // planned, or given up on: not tried again
	Attempts int    `json:"attempts"` // tries started, each counted before it starts
}

// loadPlanned reads the heads already planned, once.
func (pl *Planner) loadPlanned() {
	if pl.loaded {
		return
	}
	pl.loaded = true
	var saved map[string]plannedHead
	if _, err := statefile.Read(pl.cfg.StateFile, &saved); err != nil {
		pl.log.Warn("planned heads not read; every open pull request is planned again", "file", pl.cfg.StateFile, "err", err)
		return
	}
	for k, h := range saved {
		if n, err := strconv.ParseInt(k, 10, 64); err == nil {
			pl.heads[n] = h
		}
	}
}

// savePlanned writes the heads, atomically; a failure is logged (at worst a head is planned again).
func (pl *Planner) savePlanned() {
	out := map[string]plannedHead{}
	for n, h := range pl.heads {
		out[strconv.FormatInt(n, 10)] = h
	}
	if err := statefile.Write(pl.cfg.StateFile, out); err != nil {
		pl.log.Warn("planned heads not saved", "file", pl.cfg.StateFile, "err", err)
	}
}

// startPlan records a try of pr's head before it starts; false when the head is done, or when its
// tries are used up (then it is done, with stands/plan failure saying why).
func (pl *Planner) startPlan(ctx context.Context, pr stands.PullRequest) bool {
	h := pl.heads[pr.Index]
	if h.Head != pr.HeadSHA {
		h = plannedHead{Head: pr.HeadSHA}
	}
	if h.Done {
		return false
	}
	if h.Attempts >= maxPlanAttempts {
		pl.finishPlan(pr.Index, pr.HeadSHA)
		pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StateFailure,
			fmt.Sprintf("not planned: %d tries failed or were interrupted; push a new commit to try again", h.Attempts), pr.URL)
		pl.log.Warn("pull request given up on", "pull_request", pr.Index, "head", mdtext.Short(pr.HeadSHA), "tries", h.Attempts)
		return false
	}
	h.Attempts++
	pl.heads[pr.Index] = h
	pl.savePlanned()
	return true
}

// finishPlan marks a head done.
func (pl *Planner) finishPlan(index int64, head string) {
	pl.heads[index] = plannedHead{Head: head, Done: true, Attempts: pl.heads[index].Attempts}
	pl.savePlanned()
}
