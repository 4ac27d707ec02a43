//go:build e2e

package engine

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/hcloudsim/vm"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// The reconciler as its Debian package installs it, under the VM's systemd (PID 1): `make deb`'s package
// installed with dpkg (twice: a reinstall changes nothing), the unit started with its hardening, secrets through
// LoadCredential=, on a repository on the VM's disk, with hcloudsim inside the VM (servers only: the
// VM cannot reach the host). While it applies, every process of the unit's cgroup is sampled: no
// credential in any /proc/<pid>/environ; the control is a process given the token on purpose, caught
// by the same scan. The unit is Type=notify with a watchdog (a drop-in shortens WatchdogSec= to 15 s, so
// that an apply lasts several of its intervals): `systemctl start` returns once the daemon said
// READY=1, and an apply longer than two intervals is not restarted. `systemctl stop` during the apply
// drains: the apply finishes, the unit ends with Result=success and status 0, no lock is left, nothing
// in the journal warns, and the next start carries on. Then the daemon is frozen (SIGSTOP): the
// watchdog restarts it, its stack dump holds no secret, and the new one finds p Ready. The unit's
// `systemd-analyze security` exposure is logged and bounded. Last, the package's life: an upgrade to a
// newer build and a downgrade back, each draining the daemon and starting it again with p still Ready on
// the same server, then a purge that removes the package, its settings and credentials but keeps the
// state folder that holds p's stack (its server still runs).

const (
	vmInstall   = "/var/tmp/stands-install"
	vmState     = "/var/lib/stands-reconciler"
	vmRepo      = vmState + "/stands"
	vmSocket    = vmState + "/control.sock"
	vmCgroup    = "/sys/fs/cgroup/system.slice/stands-reconciler.service"
	vmSamples   = "/var/tmp/env-samples"
	vmHetzner   = "e2e-hcloud-SENTINEL-9d41"
	vmPassword  = "e2e-passphrase-SENTINEL-5c07"
	vmBinary    = "/opt/stands-reconciler/bin/stands-reconciler"
	ctlStatus   = vmBinary + " ctl --control-socket " + vmSocket + " status"
	vmSimulator = "stands-e2e-hcloudsim"
	vmWatchdog  = 15 * time.Second
	// vmExposure bounds `systemd-analyze security`'s score of the unit (docs/operations.md gives it).
	vmExposure = 1.5
	// The two builds the package scenario installs, upgrades and downgrades between.
	vmOlder, vmNewer = "0.1.0~e2e", "0.1.1~e2e"
)

func debName(version string) string { return "stands-reconciler_" + version + "_amd64.deb" }

// systemdShare is the folder the VMs get as a disk (vm.Config.Share): what an operator would copy to
// the machine — two builds of the Debian package, made by `make deb` — and for the test hcloudsim, the
// sampler and the repository.
func systemdShare(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	copyFile := func(from, to string, mode os.FileMode) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		writeShared(t, filepath.Join(dir, to), data, mode)
	}
	copyFile(testenv.BuildStatic(t, "./cmd/hcloudsim"), "hcloudsim", 0o755)
	for _, v := range []string{vmOlder, vmNewer} {
		cmd := exec.Command("make", "-s", "deb", "DEB_VERSION="+v, "DEB_DIR="+dir)
		cmd.Dir = testenv.RepoRoot()
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("make deb DEB_VERSION=%s: %v\n%s", v, err, out)
		}
		if _, err := os.Stat(filepath.Join(dir, debName(v))); err != nil {
			t.Fatalf("make deb: %v", err)
		}
	}
	writeShared(t, filepath.Join(dir, "repo.tar"), vmRepository(t), 0o644)
	writeShared(t, filepath.Join(dir, "sampler.sh"), []byte(samplerScript), 0o755)
	return dir
}

func writeShared(t *testing.T, p string, data []byte, mode os.FileMode) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, data, mode); err != nil {
		t.Fatal(err)
	}
}

