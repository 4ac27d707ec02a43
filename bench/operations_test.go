//go:build bench

package bench

import (
	"cmp"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// beforeReads is the last commit whose engine asked the Pulumi CLI for what it can read from the
// backend itself (stack select, stack output, stack history; the cloud's endpoint set as
// configuration): the "before" of the processes per operation.
const beforeReads = "96fb27b^"

// beforeKeep is the last commit that judged every stand of a commit anew, one after the other, and
// read the stacks after the judgement: the "before" of the first cycle after a restart.
const beforeKeep = "948050b"

// opCount is what one operation through the daemon cost.
type opCount struct {
	processes int
	commands  string // the Pulumi commands run, in order
	took      time.Duration
}

// benchOperations counts the Pulumi processes of a create, an update, a commit leaving the spec as
// it is and a destroy, each through the daemon, with this version and with the build of
// beforeReads in the same run; then times 100 creates with each.
func benchOperations(t *testing.T, bin string, res *results) {
	old := buildReconcilerAt(t, beforeReads)
	builds := []struct{ name, bin string }{{"before", old}, {"now", bin}}
	counts := map[string]map[string]opCount{}
	for _, b := range builds {
		counts[b.name] = countOperations(t, b.bin)
	}
	for _, op := range operations {
		was, now := counts["before"][op], counts["now"][op]
		if op == "create" && now.processes > 3 || op == "update" && now.processes > 2 {
			t.Errorf("%s: %d Pulumi processes (%s)", op, now.processes, now.commands)
		}
		res.add("Pulumi processes: "+op, "1 stand, through the daemon",
			fmt.Sprintf("%d (%s)", now.processes, cmp.Or(now.commands, "none")), fmt.Sprintf("%d (%s)", was.processes, cmp.Or(was.commands, "none")),
			fewer(was.processes, now.processes),
			fmt.Sprintf("from the commit to the stand's status and 3 cycles after (%.1f s now, %.1f s before); before: the build of %s, the engine asking the CLI for what it can read from the backend",
				now.took.Seconds(), was.took.Seconds(), beforeReads))
	}
	took := map[string]opCount{}
	for _, b := range builds {
		took[b.name] = hundredCreates(t, b.bin)
	}
	was, now := took["before"], took["now"]
	res.add("100 creates", "4 workers, hcloudsim", fmt.Sprintf("%.0f s, %d Pulumi processes", now.took.Seconds(), now.processes),
		fmt.Sprintf("%.0f s, %d Pulumi processes", was.took.Seconds(), was.processes), fmt.Sprintf("%.1f× sooner", was.took.Seconds()/now.took.Seconds()),
		fmt.Sprintf("from the daemon's start to the 100th Ready status, one commit adding 100 stands; before: the build of %s", beforeReads))
}

var operations = []string{"create", "update", "commit, spec unchanged", "destroy"}

func fewer(was, now int) string {
	if now == 0 {
		if was == 0 {
			return "="
		}
		return "all gone"
	}
	return fmt.Sprintf("%.1f× fewer", float64(was)/float64(now))
}

// countOperations runs each of operations on one stand through a daemon of bin.
func countOperations(t *testing.T, bin string) map[string]opCount {
	w := newWorld(t, bin, testenv.StartHetzner(t, "bench-token"))
	// A second stand stays: a commit that removes the repository's last stand is held (reason LastStand).
	files := baseFiles(t)
	files[standPath("b0001")] = benchStand("b0001", 6300)
	w.repo.Change("bases and b0001", files)
	d := w.daemon("--poll-interval", "1s")
	d.start()
	d.waitFor("b0001 Ready", 10*time.Minute, func() bool { s, _ := w.status(t, "local_b0001_dev"); return s.Phase == reason.Ready })
	const id = "local_b0000_dev"
	ready := func(commit string) bool {
		s, _ := w.status(t, id)
		return s.Phase == reason.Ready && s.LastSuccessfulCommit == commit
	}
	out := map[string]opCount{}
	measure := func(op string, change func() string, done func(commit string) bool) {
		k, start := w.processes(), time.Now()
		commit := change()
		d.waitFor(op, 10*time.Minute, func() bool { return done(commit) })
		took := time.Since(start)
		// Anything the operation runs after its status is counted too.
		c := d.cycles()
		d.waitFor("3 more cycles", 5*time.Minute, func() bool { return d.cycles() >= c+3 })
		out[op] = opCount{processes: w.processes() - k, commands: w.commandsSince(k), took: took}
		t.Logf("%s: %d Pulumi processes (%s), %.1f s", op, out[op].processes, out[op].commands, took.Seconds())
	}
	measure("create", func() string {
		return w.repo.Change("b0000", map[string]string{standPath("b0000"): benchStand("b0000", 6300)})
	}, ready)
	measure("update", func() string {
		return w.repo.Change("b0000: another port", map[string]string{standPath("b0000"): benchStand("b0000", 6301)})
	}, ready)
	measure("commit, spec unchanged", func() string {
		return w.repo.Change("b0000: a comment", map[string]string{standPath("b0000"): benchStand("b0000", 6301) + "# a comment\n"})
	}, func(string) bool { return true })
	measure("destroy", func() string { return w.repo.Change("b0000 removed", nil, "stands/b0000") }, func(string) bool {
		if s, ok := w.status(t, id); ok && s.Phase != reason.Destroyed {
			return false
		}
		for name := range w.hetzner.Servers(t) {
			if strings.HasPrefix(name, "local-b0000-") {
				return false
			}
		}
		return true
	})
	d.stop()
	return out
}

// hundredCreates is the time from a daemon's start to 100 new stands Ready, and the Pulumi
// processes it ran.
func hundredCreates(t *testing.T, bin string) opCount {
	w := newWorld(t, bin, testenv.StartHetzner(t, "bench-token"))
	files := baseFiles(t)
	for i := range 100 {
		files[standPath(project(i))] = benchStand(project(i), 6300)
	}
	w.repo.Change("100 stands", files)
	d := w.daemon("--poll-interval", "1s")
	d.start()
	// One look at the statuses every 2 s: a fetch of the repository is the bench's cost, not the daemon's.
	wait.For(t, "100 stands Ready", 30*time.Minute, func() bool { return w.allReady(100) }, wait.Every(2*time.Second), wait.Unless(d.gone))
	took := time.Since(d.started)
	d.stop()
	return opCount{processes: w.processes(), took: took}
}

// commandsSince names the Pulumi commands run after the first k, in order: "stack init, up".
func (w *world) commandsSince(k int) string {
	data, _ := os.ReadFile(w.counts)
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	var out []string
	for _, line := range lines[min(k, len(lines)):] {
		var words []string
		for _, f := range strings.Fields(line) {
			if strings.HasPrefix(f, "-") {
				continue
			}
			if words = append(words, f); len(words) == 2 || f == "up" || f == "preview" || f == "destroy" || f == "refresh" {
				break
			}
		}
		if len(words) > 0 {
			out = append(out, strings.Join(words, " "))
		}
	}
	return strings.Join(out, ", ")
}

// buildReconcilerAt builds stands-reconciler as it was at rev, from the repository's history.
func buildReconcilerAt(t *testing.T, rev string) string {
	t.Helper()
	src := t.TempDir()
	archive := exec.Command("sh", "-c", fmt.Sprintf("git -C %q archive --format=tar %q | tar -x -C %q", testenv.RepoRoot(), rev, src))
	if msg, err := archive.CombinedOutput(); err != nil {
		t.Fatalf("git archive %s: %v\n%s", rev, err, msg)
	}
	out := filepath.Join(t.TempDir(), "stands-reconciler-"+strings.TrimSuffix(rev, "^"))
	build := exec.Command("go", "build", "-buildvcs=false", "-o", out, "./cmd/stands-reconciler")
	build.Dir = src
	if msg, err := build.CombinedOutput(); err != nil {
		t.Fatalf("build %s: %v\n%s", rev, err, msg)
	}
	return out
}
