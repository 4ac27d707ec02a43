//go:build bench

package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/stands-engine/stands-reconciler/engine"
	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/prplan"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// TestBench runs every measurement and writes the results (bench/results.md, docs/performance.md and
// its plot, docs/img/bench-curve.svg). BENCH_STANDS sets the large repository's sizes, comma-separated
// (1000,3000,10000); only a whole run at the documented sizes writes the results.
func TestBench(t *testing.T) {
	bin := buildReconciler(t)
	res := newResults(t)
	sizes := defaultSizes
	if v := os.Getenv("BENCH_STANDS"); v != "" {
		sizes = nil
		for f := range strings.SplitSeq(v, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			if err != nil || n < 30 || n > 10000 {
				t.Fatalf("BENCH_STANDS=%q: want sizes from 30 to 10000", v)
			}
			sizes = append(sizes, n)
		}
	}
	ok := true
	var curve []point
	prev := buildReconcilerAt(t, beforeKeep)
	for _, n := range sizes {
		ok = t.Run(fmt.Sprintf("%d stands", n), func(t *testing.T) { curve = append(curve, benchLarge(t, bin, prev, n, res)) }) && ok
	}
	ok = t.Run("operations", func(t *testing.T) { benchOperations(t, bin, res) }) && ok
	ok = t.Run("workers", func(t *testing.T) { benchWorkers(t, bin, res) }) && ok
	ok = t.Run("forge", func(t *testing.T) { benchForge(t, bin, res) }) && ok
	ok = t.Run("replicas", func(t *testing.T) { benchReplicas(t, bin, res) }) && ok
	ok = t.Run("plans follow main", func(t *testing.T) { benchFollow(t, bin, res) }) && ok
	// Only a whole run at the documented sizes replaces the results (-run can pick one part).
	if ok && slices.Equal(sizes, defaultSizes) && len(curve) == len(sizes) {
		res.write(t, benchReport)
		writePlot(t, curve)
	}
}

// defaultSizes are the large repository's sizes the results are written for.
var defaultSizes = []int{1000, 3000, 10000}

func project(i int) string { return fmt.Sprintf("b%04d", i) }

// sample is what the daemon and its outside services counted at one moment.
type sample struct {
	at               time.Time
	processes, ups   int
	gitea, vault     int64
	cycleSum, cycles float64
	rss              float64
}

func (d *daemon) sample() sample {
	sum, n := d.cycleSeconds()
	return sample{at: time.Now(), processes: d.w.processes(), ups: d.w.ups(), gitea: d.w.giteaIn.count(), vault: d.w.vaultIn.count(),
		cycleSum: sum, cycles: n, rss: d.rss()}
}

// point is one size's figures, for the plot.
type point struct {
	stands                   int
	warm, restart, ready, pr time.Duration // no-op cycle; first cycle after a restart; one change to Ready; one pull request to its plan
	rss                      float64       // MiB after 1,000 no-op cycles
}

// large is the large repository set up: n stands, three made by the CLI and the others copied from
// the first (stacks_test.go), their status files committed as the daemon would; d is that daemon,
// stopped, its state folder holding the stacks.
type large struct {
	w        *world
	d        *daemon
	files    map[string]string
	hashes   map[string]digests
	statuses map[string]string // the copies' status files, by path
	eng      *engine.Engine
}

