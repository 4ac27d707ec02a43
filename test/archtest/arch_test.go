// Package archtest holds the tests of the module's shape: what may depend on what, and how long a
// function of the loop or the command may grow. They fail when the layering described in
// docs/architecture.md erodes, long before a reader notices.
package archtest

import (
	"bytes"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// forbidden are the libraries the loop, the pull request plans and the diff must not link: they
// talk to Git, Gitea, PostgreSQL and Pulumi through small interfaces and the plain types of package
// stands, so each is tested with fakes and none depends on how the others are built.
var forbidden = []string{
	"github.com/go-git/go-git/",
	"code.gitea.io/sdk/",
	"github.com/lib/pq",
	"github.com/pulumi/pulumi/",
	module + "/engine",
	module + "/gitsource",
	module + "/lease",
	module + "/vault",
}

const module = "github.com/stands-engine/stands-reconciler"

// pure are the packages that decide, each free of the forbidden libraries.
var pure = []string{"./reconcile", "./prplan", "./expiry", "./judge", "./diff", "./stands", "./reason", "./manifest", "./safeguard"}

// TestDecidersLinkNoInfrastructure: what decides links no infrastructure library; with its tests
// (-test), still no Pulumi and no engine: their fakes stand in.
func TestDecidersLinkNoInfrastructure(t *testing.T) {
	for _, pkg := range pure {
		if bad := violations(deps(t, pkg), forbidden); len(bad) > 0 {
			t.Errorf("%s links %s", pkg, strings.Join(bad, ", "))
		}
		if bad := violations(deps(t, "-test", pkg), []string{"github.com/pulumi/pulumi/", module + "/engine"}); len(bad) > 0 {
			t.Errorf("%s's tests link %s", pkg, strings.Join(bad, ", "))
		}
	}
	// reason is the leaf everything takes its reasons from: nothing of this module below it.
	if bad := slices.DeleteFunc(violations(deps(t, "./reason"), []string{module + "/"}), func(p string) bool { return p == module+"/reason" }); len(bad) > 0 {
		t.Errorf("reason imports %s", strings.Join(bad, ", "))
	}
}

// TestTheCheckSeesAForbiddenLink is the control of the two tests above and below: the same check on
// packages that do link what they forbid reports it.
func TestTheCheckSeesAForbiddenLink(t *testing.T) {
	for pkg, want := range map[string]string{"./gitsource": "github.com/go-git/go-git/", "./lease": "github.com/lib/pq", "./engine": "github.com/pulumi/pulumi/",
		"./test/fakes": module + "/test/"} {
		if bad := violations(deps(t, pkg), append(forbidden, module+"/test/")); !slices.ContainsFunc(bad, func(b string) bool { return strings.HasPrefix(b, want) }) {
			t.Errorf("the check does not see %s in %s: %v", want, pkg, bad)
		}
	}
}

// TestNoScaffoldingInProduction: test scaffolding (the packages under test/, which import
// "testing" or exist for tests only) is in no non-test import graph; and no package of the module
// outside test/ imports "testing" in its non-test files.
func TestNoScaffoldingInProduction(t *testing.T) {
	pkgs := strings.Fields(string(output(t, goCmd(t, "list", "./..."))))
	checked := 0
	for _, pkg := range pkgs {
		if strings.HasPrefix(pkg, module+"/test/") || pkg == module+"/bench" || pkg == module+"/deploy" {
			continue // scaffolding itself, and a package of tests only
		}
		checked++
		if bad := violations(deps(t, pkg), []string{module + "/test/"}); len(bad) > 0 {
			t.Errorf("%s links test scaffolding: %s", pkg, strings.Join(bad, ", "))
		}
		imports := strings.Fields(string(output(t, goCmd(t, "list", "-f", `{{join .Imports " "}}`, pkg))))
		if slices.Contains(imports, "testing") {
			t.Errorf("%s imports testing outside its tests: it is scaffolding, and belongs under test/", pkg)
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d packages", checked)
	}
}

// TestOneCloud: Hetzner's API is reached through the engine's cloud (engine/cloud) alone: hcloud-go
// is imported by its one implementation, engine/cloud/hetzner, and by the simulator and the tests
// that stand in for Hetzner, nowhere else.
func TestOneCloud(t *testing.T) {
	allowed := func(pkg string) bool {
		return pkg == module+"/engine/cloud/hetzner" || strings.HasPrefix(pkg, module+"/hcloudsim") ||
			pkg == module+"/cmd/hcloudsim" || strings.HasPrefix(pkg, module+"/test/")
	}
	out := string(output(t, goCmd(t, "list", "-f", `{{.ImportPath}} {{join .Imports " "}}`, "./...")))
	importers := 0
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		fields := strings.Fields(line)
		if len(fields) == 0 || !slices.ContainsFunc(fields[1:], func(i string) bool { return strings.HasPrefix(i, "github.com/hetznercloud/hcloud-go/") }) {
			continue
		}
		importers++
		if !allowed(fields[0]) {
			t.Errorf("%s imports hcloud-go: reach Hetzner through engine/cloud", fields[0])
		}
	}
	if importers < 2 {
		t.Fatalf("found %d importers of hcloud-go: the check looks at the wrong list", importers)
	}
}

// TestArchitectureNamesEveryPackage: docs/architecture.md names every package of the module, as
// `path`, so a package nobody described fails here rather than surprising its next reader.
func TestArchitectureNamesEveryPackage(t *testing.T) {
	doc, err := os.ReadFile(filepath.Join(testenv.RepoRoot(), "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	pkgs := strings.Fields(string(output(t, goCmd(t, "list", "./..."))))
	if len(pkgs) < 30 {
		t.Fatalf("go list ./... listed %d packages", len(pkgs))
	}
	for _, pkg := range pkgs {
		if rel := strings.TrimPrefix(pkg, module+"/"); !strings.Contains(string(doc), "`"+rel+"`") {
			t.Errorf("docs/architecture.md does not name %s: give it a row in the package tables", rel)
		}
	}
}

// deps is go list -deps of the arguments: every package they link.
func deps(t *testing.T, args ...string) []string {
	t.Helper()
	out := strings.Fields(string(output(t, goCmd(t, append([]string{"list", "-deps"}, args...)...))))
	if len(out) < 5 {
		t.Fatalf("go list -deps %v listed %d packages", args, len(out))
	}
	return out
}

// violations are the packages of deps that any of the prefixes names.
func violations(deps, prefixes []string) []string {
	var out []string
	for _, d := range deps {
		for _, p := range prefixes {
			if strings.HasPrefix(d, p) && (strings.HasSuffix(p, "/") || d == p || strings.HasPrefix(d, p+"/")) {
				out = append(out, d)
				break
			}
		}
	}
	return out
}

func output(t *testing.T, cmd *exec.Cmd) []byte {
	t.Helper()
	cmd.Dir = testenv.RepoRoot()
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("%v: %v\n%s", cmd.Args, err, stderr.Bytes())
	}
	return out
}

// maxLines bounds a function: a longer one hides a second job.
const maxLines = 80

// TestFunctionsStayShort: no function of any package of the module (tests aside) is longer than
// maxLines. TestTheLengthCheckSeesALongFunction shows it fails on one.
func TestFunctionsStayShort(t *testing.T) {
	root := testenv.RepoRoot()
	funcs := 0
	for _, dir := range goFolders(t, root) {
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
	if funcs < 1000 {
		t.Fatalf("checked %d functions", funcs)
	}
	t.Logf("%d functions checked", funcs)
}

// TestTheLengthCheckSeesALongFunction: the check reads a function's length as its lines from func to
// the closing brace, and finds the one of testdata/long over the bound.
func TestTheLengthCheckSeesALongFunction(t *testing.T) {
	var long []string
	for _, f := range sources(t, filepath.Join("testdata", "long")) {
		for _, d := range f.file.Decls {
			if fd, ok := d.(*ast.FuncDecl); ok && f.fset.Position(fd.End()).Line-f.fset.Position(fd.Pos()).Line+1 > maxLines {
				long = append(long, fd.Name.Name)
			}
		}
	}
	if !slices.Equal(long, []string{"tooLong"}) {
		t.Errorf("long functions: %q, want tooLong alone", long)
	}
}

// goFolders are the module's folders that hold Go files other than tests (not testdata, not the
// tools' own modules).
func goFolders(t *testing.T, root string) []string {
	t.Helper()
	var dirs []string
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() && (rel == "tools" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." ||
			d.Name() == "node_modules" || rel == "bin" || strings.HasPrefix(rel, "_")) {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
			if dir := filepath.Dir(rel); !slices.Contains(dirs, dir) {
				dirs = append(dirs, dir)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return dirs
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

// TestOnlyMdtextMakesMarkup: outside package mdtext, no code converts a string value to
// mdtext.Markup (a string constant needs no conversion), so every value from a repository reaches
// STATUS.md and the plan comment through mdtext's rendering (docs/architecture.md#rendering).
func TestOnlyMdtextMakesMarkup(t *testing.T) {
	root := testenv.RepoRoot()
	checked := 0
	err := filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if name := d.Name(); strings.HasPrefix(name, ".") || name == "testdata" || name == "tools" || name == "bin" || p == filepath.Join(root, "internal", "mdtext") {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		checked++
		src, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		for _, at := range markupConversions(t, rel, src) {
			t.Errorf("%s converts a value to mdtext.Markup: render it with mdtext.Code, F or Row", at)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if checked < 100 {
		t.Fatalf("checked %d files", checked)
	}
	// The control: the check sees a conversion.
	if got := markupConversions(t, "x.go", []byte("package x\nfunc f(name string) { _ = mdtext.Markup(name); _ = mdtext.Markup(\"ok\") }\n")); len(got) != 1 {
		t.Errorf("the check finds %v in a file with one conversion", got)
	}
}

// markupConversions are the positions of mdtext.Markup(x) in a Go file, x not a string literal.
func markupConversions(t *testing.T, name string, src []byte) []string {
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, name, src, 0)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	ast.Inspect(f, func(n ast.Node) bool {
		call, ok := n.(*ast.CallExpr)
		if !ok || len(call.Args) != 1 {
			return true
		}
		sel, ok := call.Fun.(*ast.SelectorExpr)
		if !ok || sel.Sel.Name != "Markup" {
			return true
		}
		if pkg, ok := sel.X.(*ast.Ident); !ok || pkg.Name != "mdtext" {
			return true
		}
		if _, lit := call.Args[0].(*ast.BasicLit); !lit {
			out = append(out, fset.Position(call.Pos()).String())
		}
		return true
	})
	return out
}

// TestVetWithE2ESeesEveryFile: .ci/run's test step skips make unit's go vet ./... (VETTED=1) because
// lint's go vet -tags e2e ./... has just vetted every file a plain go vet builds; that holds while no
// file of the module is built only without the tag. The control: a package with a `!e2e` file.
func TestVetWithE2ESeesEveryFile(t *testing.T) {
	if missing := filesOnlyWithoutE2E(t, "./..."); len(missing) > 0 {
		t.Errorf("files go vet -tags e2e does not build (make lint's vet misses them): %s", strings.Join(missing, ", "))
	}
	if missing := filesOnlyWithoutE2E(t, "./test/archtest/testdata/vettags"); !slices.Equal(missing, []string{"plain_only.go"}) {
		t.Errorf("the check does not see a file built only without the tag: %q", missing)
	}
}

// filesOnlyWithoutE2E are the Go files (tests included) of the packages of pattern that a build
// without tags has and one with -tags e2e has not.
func filesOnlyWithoutE2E(t *testing.T, pattern string) []string {
	t.Helper()
	const format = `{{range .GoFiles}}{{$.Dir}}/{{.}} {{end}}{{range .TestGoFiles}}{{$.Dir}}/{{.}} {{end}}{{range .XTestGoFiles}}{{$.Dir}}/{{.}} {{end}}`
	plain := strings.Fields(string(output(t, goCmd(t, "list", "-f", format, pattern))))
	tagged := strings.Fields(string(output(t, goCmd(t, "list", "-tags", "e2e", "-f", format, pattern))))
	if len(plain) == 0 {
		t.Fatalf("go list %s listed no file", pattern)
	}
	var missing []string
	for _, f := range plain {
		if !slices.Contains(tagged, f) {
			missing = append(missing, filepath.Base(f))
		}
	}
	return missing
}
