package prplan

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"runtime/debug"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/stands-engine/stands-reconciler/diff"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Plans run off the poll path: a cycle hands its judgement to the planner and goes on. Each open
// pull request is planned by a task of its own, at most Config.Workers at once and one per pull
// request; a dispatch starts tasks for the pull requests waiting, at each cycle and whenever a task
// ends while others wait or the branch moved, against the newest judgement. So a pull request opened while others are
// planned starts as soon as a worker is free, not after them all. A head gets at most one task per
// cycle: one whose plan fails fast (Gitea down) is tried again at the next cycle, not in a loop.

type job struct {
	main   *judge.Evaluation
	commit string
	actual []diff.Actual
	lead   func(context.Context) (context.Context, context.CancelFunc, bool)
}

// task is a pull request being planned: against commit, stopped by stop.
type task struct {
	commit string
	stop   context.CancelCauseFunc
}

type worker struct {
	mu      sync.Mutex
	job     *job // the newest: what the next dispatch plans against
	running map[int64]task
	// started: the heads given a task since the last Schedule, by pull request.
	started map[int64]string
	// waiting: a pull request found no free worker; the next task to end dispatches.
	waiting bool
	// dispatching: a dispatch runs; again: another was asked for meanwhile.
	dispatching, again bool
	wg                 sync.WaitGroup
	ctx                context.Context
	cancel             context.CancelFunc
}

// Schedule plans the open pull requests against main, the tracked branch's judgement at commit,
// and the stacks, as workers come free; it does not wait. lead is ctx while this reconciler leads
// (with replicas, holds the leader lease), cancelled when that ends, so a plan running then stops
// instead of commenting beside the next leader's; ok is false when it does not lead. Nil: it
// always leads.
func (pl *Planner) Schedule(main *judge.Evaluation, commit string, actual []diff.Actual, lead func(context.Context) (context.Context, context.CancelFunc, bool)) {
	if lead == nil {
		lead = func(ctx context.Context) (context.Context, context.CancelFunc, bool) { return ctx, func() {}, true }
	}
	w := &pl.w
	w.mu.Lock()
	w.job = &job{main: main, commit: commit, actual: actual, lead: lead}
	w.started = map[int64]string{}
	for _, t := range w.running {
		if t.commit != commit {
			// The tracked branch moved: what this plan merges into is no longer the branch.
			t.stop(errSuperseded)
		}
	}
	w.mu.Unlock()
	pl.dispatch()
}

// dispatch starts the pull requests waiting, now or after the dispatch running.
func (pl *Planner) dispatch() {
	w := &pl.w
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.job == nil || w.ctx.Err() != nil {
		return
	}
	if w.dispatching {
		w.again = true
		return
	}
	w.dispatching = true
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			w.mu.Lock()
			j := *w.job
			w.again = false
			w.mu.Unlock()
			if ctx, cancel, ok := j.lead(w.ctx); ok {
				pl.startWaiting(ctx, j)
				cancel()
			}
			w.mu.Lock()
			if !w.again || w.ctx.Err() != nil {
				w.dispatching = false
				w.mu.Unlock()
				return
			}
			w.mu.Unlock()
		}
	}()
}

// startWaiting lists the open pull requests and starts a task for each one waiting, oldest first,
// while workers are free; it forgets the closed ones.
func (pl *Planner) startWaiting(ctx context.Context, j job) {
	pl.loadPlanned(ctx)
	prs, err := pl.forge.PullRequests(ctx, pl.cfg.Branch)
	if err != nil {
		pl.log.Warn("pull requests not planned", "err", err)
		return
	}
	// Oldest first: the order does not depend on Gitea's, and a pull request opened later cannot
	// jump the queue.
	slices.SortFunc(prs, func(a, b stands.PullRequest) int { return cmp.Compare(a.Index, b.Index) })
	w, open := &pl.w, map[int64]bool{}
	// The tasks start once the pull requests left waiting say so on stands/plan: before any plan
	// of this pass is previewed.
	var starts []func()
	var waiting []stands.PullRequest
	defer func() {
		pl.markMoved(ctx, waiting, j.commit)
		for _, start := range starts {
			start()
		}
		pl.reviewStatuses(ctx, prs, open)
	}()
	for _, pr := range prs {
		open[pr.Index] = true
		w.mu.Lock()
		if w.job.commit != j.commit {
			// Scheduled again meanwhile: the dispatch that follows starts against the new commit.
			w.mu.Unlock()
			return
		}
		t, busy := w.running[pr.Index]
		if busy || w.started[pr.Index] == pr.HeadSHA || w.ctx.Err() != nil {
			if busy && t.commit != j.commit {
				waiting = append(waiting, pr) // its task is of the commit the branch left
			}
			w.mu.Unlock()
			continue
		}
		if len(w.running) >= pl.cfg.Workers {
			w.waiting = true
			w.mu.Unlock()
			waiting = append(waiting, pr)
			continue
		}
		tctx, stop := context.WithCancelCause(w.ctx)
		if w.running == nil {
			w.running = map[int64]task{}
		}
		w.running[pr.Index] = task{commit: j.commit, stop: stop}
		w.started[pr.Index] = pr.HeadSHA
		w.wg.Add(1)
		w.mu.Unlock()
		starts = append(starts, func() {
			go func() {
				defer w.wg.Done()
				if ctx, cancel, ok := j.lead(tctx); ok {
					pl.planHead(ctx, pr, j.main, j.commit, j.actual)
					cancel()
				}
				stop(nil)
				w.mu.Lock()
				delete(w.running, pr.Index)
				// A worker came free for one waiting, or this plan was of a commit the branch left.
				again := w.waiting || w.job.commit != j.commit
				w.waiting = false
				idle := len(w.running) == 0
				w.mu.Unlock()
				if idle {
					// A plan's snapshots may have held tens of megabytes; the runtime would give them
					// back to the system over minutes.
					debug.FreeOSMemory()
				}
				if again {
					pl.dispatch()
				}
			}()
		})
	}
	pl.forgetClosed(open, time.Now())
}