// setUpLarge makes the large repository of n stands; res, when given, gets the setup's row.
func setUpLarge(t *testing.T, bin string, n int, res *results) *large {
	h := testenv.StartHetzner(t, "bench-token")
	w := newWorld(t, bin, h)
	files := baseFiles(t)
	first := map[string]string{}
	for k, v := range files {
		first[k] = v
	}
	for i := range n {
		// One port for all: a copy is then exactly what the CLI makes of its manifest.
		files[standPath(project(i))] = benchStand(project(i), 6300)
		if i < 3 {
			first[standPath(project(i))] = files[standPath(project(i))]
		}
	}
	w.repo.Change("three stands", first)
	d := w.daemon("--poll-interval", "1s")
	d.start()
	d.waitFor("the three stands Ready", 5*time.Minute, func() bool {
		st := w.statuses()
		for i := range 3 {
			if s, ok := st["local_"+project(i)+"_dev"]; !ok || s.Phase != reason.Ready {
				return false
			}
		}
		return true
	})
	d.stop()

	made := time.Now()
	hashes := specHashes(t, files, w.pl.Passphrase)
	eng := w.engine(t, d.state)
	for _, s := range inventoryOf(t, eng) {
		if want := hashes[s.StandID].spec; s.SpecHash != want {
			t.Fatalf("%s: the CLI recorded spec hash %s, the bench computes %s", s.StandID, s.SpecHash, want)
		}
	}
	snap, err := w.reader().Fetch(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	tmplStatus := readStatus(snap.Files, "local_b0000_dev")
	stackDiffs, statusDiffs := checkClones(t, d.state, "b0000", "b0001", hashes, tmplStatus, readStatus(snap.Files, "local_b0001_dev"))
	more, statuses := map[string]string{}, map[string]string{}
	for i := 3; i < n; i++ {
		p := project(i)
		id := "local_" + p + "_dev"
		stack := cloneStack(t, d.state, "b0000", p, hashes["local_b0000_dev"], hashes[id])
		more[standPath(p)] = files[standPath(p)]
		statuses[stands.StatusPath(id)] = string(cloneStatus(t, tmplStatus, "b0000", p, hashes["local_b0000_dev"], hashes[id], stack))
	}
	w.repo.Change(fmt.Sprintf("%d more stands", n-3), more)
	w.publishSigned(t, d.state, statuses, "status: the copies, as the reconciler would have written them")
	listed := w.cliListing(t, d.state, project(n/2))
	if res != nil {
		res.add("setup", fmt.Sprintf("%d stacks: 3 made through the CLI, %d copied", n, n-3), fmt.Sprintf("%.0f s to copy", time.Since(made).Seconds()), "", "",
			fmt.Sprintf("the CLI lists %d stacks and decrypts %s's outputs; the copy of b0000 as b0001 has the keys and types of the CLI's b0001 and differs only in %d volatile values of the stack file (%s) and %d of the status file",
				listed, project(n/2), len(stackDiffs), leaves(stackDiffs), len(statusDiffs)))
	}
	return &large{w: w, d: d, files: files, hashes: hashes, statuses: statuses, eng: eng}

}

// benchLarge measures the large repository of n stands; prev is the build of beforeKeep.
func benchLarge(t *testing.T, bin, prev string, n int, res *results) point {
	pt := point{stands: n}
	l := setUpLarge(t, bin, n, res)
	w, d, files, hashes, eng := l.w, l.d, l.files, l.hashes, l.eng

	// The first start on the large repository: it commits STATUS.md once, then settles.
	d.start()
	d.waitFor("3 cycles", 10*time.Minute, func() bool { return d.cycles() >= 3 })
	a := d.sample()
	d.waitFor("10 more cycles", 10*time.Minute, func() bool { return d.cycles() >= 13 })
	b := d.sample()
	cycles := b.cycles - a.cycles
	pt.warm = time.Duration(float64(time.Second) * (b.cycleSum - a.cycleSum) / cycles)
	res.add("no-op cycle, warm", fmt.Sprintf("%d stands", n), fmt.Sprintf("%.0f ms", 1000*(b.cycleSum-a.cycleSum)/cycles),
		"", "", fmt.Sprintf("%d Pulumi processes, %.1f Gitea and %.1f Vault requests per cycle over %.0f cycles; RSS %.0f MiB",
			b.processes-a.processes, float64(b.gitea-a.gitea)/cycles, float64(b.vault-a.vault)/cycles, cycles, b.rss))
	if b.processes != a.processes {
		t.Errorf("warm no-op cycles ran %d Pulumi processes", b.processes-a.processes)
	}

	// A restart: the first cycle's cost, and ten cycles' Pulumi processes and requests.
	d.stop()
	head := w.head(t)
	a = sample{processes: w.processes(), gitea: w.giteaIn.count(), vault: w.vaultIn.count()}
	d.start()
	d.waitFor("the first cycle after the restart", 10*time.Minute, func() bool { return d.cycles() >= 1 })
	firstCycle := time.Since(d.started)
	pt.restart = firstCycle
	d.waitFor("10 cycles after the restart", 10*time.Minute, func() bool { return d.cycles() >= 10 })
	b = d.sample()
	restartProcs := b.processes - a.processes
	res.add("no-op cycle, after a restart", fmt.Sprintf("%d stands", n), fmt.Sprintf("%.1f s to the first cycle's end", firstCycle.Seconds()), "", "",
		fmt.Sprintf("%d Pulumi processes, %d Gitea and %d Vault requests over the first 10 cycles; %d status commits; RSS %.0f MiB",
			restartProcs, b.gitea-a.gitea, b.vault-a.vault, w.commitsSince(t, head), b.rss))
	if restartProcs != 0 {
		t.Errorf("a restart and 10 no-op cycles ran %d Pulumi processes", restartProcs)
	}

	// The same restart with the build before the judgement was kept and spread over the cores
	// (beforeKeep), on the same state folder and repository.
	d.stop()
	w.bin = prev
	d.start()
	w.bin = bin
	d.waitFor("the previous build's first cycle after a restart", 10*time.Minute, func() bool { return d.cycles() >= 1 })
	was := time.Since(d.started)
	d.stop()
	res.add("first cycle after a restart: previous version", fmt.Sprintf("%d stands", n), fmt.Sprintf("%.1f s", firstCycle.Seconds()),
		fmt.Sprintf("%.1f s", was.Seconds()), fmt.Sprintf("%.1f× sooner", was.Seconds()/firstCycle.Seconds()),
		fmt.Sprintf("the build of %s (each stand judged in turn, then the stacks read) started on the same state folder and repository", beforeKeep))
	d.start()

	// One stand of n changed: b0000, whose server hcloudsim holds.
	d.waitFor("cycles to settle", 5*time.Minute, func() bool { return d.cycles() >= 5 })
	a = d.sample()
	head = w.head(t)
	size := w.repoBytes(t)
	changed := w.repo.Change("b0000: another port", map[string]string{standPath("b0000"): benchStand("b0000", 7300)})
	pushed := time.Now()
	d.waitFor("b0000 Ready at the change", 10*time.Minute, func() bool {
		s, _ := w.status(t, "local_b0000_dev")
		return s.Phase == reason.Ready && s.LastSuccessfulCommit == changed
	})
	oneTook := time.Since(pushed)
	pt.ready = oneTook
	d.stop() // the drain commits what the status delay holds
	b = sample{processes: w.processes(), ups: w.ups()}
	sc := w.statusCommits(t, head, changed)
	grew := w.repoBytes(t) - size
	oneProcs, oneUps := b.processes-a.processes, b.ups-a.ups
	if oneUps != 1 {
		t.Errorf("one changed stand: %d pulumi up", b.ups-a.ups)
	}
	for _, f := range sc.touched {
		// Past 200 stands, STATUS.md indexes pages: b0000's is local_b00 (docs/operations.md#statusmd-at-any-size).
		if f != "status/local_b0000_dev.json" && f != "STATUS.md" && f != "status/pages/local_b00.md" {
			t.Errorf("a status commit for one changed stand touched %s", f)
		}
	}
	oneRow := func(naiveProcs, naiveSecs float64) {
		res.add("a commit changing 1 stand", fmt.Sprintf("%d stands", n), fmt.Sprintf("%.1f s to Ready", oneTook.Seconds()),
			fmt.Sprintf("%.0f Pulumi processes, ~%.0f s (4 workers)", naiveProcs, naiveSecs), ratio(naiveProcs, float64(oneProcs)),
			fmt.Sprintf("this version: %d Pulumi processes (%d up), %d status commits touching %s, adding %.0f KiB of objects (the repository grew %.0f KiB on Gitea's disk with the push); baseline: the Pulumi Kubernetes Operator's rule, `pulumi up` of every stack whose commit moved, measured on 10 stacks and scaled",
				oneProcs, oneUps, sc.n, strings.Join(sc.touched, ", "), float64(sc.bytes)/1024, float64(grew)/1024))
	}

	// A pull request changing one stand of n: from its opening to its plan's final status.
	d.start()
	// Two: the first cycle's duration is in /metrics only once it ended.
	d.waitFor("two cycles", 10*time.Minute, func() bool { return d.cycles() >= 2 })
	a = d.sample()
	prHead := w.repo.ChangeOn("one-stand", "b0001: another port", map[string]string{standPath("b0001"): benchStand("b0001", 7301)})
	opened := time.Now()
	w.repo.Open(w.gitea.API(t), "one-stand", "b0001: another port")
	if st := w.planStatus(t, prHead, 10*time.Minute); st.State != gitea.StatusSuccess {
		t.Errorf("the plan of the one-stand pull request: %s %q", st.State, st.Description)
	}
	pt.pr = time.Since(opened)
	b = d.sample()
	res.add("a pull request changing 1 stand", fmt.Sprintf("%d stands", n), fmt.Sprintf("%.1f s to its plan", pt.pr.Seconds()), "", "",
		fmt.Sprintf("from its opening to its stands/plan status: %d Pulumi processes (previews of its one changed stand)", b.processes-a.processes))
	d.stop()

	// Memory over 1,000 cycles at a 10 ms poll.
	d.args = append(d.args, "--poll-interval", "10ms")
	d.start()
	d.waitFor("50 cycles", 20*time.Minute, func() bool { return d.cycles() >= 50 })
	a = d.sample()
	d.waitFor("1,000 more cycles", 60*time.Minute, func() bool { return d.cycles() >= 1050 })
	b = d.sample()
	res.add("memory over 1,000 no-op cycles", fmt.Sprintf("%d stands, 10 ms poll", n), fmt.Sprintf("RSS %.0f → %.0f MiB", a.rss, b.rss), "", "",
		fmt.Sprintf("%.0f ms per cycle, %d Pulumi processes", 1000*(b.cycleSum-a.cycleSum)/(b.cycles-a.cycles), b.processes-a.processes))
	pt.rss = b.rss
	d.stop()
	// Last: the baseline's forced applies rewrite the stacks they touch.
	oneRow(w.naive(t, eng, files, hashes, n))
	return pt
}

// naive is the baseline rule: `pulumi up` of every stack whose commit moved, i.e. all n. It is
// measured on 10 copied stacks (forced applies with nothing to change) and scaled to n stacks on 4
// workers.
func (w *world) naive(t *testing.T, eng *engine.Engine, files map[string]string, hashes map[string]digests, n int) (processes, seconds float64) {
	t.Helper()
	inputs := judgeAll(t, files, w.pl.Passphrase)
	before, start := w.processes(), time.Now()
	const k = 10
	for i := 10; i < 10+k; i++ {
		in := inputs["local_"+project(i)+"_dev"]
		if in.SpecHash != hashes[in.Stand.ID].spec {
			t.Fatalf("%s: spec hash", in.Stand.ID)
		}
		if _, err := eng.Apply(context.Background(), in, true); err != nil {
			t.Fatalf("forced apply of %s: %v", in.Stand.ID, err)
		}
	}
	per, perSec := float64(w.processes()-before)/k, time.Since(start).Seconds()/k
	return per * float64(n), perSec * float64(n) / 4
}

func ratio(baseline, ours float64) string {
	if ours <= 0 {
		return "∞"
	}
	return fmt.Sprintf("%.0f×", baseline/ours)
}

// commitsSince counts main's commits after from.
func (w *world) commitsSince(t *testing.T, from string) int {
	return w.statusCommits(t, from, "").n
}

// commits are main's commits after one: how many, the files they touched, and the bytes of the
// objects they added (each changed file's blob and every tree on its path): what a status commit
// costs the repository and each clone.
type commits struct {
	n       int
	touched []string
	bytes   int64
}

// statusCommits are main's commits after from, but the one named skip (a human's).
func (w *world) statusCommits(t *testing.T, from, skip string) commits {
	t.Helper()
	repo := w.clone(t)
	ref, err := repo.Head()
	if err != nil {
		t.Fatal(err)
	}
	c, err := repo.CommitObject(ref.Hash())
	if err != nil {
		t.Fatal(err)
	}
	var out commits
	touched, added := map[string]bool{}, map[plumbing.Hash]bool{}
	for c.Hash.String() != from {
		parent, err := c.Parent(0)
		if err != nil {
			t.Fatalf("%s is not on main", from)
		}
		if c.Hash.String() != skip {
			out.n++
			tree := must(c.Tree())
			changes, err := object.DiffTree(must(parent.Tree()), tree)
			if err != nil {
				t.Fatal(err)
			}
			added[tree.Hash] = true
			for _, ch := range changes {
				name := cmp.Or(ch.To.Name, ch.From.Name)
				touched[name] = true
				if ch.To.Name != "" {
					added[ch.To.TreeEntry.Hash] = true
				}
				for dir := path.Dir(name); dir != "."; dir = path.Dir(dir) {
					if sub, err := tree.Tree(dir); err == nil {
						added[sub.Hash] = true
					}
				}
			}
		}
		c = parent
	}
	for h := range added {
		o, err := repo.Storer.EncodedObject(plumbing.AnyObject, h)
		if err != nil {
			t.Fatal(err)
		}
		out.bytes += o.Size()
	}
	out.touched = slices.Sorted(maps.Keys(touched))
	return out
}

// cliListing runs the Pulumi CLI itself on the backend: it lists every stack, and decrypts one
// copy's outputs.
func (w *world) cliListing(t *testing.T, state, project string) int {
	t.Helper()
	run := func(args ...string) string {
		cmd := exec.Command(w.pl.Bin, args...)
		cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir(), "PULUMI_HOME=" + t.TempDir(), "PULUMI_SKIP_UPDATE_CHECK=true",
			"PULUMI_BACKEND_URL=file://" + backendDir(state) + "?no_tmp_dir=true", "PULUMI_CONFIG_PASSPHRASE=" + w.pl.Passphrase}
		cmd.Dir = t.TempDir()
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("pulumi %s: %v", strings.Join(args, " "), err)
		}
		return string(out)
	}
	var list []struct {
		Name string `json:"name"`
	}
	if err := json.Unmarshal([]byte(run("stack", "ls", "--all", "--json")), &list); err != nil {
		t.Fatal(err)
	}
	outs := run("stack", "output", "--json", "--show-secrets", "--stack", "organization/"+project+"/dev")
	if !strings.Contains(outs, `"connection"`) || !strings.Contains(outs, "local_"+project+"_dev") {
		t.Errorf("the CLI's outputs of the copy %s: %.300s", project, outs)
	}
	return len(list)
}

