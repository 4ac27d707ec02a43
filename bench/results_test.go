//go:build bench || faults

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

	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// results are the rows of a results file (bench/results.md, bench/faults.md), printed as they come.
type results struct {
	t      *testing.T
	header []string
	rows   [][]string
}

func newResults(t *testing.T) *results {
	return &results{t: t, header: []string{"measurement", "size", "this version", "baseline", "ratio", "how"}}
}

// report is where a results table goes: a file of its own under bench/ and a generated section
// of a page under docs/.
type report struct {
	file, title, intro string // bench/<file>
	doc, begin, end    string // docs/<doc> between the markers
}

var benchReport = report{"results.md", "Benchmark results",
	"Written by `make bench` (bench/); how each number is measured is in [docs/performance.md](../docs/performance.md).",
	"performance.md", beginMark, endMark}

// add records a measurement: what, at what size, this version's number, the baseline's, their
// ratio, and how it was measured.
func (r *results) add(what, size, ours, baseline, ratio, how string) {
	r.row(what, size, ours, baseline, ratio, how)
}

// row records a row of the header's cells.
func (r *results) row(cells ...string) {
	r.t.Logf("%s", strings.Join(cells, " | "))
	r.rows = append(r.rows, cells)
}

// Markers of the generated section in docs/performance.md.
const (
	beginMark = "<!-- bench results: written by make bench -->"
	endMark   = "<!-- end of bench results -->"
)

func (r *results) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "Measured %s at commit %s on %s.\n\n", time.Now().UTC().Format("2006-01-02 15:04 UTC"), commit(), machine())
	b.WriteString("| " + strings.Join(r.header, " | ") + " |\n|" + strings.Repeat("---|", len(r.header)) + "\n")
	for _, row := range r.rows {
		for i := range row {
			row[i] = strings.ReplaceAll(row[i], "|", `\|`)
		}
		b.WriteString("| " + strings.Join(row, " | ") + " |\n")
	}
	return b.String()
}

// write puts the table into the report's file and its page's generated section.
func (r *results) write(t *testing.T, rep report) {
	t.Helper()
	if t.Failed() {
		t.Log("a measurement failed: the results files are left as they were")
		return
	}
	root := testenv.RepoRoot()
	table := r.table()
	doc := "# " + rep.title + "\n\n" + rep.intro + "\n\n" + table
	if err := os.WriteFile(filepath.Join(root, "bench", rep.file), []byte(doc), 0o644); err != nil {
		t.Fatal(err)
	}
	perf := filepath.Join(root, "docs", rep.doc)
	data, err := os.ReadFile(perf)
	if err != nil {
		t.Fatal(err)
	}
	before, rest, ok1 := bytes.Cut(data, []byte(rep.begin))
	_, after, ok2 := bytes.Cut(rest, []byte(rep.end))
	if !ok1 || !ok2 {
		t.Fatalf("%s lacks the markers %q and %q", perf, rep.begin, rep.end)
	}
	out := string(before) + rep.begin + "\n" + table + rep.end + string(after)
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
