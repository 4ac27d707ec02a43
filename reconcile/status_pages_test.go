package reconcile

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// manyStatuses is n Ready stands of owner local (as the bench names them) and three of alice.
func manyStatuses(n int) map[string]*Status {
	all := map[string]*Status{}
	for i := range n {
		id := fmt.Sprintf("local_b%04d_dev", i)
		all[id] = &Status{SchemaVersion: SchemaVersion, ID: id, Phase: reason.Ready, Reason: reason.Applied,
			Nodes: []stands.Node{{Name: "kv", PublicIPv4: "203.0.113.7"}}, LastSuccessfulCommit: "0123456789abcdef", MonthlyCost: &Cost{Amount: 4.5, Currency: "EUR"}}
	}
	for _, id := range []string{"alice_web_dev", "alice_web_prod", "alice_api_dev"} {
		all[id] = &Status{SchemaVersion: SchemaVersion, ID: id, Phase: reason.Ready}
	}
	return all
}

// tenThousand is 10,003 stands of which 30 are in trouble: 10 Degraded, 10 Failed, 10 Blocked,
// spread over the pages.
func tenThousand() (map[string]*Status, []string) {
	all := manyStatuses(10000)
	var troubled []string
	for i, p := range []struct {
		phase   reason.Phase
		reason  reason.Reason
		message string
	}{
		{reason.Degraded, reason.InstanceUnhealthy, "kv--main: unit failed"},
		{reason.Failed, reason.RateLimited, "create server: rate limited by Hetzner (retry in 4m)\nsecond line"},
		{reason.Blocked, reason.Unreviewed, "the change of 1a2b3c4d5e6f is not reviewed: ctl approve local_bNNNN_dev"},
	} {
		for j := range 10 {
			id := fmt.Sprintf("local_b%04d_dev", 997*(10*i+j)%10000)
			all[id].Phase, all[id].Reason, all[id].Message = p.phase, p.reason, p.message
			troubled = append(troubled, id)
		}
	}
	return all, troubled
}