// Wait waits for the plans running, and those started after them, to finish.
func (pl *Planner) Wait() { pl.w.wg.Wait() }

// Close cancels the plans running (plans only read; nothing is lost) and waits for them. No plan
// starts after it.
func (pl *Planner) Close() {
	pl.w.cancel()
	pl.w.wg.Wait()
}

// maxPlanAttempts is how often one head is tried: failed plans, and plans a stop of the reconciler
// interrupted, count alike. Past it the head gets stands/plan failure until the next push.
const maxPlanAttempts = 3

// errSuperseded ends a job whose tracked branch moved.
var errSuperseded = errors.New("the tracked branch moved")

// plannedHead is what is known of one pull request's head, kept in Config.StateFile across
// restarts.
type plannedHead struct {
	Head string `json:"head"`
	// Base is the tracked branch's commit the head was merged into, Key the plan's judgement
	// there: when the branch moves, the plan is made again only if the key changes.
	Base string `json:"base,omitempty"`
	Key  string `json:"key,omitempty"`
	Done bool   `json:"done"` // planned at Base
	// UntilPush: given up on, no plan for this head, or the head is in the tracked branch
	// (merged): only a new head is tried.
	UntilPush bool `json:"untilPush,omitempty"`
	Attempts  int  `json:"attempts"` // tries started, each counted before it starts
	// Author opened the pull request; Changes are the stands its last successful plan changes
	// (review.go). ClosedAt: when it was first seen closed; it is forgotten ReviewRetention later.
	Author  string                   `json:"author,omitempty"`
	Changes map[string]plannedChange `json:"changes,omitempty"`
	// Ends are the stands' own ends and the lifetime policy that plan changes (lifetime.go).
	Ends     map[string]plannedChange `json:"ends,omitempty"`
	ClosedAt time.Time                `json:"closedAt,omitzero"`
	// State and Summary are the stands/plan the plan at Base set. Stale: stands/plan says pending
	// since the branch moved, before a worker judged the head again; a judgement that keeps the
	// plan sets State and Summary back.
	State   stands.CommitState `json:"state,omitempty"`
	Summary string             `json:"summary,omitempty"`
	Stale   bool               `json:"stale,omitempty"`
}

// movedUnder: the head was planned at another commit of the tracked branch than commit, and
// stands/plan does not say so yet.
func (h plannedHead) movedUnder(pr stands.PullRequest, commit string) bool {
	return h.Head == pr.HeadSHA && h.Done && h.Key != "" && h.Base != commit && !h.Stale && !h.UntilPush
}

// markMoved turns stands/plan pending for the pull requests whose plan the tracked branch moved
// under and which no worker judges yet: their plan is not of the merge any more, and a reviewer
// must not read its success while they wait for a worker.
func (pl *Planner) markMoved(ctx context.Context, prs []stands.PullRequest, commit string) {
	for _, pr := range prs {
		if !pl.head(pr.Index).movedUnder(pr, commit) {
			continue
		}
		pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StatePending, pl.cfg.Branch+" moved; planning again", pr.URL)
		pl.hmu.Lock()
		if h := pl.heads[pr.Index]; h.movedUnder(pr, commit) {
			h.Stale = true
			pl.heads[pr.Index] = h
			pl.savePlannedLocked()
		}
		pl.hmu.Unlock()
	}
}