// systemdOnNode runs the scenario on a VM that has systemdShare's disk.
func systemdOnNode(t *testing.T, c *ssh.Client) {
	t.Helper()
	t0 := time.Now()
	mustRun(t, c, "sudo mkdir -p "+vmInstall+" && (mountpoint -q "+vmInstall+" || sudo mount -o ro /dev/disk/by-label/"+vm.ShareLabel+" "+vmInstall+")")

	// 1. hcloudsim in the VM, its token from a file (no argv holds it).
	mustRun(t, c, fmt.Sprintf("printf %%s %s > /var/tmp/hcloudsim-token && sudo systemd-run --unit=%s -E HCLOUDSIM_TOKEN_FILE=/var/tmp/hcloudsim-token %s/hcloudsim -listen 127.0.0.1:8086 -example-project -action-delay 20s",
		vmHetzner, vmSimulator, vmInstall))

	// 2. The package, twice, and what it made; a first install starts nothing.
	for range 2 {
		mustRun(t, c, "sudo dpkg -i "+vmInstall+"/"+debName(vmOlder))
	}
	if state := unitShow(t, c, "ActiveState")["ActiveState"]; state != "inactive" {
		t.Errorf("the unit after the first install: %s, want inactive (no settings yet)", state)
	}
	unit := readFile(t, filepath.Join(testenv.RepoRoot(), "deploy", "stands-reconciler.service"))
	for _, m := range regexp.MustCompile(`(?m)^ReadWritePaths=(.+)$`).FindAllStringSubmatch(unit, -1) {
		for _, p := range strings.Fields(m[1]) {
			mustRun(t, c, "test -d "+p) // ProtectSystem=strict fails the start (226/NAMESPACE) on a missing one
		}
	}
	mustRun(t, c, "id stands && sudo test -d /etc/stands-reconciler/credentials && test \"$(sudo stat -c %a /etc/stands-reconciler/credentials)\" = 700"+
		" && test \"$(sudo stat -c %a:%U /etc/stands-reconciler/credentials/hcloud-token /var/lib/stands-reconciler | tr '\\n' ' ')\" = '600:root 700:stands '")
	mustRun(t, c, fmt.Sprintf("sudo mkdir -p /etc/systemd/system/stands-reconciler.service.d && printf '[Service]\\nWatchdogSec=%ds\\n' | sudo tee /etc/systemd/system/stands-reconciler.service.d/e2e-watchdog.conf >/dev/null && sudo systemctl daemon-reload", int(vmWatchdog.Seconds())))
	exposure(t, c)

	// 3. Its settings and secrets, and the repository in the state folder (the unit writes there only).
	mustRun(t, c, fmt.Sprintf(`set -e
printf %%s %s | sudo install -m 0600 /dev/stdin /etc/stands-reconciler/credentials/hcloud-token
printf %%s %s | sudo install -m 0600 /dev/stdin /etc/stands-reconciler/credentials/passphrase
printf '%%s\n' STANDS_REPO_URL=%s STANDS_OWNER=local STANDS_NODES=skip STANDS_CLOUD_ENDPOINT=http://127.0.0.1:8086/v1 \
  STANDS_POLL_INTERVAL=10m STANDS_DRIFT_INTERVAL=0 STANDS_LISTEN=127.0.0.1:8080 STANDS_REQUIRE_REVIEW=false | sudo tee /etc/stands-reconciler/stands-reconciler.env >/dev/null
sudo mkdir -p %s && sudo tar -C %s -xf %s/repo.tar && sudo chown -R stands:stands %s`, vmHetzner, vmPassword, vmRepo, vmRepo, vmRepo, vmInstall, vmRepo))

	// 4. Start it with the sampler watching its cgroup, and a control process given the token.
	mustRun(t, c, "sudo systemd-run --unit=stands-e2e-control -E LEAKED="+vmHetzner+" sleep 3600")
	mustRun(t, c, "sudo systemd-run --unit=stands-e2e-sampler "+vmInstall+"/sampler.sh")
	t1 := time.Now()
	mustRun(t, c, "sudo systemctl start stands-reconciler") // Type=notify: returns at READY=1
	if show := unitShow(t, c, "ActiveState", "SubState", "Type", "WatchdogUSec"); !maps.Equal(show, map[string]string{"ActiveState": "active", "SubState": "running", "Type": "notify", "WatchdogUSec": vmWatchdog.String()}) {
		t.Errorf("the unit once systemctl start returned: %v", show)
	}
	mainPID := unitShow(t, c, "MainPID")["MainPID"]
	t.Logf("systemd: READY=1 %s after the start", time.Since(t1).Round(time.Second))

	// 5. While it applies stand p: two watchdog intervals pass with the apply still running and the
	// daemon not restarted.
	waitFor(t, c, 8*time.Minute, "p's apply to start", "sudo journalctl -u stands-reconciler -o cat | grep -q '\"msg\":\"applying stand\"'")
	time.Sleep(2*vmWatchdog + 2*time.Second)
	if j := journal(t, c); strings.Contains(j, `"msg":"stand applied"`) {
		t.Fatalf("p's apply ended within two watchdog intervals: it shows nothing of the watchdog; make the simulator's actions slower\n%s", j)
	}
	if show := unitShow(t, c, "MainPID", "NRestarts"); show["MainPID"] != mainPID || show["NRestarts"] != "0" {
		t.Fatalf("the watchdog restarted the daemon during an apply: %v (MainPID was %s)\n%s", show, mainPID, journal(t, c))
	}
	waitFor(t, c, 8*time.Minute, "the provider of p's apply", "sudo grep -l pulumi-resource-stands "+vmSamples+"/*.cmd")
	t.Logf("systemd: p's apply under way %s after the start, the daemon not restarted", time.Since(t1).Round(time.Second))
	// ... and then it is stopped: the drain lets the apply finish.
	t2 := time.Now()
	mustRun(t, c, "sudo systemctl stop stands-reconciler")
	t.Logf("systemd: systemctl stop during the apply returned after %s", time.Since(t2).Round(time.Second))
	// journald reads the daemon's output as a stream of its own: its last lines may follow the stop.
	waitFor(t, c, time.Minute, "the daemon's last line in the journal", journalHas("reconciler stopped", 1))
	j := journal(t, c)
	show := mustRun(t, c, "systemctl show stands-reconciler -p Result -p ExecMainStatus")
	if !strings.Contains(show, "Result=success") || !strings.Contains(show, "ExecMainStatus=0") {
		t.Errorf("the unit after systemctl stop: %s\n%s", show, j)
	}
	for _, want := range []string{`"msg":"stand applied","stand":"local_p_dev"`, "stopping: letting running operations finish", "reconciler stopped",
		fmt.Sprintf(`"msg":"systemd watchdog","interval":"%s"`, vmWatchdog)} {
		if !strings.Contains(j, want) {
			t.Errorf("the journal does not say %q:\n%s", want, j)
		}
	}
	// Under the unit's hardening nothing may fail quietly (PrivateTmp= once broke every lock holder
	// record: fileblob renamed from /tmp into the state folder).
	for _, line := range strings.Split(j, "\n") {
		if strings.Contains(line, `"level":"ERROR"`) || strings.Contains(line, `"level":"WARN"`) && !strings.Contains(line, "no STANDS_WEBHOOK_SECRET") {
			t.Errorf("the journal has: %s", line)
		}
	}
	mustRun(t, c, "sudo touch "+vmSamples+".stop")
	if locks := run(t, c, "sudo find "+vmState+"/pulumi -path '*/.pulumi/locks/*' -type f"); locks != "" {
		t.Errorf("locks left after the stop: %s", locks)
	}

	// 6. No credential in any environment of the unit's processes.
	checkSamples(t, c)

	// 7. The next start carries on from the committed status: p Ready.
	mustRun(t, c, "sudo systemctl start stands-reconciler")
	waitCtl(t, c, 5*time.Minute, "p Ready", func(v ctlView) bool { return v.Stands["Ready"] == 1 })

	// 8. A frozen daemon misses the watchdog: systemd aborts it (its goroutines' stacks in the
	// journal, with no secret in them) and starts it again, and the new one finds p Ready.
	before := unitShow(t, c, "MainPID", "NRestarts")
	frozen := before["MainPID"]
	t3 := time.Now()
	mustRun(t, c, "sudo kill -STOP "+frozen)
	waitFor(t, c, 3*time.Minute, "the watchdog to restart the frozen daemon",
		`test "$(systemctl show -p NRestarts --value stands-reconciler)" -gt `+before["NRestarts"]+` && systemctl is-active -q stands-reconciler`)
	t.Logf("systemd: the frozen daemon restarted %s after SIGSTOP", time.Since(t3).Round(time.Second))
	if now := unitShow(t, c, "MainPID")["MainPID"]; now == frozen {
		t.Errorf("the unit's main process is still %s after the restart", frozen)
	}
	waitFor(t, c, time.Minute, "the frozen daemon's stacks in the journal", "sudo journalctl -u stands-reconciler -o cat | grep -q '^goroutine '")
	whole := mustRun(t, c, "sudo journalctl -u stands-reconciler --no-pager -o cat")
	for _, want := range []string{"Watchdog timeout", "SIGABRT", "goroutine "} {
		if !strings.Contains(whole, want) {
			t.Errorf("the journal does not say %q of the frozen daemon", want)
		}
	}
	for _, secret := range []string{vmHetzner, vmPassword} {
		if strings.Contains(whole, secret) {
			t.Errorf("the journal holds a credential")
		}
	}
	waitCtl(t, c, 5*time.Minute, "p Ready after the watchdog's restart", func(v ctlView) bool { return v.Stands["Ready"] == 1 })

	// 9. Upgrade to the newer build and downgrade back, the daemon running: each drains it, replaces
	// the files, starts it again; p stays Ready on the same server and nothing is applied.
	servers := vmServers(t, c)
	if len(servers) != 1 {
		t.Fatalf("servers before the upgrade: %v, want p's one", servers)
	}
	for _, v := range []string{vmNewer, vmOlder} {
		pid := unitShow(t, c, "MainPID")["MainPID"]
		before := mustRun(t, c, "sudo journalctl -u stands-reconciler --no-pager -o cat")
		t4 := time.Now()
		out := mustRun(t, c, "sudo dpkg -i "+vmInstall+"/"+debName(v))
		t.Logf("systemd: dpkg -i %s, the daemon running: %s", v, time.Since(t4).Round(time.Second))
		for _, want := range []string{"stopping the daemon", "starting the daemon again"} {
			if !strings.Contains(out, want) {
				t.Errorf("dpkg -i %s does not say %q:\n%s", v, want, out)
			}
		}
		if got := mustRun(t, c, vmBinary+" --version"); got != "stands-reconciler "+v {
			t.Errorf("after dpkg -i %s the binary says %q", v, got)
		}
		if show := unitShow(t, c, "ActiveState", "MainPID"); show["ActiveState"] != "active" || show["MainPID"] == pid {
			t.Errorf("the unit after dpkg -i %s: %v (its main process was %s)", v, show, pid)
		}
		waitCtl(t, c, 5*time.Minute, "p Ready after dpkg -i "+v, func(v ctlView) bool { return v.Stands["Ready"] == 1 })
		count := func(s, what string) int { return strings.Count(s, `"msg":"`+what+`"`) }
		waitFor(t, c, time.Minute, "the drained daemon's last line in the journal", journalHas("reconciler stopped", count(before, "reconciler stopped")+1))
		if now := vmServers(t, c); !maps.Equal(now, servers) {
			t.Errorf("servers after dpkg -i %s: %v, before %v", v, now, servers)
		}
		j := mustRun(t, c, "sudo journalctl -u stands-reconciler --no-pager -o cat")
		if n := count(j, "stand applied") - count(before, "stand applied"); n != 0 {
			t.Errorf("dpkg -i %s: %d applies after it, want none", v, n)
		}
		if count(j, "reconciler stopped") != count(before, "reconciler stopped")+1 {
			t.Errorf("dpkg -i %s: the daemon did not drain to its end", v)
		}
	}

	// 10. Purge: the package, its unit, settings and credentials gone, no process left; the state
	// folder, which holds p's stack, kept and named, and p's server untouched.
	out := mustRun(t, c, "sudo dpkg --purge stands-reconciler")
	if !strings.Contains(out, vmState+" kept") {
		t.Errorf("the purge does not name the state folder it keeps:\n%s", out)
	}
	mustRun(t, c, "for p in /opt/stands-reconciler /etc/stands-reconciler /lib/systemd/system/stands-reconciler.service "+
		"/etc/systemd/system/stands-reconciler.service.d; do if sudo test -e $p; then echo \"left: $p\"; exit 1; fi; done; "+
		"! pgrep -u stands; sudo find "+vmState+" -path '*/.pulumi/stacks/*' -type f | grep -q .")
	if now := vmServers(t, c); !maps.Equal(now, servers) {
		t.Errorf("servers after the purge: %v, before %v", now, servers)
	}
	run(t, c, "sudo systemctl stop --no-block "+vmSimulator+" stands-e2e-control; true")
	t.Logf("systemd: the whole scenario took %s", time.Since(t0).Round(time.Second))
}

