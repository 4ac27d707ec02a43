//go:build e2e

package vm

import (
	"bytes"
	"context"
	"crypto/ed25519"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/engine/node"
	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/internal/testenv"
	"github.com/stands-engine/stands-reconciler/manifest"
)

// TestTwoServersAreRealMachines boots two simulated servers as VMs through hcloud-go and hcloudsim,
// with the example stand's cloud-init: SSH as the admin user with the key from user data,
// cloud-init done without an ordering cycle, the private IPs answer each other, Podman as the app
// user pulls the test app from the login-protected registry and runs it, the host reaches it
// through a port forwarded at run time, and deleting the servers leaves no QEMU process.
func TestTwoServersAreRealMachines(t *testing.T) {
	reg := testenv.StartRegistry(t)
	image := reg.PushBinary(t, testenv.BuildStatic(t, "./cmd/stands-testapp"), "stands/testapp", "1")
	machines, err := New(Config{Dir: t.TempDir(), Registry: reg.Addr, Log: testenv.Logger(t)})
	if err != nil {
		testenv.Missing(t, "%v", err)
	}
	t.Cleanup(func() { _ = machines.Close() })
	h := testenv.StartHetzner(t, "vm-token", hcloudsim.WithMachine(machines))
	ctx := context.Background()

	// The example two-node stand's cloud-init, with a key of this test.
	pub, priv, err := ed25519.GenerateKey(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	signer, _ := ssh.NewSignerFromKey(priv)
	sshPub, _ := ssh.NewPublicKey(pub)
	repo := os.DirFS(filepath.Join(testenv.RepoRoot(), "examples", "stands-repo"))
	res, err := manifest.Preflight(ctx, repo, "stands/two-node/stand.yml", manifest.PreflightOptions{
		LoadOptions: manifest.LoadOptions{DefaultOwner: "e2e"},
		Secrets:     manifest.EnvSource{Lookup: func(string) (string, bool) { return "e2e-secret-value", true }}})
	if err != nil {
		t.Fatal(err)
	}
	rendered, err := manifest.Render(repo, res.Stand, res.Secrets, manifest.Addresses{NetworkIPRange: "10.0.0.0/16",
		SSHPublicKey: strings.TrimSpace(string(ssh.MarshalAuthorizedKey(sshPub)))})
	if err != nil {
		t.Fatal(err)
	}
	network, _, err := h.Client.Network.GetByName(ctx, "stands-net")
	if err != nil || network == nil {
		t.Fatalf("network: %v", err)
	}
	t0 := time.Now()
	var servers []*hcloud.Server
	for _, n := range rendered.Nodes {
		r, _, err := h.Client.Server.Create(ctx, hcloud.ServerCreateOpts{Name: n.ServerName, ServerType: &hcloud.ServerType{Name: "cx22"},
			Image: &hcloud.Image{Name: "debian-12"}, Location: &hcloud.Location{Name: "hel1"}, UserData: string(n.CloudInit),
			Networks: []*hcloud.Network{network}})
		if err != nil {
			t.Fatalf("create %s: %v", n.ServerName, err)
		}
		if err := h.Client.Action.WaitFor(ctx, r.Action); err != nil {
			t.Fatal(err)
		}
		srv, _, err := h.Client.Server.GetByID(ctx, r.Server.ID)
		if err != nil {
			t.Fatal(err)
		}
		servers = append(servers, srv)
	}
	admin := res.Stand.Users.Sudo
	clients := make([]*ssh.Client, len(servers))
	var wg sync.WaitGroup
	for i, s := range servers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			clients[i] = dialSSH(t, s.PublicNet.IPv4.IP.String()+":22", admin, signer, 10*time.Minute, machines, s.ID)
			t.Logf("%s: SSH after %v", s.Name, time.Since(t0).Round(time.Second))
			out := runSSH(t, clients[i], "cloud-init status --wait; cloud-init status --long | head -5", 15*time.Minute)
			t.Logf("%s: cloud-init after %v:\n%s", s.Name, time.Since(t0).Round(time.Second), out)
		}()
	}
	wg.Wait()
	if t.Failed() {
		t.FailNow()
	}
	for i, s := range servers {
		if out := runSSH(t, clients[i], "cloud-init status", time.Minute); !strings.Contains(out, "status: done") {
			t.Errorf("%s: %s", s.Name, out)
		}
		if out := runSSH(t, clients[i], "sudo journalctl -b --no-pager | grep -ci 'ordering cycle' || true", time.Minute); strings.TrimSpace(out) != "0" {
			t.Errorf("%s: ordering cycles in the journal: %s", s.Name, out)
		}
		other := servers[1-i].PrivateNet[0].IP.String()
		if out := runSSH(t, clients[i], "ping -c 2 -W 5 "+other, time.Minute); !strings.Contains(out, " 0% packet loss") {
			t.Errorf("%s cannot reach %s on the private network:\n%s", s.Name, other, out)
		}
	}

	// Node setup as the engine does it (engine/node over SSH, host key pinned), then Podman as the app
	// user: log in to the registry, pull, run; the host reaches the app.
	app := res.Stand.Users.App
	conn, hostKey, err := node.Dial(ctx, servers[0].PublicNet.IPv4.IP.String()+":22", node.DialOptions{User: admin, Signer: signer, Wait: time.Minute})
	if err != nil || hostKey == nil {
		t.Fatalf("node dial: %v", err)
	}
	defer conn.Close()
	tp := time.Now()
	prep, err := node.Prepare(ctx, conn, app, []manifest.Port{{Number: 8080, Proto: "tcp", Zone: "public"}})
	if err != nil {
		t.Fatalf("node setup: %v", err)
	}
	t.Logf("node setup: %v; podman %s → %s units", time.Since(tp).Round(time.Second), prep.PodmanVersion, prep.Flavour)
	if prep.Flavour != node.KubeTemplate {
		t.Errorf("Debian 12's podman %s should use the podman-kube@ template", prep.PodmanVersion)
	}
	if out, err := conn.Run(ctx, node.AsApp(app, prep.AppUID, "podman network ls --format '{{.Name}}'; systemctl --user is-active podman.socket"), nil, time.Minute); err != nil ||
		!strings.Contains(out, node.Network) || !strings.Contains(out, "active") {
		t.Errorf("after setup: %q %v", out, err)
	}
	if _, err := node.Prepare(ctx, conn, app, []manifest.Port{{Number: 8080, Proto: "tcp"}}); err != nil {
		t.Errorf("node setup again (idempotent): %v", err)
	}
	guestImage := strings.Replace(image, reg.Addr, RegistryGuestAddr, 1)
	script := fmt.Sprintf(`set -e
podman login --tls-verify=false -u %[1]s -p %[2]s %[3]s
podman pull --tls-verify=false %[4]s
podman logout %[3]s
podman run -d --name testapp --network %[5]s -p 8080:8080 -e GREETING=hello-from-vm %[4]s
for i in $(seq 120); do curl -fsS http://127.0.0.1:8080/ && exit 0; sleep 1; done
exit 1`, reg.User, reg.Password, RegistryGuestAddr, guestImage, node.Network)
	tp = time.Now()
	out, err := conn.Run(ctx, node.AsApp(app, prep.AppUID, script), nil, 15*time.Minute)
	if err != nil {
		t.Fatalf("podman login, pull and run: %v", err)
	}
	t.Logf("podman login, pull and run: %v\n%s", time.Since(tp).Round(time.Second), out)
	hostAddr, err := machines.ExposePort(ctx, servers[0].ID, 8080)
	if err != nil {
		t.Fatal(err)
	}
	if body := httpGet(t, "http://"+hostAddr+"/"); !strings.HasPrefix(body, "hello-from-vm from ") {
		t.Errorf("the host got %q from %s", body, hostAddr)
	}

	// A simulator restart: a new backend on the same folder takes the running VM over, without a
	// reboot, and controls it (a port forwarded through its monitor).
	before := machines.PIDs()[servers[0].ID]
	again, err := New(Config{Dir: machines.cfg.Dir, Registry: reg.Addr, Accel: machines.cfg.Accel})
	if err != nil {
		t.Fatal(err)
	}
	if err := again.Reattach(ctx, hcloudsim.MachineSpec{ID: servers[0].ID, Name: servers[0].Name, PublicIPv4: servers[0].PublicNet.IPv4.IP.String()}); err != nil {
		t.Fatalf("reattach: %v", err)
	}
	if pid := again.PIDs()[servers[0].ID]; pid != before || pid == 0 {
		t.Errorf("reattached VM has pid %d, was %d", pid, before)
	}
	if addr, err := again.ExposePort(ctx, servers[0].ID, 9000); err != nil || !strings.HasSuffix(addr, ":9000") {
		t.Errorf("expose a port through the reattached VM's monitor: %q %v", addr, err)
	}
	if out := runSSH(t, clients[0], "uptime -s", time.Minute); out == "" {
		t.Error("the VM does not answer after the reattach")
	}

	for _, c := range clients {
		c.Close()
	}
	pids := machines.PIDs()
	if len(pids) != 2 {
		t.Fatalf("%d qemu processes before delete", len(pids))
	}
	for _, s := range servers {
		if _, _, err := h.Client.Server.DeleteWithResult(ctx, s); err != nil {
			t.Fatal(err)
		}
	}
	for id, pid := range pids {
		if processIs(pid, "qemu") {
			t.Errorf("qemu %d of server %d still runs after delete", pid, id)
		}
	}
}

