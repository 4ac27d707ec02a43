package reconcile

import (
	"fmt"
	"path"
	"slices"
	"strings"

	"github.com/stands-engine/stands-reconciler/internal/mdtext"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
)

// pageRows is the most stands one table shows. Up to it STATUS.md is one table of every stand; past
// it STATUS.md is what on-call reads first (the counts, the stands that need attention) and an
// index of pages, each a table of the stands whose id begins with its name, so that a status commit
// rewrites the pages of the stands that changed and not a table of every stand
// (docs/operations.md#statusmd-at-any-size).
const pageRows = 200

// attentionRows bounds STATUS.md's table of the stands that need attention; the others are marked
// on their pages and counted in the index.
const attentionRows = 100

// pagesDir holds the pages.
var pagesDir = path.Join(stands.StatusDir, "pages")

// attention orders the phases that need someone: the first the most urgent. Ready, Progressing and
// Destroyed need no one.
var attention = []reason.Phase{reason.Failed, reason.Stalled, reason.Blocked, reason.Degraded, reason.Drifted, reason.Expired, reason.Suspended}

func needsAttention(s *Status) bool { return slices.Contains(attention, s.Phase) }

// statusFiles renders STATUS.md and, past pageRows stands, its pages; a page the last commit held
// and no stand needs now is not among them (publisher.commitLocked removes it).
func statusFiles(all map[string]*Status, unreadable []string, banner mdtext.Markup) map[string][]byte {
	if len(all) <= pageRows {
		return map[string][]byte{stands.StatusFile: statusTable(all, unreadable, banner)}
	}
	files := map[string][]byte{}
	pages := paginate(sortedIDs(all))
	var d mdtext.Doc
	statusHeader(&d, banner)
	var total totalCost
	counts := map[reason.Phase]int{}
	var troubled []string
	pageTroubled := make([]int, len(pages))
	for i, pg := range pages {
		for _, id := range pg.ids {
			s := all[id]
			total.add(s)
			counts[s.Phase]++
			if needsAttention(s) {
				troubled = append(troubled, id)
				pageTroubled[i]++
			}
		}
		files[pg.file()] = pg.render(all)
	}
	var parts []mdtext.Markup
	for _, p := range reason.Phases {
		if counts[p] > 0 {
			parts = append(parts, mdtext.F("%d %s", counts[p], p))
		}
	}
	d.F("**%d stands**: %s.\n", len(all), mdtext.Join(parts, ", "))
	d.Add(total.line())
	unreadableList(&d, unreadable)
	attentionTable(&d, troubled, all)
	d.F("\n## Every stand, on %d pages\n\nEach page holds the stands whose id begins with its name, at most %d.\n\n| Page | Stands | From | To | Need attention |\n|---|---|---|---|---|\n",
		len(pages), pageRows)
	for i, pg := range pages {
		d.Add(mdtext.Row(mdtext.Link(mdtext.Code(pg.name), pg.file()), len(pg.ids), mdtext.Code(pg.ids[0]), mdtext.Code(pg.ids[len(pg.ids)-1]), pageTroubled[i]))
	}
	files[stands.StatusFile] = []byte(d.Markup())
	return files
}

// attentionTable lists the stands that need attention, the most urgent phase first, at most
// attentionRows of them.
func attentionTable(d *mdtext.Doc, troubled []string, all map[string]*Status) {
	if len(troubled) == 0 {
		d.Add("\n## Need attention: none\n")
		return
	}
	slices.SortStableFunc(troubled, func(a, b string) int {
		return slices.Index(attention, all[a].Phase) - slices.Index(attention, all[b].Phase)
	})
	d.F("\n## Need attention: %d\n\n", len(troubled))
	// Only what says what is wrong, so that a row is a line and the first screen shows the most
	// urgent; the stand's page and status file have the rest.
	d.Add("| Stand | Phase | Reason | Last successful commit | Message |\n|---|---|---|---|---|\n")
	shown := troubled[:min(len(troubled), attentionRows)]
	for _, id := range shown {
		s := all[id]
		d.Add(mdtext.Row(mdtext.Link(mdtext.Code(id), stands.StatusPath(id)), s.Phase, s.Reason, mdtext.Short(s.LastSuccessfulCommit), mdtext.FirstLine(s.Message)))
	}
	if more := len(troubled) - len(shown); more > 0 {
		d.F("\nAnd %d more, counted on each page below.\n", more)
	}
}

// page is the stands whose id begins with name.
type page struct {
	name string
	ids  []string
}

func (pg page) file() string { return path.Join(pagesDir, pg.name+".md") }

func (pg page) render(all map[string]*Status) []byte {
	var d mdtext.Doc
	d.F("# Stands: %s…\n\nWritten by stands-reconciler; do not edit. The counts and the stands that need attention are in %s.\n\n",
		mdtext.Code(pg.name), mdtext.Link("STATUS.md", relative(pagesDir, stands.StatusFile)))
	standRows(&d, pg.ids, all, pagesDir, &totalCost{})
	return []byte(d.Markup())
}

// paginate splits sorted ids into pages: one per owner, and a page of more than pageRows split by
// the next character of its ids, again until each fits. A page depends only on the ids beginning
// with its name, so a stand added or removed changes its own page, and others only where its page
// splits or joins.
func paginate(ids []string) []page {
	var out []page
	for len(ids) > 0 {
		owner := firstPart(ids[0])
		n := 1
		for n < len(ids) && firstPart(ids[n]) == owner {
			n++
		}
		out = split(out, ids[:n], owner+"_")
		ids = ids[n:]
	}
	return out
}

func firstPart(id string) string {
	owner, _, _ := strings.Cut(id, "_")
	return owner
}

// split appends ids, sorted and all beginning with name, as one page or, past pageRows, as pages by
// the next character. An id equal to name, which sorts first, is a page of its own.
func split(out []page, ids []string, name string) []page {
	if len(ids) <= pageRows {
		return append(out, page{name: pageName(name), ids: ids})
	}
	if ids[0] == name {
		out, ids = append(out, page{name: pageName(name), ids: ids[:1]}), ids[1:]
	}
	for len(ids) > 0 {
		next := ids[0][:len(name)+1]
		n := 1
		for n < len(ids) && strings.HasPrefix(ids[n], next) {
			n++
		}
		out, ids = split(out, ids[:n], next), ids[n:]
	}
	return out
}

// pageName is a page's file name: the prefix without a separator at its end. A stand id is made
// of [a-z0-9-] and underscores (manifest.StandID); anything else, which only a status file of
// another version could bring, is written as ~ and its hex, so that no name leaves pagesDir.
func pageName(prefix string) string {
	var b strings.Builder
	for _, c := range []byte(strings.TrimRight(prefix, "_")) {
		if c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-' || c == '_' {
			b.WriteByte(c)
			continue
		}
		fmt.Fprintf(&b, "~%02x", c)
	}
	return b.String()
}

// relative is the path p, from the repository's root, as a link in a file in folder dir.
func relative(dir, p string) string {
	if dir == "" {
		return p
	}
	return strings.Repeat("../", strings.Count(dir, "/")+1) + p
}
