package reconcile

import (
	"fmt"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"golang.org/x/net/html"
)

// TestStatusTableStaysInert commits STATUS.md to a real Gitea twice, once with every field a
// repository or a commit can set holding a hostile value (stand ids, phases and reasons read back
// from status files, node names, messages, unreadable paths, who paused and why) and once with
// plain ones, and reads both as Gitea renders them for on-call: the two must have the same
// elements, so no value became markup and every stand's row is shown; and the same in the headless
// browser, on the page Gitea's scripts have run on. Its control run, built with the escaping off,
// fails both.
func TestStatusTableStaysInert(t *testing.T) {
	repo := publicRepo(t, "inert")
	publish := func(docs map[string][]string) {
		files := map[string]string{}
		for name, values := range docs {
			files[name+"/STATUS.md"] = string(hostileTable(values))
		}
		repo.Change("every status table", files)
	}
	render := func(name string) (*html.Node, error) {
		return repo.RenderedMarkup("src/branch/main/"+name+"/STATUS.md", "Written by stands-reconciler")
	}
	// The table: a row per stand, and the header.
	var plainAll int
	testenv.EveryHostileValue(t, publish, render, func(plain []string) int { plainAll = len(plain) + 1; return plainAll })
	// Past pageRows stands: the counts, the stands that need attention (each value's) and the index.
	testenv.EveryHostileValue(t, func(docs map[string][]string) {
		files := map[string]string{}
		for name, values := range docs {
			files["paged-"+name+"/STATUS.md"] = string(hostilePaged(values)[stands.StatusFile])
		}
		repo.Change("every paged status", files)
	}, func(name string) (*html.Node, error) {
		return repo.RenderedMarkup("src/branch/main/paged-"+name+"/STATUS.md", "Written by stands-reconciler")
	}, func(plain []string) int { return 2*len(plain) + 3 }) // both headers, a row per value in each, the padding's page
	testenv.BrowserShowsEveryValue(t, repo.Info.HTMLURL+"/", "Written by stands-reconciler",
		func(name string) string { return "src/branch/main/" + name + "/STATUS.md" }, plainAll)
	testenv.ShowFailsWithTags(t, ".", "TestStatusTableStaysInert", "stands_inert_off", "elements differ with hostile value",
		"the browser shows other elements with the hostile values")
}

// hostileTable is STATUS.md with a stand per value, each field of its row holding the value, every
// value an unreadable manifest, and a pause and plan-only switch by and for each.
func hostileTable(values []string) []byte {
	all := map[string]*Status{}
	for i, v := range values {
		id := fmt.Sprintf("%03d-%s", i, v) // the table is sorted by id: keep the values' order
		all[id] = &Status{ID: id, Phase: reason.Phase(v), Reason: reason.Reason(v), Message: v, LastSuccessfulCommit: v,
			Nodes: []stands.Node{{Name: v, PublicIPv4: v}, {Name: v, PublicIPv4: v}}}
	}
	sw := &switches{}
	at := time.Date(2026, 12, 3, 0, 0, 0, 0, time.UTC)
	var banner mdtext.Markup
	for _, v := range values {
		sw.local.Paused = &Switch{By: v, At: at, Reason: v}
		sw.local.PlanOnly = &Switch{By: v, At: at}
		banner += sw.banner()
	}
	return statusTable(all, values, banner)
}

// hostilePaged is STATUS.md and its pages past pageRows stands: a Failed stand per value, each field
// of its row holding the value, and pageRows stands of another owner on one page.
func hostilePaged(values []string) map[string][]byte {
	all := map[string]*Status{}
	for i, v := range values {
		id := fmt.Sprintf("%03d-%s", i, v)
		all[id] = &Status{ID: id, Phase: reason.Failed, Reason: reason.Reason(v), Message: v, LastSuccessfulCommit: v,
			Nodes: []stands.Node{{Name: v, PublicIPv4: v}}}
	}
	for i := range pageRows {
		id := fmt.Sprintf("zzz_pad_%03d", i)
		all[id] = &Status{ID: id, Phase: reason.Ready}
	}
	return statusFiles(all, nil, "")
}

// publicRepo is a repository of a real Gitea with a first commit, public: the browser reads it as an
// anonymous reader, as a public repository's on-call can.
func publicRepo(t *testing.T, name string) *testenv.Repo {
	t.Helper()
	testenv.NeedsServer(t, "Gitea")
	g := testenv.StartGitea(t)
	repo := g.CreateRepo(t, name)
	repo.Commit("README.md", name+"\n", "first")
	repo.MakePublic(g.API(t))
	return repo
}