// dialSSH retries until the server's sshd answers with the key from its user data. The host key is
// pinned on first contact.
func dialSSH(t *testing.T, addr, user string, signer ssh.Signer, timeout time.Duration, m *Machines, id int64) *ssh.Client {
	var pinned ssh.PublicKey
	cfg := &ssh.ClientConfig{User: user, Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)}, Timeout: 10 * time.Second,
		HostKeyCallback: func(_ string, _ net.Addr, key ssh.PublicKey) error {
			if pinned == nil {
				pinned = key
			}
			if !bytes.Equal(pinned.Marshal(), key.Marshal()) {
				return fmt.Errorf("host key changed")
			}
			return nil
		}}
	deadline := time.Now().Add(timeout)
	for {
		c, err := ssh.Dial("tcp", addr, cfg)
		if err == nil {
			return c
		}
		if time.Now().After(deadline) {
			console := m.Console(id)
			t.Errorf("no SSH on %s after %v: %v\nconsole (end):\n%s", addr, timeout, err, console[max(0, len(console)-3000):])
			return nil
		}
		time.Sleep(3 * time.Second)
	}
}

func runSSH(t *testing.T, c *ssh.Client, cmd string, timeout time.Duration) string {
	t.Helper()
	if c == nil {
		t.FailNow()
	}
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	type result struct {
		out []byte
		err error
	}
	done := make(chan result, 1)
	// CombinedOutput, not one bytes.Buffer as both Stdout and Stderr: the session copies the two
	// streams from two goroutines, and an unsynchronised buffer loses output.
	go func() { out, err := s.CombinedOutput(cmd); done <- result{out, err} }()
	select {
	case r := <-done:
		if r.err != nil {
			t.Errorf("%q: %v\n%s", firstLine(cmd), r.err, r.out)
		}
		return string(r.out)
	case <-time.After(timeout):
		t.Fatalf("%q timed out after %v", firstLine(cmd), timeout)
	}
	return ""
}

func firstLine(s string) string { l, _, _ := strings.Cut(s, "\n"); return l }

func httpGet(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	var last error
	for range 30 {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			return string(body)
		}
		last = err
		time.Sleep(time.Second)
	}
	t.Fatalf("GET %s: %v", url, last)
	return ""
}
