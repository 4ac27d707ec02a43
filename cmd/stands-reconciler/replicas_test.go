package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/lease"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/reconcile"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// The lease time is short for a test, yet long enough that a loaded CI machine (three daemons, a
// dozen Pulumi CLIs and -race on 2 cores) renews in time: a lease lost to a late renewal is safe (its
// apply is stopped and run again) but would show as a second `pulumi up`.
const (
	replicaTTL   = 5 * time.Second
	replicaGrace = 2 * time.Second
)

// TestReplicas: three `run --replicas` daemons on one repository, one hcloudsim and a real
// PostgreSQL holding the Pulumi state and the leases, with the real Pulumi CLI.
//   - Twelve stands are applied, once each, and end up held by the replica each belongs to by
//     rendezvous; one replica commits every status.
//   - The replica holding an apply in flight is killed with -9: its CLI and provider die with it
//     (Hetzner hears nothing more), another replica takes the stand over only after the lease time
//     and the grace, removes the stack lock as abandoned by its lease, and finishes the apply: one
//     server created, no orphan, no lock left.
//   - PostgreSQL is stopped while an apply runs and started again: the replicas report themselves
//     unready, nothing is destroyed, the apply is finished after the restart.
//   - The database password is in no log, command line or process environment.
func TestReplicas(t *testing.T) {
	t.Parallel() // its servers are its own; beside TestStandsExpireThroughGit, which mostly waits
	pg := testenv.StartPostgres(t)
	h := testenv.StartHetzner(t, "replicas-token")
	lr := newLocalStandsRepo(t)
	files, ids := map[string]string{}, []string{}
	for i := range 12 {
		p := fmt.Sprintf("r%02d", i)
		files[standPath(p)] = plainStand(p)
		ids = append(ids, "local_"+p+"_dev")
	}
	lr.commit(files)
	pwFile := filepath.Join(t.TempDir(), "db-password")
	if err := os.WriteFile(pwFile, []byte(pg.Password+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	peak := peakConnections(t, pg)
	names := []string{"r0", "r1", "r2"}
	ds := map[string]*localDaemon{}
	for _, n := range names {
		d := newLocalDaemon(t, lr, h, "--poll-interval", "300ms", "--status-delay", "300ms", "--replicas", "--replica-id", n,
			"--backend", pg.BackendURL(), "--lease-ttl", replicaTTL.String(), "--lease-grace", replicaGrace.String())
		d.env = append(d.env, "STANDS_DB_PASSWORD_FILE="+pwFile, "LOG_LEVEL=info")
		d.start()
		ds[n] = d
	}
	reader := ds["r0"]
	start := time.Now()
	for _, id := range ids {
		reader.waitStatus(id, 5*time.Minute, func(s reconcile.Status) bool { return s.Phase == reason.Ready })
	}
	t.Logf("twelve stands Ready after %s; PostgreSQL connections peaked at %d (3 replicas, 4 workers each)", time.Since(start).Round(time.Second), peak())
	// One `pulumi up` a create. A machine too busy to renew a lease in time (the leases here last
	// 5 s) makes its holder kill what runs under it, and the stand's next holder runs it again: each
	// such kill may cost one more, and nothing else may.
	ups, kills := 0, 0
	for _, n := range names {
		ups += ds[n].ups()
		kills += strings.Count(ds[n].log(), "killed a Pulumi CLI: its stand's lease was about to expire")
	}
	if ups < 12 || ups > 12+kills {
		t.Errorf("%d pulumi up for twelve creates, with %d Pulumi CLIs killed as their leases ran out", ups, kills)
		for _, n := range names {
			for line := range strings.Lines(ds[n].log()) {
				if strings.Contains(line, "lease") || strings.Contains(line, "operation failed") {
					t.Logf("%s: %s", n, strings.TrimSpace(line))
				}
			}
		}
	}
	// Each stand ends up with the replica it belongs to (the first to start took them all, and
	// handed the others over between operations).
	holders := func() map[string]string { return leaseHolders(t, pg) }
	reader.waitFor("every stand held by its rendezvous owner", time.Minute, func() bool {
		held := holders()
		for _, id := range ids {
			if held[id] != lease.Owner(id, names) {
				return false
			}
		}
		return true
	})
	per := map[string]int{}
	for _, id := range ids {
		per[lease.Owner(id, names)]++
	}
	t.Logf("stands per replica: %v; leader %s", per, holders()[stands.LeaderLease])
	for _, n := range names {
		if per[n] == 0 {
			t.Errorf("%s holds no stand", n)
		}
		// The gauge follows the lease's row in the database: a renewal later.
		want := fmt.Sprintf(`stands_leases_held{replica=%q} %d`, n, per[n])
		ds[n].waitFor(n+"'s /metrics saying "+want, time.Minute, func() bool { return strings.Contains(ds[n].get("/metrics"), want) })
	}
	alertMetricsServed(t, ds["r0"].get("/metrics"), replicaMetric)

	// Kill -9 the replica holding an apply in flight.
	var victim string
	for _, id := range ids {
		if lease.Owner(id, names) == "r1" {
			victim = id
			break
		}
	}
	vp := strings.Split(victim, "_")[1]
	h.Sim.SetActionDelay(6 * time.Second) // the server create waits on its action when the kill comes
	mark := len(h.Sim.Calls())
	changed := lr.commit(map[string]string{standPath(vp): withExtraNode(plainStand(vp))})
	reader.waitFor("the victim's server create", time.Minute, func() bool { return countCalls(h.Sim.Calls()[mark:], http.MethodPost, "/servers") > 0 })
	time.Sleep(200 * time.Millisecond) // its action is being polled
	r1 := ds["r1"]
	pids := testenv.ProcessesWithEnv(r1.state)
	if len(pids) < 3 {
		t.Fatalf("r1 runs %d processes mid-apply, want itself, a Pulumi CLI and the provider: %v", len(pids), pids)
	}
	killed := time.Now()
	if err := syscall.Kill(r1.cmd.Process.Pid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-r1.exited
	r1.cmd = nil
	h.Sim.SetActionDelay(20 * time.Millisecond)
	testenv.WaitGone(t, pids, 5*time.Second)
	reader.waitStatus(victim, 2*time.Minute, func(s reconcile.Status) bool {
		return s.Phase == reason.Ready && s.LastSuccessfulCommit == changed && len(s.Nodes) == 2
	})
	recovered := time.Since(killed)
	calls := h.Sim.Calls()[mark:]
	var quiet time.Duration
	for _, c := range calls {
		if c.Time.After(killed.Add(300 * time.Millisecond)) { // what was on its way at the kill has landed
			quiet = c.Time.Sub(killed)
			break
		}
	}
	t.Logf("killed r1 mid-apply: Hetzner heard nothing for %s, the stand was Ready again %s after the kill", quiet.Round(time.Millisecond), recovered.Round(time.Millisecond))
	// The killed replica renewed at most a third of the lease time before the kill: its lease
	// expired no sooner than two thirds of it after, and passed on a grace later.
	if earliest := 2*replicaTTL/3 + replicaGrace; quiet < earliest {
		t.Errorf("Hetzner was called %s after the kill: before the lease could have passed on (%s)", quiet, earliest)
	}
	if n := countCalls(calls, http.MethodPost, "/servers"); n != 1 {
		t.Errorf("%d server creates for one new node: %v", n, calls)
	}
	if n := countCalls(calls, http.MethodDelete, "/servers/"); n != 0 {
		t.Errorf("%d server deletes", n)
	}
	if srvs := h.Servers(t); len(srvs) != 13 {
		t.Errorf("%d servers, want 13", len(srvs))
	}
	took := ""
	for _, n := range []string{"r0", "r2"} {
		if strings.Contains(ds[n].log(), `"judged_by":"lease: token`) {
			took = n
		}
	}
	if took == "" {
		t.Error("no replica removed the killed replica's stack lock as abandoned by its lease")
	} else if m := ds[took].get("/metrics"); !strings.Contains(m, `stands_lease_takeovers_total{replica="`+took+`"}`) ||
		strings.Contains(m, `stands_lease_takeovers_total{replica="`+took+`"} 0`) {
		t.Errorf("%s took a stand over and its /metrics counts no takeover", took)
	}
	noLocks(t, pg)

	// PostgreSQL stopped while an apply runs, and started again.
	other := ids[0]
	if other == victim {
		other = ids[1]
	}
	op := strings.Split(other, "_")[1]
	h.Sim.SetActionDelay(3 * time.Second)
	mark = len(h.Sim.Calls())
	changed = lr.commit(map[string]string{standPath(op): withExtraNode(plainStand(op))})
	reader.waitFor("the server create before the outage", time.Minute, func() bool { return countCalls(h.Sim.Calls()[mark:], http.MethodPost, "/servers") > 0 })
	pg.Stop(t)
	down := time.Now()
	reader.waitFor("a replica to report itself unready", 20*time.Second, func() bool {
		return strings.Contains(reader.get("/readyz"), `"ready":false`)
	})
	time.Sleep(2*replicaTTL - time.Since(down)) // every lease runs out meanwhile
	pg.Start(t)
	up := time.Now()
	h.Sim.SetActionDelay(20 * time.Millisecond)
	for _, n := range []string{"r0", "r2"} {
		d := ds[n]
		d.waitFor(n+" ready again", time.Minute, func() bool { return strings.Contains(d.get("/readyz"), `"ready":true`) })
	}
	ready := time.Since(up)
	reader.waitStatus(other, 2*time.Minute, func(s reconcile.Status) bool {
		return s.Phase == reason.Ready && s.LastSuccessfulCommit == changed && len(s.Nodes) == 2
	})
	t.Logf("PostgreSQL down %s: replicas ready %s after its restart, the apply it interrupted finished %s after it",
		up.Sub(down).Round(time.Millisecond), ready.Round(time.Millisecond), time.Since(up).Round(time.Millisecond))
	calls = h.Sim.Calls()[mark:]
	if n := countCalls(calls, http.MethodDelete, "/servers/"); n != 0 {
		t.Errorf("%d server deletes across the outage", n)
	}
	if n := countCalls(calls, http.MethodPost, "/servers"); n != 1 {
		t.Errorf("%d server creates for one new node across the outage", n)
	}
	if srvs := h.Servers(t); len(srvs) != 14 {
		t.Errorf("%d servers, want 14", len(srvs))
	}
	for _, id := range ids {
		if s := lr.status(id); s.Phase != reason.Ready {
			t.Errorf("%s: %s %s", id, s.Phase, s.Message)
		}
	}
	noLocks(t, pg)
	orphans := runCLI(t, t.Context(), newRecorder(map[string]string{"HCLOUD_TOKEN": h.Token, "STANDS_CLOUD_ENDPOINT": h.Endpoint,
		"STANDS_PASSPHRASE": reader.pl.Passphrase, "STANDS_PULUMI_BIN": reader.pl.Bin, "STANDS_STATE_DIR": t.TempDir(), "STANDS_OWNER": "local",
		"STANDS_BACKEND_URL": pg.BackendURL(), "STANDS_DB_PASSWORD_FILE": pwFile}), "orphans")
	if orphans.code != 0 || !strings.Contains(orphans.stdout, `"orphans":[]`) {
		t.Errorf("orphans: exit %d %s %s", orphans.code, orphans.stdout, orphans.stderr)
	}
	for _, n := range names {
		for _, f := range []string{ds[n].logFile, ds[n].counts, ds[n].counts + ".env"} {
			if data, _ := os.ReadFile(f); strings.Contains(string(data), pg.Password) {
				t.Errorf("the database password is in %s", f)
			}
		}
	}
}

// withExtraNode adds a second node to a plainStand manifest.
func withExtraNode(manifest string) string {
	return manifest + "  extra:\n    profile: small\n    apps: []\n"
}

func countCalls(calls []hcloudsim.Call, method, prefix string) int {
	n := 0
	for _, c := range calls {
		if c.Method == method && (c.Path == prefix || strings.HasSuffix(prefix, "/") && strings.HasPrefix(c.Path, prefix)) && c.Status < 300 {
			n++
		}
	}
	return n
}

// noLocks checks the state database holds no stack lock and no lock holder record.
func noLocks(t *testing.T, pg *testenv.Postgres) {
	t.Helper()
	for _, k := range pg.Keys(t) {
		if strings.Contains(k, "/.pulumi/locks/") || strings.Contains(k, "/.stands/holders/") {
			t.Errorf("left in the state: %s", k)
		}
	}
}

// peakConnections samples the database's connections (its own sampling one not counted) until the
// test ends; the function returned reads the highest count so far.
func peakConnections(t *testing.T, pg *testenv.Postgres) func() int {
	db := pg.DB(t)
	db.SetMaxOpenConns(1)
	var mu sync.Mutex
	most := 0
	stop := make(chan struct{})
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			var n int
			if db.QueryRow(`SELECT count(*) - 1 FROM pg_stat_activity WHERE datname = $1`, pg.Database).Scan(&n) == nil {
				mu.Lock()
				most = max(most, n)
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(100 * time.Millisecond):
			}
		}
	}()
	t.Cleanup(func() { close(stop); <-done })
	return func() int {
		mu.Lock()
		defer mu.Unlock()
		return most
	}
}

// leaseHolders is the replica holding each live lease, by its name.
func leaseHolders(t *testing.T, pg *testenv.Postgres) map[string]string {
	t.Helper()
	out := map[string]string{}
	rows, err := pg.DB(t).Query(`SELECT name, holder FROM stands_leases WHERE expires_at > now()`)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var name, holder string
		if err := rows.Scan(&name, &holder); err != nil {
			t.Fatal(err)
		}
		out[name], _, _ = strings.Cut(holder, ".")
	}
	return out
}
