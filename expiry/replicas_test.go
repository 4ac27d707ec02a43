package expiry

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestOnePullRequestAcrossReplicas: five reconcilers, each with its own clone of the repository, handle
// the same ending at once against a real Gitea, twice over: one branch, one pull request. Its
// control: a second end of the same stand gets a second one.
func TestOnePullRequestAcrossReplicas(t *testing.T) {
	testenv.NeedsServer(t, "Gitea")
	g := testenv.StartGitea(t)
	api := g.API(t)
	repo := g.CreateRepo(t, "stands")
	end := time.Now().Add(10 * time.Minute).UTC().Truncate(time.Second)
	head := repo.Change("x ends soon", map[string]string{"stands/x/stand.yml": "stand:\n  project: x\n  env: dev\n  expires: " + end.Format(time.RFC3339) + "\n"})
	repo.WaitBranch(api, "main") // Gitea records a push asynchronously
	forge, err := gitsource.NewGitea(repo.Info.CloneURL, func() (string, error) { return g.Token, nil })
	if err != nil {
		t.Fatal(err)
	}
	endings := func(at time.Time) stands.Endings {
		return stands.Endings{Commit: head, Declared: map[string]bool{"local_x_dev": true}, WarnBefore: time.Hour,
			Ends: []stands.Ending{{ID: "local_x_dev", File: "stands/x/stand.yml", End: at, SetIn: "stands/x/stand.yml", At: "stands/x/stand.yml:4:12"}}}
	}
	var warners []*Warner
	for range 5 {
		src := gitsource.New(repo.Info.CloneURL, "main", gitsource.WithToken(g.User, func() (string, error) { return g.Token, nil }))
		if _, err := src.Fetch(context.Background()); err != nil {
			t.Fatal(err)
		}
		warners = append(warners, New(Config{Branch: "main"}, forge, src))
	}
	runAll := func(e stands.Endings) {
		var wg sync.WaitGroup
		for _, w := range warners {
			wg.Go(func() {
				if err := w.run(context.Background(), e); err != nil {
					t.Logf("a replica's run: %v", err) // a lost race may be an error once; the count decides
				}
			})
		}
		wg.Wait()
	}
	count := func() int {
		prs, _, err := api.ListRepoPullRequests(repo.Info.Owner.UserName, repo.Info.Name, gitea.ListPullRequestsOptions{State: gitea.StateAll})
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, pr := range prs {
			if strings.HasPrefix(pr.Title, "Remove stand local_x_dev:") {
				n++
			}
		}
		return n
	}
	runAll(endings(end))
	runAll(endings(end))
	if n := count(); n != 1 {
		t.Errorf("%d pull requests for one stand and end from five replicas, want 1", n)
	}
	branches, _, err := api.ListRepoBranches(repo.Info.Owner.UserName, repo.Info.Name, gitea.ListRepoBranchesOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, b := range branches {
		names = append(names, b.Name)
	}
	if want := fmt.Sprint([]string{Branch("local_x_dev", end), "main"}); fmt.Sprint(names) != want {
		t.Errorf("branches %v, want %s", names, want)
	}
	// The control: a new end (the first closed as moved) is a new pull request.
	runAll(endings(end.Add(time.Minute)))
	if n := count(); n != 2 {
		t.Errorf("%d pull requests after the end moved, want 2", n)
	}
}
