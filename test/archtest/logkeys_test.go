package archtest

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// synonyms are log keys that name what one key of the vocabulary already names
// (docs/operations.md#logs): on-call filters on one key per thing.
var synonyms = map[string]string{
	"id":       `"stand" for a stand, "server_id" for a server`,
	"stand_id": `"stand"`,
	"id_stand": `"stand"`,
	"sha":      `"commit"`,
	"hash":     `"commit"`,
	"pr":       `"pull_request"`,
	"index":    `"pull_request"`,
	"op":       `"operation" (the reconciler's) or "step" (a Pulumi resource's)`,
	"error":    `"err"`,
}

var snakeCase = regexp.MustCompile(`^[a-z][a-z0-9_]*$`)

// keyUse is a log key where a call passes it.
type keyUse struct {
	key string
	at  token.Position
}

// logKeys are the string keys passed to log calls in f: Debug, Info, Warn, Error and With on a
// receiver whose name says it is a logger (log, r.log, e.cfg.Log, slog), up to the first argument
// that is neither a key and its value nor a slog attribute.
func logKeys(fset *token.FileSet, f *ast.File) []keyUse {
	var out []keyUse
	ast.Inspect(f, func(n ast.Node) bool {
		c, ok := n.(*ast.CallExpr)
		if !ok {
			return true
		}
		sel, ok := c.Fun.(*ast.SelectorExpr)
		if !ok || !strings.Contains(strings.ToLower(exprName(sel.X)), "log") {
			return true
		}
		start := 1
		switch sel.Sel.Name {
		case "Debug", "Info", "Warn", "Error":
		case "With":
			start = 0
		default:
			return true
		}
		for i := start; i < len(c.Args); i++ {
			if lit, ok := c.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				k, _ := strconv.Unquote(lit.Value)
				out = append(out, keyUse{k, fset.Position(lit.Pos())})
				i++ // its value
				continue
			}
			attr, ok := c.Args[i].(*ast.CallExpr)
			if !ok || len(attr.Args) == 0 {
				break
			}
			if s, ok := attr.Fun.(*ast.SelectorExpr); !ok || exprName(s.X) != "slog" {
				break
			}
			if lit, ok := attr.Args[0].(*ast.BasicLit); ok && lit.Kind == token.STRING {
				k, _ := strconv.Unquote(lit.Value)
				out = append(out, keyUse{k, fset.Position(lit.Pos())})
			}
		}
		return true
	})
	return out
}

// exprName is a receiver's dotted name ("r.log", "e.cfg.Log"), or "" when it is not a name.
func exprName(e ast.Expr) string {
	switch x := e.(type) {
	case *ast.Ident:
		return x.Name
	case *ast.SelectorExpr:
		if p := exprName(x.X); p != "" {
			return p + "." + x.Sel.Name
		}
	}
	return ""
}

// badKey says what is wrong with a log key, or "".
func badKey(k string) string {
	if fix, ok := synonyms[k]; ok {
		return "use " + fix
	}
	if !snakeCase.MatchString(k) {
		return "log keys are snake_case"
	}
	return ""
}

// TestLogKeys: every log call of the module's code names a stand, commit, operation or pull request
// with the same key (docs/operations.md#logs), in snake_case. A planted call shows the check sees
// each kind of fault.
func TestLogKeys(t *testing.T) {
	planted := `package p
func f() {
	log.Info("done", "id", 1, slog.String("pr", "2"))
	r.log.With("opName", 3).Warn("x")
	t.Error("id", 4) // not a logger
}`
	fset := token.NewFileSet()
	f, err := parser.ParseFile(fset, "planted.go", planted, 0)
	if err != nil {
		t.Fatal(err)
	}
	var found []string
	for _, u := range logKeys(fset, f) {
		if badKey(u.key) != "" {
			found = append(found, u.key)
		}
	}
	if strings.Join(found, " ") != "id pr opName" {
		t.Fatalf("the check finds %v in the planted calls, want id pr opName", found)
	}

	root := testenv.RepoRoot()
	keys := 0
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && p != root && (strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_") || d.Name() == "bin" || d.Name() == "testdata" ||
			d.Name() == "node_modules" || d.Name() == "tools") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
			return nil
		}
		fset := token.NewFileSet()
		f, err := parser.ParseFile(fset, p, nil, 0)
		if err != nil {
			return err
		}
		for _, u := range logKeys(fset, f) {
			keys++
			if why := badKey(u.key); why != "" {
				rel, _ := filepath.Rel(root, u.at.Filename)
				t.Errorf("%s:%d: log key %q: %s", rel, u.at.Line, u.key, why)
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if keys < 150 {
		t.Fatalf("found %d log keys in the module", keys)
	}
	t.Logf("%d log keys checked", keys)
}
