package expiry

import (
	"fmt"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"golang.org/x/net/html"
)

// TestRemovalBodyStaysInert writes a removal pull request's description on a real Gitea twice, once
// with every value a repository or a commit can set holding a hostile value (a stand's id, the place
// that set its end, the commit's author name, the branch, the policy's place) and once with plain
// ones, and reads both as Gitea renders them for the reviewer: the two must have the same elements;
// and the same in the headless browser. Its control run, built with the escaping off, fails both.
func TestRemovalBodyStaysInert(t *testing.T) {
	testenv.NeedsServer(t, "Gitea")
	g := testenv.StartGitea(t)
	api := g.API(t)
	repo := g.CreateRepo(t, "inert")
	repo.Commit("README.md", "inert\n", "first")
	repo.ChangeOn("removal", "a removal", map[string]string{"change.txt": "change"})
	idx := repo.Open(api, "removal", "a removal")
	repo.MakePublic(api)
	var docs map[string][]string
	render := func(name string) (*html.Node, error) {
		b := string(hostileBodies(docs[name]))
		if _, _, err := api.EditPullRequest(repo.Info.Owner.UserName, repo.Info.Name, idx, gitea.EditPullRequestOption{Body: &b}); err != nil {
			t.Fatal(err)
		}
		return repo.RenderedMarkup(fmt.Sprintf("pulls/%d", idx), "you set this end")
	}
	rows := func([]string) int { return 0 } // a description without a table
	testenv.EveryHostileValue(t, func(all map[string][]string) { docs = all }, render, rows)
	testenv.BrowserShowsEveryValue(t, repo.Info.HTMLURL+"/", "you set this end", func(name string) string {
		if _, err := render(name); err != nil {
			t.Logf("the %s document: %v", name, err)
		}
		return fmt.Sprintf("pulls/%d", idx)
	}, 0)
	testenv.ShowFailsWithTags(t, ".", "TestRemovalBodyStaysInert", "stands_inert_off", "elements differ with hostile value",
		"the browser shows other elements with the hostile values")
}

// hostileBodies is a description per value, every free-form field holding it, with and without the
// policy's merge and a known author.
func hostileBodies(values []string) mdtext.Markup {
	var d mdtext.Doc
	for i, v := range values {
		end := stands.Ending{ID: v, End: time.Date(2026, 12, 24, 15, 0, 0, 0, time.UTC), At: v, Cost: v, ByDefault: i%2 == 1}
		e := stands.Endings{Commit: v, WarnBefore: time.Hour, MergeAtEnd: i%2 == 0, PolicyAt: v}
		by := stands.Author{Commit: v, Name: v}
		if i%3 == 0 {
			by.Login = "alice" // a Gitea user name, as Gitea gives it
		}
		d.Add(body(end, e, by, v))
	}
	return d.Markup()
}
