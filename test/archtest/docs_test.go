package archtest

import (
	"fmt"
	"go/ast"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"unicode"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestDocLinksResolve: every reference to a page of docs/ (in code, help texts, alert rules,
// scripts and the docs themselves) names a page that exists and, with an anchor, a heading of it;
// every relative link of a Markdown page names a file of the repository. A reader who follows one
// from a help text or an alert lands where it says.
func TestDocLinksResolve(t *testing.T) {
	root := testenv.RepoRoot()
	files := trackedText(t, root)
	pages := anchorIndex{}
	checked, bad := 0, []string{}
	for _, f := range files {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range docReferences(f, string(data)) {
			checked++
			if why := pages.resolve(root, r.target, r.anchor); why != "" {
				bad = append(bad, fmt.Sprintf("%s:%d: %s%s: %s", f, r.line, r.target, hashed(r.anchor), why))
			}
		}
	}
	for _, b := range bad {
		t.Error(b)
	}
	t.Logf("%d references to docs and files in %d files checked", checked, len(files))
	if checked < 100 {
		t.Fatalf("checked %d references: the scan finds nothing", checked)
	}
}

// TestTheLinkCheckSeesADanglingLink: on a small repository of its own (testdata/links) the check
// finds a missing page, a missing heading and a relative link to nothing, takes headings as a
// reader's browser does (punctuation dropped, repeats numbered, none inside a code fence), and
// leaves links off the site alone.
func TestTheLinkCheckSeesADanglingLink(t *testing.T) {
	root := filepath.Join("testdata", "links")
	var got []string
	pages := anchorIndex{}
	for _, f := range []string{"main.go", path.Join("docs", "index.md")} {
		data, err := os.ReadFile(filepath.Join(root, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range docReferences(f, string(data)) {
			if why := pages.resolve(root, r.target, r.anchor); why != "" {
				got = append(got, strings.TrimPrefix(r.target, "docs/")+hashed(r.anchor))
			}
		}
	}
	// Without docs/ in front: this file's text is scanned by TestDocLinksResolve too.
	want := []string{"page.md#not-a-heading", "gone.md", "page.md#nowhere", "cmd/x.go", "other.md", "index.md#nothing"}
	if !slices.Equal(got, want) {
		t.Errorf("dangling: %q, want %q", got, want)
	}
}

func hashed(anchor string) string {
	if anchor == "" {
		return ""
	}
	return "#" + anchor
}

// trackedText lists the repository's text files a reader follows links from; fixtures (testdata)
// hold what authors wrote, not the project's links.
func trackedText(t *testing.T, root string) []string {
	t.Helper()
	cmd := exec.Command("git", "ls-files", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("git ls-files: %v", err)
	}
	var files []string
	for f := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if strings.Contains(f, "testdata/") || strings.HasPrefix(f, "tools/") {
			continue
		}
		switch path.Ext(f) {
		case ".go", ".md", ".yml", ".yaml", ".sh", ".service", ".mjs", ".hcl", ".tmpl", ".txt":
		default:
			if b := path.Base(f); b != "Makefile" && f != ".ci/run" {
				continue
			}
		}
		if _, err := os.Stat(filepath.Join(root, f)); err == nil {
			files = append(files, f)
		}
	}
	return files
}

type reference struct {
	line           int
	target, anchor string // target relative to the repository's root
}

var (
	// docsPath is a page of docs/ named anywhere, from the repository's root (a help text, a comment,
	// an alert's runbook URL).
	docsPath = regexp.MustCompile(`(?:^|[^\w./-])(docs/[\w.-]+\.md)(?:#([\w-]+))?`)
	// mdLink is a Markdown inline link's target.
	mdLink = regexp.MustCompile(`\]\(([^)\s]+)\)`)
)

// docReferences are the references file (relative to the root) makes to docs and, for a Markdown
// page, to other files by relative links.
func docReferences(file, text string) []reference {
	var out []reference
	seen := map[string]bool{}
	add := func(line int, target, anchor string) {
		key := fmt.Sprint(line, target, anchor)
		if !seen[key] {
			seen[key] = true
			out = append(out, reference{line: line, target: target, anchor: anchor})
		}
	}
	fenced := false
	for i, line := range strings.Split(text, "\n") {
		if strings.HasSuffix(file, ".md") && strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
		}
		for _, m := range docsPath.FindAllStringSubmatch(line, -1) {
			add(i+1, m[1], m[2])
		}
		if !strings.HasSuffix(file, ".md") || fenced {
			continue
		}
		for _, m := range mdLink.FindAllStringSubmatch(line, -1) {
			link := m[1]
			if strings.Contains(link, "://") || strings.HasPrefix(link, "mailto:") {
				continue
			}
			target, anchor, _ := strings.Cut(link, "#")
			if target == "" {
				target = file
			} else {
				target = path.Clean(path.Join(path.Dir(file), target))
			}
			add(i+1, target, anchor)
		}
	}
	return out
}

// anchorIndex caches each page's anchors.
type anchorIndex map[string]map[string]bool

// resolve says why target#anchor does not resolve ("" when it does).
func (a anchorIndex) resolve(root, target, anchor string) string {
	data, err := os.ReadFile(filepath.Join(root, target))
	if err != nil {
		if _, serr := os.Stat(filepath.Join(root, target)); serr == nil {
			return "" // a folder
		}
		return "no such file"
	}
	if anchor == "" || !strings.HasSuffix(target, ".md") {
		return ""
	}
	if a[target] == nil {
		a[target] = anchors(string(data))
	}
	if !a[target][anchor] {
		return "no heading with this anchor"
	}
	return ""
}

// anchors are a Markdown page's heading anchors as Gitea and GitHub make them: the heading's text
// in lower case, its punctuation dropped (but - and _), spaces made hyphens, a repeated one suffixed
// -1, -2…; headings inside code fences are none.
func anchors(page string) map[string]bool {
	out := map[string]bool{}
	count := map[string]int{}
	fenced := false
	for line := range strings.SplitSeq(page, "\n") {
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			continue
		}
		text, ok := strings.CutPrefix(strings.TrimLeft(line, "#"), " ")
		if fenced || !ok || !strings.HasPrefix(line, "#") || len(line)-len(strings.TrimLeft(line, "#")) > 6 {
			continue
		}
		slug := slugOf(text)
		if n := count[slug]; n > 0 {
			out[fmt.Sprintf("%s-%d", slug, n)] = true
		} else {
			out[slug] = true
		}
		count[slug]++
	}
	return out
}

// mdLinkText keeps a link's text: [text](url) → text.
var mdLinkText = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)

