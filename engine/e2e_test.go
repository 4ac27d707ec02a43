//go:build e2e

package engine

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/fstest"
	"time"

	"github.com/hetznercloud/hcloud-go/v2/hcloud"
	"github.com/pulumi/pulumi/sdk/v3/go/pulumi"
	"golang.org/x/crypto/ssh"

	"github.com/stands-engine/stands-reconciler/engine/node"
	"github.com/stands-engine/stands-reconciler/engine/provider"
	"github.com/stands-engine/stands-reconciler/hcloudsim"
	"github.com/stands-engine/stands-reconciler/hcloudsim/vm"
	"github.com/stands-engine/stands-reconciler/stands"
	"github.com/stands-engine/stands-reconciler/test/testenv"
	"github.com/stands-engine/stands-reconciler/test/testfs"
	"github.com/stands-engine/stands-reconciler/test/wait"
)

// TestNodesE2E is issue 10's story on two real VMs behind hcloudsim, with the real Pulumi CLI and a
// login-protected registry: the example two-node stand — its images pointed at the test registry —
// applied from nothing in full mode; the VM backend's own promises (cloud-init clean, a simulator
// restart taking the VMs over); one instance's preference changed; a failing post-start hook; a
// resize; the reconciler under systemd; a destroy with one node unreachable, leaving no QEMU. The
// scenarios share the two VMs.
func TestNodesE2E(t *testing.T) {
	reg := testenv.StartRegistry(t)
	image := reg.PushBinary(t, testenv.BuildStatic(t, "./cmd/stands-testapp"), "stands/testapp", "e2e")
	guestImage := strings.Replace(image, reg.Addr, vm.RegistryGuestAddr, 1)
	share := systemdShare(t) // for 3c
	vmDir := t.TempDir()
	machines, err := vm.New(vm.Config{Dir: vmDir, Registry: reg.Addr, Log: testenv.Logger(t), Share: share})
	if err != nil {
		testenv.Missing(t, "%v", err)
	}
	t.Cleanup(func() { _ = machines.Close() })
	configsets := filepath.Join(t.TempDir(), "configsets")
	f := newFixtureWith(t, func(c *Config) { c.ConfigsetDir = configsets }, hcloudsim.WithMachine(machines))
	// Ends 3 minutes before make e2e's -timeout: a slow machine fails on the step it was on, and the
	// VMs are still stopped by the cleanup above.
	ctx := testenv.Context(t, 3*time.Minute)

	secrets := map[string]string{"SECRET_REGISTRY_PASSWORD": reg.Password, "SECRET_KV_PASSWORD": "kv-SENTINEL-e2e"}
	repo := e2eRepo(t, guestImage)
	stand := loadWith(t, repo, "stands/two-node/stand.yml", secrets)
	id := stand.Stand.ID

	// 1. From nothing: servers, node setup, images, both instances, hooks.
	t0 := time.Now()
	res, err := f.eng.Apply(ctx, stand, false)
	if err != nil {
		t.Fatalf("apply from nothing: %v\nlog:\n%s", err, tailLog(f.logs.String()))
	}
	t.Logf("apply from nothing: %v, changes %v", time.Since(t0).Round(time.Second), res.Changes)
	if res.NodesMode != NodesFull || res.Changes["create"] != 2+2+2+2 {
		t.Errorf("apply: mode %q, changes %v; want full and 8 creates (2 servers, 2 nodes, 2 images, 2 instances)", res.NodesMode, res.Changes)
	}
	servers := f.Servers(t)
	db, web := servers["demo-demo-two-node-db"], servers["demo-demo-two-node-web"]
	if db == nil || web == nil {
		t.Fatalf("servers: %v", servers)
	}
	dbPriv, webPub := db.PrivateNet[0].IP.String(), web.PublicNet.IPv4.IP.String()
	keys := f.standKey(t, ctx, stand)
	dbSSH, dbKey := sshTo(t, db, keys)
	webSSH, webKey := sshTo(t, web, keys)
	defer dbSSH.Close()
	defer webSSH.Close()

	// Both nodes set up; their host keys are the ones the engine made and gave them through
	// cloud-init (pinned before the first connection: no trust on first use), and the servers offer
	// exactly those.
	pinned := f.outputsOf(t, ctx, stand, provider.NodeType, "hostKey")
	generated := f.outputsOf(t, ctx, stand, provider.NodeType, "generatedHostKey")
	for name, key := range map[string]ssh.PublicKey{"db": dbKey, "web": webKey} {
		offered := strings.TrimSpace(string(ssh.MarshalAuthorizedKey(key)))
		if got, _ := pinned[name].(string); got != offered || generated[name] != offered {
			t.Errorf("host key of %s: pinned %q, generated %v, the server offers %s", name, got, generated[name], ssh.FingerprintSHA256(key))
		}
	}
	for name, uid := range f.outputsOf(t, ctx, stand, provider.NodeType, "appUid") {
		if uid != float64(appUID) {
			t.Errorf("node %s: app uid %v, want %d", name, uid, appUID)
		}
	}
	kvUnit := "podman-kube@" + node.Escape("/home/app/.config/stands/kv--cache/pod.yaml") + ".service"
	webUnit := "podman-kube@" + node.Escape("/home/app/.config/stands/web--front/pod.yaml") + ".service"
	for _, c := range []struct {
		conn *ssh.Client
		unit string
	}{{dbSSH, kvUnit}, {webSSH, webUnit}} {
		if out := run(t, c.conn, appCmd("systemctl --user is-active "+node.Quote(c.unit)+"; podman network exists app-net && echo net-ok")); !strings.Contains(out, "active") || !strings.Contains(out, "net-ok") {
			t.Errorf("%s: %q", c.unit, out)
		}
	}

	// The app on web calls the app on db over the private network and returns db's reply; the role
	// ports answer from the host (web's public port directly, db's internal-zone port through SSH).
	webAddr, err := machines.ExposePort(ctx, web.ID, 8080)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := get(t, "http://"+webAddr+"/backend"), "backend "+dbPriv+":6379 said: +PONG\n"; got != want {
		t.Errorf("web → db: %q, want %q", got, want)
	}
	if got := get(t, "http://"+webAddr+"/"); !strings.HasPrefix(got, "Hello from the two-node stand from ") {
		t.Errorf("web from the host: %q", got)
	}
	if got := kvPing(t, dbSSH, dbPriv+":6379", secrets["SECRET_KV_PASSWORD"]); got != "+PONG" {
		t.Errorf("kv from the host through SSH: %q", got)
	}

	// The connection output, in full.
	want := fmt.Sprintf(`{"id_stand": %q,
	  "cache": {"endpoint": %q, "port": 6379, "credentials": {"user": "default", "password": "kv-SENTINEL-e2e"}, "url": "redis://default:kv-SENTINEL-e2e@%s:6379/0"},
	  "front": {"endpoint": %q, "port": 8080, "url": "http://%s:8080/"}}`, id, dbPriv, dbPriv, webPub, webPub)
	if !jsonEqual(t, []byte(res.Connection), []byte(want)) {
		t.Errorf("connection output:\n%s\nwant:\n%s", res.Connection, want)
	}
	// The configset: what was sent, 0700 folders, 0600 files.
	checkConfigset(t, filepath.Join(configsets, id), "kv--cache/files/home/app/stands/cache/redis.conf", "requirepass kv-SENTINEL-e2e")

	// 1a. Live health (health_e2e_test.go): a unit stopped by hand, an app's container stopped.
	t.Run("health", func(t *testing.T) { healthOnNodes(t, ctx, f, stand, webSSH, webUnit) })
	t.Run("health loop", func(t *testing.T) { healthLoopOnNodes(t, ctx, f, repo.(editableRepo), secrets, stand, webSSH, webUnit) })

	// 1b. The machines themselves (hcloudsim's VM backend): cloud-init done without an ordering
	// cycle; a simulator restart — a new backend on the same folder — takes a running VM over without
	// a reboot and controls it (a port forwarded through its monitor).
	for name, c := range map[string]*ssh.Client{"db": dbSSH, "web": webSSH} {
		if out := run(t, c, "cloud-init status"); !strings.Contains(out, "status: done") {
			t.Errorf("%s: cloud-init %q", name, out)
		}
		if out := run(t, c, "sudo journalctl -b --no-pager | grep -ci 'ordering cycle' || true"); out != "0" {
			t.Errorf("%s: ordering cycles in the journal: %s", name, out)
		}
	}
	bootedAt := run(t, dbSSH, "uptime -s")
	again, err := vm.New(vm.Config{Dir: vmDir, Registry: reg.Addr})
	if err != nil {
		t.Fatal(err)
	}
	// Not closed: Close would stop the VM it took over, which the first backend still serves.
	if err := again.Reattach(ctx, hcloudsim.MachineSpec{ID: db.ID, Name: db.Name, PublicIPv4: db.PublicNet.IPv4.IP.String()}); err != nil {
		t.Fatalf("reattach: %v", err)
	}
	if before, pid := machines.PIDs()[db.ID], again.PIDs()[db.ID]; pid != before || pid == 0 {
		t.Errorf("the reattached VM has pid %d, was %d", pid, before)
	}
	if addr, err := again.ExposePort(ctx, db.ID, 9000); err != nil || !strings.HasSuffix(addr, ":9000") {
		t.Errorf("a port forwarded through the reattached VM's monitor: %q %v", addr, err)
	}
	if got := run(t, dbSSH, "uptime -s"); got != bootedAt || got == "" {
		t.Errorf("db after the reattach: booted at %q, was %q", got, bootedAt)
	}

	// 2. One preference of one instance: the plan lists exactly that instance, and the apply restarts
	// its unit only.
	kvBefore, webBefore := activeSince(t, dbSSH, kvUnit), activeSince(t, webSSH, webUnit)
	repo.(editableRepo).set("stands/two-node/stand.yml", strings.Replace(repo.(editableRepo).get("stands/two-node/stand.yml"), "Hello from the two-node stand", "Hello again", 1))
	changed := loadWith(t, repo, "stands/two-node/stand.yml", secrets)
	plan, err := f.eng.Preview(ctx, changed)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("plan of a greeting change: %+v", plan.Steps)
	if len(plan.Steps) != 1 || plan.Steps[0].Kind != "instance" || plan.Steps[0].Instance != "web--front" || plan.Steps[0].Op != "update" ||
		!strings.Contains(plan.Steps[0].Changed, "configHash") {
		t.Errorf("plan of a greeting change: %+v", plan.Steps)
	}
	t0 = time.Now()
	if _, err := f.eng.Apply(ctx, changed, false); err != nil {
		t.Fatalf("apply the change: %v", err)
	}
	t.Logf("apply of the greeting change: %v", time.Since(t0).Round(time.Second))
	if after := activeSince(t, dbSSH, kvUnit); after != kvBefore {
		t.Errorf("kv's unit restarted: active since %s, was %s", after, kvBefore)
	}
	if after := activeSince(t, webSSH, webUnit); after == webBefore {
		t.Errorf("web's unit was not restarted (active since %s)", after)
	}
	if got := get(t, "http://"+webAddr+"/"); !strings.HasPrefix(got, "Hello again from ") {
		t.Errorf("web after the change: %q", got)
	}

	// 2b. An instance added on a server whose first start fails its hook: the apply fails, and the
	// state keeps the unfinished instance. Fixed, it converges (its port opened); then it is removed
	// while the server stays: its delete stops and removes it over SSH and closes the port. The other
	// instance on the server is never restarted.
	withFront := repo.(editableRepo).get("stands/two-node/stand.yml")
	extra := strings.Replace(withFront, "apps: [web/front]", "apps: [web/front, web/extra]", 1) +
		"      extra:\n        preferences:\n          image: " + guestImage + "\n          port: 8081\n" +
		"          backend_app: kv\n          backend_instance: cache\n          greeting: extra\n"
	repo.(editableRepo).set("stands/two-node/stand.yml", extra)
	hook := repo.(editableRepo).get("apps/web/hooks/healthz.sh.tmpl")
	// Rendered for front this is the hook as it was: only extra's fails.
	repo.(editableRepo).set("apps/web/hooks/healthz.sh.tmpl", "{{ if eq .instance \"extra\" }}#!/bin/sh\necho \"first start of {{ .instance }} fails on purpose\" >&2\nexit 4\n{{ end }}"+hook)
	added := loadWith(t, repo, "stands/two-node/stand.yml", secrets)
	extraUnit := "podman-kube@" + node.Escape("/home/app/.config/stands/web--extra/pod.yaml") + ".service"
	webBefore = activeSince(t, webSSH, webUnit)
	if plan, err := f.eng.Preview(ctx, added); err != nil || !sameSteps(plan.Steps, "create instance web--extra", "update node web") {
		t.Errorf("plan of an added instance: %+v %v", plan, err)
	}
	if _, err := f.eng.Apply(ctx, added, false); err == nil || !strings.Contains(err.Error(), "first start of extra fails on purpose") {
		t.Fatalf("apply an added instance whose hook fails: %v", err)
	}
	if ids := f.outputsOf(t, ctx, stand, provider.InstanceType, "configHash"); ids["web--extra"] == nil {
		t.Errorf("the state forgot the instance whose create failed: %v", ids)
	}
	repo.(editableRepo).set("apps/web/hooks/healthz.sh.tmpl", hook)
	added = loadWith(t, repo, "stands/two-node/stand.yml", secrets)
	if _, err := f.eng.Apply(ctx, added, false); err != nil {
		t.Fatalf("apply the added instance, fixed: %v", err)
	}
	if out := run(t, webSSH, appCmd("systemctl --user is-active "+node.Quote(extraUnit))+"; sudo firewall-cmd --zone=public --list-ports"); !strings.HasPrefix(out, "active\n") || !strings.Contains(out, "8081/tcp") {
		t.Errorf("the added instance: %q", out)
	}
	repo.(editableRepo).set("stands/two-node/stand.yml", withFront)
	if plan, err := f.eng.Preview(ctx, changed); err != nil || !sameSteps(plan.Steps, "delete instance web--extra", "update node web") {
		t.Errorf("plan of a removed instance: %+v %v", plan, err)
	}
	if _, err := f.eng.Apply(ctx, changed, false); err != nil {
		t.Fatalf("apply a removed instance: %v", err)
	}
	out := run(t, webSSH, appCmd("systemctl --user is-active "+node.Quote(extraUnit)+"; podman pod exists extra && echo pod-left; ls /home/app/stands/extra 2>&1")+
		"; sudo firewall-cmd --zone=public --list-ports")
	if strings.Contains(out, "pod-left") || strings.Contains(out, "8081/tcp") || !strings.Contains(out, "No such file") || strings.HasPrefix(out, "active") {
		t.Errorf("the removed instance is left on the node: %q", out)
	}
	if after := activeSince(t, webSSH, webUnit); after != webBefore {
		t.Errorf("adding and removing another instance restarted web--front")
	}
	// What runs is what the state says: the unit's configuration hash is the recorded one.
	hashes := f.outputsOf(t, ctx, stand, provider.InstanceType, "configHash")
	if env := run(t, webSSH, appCmd("systemctl --user show -p Environment --value "+node.Quote(webUnit))); hashes["web--front"] == nil ||
		!strings.Contains(env, fmt.Sprintf("STANDS_CONFIG_HASH=%v", hashes["web--front"])) {
		t.Errorf("web--front runs with %q, the state records %v", env, hashes["web--front"])
	}

	// 3. A post-start hook that fails: the apply fails with its stderr, the stack stays consistent
	// (no pending operation, the failed spec not recorded as applied); the fixed hook converges. A
	// hook change alone does not restart the unit.
	webBefore = activeSince(t, webSSH, webUnit)
	good := repo.(editableRepo).get("apps/web/hooks/healthz.sh.tmpl")
	// It also prints a secret, which the engine's log must not show.
	repo.(editableRepo).set("apps/web/hooks/healthz.sh.tmpl", "#!/bin/sh\necho \"hook-broken-on-purpose for {{ .instance }}, {{ (index .instances \"kv\" \"cache\").preferences.password }}\" >&2\nexit 3\n")
	broken := loadWith(t, repo, "stands/two-node/stand.yml", secrets)
	_, err = f.eng.Apply(ctx, broken, false)
	if err == nil || !strings.Contains(err.Error(), "hook-broken-on-purpose for front") {
		t.Fatalf("apply with a failing hook: %v", err)
	}
	t.Logf("apply with a failing hook fails: …%s", excerpt(broken.Secrets.Scrub(err.Error()), "post-start hook of web/front (", 300))
	if !strings.Contains(f.logs.String(), "hook-broken-on-purpose for front, ***") {
		t.Errorf("the engine's log does not show the hook's stderr, scrubbed")
	}
	st, err := f.eng.stack(ctx, stands.StackRef{Project: "demo", Env: "two-node"}, func(*pulumi.Context) error { return nil }, false)
	if err != nil {
		t.Fatal(err)
	}
	dep, err := f.eng.readDeployment(ctx, stands.StackRef{Project: "demo", Env: "two-node"})
	if err != nil {
		t.Fatal(err)
	}
	outs, _ := st.Outputs(ctx)
	if len(dep.Pending) != 0 || outs[OutSpecHash].Value == broken.SpecHash {
		t.Errorf("after the failed hook: %d pending operations, spec hash %v recorded as applied", len(dep.Pending), outs[OutSpecHash].Value)
	}
	repo.(editableRepo).set("apps/web/hooks/healthz.sh.tmpl", good+"# fixed\n")
	fixed := loadWith(t, repo, "stands/two-node/stand.yml", secrets)
	if _, err = f.eng.Apply(ctx, fixed, false); err != nil {
		t.Fatalf("apply with the hook fixed: %v", err)
	}
	if again, err := f.eng.Apply(ctx, fixed, true); err != nil || again.Changed {
		t.Errorf("after converging, a forced apply has work: %+v %v", again, err)
	}
	if after := activeSince(t, webSSH, webUnit); after != webBefore {
		t.Errorf("a hook change restarted web's unit")
	}

	// The state keeps every secret encrypted: the key, the files, the registry password.
	scanned := 0
	_ = filepath.WalkDir(f.backend, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return err
		}
		scanned++
		for _, secret := range []string{reg.Password, "kv-SENTINEL-e2e", "BEGIN OPENSSH PRIVATE KEY"} {
			if strings.Contains(string(data), secret) {
				t.Errorf("%s holds a secret in clear", p)
			}
		}
		return nil
	})
	if scanned == 0 {
		t.Errorf("no state files under %s", f.backend)
	}

	// 3b. A bigger web server: resized in place (shut down, type changed, powered on), so the server,
	// its disk and its addresses stay: a file written on it before is there after.
	run(t, webSSH, "echo kept-across-the-resize | sudo tee /var/tmp/resize-marker >/dev/null && sync")
	webSSH.Close()
	withBig := strings.Replace(repo.(editableRepo).get("stands/two-node/stand.yml"), "  web:\n    profile: small", "  web:\n    profile: big", 1) +
		"node_profiles:\n  big:\n    location: hel1\n    type_serv: cx32\n    image: debian-12\n    network: stands-net\n    cloud-init: ../../bases/cloud-init.yaml.tmpl\n"
	repo.(editableRepo).set("stands/two-node/stand.yml", withBig)
	bigger := loadWith(t, repo, "stands/two-node/stand.yml", secrets)
	if plan, err := f.eng.Preview(ctx, bigger); err != nil || !sameSteps(plan.Steps, "update  web") {
		t.Errorf("plan of a bigger web server: %+v %v", plan, err)
	}
	t0 = time.Now()
	if res, err := f.eng.Apply(ctx, bigger, false); err != nil || res.Changes["update"] != 1 {
		t.Fatalf("resize web: %+v %v\n%s", res, err, tailLog(f.logs.String()))
	}
	after := f.Servers(t)["demo-demo-two-node-web"]
	if after == nil || after.ID != web.ID || after.ServerType.Name != "cx32" || after.PublicNet.IPv4.IP.String() != webPub {
		t.Fatalf("web after the resize: %+v (was id %d)", after, web.ID)
	}
	webSSH = sshWait(t, after, keys, 5*time.Minute)
	t.Logf("resize of web, until SSH answers again: %v", time.Since(t0).Round(time.Second))
	if got := run(t, webSSH, "cat /var/tmp/resize-marker"); got != "kept-across-the-resize" {
		t.Errorf("the file written before the resize: %q", got)
	}

	// 3c. The reconciler itself installed from deploy/ and run by systemd on db (systemd_e2e_test.go).
	t.Run("systemd", func(t *testing.T) { systemdOnNode(t, dbSSH) })

	// 4. Destroy with web unreachable: powered off, and its SSH address held by a listener that
	// counts connections. Nothing connects to either server; both VMs are gone.
	qemus := machines.PIDs() // both running: web's QEMU ends with its power
	if _, _, err := f.Client.Server.Poweroff(ctx, web); err != nil {
		t.Fatal(err)
	}
	t.Run("health unreachable", func(t *testing.T) { unreachableHealth(t, ctx, f, bigger) })
	var mu sync.Mutex
	var held []net.Conn // held open: an SSH client waits for a banner that never comes
	defer func() {
		mu.Lock()
		defer mu.Unlock()
		for _, c := range held {
			c.Close()
		}
	}()
	ln := listenWhenFree(t, webPub+":22")
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			held = append(held, c)
			mu.Unlock()
		}
	}()
	dbSSH.Close()
	logStart := len(f.logs.String())
	t0 = time.Now()
	if _, err := f.eng.Destroy(ctx, stands.StackRef{Project: "demo", Env: "two-node"}); err != nil {
		t.Fatalf("destroy: %v", err)
	}
	t.Logf("destroy: %v", time.Since(t0).Round(time.Second))
	ln.Close()
	mu.Lock()
	n := len(held)
	mu.Unlock()
	if n != 0 {
		t.Errorf("destroy connected %d times to the unreachable node", n)
	}
	if log := f.logs.String()[logStart:]; strings.Contains(log, "connecting to") {
		t.Errorf("destroy connected to a node:\n%s", log)
	}
	if s := f.Servers(t); len(s) != 0 {
		t.Errorf("servers left: %v", s)
	}
	if pids := machines.PIDs(); len(pids) != 0 {
		t.Errorf("VMs left: %v", pids)
	}
	for id, pid := range qemus { // the processes, not only the backend's records
		if cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); err == nil && strings.Contains(string(cmdline), "qemu") {
			t.Errorf("qemu %d of server %d still runs after the destroy", pid, id)
		}
	}
	if len(qemus) != 2 {
		t.Errorf("%d qemu processes before the destroy, want 2", len(qemus))
	}
	for _, secret := range []string{reg.Password, "kv-SENTINEL-e2e", hcloudToken} {
		if strings.Contains(f.logs.String(), secret) {
			t.Errorf("a secret is in the engine's log")
		}
	}
}

