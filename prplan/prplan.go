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
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/internal/statefile"
	"github.com/stands-engine/stands-reconciler/judge"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
)

// Forge is the Gitea API: pull requests, the one comment per pull request and commit statuses.
type Forge interface {
	PullRequests(ctx context.Context, base string) ([]stands.PullRequest, error)
	// BranchTip is the commit a branch of the repository points at, "" when there is no such branch.
	BranchTip(ctx context.Context, branch string) (string, error)
	UpsertComment(ctx context.Context, index int64, marker string, body mdtext.Markup) (time.Time, error)
	SetStatus(ctx context.Context, sha, context string, state stands.CommitState, description, targetURL string) error
	// Reviews lists a pull request's reviews, every one.
	Reviews(ctx context.Context, index int64) ([]stands.Review, error)
	// Contributors names who took part in a pull request's change up to head: who opened it, who
	// pushed to it, and the authors and committers of its commits; an error while the forge has not
	// recorded the push of head.
	Contributors(ctx context.Context, index int64, head string) (stands.Contributors, error)
	// CanWrite says whether user may push to the repository, as the forge says now.
	CanWrite(ctx context.Context, user string) (bool, error)
	// Merged is the commit that merged a pull request into the tracked branch, "" while it is not
	// merged; open says it is open still.
	Merged(ctx context.Context, index int64) (merge string, open bool, err error)
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
	// FetchPull fetches ref and returns its head and the merge base of the head and onto, a commit
	// of the tracked branch.
	FetchPull(ctx context.Context, ref, onto string) (head, base *stands.Snapshot, err error)
}

// Config tunes the plans. Zero values take the defaults shown.
type Config struct {
	Branch string // the tracked branch: pull requests into it are planned
	// Guards are the cycle's destroy guards, so a plan decides what the merge's cycle would.
	Guards     judge.Guards
	Passphrase string // keys the spec hash, as the cycle's judgement does
	// Budget bounds each pull request head's plan (DefaultBudget), Workers how many pull requests
	// are planned at once (DefaultWorkers).
	Budget  Budget
	Workers int
	// StateFile keeps which pull request heads were planned across restarts ("" keeps them in
	// memory only); Store, when set, instead (with replicas: the heads they share, which each
	// one's Reviewed reads and the leader writes).
	StateFile string
	Store     HeadStore
	// Sandbox renders a pull request's stands where a runaway template can be killed; nil renders
	// them in this process.
	Sandbox Sandbox
	// RequiredApprovals is how many approvals that count a change needs (docs/pr-workflow.md#four-eyes),
	// asked at each question: the tracked branch's protection may change. nil, or under 1: one.
	RequiredApprovals func() int
	// MergeWait is how long the review of a change waits for Gitea to mark merged an open pull request
	// that planned it (DefaultMergeWait): Gitea pushes a merge before it marks the pull request, and
	// the push's webhook may start the cycle in between. Once per pull request.
	MergeWait time.Duration
	// ReviewStatus sets stands/review on the open pull requests (review_status.go): the loop's
	// review gate is on.
	ReviewStatus bool
	// SecretRefresh is how long a stand of the tracked branch judged for the plans is kept while a
	// new commit leaves its files alone: its secrets' existence is checked again after it. 0: every
	// commit of the tracked branch judges every stand again.
	SecretRefresh time.Duration
	Log           *slog.Logger
	// Metrics, when set, gets the plans' metrics (stands_pull_request_plans_total).
	Metrics prometheus.Registerer
}

// HeadStore keeps the planned pull request heads (lease.Document, with replicas; a file otherwise):
// a document replaced whole, only over the version read.
type HeadStore interface {
	// Load reads the document, nil when it is at the known version.
	Load(ctx context.Context, known int64) (body []byte, version int64, err error)
	// Save replaces the version read; ok is false when another wrote since.
	Save(ctx context.Context, body []byte, version int64) (next int64, ok bool, err error)
}

// Planner plans the open pull requests, Config.Workers at a time, off the loop's path.
type Planner struct {
	cfg   Config
	forge Forge
	prev  Previewer
	refs  Refs
	sec   manifest.SecretSource
	log   *slog.Logger
	plans *prometheus.CounterVec

	w     worker
	store HeadStore
	// mu guards records: what the workers knew of each pull request's head when they last saved
	// it, read by Reviewed from the loop, at rversion of the store (read again when it moves).
	mu       sync.Mutex
	records  map[int64]plannedHead
	rversion int64
	merges   map[int64]string // the merge commits of pull requests, once merged
	waited   map[int64]bool   // the open pull requests MergeWait was spent on
	// reviewSet is the stands/review last set on each open pull request's head.
	reviewSet map[int64]string
	// hmu guards the workers' own: which head of each open pull request was planned. Each pull
	// request is planned by one worker at a time, but they share the map and its file.
	hmu     sync.Mutex
	loaded  bool
	version int64 // of the heads in the store
	heads   map[int64]plannedHead
	// bmu guards the tracked branch under placeholders, for the commit it was judged at.
	bmu         sync.Mutex
	blindCommit string
	blind       *blindEvaluation
}

// New returns a planner. sec is asked only whether a secret exists (SecretExists when it has it,
// else its value, dropped at once): plans never see a secret's value.
func New(cfg Config, forge Forge, prev Previewer, refs Refs, sec manifest.SecretSource) *Planner {
	if cfg.Budget.Wall <= 0 {
		cfg.Budget.Wall = DefaultBudget.Wall
	}
	if cfg.Budget.RenderCPU <= 0 {
		cfg.Budget.RenderCPU = DefaultBudget.RenderCPU
	}
	if cfg.MergeWait == 0 {
		cfg.MergeWait = DefaultMergeWait
	}
	if cfg.Workers <= 0 {
		cfg.Workers = DefaultWorkers
	}
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.DiscardHandler)
	}
	pl := &Planner{cfg: cfg, forge: forge, prev: prev, refs: refs, sec: sec, log: cfg.Log, heads: map[int64]plannedHead{}, merges: map[int64]string{}, waited: map[int64]bool{}, reviewSet: map[int64]string{},
		plans: promauto.With(cfg.Metrics).NewCounterVec(prometheus.CounterOpts{Name: "stands_pull_request_plans_total",
			Help: "Pull request plans, by result: success, failure (the plan refuses), error (planning failed), untrusted (no plan)."}, []string{"result"})}
	pl.w.ctx, pl.w.cancel = context.WithCancel(context.Background())
	pl.store = cfg.Store
	if pl.store == nil {
		pl.store = statefile.NewDoc(cfg.StateFile)
	}
	pl.rversion = -1 // Reviewed reads the store at its first question: it may come before the first plan
	return pl
}