// benchWorkers: twelve creates with 1 and with 4 workers, hcloudsim's actions taking 10 s each as
// a server's creation does at Hetzner.
func benchWorkers(t *testing.T, bin string, res *results) {
	took := map[int]time.Duration{}
	for _, workers := range []int{1, 4} {
		h := testenv.StartHetzner(t, "bench-token", hcloudsim.WithActionDelay(10*time.Second))
		w := newWorld(t, bin, h)
		files := baseFiles(t)
		for i := range 12 {
			files[standPath(project(i))] = benchStand(project(i), 6300+i)
		}
		w.repo.Change("twelve stands", files)
		d := w.daemon("--poll-interval", "1s", "--workers", strconv.Itoa(workers))
		d.start()
		d.waitFor("twelve stands Ready", 30*time.Minute, func() bool {
			st := w.statuses()
			for i := range 12 {
				if st["local_"+project(i)+"_dev"].Phase != reason.Ready {
					return false
				}
			}
			return true
		})
		took[workers] = time.Since(d.started)
		d.stop()
	}
	res.add("12 creates, 4 workers vs 1", "hcloudsim actions 10 s", fmt.Sprintf("%.0f s", took[4].Seconds()), fmt.Sprintf("%.0f s", took[1].Seconds()),
		fmt.Sprintf("%.1f× faster", took[1].Seconds()/took[4].Seconds()), "from the daemon's start to the twelfth Ready status")
}