// TestStatusPages: past pageRows stands STATUS.md is the counts, the stands that need attention and
// an index; every stand is on one page of at most pageRows, named by the beginning of its ids; a
// stand added or removed changes its page and STATUS.md only.
func TestStatusPages(t *testing.T) {
	all, troubled := tenThousand()
	files := statusFiles(all, nil, "")

	t.Run("every stand on one page", func(t *testing.T) {
		pages := paginate(sortedIDs(all))
		var seen []string
		for _, pg := range pages {
			if len(pg.ids) == 0 || len(pg.ids) > pageRows {
				t.Errorf("page %s holds %d stands, want 1 to %d", pg.name, len(pg.ids), pageRows)
			}
			for _, id := range pg.ids {
				if !strings.HasPrefix(id, pg.name) {
					t.Errorf("%s is on page %s", id, pg.name)
				}
			}
			seen = append(seen, pg.ids...)
			if _, ok := files[pg.file()]; !ok {
				t.Errorf("no file for page %s", pg.name)
			}
		}
		if !slices.Equal(seen, sortedIDs(all)) {
			t.Errorf("the pages hold %d stands, not each of the %d once in order", len(seen), len(all))
		}
		if len(files) != len(pages)+1 {
			t.Errorf("%d files for %d pages and STATUS.md", len(files), len(pages))
		}
		if len(pages) > 110 {
			t.Errorf("%d pages for %d stands", len(pages), len(all))
		}
		page := string(files["status/pages/local_b00.md"])
		if !strings.Contains(page, "[`local_b0000_dev`](../../status/local_b0000_dev.json)") || !strings.Contains(page, "(../../STATUS.md)") {
			t.Errorf("page local_b00 does not link its stands' files and STATUS.md:\n%.600s", page)
		}
	})

	t.Run("STATUS.md is the page on-call reads", func(t *testing.T) {
		md := string(files[stands.StatusFile])
		if len(md) > 32<<10 {
			t.Errorf("STATUS.md is %d bytes at %d stands", len(md), len(all))
		}
		if !strings.Contains(md, "**10003 stands**: 9973 `Ready`, 10 `Failed`, 10 `Degraded`, 10 `Blocked`.") {
			t.Errorf("no counts:\n%.800s", md)
		}
		head, index, ok := strings.Cut(md, "## Every stand")
		if !ok {
			t.Fatalf("no index of pages:\n%s", md)
		}
		var order []reason.Phase
		for _, id := range troubled {
			if strings.Count(head, "`"+id+"`") != 1 {
				t.Errorf("%s needs attention, shown %d times above the index", id, strings.Count(head, "`"+id+"`"))
			}
		}
		for line := range strings.Lines(head) {
			for _, p := range []reason.Phase{reason.Failed, reason.Degraded, reason.Blocked} {
				if strings.Contains(line, "| `"+string(p)+"` |") {
					order = append(order, p)
				}
			}
		}
		if want := slices.Concat(slices.Repeat([]reason.Phase{reason.Failed}, 10), slices.Repeat([]reason.Phase{reason.Blocked}, 10), slices.Repeat([]reason.Phase{reason.Degraded}, 10)); !slices.Equal(order, want) {
			t.Errorf("the stands that need attention are in the order %v, want Failed, Blocked, Degraded", order)
		}
		if strings.Contains(head, "local_b0001_dev") || strings.Contains(head, "second line") {
			t.Error("above the index: a Ready stand, or a message's second line")
		}
		if !strings.Contains(head, "**Total monthly cost: `45000.00 EUR`**, and 3 stand(s) of unknown cost") {
			t.Errorf("no total cost:\n%.800s", head)
		}
		if !strings.Contains(index, "| [`local_b00`](status/pages/local_b00.md) | 100 | `local_b0000_dev` | `local_b0099_dev` | 1 |") {
			t.Errorf("no index row for local_b00 with its one stand in trouble:\n%.800s", index)
		}
	})

	t.Run("at most attentionRows need attention above the index", func(t *testing.T) {
		many := manyStatuses(1000)
		for i := range 250 {
			many[fmt.Sprintf("local_b%04d_dev", i)].Phase = reason.Failed
		}
		md := string(statusFiles(many, nil, "")[stands.StatusFile])
		head, _, _ := strings.Cut(md, "## Every stand")
		if n := strings.Count(head, "| `Failed` |"); n != attentionRows || !strings.Contains(head, "## Need attention: 250") || !strings.Contains(head, "And 150 more") {
			t.Errorf("250 Failed: %d rows above the index, want %d and the count of the others", n, attentionRows)
		}
	})

	t.Run("a stand added or removed changes its page and STATUS.md", func(t *testing.T) {
		more := maps.Clone(all)
		more["local_b5000x_dev"] = &Status{SchemaVersion: SchemaVersion, ID: "local_b5000x_dev", Phase: reason.Progressing}
		if got := changedFiles(files, statusFiles(more, nil, "")); !slices.Equal(got, []string{stands.StatusFile, "status/pages/local_b50.md"}) {
			t.Errorf("a stand added changed %v", got)
		}
		fewer := maps.Clone(all)
		delete(fewer, "local_b0042_dev")
		if got := changedFiles(files, statusFiles(fewer, nil, "")); !slices.Equal(got, []string{stands.StatusFile, "status/pages/local_b00.md"}) {
			t.Errorf("a stand removed changed %v", got)
		}
		moved := maps.Clone(all)
		moved["local_b7777_dev"] = &Status{SchemaVersion: SchemaVersion, ID: "local_b7777_dev", Phase: reason.Progressing}
		if got := changedFiles(files, statusFiles(moved, nil, "")); !slices.Equal(got, []string{stands.StatusFile, "status/pages/local_b77.md"}) {
			t.Errorf("a stand's phase changed %v", got)
		}
	})

	t.Run("up to pageRows, one table as before", func(t *testing.T) {
		small := manyStatuses(pageRows - 3)
		got := statusFiles(small, []string{"stands/x/stand.yml"}, "")
		if len(got) != 1 || string(got[stands.StatusFile]) != string(statusTable(small, []string{"stands/x/stand.yml"}, "")) {
			t.Errorf("%d stands: %d files, or STATUS.md not the one table", len(small), len(got))
		}
	})
}

// changedFiles lists the paths whose content differs between two sets of files.
func changedFiles(a, b map[string][]byte) []string {
	var out []string
	for p := range a {
		if string(a[p]) != string(b[p]) {
			out = append(out, p)
		}
	}
	for p := range b {
		if _, ok := a[p]; !ok {
			out = append(out, p)
		}
	}
	slices.Sort(out)
	return out
}