func slugOf(heading string) string {
	heading = mdLinkText.ReplaceAllString(strings.TrimSpace(heading), "$1")
	var b strings.Builder
	for _, r := range strings.ToLower(heading) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// TestArchitectureNamesTheLoopsInterfaces: the reconcile row of docs/architecture.md names every
// interface the loop declares, each one a seam a reader looks for there.
func TestArchitectureNamesTheLoopsInterfaces(t *testing.T) {
	root := testenv.RepoRoot()
	data, err := os.ReadFile(filepath.Join(root, "docs", "architecture.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, row, _ := strings.Cut(string(data), "\n| `reconcile` |")
	row, _, _ = strings.Cut(row, "\n")
	n := 0
	for _, src := range sources(t, filepath.Join(root, "reconcile")) {
		for _, d := range src.file.Decls {
			g, ok := d.(*ast.GenDecl)
			if !ok {
				continue
			}
			for _, spec := range g.Specs {
				ts, ok := spec.(*ast.TypeSpec)
				if !ok || !ts.Name.IsExported() {
					continue
				}
				if _, iface := ts.Type.(*ast.InterfaceType); !iface {
					continue
				}
				n++
				if !strings.Contains(row, "`"+ts.Name.Name+"`") {
					t.Errorf("docs/architecture.md's reconcile row does not name the interface %s", ts.Name.Name)
				}
			}
		}
	}
	if n < 5 {
		t.Fatalf("found %d interfaces in reconcile", n)
	}
}
