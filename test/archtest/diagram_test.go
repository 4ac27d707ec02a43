package archtest

import (
	"flag"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

var update = flag.Bool("update", false, "rewrite docs/architecture.md's dependency diagram from the imports")

// Where the generated diagram stands in docs/architecture.md.
const (
	diagramBegin = "<!-- dependency diagram: go test ./test/archtest -run TestDependencyDiagram -update -->"
	diagramEnd   = "<!-- end of the dependency diagram -->"
)

// TestDependencyDiagram: docs/architecture.md's diagram of what depends on what is the product's
// own imports (go list), each edge drawn once where no longer path implies it; a change of the
// imports fails here until the diagram is made again with -update. The utilities of internal/ and
// what only tests and the demo use are left out: every package may use the first, none the second.
func TestDependencyDiagram(t *testing.T) {
	out := output(t, goCmd(t, "list", "-f", `{{.ImportPath}}{{range .Imports}} {{.}}{{end}}`, "./..."))
	graph := map[string][]string{}
	for line := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		fields := strings.Fields(line)
		from, ok := product(fields[0])
		if !ok {
			continue
		}
		graph[from] = nil
		for _, imp := range fields[1:] {
			if to, ok := product(imp); ok {
				graph[from] = append(graph[from], to)
			}
		}
	}
	want := diagram(reduce(graph))
	file := filepath.Join(testenv.RepoRoot(), "docs", "architecture.md")
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := strings.Cut(string(data), diagramBegin+"\n")
	got, after, ok2 := strings.Cut(rest, diagramEnd)
	if !ok1 || !ok2 {
		t.Fatalf("docs/architecture.md has no %q … %q", diagramBegin, diagramEnd)
	}
	if got == want {
		return
	}
	if *update {
		if err := os.WriteFile(file, []byte(before+diagramBegin+"\n"+want+diagramEnd+after), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	t.Errorf("docs/architecture.md's dependency diagram is not the imports': make it again with\n"+
		"  go test ./test/archtest -run TestDependencyDiagram -update\nwant:\n%s", want)
}

// product is a package's path within the module when the diagram draws it.
func product(importPath string) (string, bool) {
	p, ok := strings.CutPrefix(importPath, module+"/")
	if !ok {
		return "", false
	}
	for _, left := range []string{"internal/", "test/", "hcloudsim", "bench", "deploy", "cmd/stands-demo", "cmd/stands-testapp", "cmd/hcloudsim"} {
		if strings.HasPrefix(p, left) {
			return "", false
		}
	}
	return p, true
}

// reduce keeps the edges no longer path implies (the transitive reduction of an acyclic graph).
func reduce(graph map[string][]string) map[string][]string {
	reach := map[string]map[string]bool{}
	var visit func(string) map[string]bool
	visit = func(n string) map[string]bool {
		if r, ok := reach[n]; ok {
			return r
		}
		r := map[string]bool{}
		reach[n] = r
		for _, m := range graph[n] {
			r[m] = true
			maps.Copy(r, visit(m))
		}
		return r
	}
	out := map[string][]string{}
	for n, tos := range graph {
		out[n] = nil
		for _, to := range tos {
			implied := slices.ContainsFunc(tos, func(via string) bool { return via != to && visit(via)[to] })
			if !implied {
				out[n] = append(out[n], to)
			}
		}
		slices.Sort(out[n])
	}
	return out
}

// deciders are drawn green: they link no infrastructure library (TestDecidersLinkNoInfrastructure).
var deciders = []string{"reconcile", "prplan", "expiry", "judge", "diff", "stands", "manifest", "reason", "safeguard"}

// diagram writes the graph as a Mermaid flowchart, one line per package with what it imports.
func diagram(graph map[string][]string) string {
	id := func(p string) string { return strings.NewReplacer("/", "_", "-", "_").Replace(p) }
	var b strings.Builder
	b.WriteString("```mermaid\nflowchart TD\n")
	for _, n := range slices.Sorted(maps.Keys(graph)) {
		fmt.Fprintf(&b, "  %s[\"%s\"]\n", id(n), n)
	}
	for _, n := range slices.Sorted(maps.Keys(graph)) {
		if tos := graph[n]; len(tos) > 0 {
			ids := make([]string, len(tos))
			for i, to := range tos {
				ids[i] = id(to)
			}
			fmt.Fprintf(&b, "  %s --> %s\n", id(n), strings.Join(ids, " & "))
		}
	}
	b.WriteString("  classDef decides fill:#e8f4ea,stroke:#3a7d44\n")
	fmt.Fprintf(&b, "  class %s decides\n", strings.Join(deciders, ","))
	b.WriteString("```\n")
	return b.String()
}
