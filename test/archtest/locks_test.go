package archtest

import (
	"fmt"
	"go/ast"
	"go/token"
	"maps"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestLeafLocksCallNothing: the loop's lock table (docs/architecture.md#the-loops-parts-and-their-locks)
// held by the code. While one of its leafMutex locks is held — from its Lock to its Unlock, or to the
// function's end when the Unlock is deferred — no method of another of the loop's types is called,
// so a leaf never waits on a lock taken after it. TestTheLockCheckSeesACall shows it fails.
func TestLeafLocksCallNothing(t *testing.T) {
	bad, regions := leafViolations(t, filepath.Join(testenv.RepoRoot(), "reconcile"))
	for _, b := range bad {
		t.Error(b)
	}
	if regions < 20 {
		t.Fatalf("read %d regions holding a leaf lock: the check looks at the wrong code", regions)
	}
	t.Logf("%d regions holding a leaf lock read", regions)
}

// TestTheLockCheckSeesACall: testdata/locks calls another part's method under a leaf lock, once with
// the lock's Unlock deferred and once before it.
func TestTheLockCheckSeesACall(t *testing.T) {
	bad, _ := leafViolations(t, filepath.Join("testdata", "locks"))
	for i, b := range bad {
		bad[i] = b[strings.Index(b, ": ")+2:] // without the position
	}
	want := []string{"(book).add holds book.mu while calling other (a method of *counter)",
		"(counter).bump holds counter.mu while calling add (a method of *book)"}
	if !slices.Equal(bad, want) {
		t.Errorf("found %q, want %q", bad, want)
	}
}

// loopTypes is what the check knows of a package: each type's methods, its fields' types, and which
// of its fields are leaf locks.
type loopTypes struct {
	methods map[string][]string          // type → method names
	fields  map[string]map[string]string // type → field → its type's name
	leaves  map[string][]string          // type → its leafMutex fields
}

// leafViolations reads every function of the folder's package for regions holding a leaf lock.
func leafViolations(t *testing.T, dir string) (bad []string, regions int) {
	t.Helper()
	srcs := sources(t, dir)
	lt := loopTypes{methods: map[string][]string{}, fields: map[string]map[string]string{}, leaves: map[string][]string{}}
	for _, src := range srcs {
		lt.read(src.file)
	}
	for _, src := range srcs {
		for _, d := range src.file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Body == nil || fd.Recv == nil {
				continue
			}
			b, n := lt.check(src.fset, src.file, fd)
			bad, regions = append(bad, b...), regions+n
		}
	}
	slices.Sort(bad)
	return bad, regions
}

func (lt loopTypes) read(f *ast.File) {
	for _, d := range f.Decls {
		switch d := d.(type) {
		case *ast.FuncDecl:
			if d.Recv != nil {
				r := strings.TrimPrefix(receiverName(d.Recv.List[0].Type), "*")
				lt.methods[r] = append(lt.methods[r], d.Name.Name)
			}
		case *ast.GenDecl:
			for _, s := range d.Specs {
				ts, ok := s.(*ast.TypeSpec)
				if !ok {
					continue
				}
				st, ok := ts.Type.(*ast.StructType)
				if !ok {
					continue
				}
				lt.fields[ts.Name.Name] = map[string]string{}
				for _, fl := range st.Fields.List {
					typ := strings.TrimPrefix(receiverName(fl.Type), "*")
					for _, n := range fl.Names {
						lt.fields[ts.Name.Name][n.Name] = typ
						if typ == "leafMutex" {
							lt.leaves[ts.Name.Name] = append(lt.leaves[ts.Name.Name], n.Name)
						}
					}
				}
			}
		}
	}
}