// vmServers lists the servers of the VM's hcloudsim, by name.
func vmServers(t *testing.T, c *ssh.Client) map[string]string {
	t.Helper()
	out := mustRun(t, c, "curl -sf -H 'Authorization: Bearer "+vmHetzner+"' http://127.0.0.1:8086/v1/servers")
	var list struct {
		Servers []struct {
			ID   int64  `json:"id"`
			Name string `json:"name"`
		} `json:"servers"`
	}
	if err := json.Unmarshal([]byte(out), &list); err != nil {
		t.Fatalf("hcloudsim's servers: %v\n%s", err, out)
	}
	got := map[string]string{}
	for _, s := range list.Servers {
		got[s.Name] = fmt.Sprint(s.ID)
	}
	return got
}

// unitShow reads properties of the unit.
func unitShow(t *testing.T, c *ssh.Client, props ...string) map[string]string {
	t.Helper()
	out := mustRun(t, c, "systemctl show stands-reconciler -p "+strings.Join(props, " -p "))
	got := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	return got
}

// exposure logs the unit's `systemd-analyze security` verdict on the VM's systemd and fails above
// vmExposure.
func exposure(t *testing.T, c *ssh.Client) {
	t.Helper()
	out := mustRun(t, c, "systemd-analyze security --no-pager stands-reconciler.service")
	m := regexp.MustCompile(`Overall exposure level for stands-reconciler.service: ([0-9.]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("systemd-analyze security says no exposure level:\n%s", out)
	}
	var open []string
	for _, line := range strings.Split(out, "\n") {
		if strings.HasPrefix(line, "✗") {
			open = append(open, strings.Join(strings.Fields(line)[:2], " "))
		}
	}
	t.Logf("systemd: systemd-analyze security: exposure %s; open: %s", m[1], strings.Join(open, "; "))
	var score float64
	if _, err := fmt.Sscan(m[1], &score); err != nil || score > vmExposure {
		t.Errorf("the unit's exposure is %s, above %.1f:\n%s", m[1], vmExposure, out)
	}
}

// journalHas is a check on the node: the unit's journal holds at least n records of msg.
func journalHas(msg string, n int) string {
	return fmt.Sprintf(`test "$(sudo journalctl -u stands-reconciler -o cat | grep -c '"msg":"%s"')" -ge %d`, msg, n)
}

// waitFor runs check on the node until it succeeds.
func waitFor(t *testing.T, c *ssh.Client, d time.Duration, what, check string) {
	t.Helper()
	err := wait.Until(context.Background(), d, func() error { _, err := runErr(c, check); return err }, wait.Every(5*time.Second))
	if err != nil {
		t.Fatalf("waiting for %s: %v\n%s", what, err, journal(t, c))
	}
}

// samplerScript records, for every process of the unit's cgroup and of the control's, its command
// line and its environment, again whenever its command line changes (a fork before its exec).
const samplerScript = `#!/bin/bash
out=` + vmSamples + `
mkdir -p "$out"
declare -A seen
while [ ! -e "$out.stop" ]; do
  for cg in ` + vmCgroup + ` /sys/fs/cgroup/system.slice/stands-e2e-control.service; do
    for p in $(cat "$cg/cgroup.procs" 2>/dev/null); do
      cmd=$(tr '\0' ' ' < /proc/$p/cmdline 2>/dev/null) || continue
      [ "${seen[$p]}" = "$cmd" ] && continue
      seen[$p]=$cmd
      n=$(ls "$out" | wc -l)
      printf '%s\n%s\n' "$(basename "$cg")" "$cmd" > "$out/$n.cmd"
      tr '\0' '\n' < /proc/$p/environ > "$out/$n.env" 2>/dev/null
    done
  done
  sleep 0.2
done
`

// checkSamples reads the sampler's records: the control is found, no process of the unit has a
// credential in its environment, and the CLI and the provider were among them.
func checkSamples(t *testing.T, c *ssh.Client) {
	t.Helper()
	dump := mustRun(t, c, "cd "+vmSamples+" && for f in *.cmd; do echo \"=== $f\"; cat \"$f\"; echo '--- env'; cat \"${f%.cmd}.env\"; done")
	var unit, control, clis, providers int
	for _, rec := range strings.Split(dump, "=== ")[1:] {
		head, env, _ := strings.Cut(rec, "--- env")
		leaked := strings.Contains(env, vmHetzner) || strings.Contains(env, vmPassword)
		switch {
		case strings.Contains(head, "stands-e2e-control"):
			control++
			if !leaked {
				t.Errorf("the control's environment holds no token: the scan cannot see one")
			}
			continue
		case leaked:
			t.Errorf("a credential in the environment of %s", strings.TrimSpace(head))
		}
		unit++
		if strings.Contains(head, "pulumi-resource-stands") {
			providers++
		} else if regexp.MustCompile(`pulumi/bin/pulumi `).MatchString(head) {
			clis++
		}
		if strings.Contains(head, "stands-reconciler run") && !strings.Contains(env, "HCLOUD_TOKEN_FILE=/run/credentials/stands-reconciler.service/hcloud-token") {
			t.Errorf("the daemon's environment does not name its credential in $CREDENTIALS_DIRECTORY:\n%s", env)
		}
	}
	t.Logf("systemd: sampled %d processes of the unit (%d Pulumi CLIs, %d providers) and %d of the control", unit, clis, providers, control)
	if control == 0 || clis == 0 || providers == 0 {
		t.Errorf("the sampler saw %d control, %d CLI and %d provider processes: it did not watch the apply", control, clis, providers)
	}
}

type ctlView struct {
	Stands  map[string]int `json:"stands"`
	Running int            `json:"operationsRunning"`
}

// waitCtl asks the daemon for its controls' view through `ctl status` until cond holds.
func waitCtl(t *testing.T, c *ssh.Client, d time.Duration, what string, cond func(ctlView) bool) {
	t.Helper()
	var last string
	// Every 10 s: each ctl is a process on a TCG guest's one CPU.
	err := wait.Until(context.Background(), d, func() error {
		out, err := runErr(c, "sudo "+ctlStatus)
		last = out
		var rec struct {
			Controls ctlView `json:"controls"`
		}
		if err == nil && json.Unmarshal([]byte(out), &rec) == nil && cond(rec.Controls) {
			return nil
		}
		return errors.New("not yet")
	}, wait.Every(10*time.Second))
	if err != nil {
		t.Fatalf("waiting for %s: %v; last ctl status: %s\n%s", what, err, last, journal(t, c))
	}
}

func journal(t *testing.T, c *ssh.Client) string {
	return run(t, c, "sudo journalctl -u stands-reconciler --no-pager -o cat | tail -n 60")
}

// vmRepository is a stands repository with stand p, as a tar of its folder.
func vmRepository(t *testing.T) []byte {
	t.Helper()
	dir := t.TempDir()
	testenv.CommitAll(t, testenv.InitStandsRepo(t, dir), dir, "add p", map[string]string{"stands/p/stand.yml": testenv.PlainStand("p")})
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	if err := tw.AddFS(os.DirFS(dir)); err != nil {
		t.Fatal(err)
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	return buf.Bytes()
}

func readFile(t *testing.T, p string) string {
	t.Helper()
	data, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// mustRun runs cmd on the node and fails the test when it fails.
func mustRun(t *testing.T, c *ssh.Client, cmd string) string {
	t.Helper()
	out, err := runErr(c, cmd)
	if err != nil {
		t.Fatalf("%s: %v\n%s", firstLineOf(cmd), err, out)
	}
	return out
}

func runErr(c *ssh.Client, cmd string) (string, error) {
	s, err := c.NewSession()
	if err != nil {
		return "", err
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	return strings.TrimSpace(string(out)), err
}

func firstLineOf(s string) string {
	line, _, _ := strings.Cut(s, "\n")
	return line
}