// editableRepo is the overlay repository the test edits between applies.
type editableRepo interface {
	fs.FS
	get(name string) string
	set(name, content string)
}

type mapRepo struct{ fs.FS }

func (m mapRepo) get(name string) string {
	b, err := fs.ReadFile(m.FS, name)
	if err != nil {
		panic(err)
	}
	return string(b)
}

func (m mapRepo) set(name, content string) {
	m.FS.(fstest.MapFS)[name].Data = []byte(content)
}

// e2eRepo is the example repository with its registry and images pointed at the test registry (as
// the VMs reach it) and the registry marked insecure (plain HTTP).
func e2eRepo(t *testing.T, image string) fs.FS {
	t.Helper()
	base, err := testfs.Dir("../examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	regAddr, _, _ := strings.Cut(image, "/")
	common := string(base["bases/common.yml"].Data)
	common = strings.Replace(common, "    url: registry.example.test\n", "    url: "+regAddr+"\n    insecure: true\n", 1)
	common = strings.Replace(common, "registry.example.test/stands/kv:7.2", image, 1)
	stand := strings.Replace(string(base["stands/two-node/stand.yml"].Data), "registry.example.test/stands/web:1.4", image, 1)
	if !strings.Contains(common, "insecure: true") || !strings.Contains(common, image) || !strings.Contains(stand, image) {
		t.Fatal("the overlay did not apply: the example changed")
	}
	base["bases/common.yml"].Data, base["stands/two-node/stand.yml"].Data = []byte(common), []byte(stand)
	return mapRepo{base}
}

// standKey is the stand's SSH key from its stack.
func (f *fixture) standKey(t *testing.T, ctx context.Context, s stands.Input) ssh.Signer {
	t.Helper()
	st, err := f.eng.stack(ctx, stands.StackRef{Project: s.Stand.Project, Env: s.Stand.Env}, func(*pulumi.Context) error { return nil }, false)
	if err != nil {
		t.Fatal(err)
	}
	outs, err := st.Outputs(ctx)
	if err != nil {
		t.Fatal(err)
	}
	signer, err := ssh.ParsePrivateKey([]byte(outs[OutSSHPrivateKey].Value.(string)))
	if err != nil {
		t.Fatal(err)
	}
	return signer
}

// outputsOf returns one output of every resource of a type in the stand's state, by resource name.
func (f *fixture) outputsOf(t *testing.T, ctx context.Context, s stands.Input, typ, key string) map[string]any {
	t.Helper()
	dep, err := f.eng.readDeployment(ctx, stands.StackRef{Project: s.Stand.Project, Env: s.Stand.Env})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]any{}
	for _, r := range dep.Resources {
		if r.Type == typ {
			out[lastURNPart(r.URN)] = r.Outputs[key]
		}
	}
	return out
}

