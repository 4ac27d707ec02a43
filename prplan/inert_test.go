package prplan

import (
	"context"
	"fmt"
	"testing"

	"github.com/stands-engine/stands-reconciler/gitsource"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"golang.org/x/net/html"
)

// TestPlanCommentStaysInert posts the plan comment to a pull request on a real Gitea twice, once
// with every free-form field of every row holding a hostile value and once with plain ones, and
// reads both as Gitea renders them for the reviewer: the two must have the same elements, so no
// value became markup and every row is shown; and the same in the headless browser, on the page
// Gitea's scripts have run on. Its control run, built with the escaping off, fails both.
func TestPlanCommentStaysInert(t *testing.T) {
	testenv.NeedsServer(t, "Gitea")
	g := testenv.StartGitea(t)
	api := g.API(t)
	repo := g.CreateRepo(t, "inert")
	repo.Commit("README.md", "inert\n", "first")
	forge, err := gitsource.NewGitea(repo.Info.CloneURL, func() (string, error) { return g.Token, nil })
	if err != nil {
		t.Fatal(err)
	}
	// One pull request, its comment edited for each document, as a new head's plan edits it.
	repo.ChangeOn("change", "a change", map[string]string{"change.txt": "change"})
	idx := repo.Open(api, "change", "a change")
	repo.MakePublic(api)
	var docs map[string][]string
	render := func(name string) (*html.Node, error) {
		if _, err := forge.UpsertComment(context.Background(), idx, CommentMarker, hostilePlan(docs[name]).comment(stands.PullRequest{Index: idx})); err != nil {
			t.Fatal(err)
		}
		return repo.RenderedMarkup(fmt.Sprintf("pulls/%d", idx), "Stands plan for")
	}
	// The plan's table: a row per stand and its problem, and the header.
	rows := func(plain []string) int { return len(hostilePlan(plain).rows) + 1 }
	testenv.EveryHostileValue(t, func(all map[string][]string) { docs = all }, render, rows)
	testenv.BrowserShowsEveryValue(t, repo.Info.HTMLURL+"/", "Stands plan for", func(name string) string {
		if _, err := render(name); err != nil {
			t.Logf("the %s document: %v", name, err) // the browser shows what the reviewer gets then
		}
		return fmt.Sprintf("pulls/%d", idx)
	}, rows(docs["plain-all"]))
	testenv.ShowFailsWithTags(t, ".", "TestPlanCommentStaysInert", "stands_inert_off", "elements differ with hostile value",
		"the browser shows other elements with the hostile values")
}

// hostilePlan is a plan whose every free-form field holds one of values: a row per value with each
// kind of step, a problem, a warning and a conflict.
func hostilePlan(values []string) *prPlan {
	p := &prPlan{head: "0123456789abcdef", base: "fedcba9876543210", branch: "main", priced: true, cur: "EUR"}
	actions := []string{"create", "update", "destroy", "blocked"}
	for i, v := range values {
		p.rows = append(p.rows, planRow{id: v, action: actions[i%len(actions)], note: v, counted: true, steps: []stands.Step{
			{Op: "create", ServerName: v, ServerType: v, Location: v},
			{Op: "replace", ServerName: v, ServerType: v, OldServerType: v, Location: v},
			{Op: "update", ServerName: v, ServerType: v, OldServerType: v + "-old", Location: v},
			{Op: "delete", ServerName: v, OldServerType: v, OldLocation: v},
			{Op: v, ServerName: v},
			{Op: "update", Kind: "instance", Instance: v, Node: v, Changed: "configHash"},
			{Op: "update", Kind: v, Node: v, MayChange: true},
		}})
		p.rows = append(p.rows, planRow{id: v, action: "invalid", note: v + "\n" + v})
		p.warnings = append(p.warnings, manifest.Diagnostic{Pos: manifest.Pos{File: v, Line: 1}, Msg: v})
		p.conflicts = append(p.conflicts, v)
	}
	return p
}