// TestStatusPagesRemoved: a page no stand is on any more is removed from the repository, also by a
// reconciler started after the one that wrote it.
func TestStatusPagesRemoved(t *testing.T) {
	src := newFakeSource(t, nil)
	cfg := Config{Log: slog.New(slog.DiscardHandler)}
	ctx := context.Background()
	pub := newPublisher(cfg, src)
	if err := pub.commitLocked(ctx, manyStatuses(300), nil, ""); err != nil {
		t.Fatal(err)
	}
	if _, ok := src.StatusFile("status/pages/local_b01.md"); !ok {
		t.Fatal("no page local_b01 at 303 stands")
	}
	fewer := manyStatuses(300)
	for i := 100; i < 200; i++ {
		delete(fewer, fmt.Sprintf("local_b%04d_dev", i))
	}
	// A restarted reconciler: it knows the pages only from the repository.
	pub = newPublisher(cfg, src)
	if err := pub.load(ctx, func(map[string]*Status) {}); err != nil {
		t.Fatal(err)
	}
	if err := pub.commitLocked(ctx, fewer, nil, ""); err != nil {
		t.Fatal(err)
	}
	// 200 of local now fit on one page: its three pages are joined.
	for _, p := range []string{"local_b00", "local_b01", "local_b02"} {
		if _, ok := src.StatusFile("status/pages/" + p + ".md"); ok {
			t.Errorf("page %s left after its stands were joined on one page", p)
		}
	}
	if _, ok := src.StatusFile("status/pages/local.md"); !ok {
		t.Error("no page local for its 200 stands")
	}
	for i := range 300 {
		if _, ok := src.StatusFile(fmt.Sprintf("status/local_b%04d_dev.json", i)); !ok {
			t.Errorf("status of local_b%04d_dev removed", i)
		}
	}
	// Down to pageRows: STATUS.md is one table again and no page is left.
	few := manyStatuses(150)
	if err := pub.commitLocked(ctx, few, nil, ""); err != nil {
		t.Fatal(err)
	}
	for p := range src.Files {
		if strings.HasPrefix(p, pagesDir) {
			t.Errorf("%s left at %d stands", p, len(few))
		}
	}
}

var screenshots = flag.String("screenshots", "", "keep the browser's first screen of STATUS.md at 10,003 stands in this folder (../docs/img)")

// TestStatusAtScaleInTheBrowser commits the status of 10,003 stands, 30 in trouble, to a real Gitea
// and opens STATUS.md and a page in the headless browser the demo uses, as on-call would: the
// counts, then a table of the 30 stands that need attention and the index of pages; every link
// answers. With -screenshots it keeps the first screen (docs/img/status-md-10000.png), from a Gitea
// with its front end built (STANDS_GITEA_STATIC_ROOT=bin/gitea-web).
func TestStatusAtScaleInTheBrowser(t *testing.T) {
	repo := publicRepo(t, "scale")
	all, troubled := tenThousand()
	files := map[string]string{}
	for p, data := range statusFiles(all, nil, "") {
		files[p] = string(data)
	}
	for id, s := range all {
		files[stands.StatusPath(id)] = string(s.encode())
	}
	repo.Change("the status of 10,003 stands", files)

	const marker = "Written by stands-reconciler"
	md := testenv.Browse(t, repo.Info.HTMLURL+"/", "src/branch/main/STATUS.md", marker)
	if !md.Found {
		t.Fatal("STATUS.md: the browser finds no rendered Markdown")
	}
	if *screenshots != "" && !md.Styled {
		t.Fatal("STATUS.md is shown without Gitea's stylesheets, not as on-call sees it: set STANDS_GITEA_STATIC_ROOT=bin/gitea-web (make browser-tools builds it)")
	}
	if len(md.Tables) != 2 || len(md.Tables[0].Rows) != len(troubled) || len(md.Tables[1].Rows) != len(paginate(sortedIDs(all))) {
		t.Fatalf("STATUS.md shows %d tables, want the %d stands that need attention and the index of pages", len(md.Tables), len(troubled))
	}
	for _, row := range md.Tables[0].Rows {
		if !slices.Contains(troubled, row[0]) {
			t.Errorf("%s is shown as needing attention", row[0])
		}
	}
	if !strings.Contains(md.Text, "10003 stands: 9973 Ready, 10 Failed, 10 Degraded, 10 Blocked.") {
		t.Errorf("no counts in what the browser shows:\n%.500s", md.Text)
	}
	answer(t, "STATUS.md", md, len(troubled)+len(md.Tables[1].Rows))
	pg := testenv.Browse(t, repo.Info.HTMLURL+"/", "src/branch/main/status/pages/local_b00.md", marker)
	if !pg.Found || len(pg.Tables) != 1 || len(pg.Tables[0].Rows) != 100 {
		t.Fatalf("page local_b00: rendered %v, %d tables, want one of 100 stands", pg.Found, len(pg.Tables))
	}
	answer(t, "page local_b00", pg, 101)
	if *screenshots != "" {
		data, err := os.ReadFile(md.Screenshot)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(*screenshots, "status-md-10000.png"), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// answer holds that the page links n files (Gitea's anchors on its own headings aside) and each
// link answers 200.
func answer(t *testing.T, name string, p testenv.BrowserPage, n int) {
	t.Helper()
	files := 0
	for _, l := range p.Links {
		if l.Status != 200 {
			t.Errorf("%s links %s, which answers %d", name, l.Href, l.Status)
		}
		if !strings.Contains(l.Href, "#") {
			files++
		}
	}
	if files != n {
		t.Errorf("%s links %d files, want %d", name, files, n)
	}
}