func sshTo(t *testing.T, s *hcloud.Server, signer ssh.Signer) (*ssh.Client, ssh.PublicKey) {
	t.Helper()
	var key ssh.PublicKey
	c, err := ssh.Dial("tcp", s.PublicNet.IPv4.IP.String()+":22", &ssh.ClientConfig{User: "admin", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
		Timeout: 30 * time.Second, HostKeyCallback: func(_ string, _ net.Addr, k ssh.PublicKey) error { key = k; return nil }})
	if err != nil {
		t.Fatalf("ssh %s: %v", s.Name, err)
	}
	return c, key
}

// sshWait is sshTo once the server answers again (after a power cycle), within d.
func sshWait(t *testing.T, s *hcloud.Server, signer ssh.Signer, d time.Duration) *ssh.Client {
	t.Helper()
	var c *ssh.Client
	wait.NoError(t, "ssh "+s.Name, d, func() (err error) {
		c, err = ssh.Dial("tcp", s.PublicNet.IPv4.IP.String()+":22", &ssh.ClientConfig{User: "admin", Auth: []ssh.AuthMethod{ssh.PublicKeys(signer)},
			Timeout: 30 * time.Second, HostKeyCallback: ssh.InsecureIgnoreHostKey()})
		return err
	}, wait.Every(5*time.Second))
	return c
}

