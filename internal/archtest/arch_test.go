// Package archtest holds the tests of the module's shape: what may depend on what, and how long a
// function of the loop or the command may grow. They fail when the layering described in
// docs/architecture.md erodes, long before a reader notices.
package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/internal/testenv"
)

// TestReconcileLinksNoPulumi: the loop depends on small interfaces and plain types only, so it and its
// tests build without the Pulumi SDK (-test: the fakes too); the engine is wired in by the command.
func TestReconcileLinksNoPulumi(t *testing.T) {
	for _, pkg := range []string{"./reconcile", "./diff", "./reason", "./stands", "./manifest"} {
		cmd := goCmd(t, "list", "-deps", "-test", pkg)
		cmd.Dir = testenv.RepoRoot()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list -deps %s: %v", pkg, err)
		}
		deps := strings.Fields(string(out))
		if len(deps) < 5 {
			t.Fatalf("go list -deps %s listed %d packages", pkg, len(deps))
		}
		for _, d := range deps {
			if strings.HasPrefix(d, "github.com/pulumi/pulumi") || strings.HasSuffix(d, "stands-reconciler/engine") {
				t.Errorf("%s depends on %s", pkg, d)
			}
		}
	}
	// reason is the leaf everything takes its reasons from: nothing of this module below it.
	cmd := goCmd(t, "list", "-f", `{{join .Imports " "}}`, "./reason")
	cmd.Dir = testenv.RepoRoot()
	out, err := cmd.Output()
	if err != nil || strings.Contains(string(out), "stands-reconciler/") {
		t.Errorf("reason imports %s (%v)", out, err)
	}
}

// maxLines bounds a function of the loop or the command: longer ones hide a second job.
const maxLines = 80

func TestFunctionsStayShort(t *testing.T) {
	root := testenv.RepoRoot()
	funcs := 0
	for _, dir := range []string{"reconcile", "cmd/stands-reconciler", "cmd/hcloudsim"} {
		for p, f := range sources(t, filepath.Join(root, dir)) {
			for _, d := range f.file.Decls {
				fd, ok := d.(*ast.FuncDecl)
				if !ok || fd.Body == nil {
					continue
				}
				funcs++
				if n := f.fset.Position(fd.End()).Line - f.fset.Position(fd.Pos()).Line + 1; n > maxLines {
					rel, _ := filepath.Rel(root, p)
					t.Errorf("%s: %s is %d lines (at most %d)", rel, fd.Name.Name, n, maxLines)
				}
			}
		}
	}
	if funcs < 50 {
		t.Fatalf("checked %d functions", funcs)
	}
}

// goCmd is the go command on PATH (CI and make put the toolchain there).
func goCmd(t *testing.T, args ...string) *exec.Cmd {
	t.Helper()
	bin, err := exec.LookPath("go")
	if err != nil {
		t.Fatalf("no go command on PATH: %v", err)
	}
	return exec.Command(bin, args...)
}

// TestOnlySummariseSetsStatus: in the loop, a status's phase, reason and message are set by
// summarise alone; any other code hands it an outcome.
func TestOnlySummariseSetsStatus(t *testing.T) {
	guarded := map[string]bool{"Phase": true, "Reason": true, "Message": true}
	assignments := 0
	for p, src := range sources(t, filepath.Join(testenv.RepoRoot(), "reconcile")) {
		fset := src.fset
		ast.Inspect(src.file, func(n ast.Node) bool {
			var fields []string
			switch n := n.(type) {
			case *ast.AssignStmt:
				for _, l := range n.Lhs {
					if sel, ok := l.(*ast.SelectorExpr); ok {
						fields = append(fields, sel.Sel.Name)
					}
				}
			case *ast.CompositeLit:
				if id, ok := n.Type.(*ast.Ident); ok && id.Name == "Status" {
					for _, e := range n.Elts {
						if kv, ok := e.(*ast.KeyValueExpr); ok {
							fields = append(fields, kv.Key.(*ast.Ident).Name)
						}
					}
				}
			}
			for _, name := range fields {
				if !guarded[name] {
					continue
				}
				if filepath.Base(p) == "summarise.go" {
					assignments++
					continue
				}
				t.Errorf("%s: sets a status's %s outside summarise", fset.Position(n.Pos()), name)
			}
			return true
		})
	}
	if assignments < 10 {
		t.Fatalf("found %d assignments in summarise.go: the check looks at the wrong code", assignments)
	}
}

// source is a parsed Go file.
type source struct {
	fset *token.FileSet
	file *ast.File
}

// sources parses the non-test Go files of a folder, by path; a folder without any fails the test.
func sources(t *testing.T, dir string) map[string]source {
	t.Helper()
	paths, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]source{}
	for _, p := range paths {
		if strings.HasSuffix(p, "_test.go") {
			continue
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		out[p] = source{fset, f}
	}
	if len(out) == 0 {
		t.Fatalf("%s: no Go files", dir)
	}
	return out
}