// hookedWorld is a world with n stands Ready under a daemon polling every 30 s, and Gitea's webhook
// for events pointed at it; it returns the repository's files and the hook.
func hookedWorld(t *testing.T, bin string, n int, events ...string) (*world, *daemon, map[string]string, *gitea.Hook) {
	w := newWorld(t, bin, testenv.StartHetzner(t, "bench-token"))
	files := baseFiles(t)
	for i := range n {
		files[standPath(project(i))] = benchStand(project(i), 6300)
	}
	w.repo.Change(fmt.Sprintf("%d stands", n), files)
	const hookKey = "bench-webhook-secret"
	d := w.daemon("--poll-interval", "30s")
	d.env = append(d.env, "STANDS_WEBHOOK_SECRET_FILE="+w.secretFile("webhook-secret", hookKey))
	d.start()
	d.waitFor(fmt.Sprintf("%d stands Ready", n), 5*time.Minute, func() bool { return w.allReady(n) })
	hook, _, err := w.gitea.API(t).CreateRepoHook(w.repo.Info.Owner.UserName, w.repo.Info.Name, gitea.CreateHookOption{Type: gitea.HookTypeGitea,
		Active: true, Events: events, Config: map[string]string{"url": "http://" + d.listen + "/webhook", "content_type": "json", "secret": hookKey}})
	if err != nil {
		t.Fatalf("create the webhook: %v", err)
	}
	return w, d, files, hook
}

