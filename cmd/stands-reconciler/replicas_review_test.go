package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"code.gitea.io/sdk/gitea"
	"github.com/stands-engine/stands-reconciler/lease"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// TestReplicasReviewGate: three `run --replicas` daemons on one PostgreSQL with the review gate on,
// against real Gitea, the real Pulumi CLI and hcloudsim (docs/replicas.md#the-review-gate).
//   - The first import lets every stand through, whichever replica holds it.
//   - A change approved by a second writer is applied once, by the stand's holder.
//   - A change pushed around review is held by its holder and, once that replica is killed, by the
//     one taking the stand over: no `pulumi up` for it anywhere.
//   - The holder of a stand is killed after its gate let an approved change through and before
//     its `pulumi up` ran: the replica taking the stand over applies it, once, and the
//     authorisation is used.
func TestReplicasReviewGate(t *testing.T) {
	e := newDaemonEnv(t, map[string]int{"a": 6300, "b": 6301, "c": 6302, "d": 6303})
	pg := testenv.StartPostgres(t)
	admin := e.gitea.API(t)
	bot, dev, lead := e.gitea.CreateUser(t, "stands-bot"), e.gitea.CreateUser(t, "dev"), e.gitea.CreateUser(t, "lead")
	for _, u := range []*testenv.User{bot, dev, lead} {
		e.repo.AddWriter(admin, u.Name)
	}
	e.gitUser, e.gitToken = bot.Name, bot.Token
	e.secrets["bot token"], e.secrets["dev token"], e.secrets["lead token"] = bot.Token, dev.Token, lead.Token
	devAPI, leadAPI := dev.Client(t, e.gitea), lead.Client(t, e.gitea)
	owner, repo := e.repo.Info.Owner.UserName, e.repo.Info.Name

	dir := t.TempDir()
	pwFile := filepath.Join(dir, "db-password")
	if err := os.WriteFile(pwFile, []byte(pg.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// One signing key for all: whichever replica leads commits the statuses (docs/replicas.md).
	testenv.NewSSHKey(t, dir, "signing-key")
	names := []string{"r0", "r1", "r2"}
	rs := map[string]*replica{}
	for _, n := range names {
		rs[n] = e.startReplica(n, "--replicas", "--replica-id", n, "--backend", pg.BackendURL(), "--require-review=true",
			"--lease-ttl", replicaTTL.String(), "--lease-grace", replicaGrace.String(), "--status-delay", "300ms")
		rs[n].env("STANDS_DB_PASSWORD_FILE="+pwFile, "STANDS_SIGNING_KEY_FILE="+filepath.Join(dir, "signing-key"))
		rs[n].start()
	}
	ids := []string{"local_a_dev", "local_b_dev", "local_c_dev", "local_d_dev"}
	for _, id := range ids {
		e.waitStatus(id, 5*time.Minute, func(s *reconcile.Status) bool { return s.Phase == reason.Ready })
	}
	holders := func() map[string]string { return leaseHolders(t, pg) }
	e.waitFor("every stand held by its rendezvous owner", time.Minute, func() bool {
		held := holders()
		for _, id := range ids {
			if held[id] != lease.Owner(id, names) {
				return false
			}
		}
		return true
	})
	for _, id := range ids {
		st := e.waitStatus(id, time.Minute, func(*reconcile.Status) bool { return true })
		if st.Authorised == nil || !strings.HasPrefix(st.Authorised.By, "the first import") {
			t.Errorf("%s, held by %s, was not let through by the first import: %+v", id, lease.Owner(id, names), st.Authorised)
		}
	}
	ups := func(project string) int {
		n := 0
		for _, r := range rs {
			n += r.ups(project)
		}
		return n
	}
	// approve opens a pull request of dev's changing stand p, which lead approves and dev merges.
	approve := func(t *testing.T, p string, port int) (int64, string) {
		t.Helper()
		branch := fmt.Sprintf("%s-%d", p, port)
		head := e.repo.ChangeOn(branch, fmt.Sprintf("%s on %d", p, port), map[string]string{standPath(p): daemonStand(p, port)})
		pr := e.repo.Open(devAPI, branch, fmt.Sprintf("Move %s to %d", p, port))
		e.waitComment(pr, head)
		if _, _, err := leadAPI.CreatePullReview(owner, repo, pr, gitea.CreatePullReviewOptions{State: gitea.ReviewStateApproved, Body: "fine", CommitID: head}); err != nil {
			t.Fatal(err)
		}
		if err := e.repo.TryMerge(devAPI, pr); err != nil {
			t.Fatalf("the merge: %v", err)
		}
		merged, _, err := admin.GetPullRequest(owner, repo, pr)
		if err != nil || merged.MergedCommitID == nil {
			t.Fatalf("the merged pull request: %v", err)
		}
		return pr, *merged.MergedCommitID
	}
	appliedBy := func(pr int64, merge string) func(*reconcile.Status) bool {
		return func(s *reconcile.Status) bool {
			return s.Phase == reason.Ready && s.LastSuccessfulCommit == merge && s.Authorised != nil &&
				len(s.Authorised.PullRequests) == 1 && s.Authorised.PullRequests[0].Number == pr
		}
	}

	// Of a stand the leader does not hold: its holder asks the plans the leader made.
	e.run("an approved change is applied once, by its holder", func(t *testing.T) {
		p := "a"
		if leader := holders()[stands.LeaderLease]; lease.Owner("local_a_dev", names) == leader {
			p = "d"
			if lease.Owner("local_d_dev", names) == leader {
				t.Fatalf("%s, the leader, holds both a and d", leader)
			}
		}
		id, holder := "local_"+p+"_dev", lease.Owner("local_"+p+"_dev", names)
		before, mine := ups(p), rs[holder].ups(p)
		pr, merge := approve(t, p, 6310)
		e.waitStatus(id, 3*time.Minute, appliedBy(pr, merge))
		waitCycles(t, rs, 2)
		if n, m := ups(p)-before, rs[holder].ups(p)-mine; n != 1 || m != 1 {
			t.Errorf("%d pulumi up of %s for one approved change; its holder %s ran %d", n, p, holder, m)
		}
	})

	e.run("a change pushed around review is held on every replica", func(t *testing.T) {
		before := ups("b")
		commit := e.repo.Change("b on 6311, around review", map[string]string{standPath("b"): daemonStand("b", 6311)})
		holder := lease.Owner("local_b_dev", names)
		held := func(s *reconcile.Status) bool {
			return s.Reason == reason.Unreviewed && strings.Contains(s.Message, commit[:12])
		}
		e.waitStatus("local_b_dev", 2*time.Minute, held)
		rs[holder].kill()
		survivors := slicesWithout(names, holder)
		next := lease.Owner("local_b_dev", survivors)
		e.waitFor("local_b_dev held by "+next, time.Minute, func() bool { return holders()["local_b_dev"] == next })
		rs[next].waitLog(t, `"stand":"local_b_dev"`, "change not applied: not reviewed")
		waitCycles(t, rs, 3)
		if st := e.waitStatus("local_b_dev", time.Minute, func(*reconcile.Status) bool { return true }); !held(st) || st.Phase != reason.Blocked {
			t.Errorf("local_b_dev after its holder %s was killed: %s %s %q", holder, st.Phase, st.Reason, st.Message)
		}
		if n := ups("b") - before; n != 0 {
			t.Errorf("%d pulumi up for a change pushed around review", n)
		}
		rs[holder].start() // three again
		e.waitFor("local_b_dev back with "+holder, 2*time.Minute, func() bool { return holders()["local_b_dev"] == holder })
	})

	e.run("the holder killed between approval and apply: applied once by another", func(t *testing.T) {
		id := "local_c_dev"
		holder := lease.Owner(id, names)
		h := rs[holder]
		h.holdUps(true) // its `pulumi up` waits in the wrapper, before the Pulumi CLI runs
		before, beforeNext := ups("c"), map[string]int{}
		for n, r := range rs {
			beforeNext[n] = r.ups("c")
		}
		pr, merge := approve(t, "c", 6312)
		key := fmt.Sprintf("#%d %s ", pr, id)
		e.waitFor(holder+"'s pulumi up of c to start", 3*time.Minute, func() bool { return h.ups("c") > beforeNext[holder] })
		// The gate let it through before the operation started: the authorisation is shared.
		if doc := reviewDocument(t, pg); !strings.Contains(doc, fmt.Sprintf(`"number":%d`, pr)) {
			t.Errorf("the shared review state does not hold #%d's authorisation of c:\n%s", pr, doc)
		}
		h.kill()
		survivors := slicesWithout(names, holder)
		next := lease.Owner(id, survivors)
		e.waitStatus(id, 3*time.Minute, appliedBy(pr, merge))
		waitCycles(t, rs, 2)
		if n, m := ups("c")-before, rs[next].ups("c")-beforeNext[next]; n != 2 || m != 1 {
			t.Errorf("%d pulumi up of c (the killed holder's, which never ran, and its successor's); %s ran %d", n, next, m)
		}
		if doc := reviewDocument(t, pg); !strings.Contains(doc, key) {
			t.Errorf("the authorisation of #%d is not used in the shared review state:\n%s", pr, doc)
		}
		h.holdUps(false)

		// A new host takes the killed replica's place, its state folder empty: the stand moves back
		// to it. A revert pushed around review is held there until ctl approve, given on its
		// holder; the approved change pushed again around review is then a replay of an
		// authorisation another replica used: held.
		h.state = filepath.Join(h.dir, "state-of-a-new-host")
		h.start()
		e.waitFor(id+" back with "+holder, 2*time.Minute, func() bool { return holders()[id] == holder })
		revert := e.repo.Change("c back to 6302, around review", map[string]string{standPath("c"): daemonStand("c", 6302)})
		e.waitStatus(id, 2*time.Minute, func(s *reconcile.Status) bool {
			return s.Reason == reason.Unreviewed && strings.Contains(s.Message, revert[:12])
		})
		if r := rs[next].ctl(t, "approve", id, revert[:12], "the", "revert"); r.code == exitOK || !strings.Contains(r.stderr, id+" is operated by replica "+holder) {
			t.Errorf("ctl approve on %s, which does not hold %s: %d %s", next, id, r.code, r.stderr)
		}
		if r := h.ctl(t, "approve", id, revert[:12], "the", "revert"); r.code != exitOK {
			t.Fatalf("ctl approve on %s: %d %s", holder, r.code, r.stderr)
		}
		e.waitStatus(id, 2*time.Minute, func(s *reconcile.Status) bool { return s.Phase == reason.Ready && s.LastSuccessfulCommit == revert })
		upsBefore := ups("c")
		again := e.repo.Change("c on 6312 again, around review", map[string]string{standPath("c"): daemonStand("c", 6312)})
		st := e.waitStatus(id, 2*time.Minute, func(s *reconcile.Status) bool {
			return s.Reason == reason.Unreviewed && strings.Contains(s.Message, again[:12])
		})
		if st.Phase != reason.Blocked || !strings.Contains(st.Message, fmt.Sprintf("#%d was applied already", pr)) {
			t.Errorf("the approved change replayed around review: %s %s %q", st.Phase, st.Reason, st.Message)
		}
		waitCycles(t, rs, 2)
		if n := ups("c") - upsBefore; n != 0 {
			t.Errorf("%d pulumi up of c for a replay", n)
		}
	})
}

// reviewDocument is the review gate's state the replicas share.
func reviewDocument(t *testing.T, pg *testenv.Postgres) string {
	var body []byte
	err := pg.DB(t).QueryRow(`SELECT body FROM stands_documents WHERE name = 'review-gate'`).Scan(&body)
	if err != nil {
		return ""
	}
	return string(body)
}

// waitCycles waits until every running replica has completed n more cycles.
func waitCycles(t *testing.T, rs map[string]*replica, n int) {
	t.Helper()
	for name, r := range rs {
		if r.cmd == nil {
			continue
		}
		want := testenv.Cycles(r.listen) + n
		waitWhileRunning(t, r.exited, name+" to complete "+fmt.Sprint(n)+" more cycles", 2*time.Minute, 250*time.Millisecond,
			func() bool { return testenv.Cycles(r.listen) >= want })
	}
}

func slicesWithout(names []string, gone string) []string {
	var out []string
	for _, n := range names {
		if n != gone {
			out = append(out, n)
		}
	}
	return out
}

// replica is one daemon of several, with its own state folder and a Pulumi wrapper that counts
// its processes and, while told to, holds each `pulumi up` before the CLI starts.
type replica struct {
	e       *daemonEnv
	name    string
	dir     string
	args    []string
	extra   []string
	listen  string
	counts  string
	hold    string // while this file exists, `pulumi up` waits
	state   string
	logFile string
	logs    []string // of every start
	cmd     *exec.Cmd
	exited  chan error
}

func (e *daemonEnv) startReplica(name string, args ...string) *replica {
	t := e.t
	dir := t.TempDir()
	r := &replica{e: e, name: name, dir: dir, state: filepath.Join(dir, "state"), args: args, counts: filepath.Join(dir, "pulumi-processes.txt"), hold: filepath.Join(dir, "hold-ups")}
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	script := fmt.Sprintf("#!/bin/sh\necho \"$*\" >> %q\ncase \" $* \" in *\" up \"*) while [ -e %q ]; do sleep 0.2; done;; esac\nexec %q \"$@\"\n",
		r.counts, r.hold, e.pl.Bin)
	if err := os.WriteFile(filepath.Join(bin, "pulumi"), []byte(script), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		r.kill()
		if t.Failed() {
			var kept []string
			for _, f := range r.logs {
				data, _ := os.ReadFile(f)
				for line := range strings.Lines(string(data)) {
					if !strings.Contains(line, `"msg":"cycle planned"`) {
						kept = append(kept, line)
					}
				}
			}
			text := strings.Join(kept, "")
			t.Logf("%s's log but its cycles (last 6000 bytes):\n%s", name, text[max(0, len(text)-6000):])
		}
	})
	return r
}

// env adds to the replica's environment.
func (r *replica) env(kv ...string) { r.extra = append(r.extra, kv...) }

// start runs the replica, again after a kill: its state folder is kept.
func (r *replica) start() {
	t := r.e.t
	r.listen = fmt.Sprintf("127.0.0.1:%d", testenv.FreePort(t))
	cmd := r.e.command(r.dir, filepath.Join(r.dir, "bin"), r.state, r.listen, r.args...)
	cmd.Env = append(cmd.Env, append([]string{"LOG_LEVEL=info"}, r.extra...)...)
	r.logFile = filepath.Join(r.dir, fmt.Sprintf("daemon-%d.log", time.Now().UnixNano()))
	r.logs = append(r.logs, r.logFile)
	r.cmd, r.exited = cmd, startLogged(t, cmd, r.logFile)
}

// kill ends the replica with SIGKILL, as a lost host would.
func (r *replica) kill() {
	if r.cmd == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.exited
	r.cmd = nil
}

// ctl runs stands-reconciler ctl against the replica, as on-call.
func (r *replica) ctl(t *testing.T, args ...string) result {
	t.Helper()
	return runCLI(t, t.Context(), newRecorder(map[string]string{"STANDS_CONTROL_SOCKET": filepath.Join(r.state, "control.sock"), "SUDO_USER": "oncall"}),
		append([]string{"ctl"}, args...)...)
}

// holdUps makes the replica's `pulumi up` wait before the CLI starts, or go on.
func (r *replica) holdUps(on bool) {
	if !on {
		_ = os.Remove(r.hold)
		return
	}
	if err := os.WriteFile(r.hold, nil, 0o600); err != nil {
		r.e.t.Fatal(err)
	}
}

// ups counts the replica's `pulumi up` of project's stack, started or not.
func (r *replica) ups(project string) int {
	data, _ := os.ReadFile(r.counts)
	n := 0
	for line := range strings.Lines(string(data)) {
		args := strings.Fields(line)
		if len(args) > 1 && (args[0] == "up" || args[1] == "up") && strings.Contains(line, "organization/"+project+"/") {
			n++
		}
	}
	return n
}

// waitLog waits until a line of the replica's log holds every part.
func (r *replica) waitLog(t *testing.T, parts ...string) {
	t.Helper()
	waitWhileRunning(t, r.exited, r.name+"'s log to say "+strings.Join(parts, " "), time.Minute, 250*time.Millisecond, func() bool {
		data, _ := os.ReadFile(r.logFile)
		for line := range strings.Lines(string(data)) {
			if containsAll(line, parts...) {
				return true
			}
		}
		return false
	})
}

func containsAll(s string, parts ...string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
