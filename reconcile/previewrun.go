package reconcile

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/stands-engine/stands-reconciler/diff"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Pull request plans run off the poll path: a cycle hands its evaluation to one preview worker and
// goes on, so no pull request delays polling, applies or destroys. A cycle that ends while the
// worker is busy leaves its job as the next one (a newer job replaces an older one waiting).

type previewJob struct {
	main   *evaluation
	commit string
	actual []diff.Actual
}

type previewWorker struct {
	mu      sync.Mutex
	running bool
	next    *previewJob
	wg      sync.WaitGroup
	ctx     context.Context
	cancel  context.CancelFunc
}

// schedulePreviews runs the previews of job on the worker, now or after the one running.
func (r *Reconciler) schedulePreviews(job previewJob) {
	if r.cfg.Forge == nil || r.cfg.Planner == nil || r.cfg.Refs == nil {
		return
	}
	w := &r.pw
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.running {
		w.next = &job
		return
	}
	w.running = true
	w.wg.Add(1)
	go func() {
		defer w.wg.Done()
		for {
			if ctx, cancel, ok := r.leading(w.ctx); ok {
				r.previews(ctx, job.main, job.commit, job.actual)
				cancel()
			}
			w.mu.Lock()
			if w.next == nil || w.ctx.Err() != nil {
				w.running, w.next = false, nil
				w.mu.Unlock()
				return
			}
			job, w.next = *w.next, nil
			w.mu.Unlock()
		}
	}()
}

// stopPreviews cancels a running plan (previews only read; nothing is lost) and waits for it.
func (r *Reconciler) stopPreviews() {
	r.pw.cancel()
	r.pw.wg.Wait()
}

// DefaultPlanTimeout bounds one pull request's plan.
const DefaultPlanTimeout = 10 * time.Minute

// maxPlanAttempts is how often one head is tried: failed plans, and plans a stop of the reconciler
// interrupted, count alike. Past it the head gets stands/plan failure until the next push.
const maxPlanAttempts = 3

// plannedHead is what is known of one pull request's head, kept in Config.PreviewState across
// restarts.
type plannedHead struct {
	Head     string `json:"head"`
	Done     bool   `json:"done"`     // planned, or given up on: not tried again
	Attempts int    `json:"attempts"` // tries started, each counted before it starts
}

// loadPlanned reads the heads already planned, once.
func (r *Reconciler) loadPlanned() {
	if r.prs.loaded {
		return
	}
	r.prs.loaded = true
	if r.cfg.PreviewState == "" {
		return
	}
	data, err := os.ReadFile(r.cfg.PreviewState)
	if err != nil {
		if !errors.Is(err, os.ErrNotExist) {
			r.log.Warn("planned heads not read; every open pull request is planned again", "file", r.cfg.PreviewState, "err", err)
		}
		return
	}
	var saved map[string]plannedHead
	if err := json.Unmarshal(data, &saved); err != nil {
		r.log.Warn("planned heads not read; every open pull request is planned again", "file", r.cfg.PreviewState, "err", err)
		return
	}
	for k, h := range saved {
		if n, err := strconv.ParseInt(k, 10, 64); err == nil {
			r.prs.heads[n] = h
		}
	}
}

// savePlanned writes the heads, atomically; a failure is logged (at worst a head is planned again).
func (r *Reconciler) savePlanned() {
	if r.cfg.PreviewState == "" {
		return
	}
	out := map[string]plannedHead{}
	for n, h := range r.prs.heads {
		out[strconv.FormatInt(n, 10)] = h
	}
	if err := writeJSONFile(r.cfg.PreviewState, out); err != nil {
		r.log.Warn("planned heads not saved", "file", r.cfg.PreviewState, "err", err)
	}
}

// startPlan records a try of pr's head before it starts; false when the head is done, or when its
// tries are used up (then it is done, with stands/plan failure saying why).
func (r *Reconciler) startPlan(ctx context.Context, pr stands.PullRequest) bool {
	h := r.prs.heads[pr.Index]
	if h.Head != pr.HeadSHA {
		h = plannedHead{Head: pr.HeadSHA}
	}
	if h.Done {
		return false
	}
	if h.Attempts >= maxPlanAttempts {
		r.finishPlan(pr.Index, pr.HeadSHA)
		r.setCommitStatus(ctx, pr.HeadSHA, PlanContext, stands.StateFailure,
			fmt.Sprintf("not planned: %d tries failed or were interrupted; push a new commit to try again", h.Attempts), pr.URL)
		r.log.Warn("pull request given up on", "pull_request", pr.Index, "head", short(pr.HeadSHA), "tries", h.Attempts)
		return false
	}
	h.Attempts++
	r.prs.heads[pr.Index] = h
	r.savePlanned()
	return true
}

// finishPlan marks a head done.
func (r *Reconciler) finishPlan(index int64, head string) {
	r.prs.heads[index] = plannedHead{Head: head, Done: true, Attempts: r.prs.heads[index].Attempts}
	r.savePlanned()
}