// benchForge: how soon a commit starts an apply with Gitea's push webhook and with polling alone
// (the default 30 s poll), and how long pull request plans take with 20 open while the tracked
// branch keeps changing, against the same applies with no pull request open.
func benchForge(t *testing.T, bin string, res *results) {
	w, d, _, hook := hookedWorld(t, bin, 4, "push")
	api := w.gitea.API(t)
	owner, name := w.repo.Info.Owner.UserName, w.repo.Info.Name
	port := 7000
	// applyLatency pushes a change of b0000 and returns how long until its apply started, and until
	// it was Ready.
	applyLatency := func() (start, ready time.Duration) {
		port++
		pushed := time.Now()
		commit := w.repo.Change("b0000: port", map[string]string{standPath("b0000"): benchStand("b0000", port)})
		// The cycle that started the apply: the reconciler's decision, before Pulumi's own start-up.
		d.waitFor("b0000's apply started", 2*time.Minute, func() bool {
			return d.logSince(pushed, `"msg":"cycle planned"`, `"update":1`)
		})
		start = time.Since(pushed)
		d.waitFor("b0000 Ready", 5*time.Minute, func() bool {
			s := w.statuses()["local_b0000_dev"]
			return s.Phase == reason.Ready && s.LastSuccessfulCommit == commit
		})
		return start, time.Since(pushed)
	}
	mean := func(f func() time.Duration, k int) time.Duration {
		var sum time.Duration
		for range k {
			sum += f()
		}
		return sum / time.Duration(k)
	}
	hooked := mean(func() time.Duration { s, _ := applyLatency(); return s }, 3)
	if _, err := api.EditRepoHook(owner, name, hook.ID, gitea.EditHookOption{Active: gitea.OptionalBool(false)}); err != nil {
		t.Fatal(err)
	}
	polled := mean(func() time.Duration { s, _ := applyLatency(); return s }, 3)
	res.add("commit → apply start", "webhook vs 30 s poll", fmt.Sprintf("%.1f s", hooked.Seconds()), fmt.Sprintf("%.1f s", polled.Seconds()),
		fmt.Sprintf("%.0f× sooner", polled.Seconds()/hooked.Seconds()), "mean of 3 pushes each: from the push to the cycle that starts the apply (`cycle planned`, update 1)")

	// Pull request plans under load: 20 open, each changing a stand, while main keeps changing.
	if _, err := api.EditRepoHook(owner, name, hook.ID, gitea.EditHookOption{Active: gitea.OptionalBool(true)}); err != nil {
		t.Fatal(err)
	}
	quietStart, quiet := applyLatency()
	type pr struct {
		head   string
		opened time.Time
	}
	var prs []pr
	for i := range 20 {
		branch := fmt.Sprintf("pr-%02d", i)
		head := w.repo.ChangeOn(branch, "a new stand", map[string]string{standPath(fmt.Sprintf("p%02d", i)): benchStand(fmt.Sprintf("p%02d", i), 6300)})
		w.repo.Open(api, branch, branch)
		prs = append(prs, pr{head: head, opened: time.Now()})
	}
	busyStart, busy := applyLatency()
	var latencies []float64
	for _, p := range prs {
		st := w.planStatus(t, p.head, 20*time.Minute)
		if st.State != gitea.StatusSuccess {
			t.Errorf("the plan of %s: %s %q", p.head[:12], st.State, st.Description)
		}
		latencies = append(latencies, st.Updated.Sub(p.opened).Seconds())
	}
	slices.Sort(latencies)
	res.add("pull request plans", "20 open, main changing", fmt.Sprintf("median %.0f s, slowest %.0f s", latencies[len(latencies)/2], latencies[len(latencies)-1]), "", "",
		"from each pull request's opening to its stands/plan status")
	res.add("an apply while 20 plans run", "commit → apply start; → Ready", fmt.Sprintf("%.1f s; %.1f s", busyStart.Seconds(), busy.Seconds()),
		fmt.Sprintf("%.1f s; %.1f s with no pull request open", quietStart.Seconds(), quiet.Seconds()), fmt.Sprintf("%.2f× to Ready", busy.Seconds()/quiet.Seconds()),
		"plans run on their own worker, so an apply does not wait for them to start; on 2 cores they share the CPU with it")
	d.stop()
}

