package archtest

import (
	"fmt"
	"go/ast"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// strangers are words for a long-lived part's end that the vocabulary does not use
// (docs/architecture.md#lifecycle): each has its one word there.
var strangers = map[string]string{
	"Stop": "Close", "Drain": "Shutdown", "Abort": "Shutdown's context ending", "Halt": "Close",
	"Terminate": "Close", "Quit": "Close", "Kill": "Close", "Finish": "Wait", "Join": "Wait",
}

// TestOneLifecycleVocabulary: the product's long-lived parts start, run, wait and end in one
// vocabulary: Run(ctx), Wait(), Shutdown(ctx) error (finish what runs until ctx ends, then cancel),
// Close() (stop now and wait). TestTheLifecycleCheckSeesAStranger shows it fails.
func TestOneLifecycleVocabulary(t *testing.T) {
	root := testenv.RepoRoot()
	checked := 0
	for _, dir := range goFolders(t, root) {
		if _, ok := product(module + "/" + filepath.ToSlash(dir)); !ok || dir == "." {
			continue
		}
		for _, bad := range lifecycleStrangers(t, filepath.Join(root, dir)) {
			t.Errorf("%s: %s", dir, bad)
		}
		checked++
	}
	if checked < 20 {
		t.Fatalf("checked %d packages: the check looks at the wrong folders", checked)
	}
}

// TestTheLifecycleCheckSeesAStranger: testdata/lifecycle stops in three ways the vocabulary refuses.
func TestTheLifecycleCheckSeesAStranger(t *testing.T) {
	got := lifecycleStrangers(t, filepath.Join("testdata", "lifecycle"))
	slices.Sort(got)
	want := []string{
		"(*Worker).Close takes arguments: Close() stops now and waits",
		"(*Worker).Shutdown does not take a context first: Shutdown(ctx) error",
		"(*Worker).Stop: say Close",
	}
	if !slices.Equal(got, want) {
		t.Errorf("found %q, want %q", got, want)
	}
}

// lifecycleStrangers are the exported methods of a folder's exported types that end a part in
// words or shapes the vocabulary does not have.
func lifecycleStrangers(t *testing.T, dir string) []string {
	t.Helper()
	var out []string
	for _, src := range sources(t, dir) {
		for _, d := range src.file.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil || !fd.Name.IsExported() {
				continue
			}
			recv := receiverName(fd.Recv.List[0].Type)
			if recv == "" || !ast.IsExported(strings.TrimPrefix(recv, "*")) {
				continue
			}
			name, params := fd.Name.Name, fd.Type.Params.List
			switch {
			case strangers[name] != "":
				out = append(out, fmt.Sprintf("(%s).%s: say %s", recv, name, strangers[name]))
			case name == "Close" && len(params) > 0:
				out = append(out, fmt.Sprintf("(%s).Close takes arguments: Close() stops now and waits", recv))
			case name == "Shutdown" && (len(params) == 0 || exprString(params[0].Type) != "context.Context"):
				out = append(out, fmt.Sprintf("(%s).Shutdown does not take a context first: Shutdown(ctx) error", recv))
			}
		}
	}
	return out
}

// receiverName is a method's receiver type as Go writes it: T or *T.
func receiverName(e ast.Expr) string {
	if s, ok := e.(*ast.StarExpr); ok {
		if id, ok := s.X.(*ast.Ident); ok {
			return "*" + id.Name
		}
		return ""
	}
	if id, ok := e.(*ast.Ident); ok {
		return id.Name
	}
	return ""
}

// exprString is a type expression of the form pkg.Name, or "".
func exprString(e ast.Expr) string {
	if sel, ok := e.(*ast.SelectorExpr); ok {
		if id, ok := sel.X.(*ast.Ident); ok {
			return id.Name + "." + sel.Sel.Name
		}
	}
	return ""
}
