package reason

import (
	"context"
	"errors"
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

func TestCatalogue(t *testing.T) {
	all := All()
	if len(all) < 25 {
		t.Fatalf("the catalogue has %d reasons", len(all))
	}
	for _, r := range all {
		e := catalogue[r]
		if !slices.Contains(Phases, e.phase) {
			t.Errorf("%s implies phase %q, not a phase", r, e.phase)
		}
		if e.kind != Generic && e.kind != Stalling && e.kind != Waiting {
			t.Errorf("%s: kind %d", r, e.kind)
		}
		if n := strings.Count(e.message, "%"); n > 1 || (n == 1 && !strings.Contains(e.message, "%s")) {
			t.Errorf("%s: message template %q has more than one %%s or another verb", r, e.message)
		}
		if got := r.Message("DETAIL"); !strings.Contains(got, "DETAIL") {
			t.Errorf("%s: Message(detail) = %q: the detail is lost", r, got)
		}
		if got := r.Message(""); !strings.Contains(e.message, "%s") && got != e.message {
			t.Errorf("%s: Message(\"\") = %q, want the default %q", r, got, e.message)
		}
	}
	if Reason("NoSuchReason").Known() || !Applied.Known() {
		t.Error("Known")
	}
	if got := Reason("Old").Message("kept"); got != "kept" {
		t.Errorf("an unknown reason's message: %q", got)
	}
}

func TestOf(t *testing.T) {
	base := errors.New("boom")
	cases := []struct {
		err  error
		want Reason
	}{
		{nil, ""},
		{base, Failure},
		{fmt.Errorf("op: %w", context.Canceled), Canceled},
		{Wrap(RateLimited, base), RateLimited},
		{fmt.Errorf("outer: %w", Wrap(Passphrase, base)), Passphrase},
	}
	for _, c := range cases {
		if got := Of(c.err); got != c.want {
			t.Errorf("Of(%v) = %q, want %q", c.err, got, c.want)
		}
	}
	if Wrap(Failure, nil) != nil {
		t.Error("Wrap(nil) is not nil")
	}
	if w := Wrap(RateLimited, base); !errors.Is(w, base) || w.Error() != "boom" {
		t.Errorf("Wrap hides its error: %v", w)
	}
}

// TestDeclaredOnce: no Go file of the module outside this package spells a reason's string, so the
// catalogue is the one place a reason is declared. (Applying and Destroying are spelled as the
// operations they name, "apply" and "destroy", which the command line and the engine use too.)
func TestDeclaredOnce(t *testing.T) {
	names := map[string]Reason{}
	for _, r := range All() {
		if r != Applying && r != Destroying {
			names[string(r)] = r
		}
	}
	for _, p := range Phases {
		delete(names, string(p)) // a phase of the same name ("Failed", "Suspended") is the phase
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	files := 0
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (d.Name() == "testdata" || d.Name() == "tools" || d.Name() == "bin" || strings.HasPrefix(d.Name(), ".") || strings.HasPrefix(d.Name(), "_")) && path != root {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") || filepath.Dir(path) == filepath.Join(root, "reason") {
			return nil
		}
		files++
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, 0)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
				if s, err := strconv.Unquote(lit.Value); err == nil {
					if r, ok := names[s]; ok {
						rel, _ := filepath.Rel(root, path)
						t.Errorf("%s spells reason %s: use reason.%s", rel, s, r)
					}
				}
			}
			return true
		})
		return nil
	})
	if err != nil || files < 50 {
		t.Fatalf("walked %d files: %v", files, err)
	}
}