// allReady says whether the stands b0000… (n of them) are Ready.
func (w *world) allReady(n int) bool {
	st := w.statuses()
	for i := range n {
		if st["local_"+project(i)+"_dev"].Phase != reason.Ready {
			return false
		}
	}
	return true
}

// planStatus waits for the final stands/plan status of a commit.
func (w *world) planStatus(t *testing.T, sha string, timeout time.Duration) *gitea.Status {
	t.Helper()
	return wait.Value(t, "a final stands/plan on "+sha[:12], timeout, func() (*gitea.Status, bool) {
		statuses, _, err := w.gitea.API(t).ListStatuses(w.repo.Info.Owner.UserName, w.repo.Info.Name, sha, gitea.ListStatusesOption{})
		var newest *gitea.Status
		for _, s := range statuses {
			if s.Context == prplan.PlanContext && (newest == nil || s.ID > newest.ID) {
				newest = s
			}
		}
		return newest, err == nil && newest != nil && newest.State != gitea.StatusPending
	}, wait.Every(500*time.Millisecond))
}

// leaves names the differing values by their last path element, each once.
func leaves(paths []string) string {
	seen := map[string]bool{}
	var out []string
	for _, p := range paths {
		leaf := p[strings.LastIndex(p, ".")+1:]
		if !seen[leaf] {
			seen[leaf] = true
			out = append(out, leaf)
		}
	}
	return strings.Join(out, ", ")
}

