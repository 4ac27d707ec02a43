//go:build bench

package bench

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/internal/testenv"
)

// results are the rows of bench/results.md, printed as they come.
type results struct {
	t    *testing.T
	rows [][]string
	rss  []string
}

func newResults(t *testing.T) *results { return &results{t: t} }

// add records a measurement: what, at what size, this version's number, the baseline's, their
// ratio, and how it was measured.
func (r *results) add(what, size, ours, baseline, ratio, how string) {
	r.t.Logf("%s (%s): %s | baseline %s | %s | %s", what, size, ours, baseline, ratio, how)
	r.rows = append(r.rows, []string{what, size, ours, baseline, ratio, how})
}

// Markers of the generated section in docs/performance.md.
const (
	beginMark = "<!-- bench results: written by make bench -->"
	endMark   = "<!-- end of bench results -->"
)

func (r *results) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s at commit %s on %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), commit(), machine())
	b.WriteString("| measurement | size | this version | baseline | ratio | how |\n|---|---|---|---|---|---|\n")
	for _, row := range r.rows {
		for i := range row {
			row[i] = strings.ReplaceAll(row[i], "|", `\|`)
		}
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

// write puts the table into bench/results.md and docs/performance.md's generated section.
func (r *results) write(t *testing.T) {
	t.Helper()
	if t.Failed() {
		t.Log("a measurement failed: the results files are left as they were")
		return
	}
	root := testenv.RepoRoot()
	table := r.table()
	doc := "# Benchmark results\n\nWritten by `make bench` (bench/); how each number is measured is in [docs/performance.md](../docs/performance.md).\n\n" + table
	if err := os.WriteFile(filepath.Join(root, "bench", "results.md"), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	perf := filepath.Join(root, "docs", "performance.md")
	data, err := os.ReadFile(perf)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := bytes.Cut(data, []byte(beginMark))
	_, after, ok2 := bytes.Cut(rest, []byte(endMark))
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the markers %q and %q", perf, beginMark, endMark)
	}
	out := string(before) + beginMark + "\n" + table + endMark + string(after)
	if err := os.WriteFile(perf, []byte(out), 0o644); err != nil {
		t.Fatal(err)
	}
}

func commit() string {
	out, err := exec.Command("git", "-C", testenv.RepoRoot(), "rev-parse", "--short=12", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(out))
	if st, _ := exec.Command("git", "-C", testenv.RepoRoot(), "status", "--porcelain", "--untracked-files=no").Output(); len(st) > 0 {
		c += " (with local changes)"
	}
	return c
}

// machine names the CPU, its cores and the memory.
func machine() string {
	model := "unknown CPU"
	if data, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.Lines(string(data)) {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.TrimSpace(k) == "model name" {
				model = strings.TrimSpace(v)
				break
			}
		}
	}
	mem := ""
	if data, err := os.ReadFile("/proc/meminfo"); err == nil {
		var kb int
		if _, err := fmt.Sscanf(strings.SplitN(string(data), "\n", 2)[0], "MemTotal: %d kB", &kb); err == nil {
			mem = fmt.Sprintf(", %.1f GiB", float64(kb)/(1<<20))
		}
	}
	return fmt.Sprintf("%s, %d cores%s, %s", model, runtime.NumCPU(), mem, runtime.Version())
}
