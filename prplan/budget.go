package prplan

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"
)

// Budget bounds what one pull request head's plan may use, across all its stands: a pull request
// chooses how many stands it has and what their templates do, and a plan worker must come free
// again (docs/pr-workflow.md#plan-budgets). Past it the plan fails naming the budget, and the head
// is not tried again: only a push is.
type Budget struct {
	Wall      time.Duration // from the start of its judgement to its comment
	RenderCPU time.Duration // the CPU time of the sandboxes that render its stands
}

// DefaultBudget and DefaultWorkers are the daemon's defaults: a plan of an ordinary pull request
// takes seconds, and two workers let one pull request at its budget delay no other.
var DefaultBudget = Budget{Wall: 5 * time.Minute, RenderCPU: time.Minute}

const DefaultWorkers = 2

// errBudget ends a plan past its budget; the error says which.
var errBudget = errors.New("over the plan's budget")

// context is the context of one head's plan, cancelled with errBudget when its wall time runs
// out, and carrying its render CPU budget.
func (b Budget) context(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithTimeoutCause(ctx, b.Wall, fmt.Errorf("%w of %s wall time", errBudget, b.Wall))
	return context.WithValue(ctx, cpuKey{}, &cpuBudget{limit: b.RenderCPU, left: b.RenderCPU}), cancel
}

type cpuKey struct{}

// cpuBudget is what is left of a head's render CPU budget; the renders of one plan may run in
// several children, one after the other.
type cpuBudget struct {
	mu    sync.Mutex
	limit time.Duration
	left  time.Duration
}

// cpuBudgetOf is the render CPU budget of the plan ctx belongs to; nil outside one (the tracked
// branch's own render, which the reconciler trusts).
func cpuBudgetOf(ctx context.Context) *cpuBudget {
	b, _ := ctx.Value(cpuKey{}).(*cpuBudget)
	return b
}

// withoutBudget is ctx with no render CPU budget: the tracked branch is rendered at a pull
// request's plan, but is not its cost.
func withoutBudget(ctx context.Context) context.Context {
	return context.WithValue(ctx, cpuKey{}, (*cpuBudget)(nil))
}

func (b *cpuBudget) remaining() time.Duration {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.left
}

// charge takes used off the budget, and returns the budget's error once it is used up.
func (b *cpuBudget) charge(used time.Duration) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.left -= used
	if b.left > 0 {
		return nil
	}
	return b.err()
}

func (b *cpuBudget) err() error {
	return fmt.Errorf("%w of %s render CPU time", errBudget, b.limit)
}