// benchFollow: 20 open pull requests while main moves every 30 s. 16 add a stand of their own,
// which no move of main touches; 4 edit the kv app's template, so the merge of each changes with
// every change of a stand on main. After each move, the 4 are planned again on the new merge and
// their comments name the new base; the 16 are not planned again, so no Pulumi process runs for
// them. The baseline is what planning every open pull request again would cost, from the Pulumi
// processes the 16 took for their first plans.
func benchFollow(t *testing.T, bin string, res *results) {
	w, d, files, _ := hookedWorld(t, bin, 2, "push", "pull_request")
	api := w.gitea.API(t)
	owner, name := w.repo.Info.Owner.UserName, w.repo.Info.Name
	type pr struct {
		index int64
		head  string
	}
	open := func(i int, change map[string]string) pr {
		branch := fmt.Sprintf("follow-%02d", i)
		head := w.repo.ChangeOn(branch, branch, change)
		return pr{w.repo.Open(api, branch, branch), head}
	}
	before := w.processes()
	var untouched, touched []pr
	for i := range 16 {
		untouched = append(untouched, open(i, map[string]string{standPath(fmt.Sprintf("f%02d", i)): benchStand(fmt.Sprintf("f%02d", i), 6300)}))
	}
	for _, p := range untouched {
		w.planStatus(t, p.head, 20*time.Minute)
	}
	perPlan := float64(w.processes()-before) / float64(len(untouched))
	tmpl := files["apps/kv/redis.conf.tmpl"]
	for i := range 4 {
		touched = append(touched, open(16+i, map[string]string{"apps/kv/redis.conf.tmpl": tmpl + fmt.Sprintf("# tuned by follow-%02d\n", 16+i)}))
	}
	for _, p := range touched {
		w.planStatus(t, p.head, 20*time.Minute)
	}
	comment := func(n int64) string {
		comments, _, err := api.ListIssueComments(owner, name, n, gitea.ListIssueCommentOptions{})
		if err != nil {
			return ""
		}
		for _, c := range comments {
			if strings.Contains(c.Body, prplan.CommentMarker) {
				return c.Body
			}
		}
		return ""
	}
	var slowest time.Duration
	var processes []int
	port := 7100
	const moves = 4
	for m := range moves {
		next := time.Now().Add(30 * time.Second)
		port++
		pushed := time.Now()
		start := w.processes()
		commit := w.repo.Change("b0000: port", map[string]string{standPath("b0000"): benchStand("b0000", port)})
		for _, p := range touched {
			d.waitFor(fmt.Sprintf("#%d planned on %s", p.index, commit[:12]), 5*time.Minute, func() bool {
				return strings.Contains(comment(p.index), "at `"+commit[:12]+"`")
			})
			slowest = max(slowest, time.Since(pushed))
		}
		d.waitFor("b0000 Ready", 5*time.Minute, func() bool {
			s := w.statuses()["local_b0000_dev"]
			return s.Phase == reason.Ready && s.LastSuccessfulCommit == commit
		})
		for _, p := range untouched {
			if d.logSince(pushed, `"msg":"pull request planned"`, fmt.Sprintf(`"pull_request":%d,`, p.index)) {
				t.Errorf("move %d: #%d, which the move does not touch, was planned again", m+1, p.index)
			}
		}
		processes = append(processes, w.processes()-start)
		time.Sleep(time.Until(next))
	}
	slices.Sort(processes)
	res.add("pull request plans follow main", "20 open (4 touched by each move), main moving every 30 s",
		fmt.Sprintf("slowest plan %.0f s after the move; %d Pulumi processes per move", slowest.Seconds(), processes[len(processes)/2]),
		fmt.Sprintf("%.0f processes per move", float64(processes[len(processes)/2])+16*perPlan),
		fmt.Sprintf("%.1f× fewer", (float64(processes[len(processes)/2])+16*perPlan)/float64(processes[len(processes)/2])),
		fmt.Sprintf("median of %d moves, each a commit to a stand on main applied too; the 16 pull requests the moves do not touch are never planned again; baseline: every open pull request planned again, at the %.1f processes each of the 16 took for its first plan", moves, perPlan))
	d.stop()
}