func appCmd(script string) string { return node.AsApp("app", appUID, script) }

// appUID is the app user's uid on both VMs: cloud-init creates the admin user first, then the app
// user (checked by the test through the nodes' state).
const appUID = 1001

func run(t *testing.T, c *ssh.Client, cmd string) string {
	t.Helper()
	s, err := c.NewSession()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	out, err := s.CombinedOutput(cmd)
	if err != nil {
		t.Logf("%s: %v\n%s", cmd, err, out)
	}
	return strings.TrimSpace(string(out))
}

// activeSince is the unit's ActiveEnterTimestampMonotonic: it changes with every (re)start.
func activeSince(t *testing.T, c *ssh.Client, unit string) string {
	t.Helper()
	out := run(t, c, appCmd("systemctl --user show -p ActiveEnterTimestampMonotonic --value "+node.Quote(unit)))
	if out == "" || out == "0" {
		t.Fatalf("%s is not active: %q", unit, out)
	}
	return out
}

func get(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 20 * time.Second}
	var body []byte
	err := wait.Until(context.Background(), time.Minute, func() error {
		resp, err := client.Get(url)
		if err != nil {
			return err
		}
		body, _ = io.ReadAll(resp.Body)
		resp.Body.Close()
		return nil
	}, wait.Every(2*time.Second))
	if err != nil {
		t.Errorf("GET %s: %v", url, err)
	}
	return string(body)
}

