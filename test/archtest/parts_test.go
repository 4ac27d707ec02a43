package archtest

import (
	"fmt"
	"go/ast"
	"go/token"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestPartsKeepToThemselves: the loop's parts (docs/architecture.md#the-loops-parts-and-their-locks)
// own their state. Outside a part's own methods and its constructor no code reads or writes one of its
// fields, and no part holds the loop or another part: the loop asks a part through its methods, and
// those methods are the part's interface, which the doc's table lists and this test compares with the
// calls the code makes. TestThePartsCheckSeesAReach shows it fails.
func TestPartsKeepToThemselves(t *testing.T) {
	dir := filepath.Join(testenv.RepoRoot(), "reconcile")
	pc := readParts(t, dir, "Reconciler")
	for _, b := range pc.reaches {
		t.Error(b)
	}
	if len(pc.parts) < 6 {
		t.Fatalf("found the parts %v: the check looks at the wrong code", slices.Sorted(maps.Keys(pc.parts)))
	}
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	listed := partsTable(string(doc))
	for _, p := range slices.Sorted(maps.Keys(pc.parts)) {
		called := slices.Sorted(maps.Keys(pc.called[p]))
		t.Logf("%s: the loop calls %s", p, strings.Join(called, ", "))
		got, ok := listed[p]
		if !ok {
			t.Errorf("docs/architecture.md's table of parts has no row for %s", p)
			continue
		}
		if !slices.Equal(got, called) {
			t.Errorf("docs/architecture.md lists %s's interface as %v; the code calls %v", p, got, called)
		}
	}
}

// TestThePartsCheckSeesAReach: testdata/parts reads a part's field from the loop, writes one from
// another part, and gives a part a pointer to the loop.
func TestThePartsCheckSeesAReach(t *testing.T) {
	pc := readParts(t, filepath.Join("testdata", "parts"), "loop")
	for i, b := range pc.reaches {
		pc.reaches[i] = b[strings.Index(b, ": ")+2:] // without the position
	}
	slices.Sort(pc.reaches)
	want := []string{
		"(loop).cycle reaches into book.n, a field of the part book: ask one of its methods",
		"(other).spill reaches into book.n, a field of the part book: ask one of its methods",
		"the part other holds back *loop: a part holds nothing of the loop or of another part",
	}
	if !slices.Equal(pc.reaches, want) {
		t.Errorf("found %q, want %q", pc.reaches, want)
	}
	if got := slices.Sorted(maps.Keys(pc.called["book"])); !slices.Equal(got, []string{"add"}) {
		t.Errorf("book's interface: got %v, want [add]", got)
	}
}

// partsCheck is what readParts found: the parts (the loop's fields of a struct type of the
// package), the reaches into them, and the methods of each called from outside it.
type partsCheck struct {
	parts   map[string]bool
	reaches []string
	called  map[string]map[string]bool
}

func readParts(t *testing.T, dir, loop string) partsCheck {
	t.Helper()
	srcs := sources(t, dir)
	lt := loopTypes{methods: map[string][]string{}, fields: map[string]map[string]string{}, leaves: map[string][]string{}}
	for _, src := range srcs {
		lt.read(src.file)
	}
	pc := partsCheck{parts: map[string]bool{}, called: map[string]map[string]bool{}}
	for _, typ := range lt.fields[loop] {
		if _, isStruct := lt.fields[typ]; isStruct && typ != loop && len(lt.methods[typ]) > 0 && !token.IsExported(typ) {
			pc.parts[typ], pc.called[typ] = true, map[string]bool{}
		}
	}
	for _, p := range slices.Sorted(maps.Keys(pc.parts)) {
		for _, f := range slices.Sorted(maps.Keys(lt.fields[p])) {
			if typ := lt.fields[p][f]; typ == loop || (pc.parts[typ] && typ != p) {
				pc.reaches = append(pc.reaches, fmt.Sprintf("%s: the part %s holds %s *%s: a part holds nothing of the loop or of another part", dir, p, f, typ))
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(srcs)) {
		src := srcs[name]
		for _, d := range src.file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && fd.Body != nil {
				pc.reaches = append(pc.reaches, pc.read(lt, src.fset, fd)...)
			}
		}
	}
	slices.Sort(pc.reaches)
	return pc
}

// read checks one function: a selector on a value of a part's type (the function's receiver, a
// parameter, or a field or local of one) names a method of it or, in its own methods and constructor
// only, a field.
func (pc partsCheck) read(lt loopTypes, fset *token.FileSet, fd *ast.FuncDecl) []string {
	vars := map[string]string{}
	self := ""
	if fd.Recv != nil {
		self = strings.TrimPrefix(receiverName(fd.Recv.List[0].Type), "*")
		if names := fd.Recv.List[0].Names; len(names) > 0 {
			vars[names[0].Name] = self
		}
	} else if name := strings.ToLower(fd.Name.Name); strings.HasPrefix(name, "new") && pc.parts[lt.partNamed(name[3:])] {
		self = lt.partNamed(name[3:]) // a constructor fills its part's fields
	}
	for _, fl := range fd.Type.Params.List {
		for _, n := range fl.Names {
			vars[n.Name] = strings.TrimPrefix(receiverName(fl.Type), "*")
		}
	}
	lt.locals(fd.Body, vars)
	recv := self
	if fd.Recv == nil {
		recv = "func"
	}
	var bad []string
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		sel, ok := n.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		typ := lt.typeOf(sel.X, vars)
		if !pc.parts[typ] || typ == self {
			return true
		}
		name := sel.Sel.Name
		if slices.Contains(lt.methods[typ], name) {
			pc.called[typ][name] = true
			return true
		}
		if _, isField := lt.fields[typ][name]; isField {
			bad = append(bad, fmt.Sprintf("%s: (%s).%s reaches into %s.%s, a field of the part %s: ask one of its methods",
				fset.Position(sel.Pos()), recv, fd.Name.Name, typ, name, typ))
		}
		return true
	})
	return bad
}

// partNamed is the part type whose name, lower-cased, is name ("healbook" → healBook).
func (lt loopTypes) partNamed(name string) string {
	for typ := range lt.fields {
		if strings.ToLower(typ) == name {
			return typ
		}
	}
	return ""
}

// partsTable reads docs/architecture.md's table of the loop's parts: each row's part (its first
// column's first code span) and the methods of its interface (the last column's code spans).
func partsTable(doc string) map[string][]string {
	i := strings.Index(doc, "### The loop's parts and their locks")
	if i < 0 {
		return nil
	}
	code := regexp.MustCompile("`([A-Za-z]+)`")
	out := map[string][]string{}
	for _, line := range strings.Split(doc[i:], "\n") {
		if strings.HasPrefix(line, "#### ") || (strings.HasPrefix(line, "## ") || strings.HasPrefix(line, "### ")) && !strings.Contains(line, "parts and their locks") {
			break
		}
		cols := strings.Split(line, "|")
		if len(cols) < 4 || !strings.HasPrefix(line, "| `") {
			continue
		}
		part := code.FindStringSubmatch(cols[1])
		if part == nil {
			continue
		}
		var methods []string
		for _, m := range code.FindAllStringSubmatch(cols[len(cols)-2], -1) {
			methods = append(methods, m[1])
		}
		slices.Sort(methods)
		out[part[1]] = methods
	}
	return out
}