// loadPlanned reads the heads planned when another wrote them since they were read: at the first
// pass, and with replicas at a pass of a new leader, which goes on from its predecessor's.
func (pl *Planner) loadPlanned(ctx context.Context) {
	pl.hmu.Lock()
	defer pl.hmu.Unlock()
	known := pl.version
	if !pl.loaded {
		known = -1
	}
	body, version, err := pl.store.Load(ctx, known)
	if err != nil {
		pl.log.Warn("planned heads not read; read again at the next pass", "err", err)
		return
	}
	if pl.loaded && body == nil && version == pl.version {
		return
	}
	pl.loaded, pl.version = true, version
	heads, err := parsePlanned(body)
	if err != nil {
		pl.log.Warn("planned heads not read; every open pull request is planned again", "err", err)
	}
	pl.heads = heads
	pl.publish(maps.Clone(pl.heads), version)
}

// head is what is known of pull request index's head.
func (pl *Planner) head(index int64) plannedHead {
	pl.hmu.Lock()
	defer pl.hmu.Unlock()
	return pl.heads[index]
}

// savePlannedLocked writes the heads and hands them to Reviewed; a failure to write is logged (at
// worst a head is planned again), and a write of another replica since they were read (a leader
// that has lost its lease) makes the next pass read theirs. The caller holds hmu.
func (pl *Planner) savePlannedLocked() {
	out := map[string]plannedHead{}
	for n, h := range pl.heads {
		out[strconv.FormatInt(n, 10)] = h
	}
	body, err := json.Marshal(out)
	if err != nil {
		pl.log.Warn("planned heads not saved", "err", err)
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), storeTimeout)
	defer cancel()
	next, ok, err := pl.store.Save(ctx, body, pl.version)
	switch {
	case err != nil:
		pl.log.Warn("planned heads not saved", "err", err)
		pl.publish(maps.Clone(pl.heads), -1)
	case !ok:
		pl.log.Warn("planned heads not saved: another replica wrote them since they were read; read again at the next pass")
		pl.loaded = false
	default:
		pl.version = next
		pl.publish(maps.Clone(pl.heads), next)
	}
}

// storeTimeout bounds a write of the planned heads.
const storeTimeout = 30 * time.Second

// startPlan records a try of pr's head before it starts; false when its tries are used up (then
// it waits for a push, with stands/plan failure saying why).
func (pl *Planner) startPlan(ctx context.Context, pr stands.PullRequest) bool {
	pl.hmu.Lock()
	h := pl.heads[pr.Index]
	if h.Head != pr.HeadSHA {
		h = plannedHead{Head: pr.HeadSHA}
	}
	if h.Attempts >= maxPlanAttempts {
		pl.heads[pr.Index] = plannedHead{Head: pr.HeadSHA, UntilPush: true, Attempts: h.Attempts}
		pl.savePlannedLocked()
		pl.hmu.Unlock()
		pl.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StateFailure,
			fmt.Sprintf("not planned: %d tries failed or were interrupted; push a new commit to try again", h.Attempts), pr.URL)
		pl.log.Warn("pull request given up on", "pull_request", pr.Index, "head", mdtext.Short(pr.HeadSHA), "tries", h.Attempts)
		return false
	}
	h.Attempts++
	pl.heads[pr.Index] = h
	pl.savePlannedLocked()
	pl.hmu.Unlock()
	return true
}

// settle records where a pull request's plan stands after a try; a plan made resets the tries.
func (pl *Planner) settle(index int64, h plannedHead) {
	pl.hmu.Lock()
	defer pl.hmu.Unlock()
	pl.heads[index] = h
	pl.savePlannedLocked()
}

// untry takes back the try a moved tracked branch stopped.
func (pl *Planner) untry(index int64) {
	pl.hmu.Lock()
	defer pl.hmu.Unlock()
	if h := pl.heads[index]; h.Attempts > 0 {
		h.Attempts--
		pl.heads[index] = h
		pl.savePlannedLocked()
	}
}

// parsePlanned reads the heads of a saved document (nil: none).
func parsePlanned(body []byte) (map[int64]plannedHead, error) {
	out := map[int64]plannedHead{}
	if body == nil {
		return out, nil
	}
	var saved map[string]plannedHead
	if err := json.Unmarshal(body, &saved); err != nil {
		return out, err
	}
	for k, h := range saved {
		if n, err := strconv.ParseInt(k, 10, 64); err == nil {
			out[n] = h
		}
	}
	return out, nil
}

// publish hands the heads, at version (-1: not saved), to Reviewed.
func (pl *Planner) publish(records map[int64]plannedHead, version int64) {
	pl.mu.Lock()
	pl.records, pl.rversion = records, version
	pl.mu.Unlock()
}