// kvPing speaks to the kv instance through an SSH tunnel: AUTH, then PING.
func kvPing(t *testing.T, c *ssh.Client, addr, password string) string {
	t.Helper()
	conn, err := c.Dial("tcp", addr)
	if err != nil {
		t.Errorf("tunnel to %s: %v", addr, err)
		return ""
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(20 * time.Second))
	fmt.Fprintf(conn, "AUTH %s\r\nPING\r\n", password)
	r := bufio.NewReader(conn)
	auth, _ := r.ReadString('\n')
	pong, _ := r.ReadString('\n')
	if strings.TrimSpace(auth) != "+OK" {
		t.Errorf("AUTH: %q", auth)
	}
	return strings.TrimSpace(pong)
}

func jsonEqual(t *testing.T, a, b []byte) bool {
	t.Helper()
	var x, y any
	if err := json.Unmarshal(a, &x); err != nil {
		t.Fatalf("%s: %v", a, err)
	}
	if err := json.Unmarshal(b, &y); err != nil {
		t.Fatalf("%s: %v", b, err)
	}
	return reflect.DeepEqual(x, y)
}

func checkConfigset(t *testing.T, dir, file, holds string) {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, file))
	if err != nil || !strings.Contains(string(data), holds) {
		t.Errorf("configset %s: %v", file, err)
	}
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		info, err := d.Info()
		if err != nil {
			return err
		}
		want := fs.FileMode(0o600)
		if d.IsDir() {
			want = 0o700
		}
		if info.Mode().Perm() != want {
			t.Errorf("configset %s: mode %v, want %v", p, info.Mode().Perm(), want)
		}
		return nil
	})
	if err != nil {
		t.Error(err)
	}
}

// listenWhenFree listens on addr once the powered-off VM's forwarder has let go of it.
func listenWhenFree(t *testing.T, addr string) net.Listener {
	t.Helper()
	var ln net.Listener
	wait.NoError(t, "listen "+addr, 10*time.Second, func() (err error) {
		ln, err = net.Listen("tcp", addr)
		return err
	})
	return ln
}

// sameSteps reports whether a plan has exactly the given steps ("<op> <kind> <instance or node>"),
// in any order.
func sameSteps(steps []stands.Step, want ...string) bool {
	var got []string
	for _, s := range steps {
		name := s.Node
		if s.Kind == "instance" {
			name = s.Instance
		}
		got = append(got, s.Op+" "+s.Kind+" "+name)
	}
	slices.Sort(got)
	slices.Sort(want)
	return slices.Equal(got, want)
}

// excerpt is s from the first from on (or from its start), at most n bytes.
func excerpt(s, from string, n int) string {
	if i := strings.Index(s, from); i >= 0 {
		s = s[i:]
	}
	return s[:min(n, len(s))]
}

func tailLog(s string) string {
	if len(s) > 6000 {
		return "…" + s[len(s)-6000:]
	}
	return s
}
