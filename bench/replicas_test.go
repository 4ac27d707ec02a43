//go:build bench

package bench

import (
	"fmt"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/lease"
	"github.com/stands-engine/stands-reconciler/reason"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// benchReplicas: 3 replicas on one PostgreSQL (the Pulumi state and the leases) against one reconciler
// without --replicas on the same backend, on a workload
// that waits on Hetzner as the real one does (every server action takes 30 s, as a create and boot
// on Hetzner about does): the time to create
// 24 stands, and the time to finish an apply whose replica is killed with -9 in the middle — by
// another replica after the default lease time and grace (30 s + 10 s), and, for the one reconciler,
// by itself restarted after systemd's RestartSec (10 s), which a dead host never is.
func benchReplicas(t *testing.T, bin string, res *results) {
	const stands = 24
	created, failover := map[int]time.Duration{}, map[int]time.Duration{}
	for _, n := range []int{1, 3} {
		h := testenv.StartHetzner(t, "bench-token", hcloudsim.WithActionDelay(30*time.Second))
		w := newWorld(t, bin, h)
		pg := testenv.StartPostgres(t)
		files := baseFiles(t)
		for i := range stands {
			files[standPath(project(i))] = benchStand(project(i), 6300+i)
		}
		w.repo.Change("stands", files)
		names := []string{"r0", "r1", "r2"}[:n]
		ds := map[string]*daemon{}
		// Replicas share one signing key, as docs/operations.md#the-signing-key says they must: the
		// status commits of a leader killed are its successor's to trust.
		_, key := testenv.NewSSHKey(t, w.dir, "signing-key")
		start := time.Now()
		for _, name := range names {
			args := []string{"--poll-interval", "1s", "--workers", "4", "--backend", pg.BackendURL()}
			if n > 1 { // one reconciler is the baseline: what runs without --replicas
				args = append(args, "--replicas", "--replica-id", name)
			}
			d := w.daemon(args...)
			d.env = append(d.env, "STANDS_DB_PASSWORD_FILE="+w.secretFile("db-password", pg.Password), "STANDS_SIGNING_KEY_FILE="+key)
			d.start()
			ds[name] = d
		}
		first := ds["r0"]
		first.waitFor(fmt.Sprintf("%d stands Ready", stands), 30*time.Minute, func() bool { return w.allReady(stands) })
		created[n] = time.Since(start)

		// The stand to kill mid-apply: one of the last replica's, given a second server.
		victim := names[len(names)-1]
		var p string
		for i := range stands {
			if lease.Owner("local_"+project(i)+"_dev", names) == victim {
				p = project(i)
				break
			}
		}
		mark := len(h.Sim.Calls())
		commit := w.repo.Change(p+": a second node", map[string]string{standPath(p): strings.Replace(benchStand(p, 6300), "    apps: [kv]\n",
			"    apps: [kv]\n  extra:\n    profile: small\n    apps: []\n", 1)})
		first.waitFor("the server create", 5*time.Minute, func() bool {
			for _, c := range h.Sim.Calls()[mark:] {
				if c.Method == http.MethodPost && c.Path == "/servers" {
					return true
				}
			}
			return false
		})
		time.Sleep(2 * time.Second) // the provider waits on the create's action
		d := ds[victim]
		killed := time.Now()
		if err := syscall.Kill(d.cmd.Process.Pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		<-d.exited
		d.cmd = nil
		if n == 1 {
			time.Sleep(10 * time.Second) // systemd's RestartSec=10s
			d.start()
		}
		first.waitFor(p+" Ready after the kill", 10*time.Minute, func() bool {
			s := w.statuses()["local_"+p+"_dev"]
			return s.Phase == reason.Ready && s.LastSuccessfulCommit == commit && len(s.Nodes) == 2
		})
		failover[n] = time.Since(killed)
		for _, name := range names {
			if ds[name].cmd != nil {
				ds[name].stop()
			}
		}
	}
	res.add(fmt.Sprintf("%d creates, 3 replicas vs 1 reconciler", stands), "hcloudsim actions 30 s, 4 workers each",
		fmt.Sprintf("%.0f s", created[3].Seconds()), fmt.Sprintf("%.0f s", created[1].Seconds()),
		fmt.Sprintf("%.1f× faster", created[1].Seconds()/created[3].Seconds()),
		"from the first replica's start to the last Ready status; one PostgreSQL holds the state and the leases")
	res.add("an apply whose replica is killed -9", "3 replicas vs 1 reconciler restarted after 10 s",
		fmt.Sprintf("%.0f s", failover[3].Seconds()), fmt.Sprintf("%.0f s", failover[1].Seconds()),
		fmt.Sprintf("%.2f×", failover[3].Seconds()/failover[1].Seconds()),
		"from the kill to the stand Ready: another replica after --lease-ttl 30 s + --lease-grace 10 s, or the one reconciler restarted (systemd's RestartSec); a dead host is never restarted")
}
