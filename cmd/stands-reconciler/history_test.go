package main

import (
	"fmt"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/go-git/go-git/v5/plumbing"
	"github.com/go-git/go-git/v5/plumbing/object"

	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestStatusHistoryOneOfTwelve: twelve stands applied by the daemon (real Pulumi CLI, hcloudsim);
// after a restart its no-op cycles start no Pulumi process (not even the CLI's version check: it is
// recorded by binary) and commit nothing; a commit changing
// one stand, and another restart, cost exactly one `pulumi up` and Pulumi processes for that stand
// only, and every status commit from then on touches that stand's status alone (its file and its
// row of STATUS.md); the eleven others keep their lastSuccessfulCommit.
func TestStatusHistoryOneOfTwelve(t *testing.T) {
	h := testenv.StartHetzner(t, "history-token")
	lr := newLocalStandsRepo(t)
	files := map[string]string{}
	var ids []string
	for i := range 12 {
		p := fmt.Sprintf("h%02d", i)
		files[standPath(p)] = plainStand(p)
		ids = append(ids, "local_"+p+"_dev")
	}
	first := lr.commit(files)
	d := newLocalDaemon(t, lr, h, "--poll-interval", "200ms")
	d.env = append(d.env, "LOG_LEVEL=info")
	d.start()
	for _, id := range ids {
		d.waitStatus(id, 5*time.Minute, func(s reconcile.Status) bool { return s.Phase == reason.Ready })
	}
	if ups := d.ups(); ups != 12 {
		t.Fatalf("%d pulumi up for twelve creates", ups)
	}

	stop := func() {
		t.Helper()
		if code, _ := d.stop(syscall.SIGTERM, 2*time.Minute); code != 0 {
			t.Fatalf("stop: exit %d", code)
		}
	}
	// Ten cycles of a fresh start, and a stop: the drain commits whatever the status delay held.
	tenCycles := func(what string) {
		t.Helper()
		d.start()
		d.waitFor(what+": 10 cycles", 3*time.Minute, func() bool { return d.cycles() >= 10 })
		stop()
	}
	stop()
	head, before := lr.statusHead(), d.processes()
	tenCycles("the first restart")
	if got := pulumiCalls(d, before); len(got) != 0 {
		t.Errorf("a restart and 10 no-op cycles ran Pulumi %d times: %q", len(got), got)
	}
	if lr.statusHead() != head {
		t.Errorf("a restart with nothing changed committed status: %v", statusCommitFiles(t, lr, head))
	}

	d.start()
	changed := lr.commit(map[string]string{standPath("h05"): strings.Replace(plainStand("h05"), "location: hel1", "location: fsn1", 1)})
	head, before, ups := lr.statusHead(), d.processes(), d.ups()
	d.waitStatus("local_h05_dev", 3*time.Minute, func(s reconcile.Status) bool {
		return s.Phase == reason.Ready && s.LastSuccessfulCommit == changed
	})
	stop()
	tenCycles("the restart after the change")
	if n := d.ups() - ups; n != 1 {
		t.Errorf("%d pulumi up for one changed stand", n)
	}
	calls := pulumiCalls(d, before)
	t.Logf("one changed stand of twelve, and a restart: %d Pulumi processes: %q", len(calls), calls)
	for _, call := range calls {
		if !strings.Contains(call, "h05") {
			t.Errorf("a Pulumi process not for the changed stand: %q", call)
		}
	}
	for _, c := range statusCommitFiles(t, lr, head) {
		for _, f := range c.files {
			if f != "status/local_h05_dev.json" && f != "STATUS.md" {
				t.Errorf("status commit %q touched %s", c.message, f)
			}
		}
		if !strings.Contains(c.message, "local_h05_dev") {
			t.Errorf("status commit %q is not about the changed stand", c.message)
		}
	}
	for _, id := range ids {
		s := lr.status(id)
		want := first
		if id == "local_h05_dev" {
			want = changed
		}
		if s.Phase != reason.Ready || s.LastSuccessfulCommit != want {
			t.Errorf("%s: %s at %.12s, want Ready at %.12s", id, s.Phase, s.LastSuccessfulCommit, want)
		}
	}
}

// pulumiCalls lists the Pulumi processes started since the count was from.
func pulumiCalls(d *localDaemon, from int) []string {
	var out []string
	for i, line := range strings.Split(strings.TrimSpace(readFile(d.t, d.counts)), "\n") {
		if i >= from && line != "" {
			out = append(out, strings.TrimPrefix(line, "--non-interactive "))
		}
	}
	return out
}

type statusCommit struct {
	message string
	files   []string
}

// statusCommitFiles lists the status branch's commits after from, newest first, with the files
// each changed; STATUS.md is listed only when a row other than the stand's own changed.
func statusCommitFiles(t *testing.T, lr *localStandsRepo, from string) []statusCommit {
	t.Helper()
	ref, err := lr.repo.Reference(plumbing.NewBranchReferenceName("stands-status"), true)
	if err != nil {
		t.Fatal(err)
	}
	var out []statusCommit
	for h := ref.Hash(); h.String() != from; {
		c, err := lr.repo.CommitObject(h)
		if err != nil {
			t.Fatalf("walk the status branch to %s: %v", from, err)
		}
		parent, err := c.Parent(0)
		if err != nil {
			t.Fatalf("%s has no parent: %v", c.Hash, err)
		}
		changes, err := object.DiffTree(mustTree(t, parent), mustTree(t, c))
		if err != nil {
			t.Fatal(err)
		}
		sc := statusCommit{message: strings.TrimSpace(c.Message)}
		for _, ch := range changes {
			name := ch.To.Name
			if name == "" {
				name = ch.From.Name
			}
			if name == "STATUS.md" && onlyRowsOf(t, parent, c, "local_h05_dev") {
				continue
			}
			sc.files = append(sc.files, name)
		}
		slices.Sort(sc.files)
		out = append(out, sc)
		h = parent.Hash
	}
	return out
}

func mustTree(t *testing.T, c *object.Commit) *object.Tree {
	t.Helper()
	tree, err := c.Tree()
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

// onlyRowsOf reports whether STATUS.md differs between two commits in the rows of one stand only.
func onlyRowsOf(t *testing.T, a, b *object.Commit, id string) bool {
	t.Helper()
	rows := func(c *object.Commit) []string {
		f, err := c.File("STATUS.md")
		if err != nil {
			return nil
		}
		s, _ := f.Contents()
		var out []string
		for line := range strings.Lines(s) {
			if !strings.Contains(line, "["+id+"]") {
				out = append(out, line)
			}
		}
		return out
	}
	return slices.Equal(rows(a), rows(b))
}