// check reads one method's blocks for leaf regions.
func (lt loopTypes) check(fset *token.FileSet, f *ast.File, fd *ast.FuncDecl) (bad []string, regions int) {
	recvType := strings.TrimPrefix(receiverName(fd.Recv.List[0].Type), "*")
	vars := map[string]string{} // identifier → its type's name: the receiver, and locals set from its fields
	if names := fd.Recv.List[0].Names; len(names) > 0 {
		vars[names[0].Name] = recvType
	}
	imports := map[string]bool{}
	for _, im := range f.Imports {
		p := strings.Trim(im.Path.Value, `"`)
		name := p[strings.LastIndex(p, "/")+1:]
		if im.Name != nil {
			name = im.Name.Name
		}
		imports[name] = true
	}
	lt.locals(fd.Body, vars) // first every local set from a known type's field
	ast.Inspect(fd.Body, func(n ast.Node) bool {
		block, ok := n.(*ast.BlockStmt)
		if !ok {
			return true
		}
		for i, s := range block.List {
			owner, field, ok := lt.lockCall(s, "Lock", vars)
			if !ok {
				continue
			}
			regions++
			end := len(block.List)
			if i+1 < len(block.List) {
				if d, isDefer := block.List[i+1].(*ast.DeferStmt); !isDefer || !lt.isUnlock(d.Call, owner, field, vars) {
					for j := i + 1; j < len(block.List); j++ {
						if o, fl, ok := lt.lockCall(block.List[j], "Unlock", vars); ok && o == owner && fl == field {
							end = j
							break
						}
					}
				}
			}
			for _, held := range block.List[i+1 : end] {
				bad = append(bad, lt.callsUnder(fset, held, recvType, fd.Name.Name, owner, field, vars, imports)...)
			}
		}
		return true
	})
	return bad, regions
}

// lockCall says whether s is `x.field.<method>()` on a leaf lock, and whose.
func (lt loopTypes) lockCall(s ast.Stmt, method string, vars map[string]string) (owner, field string, ok bool) {
	es, isExpr := s.(*ast.ExprStmt)
	if !isExpr {
		return "", "", false
	}
	call, isCall := es.X.(*ast.CallExpr)
	if !isCall {
		return "", "", false
	}
	return lt.leafCall(call, method, vars)
}

func (lt loopTypes) leafCall(call *ast.CallExpr, method string, vars map[string]string) (owner, field string, ok bool) {
	sel, isSel := call.Fun.(*ast.SelectorExpr)
	if !isSel || sel.Sel.Name != method {
		return "", "", false
	}
	lock, isSel := sel.X.(*ast.SelectorExpr)
	if !isSel {
		return "", "", false
	}
	owner = lt.typeOf(lock.X, vars)
	if !slices.Contains(lt.leaves[owner], lock.Sel.Name) {
		return "", "", false
	}
	return owner, lock.Sel.Name, true
}

func (lt loopTypes) isUnlock(call *ast.CallExpr, owner, field string, vars map[string]string) bool {
	o, f, ok := lt.leafCall(call, "Unlock", vars)
	return ok && o == owner && f == field
}

// locals adds to vars each local of body set from a known type's value (typeOf).
func (lt loopTypes) locals(body *ast.BlockStmt, vars map[string]string) {
	ast.Inspect(body, func(n ast.Node) bool {
		if as, ok := n.(*ast.AssignStmt); ok && len(as.Lhs) == len(as.Rhs) {
			for i, l := range as.Lhs {
				if id, ok := l.(*ast.Ident); ok {
					if typ := lt.typeOf(as.Rhs[i], vars); typ != "" {
						vars[id.Name] = typ
					}
				}
			}
		}
		return true
	})
}

// typeOf is the type of x (an identifier, or a field of one) when the check knows it; "" otherwise.
func (lt loopTypes) typeOf(x ast.Expr, vars map[string]string) string {
	switch x := x.(type) {
	case *ast.Ident:
		return vars[x.Name]
	case *ast.SelectorExpr:
		if owner := lt.typeOf(x.X, vars); owner != "" {
			return lt.fields[owner][x.Sel.Name]
		}
	}
	return ""
}

// callsUnder reports each call in s (function literals aside: they run later) of a method another of
// the package's types declares and the lock's owner does not.
func (lt loopTypes) callsUnder(fset *token.FileSet, s ast.Stmt, recvType, fn, owner, field string, vars map[string]string, imports map[string]bool) []string {
	var bad []string
	ast.Inspect(s, func(n ast.Node) bool {
		if _, lit := n.(*ast.FuncLit); lit {
			return false
		}
		call, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok {
			return true
		}
		if id, ok := sel.X.(*ast.Ident); ok && imports[id.Name] && vars[id.Name] == "" {
			return true // a package's function
		}
		name := sel.Sel.Name
		if slices.Contains(lt.methods[owner], name) {
			return true
		}
		for _, typ := range slices.Sorted(maps.Keys(lt.methods)) {
			if typ != owner && slices.Contains(lt.methods[typ], name) {
				bad = append(bad, fmt.Sprintf("%s: (%s).%s holds %s.%s while calling %s (a method of *%s)",
					fset.Position(call.Pos()), recvType, fn, owner, field, name, typ))
				break
			}
		}
		return true
	})
	return bad
}
