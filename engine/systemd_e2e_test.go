//go:build e2e

package engine

import (
	"archive/tar"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/hcloudsim/vm"
	"github.com/stands-engine/stands-reconciler/test/testenv"
)

// The reconciler as deploy/ installs it, under the VM's systemd (PID 1): deploy/install.sh run for
// real (twice: it is idempotent), the unit started with its hardening, secrets through
// LoadCredential=, on a repository on the VM's disk, with hcloudsim inside the VM (servers only: the
// VM cannot reach the host). While it applies, every process of the unit's cgroup is sampled: no
// credential in any /proc/<pid>/environ; the control is a process given the token on purpose, caught
// by the same scan. `systemctl stop` during the apply drains: the apply finishes, the unit ends with
// Result=success and status 0, no lock is left, nothing in the journal warns, and the next start
// carries on.

const (
	vmInstall   = "/var/tmp/stands-install"
	vmState     = "/var/lib/stands-reconciler"
	vmRepo      = vmState + "/stands"
	vmSocket    = vmState + "/control.sock"
	vmCgroup    = "/sys/fs/cgroup/system.slice/stands-reconciler.service"
	vmSamples   = "/var/tmp/env-samples"
	vmHetzner   = "e2e-hcloud-SENTINEL-9d41"
	vmPassword  = "e2e-passphrase-SENTINEL-5c07"
	ctlStatus   = "/opt/stands-reconciler/bin/stands-reconciler ctl --control-socket " + vmSocket + " status"
	vmSimulator = "stands-e2e-hcloudsim"
)

// systemdShare is the folder the VMs get as a disk (vm.Config.Share): what an operator would copy to
// the machine — our binary, the Pulumi CLI, deploy/ — and for the test hcloudsim, the sampler and the
// repository.
func systemdShare(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	pl := testenv.NewPulumi(t)
	copyFile := func(from, to string, mode os.FileMode) {
		data, err := os.ReadFile(from)
		if err != nil {
			t.Fatal(err)
		}
		writeShared(t, filepath.Join(dir, to), data, mode)
	}
	copyFile(testenv.BuildStatic(t, "./cmd/stands-reconciler"), "stands-reconciler", 0o755)
	copyFile(testenv.BuildStatic(t, "./cmd/hcloudsim"), "hcloudsim", 0o755)
	copyFile(pl.Bin, "pulumi/bin/pulumi", 0o755)
	for _, f := range []string{"install.sh", "stands-reconciler.service", "stands-reconciler.env.example"} {
		copyFile(filepath.Join(testenv.RepoRoot(), "deploy", f), "deploy/"+f, 0o644)
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
	mustRun(t, c, fmt.Sprintf("printf %%s %s > /var/tmp/hcloudsim-token && sudo systemd-run --unit=%s -E HCLOUDSIM_TOKEN_FILE=/var/tmp/hcloudsim-token %s/hcloudsim -listen 127.0.0.1:8086 -example-project -action-delay 5s",
		vmHetzner, vmSimulator, vmInstall))

	// 2. The install script, twice, and what it made.
	for range 2 {
		mustRun(t, c, "sudo bash "+vmInstall+"/deploy/install.sh "+vmInstall+"/stands-reconciler "+vmInstall+"/pulumi")
	}
	unit := readFile(t, filepath.Join(testenv.RepoRoot(), "deploy", "stands-reconciler.service"))
	for _, m := range regexp.MustCompile(`(?m)^ReadWritePaths=(.+)$`).FindAllStringSubmatch(unit, -1) {
		for _, p := range strings.Fields(m[1]) {
			mustRun(t, c, "test -d "+p) // ProtectSystem=strict fails the start (226/NAMESPACE) on a missing one
		}
	}
	mustRun(t, c, "id stands && sudo test -d /etc/stands-reconciler/credentials && test \"$(sudo stat -c %a /etc/stands-reconciler/credentials)\" = 700")

	// 3. Its settings and secrets, and the repository in the state folder (the unit writes there only).
	mustRun(t, c, fmt.Sprintf(`set -e
printf %%s %s | sudo install -m 0600 /dev/stdin /etc/stands-reconciler/credentials/hcloud-token
printf %%s %s | sudo install -m 0600 /dev/stdin /etc/stands-reconciler/credentials/passphrase
printf '%%s\n' STANDS_REPO_URL=%s STANDS_OWNER=local STANDS_NODES=skip HCLOUD_ENDPOINT=http://127.0.0.1:8086/v1 \
  STANDS_POLL_INTERVAL=10m STANDS_DRIFT_INTERVAL=0 STANDS_LISTEN=127.0.0.1:8080 | sudo tee /etc/stands-reconciler/stands-reconciler.env >/dev/null
sudo mkdir -p %s && sudo tar -C %s -xf %s/repo.tar && sudo chown -R stands:stands %s`, vmHetzner, vmPassword, vmRepo, vmRepo, vmRepo, vmInstall, vmRepo))

	// 4. Start it with the sampler watching its cgroup, and a control process given the token.
	mustRun(t, c, "sudo systemd-run --unit=stands-e2e-control -E LEAKED="+vmHetzner+" sleep 3600")
	mustRun(t, c, "sudo systemd-run --unit=stands-e2e-sampler "+vmInstall+"/sampler.sh")
	t1 := time.Now()
	mustRun(t, c, "sudo systemctl start stands-reconciler")

	// 5. Stop it while it applies stand p, once the provider runs: the drain lets the apply finish.
	waitFor(t, c, 8*time.Minute, "the provider of p's apply", "sudo grep -l pulumi-resource-stands "+vmSamples+"/*.cmd")
	t.Logf("systemd: p's apply under way %s after the start", time.Since(t1).Round(time.Second))
	t2 := time.Now()
	mustRun(t, c, "sudo systemctl stop stands-reconciler")
	t.Logf("systemd: systemctl stop during the apply returned after %s", time.Since(t2).Round(time.Second))
	j := journal(t, c)
	show := mustRun(t, c, "systemctl show stands-reconciler -p Result -p ExecMainStatus")
	if !strings.Contains(show, "Result=success") || !strings.Contains(show, "ExecMainStatus=0") {
		t.Errorf("the unit after systemctl stop: %s\n%s", show, j)
	}
	for _, want := range []string{`"msg":"stand applied","stand":"local_p_dev"`, "stopping: letting running operations finish", "reconciler stopped"} {
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
	run(t, c, "sudo systemctl stop --no-block stands-reconciler "+vmSimulator+" stands-e2e-control; true")
	t.Logf("systemd: the whole scenario took %s", time.Since(t0).Round(time.Second))
}

// waitFor runs check on the node until it succeeds.
func waitFor(t *testing.T, c *ssh.Client, d time.Duration, what, check string) {
	t.Helper()
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		if _, err := runErr(c, check); err == nil {
			return
		}
		time.Sleep(5 * time.Second)
	}
	t.Fatalf("waited %s for %s\n%s", d, what, journal(t, c))
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
	deadline := time.Now().Add(d)
	var last string
	for time.Now().Before(deadline) {
		out, err := runErr(c, "sudo "+ctlStatus)
		last = out
		var rec struct {
			Controls ctlView `json:"controls"`
		}
		if err == nil && json.Unmarshal([]byte(out), &rec) == nil && cond(rec.Controls) {
			return
		}
		time.Sleep(10 * time.Second) // each ctl is a process on a TCG guest's one CPU
	}
	t.Fatalf("waited %s for %s; last ctl status: %s\n%s", d, what, last, journal(t, c))
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
