package prplan

import (
	"fmt"
	"io/fs"
	"path"
	"slices"

	"github.com/stands-engine/stands-reconciler/internal/repofs"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/stands"
)

// merge is the tree merging a pull request's head into the tracked branch produces, as far as a
// plan can say without guessing (docs/pr-workflow.md#the-plan-is-of-the-merge).
type merge struct {
	tree fs.FS
	// folders are the stand folders both sides changed since the merge base, differently: a
	// conflict. tree holds the tracked branch's side of each.
	folders []string
	// paths are the other files both sides changed, differently. tree holds the tracked branch's
	// side, theirs the head's: where the two decide alike, no stand reads them.
	paths  []string
	theirs fs.FS
}

// mergeTrees merges head into main from their merge base, unit by unit. A stand's folder is one
// unit, taken whole from the side that changed it; every other path is a unit of its own. A unit
// only one side changed comes from that side, as Git takes it; one both changed the same way is
// taken as it is; one both changed differently is a conflict, whatever Git would make of it line by
// line: the plan names it instead of guessing. The reconciler's status files are the tracked
// branch's.
func mergeTrees(base, main, head fs.FS) (*merge, error) {
	var sides [3]map[string]repofs.Entry
	for i, t := range []fs.FS{base, main, head} {
		var err error
		if sides[i], err = repofs.Entries(t); err != nil {
			return nil, fmt.Errorf("merge: %w", err)
		}
	}
	all, folders := map[string]bool{}, map[string]bool{}
	for _, side := range sides {
		for p := range side {
			all[p] = true
			if manifest.IsManifest(p) {
				folders[path.Dir(p)] = true
			}
		}
	}
	unitOf := func(p string) string {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if folders[d] {
				return d
			}
		}
		return p
	}
	units := map[string][]string{}
	for p := range all {
		units[unitOf(p)] = append(units[unitOf(p)], p)
	}
	same := func(a, b map[string]repofs.Entry, paths []string) bool {
		for _, p := range paths {
			x, inA := a[p]
			y, inB := b[p]
			if inA != inB || inA && !x.Same(y) {
				return false
			}
		}
		return true
	}
	b, m, h := sides[0], sides[1], sides[2]
	out, theirs := map[string]repofs.Entry{}, map[string]repofs.Entry{}
	res := &merge{}
	for u, paths := range units {
		from := m
		switch {
		case same(b, h, paths) || same(m, h, paths):
		case same(b, m, paths):
			from = h
		case folders[u]:
			res.folders = append(res.folders, u)
		case !stands.IsStatusPath(u):
			res.paths = append(res.paths, u)
			if e, ok := h[u]; ok {
				theirs[u] = e
			}
		}
		for _, p := range paths {
			if e, ok := from[p]; ok {
				out[p] = e
			}
		}
	}
	slices.Sort(res.folders)
	slices.Sort(res.paths)
	res.tree = repofs.FromEntries(out)
	if len(res.paths) > 0 {
		for p, e := range out {
			if _, conflict := theirs[p]; !conflict && !slices.Contains(res.paths, p) {
				theirs[p] = e
			}
		}
		res.theirs = repofs.FromEntries(theirs)
	}
	return res, nil
}
