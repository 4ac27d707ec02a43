package main

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// soakCycles is the soak's length: STANDS_SOAK_CYCLES, else 500.
func soakCycles(t *testing.T) int {
	if v := os.Getenv("STANDS_SOAK_CYCLES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			t.Fatalf("STANDS_SOAK_CYCLES=%q", v)
		}
		return n
	}
	return 500
}

// holding is what the daemon holds at one moment: from its /metrics (the Go runtime's and the
// process's collectors) and from its folders.
type holding struct {
	cycles, fds, goroutines int
	rss                     float64 // bytes
	tmp, state, repo        int     // entries under its TMPDIR, its state folder and the repository's .git
	entries                 map[string]bool
}

func (u holding) String() string {
	return fmt.Sprintf("after %d cycles: %d fds, %d goroutines, RSS %.1f MiB, %d entries in TMPDIR, %d in the state folder, %d in the repository's .git",
		u.cycles, u.fds, u.goroutines, u.rss/(1<<20), u.tmp, u.state, u.repo)
}

func (d *localDaemon) holding() holding {
	t := d.t
	t.Helper()
	u := holding{cycles: d.cycles()}
	metrics := d.get("/metrics")
	value := func(name string) float64 {
		for line := range strings.Lines(metrics) {
			if rest, ok := strings.CutPrefix(line, name+" "); ok {
				v, err := strconv.ParseFloat(strings.TrimSpace(rest), 64)
				if err == nil {
					return v
				}
			}
		}
		t.Fatalf("/metrics has no %s", name)
		return 0
	}
	u.fds, u.goroutines, u.rss = int(value("process_open_fds")), int(value("go_goroutines")), value("process_resident_memory_bytes")
	u.entries = map[string]bool{}
	u.tmp, u.state, u.repo = countEntries(d.tmp, u.entries), countEntries(d.state, u.entries), countEntries(filepath.Join(d.lr.dir, ".git"), u.entries)
	return u
}

// countEntries counts what is under dir, and notes each path in seen.
func countEntries(dir string, seen map[string]bool) int {
	n := -1 // not the folder itself
	_ = filepath.WalkDir(dir, func(p string, _ os.DirEntry, _ error) error {
		n++
		seen[p] = true
		return nil
	})
	return n
}

// growth is what grew from a to b beyond a soak's allowance: nothing may pile up per cycle; the
// goroutines and fds of work in flight at either moment (an HTTP scrape, a git fetch) are allowed
// a few; RSS may grow by 10 MB over 500 cycles (the heap settling), pro rata.
func growth(a, b holding) []string {
	var out []string
	n := b.cycles - a.cycles
	if d := b.fds - a.fds; d > 3 {
		out = append(out, fmt.Sprintf("open fds +%d", d))
	}
	if d := b.goroutines - a.goroutines; d > 4 {
		out = append(out, fmt.Sprintf("goroutines +%d", d))
	}
	if d := b.tmp - a.tmp; d > 0 {
		out = append(out, fmt.Sprintf("TMPDIR entries +%d", d))
	}
	if d := b.state - a.state; d > 0 {
		var added []string
		for p := range b.entries {
			if !a.entries[p] && len(added) < 5 {
				added = append(added, p)
			}
		}
		out = append(out, fmt.Sprintf("state folder entries +%d (%s)", d, strings.Join(added, ", ")))
	}
	if d := b.repo - a.repo; d > 0 {
		out = append(out, fmt.Sprintf("repository entries +%d: a no-op cycle committed", d))
	}
	if d, allowed := b.rss-a.rss, 10e6*float64(n)/500; d > allowed {
		out = append(out, fmt.Sprintf("RSS +%.1f MB (allowed %.1f MB for %d cycles)", d/1e6, allowed/1e6, n))
	}
	return out
}

