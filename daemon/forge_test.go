package daemon

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/fakes"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// testForge is a second code forge, nothing of Gitea in it: test/fakes' forge of the loop and the
// plans, with the removal pull requests and the branch protection a forge also serves.
type testForge struct {
	*fakes.Forge
	protections atomic.Int32
}

var _ Forge = (*testForge)(nil)

var errNoRemovals = errors.New("this forge takes no removal pull requests")

func (f *testForge) Me(context.Context) (string, error) { return "stands-reconciler", nil }
func (f *testForge) PullState(context.Context, string, string) (int64, string, error) {
	return 0, "", nil
}
func (f *testForge) BranchCommit(ctx context.Context, branch string) (string, time.Time, error) {
	tip, err := f.BranchTip(ctx, branch)
	return tip, time.Time{}, err
}
func (f *testForge) OpenPullRequest(context.Context, string, string, string, mdtext.Markup) (stands.PullRequest, error) {
	return stands.PullRequest{}, errNoRemovals
}
func (f *testForge) ClosePullRequest(context.Context, int64, string, mdtext.Markup) error {
	return errNoRemovals
}
func (f *testForge) MergePullRequest(context.Context, int64, string, string) error {
	return errNoRemovals
}
func (f *testForge) CommitLogin(context.Context, string) (string, error) { return "", nil }
func (f *testForge) Protection(_ context.Context, branch string) (stands.Protection, error) {
	f.protections.Add(1)
	return stands.Protection{Branch: branch, Rule: branch, RequiredApprovals: 1, StatusCheck: true,
		StatusCheckContexts: []string{"stands/plan"}, StaleApprovalsDismissed: true, BlockOutdatedBranch: true,
		BlockAdminMergeOverride: true, PushRestricted: true}, nil
}

// TestASecondForge: the daemon's parts reach the code forge through Forge alone. Given a forge of
// the test's own (WithForge) on a repository that has no Gitea at all, the stand's commit status
// and the tracked branch's protection go through it.
func TestASecondForge(t *testing.T) {
	s, env := testSettings(t)
	f := &testForge{Forge: fakes.NewForge()}
	ctx := testenv.Context(t, time.Minute)
	d, err := Open(ctx, s, env, origins{}, WithLogger(testenv.Logger(t)), WithoutListeners(), WithForge(f))
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	statuses, err := d.Once(ctx)
	if err != nil || statuses["local_p_dev"].Phase != reason.Ready {
		t.Fatalf("one cycle: %v %+v", err, statuses)
	}
	f.Mu.Lock()
	var set []string
	for key, state := range f.Statuses {
		if strings.HasSuffix(key, " stands/local_p_dev") {
			set = append(set, state)
		}
	}
	f.Mu.Unlock()
	if len(set) == 0 || !strings.HasPrefix(set[len(set)-1], string(stands.StateSuccess)) {
		t.Errorf("the stand's commit status through the test's forge: %q", set)
	}
	wait.For(t, "the branch protection read through the test's forge", 30*time.Second, func() bool { return f.protections.Load() > 0 })
}
