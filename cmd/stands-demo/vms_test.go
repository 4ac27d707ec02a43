package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/stands-engine/stands-reconciler/hcloudsim/vm"
	"github.com/stands-engine/stands-reconciler/manifest"
	"github.com/stands-engine/stands-reconciler/test/testfs"
)

// The example as DEMO_NODES=full pushes it: every stand the reconciler applies pulls from the demo's
// registry, as the guests reach it, over plain HTTP, with the login the demo's registry takes.
func TestForVMs(t *testing.T) {
	base, err := testfs.Dir("../../examples/stands-repo")
	if err != nil {
		t.Fatal(err)
	}
	files := map[string][]byte{}
	for name, f := range base {
		files[name] = f.Data
	}
	images, err := forVMs(files)
	if err != nil {
		t.Fatal(err)
	}
	if want := []string{"stands/kv:7.2", "stands/web:1.4"}; !slices.Equal(images, want) {
		t.Errorf("images = %v, want %v", images, want)
	}
	for name, data := range files {
		if bytes.Contains(data, []byte(exampleRegistry)) {
			t.Errorf("%s still names %s", name, exampleRegistry)
		}
	}
	for name, f := range base {
		f.Data = files[name]
	}
	stands, err := manifest.Discover(base)
	if err != nil {
		t.Fatal(err)
	}
	for _, file := range append(stands, newStandPath) {
		if file == newStandPath {
			base[file] = &fstest.MapFile{Data: []byte(newStand)} // the pull request's, from the overlaid base
		}
		s, err := manifest.Load(base, file, manifest.LoadOptions{DefaultOwner: owner})
		if err != nil {
			t.Fatalf("%s after the overlay: %v", file, err)
		}
		for _, r := range s.Registries {
			if r.URL.Text != vm.RegistryGuestAddr || !r.Insecure || r.Username.Text != registryUser {
				t.Errorf("%s: registry %s = %+v, want %s, insecure, user %s", file, r.Name, r, vm.RegistryGuestAddr, registryUser)
			}
		}
		if len(s.Registries) == 0 {
			t.Errorf("%s: no registry to pull its apps from", file)
		}
	}
}

// A mention of the example's registry the overlay does not rewrite fails the demo's start with its
// file and line, rather than a VM's pull minutes later.
func TestForVMsUnknownMention(t *testing.T) {
	files := map[string][]byte{
		"bases/common.yml":   []byte("registries:\n  local:\n    url: " + exampleRegistry + "\napps:\n  kv:\n    preferences:\n      image: " + exampleRegistry + "/stands/kv:7.2\n"),
		"stands/x/stand.yml": []byte("stand:\n  project: x\n  # mirror: https://" + exampleRegistry + "\n"),
	}
	_, err := forVMs(files)
	if err == nil || !strings.Contains(err.Error(), "stands/x/stand.yml:3:") {
		t.Fatalf("err = %v, want one naming stands/x/stand.yml:3", err)
	}
}

func TestArgsName(t *testing.T) {
	dir := "/src/_demo"
	for _, c := range []struct {
		args []string
		want bool
	}{
		{[]string{"qemu-system-x86_64", "-drive", "file=/src/_demo/hcloudsim/vms/1/disk.qcow2,if=virtio"}, true},
		{[]string{"qemu-system-x86_64", "-qmp", "unix:/x,server=on,path=/src/_demo/hcloudsim/vms/1/qmp.sock"}, true},
		{[]string{"vde_switch", "-s", "/src/_demo/hcloudsim/vms/net-1.sock", "-d"}, true},
		{[]string{"vde_switch", "-s", "/src/_demo2/hcloudsim/vms/net-1.sock"}, false}, // another folder
		{[]string{"qemu-system-x86_64", "-drive", "file=/var/tmp/stands-vm/img/base.qcow2"}, false},
		{nil, false}, // a zombie
	} {
		if got := argsName(c.args, dir); got != c.want {
			t.Errorf("argsName(%q) = %v, want %v", c.args, got, c.want)
		}
	}
}

// VMs are not children of anything the demo recorded (QEMU daemonizes): their pid files end them,
// and only the processes that still name the demo's folder.
func TestVMsAreEnded(t *testing.T) {
	p := &paths{root: filepath.Join(t.TempDir(), "_demo")}
	vmDir := filepath.Join(p.vmDir(), "7")
	if err := os.MkdirAll(vmDir, 0o700); err != nil {
		t.Fatal(err)
	}
	ours := named(t, filepath.Join(vmDir, "disk.qcow2"))
	reused := named(t, "/usr/bin/sleep") // the pid a dead switch's file names, now another program's
	for f, cmd := range map[string]*exec.Cmd{filepath.Join(vmDir, "qemu.pid"): ours, filepath.Join(p.vmDir(), "net-1.pid"): reused} {
		if err := os.WriteFile(f, []byte(strconv.Itoa(cmd.Process.Pid)+"\n"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	var out bytes.Buffer
	if err := endLeftovers(p, &out); err != nil {
		t.Fatal(err)
	}
	if !exited(ours) {
		t.Error("the VM still runs")
	}
	if exited(reused) {
		t.Error("a process that does not name the demo's folder was killed")
	}
	if !strings.Contains(out.String(), "ending qemu.pid") {
		t.Errorf("output %q does not say what it ended", out.String())
	}
}

// named starts a sleep whose argv[0] is arg: what /proc/PID/cmdline shows, as QEMU's shows its disk.
func named(t *testing.T, arg string) *exec.Cmd { return spawn(t, "", arg) }