// soak runs the daemon on two Ready stands until it has done cycles no-op cycles after a warm-up,
// and returns its holding before and after.
func soak(t *testing.T, cycles int, env ...string) (before, after holding) {
	h := testenv.StartHetzner(t, "soak-token")
	lr := newLocalStandsRepo(t)
	lr.commit(map[string]string{standPath("p"): plainStand("p"), standPath("q"): plainStand("q")})
	d := newLocalDaemon(t, lr, h, "--poll-interval", "10ms")
	d.env = append(d.env, env...)
	d.env = append(d.env, "LOG_LEVEL=info") // later wins: a debug record per cycle is not the subject
	d.start()
	for _, id := range []string{"local_p_dev", "local_q_dev"} {
		d.waitStatus(id, 3*time.Minute, func(s reconcile.Status) bool { return s.Phase == reason.Ready })
	}
	const warmup = 30
	d.waitFor("the warm-up cycles", 5*time.Minute, func() bool { return d.cycles() >= warmup })
	before = d.holding()
	start, processes := time.Now(), d.processes()
	d.waitFor(fmt.Sprintf("%d cycles", cycles), time.Duration(cycles)*time.Second+5*time.Minute, func() bool { return d.cycles() >= before.cycles+cycles })
	after = d.holding()
	took := time.Since(start)
	t.Logf("%d no-op cycles in %s (%.0f ms each, %.2f Pulumi processes each)", after.cycles-before.cycles, took.Round(time.Second),
		float64(took.Milliseconds())/float64(after.cycles-before.cycles), float64(d.processes()-processes)/float64(after.cycles-before.cycles))
	t.Logf("before: %s", before)
	t.Logf("after:  %s", after)
	if ups := d.ups(); ups != 2 {
		t.Errorf("%d pulumi up over the soak, want the 2 of the first applies", ups)
	}
	return before, after
}

// TestSoak: at least 500 no-op cycles (poll 10 ms) against the real Pulumi CLI leave nothing
// behind: no temporary folder, no file in the state folder, no open fd, no goroutine, and less than
// 10 MB of RSS. The control runs the same daemon with a deliberate leak of one of each per cycle,
// and the same check must catch every one.
func TestSoak(t *testing.T) {
	t.Run("no growth", func(t *testing.T) {
		before, after := soak(t, soakCycles(t))
		for _, g := range growth(before, after) {
			t.Errorf("grew over the soak: %s", g)
		}
	})
	t.Run("control: a leak of one of each per cycle is caught", func(t *testing.T) {
		before, after := soak(t, 60, leakEnv+"=1")
		got := strings.Join(growth(before, after), "; ")
		for _, want := range []string{"open fds", "goroutines", "TMPDIR entries", "RSS"} {
			if !strings.Contains(got, want) {
				t.Errorf("the leak of %s went unnoticed: %q", want, got)
			}
		}
	})
}

// leakEnv makes the test binary, running as the daemon, leak one fd, one goroutine, one temporary
// folder and 1 MiB per cycle: it counts the cycles in its own log. 64 KiB a cycle, as it was, once hid in
// heap pages the daemon freed earlier, which stay resident: RSS did not move over 60 cycles.
const leakEnv = "STANDS_TEST_LEAK"

// startLeaking interposes on stderr and leaks at each "cycle planned" record.
func startLeaking() {
	r, w, err := os.Pipe()
	if err != nil {
		panic(err)
	}
	stderr := os.Stderr
	os.Stderr = w
	var kept [][]byte
	var files []*os.File // referenced, or their finalizers would close them
	go func() {
		sc := bufio.NewScanner(io.TeeReader(r, stderr))
		sc.Buffer(make([]byte, 1<<20), 1<<24)
		for sc.Scan() {
			if !strings.Contains(sc.Text(), `"msg":"cycle planned"`) {
				continue
			}
			if f, err := os.Open(os.DevNull); err == nil {
				files = append(files, f)
			}
			block := make(chan struct{})
			go func() { <-block }()
			_, _ = os.MkdirTemp("", "leak-")
			b := make([]byte, 1<<20)
			for i := range b {
				b[i] = byte(i)
			}
			kept = append(kept, b)
		}
		_, _ = kept, files
	}()
}
