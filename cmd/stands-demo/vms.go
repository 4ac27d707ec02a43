package main

// DEMO_NODES=full: the servers are QEMU VMs (hcloudsim's VM backend), set up over SSH, their apps
// pulled from a registry of the demo's own and run under Podman, as in production.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/stands-engine/stands-reconciler/hcloudsim/vm"
	"github.com/stands-engine/stands-reconciler/internal/localserver"
)

// The example's registry: a name no machine resolves, which the VMs' overlay replaces.
const (
	exampleRegistry = "registry.example.test"
	registryUser    = "robot" // the example's registries.*.username
)

var (
	exampleRegistryURL = regexp.MustCompile(`(?m)^([ \t]+)url:[ \t]*` + regexp.QuoteMeta(exampleRegistry) + `[ \t]*$`)
	exampleImage       = regexp.MustCompile(regexp.QuoteMeta(exampleRegistry) + `/([a-z0-9][a-z0-9._/-]*):([A-Za-z0-9_][A-Za-z0-9._-]*)`)
)

// forVMs points the example's registry at the demo's, as the guests reach it (vm.RegistryGuestAddr,
// plain HTTP), in place; it returns the images the stands name (repository:tag), which the demo's
// registry must then serve. A mention of the example's registry the overlay does not understand is
// an error: a stand left pulling from a name that resolves nowhere would only fail minutes later, in
// a VM.
func forVMs(files map[string][]byte) ([]string, error) {
	var images []string
	for _, name := range sortedKeys(files) {
		s := string(files[name])
		if !strings.Contains(s, exampleRegistry) {
			continue
		}
		s = exampleRegistryURL.ReplaceAllString(s, "${1}url: "+vm.RegistryGuestAddr+"\n${1}insecure: true")
		for _, m := range exampleImage.FindAllStringSubmatch(s, -1) {
			images = append(images, m[1]+":"+m[2])
		}
		s = exampleImage.ReplaceAllString(s, vm.RegistryGuestAddr+"/$1:$2")
		if i := strings.Index(s, exampleRegistry); i >= 0 {
			line := strings.Count(s[:i], "\n") + 1
			return nil, fmt.Errorf("%s:%d: %s where neither a registry's url nor an image is expected", name, line, exampleRegistry)
		}
		files[name] = []byte(s)
	}
	if len(images) == 0 {
		return nil, fmt.Errorf("no image of %s in the example: nothing for the VMs to pull", exampleRegistry)
	}
	sort.Strings(images)
	return slices.Compact(images), nil
}

// vmHost says what DEMO_NODES=full lacks on this machine, and how to get it.
func vmHost(p *paths) error {
	img := filepath.Join(vm.DefaultDir(), "img")
	for _, f := range []string{"base.qcow2", "vmlinuz", "initrd.img"} {
		if _, err := os.Stat(filepath.Join(img, f)); err != nil {
			return fmt.Errorf("DEMO_NODES=full: no VM image in %s: build it with `make vm-image` (DEMO_NODES=full make demo does; ~10 min once)", img)
		}
	}
	for _, tool := range []string{"qemu-system-x86_64", "qemu-img", "cloud-localds", "vde_switch", "nc", "docker-registry"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("DEMO_NODES=full: %s is missing: run `make deps` (scripts/install-deps.sh)", tool)
		}
	}
	if _, err := os.Stat(filepath.Join(p.bin, "stands-testapp")); err != nil {
		return fmt.Errorf("DEMO_NODES=full: %s/stands-testapp (the apps' image) is missing: DEMO_NODES=full make demo builds it", p.bin)
	}
	return nil
}

// startRegistry serves the apps' images to the VMs: stands-testapp under each name the example
// gives (a key-value store and a web shop answer on their ports alike), behind the login the
// example's registry-password secret holds.
func (d *demo) startRegistry(ctx context.Context) error {
	dir := d.p.join("registry")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	secrets, err := exampleSecrets(d.p)
	if err != nil {
		return err
	}
	password, ok := secrets["registry-password"]
	if !ok {
		return errors.New("the example's secrets (examples/demo.env) have no registry-password")
	}
	if d.reg, err = localserver.NewRegistry(ctx, "docker-registry", dir, registryUser, password); err != nil {
		return err
	}
	if err := record(d.p, "registry", d.reg.Pid()); err != nil {
		return err
	}
	for _, image := range d.images {
		repo, tag, _ := strings.Cut(image, ":")
		if _, err := d.reg.PushBinary(ctx, filepath.Join(d.p.bin, "stands-testapp"), repo, tag); err != nil {
			return err
		}
	}
	return nil
}

// vmDir holds hcloudsim's VMs: a folder per server (disk, console log, qemu.pid) and the private
// networks' switches (net-*.pid).
func (p *paths) vmDir() string { return p.join("hcloudsim", "vms") }

// endVMs ends the VMs and switches under the demo's folder. QEMU daemonizes, so no process group
// or parent reaches it: the pid files do, each checked against the process's command line, which
// names its disk or socket in the folder (a reused pid is another program's).
func endVMs(p *paths, out io.Writer) {
	files, _ := filepath.Glob(filepath.Join(p.vmDir(), "*", "qemu.pid"))
	nets, _ := filepath.Glob(filepath.Join(p.vmDir(), "net-*.pid"))
	for _, f := range append(files, nets...) {
		data, err := os.ReadFile(f)
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || !cmdlineNames(pid, p.root) {
			continue
		}
		fmt.Fprintf(out, "ending %s (pid %d)\n", filepath.Base(f), pid)
		_ = syscall.Kill(pid, syscall.SIGTERM)
		for i := 0; cmdlineNames(pid, p.root); i++ {
			if i == 100 {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

// cmdlineNames reports whether pid runs with an argument under dir (a zombie has none).
func cmdlineNames(pid int, dir string) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return err == nil && argsName(strings.Split(string(data), "\x00"), dir)
}

// argsName reports whether an argument is a path under dir, alone or as a QEMU option's value
// (file=DIR/disk.qcow2, …,path=DIR/qmp.sock).
func argsName(args []string, dir string) bool {
	for _, arg := range args {
		if strings.HasPrefix(arg, dir+"/") || strings.Contains(arg, "="+dir+"/") || strings.Contains(arg, ","+dir+"/") {
			return true
		}
	}
	return false
}
