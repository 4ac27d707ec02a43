// Package prplan plans pull requests: for every open pull request into the tracked branch, what
// merging it would do to the stands — one comment on the pull request and the stands/plan commit
// status (docs/pr-workflow.md). It is the reconciler's boundary with untrusted input: everything
// that reads a pull request's content is here, with its own limits. A pull request's head is judged
// with placeholders in place of secrets, its changed stands are rendered in a sandbox child that a
// runaway template cannot outlive, only heads that are the tip of a branch of this repository are
// planned, and the plan shows servers, types and costs, never a value of the manifest.
//
// The loop (package reconcile) hands the tracked branch's judgement to Schedule after each cycle;
// plans run on one worker of their own, so no pull request delays a cycle.
package prplan

import (
	"context"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Forge is the Gitea API: pull requests, the one comment per pull request and commit statuses.
type Forge interface {
	PullRequests(ctx context.Context, base string) ([]stands.PullRequest, error)
	// BranchTip is the commit a branch of the repository points at, "" when there is no such branch.
	BranchTip(ctx context.Context, branch string) (string, error)
	UpsertComment(ctx context.Context, index int64, marker string, body mdtext.Markup) error
	SetStatus(ctx context.Context, sha, context string, state stands.CommitState, description, targetURL string) error
}

// Previewer previews stands without changing anything (the engine).
type Previewer interface {
	Preview(ctx context.Context, in stands.Input) (*stands.Result, error)
	PreviewNew(ctx context.Context, in stands.Input) (*stands.Result, error)
	Prices(ctx context.Context) (stands.Prices, error)
	StandServers(ctx context.Context, standID string) ([]stands.Server, error)
}

// Refs fetches a pull request's head.
type Refs interface {
	FetchRef(ctx context.Context, ref string) (*stands.Snapshot, error)
}

// Config tunes the plans. Zero values take the defaults shown.
type Config struct {
	Branch string // the tracked branch: pull requests into it are planned
	// Guards are the cycle's destroy guards, so a plan decides what the merge's cycle would.
	Guards     judge.Guards
	Passphrase string        // keys the spec hash, as the cycle's judgement does
	Timeout    time.Duration // bounds one pull request's plan (DefaultTimeout)
	// StateFile keeps which pull request heads were planned across restarts ("" keeps them in
	// memory only).
	StateFile string
	// Sandbox renders a pull request's stands where a runaway template can be killed; nil renders
	// them in this process.
	Sandbox Sandbox
	Log     *slog.Logger
	// Metrics, when set, gets the plans' metrics (stands_pull_request_plans_total).
	Metrics prometheus.Registerer
}

// DefaultTimeout bounds one pull request's plan.
const DefaultTimeout = 10 * time.Minute

// Planner plans the open pull requests, one at a time, on a worker of its own.
type Planner struct {
	cfg   Config
	forge Forge
	prev  Previewer
	refs  Refs
	sec   manifest.SecretSource
	log   *slog.Logger
	plans *prometheus.CounterVec

	w worker
	// Used by the worker only: which head of each open pull request was planned, and the tracked
	// branch under placeholders, for the commit it was judged at.
	loaded      bool
	heads       map[int64]plannedHead
	blindCommit string
	blind       *blindEvaluation
}

// New returns a planner. sec is asked only whether a secret exists (SecretExists when it has it,
// else its value, dropped at once): plans never see a secret's value.
func New(cfg Config, forge Forge, prev Previewer, refs Refs, sec manifest.SecretSource) *Planner {
	if cfg.Timeout <= 0 {
		cfg.Timeout = DefaultTimeout
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	pl := &Planner{cfg: cfg, forge: forge, prev: prev, refs: refs, sec: sec, log: cfg.Log, heads: map[int64]plannedHead{},
		plans: promauto.With(cfg.Metrics).NewCounterVec(prometheus.CounterOpts{Name: "stands_pull_request_plans_total",
			Help: "Pull request plans, by result: success, failure (the plan refuses), error (planning failed), untrusted (no plan)."}, []string{"result"})}
	pl.w.ctx, pl.w.cancel = context.WithCancel(context.Background())
	return pl
}
